// probe: tcgen05_f16
// feature: tcgen05
// also-needs: tmem
// kind: f16
// shows: kind:f16, op:mma_commit
// proves: one thread issues tcgen05.mma cta_group::1 kind::f16 (bf16 x bf16 -> f32,
//   M=128 N=64 K=16) from shared-memory descriptors into a Tensor Memory accumulator,
//   tcgen05.commit arrives on an mbarrier, a warp per 32 lanes reads D back with
//   tcgen05.ld and writes it to global memory; TMEM is allocated, relinquished and
//   freed by warp 0 in that order.
// denied: ptxas rejects tcgen05 on targets without it (sm_90a, sm_120a).

#include "tcgen05_probe.cuh"

extern "C" __global__ void __launch_bounds__(128)
probe_tcgen05_f16(const uint4* __restrict__ a, const uint4* __restrict__ b, float* __restrict__ out) {
    constexpr u32 M = 128, N = 64, K = 16, COLS = 64;
    __shared__ alignas(1024) uint4 sa[M * K * 2 / 16];   // 128 x 16 bf16
    __shared__ alignas(1024) uint4 sb[N * K * 2 / 16];   // 64 x 16 bf16
    __shared__ u32 tmem_base;
    __shared__ alignas(8) u64 mma_done;

    for (u32 i = threadIdx.x; i < M * K * 2 / 16; i += 128) sa[i] = a[i];
    for (u32 i = threadIdx.x; i < N * K * 2 / 16; i += 128) sb[i] = b[i];
    const u32 tmem = probe_setup(&tmem_base, &mma_done, COLS);

    if (threadIdx.x == 0) {
        // Instruction descriptor: D f32 (bits 4-5 = 1), A and B bf16 (bits 7-9, 10-12 = 1),
        // both K-major, N >> 3 at bits 17-22, M >> 4 at bits 24-28.
        const u32 idesc = (1u << 4) | (1u << 7) | (1u << 10) | ((N >> 3) << 17) | ((M >> 4) << 24);
        u64 da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %4, 0;\n"
                     "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, acc;\n}\n"
                     :: "r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        probe_commit(&mma_done);
    }
    probe_store_accumulator(tmem, &mma_done, out);
    probe_teardown(tmem, COLS);
}
