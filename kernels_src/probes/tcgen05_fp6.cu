// probe: tcgen05_fp6
// feature: tcgen05
// also-needs: tmem, fp6
// kind: f8f6f4
// shows: kind:f8f6f4, op:mma_commit, fp6
// proves: the kind::f8f6f4 tcgen05.mma form that takes fp6 operands compiles and
//   assembles (e2m3 x e3m2 -> f32, M=128 N=64 K=32, one element per byte in shared
//   memory), issued by one thread into a Tensor Memory accumulator and read back with
//   tcgen05.ld. Compile-only for fp6 itself: the operand formats are fields of the
//   runtime instruction descriptor, so the SASS cannot tell fp6 from e4m3.
// note: fp6 is a format field of the instruction descriptor, not an opcode: the SASS is the
//   same opcode as e4m3, so this shows an fp6 MMA compiles; cvt_fp6 shows the target knows fp6.
// denied: ptxas rejects tcgen05 on targets without it (sm_90a, sm_120a).

#include "tcgen05_probe.cuh"

extern "C" __global__ void __launch_bounds__(128)
probe_tcgen05_fp6(const uint4* __restrict__ a, const uint4* __restrict__ b, float* __restrict__ out) {
    constexpr u32 M = 128, N = 64, K = 32, COLS = 64;
    __shared__ alignas(1024) uint4 sa[M * K / 16];   // 128 x 32 fp6, one byte each (unpacked)
    __shared__ alignas(1024) uint4 sb[N * K / 16];   // 64 x 32 fp6, one byte each
    __shared__ u32 tmem_base;
    __shared__ alignas(8) u64 mma_done;

    for (u32 i = threadIdx.x; i < M * K / 16; i += 128) sa[i] = a[i];
    for (u32 i = threadIdx.x; i < N * K / 16; i += 128) sb[i] = b[i];
    const u32 tmem = probe_setup(&tmem_base, &mma_done, COLS);

    if (threadIdx.x == 0) {
        // Instruction descriptor: D f32 (bits 4-5 = 1), A e2m3 (format 3, bits 7-9),
        // B e3m2 (format 4, bits 10-12), K-major, N >> 3 at 17-22, M >> 4 at 24-28.
        const u32 idesc = (1u << 4) | (3u << 7) | (4u << 10) | ((N >> 3) << 17) | ((M >> 4) << 24);
        u64 da = smem_desc(sa, 128, 256), db = smem_desc(sb, 128, 256);
        asm volatile("{\n.reg .pred acc;\nsetp.ne.b32 acc, %4, 0;\n"
                     "tcgen05.mma.cta_group::1.kind::f8f6f4 [%0], %1, %2, %3, acc;\n}\n"
                     :: "r"(tmem), "l"(da), "l"(db), "r"(idesc), "r"(0) : "memory");
        probe_commit(&mma_done);
    }
    probe_store_accumulator(tmem, &mma_done, out);
    probe_teardown(tmem, COLS);
}
