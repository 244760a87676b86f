// Megakernel completion counters (porter/megakernel/isa.py, "Executing one
// instruction"): a global int32 per counter, zero at launch, incremented once
// by every instruction that signals it. A consumer waits for the full count.
//
// Ordering (PTX ISA "Memory Consistency Model"): the producer CTA's threads
// store their results, meet at a CTA barrier, then one thread fences at gpu
// scope and does a release reduction; the consumer's thread does acquire loads
// until the count is reached and then meets its CTA at a barrier. Release ->
// acquire at gpu scope plus the two CTA barriers (causality order is transitive
// through bar.sync) make every producer store visible to every consumer
// thread; the acquire load also invalidates this SM's L1, so plain loads that
// follow do not hit stale lines of activations another SM rewrote.
#ifndef PORTER_MK_COUNTERS_CUH
#define PORTER_MK_COUNTERS_CUH

#ifndef PORTER_MK_WATCHDOG_CUH
#error "include megakernel/watchdog.cuh first"
#endif

namespace porter {
namespace mk {

// Backoff bounds of the spin-wait: start short (a producer on another SM is
// usually a few microseconds from done) and cap the sleep so a waiter wakes
// within ~1 us of the last signal.
constexpr unsigned kBackoffMinNs = 32;
constexpr unsigned kBackoffMaxNs = 1024;

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
    unsigned sleep_ns = kBackoffMinNs;
    const Watchdog watchdog;
    while (ld_acquire_gpu(counter) < target) {
        __nanosleep(sleep_ns);
        sleep_ns = sleep_ns * 2 < kBackoffMaxNs ? sleep_ns * 2 : kBackoffMaxNs;
        watchdog.check();
    }
}

// One increment with release semantics at gpu scope. `red` (no return value)
// rather than `atom`: nobody needs the old count, and a reduction lets the SM
// move on without the round trip to L2.
PORTER_DEVICE void signal_counter(int* counter) {
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;" :: "l"(counter) : "memory");
}

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_COUNTERS_CUH
