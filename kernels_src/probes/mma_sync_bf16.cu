// probe: mma_sync_bf16
// feature: mma_sync
// generation: mma_sync
// kind: f16
// shows: kind:f16, mma_sync
// proves: the warp-level tensor core of sm_80: one warp issues mma.sync m16n8k16
//   bf16 x bf16 -> f32 twice into the same register accumulator (A, B, C and D in
//   registers, each lane holding its fragment), then writes D to global memory.
// note: PTX keeps mma.sync on every later target (sm_90a, sm_100a, sm_120a), so this
//   probe compiles there too; only on an arch whose own tensor core is mma.sync does
//   it judge the claim.
// denied: mma.sync with bf16 needs sm_80 or newer.

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_bf16(const u32* __restrict__ a, const u32* __restrict__ b, float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    // Per lane: A fragment 4 x 32 bit (16x16 bf16 over the warp), B fragment
    // 2 x 32 bit (16x8), D fragment 4 f32 (16x8 over the warp). Two K steps.
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    for (int step = 0; step < 2; ++step) {
        const uint4 af = reinterpret_cast<const uint4*>(a)[step * 32 + lane];
        const uint2 bf = reinterpret_cast<const uint2*>(b)[step * 32 + lane];
        asm volatile(
            "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
            "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
            : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
            : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y));
    }
    reinterpret_cast<float4*>(out)[lane] = make_float4(d0, d1, d2, d3);
}
