// porter wgmma primitives for Hopper (PTX ISA "Asynchronous Warpgroup Level
// Matrix Multiply-Accumulate Instructions", sm_90a only).
//
// Ordering rules these helpers encode (PTX ISA wgmma.fence / commit_group /
// wait_group):
//   * wgmma_fence() before the first wgmma.mma_async of a batch whenever the
//     accumulator registers were touched by ordinary instructions (zeroing, the
//     epilogue reading them) - and, conservatively, before every batch.
//   * wgmma_commit() closes the batch into one wgmma-group.
//   * wgmma_wait<N>() returns when at most N groups of this warpgroup are still
//     in flight: the shared memory their descriptors point at may then be
//     reused and, for N == 0, the accumulators may be read.
// The matrix multiplies themselves come from wgmma/mma.cuh.j2 (one wrapper per
// shape and type, generated for the N the config chose).
// Requires common/common.cuh.
#ifndef PORTER_WGMMA_CUH
#define PORTER_WGMMA_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {

PORTER_DEVICE void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
PORTER_DEVICE void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
PORTER_DEVICE void wgmma_wait() {
    static_assert(N >= 0 && N <= 7, "wgmma.wait_group takes 0..7");
    asm volatile("wgmma.wait_group.sync.aligned %0;" :: "n"(N) : "memory");
}

// setmaxnreg (PTX ISA "setmaxnreg", sm_90a): every warp of the warpgroup must
// execute it (.sync.aligned); the count is a multiple of 8 in 24..256. .dec
// returns registers to the SM's pool, .inc blocks until the pool has them, so
// the producer warpgroup's .dec must be reachable before the consumers' .inc.
template <int REGS>
PORTER_DEVICE void setmaxnreg_dec() {
    static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: multiple of 8 in 24..256");
    asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" :: "n"(REGS));
}
template <int REGS>
PORTER_DEVICE void setmaxnreg_inc() {
    static_assert(REGS % 8 == 0 && REGS >= 24 && REGS <= 256, "setmaxnreg: multiple of 8 in 24..256");
    asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" :: "n"(REGS));
}

// A shared-memory matrix descriptor: `desc_template` carries every field but
// the start address (computed in Python, porter.kernels.encodings_wgmma); the
// start address field (bits 0-13) is the .shared::cta byte address >> 4.
PORTER_DEVICE uint64_t wgmma_desc(uint64_t desc_template, uint32_t smem_addr) {
    return desc_template | static_cast<uint64_t>((smem_addr & 0x3FFFFu) >> 4);
}

}  // namespace porter

#endif  // PORTER_WGMMA_CUH
