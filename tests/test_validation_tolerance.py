"""Metrics (hand-computed) and the tolerance policies (numbers, reasons, verdicts)."""
from __future__ import annotations

import math

import numpy as np
import pytest

from porter.errors import PorterError
from porter.validation import metrics as M
from porter.validation import tolerance as T


def test_metrics_hand_computed():
    ref = np.array([3.0, 4.0])
    out = np.array([3.0, 5.0])
    assert M.max_abs_err(out, ref) == 1.0
    assert M.rel_fro_err(out, ref) == pytest.approx(1 / 5)
    # 1 - 2*(9+20)/(9+16+9+25) = 1 - 58/59
    assert M.deepgemm_diff(out, ref) == pytest.approx(1 / 59)
    assert M.sqnr_db(out, ref) == pytest.approx(10 * math.log10(25))
    assert M.rms(ref) == pytest.approx(math.sqrt(12.5))


def test_metrics_edge_cases():
    z = np.zeros(3)
    assert M.deepgemm_diff(z, z) == 0.0 and M.rel_fro_err(z, z) == 0.0
    assert M.sqnr_db(np.ones(3), np.ones(3)) == float("inf")
    assert M.deepgemm_diff(-np.ones(3), np.ones(3)) == pytest.approx(2.0)
    with pytest.raises(PorterError, match="shapes differ"):
        M.max_abs_err(np.ones(2), np.ones(3))


def test_deepgemm_diff_in_float64_sees_tiny_errors():
    x = np.float32(np.random.default_rng(0).standard_normal(1000))
    y = x * np.float32(1 + 1e-6)
    assert 0 < M.deepgemm_diff(y, x) < 1e-11


def test_gemm_policy_numbers_and_reasons():
    want = {  # variant: (rtol, atol, deepgemm_max, words the reason must cite)
        "bf16": (2 ** -8, 1e-4, 1e-5, ["2^-8", "DeepGEMM", "1e-5"]),
        "fp8": (2 ** -8, 2 ** -10, 1e-3, ["2^-8", "DeepGEMM", "1e-3"]),
        "mxfp8": (2 ** -8, 2 ** -10, 1e-3, ["ue8m0", "DeepGEMM", "1e-3"]),
        "nvfp4": (8e-3, 8e-3, 0.02, ["TransformerEngine", "8e-3", "0.02"]),
    }
    for v, (rtol, atol, dg, words) in want.items():
        p = T.gemm_policy(v)
        assert (p.rtol, p.atol, p.deepgemm_max) == (rtol, atol, dg)
        for w in words:
            assert w in p.reason, (v, w)
    with pytest.raises(PorterError, match="no GEMM policy"):
        T.gemm_policy("fp16")


def test_fast_accumulation_policy_is_chosen_by_the_kernels_accumulation():
    """fp8 accumulated in the wgmma accumulator (accumulation "tensor-core", cuBLASLt's
    FAST_ACCUM) is judged by its own, looser policy, which says why; promoted fp8 and every
    other variant keep their own."""
    fast = T.gemm_policy_for("fp8", "tensor-core")
    assert fast is T.gemm_policy("fp8.fast-accum") and T.policy_key("fp8", "tensor-core") == "fp8.fast-accum"
    assert (fast.rtol, fast.atol, fast.deepgemm_max) == (2 ** -8, 2 ** -3, 1e-2)
    for words in ("FAST_ACCUM", "14", "DeepSeek-V3", "16384", "accumulation=promoted"):
        assert words in fast.reason, words
    assert T.gemm_policy_for("fp8", "promoted") is T.gemm_policy("fp8")
    assert T.gemm_policy_for("bf16", "tensor-core") is T.gemm_policy("bf16")
    assert T.gemm_policy_for("fp8") is T.gemm_policy("fp8")
    # Looser, but an error of the output's own size (a wrong tile) still fails.
    ref = np.random.default_rng(1).standard_normal((64, 64))
    assert fast.check_same_operands(ref * (1 + 2 ** -9), ref)[0]
    assert not fast.check_same_operands(ref + 0.5 * np.roll(ref, 1, axis=0), ref)[0]


def test_attention_policy_numbers_and_reason():
    p = T.attention_policy("bf16")
    assert (p.factor, p.atol, p.lse_atol) == (2.0, 2 ** -8, 1e-4)
    assert "FlashAttention" in p.reason and "2 x" in p.reason
    assert T.policy("attention", "bf16") is p and T.policy("gemm", "fp8") is T.gemm_policy("fp8")
    with pytest.raises(PorterError):
        T.attention_policy("fp8")


def test_same_operand_check_bound():
    p = T.gemm_policy("bf16")
    ref = np.array([1.0, -2.0, 0.0, 4.0])
    bound = p.bound(ref)
    assert bound[2] == pytest.approx(1e-4 * M.rms(ref))
    ok, worst = p.check_same_operands(ref + 0.99 * bound, ref)
    assert ok and worst == pytest.approx(0.99)
    ok, worst = p.check_same_operands(ref + 1.01 * bound, ref)
    assert not ok and worst == pytest.approx(1.01)
    assert p.check_same_operands(np.array([1.0, -2.0, np.inf, 4.0]), ref)[0] is False


def test_bf16_rounding_always_inside_bf16_policy():
    """The bound that justifies rtol = 2^-8: RNE to bf16 never exceeds it."""
    import ml_dtypes
    x = np.random.default_rng(1).standard_normal(100000).astype(np.float32) * 1e3
    r = x.astype(ml_dtypes.bfloat16).astype(np.float64)
    assert np.all(np.abs(r - x) <= 2 ** -8 * np.abs(x))


def test_attention_check_rule():
    p = T.attention_policy()
    ref = np.array([1.0, -1.0])
    same = ref + 0.01
    ok, err, bound = p.check(ref + 0.02, ref, same)
    assert ok and bound == pytest.approx(2 * 0.01 + 2 ** -8)
    assert not p.check(ref + 0.03, ref, same)[0]
    assert p.check_lse(np.float32([-np.inf, 1.0]), np.array([-np.inf, 1.0 + 5e-5]))[0]
    assert not p.check_lse(np.float32([0.0, 1.0]), np.array([-np.inf, 1.0]))[0]
