// probe: tcgen05_f8f6f4
// feature: tcgen05
// also-needs: tmem, fp8
// kind: f8f6f4
// shows: kind:f8f6f4, op:mma_commit, fp8
// proves: one thread issues tcgen05.mma cta_group::1 kind::f8f6f4 (e4m3 x e4m3 -> f32,
//   M=128 N=64 K=32) from shared-memory descriptors into a Tensor Memory accumulator,
//   tcgen05.commit arrives on an mbarrier, a warp per 32 lanes reads D back with
//   tcgen05.ld and writes it to global memory; TMEM is allocated, relinquished and
//   freed by warp 0 in that order.
// denied: ptxas rejects tcgen05 on targets without it (sm_90a, sm_120a).

#include "tcgen05_probe.cuh"

extern "C" __global__ void __launch_bounds__(128)
probe_tcgen05_f8f6f4(const uint4* __restrict__ a, const uint4* __restrict__ b, float* __restrict__ out) {
    constexpr u32 M = 128, N = 64, K = 32, COLS = 64;
    __shared__ alignas(1024) uint4 sa[M * K / 16];   // 128 x 32 e4m3
    __shared__ alignas(1024) uint4 sb[N * K / 16];   // 64 x 32 e4m3
    __shared__ u32 tmem_base;
    __shared__ alignas(8) u64 mma_done;

    for (u32 i = threadIdx.x; i < M * K / 16; i += 128) sa[i] = a[i];
    for (u32 i = threadIdx.x; i < N * K / 16; i += 128) sb[i] = b[i];
    const u32 tmem = probe_setup(&tmem_base, &mma_done, COLS);

    if (threadIdx.x == 0) {
        // Instruction descriptor: D f32 (bits 4-5 = 1), A and B e4m3 (format 0 in bits
        // 7-9 and 10-12), both K-major, N >> 3 at bits 17-22, M >> 4 at bits 24-28.
        const u32 idesc = (1u << 4) | (0u << 7) | (0u << 10) | ((N >> 3) << 17) | ((M >> 4) << 24);
        u64 da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %4, 0;\n"
                     "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, acc;\n}\n"
                     :: "r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        probe_commit(&mma_done);
    }
    probe_store_accumulator(tmem, &mma_done, out);
    probe_teardown(tmem, COLS);
}
