// probe: mma_sync_f8f6f4
// feature: fp8
// generation: mma_sync
// kind: f8f6f4
// shows: kind:f8f6f4, fp8, kind:f16
// proves: the warp-level tensor core of consumer Blackwell: one warp issues
//   mma.sync m16n8k16 bf16 x bf16 -> f32 and then mma.sync m16n8k32 kind::f8f6f4
//   e4m3 x e4m3 -> f32 into the same register accumulator (A, B, C and D all in
//   registers, each lane holding its fragment); D is written to global memory.
// seen: (nvdisasm 13.5) sm_120a runs fp8 natively: the fp8 MMA opcode follows the bf16
//   one (arch/rtx-blackwell.yaml spells both). sm_100a also accepts kind::f8f6f4 with
//   e4m3, but only by converting to f16 and issuing two bf16-unit MMAs: fp8 mma.sync is
//   emulated there, tcgen05 is its fp8 path.
// denied: ptxas rejects .kind::f8f6f4 on sm_90a ("Feature '.kind::f8f6f4' not supported").

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_f8f6f4(const u32* __restrict__ a_bf16, const u32* __restrict__ b_bf16,
                      const u32* __restrict__ a_e4m3, const u32* __restrict__ b_e4m3,
                      float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    // Per lane: A fragment 4 x 32 bit (16x16 bf16 or 16x32 e4m3 over the warp),
    // B fragment 2 x 32 bit, D fragment 4 f32 (16x8 over the warp).
    const uint4 a0 = reinterpret_cast<const uint4*>(a_bf16)[lane];
    const uint2 b0 = reinterpret_cast<const uint2*>(b_bf16)[lane];
    const uint4 a1 = reinterpret_cast<const uint4*>(a_e4m3)[lane];
    const uint2 b1 = reinterpret_cast<const uint2*>(b_e4m3)[lane];
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a0.x), "r"(a0.y), "r"(a0.z), "r"(a0.w), "r"(b0.x), "r"(b0.y));
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e4m3.e4m3.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(a1.x), "r"(a1.y), "r"(a1.z), "r"(a1.w), "r"(b1.x), "r"(b1.y));
    reinterpret_cast<float4*>(out)[lane] = make_float4(d0, d1, d2, d3);
}
