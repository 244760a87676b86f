// The megakernel's element-wise and reduction opcodes (porter/megakernel/isa.py:
// EMBED, RMSNORM, ROPE, KV_APPEND, RESIDUAL_ADD, ARGMAX_PARTIAL, ARGMAX_REDUCE).
// All compute threads take part; fp32 arithmetic; bf16 stores round to nearest even.
#ifndef PORTER_MK_VECTOR_OPS_CUH
#define PORTER_MK_VECTOR_OPS_CUH

#ifndef PORTER_MK_CONTEXT_CUH
#error "include megakernel/context.cuh first"
#endif

namespace porter {
namespace mk {

// EMBED: T2[c] = float(T0[I0, c]) for c in [R0, R1).
PORTER_DEVICE void op_embed(Ctx& c) {
    const TensorDesc& table = c.tensor(0);
    const __nv_bfloat16* row = static_cast<const __nv_bfloat16*>(table.ptr) + static_cast<long>(c.iop(0)) * table.cols;
    float* out = c.ptr<float>(2);
    for (int i = c.word(isa::W_R0) + c.ct; i < c.word(isa::W_R1); i += kComputeThreads) out[i] = ldg_bf16(row, i);
}

// 1 / sqrt(mean(v[0:n]^2) + eps) over the whole vector (every thread gets it).
PORTER_DEVICE float rms_scale(Ctx& c, const float* v, int n, float eps) {
    float ss = 0.f;
    for (int i = c.ct; i < n; i += kComputeThreads) ss = fmaf(v[i], v[i], ss);
    ss = group_sum(c, ss);
    return rsqrtf(ss / static_cast<float>(n) + eps);
}

// RMSNORM: T2[i] = T0[i] * r * float(T3[i]) for i in [R0, R1); r over T0[0:I0].
PORTER_DEVICE void op_rmsnorm(Ctx& c) {
    const float* x = c.ptr<const float>(0);
    const float r = rms_scale(c, x, c.iop(0), c.f0());
    const __nv_bfloat16* wt = c.ptr<const __nv_bfloat16>(3);
    float* out = c.ptr<float>(2);
    for (int i = c.word(isa::W_R0) + c.ct; i < c.word(isa::W_R1); i += kComputeThreads) out[i] = x[i] * r * ldg_bf16(wt, i);
}

// ROPE: in place on T0 (fp32) rows [R0, R1), whole heads of I2; tables T5/T6 at I4.
// One thread owns both elements of a rotated pair, so in-place is safe.
PORTER_DEVICE void op_rope(Ctx& c) {
    float* v = c.ptr<float>(0);
    const int hd = c.iop(2), half = hd / 2, pos = c.iop(4);
    const int r0 = c.word(isa::W_R0);
    const int pairs = (c.word(isa::W_R1) - r0) / 2;
    if (hd <= 0 || hd % 2 || (c.word(isa::W_R1) - r0) % hd) __trap();   // not whole heads: malformed program
    const float* cs = c.ptr<const float>(5);
    const float* sn = c.ptr<const float>(6);
    for (int p = c.ct; p < pairs; p += kComputeThreads) {
        const int head = p / half, i = p % half;
        const int lo = r0 + head * hd + i;
        const float a = v[lo], b = v[lo + half];
        v[lo] = rope_rotate(a, b, i, half, cs, sn, pos);
        v[lo + half] = rope_rotate(b, a, i + half, half, cs, sn, pos);
    }
}

// KV_APPEND: T2[pos, c] = T0[c], T3[pos, c] = T1[c] for c in [R0, R1) (bf16 caches).
PORTER_DEVICE void op_kv_append(Ctx& c) {
    const float* k = c.ptr<const float>(0);
    const float* v = c.ptr<const float>(1);
    const TensorDesc& kc = c.tensor(2);
    const TensorDesc& vc = c.tensor(3);
    const long row = static_cast<long>(c.iop(4)) * kc.cols;
    for (int i = c.word(isa::W_R0) + c.ct; i < c.word(isa::W_R1); i += kComputeThreads) {
        store_as(kc, row + i, k[i]);
        store_as(vc, row + i, v[i]);
    }
}

// RESIDUAL_ADD: T2[i] += T0[i] for i in [R0, R1).
PORTER_DEVICE void op_residual_add(Ctx& c) {
    const float* src = c.ptr<const float>(0);
    float* dst = c.ptr<float>(2);
    for (int i = c.word(isa::W_R0) + c.ct; i < c.word(isa::W_R1); i += kComputeThreads) dst[i] += src[i];
}

// ARGMAX_PARTIAL: T5[I3] = max T0[R0:R1], T6[I3] = its index (lowest on ties).
PORTER_DEVICE void op_argmax_partial(Ctx& c) {
    const float* x = c.ptr<const float>(0);
    float bv = -__int_as_float(0x7f800000);
    int bi = 0x7fffffff;
    for (int i = c.word(isa::W_R0) + c.ct; i < c.word(isa::W_R1); i += kComputeThreads) {
        if (better(x[i], i, bv, bi)) { bv = x[i]; bi = i; }
    }
    group_argmax(c, bv, bi);
    if (c.ct == 0) {
        c.ptr<float>(5)[c.iop(3)] = bv;
        c.ptr<int>(6)[c.iop(3)] = bi;
    }
}

// ARGMAX_REDUCE: over slots [R0, R1) the largest T5[s] (ties: smaller T6[s])
// gives T2[I0] = T6[s], the next token.
PORTER_DEVICE void op_argmax_reduce(Ctx& c) {
    const float* vals = c.ptr<const float>(5);
    const int* idx = c.ptr<const int>(6);
    float bv = -__int_as_float(0x7f800000);
    int bi = 0x7fffffff;
    for (int s = c.word(isa::W_R0) + c.ct; s < c.word(isa::W_R1); s += kComputeThreads) {
        if (better(vals[s], idx[s], bv, bi)) { bv = vals[s]; bi = idx[s]; }
    }
    group_argmax(c, bv, bi);
    if (c.ct == 0) c.ptr<int>(2)[c.iop(0)] = bi;
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_VECTOR_OPS_CUH
