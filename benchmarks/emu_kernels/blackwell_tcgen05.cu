// A Blackwell GEMM written the way a small public tcgen05 kernel is (a benchmark for
// porter's PTX simulator; written here):
//
//   out[m][n] = sum_k A[m][k] * B[n][k]        (A, B bf16 K-major; out f32; M, N any)
//
// One CTA of 4 warps per 128x64 tile. Warp 0 allocates 64 TMEM columns; thread 0 issues the
// TMA loads (128B swizzle) onto one mbarrier, waits for them (try_wait.parity polled from
// C++), issues four `tcgen05.mma.kind::f16` per 64-wide K step and `tcgen05.commit`s them to
// a second mbarrier it waits on before refilling the stage, while the other warps wait at
// the CTA barrier. Then every warp loads its 32 TMEM lanes (`tcgen05.ld.32x32b.x32`, two
// column halves) and stores the rows inside M (divergent in the tail tile).

typedef unsigned int u32;
typedef unsigned long long u64;

struct alignas(64) TensorMap { unsigned char bytes[128]; };

constexpr int BM = 128, BN = 64, BK = 64;
constexpr u32 A_BYTES = BM * BK * 2, B_BYTES = BN * BK * 2, TMEM_COLS = 64;
// kind::f16 instruction descriptor: D f32 (bits 4-5), A and B bf16 (7-9, 10-12), both
// K-major, N >> 3 (17-22), M >> 4 (24-28).
constexpr u32 IDESC = (1u << 4) | (1u << 7) | (1u << 10) | ((BN >> 3) << 17) | ((BM >> 4) << 24);

__device__ __forceinline__ u32 smem_addr(const void *p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void wait_parity(u32 bar, u32 parity) {
    u32 ok = 0;
    while (!ok)
        asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                     : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
}

__device__ __forceinline__ void tma_load(u32 dst, const TensorMap *map, u32 bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// Blackwell shared-memory descriptor, K-major 128B swizzle: SBO 1024 B, LBO 16 B, fixed
// 0b001 at bits 46-48, swizzle code 2 at bits 61-63.
__device__ __forceinline__ u64 sdesc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 46) |
           ((u64)2 << 61);
}

__device__ __forceinline__ void tmem_ld32(u32 (&r)[32], u32 taddr) {
    asm volatile(
        "tcgen05.ld.sync.aligned.32x32b.x32.b32 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, [%32];"
        : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7]),
          "=r"(r[8]), "=r"(r[9]), "=r"(r[10]), "=r"(r[11]), "=r"(r[12]), "=r"(r[13]), "=r"(r[14]), "=r"(r[15]),
          "=r"(r[16]), "=r"(r[17]), "=r"(r[18]), "=r"(r[19]), "=r"(r[20]), "=r"(r[21]), "=r"(r[22]), "=r"(r[23]),
          "=r"(r[24]), "=r"(r[25]), "=r"(r[26]), "=r"(r[27]), "=r"(r[28]), "=r"(r[29]), "=r"(r[30]), "=r"(r[31])
        : "r"(taddr));
}

// (no __launch_bounds__: NVRTC writes it as a one-value `.maxntid 128`, which simulators of
// before 2026-12-01 refuse; the benchmark compares against those.)
extern "C" __global__ void
gemm_tcgen05(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, float *out,
             int M, int N, int K) {
    __shared__ alignas(1024) unsigned char sa[A_BYTES];
    __shared__ alignas(1024) unsigned char sb[B_BYTES];
    __shared__ alignas(8) u64 full, done;
    __shared__ u32 tmem_base;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const u32 full_bar = smem_addr(&full), done_bar = smem_addr(&done);

    if (warp == 0) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"(smem_addr(&tmem_base)), "r"(TMEM_COLS) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    }
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(full_bar) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(done_bar) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    const u32 taddr = tmem_base;

    if (tid == 0) {
        for (int k0 = 0, step = 0; k0 < K; k0 += BK, ++step) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                         :: "r"(full_bar), "r"(A_BYTES + B_BYTES) : "memory");
            tma_load(smem_addr(sa), &map_a, full_bar, k0, m0);
            tma_load(smem_addr(sb), &map_b, full_bar, k0, n0);
            wait_parity(full_bar, step & 1);
            asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
            for (int kk = 0; kk < BK / 16; ++kk) {
                const u32 accumulate = (k0 > 0 || kk > 0) ? 1u : 0u;
                asm volatile("{\n .reg .pred p;\n setp.ne.b32 p, %4, 0;\n"
                             "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p;\n}"
                             :: "r"(taddr), "l"(sdesc(smem_addr(sa)) + 2 * kk), "l"(sdesc(smem_addr(sb)) + 2 * kk),
                                "r"(IDESC), "r"(accumulate) : "memory");
            }
            asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                         :: "r"(done_bar) : "memory");
            wait_parity(done_bar, step & 1);     // the MMAs read the stage before it is refilled
        }
    }
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");

    const int row = m0 + 32 * warp + lane;     // TMEM lane = row of the tile
    for (int half = 0; half < 2; ++half) {
        u32 v[32];
        tmem_ld32(v, taddr + ((u32)(32 * warp) << 16) + 32 * half);
        asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
        if (row < M)
            for (int c = 0; c < 32; ++c) {
                const int col = n0 + 32 * half + c;
                if (col < N)
                    out[row * N + col] = __uint_as_float(v[c]);
            }
    }
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0) {
        asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(taddr), "r"(TMEM_COLS) : "memory");
    }
}
