// MATVEC (porter/megakernel/isa.py): y = W[R0:R1, :] . x over bf16 weight rows
// streamed through the page ring, fp32 accumulation, then the epilogue
// (STORE, RESIDUAL_ADD, ROPE, SILU_MUL) and optionally a block argmax.
//
// Page schedule (the loader and the compute warps derive the same one):
// row groups of rows_per_page(K) whole rows from R0 upwards; per group one
// page of T0 rows and, for SILU_MUL, one page of the same T4 (up) rows. The
// compute warps work in row windows of kYRows rows: each page belongs to the
// warp that owns its ring slot (PageRing::owner), which reduces each of its
// rows with warp shuffles and writes the result to y (u for the up rows).
// After the window all compute threads run the epilogue on it. kYRows is a
// multiple of every rows_per_page (both powers of two) and of the head dim, so
// windows hold whole groups and, for ROPE, whole heads.
//
// Why slot ownership (page_ring.cuh): a full-barrier wait by parity is only
// sound when the waiter already consumed the slot's previous page; owning
// every page of a slot guarantees it. (Owning row groups, gi % kComputeWarps,
// did not: in a window of more than kPages pages - each 64-row fused K
// projection of Llama-3.2-1B is 16 - a warp's next page shares its slot with
// an earlier page of another warp; while that page's copy was still in flight
// (bulk copies complete in any order) the parity already read "done", so the
// warp read stale rows and freed the slot early. tests/test_megakernel_cuda_mirror.py
// simulates both rules.)
#ifndef PORTER_MK_MATVEC_CUH
#define PORTER_MK_MATVEC_CUH

#ifndef PORTER_MK_CONTEXT_CUH
#error "include megakernel/context.cuh first"
#endif

namespace porter {
namespace mk {

// Whole bf16 rows of K columns per page, rounded down to a power of two and at
// most kYRows; 0 when one row does not fit a page (the planner never emits it).
PORTER_DEVICE int rows_per_page(int k) {
    int r = static_cast<int>(kPageBytes) / (2 * k);
    if (r > kYRows) r = kYRows;
    return r < 1 ? 0 : 1 << (31 - __clz(r));
}

PORTER_DEVICE int matvec_streams(int flags) {
    return (flags & isa::EPILOGUE_MASK) == isa::EPI_SILU_MUL ? 2 : 1;
}

// Loader warp: queue every page of one MATVEC instruction (words `w`, global).
PORTER_DEVICE void load_matvec_pages(const PageRing& ring, const TensorDesc* tensors, const int* w,
                                     int& seq, uint64_t policy) {
    const int flags = __ldg(w + isa::W_FLAGS);
    const TensorDesc& wt = tensors[__ldg(w + isa::W_T0)];
    const int k = wt.cols;
    const int rpp = rows_per_page(k);
    if (rpp == 0) __trap();   // a weight row wider than a page: malformed program
    const int streams = matvec_streams(flags);
    const char* gate = static_cast<const char*>(wt.ptr);
    const char* up = streams == 2 ? static_cast<const char*>(tensors[__ldg(w + isa::W_T0 + 4)].ptr) : gate;
    const int r0 = __ldg(w + isa::W_R0), r1 = __ldg(w + isa::W_R1);
    const long row_bytes = 2L * k;
    for (int g0 = r0; g0 < r1; g0 += rpp) {
        const int rows = min(rpp, r1 - g0);
        for (int s = 0; s < streams; ++s) {
            ring_produce(ring, seq++, (s == 0 ? gate : up) + g0 * row_bytes, static_cast<uint32_t>(rows * row_bytes), policy);
        }
    }
}

// The input vector in registers: lane l of every compute warp holds the x elements
// of the 16-byte weight vectors l, l + 32, ... (8 floats each) for the first
// kXRegVecs of them, loaded from shared memory once per instruction instead of once
// per row (a warp reduces up to a whole page of rows against the same x). 8 vectors
// (64 registers) cover K <= 32 x 8 x 8 = 2048 - every matvec of Llama-3.2-1B but the
// down projection (K 8192), whose remaining columns stay in shared memory.
constexpr int kXRegVecs = 8;

struct XRegs {
    float4 v[2 * kXRegVecs];
};

PORTER_DEVICE void load_x_regs(XRegs& xr, const float4* x4, int nvec, int lane) {
#pragma unroll
    for (int j = 0; j < kXRegVecs; ++j) {
        const int v = lane + 32 * j;
        const bool in = v < nvec;
        xr.v[2 * j] = in ? x4[2 * v] : make_float4(0.f, 0.f, 0.f, 0.f);
        xr.v[2 * j + 1] = in ? x4[2 * v + 1] : make_float4(0.f, 0.f, 0.f, 0.f);
    }
}

PORTER_DEVICE void fma_vec(const uint4 q, const float4 xa, const float4 xb, float& a0, float& a1) {
    a0 = fmaf(bf16_lo(q.x), xa.x, a0); a1 = fmaf(bf16_hi(q.x), xa.y, a1);
    a0 = fmaf(bf16_lo(q.y), xa.z, a0); a1 = fmaf(bf16_hi(q.y), xa.w, a1);
    a0 = fmaf(bf16_lo(q.z), xb.x, a0); a1 = fmaf(bf16_hi(q.z), xb.y, a1);
    a0 = fmaf(bf16_lo(q.w), xb.z, a0); a1 = fmaf(bf16_hi(q.w), xb.w, a1);
}

// One warp: dots of R consecutive bf16 rows of a page (nvec x 8 elements each, shared
// memory) with x (fp32: its first kXRegVecs vectors per lane from xr, the rest from
// shared memory); lanes stride over 16-byte vectors in the same order for every row
// (so each row's sum rounds as the one-row form did), then one shuffle reduction per
// row. R rows at once keep R x kXRegVecs independent 16-byte loads in flight and R
// independent FMA chains (porter's timed model of the one-row form: each row's loads,
// chain and reduction waited on the last: ~800 cycles a row per warp); a row of
// kXRegVecs full vectors per lane (K = 2048) needs no per-vector guard, so the loads
// are one straight block. Two accumulators per row halve its dependent-FMA chain.
template <int R>
PORTER_DEVICE void dot_rows(const uint4* row, const XRegs& xr, const float4* x4, int nvec, int lane, float* out) {
    float a0[R], a1[R];
#pragma unroll
    for (int r = 0; r < R; ++r) { a0[r] = 0.f; a1[r] = 0.f; }
    if (nvec >= 32 * kXRegVecs) {
#pragma unroll
        for (int j = 0; j < kXRegVecs; ++j) {
            uint4 q[R];
#pragma unroll
            for (int r = 0; r < R; ++r) q[r] = row[r * nvec + lane + 32 * j];
#pragma unroll
            for (int r = 0; r < R; ++r) fma_vec(q[r], xr.v[2 * j], xr.v[2 * j + 1], a0[r], a1[r]);
        }
    } else {
#pragma unroll
        for (int j = 0; j < kXRegVecs; ++j) {
            const int v = lane + 32 * j;
            if (v < nvec) {
#pragma unroll
                for (int r = 0; r < R; ++r) fma_vec(row[r * nvec + v], xr.v[2 * j], xr.v[2 * j + 1], a0[r], a1[r]);
            }
        }
    }
#pragma unroll 4
    for (int v = lane + 32 * kXRegVecs; v < nvec; v += 32) {
        const float4 xa = x4[2 * v], xb = x4[2 * v + 1];
#pragma unroll
        for (int r = 0; r < R; ++r) fma_vec(row[r * nvec + v], xa, xb, a0[r], a1[r]);
    }
#pragma unroll
    for (int r = 0; r < R; ++r) out[r] = warp_sum(a0[r] + a1[r]);
}

// Rows of one page a warp reduces at once (dot_rows): 4 is rows_per_page of K = 2048.
constexpr int kRowBlock = 4;

// x = T1[0:K] into shared memory, RMS-normalised with weight T3 under PRE_NORM.
// Each thread scales exactly the elements it loaded, so one reduction suffices.
// Loads go kStageVecs per thread at once, each behind its own guard and used only
// after all were issued (porter's timed model of the one-at-a-time loop: each float4
// and each bf16 weight waited an L2 round trip before the next was issued, ~2.8k
// cycles of every PRE_NORM matvec); the sums and products keep their order.
constexpr int kStageVecs = 2;   // K = 2048 in one pass (4 spilled 8 B on sm_100a)

// The norm weight's 4 bf16 at element i (a multiple of 4: 8-byte aligned, isa.py
// 16-byte aligned tensors) in one load, widened as ldg_bf16 widens each.
PORTER_DEVICE void ldg_bf16x4(const __nv_bfloat16* p, int i, float* g) {
    const uint2 q = __ldg(reinterpret_cast<const uint2*>(p + i));
    g[0] = bf16_lo(q.x); g[1] = bf16_hi(q.x); g[2] = bf16_lo(q.y); g[3] = bf16_hi(q.y);
}

// src = T1's and wt = T3's data (the caller reads them with T0's before any branch,
// so the three descriptor loads are one round trip); wt is read only under PRE_NORM.
PORTER_DEVICE void stage_input(Ctx& c, int k, const float* src, const __nv_bfloat16* wt) {
    const bool norm = (c.flags() & isa::FLAG_PRE_NORM) != 0;
    constexpr int kStep = 4 * kComputeThreads;
    constexpr int kPass = kStep * kStageVecs;
    // one pass (K <= kPass, every PRE_NORM matvec of Llama-3.2-1B): the norm weights
    // are loaded with x, before the reduction, and x is scaled in registers
    const bool one_pass = k <= kPass;
    float g[kStageVecs][4];
    float ss = 0.f;
    for (int base = 4 * c.ct; base < k; base += kPass) {
        float4 v[kStageVecs];
#pragma unroll
        for (int j = 0; j < kStageVecs; ++j) {
            if (base + kStep * j < k) {
                v[j] = *reinterpret_cast<const float4*>(src + base + kStep * j);   // plain load: written this step
                if (norm && one_pass) ldg_bf16x4(wt, base + kStep * j, g[j]);
            }
        }
#pragma unroll
        for (int j = 0; j < kStageVecs; ++j) {
            const int i = base + kStep * j;
            if (i < k) {
                *reinterpret_cast<float4*>(c.x + i) = v[j];
                ss += v[j].x * v[j].x + v[j].y * v[j].y + v[j].z * v[j].z + v[j].w * v[j].w;
            }
        }
    }
    if (norm) {
        const float r = rsqrtf(group_sum(c, ss) / static_cast<float>(k) + c.f0());
        for (int base = 4 * c.ct; base < k; base += kPass) {
            if (!one_pass) {
#pragma unroll
                for (int j = 0; j < kStageVecs; ++j) {
                    if (base + kStep * j < k) ldg_bf16x4(wt, base + kStep * j, g[j]);
                }
            }
#pragma unroll
            for (int j = 0; j < kStageVecs; ++j) {
                const int i = base + kStep * j;
                if (i < k) {
                    // (x * r) * w, the VM's rounding order (validation/megakernel_vm.py _normed)
#pragma unroll
                    for (int e = 0; e < 4; ++e) c.x[i + e] = (c.x[i + e] * r) * g[j][e];
                }
            }
        }
    }
    group_sync();
}

// Epilogue of one window [ws, we): y (and u) hold its rows relative to ws.
PORTER_DEVICE void matvec_epilogue(Ctx& c, int ws, int we, float& best_v, int& best_i) {
    const int flags = c.flags();
    const int epi = flags & isa::EPILOGUE_MASK;
    const TensorDesc out = c.tensor(2);   // by value: a reference is re-read from global after each store
    const long base = static_cast<long>(c.iop(0)) + (ws - c.word(isa::W_R0));
    const int n = we - ws;
    const bool argmax = (flags & isa::FLAG_ARGMAX) != 0;
    if (epi == isa::EPI_ROPE) {
        const int hd = c.iop(2), half = hd / 2, pos = c.iop(4);
        const float* cs = c.ptr<const float>(5);
        const float* sn = c.ptr<const float>(6);
        for (int p = c.ct; p < n / 2; p += kComputeThreads) {
            const int lo = (p / half) * hd + p % half, i = p % half;
            const float a = c.y[lo], b = c.y[lo + half];
            const float ra = rope_rotate(a, b, i, half, cs, sn, pos);
            const float rb = rope_rotate(b, a, i + half, half, cs, sn, pos);
            store_as(out, base + lo, ra);
            store_as(out, base + lo + half, rb);
            // isa.py: ARGMAX follows ANY epilogue, over the fp32 values it stored
            if (argmax && better(ra, ws + lo, best_v, best_i)) { best_v = ra; best_i = ws + lo; }
            if (argmax && better(rb, ws + lo + half, best_v, best_i)) { best_v = rb; best_i = ws + lo + half; }
        }
        return;
    }
    for (int j = c.ct; j < n; j += kComputeThreads) {
        float v = c.y[j];
        if (epi == isa::EPI_SILU_MUL) {
            v = v / (1.f + fast_exp2(-v * kLog2e)) * c.u[j];
        } else if (epi == isa::EPI_RESIDUAL_ADD) {
            v += static_cast<const float*>(out.ptr)[base + j];   // only this instruction touches it
        }
        store_as(out, base + j, v);
        if (argmax && better(v, ws + j, best_v, best_i)) { best_v = v; best_i = ws + j; }
    }
}

PORTER_DEVICE void op_matvec(Ctx& c) {
    const int k = c.tensor(0).cols;
    const float* src = c.ptr<const float>(1);
    // PRE_NORM's weight (T3 names no tensor otherwise)
    const __nv_bfloat16* wt = (c.flags() & isa::FLAG_PRE_NORM) ? c.ptr<const __nv_bfloat16>(3) : nullptr;
    if (k > kMaxK || k % 8) __trap();   // wider than the input buffer / not 16-byte rows: malformed program
    if ((c.flags() & isa::EPILOGUE_MASK) == isa::EPI_ROPE) {
        // the fused RoPE pairs rows d and d + hd/2 inside one kYRows window: the rows
        // must be whole heads and every window must hold whole heads, else the
        // rotation would pair rows of different heads (isa.py: R0, R1 multiples of hd)
        const int hd = c.iop(2), r0 = c.word(isa::W_R0), r1 = c.word(isa::W_R1);
        if (hd <= 0 || hd % 2 || kYRows % hd || r0 % hd || r1 % hd) __trap();
    }
    stage_input(c, k, src, wt);
    const int rpp = rows_per_page(k);
    const int nvec = k / 8;
    const int streams = matvec_streams(c.flags());
    const int r0 = c.word(isa::W_R0), r1 = c.word(isa::W_R1);
    const float4* x4 = reinterpret_cast<const float4*>(c.x);
    XRegs xr;                   // stage_input's closing barrier: c.x is complete
    load_x_regs(xr, x4, nvec, c.lane);
    float best_v = -__int_as_float(0x7f800000);
    int best_i = 0x7fffffff;
    for (int ws = r0; ws < r1; ws += kYRows) {
        const int we = min(ws + kYRows, r1);
        for (int g0 = ws; g0 < we; g0 += rpp) {
            const int rows = min(rpp, we - g0);
            for (int s = 0; s < streams; ++s) {
                const int seq = c.page_seq++;   // every warp counts every page
                if (c.ring.owner(seq) != static_cast<uint32_t>(c.cw)) continue;
                ring_wait_full(c.ring, seq);
                const uint4* page = reinterpret_cast<const uint4*>(c.page(seq));
                float* dst = (s == 0 ? c.y : c.u) + (g0 - ws);
                int r = 0;
                for (; r + kRowBlock <= rows; r += kRowBlock) {
                    float d[kRowBlock];
                    dot_rows<kRowBlock>(page + r * nvec, xr, x4, nvec, c.lane, d);
                    if (c.lane == 0) {
#pragma unroll
                        for (int i = 0; i < kRowBlock; ++i) dst[r + i] = d[i];
                    }
                }
                for (; r < rows; ++r) {
                    float d;
                    dot_rows<1>(page + r * nvec, xr, x4, nvec, c.lane, &d);
                    if (c.lane == 0) dst[r] = d;
                }
                ring_release(c.ring, seq);
            }
        }
        group_sync();          // y/u of the window complete
        matvec_epilogue(c, ws, we, best_v, best_i);
        group_sync();          // epilogue done reading y/u before the next window
    }
    if (c.flags() & isa::FLAG_ARGMAX) {
        group_argmax(c, best_v, best_i);
        if (c.ct == 0) {
            c.ptr<float>(5)[c.iop(3)] = best_v;
            c.ptr<int>(6)[c.iop(3)] = best_i;
        }
    }
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_MATVEC_CUH
