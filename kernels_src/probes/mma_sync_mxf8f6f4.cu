// probe: mma_sync_mxf8f6f4
// feature: block_scale_mx
// generation: mma_sync
// also-needs: fp8
// kind: mxf8f6f4
// shows: kind:mxf8f6f4, block_scale_mx, kind:mxf8f6f4/scale_operands
// proves: MX block-scaled MMA as an MXFP8 GEMM on consumer Blackwell issues it: one warp
//   runs mma.sync m16n8k32 kind::mxf8f6f4.block_scale.scale_vec::1X (e4m3 x e4m3 -> f32,
//   one ue8m0 scale per row of A and per column of B for the 32 elements of K); each lane
//   passes a 32-bit scale word for A and one for B, and the {byte-id, thread-id}
//   selectors (here 0, 0) pick which byte of which lanes' words the MMA reads; D is
//   written to global memory.
// seen: (nvdisasm 13.5, sm_120a) a suffix marks block scaling, another the ue8m0 scale
//   format, and the two scale registers follow the C operand (sass_modifiers.scale_operands).
// denied: ptxas rejects block-scaled mma.sync on sm_90a and sm_100a ("Instruction 'mma with
//   block scale' not supported"); sm_100a scales inside tcgen05.mma instead.

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_mxf8f6f4(const u32* __restrict__ a, const u32* __restrict__ b,
                        const u32* __restrict__ scale_a, const u32* __restrict__ scale_b,
                        float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    const uint4 af = reinterpret_cast<const uint4*>(a)[lane];
    const uint2 bf = reinterpret_cast<const uint2*>(b)[lane];
    const u32 sa = scale_a[lane], sb = scale_b[lane];
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k32.row.col.kind::mxf8f6f4.block_scale.scale_vec::1X"
        ".f32.e4m3.e4m3.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, "
        "%10, {0, 0}, %11, {0, 0};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y), "r"(sa), "r"(sb));
    reinterpret_cast<float4*>(out)[lane] = make_float4(d0, d1, d2, d3);
}
