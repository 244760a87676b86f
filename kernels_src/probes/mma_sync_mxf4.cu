// probe: mma_sync_mxf4
// feature: block_scale_mx
// generation: mma_sync
// also-needs: fp4
// kind: mxf4
// shows: kind:mxf4, block_scale_mx, kind:mxf4/scale_operands
// proves: MXFP4 block-scaled MMA: one warp runs mma.sync m16n8k64
//   kind::mxf4.block_scale.scale_vec::2X (e2m1 x e2m1 -> f32, two e2m1 per byte, two
//   ue8m0 scales per row of A and per column of B: one per 32 elements of K); each lane
//   passes a 32-bit scale word for A and one for B, selected with {byte-id, thread-id}
//   = {0, 0}; D is written to global memory.
// seen: (nvdisasm 13.5, sm_120a) the packed fp4 unit's block-scaled opcode with the ue8m0
//   scale suffix, the same opcode kind::mxf4nvf4 with scale_vec::2X gives.
// denied: ptxas rejects block-scaled mma.sync on sm_90a and sm_100a ("Instruction 'mma with
//   block scale' not supported").

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(32)
probe_mma_sync_mxf4(const u32* __restrict__ a, const u32* __restrict__ b,
                    const u32* __restrict__ scale_a, const u32* __restrict__ scale_b,
                    float* __restrict__ out) {
    const u32 lane = threadIdx.x;
    const uint4 af = reinterpret_cast<const uint4*>(a)[lane];
    const uint2 bf = reinterpret_cast<const uint2*>(b)[lane];
    const u32 sa = scale_a[lane], sb = scale_b[lane];
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile(
        "mma.sync.aligned.m16n8k64.row.col.kind::mxf4.block_scale.scale_vec::2X"
        ".f32.e2m1.e2m1.f32.ue8m0 "
        "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, {%0, %1, %2, %3}, "
        "%10, {0, 0}, %11, {0, 0};"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "r"(af.x), "r"(af.y), "r"(af.z), "r"(af.w), "r"(bf.x), "r"(bf.y), "r"(sa), "r"(sb));
    reinterpret_cast<float4*>(out)[lane] = make_float4(d0, d1, d2, d3);
}
