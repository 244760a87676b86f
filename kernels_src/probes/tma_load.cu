// probe: tma_load
// feature: tma
// also-needs: mbarrier
// shows: op:tma_load, op:mbarrier_arrive_tx, op:mbarrier_wait
// proves: a 2-D TMA tensor load: the kernel takes a 128-byte tensor map as a
//   __grid_constant__ parameter (built on the host by cuTensorMapEncodeTiled), one thread
//   arms an mbarrier with the expected byte count and issues cp.async.bulk.tensor.2d,
//   every thread waits on the barrier phase, then the tile is copied to global memory.
// denied: TMA and transaction-count mbarriers need sm_90 or newer.

typedef unsigned long long u64;
typedef unsigned int u32;

// The driver's CUtensorMap is an opaque, 64-byte aligned 128-byte object.
struct alignas(64) TensorMap { u64 opaque[16]; };

extern "C" __global__ void __launch_bounds__(128)
probe_tma_load(const __grid_constant__ TensorMap tmap, float* __restrict__ out, int x0, int y0) {
    constexpr u32 BOX_W = 32, BOX_H = 16, BYTES = BOX_W * BOX_H * 4;
    __shared__ alignas(128) float tile[BOX_H * BOX_W];
    __shared__ alignas(8) u64 full;
    const u32 bar = (u32)__cvta_generic_to_shared(&full);
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar) : "memory");
        // Make the initialised barrier visible to the async proxy that TMA completes on.
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(BYTES) : "memory");
        asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes "
                     "[%0], [%1, {%2, %3}], [%4];"
                     :: "r"((u32)__cvta_generic_to_shared(tile)), "l"(&tmap), "r"(x0), "r"(y0), "r"(bar)
                     : "memory");
    }
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], 0;\n"
                 "@!done bra WAIT_%=;\n}\n" :: "r"(bar) : "memory");
    for (u32 i = threadIdx.x; i < BOX_H * BOX_W; i += 128) out[i] = tile[i];
}
