// probe: wgmma_bf16
// feature: wgmma
// kind: f16
// shows: kind:f16, op:warpgroup_arrive, op:warpgroup_wait
// proves: one warpgroup issues wgmma.mma_async m64n8k16 bf16 -> f32 with A and B read
//   from shared memory through 64-bit matrix descriptors; the accumulator lives in
//   registers and is written to global memory so nothing is optimised away.
// denied: ptxas rejects wgmma for any target but sm_90a.

typedef unsigned long long u64;
typedef unsigned int u32;

// Hopper shared-memory matrix descriptor, no swizzle: start address, leading and
// stride byte offsets, all in 16-byte units (bits 0-13, 16-29, 32-45).
__device__ static u64 wgmma_desc(const void* smem, u32 lead_bytes, u32 stride_bytes) {
    u32 addr = (u32)__cvta_generic_to_shared(smem);
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)((lead_bytes >> 4) & 0x3FFF) << 16)
         | ((u64)((stride_bytes >> 4) & 0x3FFF) << 32);
}

extern "C" __global__ void __launch_bounds__(128)
probe_wgmma_bf16(const unsigned short* __restrict__ a, const unsigned short* __restrict__ b,
                 float* __restrict__ out) {
    // A: 64 x 16 bf16 (2 KiB), B: 8 x 16 bf16 (256 B), K-major 8x8 core matrices.
    __shared__ alignas(128) unsigned short sa[64 * 16];
    __shared__ alignas(128) unsigned short sb[8 * 16];
    for (int i = threadIdx.x; i < 64 * 16; i += 128) sa[i] = a[i];
    for (int i = threadIdx.x; i < 8 * 16; i += 128) sb[i] = b[i];
    // Generic-proxy stores must be visible to the async proxy that wgmma reads through.
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    u64 da = wgmma_desc(sa, 128, 256);
    u64 db = wgmma_desc(sb, 128, 256);
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n.reg .pred scale_d;\nsetp.ne.b32 scale_d, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 "
        "{%0, %1, %2, %3}, %4, %5, scale_d, 1, 1, 0, 0;\n}\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "l"(da), "l"(db), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    float4* o = reinterpret_cast<float4*>(out);
    o[threadIdx.x] = make_float4(d0, d1, d2, d3);
}
