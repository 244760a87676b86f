// A Hopper GEMM written the way a public hand-written kernel is, not the way porter's
// generator writes one (a benchmark for porter's PTX simulator; written here):
//
//   out[m][n] = alpha * sum_k A[m][k] * B[n][k] + bias[n]      (A, B bf16 K-major; out f32)
//
// * one warpgroup per 64x64 tile, every thread of the CTA both waits for and consumes the
//   operands (no warp specialisation);
// * TMA tile loads (128B swizzle) onto one mbarrier whose phases every thread joins with
//   `mbarrier.arrive` and waits on with the *state token* it returned (cuda::barrier style,
//   try_wait polled from C++), thread 0 adding the transaction bytes before it issues the
//   copies;
// * wgmma m64n64k16 from shared-memory descriptors, fence / commit / wait_group;
// * an epilogue reading its parameters through a pointer loaded from memory (generic
//   loads), with a bounds check per element that diverges in the tail tiles.

typedef unsigned int u32;
typedef unsigned long long u64;

struct alignas(64) TensorMap { unsigned char bytes[128]; };
struct Epilogue { const float *bias; float alpha; int ldo; };

constexpr int BM = 64, BN = 64, BK = 64;
constexpr u32 TILE_BYTES = BM * BK * 2;

__device__ __forceinline__ u32 smem_addr(const void *p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ u64 arrive(u32 bar, u32 tx) {
    u64 token;
    if (tx)
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 %0, [%1], %2;" : "=l"(token) : "r"(bar), "r"(tx) : "memory");
    else
        asm volatile("mbarrier.arrive.shared::cta.b64 %0, [%1];" : "=l"(token) : "r"(bar) : "memory");
    return token;
}

__device__ __forceinline__ bool try_wait(u32 bar, u64 token) {
    u32 ok;
    asm volatile("{\n .reg .pred p;\n mbarrier.try_wait.shared::cta.b64 p, [%1], %2;\n selp.u32 %0, 1, 0, p;\n}"
                 : "=r"(ok) : "r"(bar), "l"(token) : "memory");
    return ok != 0;
}

__device__ __forceinline__ void tma_load(u32 dst, const TensorMap *map, u32 bar, int c0, int c1) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
                 :: "r"(dst), "l"(reinterpret_cast<u64>(map)), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// K-major, 128B swizzle: 8 rows of 128 B per 1024-byte atom (SBO), LBO unused (1).
__device__ __forceinline__ u64 desc(u32 addr) {
    return (u64)((addr & 0x3FFFF) >> 4) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

__device__ __forceinline__ void wgmma_64x64x16(float (&d)[32], u64 da, u64 db, u32 accumulate) {
    asm volatile(
        "{\n .reg .pred p;\n setp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(accumulate));
}

extern "C" __global__ void __launch_bounds__(128)
gemm_tma_wgmma(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b,
               float *out, const Epilogue *epi, int M, int N, int K) {
    __shared__ alignas(1024) unsigned char sa[TILE_BYTES];
    __shared__ alignas(1024) unsigned char sb[TILE_BYTES];
    __shared__ alignas(8) u64 full;
    const int tid = threadIdx.x;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const u32 bar = smem_addr(&full);
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(blockDim.x) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();

    float acc[32];
    for (int i = 0; i < 32; ++i) acc[i] = 0.f;
    for (int k0 = 0; k0 < K; k0 += BK) {
        // Every thread joins the phase before the copies are issued, so the phase ends on
        // the copies' bytes, and each thread waits on its own token.
        const u64 token = arrive(bar, tid == 0 ? 2 * TILE_BYTES : 0);
        __syncthreads();
        if (tid == 0) {
            tma_load(smem_addr(sa), &map_a, bar, k0, m0);
            tma_load(smem_addr(sb), &map_b, bar, k0, n0);
        }
        while (!try_wait(bar, token)) {
        }
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        for (int kk = 0; kk < BK / 16; ++kk)
            wgmma_64x64x16(acc, desc(smem_addr(sa)) + 2 * kk, desc(smem_addr(sb)) + 2 * kk, (k0 > 0 || kk > 0) ? 1u : 0u);
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
        __syncthreads();                       // the tile is read before the next copy lands
    }

    // Epilogue: D fragment of warp w, lane l: rows 16w + l/4 (+8), columns 8j + 2(l%4) (+1).
    const float *bias = epi->bias;             // a pointer loaded from memory: generic loads
    const float alpha = epi->alpha;
    const int ldo = epi->ldo;
    const int warp = tid / 32, lane = tid % 32;
    for (int i = 0; i < 32; ++i) {
        const int row = m0 + 16 * warp + lane / 4 + ((i & 2) ? 8 : 0);
        const int col = n0 + 8 * (i / 4) + 2 * (lane % 4) + (i & 1);
        if (row < M && col < N)
            out[row * ldo + col] = alpha * acc[i] + bias[col];
    }
}
