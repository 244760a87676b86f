// porter block-scale staging (PTX ISA 9.7.16.10.7 "Block Scaling for tcgen05.mma",
// 9.7.16.9.2 tcgen05.cp). Layout facts: porter/kernels/block_scale_layout.py.
//
// The producer TMA-loads scale factors into shared memory as 512-byte chunks
// (128 rows x 4 scales: byte (r % 32) * 16 + (r / 32) * 4 + c), i.e. 32 rows of 16 bytes.
// The MMA thread then copies each chunk into Tensor Memory with
// tcgen05.cp.32x128b.warpx4: source row i -> lane i of all four 32-lane partitions,
// 4 columns (one 32-bit word per 4 scales). The block-scaled MMA reads the scale of row r
// at lane r % 32 (any partition), column base + r / 32.
//
// tcgen05.cp -> tcgen05.mma issued by the same thread execute in order (9.7.16.6.2), so
// no wait is needed between staging and use. tcgen05.mma -> tcgen05.cp is NOT ordered:
// porter gives every pipeline stage its own TMEM scale slot and only overwrites a slot
// after the stage's empty barrier (a tcgen05.commit after its MMAs) went round the ring.
#ifndef PORTER_BLOCK_SCALE_CUH
#define PORTER_BLOCK_SCALE_CUH

#ifndef PORTER_TCGEN05_CUH
#error "include tcgen05/tcgen05.cuh first (it fixes the kernel's cta_group)"
#endif

namespace porter {
namespace block_scale {

// One 512-byte chunk at smem `src` (16-byte aligned) -> TMEM columns taddr..taddr+3 of all
// 128 lanes. `desc_template`: encodings_tcgen05.scale_factor_copy_desc() (no swizzle,
// SBO 128 B). With cta_group::2 the leader's copy fills both CTAs' TMEM, each from its own
// shared memory at the same offset (each CTA stages its own rows of A and the full B scales).
PORTER_DEVICE void copy_chunk_to_tmem(uint32_t taddr, uint64_t desc_template, uint32_t src) {
    const uint64_t desc = desc_template | static_cast<uint64_t>((src & 0x3FFFFu) >> 4);
    asm volatile("tcgen05.cp" PORTER_TC_CG ".32x128b.warpx4 [%0], %1;"
                 :: "r"(taddr), "l"(desc) : "memory");
}

}  // namespace block_scale
}  // namespace porter

#endif  // PORTER_BLOCK_SCALE_CUH
