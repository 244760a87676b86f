// porter common device helpers: the opaque TMA descriptor type, thread-role
// helpers (warp / warpgroup index, elect-one), shared-memory and cluster
// address helpers, and bf16 / fp8 pack conversions.
//
// Written against the PTX ISA (sections named beside each helper). NVRTC's
// bundled headers carry no cuda.h, so CUtensorMap is re-declared here as an
// opaque, layout-compatible struct.
#ifndef PORTER_COMMON_CUH
#define PORTER_COMMON_CUH

#include <cuda_bf16.h>
#include <cuda/std/cstdint>  // NVRTC has no libc headers; CCCL provides the fixed-width types
using cuda::std::uint16_t; using cuda::std::uint32_t; using cuda::std::int32_t; using cuda::std::uint64_t;

// Not static: unused inline helpers then draw no "declared but never referenced"
// warning, and, being inline, are never emitted (so sm_100a-only forms cost an
// sm_90a compile nothing).
#define PORTER_DEVICE __device__ __forceinline__

// Layout-compatible with CUtensorMap (cuda.h: 16 x u64 = 128 bytes, 64-byte
// aligned). The host encodes it with cuTensorMapEncodeTiled and passes it by
// value as a `const __grid_constant__` kernel parameter, which keeps it in the
// parameter space so TMA instructions can take its generic address directly
// (PTX ISA "Tensor-map" / cp.async.bulk.tensor: the map must be in .param,
// .const or .global memory, 64-byte aligned).
struct alignas(64) TmaDescriptor {
    unsigned long long opaque[16];
};
static_assert(sizeof(TmaDescriptor) == 128, "TmaDescriptor must match CUtensorMap (128 bytes)");

namespace porter {

// ---- thread roles -----------------------------------------------------------
PORTER_DEVICE uint32_t lane_id() { return threadIdx.x & 31u; }
// __shfl_sync broadcast makes the index provably warp-uniform for the compiler,
// so role branches on it do not split warps.
PORTER_DEVICE uint32_t warp_id() { return __shfl_sync(0xffffffffu, threadIdx.x / 32u, 0); }
PORTER_DEVICE uint32_t warpgroup_id() { return __shfl_sync(0xffffffffu, threadIdx.x / 128u, 0); }

// elect.sync (PTX ISA "elect.sync", sm_90): exactly one active lane of the warp
// returns true; the whole warp must execute it (full mask).
PORTER_DEVICE bool elect_one_sync() {
    uint32_t pred = 0;
    asm volatile(
        "{\n\t.reg .pred P;\n\t"
        "elect.sync _|P, %1;\n\t"
        "selp.b32 %0, 1, 0, P;\n\t}"
        : "=r"(pred) : "r"(0xffffffffu));
    return pred != 0;
}

// ---- addresses ----------------------------------------------------------------
// 32-bit .shared::cta address of a generic pointer into shared memory
// (what mbarrier, cp.async.bulk and the MMA descriptors take).
PORTER_DEVICE uint32_t smem_u32(const void* ptr) {
    return static_cast<uint32_t>(__cvta_generic_to_shared(ptr));
}

// ---- clusters (PTX ISA "Special registers": %cluster_ctarank, %cluster_nctarank) ----
PORTER_DEVICE uint32_t cluster_ctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
PORTER_DEVICE uint32_t cluster_nctarank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(r));
    return r;
}
// mapa (PTX ISA "mapa"): the .shared::cluster address of the same shared
// variable in CTA `rank` of this cluster.
PORTER_DEVICE uint32_t map_to_cta(uint32_t smem_addr, uint32_t rank) {
    uint32_t r;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(smem_addr), "r"(rank));
    return r;
}
// barrier.cluster (PTX ISA "barrier.cluster"): all threads of all CTAs of the
// cluster. arrive.release + wait.acquire orders shared-memory writes (e.g.
// mbarrier.init) before peers touch them.
PORTER_DEVICE void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory"); }
PORTER_DEVICE void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory"); }
PORTER_DEVICE void cluster_sync() { cluster_arrive(); cluster_wait(); }

// Named barrier over `threads` threads (a multiple of 32) of this CTA: lets a
// subset of warps (e.g. the epilogue warps) synchronise without the others.
PORTER_DEVICE void named_barrier_sync(uint32_t id, uint32_t threads) {
    asm volatile("bar.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

// ---- conversions ----------------------------------------------------------------
// cvt.rn.bf16x2.f32 d, a, b packs a into the UPPER and b into the LOWER half
// (PTX ISA "cvt"); the lower half is the lower address in memory, so `lo` is
// the element with the smaller column index.
PORTER_DEVICE uint32_t pack_bf16x2(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}
// Two floats -> two e4m3 bytes (lo in the low byte), saturating to +-448 like
// the quantizers in porter.validation (PTX ISA "cvt", .satfinite, sm_89+).
PORTER_DEVICE uint16_t pack_e4m3x2(float lo, float hi) {
    uint16_t r;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(r) : "f"(hi), "f"(lo));
    return r;
}

}  // namespace porter

#endif  // PORTER_COMMON_CUH
