// probe: mbarrier
// feature: mbarrier
// shows: op:mbarrier_init, op:mbarrier_arrive_tx, op:mbarrier_wait
// proves: a shared-memory mbarrier as pipelines use it: one thread initialises it for
//   all 128 threads, each thread arrives and then polls try_wait.parity until the
//   phase completes; data staged before the arrive is read after the wait.
// denied: mbarrier with try_wait needs sm_90 or newer.

typedef unsigned long long u64;
typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(128)
probe_mbarrier(const float* __restrict__ in, float* __restrict__ out) {
    __shared__ alignas(8) u64 bar_storage;
    __shared__ float staged[128];
    const u32 bar = (u32)__cvta_generic_to_shared(&bar_storage);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(128u) : "memory");
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    staged[threadIdx.x] = in[threadIdx.x] * 2.0f;
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra WAIT_%=;\n}\n" :: "r"(bar) : "memory");
    // Every thread's store happened before its arrive, so the neighbour's value is there.
    out[threadIdx.x] = staged[(threadIdx.x + 1) % 128];
}
