// porter attention, Hopper: turn-taking between the two consumer warpgroups
// ("ping-pong"). Each warpgroup issues its MMAs only when it holds the turn and
// passes the turn on right after issuing, so while one warpgroup's wgmmas run on
// the tensor core the other one does its softmax (FlashAttention-3's schedule;
// the idea, not its code). Built on named barriers (PTX ISA "bar.sync /
// bar.arrive"): barrier kTurnBarrier0 + g is warpgroup g's "your turn" signal, with
// 256 participants = 128 threads of g waiting (bar.sync) + 128 of the other
// warpgroup arriving (bar.arrive, which does not wait). Barrier 0 stays
// __syncthreads'.
#ifndef PORTER_ATTENTION_WG_SCHEDULE_CUH
#define PORTER_ATTENTION_WG_SCHEDULE_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {
namespace attn {

constexpr uint32_t kTurnBarrier0 = 1;   // named barriers 1 and 2
constexpr uint32_t kTurnThreads = 256;  // two warpgroups

// Block until the other warpgroup handed warpgroup `wg` the turn.
PORTER_DEVICE void wait_turn(int wg) {
    asm volatile("bar.sync %0, %1;" :: "r"(kTurnBarrier0 + wg), "n"(kTurnThreads) : "memory");
}

// Hand the turn to the other warpgroup (1 - wg) without waiting.
PORTER_DEVICE void pass_turn(int wg) {
    asm volatile("bar.arrive %0, %1;" :: "r"(kTurnBarrier0 + (1 - wg)), "n"(kTurnThreads) : "memory");
}

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTENTION_WG_SCHEDULE_CUH
