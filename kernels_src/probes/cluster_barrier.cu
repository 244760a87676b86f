// probe: cluster_barrier
// feature: clusters
// shows: op:cluster_arrive, op:cluster_wait
// proves: thread-block clusters: a kernel declared with __cluster_dims__(2,1,1) reads its
//   rank and the cluster size from the cluster special registers and synchronises the
//   whole cluster with barrier.cluster.arrive.release / wait.acquire; the ranks go to
//   global memory.
// denied: clusters need sm_90 or newer.

typedef unsigned int u32;

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
probe_cluster_barrier(u32* __restrict__ out) {
    u32 rank, size;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(size));
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    out[blockIdx.x * blockDim.x + threadIdx.x] = rank * 65536u + size;
}
