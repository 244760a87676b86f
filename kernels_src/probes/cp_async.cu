// probe: cp_async
// feature: cp_async
// shows: cp_async, op:cp_async_commit
// proves: the asynchronous global -> shared copy of sm_80: each thread issues a 16-byte
//   cp.async.cg.shared.global (bypassing L1), the warp commits the group and waits for
//   it with cp.async.wait_group 0, then the tile is read back from shared memory and
//   written to global memory.
// denied: cp.async needs sm_80 or newer.

typedef unsigned int u32;

extern "C" __global__ void __launch_bounds__(128)
probe_cp_async(const float4* __restrict__ in, float4* __restrict__ out) {
    __shared__ __align__(16) float4 tile[128];
    const u32 t = threadIdx.x;
    const u32 dst = static_cast<u32>(__cvta_generic_to_shared(&tile[t]));
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(in + blockIdx.x * 128 + t) : "memory");
    asm volatile("cp.async.commit_group;" ::: "memory");
    asm volatile("cp.async.wait_group 0;" ::: "memory");
    __syncthreads();
    out[blockIdx.x * 128 + (t ^ 1)] = tile[t];
}
