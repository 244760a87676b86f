// A small Hopper GEMM tile for `porter emu run`: C[64 x 64*gridDim.x] = A · Bᵀ, K = 64,
// bf16 inputs (A: M x K row-major, B: N x K row-major, both K-major), fp32 output.
//
// One CTA of one warpgroup (128 threads) per 64-column slice of C:
//   1. thread 0 initialises an mbarrier, arms it with the bytes to expect, and issues two
//      TMA tile loads (A's 64x64 box and this CTA's 64x64 box of B, 128B-swizzled);
//   2. every thread waits on the barrier's phase 0 (try_wait in a C loop);
//   3. the warpgroup runs four wgmma.m64n64k16 (one per 16-wide K step) from shared-memory
//      descriptors, commits and waits;
//   4. each thread stores its 32 accumulator registers (the wgmma D fragment layout).
// Target: sm_90a (wgmma needs the "a" target).

typedef unsigned int u32;
typedef unsigned long long u64;

// The kernel never looks inside a tensor map: 128 opaque bytes, passed by value.
struct alignas(64) TensorMap { unsigned char bytes[128]; };

__device__ static inline u32 smem_u32(const void* p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

// wgmma shared-memory descriptor (PTX ISA "Matrix Descriptor Format"): start address >> 4 in
// bits 0-13, leading byte offset >> 4 in 16-29 (unused for swizzled K-major: 1), stride byte
// offset >> 4 in 32-45 (8 rows x 128 B = 1024 B between core-matrix groups), 128B swizzle in 62-63.
__device__ static inline u64 desc_128b(u32 addr) {
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)1 << 16) | ((u64)(1024 >> 4) << 32) | ((u64)1 << 62);
}

#define ACC8(i) "+f"(acc[i]), "+f"(acc[i + 1]), "+f"(acc[i + 2]), "+f"(acc[i + 3]), \
                "+f"(acc[i + 4]), "+f"(acc[i + 5]), "+f"(acc[i + 6]), "+f"(acc[i + 7])

__device__ static inline void wgmma_m64n64k16(float* acc, u64 da, u64 db, u32 accumulate) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "%32, %33, p, 1, 1, 0, 0;\n}\n"
        : ACC8(0), ACC8(8), ACC8(16), ACC8(24)
        : "l"(da), "l"(db), "r"(accumulate));
}

extern "C" __global__ void __launch_bounds__(128)
tile_gemm(const __grid_constant__ TensorMap map_a, const __grid_constant__ TensorMap map_b, float* c, int ldc) {
    __shared__ alignas(1024) unsigned short a_tile[64 * 64];   // 8 KB, one 128B-swizzle atom per 8 rows
    __shared__ alignas(1024) unsigned short b_tile[64 * 64];
    __shared__ alignas(8) u64 full;
    const int tid = threadIdx.x;
    const u32 bar = smem_u32(&full);

    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
        // make the initialised barrier visible to the async proxy (the TMA unit) before use
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    if (tid == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;"
                     :: "r"(bar), "r"(2 * 64 * 64 * 2) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem_u32(a_tile)), "l"(&map_a), "r"(0), "r"(0), "r"(bar) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {%2, %3}], [%4];"
                     :: "r"(smem_u32(b_tile)), "l"(&map_b), "r"(0), "r"(64 * (int)blockIdx.x), "r"(bar)
                     : "memory");
    }
    u32 ready = 0;
    while (!ready) {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\n"
                     "selp.u32 %0, 1, 0, p;\n}\n" : "=r"(ready) : "r"(bar) : "memory");
    }

    float acc[32];
    for (int i = 0; i < 32; ++i) acc[i] = 0.0f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    for (int kk = 0; kk < 4; ++kk) {   // 16 bf16 = 32 bytes along K per step, inside the swizzle atom
        wgmma_m64n64k16(acc, desc_128b(smem_u32(a_tile) + 32 * kk), desc_128b(smem_u32(b_tile) + 32 * kk), kk > 0);
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");

    // D fragment: acc[4j + {0,1}] at row 16*warp + lane/4, columns 8j + 2*(lane%4) + {0,1};
    // acc[4j + {2,3}] eight rows below.
    const int warp = tid / 32, lane = tid % 32;
    const int row = 16 * warp + lane / 4;
    float* out = c + 64 * blockIdx.x;
    for (int j = 0; j < 8; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        out[row * ldc + col] = acc[4 * j];
        out[row * ldc + col + 1] = acc[4 * j + 1];
        out[(row + 8) * ldc + col] = acc[4 * j + 2];
        out[(row + 8) * ldc + col + 1] = acc[4 * j + 3];
    }
}
