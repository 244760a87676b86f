// porter attention: 2^x on the FMA units, for the share of P that the MUFU (16 ex2 per clock
// per SM on sm_100, the softmax's binding unit) does not compute (FA4's split).
//
//   x clamped to >= -127 (so -inf makes no NaN on the way);
//   t = x + 1.5 * 2^23 rounds x to the integer j in t's low mantissa bits; f = x - j in [-0.5, 0.5];
//   p = c0 + f (c1 + f (c2 + f (c3 + f c4)))   four FMAs, coefficients rendered from
//       porter.validation.attention_numerics.EXP2_POLY (max relative error 2.7e-6, far below
//       bf16 P's half ulp 2^-9 and, through the row sum, the LSE tolerance 1e-4);
//   2^x = p * 2^j: j added to p's exponent field as the integer t << 23 (t's bits are
//       0x4B400000 + j, and 0x4B400000 << 23 wraps to 0);
//   0 for x < -126, as ex2.approx.ftz flushes (masked scores are -inf).
// The adds are __fadd_rn so the compiler neither fuses nor reassociates the rounding trick.
#ifndef PORTER_ATTENTION_EXP2_POLY_CUH
#define PORTER_ATTENTION_EXP2_POLY_CUH

namespace porter {
namespace attn {

template <typename Coef>
PORTER_DEVICE float exp2_poly(float x) {
    const float xc = fmaxf(x, Coef::kMinArg);
    const float t = __fadd_rn(xc, Coef::kRoundMagic);
    const float f = __fadd_rn(xc, -__fadd_rn(t, -Coef::kRoundMagic));
    float p = Coef::kC4;
    p = fmaf(p, f, Coef::kC3);
    p = fmaf(p, f, Coef::kC2);
    p = fmaf(p, f, Coef::kC1);
    p = fmaf(p, f, Coef::kC0);
    const uint32_t bits = __float_as_uint(p) + (__float_as_uint(t) << 23);
    return x < Coef::kFlushBelow ? 0.f : __uint_as_float(bits);
}

}  // namespace attn
}  // namespace porter

#endif  // PORTER_ATTENTION_EXP2_POLY_CUH
