// probe: tmem_ld_st
// feature: tmem
// also-needs: tcgen05
// shows: op:tmem_alloc, op:tmem_dealloc, op:tmem_store, op:tmem_load
// proves: Tensor Memory as storage: warp 0 allocates 32 columns (tcgen05.alloc writes
//   the base address to shared memory) and gives up the allocation permit, every warp
//   stores its 32 lanes x 4 columns with tcgen05.st, reads them back with tcgen05.ld
//   (each followed by its wait), and writes them to global memory; warp 0 frees the
//   columns after a fenced barrier.
// denied: ptxas rejects tcgen05 (and so TMEM) on targets without it (sm_90a, sm_120a).

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(128)
probe_tmem_ld_st(const u32* __restrict__ in, u32* __restrict__ out) {
    constexpr u32 COLS = 32;   // the smallest allocation: a power of two >= 32
    __shared__ u32 tmem_base;
    const u32 warp = threadIdx.x / 32;
    if (warp == 0) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], %1;"
                     :: "r"((u32)__cvta_generic_to_shared(&tmem_base)), "r"(COLS) : "memory");
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;" ::: "memory");
    }
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    // Lane field (upper 16 bits) selects the warp's 32-lane quarter.
    const u32 taddr = tmem_base + ((warp * 32) << 16);

    const uint4 v = reinterpret_cast<const uint4*>(in)[threadIdx.x];
    asm volatile("tcgen05.st.sync.aligned.32x32b.x4.b32 [%0], {%1, %2, %3, %4};"
                 :: "r"(taddr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w) : "memory");
    asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
    uint4 w;
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(w.x), "=r"(w.y), "=r"(w.z), "=r"(w.w) : "r"(taddr) : "memory");
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    reinterpret_cast<uint4*>(out)[threadIdx.x] = w;

    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0)
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, %1;" :: "r"(tmem_base), "r"(COLS) : "memory");
}
