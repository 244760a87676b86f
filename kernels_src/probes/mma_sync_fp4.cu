// probe: mma_sync_fp4
// feature: fp4
// generation: mma_sync
// kind: f8f6f4
// shows: kind:f8f6f4, fp4
// proves: one warp issues mma.sync m16n8k32 kind::f8f6f4 with fp4 operands (e2m1 x e2m1
//   -> f32, one element per byte in registers, as the unscaled kind takes them) and
//   writes the register accumulator to global memory.
// seen: (nvdisasm 13.5, sm_120a) unscaled fp4 runs on the same unit as fp8 at K = 32
//   (same opcode, e2m1 operand suffixes); the packed K = 64 fp4 path is the block-scaled
//   fp4 unit (arch/rtx-blackwell.yaml, tensor_core.kinds and sass_signatures.fp4).
// denied: ptxas rejects fp6 / fp4 mma.sync on sm_90a and sm_100a ("Instruction 'mma with
//   with FP6/FP4 floating point type' not supported").

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_fp4(const u32* __restrict__ a, const u32* __restrict__ b, const float* __restrict__ c,
                   float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    const uint4 af = reinterpret_cast<const uint4*>(a)[lane];
    const uint2 bf = reinterpret_cast<const uint2*>(b)[lane];
    float4 d = reinterpret_cast<const float4*>(c)[lane];
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.kind::f8f6f4.f32.e2m1.e2m1.f32 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3};"
        : "+f"(d.x), "+f"(d.y), "+f"(d.z), "+f"(d.w)
        : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y));
    reinterpret_cast<float4*>(out)[lane] = d;
}
