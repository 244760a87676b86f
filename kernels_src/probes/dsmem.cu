// probe: dsmem
// feature: dsmem
// also-needs: clusters
// shows: op:cluster_arrive, op:cluster_wait, op:generic_load, op:shared_window, op:cta_rank_in_cluster
// proves: distributed shared memory: each CTA of a 2-CTA cluster fills its shared
//   buffer, the cluster synchronises, then every thread maps the peer CTA's buffer with
//   mapa.shared::cluster and reads it with ld.shared::cluster; a second cluster barrier
//   keeps the peer's shared memory alive until all remote reads are done.
// seen: (nvdisasm 13.x, sm_90a and sm_100a) mapa has no instruction of its own: ptxas
//   builds the peer address from the CTA's rank in the cluster and the shared window
//   base, and ld.shared::cluster becomes a generic load through it (the descriptors'
//   sass_ops cta_rank_in_cluster, shared_window and generic_load spell these).
// denied: clusters and shared::cluster addressing need sm_90 or newer.

typedef unsigned int u32;

extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(128)
probe_dsmem(const float* __restrict__ in, float* __restrict__ out) {
    __shared__ float buf[128];
    u32 rank;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    buf[threadIdx.x] = in[blockIdx.x * 128 + threadIdx.x];
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");

    const u32 local = (u32)__cvta_generic_to_shared(&buf[threadIdx.x]);
    u32 remote;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"(rank ^ 1u));
    float peer;
    asm volatile("ld.shared::cluster.f32 %0, [%1];" : "=f"(peer) : "r"(remote) : "memory");

    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    out[blockIdx.x * 128 + threadIdx.x] = peer;
}
