// porter attention: tcgen05.mma with the A operand in Tensor Memory (PTX ISA 9.7.16.10.9
// tcgen05.mma, "[a-tmem]" form). kernels_src/tcgen05/ only has the form with A in shared
// memory; the P V product of attention needs this one: P is written to TMEM by the
// softmax warps (tcgen05.st) and read from there by the MMA, never touching shared memory.
//
// Layout of A in TMEM for M = 128, cta_group::1: row i of A is lane i; along a lane,
// 32-bit column c holds the two 16-bit elements k = 2c (low half) and 2c + 1 (high half).
// One kind::f16 MMA consumes K = 16 elements = 8 columns, so consecutive K steps advance
// the A address by 8 columns. A from TMEM is always K-major (the idesc transpose-A bit
// must be 0); B comes from shared memory through its descriptor (either major-ness).
#ifndef PORTER_ATTENTION_TMEM_MMA_TS_CUH
#define PORTER_ATTENTION_TMEM_MMA_TS_CUH

#ifndef PORTER_TCGEN05_CUH
#error "include tcgen05/tcgen05.cuh first (it fixes the kernel's cta_group)"
#endif

namespace porter {
namespace tc {

// D (+)= A x B with A at TMEM address a_tmem; `accumulate` false overwrites D.
PORTER_DEVICE void mma_f16_tmem_a(uint32_t d_tmem, uint32_t a_tmem, uint64_t b_desc, uint32_t idesc,
                                  bool accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma" PORTER_TC_CG ".kind::f16 [%0], [%1], %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "r"(a_tmem), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
                 : "memory");
}

}  // namespace tc
}  // namespace porter

#endif  // PORTER_ATTENTION_TMEM_MMA_TS_CUH
