// porter mbarrier primitives (PTX ISA "Parallel Synchronization and
// Communication Instructions: mbarrier", sm_90+).
//
// An mbarrier is a 64-bit shared-memory object with an arrival count and a
// transaction (tx) count. A phase completes when the pending arrivals reach 0
// AND the tx-count is back to 0; then the next phase starts and the phase
// parity flips. Invariants every ring buffer in porter relies on:
//   * A fresh barrier is in phase 0 (parity 0).
//   * try_wait.parity(P) returns true once the phase with parity P has
//     completed. Asking for parity 1 on a fresh barrier returns true at once
//     (the "previous" phase counts as complete) - which is why producers wait
//     on empty slots with parity (round & 1) ^ 1 and consumers wait on full
//     slots with parity (round & 1).
//   * arrive.expect_tx(bytes) = expect_tx then arrive: the phase cannot
//     complete until the TMA engine has delivered exactly `bytes` bytes via
//     complete_tx (the TMA load's .mbarrier::complete_tx::bytes).
// All addresses are 32-bit .shared::cta addresses (porter::smem_u32), or
// .shared::cluster addresses from porter::map_to_cta for the remote forms.
#ifndef PORTER_MBARRIER_CUH
#define PORTER_MBARRIER_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {

// mbarrier.init: expected arrivals per phase = `count`, tx-count 0, phase 0.
PORTER_DEVICE void mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(bar), "r"(count) : "memory");
}

// Makes mbarrier.init visible to the other CTAs of the cluster and to the async
// proxy (TMA, tensor cores) before they arrive on it (PTX ISA "fence":
// fence.mbarrier_init only has the .release.cluster form). Follow it with a
// cluster barrier (porter::cluster_sync) or, without clusters, __syncthreads().
PORTER_DEVICE void mbar_fence_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}

// Plain arrive (count 1) on a barrier of this CTA; release semantics at CTA
// scope order this thread's prior shared-memory reads/writes before the arrival.
PORTER_DEVICE void mbar_arrive(uint32_t bar) {
    asm volatile("{\n\t.reg .b64 state;\n\t"
                 "mbarrier.arrive.release.cta.shared::cta.b64 state, [%0];\n\t}"
                 :: "r"(bar) : "memory");
}

// Arrive on a barrier in another CTA of the cluster (`remote_bar` from
// porter::map_to_cta) with release at CLUSTER scope, so the peer's waiter
// observes this thread's generic-proxy memory writes. Costly: ptxas puts
// MEMBAR.ALL.CTA + MEMBAR.ALL.GPU before it. Use it when such writes matter.
PORTER_DEVICE void mbar_arrive_cluster(uint32_t remote_bar) {
    asm volatile("mbarrier.arrive.release.cluster.shared::cluster.b64 _, [%0];"
                 :: "r"(remote_bar) : "memory");
}

// Arrive on a barrier of any CTA of the cluster with the default .release.cta
// semantics (no memory fence in SASS). Enough to hand back a ring slot whose
// only readers were async-proxy operations already known complete (wgmma after
// wgmma.wait_group, tcgen05 after its commit): the arrival itself is the signal.
PORTER_DEVICE void mbar_arrive_remote(uint32_t cluster_bar) {
    asm volatile("mbarrier.arrive.shared::cluster.b64 _, [%0];" :: "r"(cluster_bar) : "memory");
}

// Arrive and raise the expected transaction bytes of the current phase by
// `tx_bytes` (the bytes the TMA loads signalling this barrier will deliver).
PORTER_DEVICE void mbar_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes) {
    asm volatile("{\n\t.reg .b64 state;\n\t"
                 "mbarrier.arrive.expect_tx.release.cta.shared::cta.b64 state, [%0], %1;\n\t}"
                 :: "r"(bar), "r"(tx_bytes) : "memory");
}

// Raise the expected tx bytes without arriving (when a second producer, e.g.
// a multicast from a peer CTA, adds bytes to the same phase).
PORTER_DEVICE void mbar_expect_tx(uint32_t bar, uint32_t tx_bytes) {
    asm volatile("mbarrier.expect_tx.relaxed.cta.shared::cta.b64 [%0], %1;"
                 :: "r"(bar), "r"(tx_bytes) : "memory");
}

// One probe: true once the phase with parity `parity` has completed. Acquire
// at CTA scope: data written by the arrivals (and by TMA) is visible after.
PORTER_DEVICE bool mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n\t.reg .pred P;\n\t"
                 "mbarrier.try_wait.parity.acquire.cta.shared::cta.b64 P, [%1], %2;\n\t"
                 "selp.b32 %0, 1, 0, P;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}

// Cluster-scope acquire: use when the waiter must see generic-proxy memory
// writes of other CTAs released with mbar_arrive_cluster. Costly: ptxas adds
// CCTL.IVALL (L1 invalidate) after the wait. Arrivals from other CTAs do not by
// themselves need it - the phase flips for a CTA-scope waiter just the same.
PORTER_DEVICE bool mbar_try_wait_cluster(uint32_t bar, uint32_t parity) {
    uint32_t done;
    asm volatile("{\n\t.reg .pred P;\n\t"
                 "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 P, [%1], %2;\n\t"
                 "selp.b32 %0, 1, 0, P;\n\t}"
                 : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    return done != 0;
}

// Spin until the phase with parity `parity` has completed. try_wait (unlike
// test_wait) suspends the thread for a hardware time limit per probe, so this
// loop does not hammer the barrier.
PORTER_DEVICE void mbar_wait(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait(bar, parity)) {
    }
}
PORTER_DEVICE void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
    while (!mbar_try_wait_cluster(bar, parity)) {
    }
}

// fence.proxy.async.shared::cta (PTX ISA "membar/fence", proxy fences): orders
// this thread's generic-proxy shared-memory writes before later async-proxy
// accesses (a TMA store reading the tile, a tensor-core MMA reading operands).
PORTER_DEVICE void fence_proxy_async_smem() {
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}

}  // namespace porter

#endif  // PORTER_MBARRIER_CUH
