// probe: mma_sync_tf32
// feature: mma_sync
// generation: mma_sync
// kind: tf32
// shows: kind:tf32, mma_sync
// proves: one warp issues mma.sync m16n8k8 tf32 x tf32 -> f32 (A 4 x 32 bit and B 2 x 32
//   bit per lane, fp32 bit patterns the tensor core reads as tf32) into a register
//   accumulator and writes D to global memory.
// denied: mma.sync with tf32 needs sm_80 or newer.

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_tf32(const u32* __restrict__ a, const u32* __restrict__ b, float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    const uint4 af = reinterpret_cast<const uint4*>(a)[lane];
    const uint2 bf = reinterpret_cast<const uint2*>(b)[lane];
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y));
    reinterpret_cast<float4*>(out)[lane] = make_float4(d0, d1, d2, d3);
}
