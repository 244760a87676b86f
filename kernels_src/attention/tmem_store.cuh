// porter attention: registers -> Tensor Memory (PTX ISA 9.7.16.8.3 tcgen05.st,
// 9.7.16.8.5 tcgen05.wait::st). The GEMM primitives in tmem/ only read TMEM (an
// epilogue never writes it back); attention writes P and the rescaled O into TMEM, so
// the store lives here.
//
// Shape .32x32b: thread t of the warp writes lane (addr.lane + t), 32-bit columns
// addr.col .. addr.col + 31 from v[0..31]. Same access rule as tcgen05.ld: warp w of
// a warpgroup may only touch lanes 32*(w % 4) .. +31.
#ifndef PORTER_ATTENTION_TMEM_STORE_CUH
#define PORTER_ATTENTION_TMEM_STORE_CUH

#ifndef PORTER_TMEM_CUH
#error "include tmem/tmem.cuh first (it fixes the TMEM conventions this file extends)"
#endif

namespace porter {
namespace tmem {

// Asynchronous: the registers may be reused at once (their values were captured), but
// TMEM holds them only after wait_st(); a tcgen05.mma reading them must also be ordered
// after it with fence_before_thread_sync + a thread sync + fence_after_thread_sync.
PORTER_DEVICE void st_32x32b_x32(uint32_t taddr, const uint32_t (&v)[32]) {
    asm volatile(
        "tcgen05.st.sync.aligned.32x32b.x32.b32 [%0],"
        " { %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16,"
        " %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32};"
        :: "r"(taddr),
           "r"(v[0]), "r"(v[1]), "r"(v[2]), "r"(v[3]), "r"(v[4]), "r"(v[5]), "r"(v[6]), "r"(v[7]),
           "r"(v[8]), "r"(v[9]), "r"(v[10]), "r"(v[11]), "r"(v[12]), "r"(v[13]), "r"(v[14]), "r"(v[15]),
           "r"(v[16]), "r"(v[17]), "r"(v[18]), "r"(v[19]), "r"(v[20]), "r"(v[21]), "r"(v[22]), "r"(v[23]),
           "r"(v[24]), "r"(v[25]), "r"(v[26]), "r"(v[27]), "r"(v[28]), "r"(v[29]), "r"(v[30]), "r"(v[31])
        : "memory");
}

// Wait for all of this thread's outstanding tcgen05.st (whole warp).
PORTER_DEVICE void wait_st() {
    asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
}

}  // namespace tmem
}  // namespace porter

#endif  // PORTER_ATTENTION_TMEM_STORE_CUH
