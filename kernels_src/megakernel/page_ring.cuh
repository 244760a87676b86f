// The megakernel's weight page ring: kPages shared-memory pages of kPageBytes,
// each guarded by a `full` and an `empty` mbarrier (PTX ISA "mbarrier").
//
// One loader warp walks the SM's instruction queue AHEAD of the compute warps
// and copies every weight page the queue will need, in queue order; weights
// never change during a step, so it need not wait for any counter. The compute
// warps consume the pages in the same order. Page number `seq` (counted over
// the whole queue) lives in slot seq % kPages; its round is seq / kPages, and
// the parity of the round selects the mbarrier phase:
//   loader:   wait empty[slot] for parity (round & 1) ^ 1 (a fresh barrier's
//             "previous" phase counts as done, so round 0 passes at once),
//             then start the copy, which completes on full[slot];
//   consumer: wait full[slot] for parity round & 1, read the page, and one
//             lane arrives on empty[slot] after __syncwarp().
// A parity wait cannot tell phase r + 1 from r - 1: it is sound only while the
// barrier is at most one phase behind the waiter. The loader waits on every
// slot in order, so it is. For the consumers, each slot has ONE owner warp
// (owner(seq) = slot % kComputeWarps) that consumes every page of that slot in
// order, so when it waits on page seq it has itself consumed page seq - kPages
// (full has completed round or round + 1 phases, never round - 1). A warp that
// skipped ahead to a slot whose previous page belonged to another warp and had
// not landed yet would find round - 1 completed phases, the same parity as
// round + 1, pass, read stale rows and free the slot early.
// With kPages not a multiple of kComputeWarps the low warps own one slot more
// (porter/kernels/megakernel.py smem_plan says why that is cheap).
// Requires the kernel to define porter::mk::kPages, kPageBytes, kComputeWarps
// and kUseBulkCopy before including this file.
#ifndef PORTER_MK_PAGE_RING_CUH
#define PORTER_MK_PAGE_RING_CUH

#ifndef PORTER_MBARRIER_CUH
#error "include mbarrier/mbarrier.cuh first"
#endif
#ifndef PORTER_MK_WATCHDOG_CUH
#error "include megakernel/watchdog.cuh first"
#endif

namespace porter {
namespace mk {

// mbar_wait with the watchdog's deadline: a page schedule on which the loader
// and the compute warps disagreed would otherwise leave both waiting forever.
PORTER_DEVICE void ring_wait(uint32_t bar, uint32_t parity) {
    const Watchdog watchdog;
    while (!mbar_try_wait(bar, parity)) watchdog.check();
}

struct PageRing {
    uint32_t pages;   // .shared::cta address of page 0 (1024-byte aligned)
    uint32_t full;    // kPages mbarriers, 8 bytes apart
    uint32_t empty;   // kPages mbarriers, 8 bytes apart

    PORTER_DEVICE uint32_t slot_of(int seq) const { return static_cast<uint32_t>(seq) % kPages; }
    PORTER_DEVICE uint32_t parity_of(int seq) const { return (static_cast<uint32_t>(seq) / kPages) & 1u; }
    PORTER_DEVICE uint32_t page_addr(int seq) const { return pages + slot_of(seq) * kPageBytes; }
    PORTER_DEVICE uint32_t full_bar(int seq) const { return full + slot_of(seq) * 8u; }
    PORTER_DEVICE uint32_t empty_bar(int seq) const { return empty + slot_of(seq) * 8u; }
    // The compute warp that consumes page `seq`: fixed per slot (see above).
    PORTER_DEVICE uint32_t owner(int seq) const { return slot_of(seq) % static_cast<uint32_t>(kComputeWarps); }
};

// Arrivals per phase: the bulk-copy path has one (the issuing lane's
// arrive.expect_tx; the bytes are counted as transactions), the cp.async path
// one per loader lane (each lane's cp.async.mbarrier.arrive.noinc).
constexpr uint32_t kFullArrivals = kUseBulkCopy ? 1u : 32u;

// One thread: set up the barriers before anyone uses them.
PORTER_DEVICE void ring_init(const PageRing& ring) {
    for (uint32_t s = 0; s < kPages; ++s) {
        mbar_init(ring.full + s * 8u, kFullArrivals);
        mbar_init(ring.empty + s * 8u, 1u);   // the slot's owner warp, once it read the page
    }
    mbar_fence_init();
}

// L2 policy for streamed weights: each byte is read once per step, so let it go
// first and keep L2 for the activations and the KV cache that SMs share.
PORTER_DEVICE uint64_t l2_evict_first_policy() {
    uint64_t policy;
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
    return policy;
}

// Loader warp (all 32 lanes call it, converged): copy `bytes` (a multiple of 16,
// both addresses 16-byte aligned) from global `src` into page `seq`.
PORTER_DEVICE void ring_produce(const PageRing& ring, int seq, const void* src, uint32_t bytes,
                                uint64_t policy) {
    const uint32_t lane = threadIdx.x & 31u;
    ring_wait(ring.empty_bar(seq), ring.parity_of(seq) ^ 1u);
    if constexpr (kUseBulkCopy) {
        // cp.async.bulk (PTX ISA "cp.async.bulk", sm_90): the copy engine moves the
        // whole page and adds its bytes to full's transaction count on arrival.
        if (lane == 0) {
            mbar_arrive_expect_tx(ring.full_bar(seq), bytes);
            asm volatile(
                "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint"
                " [%0], [%1], %2, [%3], %4;"
                :: "r"(ring.page_addr(seq)), "l"(src), "r"(bytes), "r"(ring.full_bar(seq)), "l"(policy)
                : "memory");
        }
    } else {
        // No copy engine: 16-byte cp.async per lane (PTX ISA "cp.async", sm_80), then
        // each lane's arrive fires on full once all of ITS earlier cp.async landed.
        const char* s = static_cast<const char*>(src);
        for (uint32_t off = lane * 16u; off < bytes; off += 32u * 16u) {
            asm volatile("cp.async.cg.shared.global.L2::cache_hint [%0], [%1], 16, %2;"
                         :: "r"(ring.page_addr(seq) + off), "l"(s + off), "l"(policy) : "memory");
        }
        asm volatile("cp.async.mbarrier.arrive.noinc.shared::cta.b64 [%0];"
                     :: "r"(ring.full_bar(seq)) : "memory");
    }
    __syncwarp();
}

// Consumer warp: wait until page `seq` holds its data.
PORTER_DEVICE void ring_wait_full(const PageRing& ring, int seq) {
    ring_wait(ring.full_bar(seq), ring.parity_of(seq));
}

// Consumer warp (converged): every lane has finished reading page `seq`.
PORTER_DEVICE void ring_release(const PageRing& ring, int seq) {
    __syncwarp();
    if ((threadIdx.x & 31u) == 0) mbar_arrive(ring.empty_bar(seq));
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_PAGE_RING_CUH
