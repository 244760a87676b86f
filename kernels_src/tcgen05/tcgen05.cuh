// porter tcgen05 MMA primitives (PTX ISA 9.7.16 "TensorCore 5th Generation Family
// Instructions", sm_100a): single-thread tcgen05.mma for kind::f16, kind::f8f6f4,
// kind::mxf8f6f4.block_scale.scale_vec::1X and kind::mxf4nvf4.block_scale.scale_vec::4X,
// tcgen05.commit to an mbarrier (multicast form for CTA pairs) and the tcgen05 fences.
//
// Every tcgen05 instruction of a kernel must use the same .cta_group (9.7.16.10.9.1), so
// the kernel defines PORTER_TCGEN05_CTA_GROUP (1 or 2) once, before including this file,
// and every primitive here and in tmem/ and block_scale/ spells that one value.
//
// Operands: d_tmem is a Tensor Memory address (lane << 16 | column); a_desc / b_desc are
// 64-bit shared-memory descriptors (porter.kernels.encodings_tcgen05: template | addr >> 4);
// idesc is the 32-bit instruction descriptor literal computed in Python. With
// cta_group::2 only the even CTA of the pair issues; the descriptors' addresses name the
// same offsets in both CTAs' shared memory and D lands in both CTAs' TMEM (each its half of M).
#ifndef PORTER_TCGEN05_CUH
#define PORTER_TCGEN05_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif
#ifndef PORTER_TCGEN05_CTA_GROUP
#error "define PORTER_TCGEN05_CTA_GROUP (1 or 2) before the tcgen05 primitives"
#endif

#define PORTER_TC_STR2(x) #x
#define PORTER_TC_STR(x) PORTER_TC_STR2(x)
// ".cta_group::1" or ".cta_group::2", pasted into every tcgen05 asm string.
#define PORTER_TC_CG ".cta_group::" PORTER_TC_STR(PORTER_TCGEN05_CTA_GROUP)

namespace porter {
namespace tc {

// Shared-memory descriptor of an operand at smem address `addr`: the Python-computed
// template (LBO, SBO, version, swizzle) OR the start address field (bits 0-13 = addr >> 4,
// PTX ISA Table 40 matrix-descriptor-encode).
PORTER_DEVICE uint64_t smem_desc(uint64_t desc_template, uint32_t addr) {
    return desc_template | static_cast<uint64_t>((addr & 0x3FFFFu) >> 4);
}

// D (+)= A x B^T, kinds without block scaling. `accumulate` false overwrites D
// (enable-input-d, 9.7.16.10.9.1); the first MMA of every output tile passes false.
PORTER_DEVICE void mma_f16(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc, bool accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma" PORTER_TC_CG ".kind::f16 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
                 : "memory");
}
PORTER_DEVICE void mma_f8f6f4(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc, bool accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %4, 0;\n\t"
                 "tcgen05.mma" PORTER_TC_CG ".kind::f8f6f4 [%0], %1, %2, %3, p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(static_cast<uint32_t>(accumulate))
                 : "memory");
}

// Block-scaled kinds: scale factors from TMEM at sfa_tmem / sfb_tmem (9.7.16.10.7); the
// byte inside each 32-bit TMEM word is chosen by the SF ids in idesc (1X) or is the K
// block (4X). scale_vec::1X: one ue8m0 per 32 K (K = 32 per MMA, e4m3/e5m2/fp6/fp4).
PORTER_DEVICE void mma_mxf8f6f4(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                uint32_t sfa_tmem, uint32_t sfb_tmem, bool accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %6, 0;\n\t"
                 "tcgen05.mma" PORTER_TC_CG ".kind::mxf8f6f4.block_scale.scale_vec::1X"
                 " [%0], %1, %2, %3, [%4], [%5], p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem),
                    "r"(static_cast<uint32_t>(accumulate))
                 : "memory");
}
// scale_vec::4X: four ue4m3 (NVFP4) scales per 64 K of packed e2m1 (K = 64 per MMA).
PORTER_DEVICE void mma_mxf4nvf4_4x(uint32_t d_tmem, uint64_t a_desc, uint64_t b_desc, uint32_t idesc,
                                   uint32_t sfa_tmem, uint32_t sfb_tmem, bool accumulate) {
    asm volatile("{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %6, 0;\n\t"
                 "tcgen05.mma" PORTER_TC_CG ".kind::mxf4nvf4.block_scale.scale_vec::4X"
                 " [%0], %1, %2, %3, [%4], [%5], p;\n\t}"
                 :: "r"(d_tmem), "l"(a_desc), "l"(b_desc), "r"(idesc), "r"(sfa_tmem), "r"(sfb_tmem),
                    "r"(static_cast<uint32_t>(accumulate))
                 : "memory");
}

// tcgen05.commit (9.7.16.12.1): when every tcgen05.mma / tcgen05.cp this thread issued
// so far has completed, arrive once (cluster scope) on `bar` (a .shared::cta address of
// this CTA, which is also a valid .shared::cluster address of it).
PORTER_DEVICE void commit(uint32_t bar) {
    asm volatile("tcgen05.commit" PORTER_TC_CG ".mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 :: "r"(bar) : "memory");
}
// The multicast form: the arrive lands on the barrier at the same offset in every CTA of
// `cta_mask` (bit i = %cluster_ctarank i) - how the pair leader frees both CTAs' stages
// and tells both CTAs' epilogues that their halves of D are ready.
PORTER_DEVICE void commit_multicast(uint32_t bar, uint16_t cta_mask) {
    asm volatile("tcgen05.commit" PORTER_TC_CG ".mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
                 :: "r"(bar), "h"(cta_mask) : "memory");
}

// tcgen05 ordering across threads (9.7.16.6.3): an async tcgen05 op before
// fence::before_thread_sync is ordered before the following thread sync (mbarrier
// arrive, bar.sync); one after fence::after_thread_sync is ordered after the preceding
// sync (mbarrier wait). Pair every handoff of TMEM between roles with them.
PORTER_DEVICE void fence_before_thread_sync() {
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
}
PORTER_DEVICE void fence_after_thread_sync() {
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
}

}  // namespace tc
}  // namespace porter

#endif  // PORTER_TCGEN05_CUH
