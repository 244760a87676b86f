// probe: mma_sync_fp6
// feature: fp6
// generation: mma_sync
// kind: f8f6f4
// shows: kind:f8f6f4, fp6
// proves: one warp issues mma.sync m16n8k32 kind::f8f6f4 with fp6 operands (e2m3 x e3m2
//   -> f32, one element per byte in registers) and writes the register accumulator to
//   global memory.
// seen: (nvdisasm 13.5, sm_120a) the formats are opcode suffixes (sass_signatures.fp6).
// denied: ptxas rejects fp6 / fp4 mma.sync on sm_90a and sm_100a ("Instruction 'mma with
//   with FP6/FP4 floating point type' not supported").

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_fp6(const u32* __restrict__ a, const u32* __restrict__ b, const float* __restrict__ c,
                   float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    const uint4 af = reinterpret_cast<const uint4*>(a)[lane];
    const uint2 bf = reinterpret_cast<const uint2*>(b)[lane];
    float4 d = reinterpret_cast<const float4*>(c)[lane];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m3.e3m2.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
        : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y));
    reinterpret_cast<float4*>(out)[lane] = d;
}
