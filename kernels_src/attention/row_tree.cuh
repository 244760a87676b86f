// porter attention: row max / row sum of one thread's whole S row as tree reductions.
//
// On the TMEM mainloop one thread owns a whole row of S (block_n scores). A running
// fmaxf / add over it is one dependent chain of block_n operations: each waits for the
// previous one's ALU latency, and the softmax warps are the kernel's bottleneck. Here
// kParts independent partial results (part i takes columns i, i + kParts, ...: the chains
// interleave, so the scheduler issues them back to back) are combined pairwise, leaving a
// dependent depth of block_n / kParts + log2(kParts). Max is exact in any order; the sum's
// fp32 rounding changes by reassociation only (well inside the attention tolerance policy,
// whose same-precision reference sums in numpy's own pairwise order).
#ifndef PORTER_ATTENTION_ROW_TREE_CUH
#define PORTER_ATTENTION_ROW_TREE_CUH

namespace porter {
namespace attn {

// x[0] = max over x[0..N) combined pairwise (N a power of two); returns it.
template <int N>
PORTER_DEVICE float tree_max(float (&x)[N]) {
    static_assert(N > 0 && (N & (N - 1)) == 0, "tree of a power-of-two number of partials");
#pragma unroll
    for (int w = N / 2; w >= 1; w /= 2) {
#pragma unroll
        for (int i = 0; i < w; ++i) x[i] = fmaxf(x[i], x[i + w]);
    }
    return x[0];
}

// x[0] = sum over x[0..N) combined pairwise (N a power of two); returns it.
template <int N>
PORTER_DEVICE float tree_sum(float (&x)[N]) {
    static_assert(N > 0 && (N & (N - 1)) == 0, "tree of a power-of-two number of partials");
#pragma unroll
    for (int w = N / 2; w >= 1; w /= 2) {
#pragma unroll
        for (int i = 0; i < w; ++i) x[i] += x[i + w];
    }
    return x[0];
}

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTENTION_ROW_TREE_CUH
