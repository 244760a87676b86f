// A deadline for the megakernel's spin-waits (counters across SMs, the page
// ring's mbarriers inside a CTA). A schedule or kernel bug that leaves a wait
// unmet would otherwise spin until the process is killed, holding the GPU; past
// the deadline the waiting thread traps, which ends the whole grid with an
// error the host sees (CUDA_ERROR_LAUNCH_FAILED / illegal instruction). One
// decode step takes about a millisecond, so the deadline is thousands of
// steps away and a correct run never reaches it.
#ifndef PORTER_MK_WATCHDOG_CUH
#define PORTER_MK_WATCHDOG_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first"
#endif

namespace porter {
namespace mk {

// Tools that slow the kernel by orders of magnitude (compute-sanitizer racecheck)
// can raise it: -DPORTER_MK_WAIT_DEADLINE_NS=...
#ifndef PORTER_MK_WAIT_DEADLINE_NS
#define PORTER_MK_WAIT_DEADLINE_NS 5000000000ull   // 5 s
#endif
constexpr unsigned long long kWaitDeadlineNs = PORTER_MK_WAIT_DEADLINE_NS;

// %globaltimer (PTX ISA "Special registers"): nanoseconds, the same clock on every SM.
PORTER_DEVICE unsigned long long global_ns() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}

struct Watchdog {
    unsigned long long start;
    PORTER_DEVICE Watchdog() : start(global_ns()) {}
    // Called between probes of a wait: trap once the deadline has passed.
    PORTER_DEVICE void check() const {
        if (global_ns() - start > kWaitDeadlineNs) __trap();
    }
};

}  // namespace mk
}  // namespace porter

#endif  // PORTER_MK_WATCHDOG_CUH
