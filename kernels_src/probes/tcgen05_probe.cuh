// Shared scaffolding of the single-CTA tcgen05 probes (porter.probes inlines this file
// where a probe writes #include "tcgen05_probe.cuh", so each compiled probe stays one
// self-contained source). The probes keep in their own file only what they prove: the
// operands, the instruction descriptor and the tcgen05.mma form.
//
// The life of a probe CTA (128 threads): warp 0 allocates TMEM and gives up the
// allocation permit; thread 0 initialises the MMA-done mbarrier; after the fences
// every thread sees the TMEM base; thread 0 issues the MMA(s) and tcgen05.commit;
// everyone waits for phase 0; warp w reads lanes 32w..32w+31 with tcgen05.ld and
// stores them to global memory; warp 0 frees TMEM.

typedef unsigned long long u64;
typedef unsigned int u32;

__device__ static u32 smem_addr(const void* p) { return (u32)__cvta_generic_to_shared(p); }

// tcgen05 shared-memory descriptor, no swizzle: start, leading and stride byte offsets
// in 16-byte units (bits 0-13, 16-29, 32-45) and the fixed version field (bit 46 = 1).
__device__ static u64 smem_desc(const void* smem, u32 lead_bytes, u32 stride_bytes) {
    u32 addr = smem_addr(smem);
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)((lead_bytes >> 4) & 0x3FFF) << 16)
         | ((u64)((stride_bytes >> 4) & 0x3FFF) << 32) | (1ull << 46);
}

// Warp 0 allocates `cols` TMEM columns (the base lands in *slot), thread 0 initialises
// the barrier; then the fences make both visible to every thread. Returns the TMEM base.
__device__ static u32 probe_setup(u32* slot, u64* mma_done, u32 cols) {
    if (threadIdx.x / 32 == 0) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"(smem_addr(slot)), "r"(cols) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    }
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_addr(mma_done)) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    // Operands were written to shared memory with ordinary stores: make them visible to
    // the async proxy the tensor core reads through.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    return *slot;
}

// tcgen05.commit: the barrier's phase completes when the MMAs issued before it finish.
__device__ static void probe_commit(u64* mma_done) {
    asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                 :: "r"(smem_addr(mma_done)) : "memory");
}

// Every thread waits for phase 0, reads its lane's first 8 columns and stores them.
__device__ static void probe_store_accumulator(u32 tmem, u64* mma_done, float* out) {
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra WAIT_%=;\n}\n"
                 :: "r"(smem_addr(mma_done)) : "memory");
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    // Warp w may only touch TMEM lanes 32w..32w+31 (lane in the address's upper half).
    const u32 warp = threadIdx.x / 32;
    u32 r[8];
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x8.b32 {%0,%1,%2,%3,%4,%5,%6,%7}, [%8];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]), "=r"(r[4]), "=r"(r[5]), "=r"(r[6]), "=r"(r[7])
                 : "r"(tmem + ((warp * 32) << 16)));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    for (int j = 0; j < 8; ++j) out[threadIdx.x * 8 + j] = __uint_as_float(r[j]);
}

// Warp 0 frees the columns it allocated, after every warp's tcgen05.ld.
__device__ static void probe_teardown(u32 tmem, u32 cols) {
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (threadIdx.x / 32 == 0)
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(tmem), "r"(cols) : "memory");
}
