// porter attention: which keys a query row sees, and which KV tiles to visit.
//
// Keys j >= seq_k do not exist (the last KV tile is partial: TMA zero-fills past
// the tensor end, or reads the next head's rows in the 2-D (B*H*S, D) view, so
// those columns MUST be masked). Causal masking is bottom-right aligned: query
// row i sees key j iff j <= i + seq_k - seq_q (FlashAttention >= 2.1), so with
// seq_q > seq_k the first rows see no key at all.
#ifndef PORTER_ATTENTION_MASK_CUH
#define PORTER_ATTENTION_MASK_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {
namespace attn {

// One past the last key row `row` may see (exclusive column limit), clamped to
// [0, seq_k]. Non-causal: every existing key.
template <bool kCausal>
PORTER_DEVICE int key_limit(int row, int seq_q, int seq_k) {
    if (!kCausal) return seq_k;
    int lim = row + 1 + seq_k - seq_q;
    return lim < 0 ? 0 : (lim > seq_k ? seq_k : lim);
}

// KV tiles of `block_n` keys that a query tile [q0, q0 + block_m) must visit:
// up to the last key its last row sees. Tiles beyond are fully masked and skipped
// (causal), and a query tile whose rows see no key visits none.
template <bool kCausal>
PORTER_DEVICE int kv_tile_count(int q0, int block_m, int block_n, int seq_q, int seq_k) {
    int last_row = q0 + block_m - 1;
    if (last_row > seq_q - 1) last_row = seq_q - 1;
    int lim = key_limit<kCausal>(last_row, seq_q, seq_k);
    return (lim + block_n - 1) / block_n;
}

// True when some column of KV tile [n0, n0 + block_n) is hidden from some row of
// the query tile: the tile crosses seq_k or (causal) the diagonal of its FIRST
// row. Tiles for which this is false skip the per-element mask entirely.
template <bool kCausal>
PORTER_DEVICE bool kv_tile_needs_mask(int q0, int n0, int block_n, int seq_q, int seq_k) {
    if (n0 + block_n > seq_k) return true;
    return kCausal && n0 + block_n > key_limit<kCausal>(q0, seq_q, seq_k);
}

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTENTION_MASK_CUH
