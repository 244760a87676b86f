// probe: tcgen05_cta_pair
// feature: cta_pair
// also-needs: tcgen05, tmem, clusters
// kind: f16
// shows: kind:f16/pair, op:mma_commit/pair, cta_pair
// proves: a 2-CTA cluster shares one MMA: both CTAs allocate Tensor Memory with
//   cta_group::2, the even CTA's elected thread issues tcgen05.mma cta_group::2 kind::f16
//   (bf16 -> f32, M=256 N=64 K=16: each CTA holds 128 rows of A and half of B), and
//   tcgen05.commit multicasts the completion to the mbarrier of both CTAs; each CTA reads
//   its half of D from its own TMEM and writes it to global memory.
// seen: nvdisasm 13.x (NVRTC 13.x, sm_100a) prints the pair form as an opcode suffix
//   (arch/blackwell.yaml sass_modifiers.pair) on the MMA, on the multicast commit and on
//   tcgen05.alloc.cta_group::2; the dealloc carries none. So ARCH_FACTS' "cta_group::2 =
//   a pair suffix (to verify)" holds for MMA and commit.
// denied: ptxas rejects tcgen05 on targets without it (sm_90a, sm_120a).

typedef unsigned long long u64;
typedef unsigned int u32;

// tcgen05 shared-memory descriptor, no swizzle (16-byte units, version bit 46 = 1).
__device__ static u64 smem_desc(const void* smem, u32 lead_bytes, u32 stride_bytes) {
    u32 addr = (u32)__cvta_generic_to_shared(smem);
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)((lead_bytes >> 4) & 0x3FFF) << 16)
         | ((u64)((stride_bytes >> 4) & 0x3FFF) << 32) | (1ull << 46);
}

__device__ static u32 cluster_rank() {
    u32 r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

__device__ static void cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
probe_tcgen05_cta_pair(const uint4* __restrict__ a, const uint4* __restrict__ b, float* __restrict__ out) {
    // Per CTA: 128 of the 256 rows of A, 32 of the 64 columns of B.
    constexpr u32 M = 256, N = 64, K = 16, COLS = 64;
    constexpr u32 A_VECS = (M / 2) * K * 2 / 16, B_VECS = (N / 2) * K * 2 / 16;
    __shared__ alignas(1024) uint4 sa[A_VECS];
    __shared__ alignas(1024) uint4 sb[B_VECS];
    __shared__ u32 tmem_base;
    __shared__ alignas(8) u64 mma_done;
    const u32 warp = threadIdx.x / 32, rank = cluster_rank();

    for (u32 i = threadIdx.x; i < A_VECS; i += 128) sa[i] = a[rank * A_VECS + i];
    for (u32 i = threadIdx.x; i < B_VECS; i += 128) sb[i] = b[rank * B_VECS + i];
    if (warp == 0) {
        // cta_group::2: one warp in each CTA of the pair allocates, together.
        asm volatile("tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"((u32)__cvta_generic_to_shared(&tmem_base)), "r"(COLS) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;" ::: "memory");
    }
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;"
                     :: "r"((u32)__cvta_generic_to_shared(&mma_done)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    // The peer's operands, barrier and allocation must be ready before the pair MMA.
    cluster_sync();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    const u32 tmem = tmem_base;

    if (rank == 0 && threadIdx.x == 0) {
        // idesc: D f32, A and B bf16, K-major, N >> 3 at bits 17-22, M >> 4 at bits 24-28.
        const u32 idesc = (1u << 4) | (1u << 7) | (1u << 10) | ((N >> 3) << 17) | ((M >> 4) << 24);
        u64 da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %4, 0;\n"
                     "tcgen05.mma.cta_group::2.kind::f16 [%0], %1, %2, %3, acc;\n}\n"
                     :: "r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        // Arrive on the barrier at the same offset in both CTAs (mask 0b11).
        asm volatile("tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%0], %1;"
                     :: "r"((u32)__cvta_generic_to_shared(&mma_done)), "h"((unsigned short)3) : "memory");
    }
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra WAIT_%=;\n}\n"
                 :: "r"((u32)__cvta_generic_to_shared(&mma_done)) : "memory");
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");

    u32 r[8];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
                 : "r"(tmem + ((warp * 32) << 16)));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    for (int j = 0; j < 8; ++j) out[(rank * 128 + threadIdx.x) * 8 + j] = __uint_as_float(r[j]);

    // Neither CTA frees its TMEM while the pair could still touch it.
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    cluster_sync();
    if (warp == 0)
        asm volatile("tcgen05.dealloc.cta_group::2.sync.aligned.b32 %0, %1;" :: "r"(tmem), "r"(COLS) : "memory");
}
