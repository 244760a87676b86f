// What every megakernel opcode function sees: the tensor table, the CTA's
// shared-memory scratch, the page ring, its thread's place among the compute
// warps, and reductions over the compute warps (the loader warp never joins
// them, so they use named barrier 1 with kComputeThreads, not __syncthreads).
//
// Requires porter::mk::isa (word indices, opcodes, dtypes from
// porter/megakernel/isa.py), kComputeWarps, kComputeThreads and kYRows.
#ifndef PORTER_MK_CONTEXT_CUH
#define PORTER_MK_CONTEXT_CUH

#ifndef PORTER_MK_PAGE_RING_CUH
#error "include megakernel/page_ring.cuh first"
#endif

namespace porter {
namespace mk {

// One entry of the tensor table (isa.TensorSpec) as the kernel reads it. The
// instruction words name tensors by id only; the kernel also needs each
// tensor's dtype (a MATVEC STORE converts to T2's dtype) and column count (a
// MATVEC's K is T0's column count), so the host passes them here. The record
// is part of the ISA contract (isa.py "Launch model", isa.TENSOR_DESC; built by
// isa.tensor_desc_records): the asserts below hold it to the offsets the
// template took from porter/megakernel/isa.py.
struct alignas(16) TensorDesc {
    void* ptr;
    int dtype;      // isa::DT_*
    int rows;       // product of all but the last dimension
    int cols;       // last dimension
    int pad[3];
};
static_assert(sizeof(TensorDesc) == isa::TENSOR_DESC_BYTES, "TensorDesc size differs from isa.TENSOR_DESC");
static_assert(__builtin_offsetof(TensorDesc, ptr) == isa::TENSOR_DESC_OFF_PTR, "isa.TENSOR_DESC ptr offset");
static_assert(__builtin_offsetof(TensorDesc, dtype) == isa::TENSOR_DESC_OFF_DTYPE, "isa.TENSOR_DESC dtype offset");
static_assert(__builtin_offsetof(TensorDesc, rows) == isa::TENSOR_DESC_OFF_ROWS, "isa.TENSOR_DESC rows offset");
static_assert(__builtin_offsetof(TensorDesc, cols) == isa::TENSOR_DESC_OFF_COLS, "isa.TENSOR_DESC cols offset");
static_assert(__builtin_offsetof(TensorDesc, pad) == isa::TENSOR_DESC_OFF_PAD, "isa.TENSOR_DESC pad offset");

struct Ctx {
    const TensorDesc* tensors;
    const int* w;       // this instruction's 32 words (shared memory)
    float* x;           // matvec input vector / attention scratch
    float* y;           // kYRows matvec results of the current row window
    float* u;           // kYRows up-projection results (SILU_MUL)
    float* red;         // kComputeWarps floats for reductions
    int* red_i;         // kComputeWarps ints for arg-reductions
    PageRing ring;
    const unsigned char* pages;   // generic pointer to page 0 of the ring
    int ct;             // thread index among the compute threads
    int cw;             // compute warp index
    int lane;
    int page_seq;       // pages of this queue consumed so far (all warps agree)

    PORTER_DEVICE int word(int i) const { return w[i]; }
    PORTER_DEVICE const unsigned char* page(int seq) const { return pages + ring.slot_of(seq) * kPageBytes; }
    PORTER_DEVICE int tensor_id(int slot) const { return w[isa::W_T0 + slot]; }
    PORTER_DEVICE int iop(int i) const { return w[isa::W_I0 + i]; }
    PORTER_DEVICE float f0() const { return __int_as_float(w[isa::W_F0]); }
    PORTER_DEVICE int flags() const { return w[isa::W_FLAGS]; }
    PORTER_DEVICE const TensorDesc& tensor(int slot) const { return tensors[tensor_id(slot)]; }
    template <typename T>
    PORTER_DEVICE T* ptr(int slot) const { return static_cast<T*>(tensors[tensor_id(slot)].ptr); }
};

PORTER_DEVICE void group_sync() { named_barrier_sync(1, kComputeThreads); }

// ---- numbers ------------------------------------------------------------------
// bf16 is the upper half of an fp32: widening is a shift, no conversion unit.
PORTER_DEVICE float bf16_lo(uint32_t pair) { return __uint_as_float(pair << 16); }
PORTER_DEVICE float bf16_hi(uint32_t pair) { return __uint_as_float(pair & 0xffff0000u); }

// Weights and RoPE tables are read-only for the whole kernel: the non-coherent
// path is safe. The KV cache and activations are written during the step, so
// they are read with plain loads (after the counter acquire).
PORTER_DEVICE float ldg_bf16(const __nv_bfloat16* p, long i) {
    return __uint_as_float(static_cast<uint32_t>(__ldg(reinterpret_cast<const unsigned short*>(p) + i)) << 16);
}
PORTER_DEVICE float ld_bf16(const __nv_bfloat16* p, long i) {
    return __uint_as_float(static_cast<uint32_t>(reinterpret_cast<const unsigned short*>(p)[i]) << 16);
}

// Store an fp32 result in the tensor's dtype (bf16: round to nearest even).
PORTER_DEVICE void store_as(const TensorDesc& t, long i, float v) {
    if (t.dtype == isa::DT_BF16) {
        static_cast<__nv_bfloat16*>(t.ptr)[i] = __float2bfloat16_rn(v);
    } else {
        static_cast<float*>(t.ptr)[i] = v;
    }
}

// 2^x on the SFU (MUFU.EX2): the softmax works in base 2 with log2(e) folded in.
PORTER_DEVICE float fast_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// ---- reductions -------------------------------------------------------------------
PORTER_DEVICE float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
PORTER_DEVICE float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

// (value, index) order for argmax: larger value wins, equal values keep the lower
// index (isa.py: "lowest index on ties"); NaN never wins.
PORTER_DEVICE bool better(float v, int i, float bv, int bi) {
    return v > bv || (v == bv && i < bi);
}
PORTER_DEVICE void warp_argmax(float& v, int& i) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, i, o);
        if (better(ov, oi, v, i)) { v = ov; i = oi; }
    }
}

// Sum over all compute threads; every compute thread gets the total. The
// trailing barrier lets the next reduction reuse `red` at once.
PORTER_DEVICE float group_sum(Ctx& c, float v) {
    v = warp_sum(v);
    if (c.lane == 0) c.red[c.cw] = v;
    group_sync();
    float total = 0.f;
#pragma unroll
    for (int k = 0; k < kComputeWarps; ++k) total += c.red[k];
    group_sync();
    return total;
}

PORTER_DEVICE void group_argmax(Ctx& c, float& v, int& i) {
    warp_argmax(v, i);
    if (c.lane == 0) { c.red[c.cw] = v; c.red_i[c.cw] = i; }
    group_sync();
    v = c.red[0];
    i = c.red_i[0];
    for (int k = 1; k < kComputeWarps; ++k) {
        if (better(c.red[k], c.red_i[k], v, i)) { v = c.red[k]; i = c.red_i[k]; }
    }
    group_sync();
}

// ---- RoPE -------------------------------------------------------------------------
// Rotate-half RoPE of element d of one head (isa.py MATVEC ROPE): `a` = element
// d, `b` = its partner d +- half; cos/sin tables are fp32 [max_seq, half].
PORTER_DEVICE float rope_rotate(float a, float b, int d, int half, const float* cos_t,
                                const float* sin_t, int pos) {
    const int i = d < half ? d : d - half;
    const float cs = __ldg(cos_t + static_cast<long>(pos) * half + i);
    const float sn = __ldg(sin_t + static_cast<long>(pos) * half + i);
    return d < half ? a * cs - b * sn : a * cs + b * sn;
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_CONTEXT_CUH
