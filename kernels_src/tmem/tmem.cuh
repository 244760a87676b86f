// porter Tensor Memory primitives (PTX ISA 9.7.16.1 "Tensor Memory", 9.7.16.7
// tcgen05.alloc / dealloc / relinquish_alloc_permit, 9.7.16.8 tcgen05.ld / wait).
//
// TMEM is 128 lanes x 512 columns of 32-bit cells per SM; an address is
// (lane << 16) | column. One whole warp allocates a power-of-two number of columns
// (32..512) and gets the base address written to shared memory; the same warp frees it
// before the CTA exits. With cta_group::2 one warp in EACH CTA of the pair runs the same
// alloc / dealloc and both CTAs get the same columns.
//
// Access rule (9.7.16.8.1): warp w of a warpgroup may only tcgen05.ld/st lanes
// 32*(w % 4) .. 32*(w % 4)+31, so an epilogue warp reads the accumulator rows of its
// lane quarter: address = base + ((32 * (warp % 4)) << 16) + column.
#ifndef PORTER_TMEM_CUH
#define PORTER_TMEM_CUH

#ifndef PORTER_TCGEN05_CUH
#error "include tcgen05/tcgen05.cuh first (it fixes the kernel's cta_group)"
#endif

namespace porter {
namespace tmem {

// Whole warp, converged. `dst_smem`: .shared::cta address of a uint32_t that receives the
// base address; read it after a thread sync preceded by tc::fence_before_thread_sync and
// followed by tc::fence_after_thread_sync.
PORTER_DEVICE void alloc(uint32_t dst_smem, uint32_t columns) {
    asm volatile("tcgen05.alloc" PORTER_TC_CG ".sync.aligned.shared::cta.b32 [%0], %1;"
                 :: "r"(dst_smem), "r"(columns) : "memory");
}
// Give up the right to allocate again, so a co-resident CTA that waits in alloc can go on
// as soon as this CTA deallocates (whole warp).
PORTER_DEVICE void relinquish_alloc_permit() {
    asm volatile("tcgen05.relinquish_alloc_permit" PORTER_TC_CG ".sync.aligned;" ::: "memory");
}
// Whole warp; every tcgen05.ld/mma on the columns must have completed (fence + sync).
PORTER_DEVICE void dealloc(uint32_t base, uint32_t columns) {
    asm volatile("tcgen05.dealloc" PORTER_TC_CG ".sync.aligned.b32 %0, %1;"
                 :: "r"(base), "r"(columns) : "memory");
}

// 32 lanes x 32 consecutive 32-bit columns: thread t of the warp gets lane (addr.lane + t),
// columns addr.col .. addr.col+31 in v[0..31] (shape .32x32b, .x32; 9.7.16.2.3.1.1).
// Asynchronous: registers are valid only after wait_ld().
PORTER_DEVICE void ld_32x32b_x32(uint32_t taddr, uint32_t (&v)[32]) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32"
        " { %0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15,"
        " %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
        : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]), "=r"(v[4]), "=r"(v[5]), "=r"(v[6]), "=r"(v[7]),
          "=r"(v[8]), "=r"(v[9]), "=r"(v[10]), "=r"(v[11]), "=r"(v[12]), "=r"(v[13]), "=r"(v[14]), "=r"(v[15]),
          "=r"(v[16]), "=r"(v[17]), "=r"(v[18]), "=r"(v[19]), "=r"(v[20]), "=r"(v[21]), "=r"(v[22]), "=r"(v[23]),
          "=r"(v[24]), "=r"(v[25]), "=r"(v[26]), "=r"(v[27]), "=r"(v[28]), "=r"(v[29]), "=r"(v[30]), "=r"(v[31])
        : "r"(taddr));
}
// Wait for all of this thread's outstanding tcgen05.ld (9.7.16.8.5).
PORTER_DEVICE void wait_ld() {
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
}
// The same wait, with the loaded registers as in-out operands: the compiler sees every use
// of v depend on the wait and cannot hoist arithmetic on v above it (the ld's asm outputs
// alone would let it do that, reading registers the TMEM load has not filled yet).
PORTER_DEVICE void wait_ld(uint32_t (&v)[32]) {
    asm volatile("tcgen05.wait::ld.sync.aligned;"
        : "+r"(v[0]), "+r"(v[1]), "+r"(v[2]), "+r"(v[3]), "+r"(v[4]), "+r"(v[5]), "+r"(v[6]), "+r"(v[7]),
          "+r"(v[8]), "+r"(v[9]), "+r"(v[10]), "+r"(v[11]), "+r"(v[12]), "+r"(v[13]), "+r"(v[14]), "+r"(v[15]),
          "+r"(v[16]), "+r"(v[17]), "+r"(v[18]), "+r"(v[19]), "+r"(v[20]), "+r"(v[21]), "+r"(v[22]), "+r"(v[23]),
          "+r"(v[24]), "+r"(v[25]), "+r"(v[26]), "+r"(v[27]), "+r"(v[28]), "+r"(v[29]), "+r"(v[30]), "+r"(v[31])
        :: "memory");
}

// TMEM address of (lane, column) relative to an allocation base.
PORTER_DEVICE uint32_t addr(uint32_t base, uint32_t lane, uint32_t column) {
    return base + (lane << 16) + column;
}

}  // namespace tmem
}  // namespace porter

#endif  // PORTER_TMEM_CUH
