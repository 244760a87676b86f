"""CPU numerics check of FlashAttention-style attention (bf16).

``check_attention(head_dim, causal, b, hq, hkv, sq, sk, seed)``:
  1. random q, k, v ~ N(0, 1) rounded to bf16;
  2. float64 reference O and lse on those bf16 inputs;
  3. the kernel model (online softmax over K/V tiles, exp2 with log2 e folded,
     bf16 P, per-tile rescale) and the same-precision plain attention;
  4. FlashAttention's rule max|O - ref| <= 2 max|O_same - ref| + atol, and the
     fp32 LSE within lse_atol of the reference (tolerance.attention_policy).
``fault`` runs a deliberately broken model (see reference_attention.FAULTS), so a
test can show the check fails on it.

FA4-style softmax (the tcgen05 mainloop): ``rescale_threshold`` > 0 models lazy
rescaling - a row keeps its running max m unless the tile's max exceeds it by more than
the threshold (in exp2 units), so P = 2^(s - m) <= 2^threshold and alpha = 1 (no O
rescale). O and l then share the stale m, so the final O / l and lse = (m + log2 l) ln 2
are the same quantities, rounded in fp32 at a larger scale: the attention policy's bound
holds unchanged. ``poly_exp2_share`` > 0 models the exponentials computed on the FMA units
(exp2_poly_fp32, the kernel's own steps and coefficients in fp32) for that share of each
row's column pairs, ex2 for the rest.
"""
from __future__ import annotations

import numpy as np

from porter.errors import PorterError
from porter.validation import metrics, tolerance
from porter.validation.reference_attention import (
    LN2, LOG2E, round_bf16, attention_same_precision, check_shapes, flash_attention_model,
    kv_tiles, reference_attention)

ALL_CASES = (
    # (head_dim, causal, b, hq, hkv, sq, sk)
    (64, False, 1, 2, 2, 128, 128),
    (64, True, 1, 2, 2, 128, 128),
    (128, True, 2, 4, 1, 64, 200),      # GQA 4:1, Sq < Sk, tail tile (200 = 128 + 72)
    (128, False, 1, 4, 2, 96, 300),     # GQA 2:1, tail tile
    (64, True, 1, 2, 1, 160, 100),      # Sq > Sk: the first 60 rows see no key
    (256, False, 1, 1, 1, 33, 257),
)


def random_qkv(b: int, hq: int, hkv: int, sq: int, sk: int, d: int, seed: int = 0):
    """bf16-valued q [B,Hq,Sq,D], k, v [B,Hkv,Sk,D] as float64 arrays."""
    rng = np.random.default_rng(seed)
    q = round_bf16(rng.standard_normal((b, hq, sq, d)))
    k = round_bf16(rng.standard_normal((b, hkv, sk, d)))
    v = round_bf16(rng.standard_normal((b, hkv, sk, d)))
    return q, k, v


# 2^f on [-0.5, 0.5] as a degree-4 polynomial (relative-error least squares on Chebyshev
# nodes, coefficients rounded to fp32; Horner with FMAs). Max relative error 2.7e-6
# (2^-18.5) in fp32, vs bf16 P's half ulp 2^-9 and the LSE tolerance 1e-4 (a degree-3
# fit's 7.7e-5 would spend most of the latter). The kernel renders these same values.
EXP2_POLY = (0.9999991655349731, 0.6931219696998596, 0.24024981260299683,
             0.05591703951358795, 0.009560510516166687)
EXP2_POLY_MAX_REL_ERR = 2.8e-6
EXP2_ROUND_MAGIC = 12582912.0      # 1.5 x 2^23: x + magic rounds x to an integer in the low mantissa bits
EXP2_MIN_ARG = -127.0              # x clamped here first, so -inf makes no NaN on the way
EXP2_FLUSH_BELOW = -126.0          # 2^x < 2^-126 is 0, as ex2.approx.ftz flushes it (masked scores: -inf -> 0)


def exp2_poly_fp32(x) -> np.ndarray:
    """The kernel's FMA-unit exp2 in fp32: x clamped to >= -127, j = round(x) by the
    1.5 x 2^23 trick, f = x - j in [-0.5, 0.5], p = poly(f), 2^x = p with j added to its
    exponent field (an integer add of j << 23); 0 where x < -126 (ftz, and -inf -> 0)."""
    x0 = np.asarray(x, dtype=np.float32)
    x = np.maximum(x0, np.float32(EXP2_MIN_ARG))
    t = (x + np.float32(EXP2_ROUND_MAGIC)).astype(np.float32)
    j = (t - np.float32(EXP2_ROUND_MAGIC)).astype(np.float32)
    f = (x - j).astype(np.float32)
    c = [np.float32(v) for v in EXP2_POLY]
    p = np.full_like(f, c[-1])
    for ck in reversed(c[:-1]):     # fma(p, f, c_k): the product of two fp32 values is exact in fp64
        p = (p.astype(np.float64) * f + np.float64(ck)).astype(np.float32)
    bits = p.view(np.int32) + (t.view(np.int32) - np.int32(0x4B400000)) * np.int32(1 << 23)
    return np.where(x0 < np.float32(EXP2_FLUSH_BELOW), np.float32(0), bits.astype(np.int32).view(np.float32))


def poly_columns(block_n: int, share: float) -> np.ndarray:
    """Which columns of a block_n-wide S row take the polynomial: column pair c (keys 2c, 2c+1)
    when c % 8 < round(8 x share), the kernel's compile-time split."""
    pairs = np.arange(block_n) // 2
    return (pairs % 8) < int(round(8 * share))


def tcgen05_softmax_model(q, k, v, causal: bool, block_n: int, softmax_scale: float | None,
                          rescale_threshold: float = 0.0, poly_exp2_share: float = 0.0):
    """flash_attention_model with the tcgen05 mainloop's FA4 softmax: lazy rescaling above
    ``rescale_threshold`` exp2 units and the polynomial exp2 on ``poly_exp2_share`` of the
    column pairs. Returns (O, lse, rescaled), rescaled = how many (row, tile) steps with a
    finite old max moved it (so a test can see both paths taken)."""
    b, hq, hkv, sq, sk, d = check_shapes(q, k, v)
    scale = (1.0 / np.sqrt(d)) if softmax_scale is None else softmax_scale
    fold = np.float32(scale * LOG2E)
    q64, k64, v64, allowed, n_tiles = kv_tiles(q, k, v, causal, block_n)
    poly = poly_columns(block_n, poly_exp2_share)
    neg_inf = np.float32(-np.inf)
    m = np.full((b, hq, sq), neg_inf, dtype=np.float32)
    l = np.zeros((b, hq, sq), dtype=np.float32)
    acc = np.zeros((b, hq, sq, d), dtype=np.float32)
    rescaled = 0
    for t in range(n_tiles):
        cols = slice(t * block_n, (t + 1) * block_n)
        s = np.matmul(q64, k64[:, :, cols, :].transpose(0, 1, 3, 2)).astype(np.float32)
        s2 = np.where(allowed[None, None, :, cols], s * fold, neg_inf)
        row_max = np.maximum(m, np.max(s2, axis=-1))
        with np.errstate(invalid="ignore"):     # -inf - -inf for a row that has seen no key yet
            keep = np.isfinite(m) & ((row_max - m) <= np.float32(rescale_threshold))
        m_new = np.where(keep, m, row_max)
        rescaled += int(np.sum(np.isfinite(m) & (m_new != m)))
        m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)
        alpha = np.where(m_new == m, np.float32(1), np.exp2(m - m_use)).astype(np.float32)
        x = (s2 - m_use[..., None]).astype(np.float32)
        p = np.where(poly, exp2_poly_fp32(x), np.exp2(x)).astype(np.float32)
        l = l * alpha + np.sum(p, axis=-1, dtype=np.float32)
        pv = np.matmul(round_bf16(p), v64[:, :, cols, :]).astype(np.float32)
        acc = acc * alpha[..., None] + pv
        m = m_new
    empty = l == 0
    o = round_bf16(acc / np.where(empty, np.float32(1), l)[..., None])
    o = np.where(empty[..., None], 0.0, o)
    with np.errstate(divide="ignore"):
        lse2 = m + np.log2(np.where(empty, np.float32(1), l))
    lse = np.where(empty, neg_inf, lse2 * np.float32(LN2)).astype(np.float32)
    return o, lse, rescaled


def check_attention_outputs(out, lse, ref, lse_ref, same, variant: str = "bf16") -> dict:
    """Judge a kernel's (O, lse) against the references with the attention policy."""
    pol = tolerance.attention_policy(variant)
    ok_o, err, bound = pol.check(out, ref, same)
    ok_lse, lse_err = pol.check_lse(lse, lse_ref)
    return {
        "max_abs_err": err,
        "same_precision_err": metrics.max_abs_err(same, ref),
        "allowed_err": bound,
        "rel_fro_err": metrics.rel_fro_err(out, ref),
        "deepgemm_diff": metrics.deepgemm_diff(out, ref),
        "sqnr_db": metrics.sqnr_db(out, ref),
        "lse_max_err": lse_err,
        "passed_output": ok_o,
        "passed_lse": ok_lse,
        "tolerance": {"factor": pol.factor, "atol": pol.atol, "atol_units": "max|ref|",
                      "lse_atol": pol.lse_atol},
        "reason": pol.reason,
        "passed": bool(ok_o and ok_lse),
    }


def check_attention(head_dim: int, causal: bool, b: int = 1, hq: int = 2, hkv: int = 2,
                    sq: int = 128, sk: int = 128, seed: int = 0, block_n: int = 128,
                    softmax_scale: float | None = None, fault: str | None = None,
                    rescale_threshold: float = 0.0, poly_exp2_share: float = 0.0) -> dict:
    """Run the CPU attention numerics check; see the module docstring."""
    for name, val in (("head_dim", head_dim), ("b", b), ("hq", hq), ("hkv", hkv),
                      ("sq", sq), ("sk", sk), ("block_n", block_n)):
        if not isinstance(val, (int, np.integer)) or val <= 0:
            raise PorterError(f"attention_numerics: {name}={val!r} must be a positive integer")
    q, k, v = random_qkv(b, hq, hkv, sq, sk, head_dim, seed)
    check_shapes(q, k, v)
    ref, lse_ref = reference_attention(q, k, v, causal, softmax_scale)
    same, _ = attention_same_precision(q, k, v, causal, softmax_scale)
    fa4 = rescale_threshold > 0 or poly_exp2_share > 0
    if fa4 and fault is not None:
        raise PorterError("attention_numerics: a fault runs the plain kernel model; "
                          "give no rescale_threshold / poly_exp2_share with it")
    if not 0.0 <= poly_exp2_share <= 1.0 or rescale_threshold < 0:
        raise PorterError(f"attention_numerics: poly_exp2_share={poly_exp2_share!r} must be in [0, 1] "
                          f"and rescale_threshold={rescale_threshold!r} >= 0")
    rescaled = None
    if fa4:
        out, lse, rescaled = tcgen05_softmax_model(q, k, v, causal, block_n, softmax_scale,
                                                   rescale_threshold, poly_exp2_share)
    else:
        out, lse = flash_attention_model(q, k, v, causal, block_n, softmax_scale, fault=fault)
    res = {"variant": "bf16", "shape": {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk,
                                        "head_dim": head_dim},
           "causal": bool(causal), "block_n": block_n, "seed": seed, "fault": fault,
           "rescale_threshold": rescale_threshold, "poly_exp2_share": poly_exp2_share,
           "rescaled_steps": rescaled}
    res.update(check_attention_outputs(out, lse, ref, lse_ref, same))
    return res


def check_attention_all(seeds=(0, 1), block_n: int = 128) -> list[dict]:
    """check_attention over ALL_CASES and several seeds."""
    return [check_attention(*case, seed=s, block_n=block_n) for case in ALL_CASES for s in seeds]
