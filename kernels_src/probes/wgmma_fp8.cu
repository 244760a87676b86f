// probe: wgmma_fp8
// feature: wgmma
// also-needs: fp8
// kind: f8
// shows: kind:f8, fp8
// proves: one warpgroup issues wgmma.mma_async m64n8k32 e4m3 x e4m3 -> f32 from shared
//   memory descriptors (the fp8 tensor-core path of a warpgroup MMA).
// denied: ptxas rejects wgmma for any target but sm_90a.

typedef unsigned long long u64;
typedef unsigned int u32;

// Hopper shared-memory matrix descriptor, no swizzle (16-byte units).
__device__ static u64 wgmma_desc(const void* smem, u32 lead_bytes, u32 stride_bytes) {
    u32 addr = (u32)__cvta_generic_to_shared(smem);
    return (u64)((addr >> 4) & 0x3FFF) | ((u64)((lead_bytes >> 4) & 0x3FFF) << 16)
         | ((u64)((stride_bytes >> 4) & 0x3FFF) << 32);
}

extern "C" __global__ void __launch_bounds__(128)
probe_wgmma_fp8(const unsigned char* __restrict__ a, const unsigned char* __restrict__ b,
                float* __restrict__ out) {
    // A: 64 x 32 e4m3 (2 KiB), B: 8 x 32 e4m3 (256 B); fp8 wgmma is K-major only.
    __shared__ alignas(128) unsigned char sa[64 * 32];
    __shared__ alignas(128) unsigned char sb[8 * 32];
    for (int i = threadIdx.x; i < 64 * 32; i += 128) sa[i] = a[i];
    for (int i = threadIdx.x; i < 8 * 32; i += 128) sb[i] = b[i];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();

    u64 da = wgmma_desc(sa, 128, 256);
    u64 db = wgmma_desc(sb, 128, 256);
    float d0 = 0.f, d1 = 0.f, d2 = 0.f, d3 = 0.f;
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile(
        "{\n.reg .pred scale_d;\nsetp.ne.b32 scale_d, %6, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 "
        "{%0, %1, %2, %3}, %4, %5, scale_d, 1, 1;\n}\n"
        : "+f"(d0), "+f"(d1), "+f"(d2), "+f"(d3)
        : "l"(da), "l"(db), "r"(0));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    float4* o = reinterpret_cast<float4*>(out);
    o[threadIdx.x] = make_float4(d0, d1, d2, d3);
}
