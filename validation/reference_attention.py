"""Attention references: float64 softmax attention, a FlashAttention kernel model, and a
same-precision (bf16) plain attention for FlashAttention's 2x rule.

Layout: q [B, Hq, Sq, D], k and v [B, Hkv, Sk, D]; grouped-query attention when
Hkv < Hq (Hq % Hkv == 0): query head h reads key/value head h // (Hq // Hkv).
Softmax scale defaults to 1/sqrt(D).

Causal masking is *bottom-right aligned*: query row i may see key j iff
j <= i + (Sk - Sq).  With Sq == Sk this is the usual lower triangle; with Sq < Sk
(decoding / chunked prefill against a longer KV cache) the last query sees every
key; with Sq > Sk the first Sq - Sk query rows see no key at all.  This is the
convention of FlashAttention >= 2.1 (and of a KV cache where the queries are the
newest tokens).  A row that sees no key has output 0 and log-sum-exp -inf (the
sum of exponentials is 0); the kernel model and the references agree on that.

The log-sum-exp is per query row in natural log: lse = log(sum_j exp(scale * q.k_j)).
The float64 reference returns it in float64; the kernel model returns fp32 (what
the kernel stores for the backward pass).
"""
from __future__ import annotations

import math

import ml_dtypes
import numpy as np

from porter.errors import PorterError

LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453
FAULTS = ("no_rescale", "no_tail_mask", "no_log2e")


def round_bf16(x) -> np.ndarray:
    """Round to bfloat16 (RNE) and return float64 values."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def check_shapes(q, k, v) -> tuple[int, int, int, int, int, int]:
    """(B, Hq, Hkv, Sq, Sk, D) after checking the layouts; PorterError otherwise."""
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise PorterError(
            "reference_attention: q, k, v must be 4-D [B, H, S, D]; "
            f"got q {q.shape}, k {k.shape}, v {v.shape}")
    b, hq, sq, d = q.shape
    if k.shape != v.shape:
        raise PorterError(f"reference_attention: k {k.shape} and v {v.shape} must have the same shape")
    bk, hkv, sk, dk = k.shape
    if bk != b or dk != d:
        raise PorterError(
            f"reference_attention: batch/head_dim differ: q {q.shape} vs k {k.shape}")
    if hkv <= 0 or hq % hkv != 0:
        raise PorterError(
            f"reference_attention: grouped-query attention needs Hq % Hkv == 0; got Hq={hq}, Hkv={hkv}")
    if sq <= 0 or sk <= 0 or d <= 0:
        raise PorterError(f"reference_attention: empty dimension in q {q.shape} / k {k.shape}")
    return b, hq, hkv, sq, sk, d


def causal_mask(sq: int, sk: int) -> np.ndarray:
    """Bottom-right aligned causal mask [Sq, Sk]: True where query i may see key j."""
    i = np.arange(sq)[:, None]
    j = np.arange(sk)[None, :]
    return j <= i + (sk - sq)


def _expand_kv(x: np.ndarray, hq: int) -> np.ndarray:
    return np.repeat(x, hq // x.shape[1], axis=1)


def kv_tiles(q, k, v, causal: bool, block_n: int, keep_pad: bool = False):
    """The operands a tiled (flash) model walks: (q64, k64, v64, allowed, n_tiles) with K
    and V in float64, expanded to the query heads and zero-padded to whole ``block_n``
    tiles, and the mask of allowed (query, key) pairs; the padded key columns are
    masked unless ``keep_pad`` (a planted fault)."""
    b, hq, _, sq, sk, d = check_shapes(q, k, v)
    q64 = np.asarray(q, dtype=np.float64)
    k64 = _expand_kv(np.asarray(k, dtype=np.float64), hq)
    v64 = _expand_kv(np.asarray(v, dtype=np.float64), hq)
    allowed = causal_mask(sq, sk) if causal else np.ones((sq, sk), dtype=bool)
    n_tiles = -(-sk // block_n)
    pad = n_tiles * block_n - sk
    if pad:
        zeros = np.zeros((b, hq, pad, d))
        k64 = np.concatenate([k64, zeros], axis=2)
        v64 = np.concatenate([v64, zeros], axis=2)
        allowed = np.concatenate([allowed, np.full((sq, pad), keep_pad)], axis=1)
    return q64, k64, v64, allowed, n_tiles


def _scale(d: int, softmax_scale: float | None) -> float:
    return 1.0 / math.sqrt(d) if softmax_scale is None else float(softmax_scale)


def reference_attention(q, k, v, causal: bool = False, softmax_scale: float | None = None):
    """float64 attention of the given (bf16-valued) inputs: (O [B,Hq,Sq,D], lse [B,Hq,Sq])."""
    b, hq, hkv, sq, sk, d = check_shapes(q, k, v)
    scale = _scale(d, softmax_scale)
    q64 = np.asarray(q, dtype=np.float64)
    k64 = _expand_kv(np.asarray(k, dtype=np.float64), hq)
    v64 = _expand_kv(np.asarray(v, dtype=np.float64), hq)
    s = np.matmul(q64, k64.transpose(0, 1, 3, 2)) * scale
    if causal:
        s = np.where(causal_mask(sq, sk), s, -np.inf)
    m = np.max(s, axis=-1, keepdims=True)
    empty = np.isneginf(m)
    m_safe = np.where(empty, 0.0, m)
    p = np.exp(s - m_safe)
    l = np.sum(p, axis=-1, keepdims=True)
    o = np.matmul(p, v64) / np.where(empty, 1.0, l)
    o = np.where(empty, 0.0, o)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, 1.0, l)))[..., 0]
    return o, lse


def attention_same_precision(q, k, v, causal: bool = False, softmax_scale: float | None = None):
    """Plain softmax attention at the kernel's precision (FlashAttention's 'pt' reference).

    q is pre-scaled and rounded to bf16, scores Q K^T accumulate in fp32 and round to
    bf16, softmax runs in fp32 and P rounds to bf16, P V accumulates in fp32 and the
    output rounds to bf16 -- the steps of a bf16 PyTorch attention.
    Returns (O as float64 of bf16 values, lse fp32 from the bf16 scores).
    """
    b, hq, hkv, sq, sk, d = check_shapes(q, k, v)
    scale = _scale(d, softmax_scale)
    qs = round_bf16(np.asarray(q, dtype=np.float32) * np.float32(scale))
    k64 = _expand_kv(np.asarray(k, dtype=np.float64), hq)
    v64 = _expand_kv(np.asarray(v, dtype=np.float64), hq)
    s = round_bf16(np.matmul(qs, k64.transpose(0, 1, 3, 2)).astype(np.float32)).astype(np.float32)
    if causal:
        s = np.where(causal_mask(sq, sk), s, np.float32(-np.inf))
    m = np.max(s, axis=-1, keepdims=True)
    empty = np.isneginf(m)
    m_safe = np.where(empty, np.float32(0), m)
    e = np.exp(s - m_safe)
    l = np.sum(e, axis=-1, keepdims=True, dtype=np.float32)
    p = round_bf16(e / np.where(empty, np.float32(1), l))
    o = round_bf16(np.matmul(p, v64).astype(np.float32))
    o = np.where(empty, 0.0, o)
    with np.errstate(divide="ignore"):
        lse = np.where(empty, -np.inf, m_safe + np.log(np.where(empty, np.float32(1), l)))[..., 0]
    return o, lse.astype(np.float32)


def flash_attention_model(q, k, v, causal: bool = False, block_n: int = 128,
                          softmax_scale: float | None = None, fault: str | None = None):
    """What a FlashAttention forward kernel computes, tile by tile over K/V.

    Per K/V tile of ``block_n`` keys (the last one padded with zero rows, as a TMA
    load out of bounds returns, and masked):
      S  = Q K^T                      fp32 accumulation of bf16 inputs
      S2 = S * (scale * log2 e)       fp32; the log2(e) factor folded in so exp2 works
      m' = max(m, rowmax S2); alpha = exp2(m - m'); P = exp2(S2 - m')   (fp32)
      l  = l * alpha + rowsum(P)      fp32, from the unrounded P
      O  = O * alpha + bf16(P) V      P rounded to bf16 for the tensor-core PV MMA
    then O = bf16(O / l), lse = (m + log2 l) * ln 2 (fp32).  A row whose keys are all
    masked so far keeps m = -inf and uses 0 in the exponent (no NaN from -inf - -inf).

    ``fault`` injects a known bug so the tests can show the check catches it:
    "no_rescale" (O not multiplied by alpha), "no_tail_mask" (padded keys of the
    last tile left in the softmax), "no_log2e" (exp2 without the log2 e factor).
    Returns (O as float64 of bf16 values [B,Hq,Sq,D], lse fp32 [B,Hq,Sq]).
    """
    if fault is not None and fault not in FAULTS:
        raise PorterError(f"reference_attention: unknown fault {fault!r}; use one of {FAULTS}")
    if block_n <= 0:
        raise PorterError(f"reference_attention: block_n={block_n} must be positive")
    b, hq, hkv, sq, sk, d = check_shapes(q, k, v)
    scale = _scale(d, softmax_scale)
    fold = np.float32(scale if fault == "no_log2e" else scale * LOG2E)
    # padded key columns j >= Sk must be masked.  The causal rule already hides them
    # (j >= Sk > i + Sk - Sq for every row i), so the tail-mask fault can only show in
    # non-causal attention, as in a real kernel.
    q64, k64, v64, allowed, n_tiles = kv_tiles(q, k, v, causal, block_n,
                                               keep_pad=fault == "no_tail_mask" and not causal)
    neg_inf = np.float32(-np.inf)
    m = np.full((b, hq, sq), neg_inf, dtype=np.float32)
    l = np.zeros((b, hq, sq), dtype=np.float32)
    acc = np.zeros((b, hq, sq, d), dtype=np.float32)
    for t in range(n_tiles):
        cols = slice(t * block_n, (t + 1) * block_n)
        s = np.matmul(q64, k64[:, :, cols, :].transpose(0, 1, 3, 2)).astype(np.float32)
        s2 = s * fold
        s2 = np.where(allowed[None, None, :, cols], s2, neg_inf)
        m_new = np.maximum(m, np.max(s2, axis=-1))
        m_use = np.where(np.isneginf(m_new), np.float32(0), m_new)
        alpha = np.exp2(m - m_use)                      # exp2(-inf) = 0 for the first tile
        p = np.exp2(s2 - m_use[..., None])
        l = l * alpha + np.sum(p, axis=-1, dtype=np.float32)
        pv = np.matmul(round_bf16(p), v64[:, :, cols, :]).astype(np.float32)
        acc = (acc if fault == "no_rescale" else acc * alpha[..., None]) + pv
        m = m_new
    empty = l == 0
    o = round_bf16(acc / np.where(empty, np.float32(1), l)[..., None])
    o = np.where(empty[..., None], 0.0, o)
    with np.errstate(divide="ignore"):
        lse2 = m + np.log2(np.where(empty, np.float32(1), l))
    lse = np.where(empty, neg_inf, lse2 * np.float32(LN2)).astype(np.float32)
    return o, lse
