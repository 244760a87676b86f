// ATTN_PARTIAL and ATTN_REDUCE (porter/megakernel/isa.py): split-K decode
// attention for one KV-head group over a slice of the bf16 KV cache, with an
// online softmax in base 2 (the scale F0 * log2(e) is folded into q, so each
// exponential is one MUFU.EX2), then the merge of the splits.
//
// Partial: compute warp w takes cache positions R0 + w, R0 + w + kComputeWarps,
// ...; lane l holds head dims l, l + 32, ... of q (all I3 heads of the group),
// k_t and v_t, so one shuffle reduction per head gives the score and the
// running (m, l, o) stay in registers. The warps' states are merged in shared
// memory at the end. Requires kMaxHeadDim and kMaxGroup (model maxima).
#ifndef PORTER_MK_ATTENTION_CUH
#define PORTER_MK_ATTENTION_CUH

#ifndef PORTER_MK_CONTEXT_CUH
#error "include megakernel/context.cuh first"
#endif

namespace porter {
namespace mk {

constexpr int kDimsPerLane = (kMaxHeadDim + 31) / 32;

PORTER_DEVICE void op_attn_partial(Ctx& c) {
    const int split = c.iop(0), g = c.iop(1), hd = c.iop(2), gs = c.iop(3), pos = c.iop(4), S = c.iop(5);
    const int t0 = c.word(isa::W_R0), t1 = c.word(isa::W_R1);
    if (hd > kMaxHeadDim || gs > kMaxGroup || hd % 2) __trap();   // beyond the registers sized for the model
    const float scale2 = c.f0() * kLog2e;
    // scratch in the matvec input buffer: q of the group, then the warps' states
    float* qs = c.x;
    float* merge = c.x + kMaxGroup * kMaxHeadDim;
    const int stride = hd + 2;   // per (warp, head): o[hd], m, l

    const float* q = c.ptr<const float>(0);
    const bool rope_q = (c.flags() & isa::FLAG_ROPE_Q) != 0;
    const int half = hd / 2;
    for (int idx = c.ct; idx < gs * hd; idx += kComputeThreads) {
        const int d = idx % hd;
        const float* qh = q + static_cast<long>(g * gs + idx / hd) * hd;
        float v = qh[d];
        if (rope_q) {
            v = rope_rotate(v, d < half ? qh[d + half] : qh[d - half], d, half,
                            c.ptr<const float>(5), c.ptr<const float>(6), pos);
        }
        qs[idx] = v * scale2;
    }
    group_sync();

    float qr[kMaxGroup][kDimsPerLane], o[kMaxGroup][kDimsPerLane], m[kMaxGroup], l[kMaxGroup];
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        m[h] = -__int_as_float(0x7f800000);
        l[h] = 0.f;
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) {
            const int d = c.lane + 32 * j;
            qr[h][j] = (h < gs && d < hd) ? qs[h * hd + d] : 0.f;
            o[h][j] = 0.f;
        }
    }
    const TensorDesc kc = c.tensor(1);
    const __nv_bfloat16* kbase = static_cast<const __nv_bfloat16*>(kc.ptr) + g * hd;
    const __nv_bfloat16* vbase = c.ptr<const __nv_bfloat16>(2) + g * hd;
    // Every head of kMaxGroup is scored (a head h >= gs has q = 0 and is never stored),
    // in one block without a branch per head, so the heads' shuffle reductions overlap
    // (porter's timed model of the head-by-head loop: gs dependent reductions per
    // position). Loading the next position's K and V here as well spilled on sm_100a.
    float kv[kDimsPerLane], vv[kDimsPerLane];
    const auto load_kv = [&](int t, float* kd, float* vd) {
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) {
            const int d = c.lane + 32 * j;
            const long at = static_cast<long>(t) * kc.cols + d;
            kd[j] = d < hd ? ld_bf16(kbase, at) : 0.f;   // cache: appended this step, plain loads
            vd[j] = d < hd ? ld_bf16(vbase, at) : 0.f;
        }
    };
    for (int t = t0 + c.cw; t < t1; t += kComputeWarps) {
        load_kv(t, kv, vv);
        float z[kMaxGroup];
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
            z[h] = 0.f;
#pragma unroll
            for (int j = 0; j < kDimsPerLane; ++j) z[h] = fmaf(qr[h][j], kv[j], z[h]);
        }
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) z[h] = warp_sum(z[h]);
#pragma unroll
        for (int h = 0; h < kMaxGroup; ++h) {
            const float mn = fmaxf(m[h], z[h]);
            const float rescale = fast_exp2(m[h] - mn);   // 0 on the first position (m = -inf)
            const float p = fast_exp2(z[h] - mn);
            l[h] = l[h] * rescale + p;
#pragma unroll
            for (int j = 0; j < kDimsPerLane; ++j) o[h][j] = fmaf(p, vv[j], o[h][j] * rescale);
            m[h] = mn;
        }
    }
#pragma unroll
    for (int h = 0; h < kMaxGroup; ++h) {
        if (h >= gs) break;
        float* st = merge + (c.cw * gs + h) * stride;
#pragma unroll
        for (int j = 0; j < kDimsPerLane; ++j) {
            const int d = c.lane + 32 * j;
            if (d < hd) st[d] = o[h][j];
        }
        if (c.lane == 0) { st[hd] = m[h]; st[hd + 1] = l[h]; }
    }
    group_sync();

    // merge the warps: weights 2^(m_w - M); a warp with no positions has m = -inf
    float* o_part = c.ptr<float>(3);
    float* ml = c.ptr<float>(4);
    const float neg_inf = -__int_as_float(0x7f800000);
    for (int idx = c.ct; idx < gs * hd; idx += kComputeThreads) {
        const int h = idx / hd, d = idx % hd;
        float mx = neg_inf;
        for (int w = 0; w < kComputeWarps; ++w) mx = fmaxf(mx, merge[(w * gs + h) * stride + hd]);
        float acc = 0.f, sum = 0.f;
        if (mx != neg_inf) {
            for (int w = 0; w < kComputeWarps; ++w) {
                const float* st = merge + (w * gs + h) * stride;
                const float e = fast_exp2(st[hd] - mx);
                acc = fmaf(e, st[d], acc);
                sum = fmaf(e, st[hd + 1], sum);
            }
        }
        const long row = static_cast<long>(g * gs + h) * S + split;
        o_part[row * hd + d] = acc;
        if (d == 0) {
            ml[row * 2] = mx == neg_inf ? neg_inf : mx * kLn2;   // back to natural-log units
            ml[row * 2 + 1] = sum;
        }
    }
}

// ATTN_REDUCE: heads [R0, R1), splits p < I0 (stride I5):
// T2[h*hd + d] = sum_p w_p o_p[d] / sum_p w_p l_p, w_p = exp(m_p - max m).
PORTER_DEVICE void op_attn_reduce(Ctx& c) {
    const int n = c.iop(0), hd = c.iop(2), S = c.iop(5);
    const int h0 = c.word(isa::W_R0), h1 = c.word(isa::W_R1);
    const float* o_part = c.ptr<const float>(0);
    const float* ml = c.ptr<const float>(1);
    float* out = c.ptr<float>(2);
    const float neg_inf = -__int_as_float(0x7f800000);
    for (int idx = c.ct; idx < (h1 - h0) * hd; idx += kComputeThreads) {
        const int h = h0 + idx / hd, d = idx % hd;
        const float* mlh = ml + static_cast<long>(h) * S * 2;
        float mx = neg_inf;
        for (int p = 0; p < n; ++p) mx = fmaxf(mx, mlh[2 * p]);
        float acc = 0.f, sum = 0.f;
        for (int p = 0; p < n; ++p) {
            const float e = mlh[2 * p] == neg_inf ? 0.f : fast_exp2((mlh[2 * p] - mx) * kLog2e);
            acc = fmaf(e, o_part[(static_cast<long>(h) * S + p) * hd + d], acc);
            sum = fmaf(e, mlh[2 * p + 1], sum);
        }
        out[static_cast<long>(h) * hd + d] = acc / sum;
    }
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_ATTENTION_CUH
