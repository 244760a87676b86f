// porter attention, Hopper: register-fragment helpers around the two wgmmas of a
// FlashAttention step (the GEMM primitives never keep an accumulator alive
// across MMAs or feed one into the next, so they have no need for these).
#ifndef PORTER_ATTENTION_WGMMA_FRAG_CUH
#define PORTER_ATTENTION_WGMMA_FRAG_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {
namespace attn {

// An empty asm that "reads and writes" every register of an accumulator or A
// fragment: the compiler may not move ordinary instructions touching them across
// it, so the softmax math on S / O stays after wgmma_wait and before wgmma_fence
// (the async MMA owns those registers in between).
template <int R>
PORTER_DEVICE void fence_accumulator(float (&d)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i]) :: "memory");
}
template <int R>
PORTER_DEVICE void fence_fragment(uint32_t (&a)[R]) {
#pragma unroll
    for (int i = 0; i < R; ++i) asm volatile("" : "+r"(a[i]) :: "memory");
}

// P (fp32, in the S accumulator layout) -> the 4 bf16x2 registers of the wgmma
// register-A fragment for k-slice kk (columns 16kk..16kk+15). Accumulator
// registers 8kk + 0..7 hold, in order, (row r, cols 2c..2c+1), (row r+8, same),
// (row r, cols 8+2c..), (row r+8, cols 8+2c..) with c = lane % 4 - exactly
// a0..a3 of the A fragment, so no shuffle is needed.
template <int R>
PORTER_DEVICE void pack_p_fragment(const float (&p)[R], int kk, uint32_t (&a)[4]) {
    a[0] = pack_bf16x2(p[8 * kk + 0], p[8 * kk + 1]);
    a[1] = pack_bf16x2(p[8 * kk + 2], p[8 * kk + 3]);
    a[2] = pack_bf16x2(p[8 * kk + 4], p[8 * kk + 5]);
    a[3] = pack_bf16x2(p[8 * kk + 6], p[8 * kk + 7]);
}

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTENTION_WGMMA_FRAG_CUH
