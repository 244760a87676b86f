// Megakernel completion counters (porter/megakernel/isa.py, "Executing one
// instruction"): a global int32 per counter, zero at launch, incremented once
// by every instruction that signals it. A consumer waits for the full count.
//
// Ordering (PTX ISA "Memory Consistency Model"): the producer CTA's threads
// store their results and meet at a CTA barrier, then one thread does a release
// reduction at gpu scope; the consumer's thread does acquire loads until the
// count is reached and then meets its CTA at a barrier. No fence precedes the
// release: bar.sync makes the other threads' stores precede the signalling
// thread's later operations in causality order (a barrier's arrivals
// synchronize with its completion), and a release operation orders everything
// that precedes it in causality order, not only its own thread's stores - a
// fence.sc/membar.gl there (what __threadfence() emits) would be a second,
// stronger ordering of the same stores, one MEMBAR per signal.
// Release -> acquire at gpu scope plus the two CTA barriers then make every
// producer store visible to every consumer thread; the acquire load also
// invalidates this SM's L1, so plain loads that follow do not hit stale lines
// of activations another SM rewrote.
#ifndef PORTER_MK_COUNTERS_CUH
#define PORTER_MK_COUNTERS_CUH

#ifndef PORTER_MK_WATCHDOG_CUH
#error "include megakernel/watchdog.cuh first"
#endif

namespace porter {
namespace mk {

// The wait first spins: kSpinPolls back-to-back acquire loads (each an L2 round
// trip, ~0.2-0.3 us, so ~4 us in all) catch a signal that lands soon - the common
// case in a decode step, whose producers are a matvec slice away - without the
// sleep's wake-up delay. Then it backs off: sleeps from kBackoffMinNs doubling to
// the cap kBackoffMaxNs, so 100+ waiting SMs do not flood L2 with polls and a
// waiter still wakes within ~0.5 us of the last signal.
constexpr int kSpinPolls = 16;
constexpr unsigned kBackoffMinNs = 32;
constexpr unsigned kBackoffMaxNs = 512;

PORTER_DEVICE int ld_acquire_gpu(const int* addr) {
    int v;
    asm volatile("ld.acquire.gpu.global.s32 %0, [%1];" : "=r"(v) : "l"(addr) : "memory");
    return v;
}

// Spin until counters[c] >= target. __nanosleep keeps the spinning thread from
// flooding L2 with polls while 100+ SMs may wait on the same line; a wait that
// outlives the watchdog's deadline (a circular wait, a missing signal, a CTA
// that never became resident) traps instead of hanging the GPU.
PORTER_DEVICE void wait_counter(const int* counter, int target) {
#pragma unroll 1
    for (int poll = 0; poll < kSpinPolls; ++poll) {
        if (ld_acquire_gpu(counter) >= target) return;   // the acquire that orders what follows
    }
    unsigned sleep_ns = kBackoffMinNs;
    const Watchdog watchdog;
    while (ld_acquire_gpu(counter) < target) {
        __nanosleep(sleep_ns);
        sleep_ns = sleep_ns * 2 < kBackoffMaxNs ? sleep_ns * 2 : kBackoffMaxNs;
        watchdog.check();
    }
}

// One increment with release semantics at gpu scope, after the CTA barrier that
// follows the instruction's stores (see Ordering above: no fence before it).
// `red` (no return value) rather than `atom`: nobody needs the old count, and a
// reduction lets the SM move on without the round trip to L2.
PORTER_DEVICE void signal_counter(int* counter) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(counter) : "memory");
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_COUNTERS_CUH
