// porter attention: online-softmax arithmetic shared by every mainloop.
//
// Scores stay in raw units (S = Q K^T); the running row max m is kept raw too.
// softmax_scale * log2(e) is folded into one FMA feeding ex2.approx, so
//     p = 2^(s * scale_log2 - m * scale_log2) = exp(scale * (s - m)).
// A row whose visible keys so far are all masked keeps m = -inf; it uses 0 as
// the subtracted max ("neg_max_scaled") so no -inf - -inf = NaN appears, and its
// correction factor 2^(m_old * c - 0) = 2^-inf = 0 leaves O and l at 0.
// The final log-sum-exp is natural-log: lse = (m * scale_log2 + log2 l) * ln 2,
// -inf for a row that saw no key (l == 0), matching porter.validation's model.
#ifndef PORTER_ATTENTION_SOFTMAX_CUH
#define PORTER_ATTENTION_SOFTMAX_CUH

#ifndef PORTER_COMMON_CUH
#error "include common/common.cuh first (templates inline the primitives in dependency order)"
#endif

namespace porter {
namespace attn {

#define PORTER_NEG_INF (-__int_as_float(0x7f800000))

// ex2.approx.ftz.f32 (PTX ISA "ex2"): one MUFU.EX2; 2^-inf = +0, which is what
// masked scores (-inf) must turn into.
PORTER_DEVICE float exp2_approx(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// lg2.approx.ftz.f32: MUFU.LG2, used once per row for the LSE.
PORTER_DEVICE float log2_approx(float x) {
    float y;
    asm("lg2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}

// The value subtracted inside the exponent for a row with raw max m: m * c,
// or 0 when the row has seen no key (m = -inf).
PORTER_DEVICE float neg_max_scaled(float m, float scale_log2) {
    return m == PORTER_NEG_INF ? 0.f : -m * scale_log2;
}

// p = 2^(s * c + neg_m): the single FMA + MUFU.EX2 per score.
PORTER_DEVICE float scaled_exp2(float s, float scale_log2, float neg_m) {
    return exp2_approx(fmaf(s, scale_log2, neg_m));
}

// How much the old partial sums shrink when the max moves m_old -> m_new
// (neg_m_new from neg_max_scaled(m_new)); 0 when m_old was -inf.
// Exactly 1 when the max did not move: fma(m, c, -(m * c)) is the rounding error of
// m * c, not 0, so ex2 of it can come out as 1 + 1 ulp once |m * c| >= 2. That broke
// the "skip the O correction when no row's max moved" test of the TMEM mainloop (an
// alpha != 1 forces a TMEM load / scale / store of O for nothing) and made O drift by
// an ulp per tile against the reference model, whose alpha is exp2(0) = 1 there.
PORTER_DEVICE float rescale_factor(float m_old, float m_new, float scale_log2, float neg_m_new) {
    return m_old == m_new ? 1.f : exp2_approx(fmaf(m_old, scale_log2, neg_m_new));
}

// Natural-log LSE of a finished row; -inf when it saw no key.
PORTER_DEVICE float row_lse(float m, float l, float scale_log2) {
    const float ln2 = 0.6931471805599453f;
    return l == 0.f ? PORTER_NEG_INF : (m * scale_log2 + log2_approx(l)) * ln2;
}

// 1 / l for the final O scale; rows with l == 0 keep O = 0.
PORTER_DEVICE float row_inv_sum(float l) {
    return l == 0.f ? 0.f : __fdividef(1.f, l);   // MUFU.RCP, once per row
}

// Reductions over the 4 lanes of a quad (lanes 4r..4r+3), which together hold one
// accumulator row in the mma / wgmma register layouts.
PORTER_DEVICE float quad_max(float x) {
    x = fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 1));
    return fmaxf(x, __shfl_xor_sync(0xffffffffu, x, 2));
}
PORTER_DEVICE float quad_sum(float x) {
    x += __shfl_xor_sync(0xffffffffu, x, 1);
    return x + __shfl_xor_sync(0xffffffffu, x, 2);
}

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTENTION_SOFTMAX_CUH
