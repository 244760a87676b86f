// porter TMA primitives (PTX ISA "Data Movement: cp.async.bulk.tensor",
// "cp.async.bulk.commit_group / wait_group", "prefetch.tensormap"; sm_90+,
// the .cta_group forms sm_100a+).
//
// Coordinates are in elements, innermost dimension first: for a row-major
// (rows x cols) matrix whose tensor map has dim0 = cols, call with
// (c0 = column, c1 = row). The box size, element type and swizzle mode are in
// the tensor map (encoded on the host); the shared-memory destination must be
// aligned to the swizzle atom (1024 bytes for 128B swizzle, 128 bytes
// otherwise). Each load adds its box bytes to the mbarrier's tx-count when
// they land (complete_tx), so the barrier's expect_tx must equal the sum of the
// box bytes of all loads that signal it in one phase.
#ifndef PORTER_TMA_CUH
#define PORTER_TMA_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {

// Pull the descriptor into the TMA unit's cache ahead of the first use.
PORTER_DEVICE void tma_prefetch_descriptor(const TmaDescriptor* desc) {
    asm volatile("prefetch.tensormap [%0];" :: "l"(desc) : "memory");
}

// 2D tile load global -> this CTA's shared memory; completes tx on `bar`
// (a barrier of this CTA).
PORTER_DEVICE void tma_load_2d(uint32_t dst, const TmaDescriptor* desc, uint32_t bar,
                               int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, { %3, %4 }], [%2];"
        :: "r"(dst), "l"(desc), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// The same load with a .shared::cta destination (PTX ISA 8.6+): the data and the
// barrier are certainly this CTA's. On sm_120a ptxas emits the .shared::cluster form
// above with a run-time test of the destination's CTA and a CALL into a slow path for
// the remote case; this form is the plain UTMALDG.
PORTER_DEVICE void tma_load_2d_cta(uint32_t dst, const TmaDescriptor* desc, uint32_t bar,
                                   int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"
        " [%0], [%1, { %3, %4 }], [%2];"
        :: "r"(dst), "l"(desc), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// Multicast: the same tile lands at offset `dst` in every CTA whose bit is set
// in `cta_mask` (bit i = %cluster_ctarank i), and each of those CTAs' barrier at
// offset `bar` receives the box bytes. Every receiving CTA must expect them.
PORTER_DEVICE void tma_load_2d_multicast(uint32_t dst, const TmaDescriptor* desc, uint32_t bar,
                                         int32_t c0, int32_t c1, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, { %3, %4 }], [%2], %5;"
        :: "r"(dst), "l"(desc), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask) : "memory");
}

// CTA-pair form (.cta_group::2, sm_100a+): the data lands in this CTA's shared
// memory but the completion may be signalled on the barrier of EITHER CTA of the
// pair - `bar` is a .shared::cluster address, typically the pair leader's
// barrier (porter::map_to_cta(bar, leader_rank)), so one thread waiting in the
// leader sees both halves of a 2-CTA MMA operand arrive.
PORTER_DEVICE void tma_load_2d_pair(uint32_t dst, const TmaDescriptor* desc, uint32_t bar,
                                    int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.cta_group::2"
        " [%0], [%1, { %3, %4 }], [%2];"
        :: "r"(dst), "l"(desc), "r"(bar), "r"(c0), "r"(c1) : "memory");
}

// CTA-pair multicast (.multicast::cluster.cta_group::2, sm_100a+).
PORTER_DEVICE void tma_load_2d_pair_multicast(uint32_t dst, const TmaDescriptor* desc, uint32_t bar,
                                              int32_t c0, int32_t c1, uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
        ".multicast::cluster.cta_group::2"
        " [%0], [%1, { %3, %4 }], [%2], %5;"
        :: "r"(dst), "l"(desc), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask) : "memory");
}

// 2D tile store shared -> global. Before it, the writing threads must have run
// porter::fence_proxy_async_smem() and synchronised with the issuing thread.
PORTER_DEVICE void tma_store_2d(const TmaDescriptor* desc, uint32_t src, int32_t c0, int32_t c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, { %2, %3 }], [%1];"
        :: "l"(desc), "r"(src), "r"(c0), "r"(c1) : "memory");
}

// Close the current bulk group of stores (issuing thread only).
PORTER_DEVICE void tma_store_commit() {
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

// Wait until at most N committed store groups still READ shared memory: after
// it the staging buffer of older groups may be overwritten.
template <int N>
PORTER_DEVICE void tma_store_wait_read() {
    asm volatile("cp.async.bulk.wait_group.read %0;" :: "n"(N) : "memory");
}

// Wait until at most N committed store groups are incomplete (writes done
// to global memory) - needed before the kernel exits only for visibility
// guarantees to later work in the same kernel.
template <int N>
PORTER_DEVICE void tma_store_wait_all() {
    asm volatile("cp.async.bulk.wait_group %0;" :: "n"(N) : "memory");
}

}  // namespace porter

#endif  // PORTER_TMA_CUH
