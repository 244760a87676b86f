// porter cp.async primitives (PTX ISA "Data Movement: cp.async", "cp.async.commit_group",
// "cp.async.wait_group"; sm_80+).
//
// cp.async copies global -> shared memory without passing through registers; each
// thread's copies join its current "group" and cp.async.commit_group closes it.
// cp.async.wait_group N blocks until at most N of this THREAD's committed groups are
// still in flight - it says nothing about other threads' copies, so a CTA-wide
// barrier (__syncthreads) must follow before any thread reads what others copied.
// The .cg form (cache global: L2 only, bypassing L1) takes exactly 16 bytes; both
// addresses must be 16-byte aligned.
#ifndef PORTER_CP_ASYNC_CUH
#define PORTER_CP_ASYNC_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {

// 16 bytes global -> shared (dst: .shared::cta address from porter::smem_u32).
PORTER_DEVICE void cp_async_16(uint32_t dst, const void* src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(dst), "l"(src) : "memory");
}

// Close this thread's current group of copies (an empty group is legal and keeps the
// per-iteration group count uniform, which is what wait_group<N> counts on).
PORTER_DEVICE void cp_async_commit() {
    asm volatile("cp.async.commit_group;" ::: "memory");
}

// Wait until at most N of this thread's committed groups are pending.
template <int N>
PORTER_DEVICE void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
}

}  // namespace porter

#endif  // PORTER_CP_ASYNC_CUH
