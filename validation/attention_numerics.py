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
"""
from __future__ import annotations

import numpy as np

from porter.errors import PorterError
from porter.validation import metrics, tolerance
from porter.validation.reference_attention import (
    round_bf16, attention_same_precision, check_shapes, flash_attention_model, reference_attention)

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
                    softmax_scale: float | None = None, fault: str | None = None) -> dict:
    """Run the CPU attention numerics check; see the module docstring."""
    for name, val in (("head_dim", head_dim), ("b", b), ("hq", hq), ("hkv", hkv),
                      ("sq", sq), ("sk", sk), ("block_n", block_n)):
        if not isinstance(val, (int, np.integer)) or val <= 0:
            raise PorterError(f"attention_numerics: {name}={val!r} must be a positive integer")
    q, k, v = random_qkv(b, hq, hkv, sq, sk, head_dim, seed)
    check_shapes(q, k, v)
    ref, lse_ref = reference_attention(q, k, v, causal, softmax_scale)
    same, _ = attention_same_precision(q, k, v, causal, softmax_scale)
    out, lse = flash_attention_model(q, k, v, causal, block_n, softmax_scale, fault=fault)
    res = {"variant": "bf16", "shape": {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk,
                                        "head_dim": head_dim},
           "causal": bool(causal), "block_n": block_n, "seed": seed, "fault": fault}
    res.update(check_attention_outputs(out, lse, ref, lse_ref, same))
    return res


def check_attention_all(seeds=(0, 1), block_n: int = 128) -> list[dict]:
    """check_attention over ALL_CASES and several seeds."""
    return [check_attention(*case, seed=s, block_n=block_n) for case in ALL_CASES for s in seeds]
