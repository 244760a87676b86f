// probe: tcgen05_mxf8f6f4
// feature: block_scale_mx
// also-needs: tcgen05, tmem, fp8
// kind: mxf8f6f4
// shows: kind:mxf8f6f4, op:tmem_copy, kind:mxf8f6f4/scale_operands
// note: block scaling shows in the operands, not the opcode: the block-scaled MMA carries
//   Tensor Memory scale operands after the idesc (sass_modifiers.scale_operands); plain
//   kind::f8f6f4 has none.
// proves: block-scaled MMA as an MX GEMM issues it: ue8m0 scale factors (one per 32
//   elements along K) are staged shared -> Tensor Memory with tcgen05.cp, then one thread
//   issues tcgen05.mma cta_group::1 kind::mxf8f6f4.block_scale.scale_vec::1X
//   (e4m3 x e4m3 -> f32, M=128 N=64 K=32) reading those scales from TMEM; the result is
//   read back with tcgen05.ld and written to global memory.
// denied: ptxas rejects tcgen05 on targets without it (sm_90a, sm_120a).

#include "tcgen05_probe.cuh"

extern "C" __global__ void __launch_bounds__(128)
probe_tcgen05_mxf8f6f4(const uint4* __restrict__ a, const uint4* __restrict__ b,
                       const uint4* __restrict__ scales, float* __restrict__ out) {
    constexpr u32 M = 128, N = 64, K = 32, COLS = 128;
    // TMEM columns: D in 0..63, A scales at 64, B scales at 68.
    constexpr u32 SFA_COL = 64, SFB_COL = 68;
    __shared__ alignas(1024) uint4 sa[M * K / 16];      // 128 x 32 e4m3
    __shared__ alignas(1024) uint4 sb[N * K / 16];      // 64 x 32 e4m3
    __shared__ alignas(128) uint4 sfa[32], sfb[32];     // 32 rows x 16 B of ue8m0 each
    __shared__ u32 tmem_base;
    __shared__ alignas(8) u64 mma_done;

    for (u32 i = threadIdx.x; i < M * K / 16; i += 128) sa[i] = a[i];
    for (u32 i = threadIdx.x; i < N * K / 16; i += 128) sb[i] = b[i];
    if (threadIdx.x < 32) sfa[threadIdx.x] = scales[threadIdx.x];
    else if (threadIdx.x < 64) sfb[threadIdx.x - 32] = scales[threadIdx.x];
    const u32 tmem = probe_setup(&tmem_base, &mma_done, COLS);

    if (threadIdx.x == 0) {
        // Scale factors: 32 rows x 128 bit copied to each of the four 32-lane quarters
        // (warpx4), so all 128 lanes of the accumulator see their row's scale.
        asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;"
                     :: "r"(tmem + SFA_COL), "l"(smem_desc(sfa, 16, 128)) : "memory");
        asm volatile("tcgen05.cp.cta_group::1.32x128b.warpx4 [%0], %1;"
                     :: "r"(tmem + SFB_COL), "l"(smem_desc(sfb, 16, 128)) : "memory");
        // Block-scaled idesc: D is always f32; A and B e4m3 (format 0 at bits 7-9, 10-12),
        // K-major, N >> 3 at bits 17-22, scale type ue8m0 (bit 23 = 1), M >> 4 at 24-28.
        const u32 idesc = (0u << 7) | (0u << 10) | ((N >> 3) << 17) | (1u << 23) | ((M >> 4) << 24);
        u64 da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        // tcgen05.cp and tcgen05.mma issued by one thread execute in issue order.
        asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %6, 0;\n"
                     "tcgen05.mma.cta_group::1.kind::mxf8f6f4.block_scale.scale_vec::1X "
                     "[%0], %1, %2, %3, [%4], [%5], acc;\n}\n"
                     :: "r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(tmem + SFA_COL),
                        "r"(tmem + SFB_COL), "r"(0) : "memory");
        probe_commit(&mma_done);
    }
    probe_store_accumulator(tmem, &mma_done, out);
    probe_teardown(tmem, COLS);
}
