// probe: tcgen05_fp6
// feature: tcgen05
// also-needs: tmem, fp6
// kind: f8f6f4
// sass: ^UTCQMMA
// sass: ^UTCBAR
// proves: one thread issues tcgen05.mma cta_group::1 kind::f8f6f4 with fp6 operands
//   (e2m3 x e3m2 -> f32, M=128 N=64 K=32, one element per byte in shared memory)
//   from shared-memory descriptors into a Tensor Memory accumulator; tcgen05.commit
//   arrives on an mbarrier, a warp per 32 lanes reads D back with tcgen05.ld and writes
//   it to global memory; TMEM is allocated, relinquished and freed by warp 0 in that
//   order.
// note: fp6 is a format field of the instruction descriptor, not an opcode: the SASS is the
//   same UTCQMMA as e4m3, so this shows an fp6 MMA compiles; cvt_fp6 shows the target knows fp6.
// denied: ptxas rejects tcgen05 on targets without it (sm_90a, sm_120a).

typedef unsigned long long u64;
typedef unsigned int u32;

// tcgen05 shared-memory descriptor, no swizzle: start, leading and stride byte offsets
// in 16-byte units (bits 0-13, 16-29, 32-45) and the fixed version field (bit 46 = 1).
__device__ static u64 smem_desc(const void* smem, u32 lead_bytes, u32 stride_bytes) {
    u32 addr = (u32)__cvta_generic_to_shared(smem);
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)((lead_bytes >> 4) & 0x3FFF) << 16)
         | ((u64)((stride_bytes >> 4) & 0x3FFF) << 32) | (1ull << 46);
}

extern "C" __global__ void __launch_bounds__(128)
probe_tcgen05_fp6(const uint4* __restrict__ a, const uint4* __restrict__ b, float* __restrict__ out) {
    constexpr u32 M = 128, N = 64, K = 32, COLS = 64;
    __shared__ alignas(1024) uint4 sa[M * K / 16];   // 128 x 32 fp6, one byte each (unpacked)
    __shared__ alignas(1024) uint4 sb[N * K / 16];   // 64 x 32 fp6, one byte each
    __shared__ u32 tmem_base;
    __shared__ alignas(8) u64 mma_done;
    const u32 warp = threadIdx.x / 32;

    for (u32 i = threadIdx.x; i < M * K / 16; i += 128) sa[i] = a[i];
    for (u32 i = threadIdx.x; i < N * K / 16; i += 128) sb[i] = b[i];
    if (warp == 0) {
        // One warp allocates; the column address lands in shared memory.
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"((u32)__cvta_generic_to_shared(&tmem_base)), "r"(COLS) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    }
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;"
                     :: "r"((u32)__cvta_generic_to_shared(&mma_done)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    const u32 tmem = tmem_base;

    if (threadIdx.x == 0) {
        // Instruction descriptor: D f32 (bits 4-5 = 1), A e2m3 (format 3, bits 7-9),
        // B e3m2 (format 4, bits 10-12), K-major, N >> 3 at 17-22, M >> 4 at 24-28.
        const u32 idesc = (1u << 4) | (3u << 7) | (4u << 10) | ((N >> 3) << 17) | ((M >> 4) << 24);
        u64 da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %4, 0;\n"
                     "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, acc;\n}\n"
                     :: "r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"((u32)__cvta_generic_to_shared(&mma_done)) : "memory");
    }
    // Everyone waits for phase 0 of the MMA barrier.
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra WAIT_%=;\n}\n"
                 :: "r"((u32)__cvta_generic_to_shared(&mma_done)) : "memory");
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");

    // Warp w reads lanes 32w..32w+31 (lane in the address's upper half), 8 columns.
    u32 r[8];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
                 : "r"(tmem + ((warp * 32) << 16)));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    for (int j = 0; j < 8; ++j) out[threadIdx.x * 8 + j] = __uint_as_float(r[j]);

    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0)
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(tmem), "r"(COLS) : "memory");
}
