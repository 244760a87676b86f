"""Reference GEMM, kernel model, and the CPU GEMM numerics check."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from porter.errors import PorterError
from porter.validation import gemm_numerics as G
from porter.validation import quantize as Q
from porter.validation import reference_gemm as R

VARIANTS = ("bf16", "fp8", "mxfp8", "nvfp4")


def test_reference_is_a_times_b_transposed():
    rng = np.random.default_rng(0)
    a = rng.standard_normal((5, 7))
    b = rng.standard_normal((3, 7))
    c = R.reference_gemm(a, b)
    assert c.shape == (5, 3)
    assert c[2, 1] == pytest.approx(sum(a[2, k] * b[1, k] for k in range(7)))
    with pytest.raises(PorterError, match="same K"):
        R.reference_gemm(a, b.T)


def test_model_is_exact_on_small_integers():
    """Integers in bf16 with small sums: every fp32 step is exact, only bf16 rounds."""
    rng = np.random.default_rng(1)
    a = rng.integers(-3, 4, (8, 64)).astype(np.float64)
    b = rng.integers(-3, 4, (16, 64)).astype(np.float64)
    out = R.gemm_model(a, b, mma_k=16, out_dtype="fp32")
    np.testing.assert_array_equal(out, a @ b.T)


def test_model_accumulates_in_fp32_per_mma_chunk():
    """1 + many tiny terms: fp32 accumulation across MMAs loses them; one MMA keeps them."""
    k = 64
    a = np.ones((1, k))
    b = np.full((1, k), 2.0 ** -25)
    b[0, 0] = 1.0
    # mma_k = 64: one chunk, summed exactly then rounded: 1 + 63*2^-25 -> fp32
    one_chunk = R.gemm_model(a, b, mma_k=64, out_dtype="fp32")[0, 0]
    assert one_chunk == np.float32(1 + 63 * 2.0 ** -25)
    # mma_k = 1: every tiny term is added to 1.0 in fp32 and lost (below half an ulp)
    per_elem = R.gemm_model(a, b, mma_k=1, out_dtype="fp32")[0, 0]
    assert per_elem == 1.0


def test_model_applies_scales_where_the_kernel_does():
    rng = np.random.default_rng(2)
    a = rng.standard_normal((4, 128)).astype(np.float32)
    b = rng.standard_normal((6, 128)).astype(np.float32)
    for quant in (Q.quantize_per_tensor, Q.quantize_mx, Q.quantize_nvfp4):
        qa, qb = quant(a), quant(b)
        ref = R.reference_gemm(qa, qb)
        out = R.gemm_model(qa, qb, mma_k=32, out_dtype="fp32")
        np.testing.assert_allclose(out, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max())


def test_model_output_is_bf16():
    import ml_dtypes
    rng = np.random.default_rng(3)
    out = R.gemm_model(Q.to_bf16(rng.standard_normal((4, 32))),
                       Q.to_bf16(rng.standard_normal((4, 32))), mma_k=16)
    np.testing.assert_array_equal(out, out.astype(ml_dtypes.bfloat16).astype(np.float64))


def test_model_rejects_bad_mma_k():
    a = np.ones((2, 96))
    with pytest.raises(PorterError, match="multiple of the MMA K"):
        R.gemm_model(a, a, mma_k=64)
    qa = Q.quantize_nvfp4(np.ones((2, 48), np.float32))
    with pytest.raises(PorterError, match="do not nest"):
        R.gemm_model(qa, qa, mma_k=24)


@pytest.mark.parametrize("variant", VARIANTS)
def test_check_gemm_passes_and_reports(variant):
    r = G.check_gemm(variant, 64, 96, 192, seed=0)
    assert r["passed"], r
    for key in ("variant", "shape", "max_abs_err", "rel_fro_err", "deepgemm_diff", "sqnr_db",
                "tolerance", "reason", "passed"):
        assert key in r
    assert r["variant"] == variant and r["shape"] == (64, 96, 192)
    assert r["deepgemm_diff"] <= r["tolerance"]["deepgemm_max"]
    assert isinstance(r["passed"], bool) and r["reason"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_check_gemm_all_passes(variant):
    results = G.check_gemm_all(variant)
    shapes = {r["shape"] for r in results}
    assert any(m != n for m, n, _ in shapes)                     # non-square
    assert any(k & (k - 1) for _, _, k in shapes)                # K not a power of two
    assert all(r["passed"] for r in results), [r for r in results if not r["passed"]]


def test_check_gemm_mma_k_and_rule_options():
    assert G.check_gemm("mxfp8", 32, 32, 128, mma_k=64)["passed"]
    assert G.check_gemm("nvfp4", 32, 32, 128, mma_k=16)["passed"]
    # The OCP floor rule is checked like RCEIL on the same operands, but it clips
    # block maxima (amax / scale can reach ~2x max_elem), so its loss against the
    # unquantized product is larger: the reason RCEIL is the default.
    floor = [G.check_gemm("mxfp8", 128, 128, 256, seed=s, mx_rule="floor") for s in range(3)]
    rceil = [G.check_gemm("mxfp8", 128, 128, 256, seed=s) for s in range(3)]
    assert all(r["passed_same_operands"] for r in floor)
    assert np.mean([r["deepgemm_diff"] for r in floor]) > np.mean([r["deepgemm_diff"] for r in rceil])


@pytest.mark.parametrize("variant,k,need", [("mxfp8", 48, 32), ("nvfp4", 40, 16)])
def test_check_gemm_rejects_k_off_block(variant, k, need):
    with pytest.raises(PorterError, match=f"M=8 N=8 K={k}.*multiple of {need}"):
        G.check_gemm(variant, 8, 8, k)


def test_check_gemm_rejects_bad_input():
    with pytest.raises(PorterError, match="unknown variant"):
        G.check_gemm("int8", 8, 8, 32)
    with pytest.raises(PorterError, match="MMA K"):
        G.check_gemm("fp8", 8, 8, 48)          # fp8 MMA K is 32
    with pytest.raises(PorterError, match="positive"):
        G.check_gemm("bf16", 0, 8, 32)


# ------------------------------------------------ a check that cannot fail is a defect

def _operands(variant, m=64, n=64, k=256, seed=0):
    a, b = G.random_operands(m, n, k, seed)
    return a, b, Q.quantize_for(variant, a), Q.quantize_for(variant, b)


@pytest.mark.parametrize("variant", ["mxfp8", "nvfp4"])
def test_wrong_block_scale_fails(variant):
    """A kernel reading one block scale from the wrong place fails the same-operand check."""
    a, b, qa, qb = _operands(variant)
    bad_scales = qa.block_scales.copy()
    bad_scales[:, [0, 1]] = bad_scales[:, [1, 0]]                 # swapped K-blocks
    qa_bad = dataclasses.replace(qa, block_scales=bad_scales)
    out = R.gemm_model(qa_bad, qb, mma_k=R.DEFAULT_MMA_K[variant])
    r = G.check_outputs(variant, out, R.reference_gemm(qa, qb), a.astype(np.float64) @ b.T)
    assert not r["passed_same_operands"] and not r["passed"]


@pytest.mark.parametrize("variant", ["fp8", "nvfp4"])
def test_missing_epilogue_scale_fails(variant):
    a, b, qa, qb = _operands(variant)
    out = R.gemm_model(dataclasses.replace(qa, tensor_scale=np.float32(1)), qb,
                       mma_k=R.DEFAULT_MMA_K[variant])
    r = G.check_outputs(variant, out, R.reference_gemm(qa, qb), a.astype(np.float64) @ b.T)
    assert not r["passed"]


def test_fp16_output_instead_of_bf16_would_pass_but_one_bad_element_fails():
    a, b, qa, qb = _operands("bf16")
    ref = R.reference_gemm(qa, qb)
    out = R.gemm_model(qa, qb, mma_k=16).copy()
    unq = a.astype(np.float64) @ b.T
    assert G.check_outputs("bf16", out, ref, unq)["passed"]
    out[3, 5] += 0.02 * np.abs(ref).max()
    assert not G.check_outputs("bf16", out, ref, unq)["passed"]
    out[3, 5] = np.nan
    assert not G.check_outputs("bf16", out, ref, unq)["passed"]


def test_quantization_loss_is_caught_by_deepgemm_diff():
    """An output that matches its own (badly) quantized operands still fails: the
    DeepGEMM diff against the unquantized product sees the loss."""
    a, b = G.random_operands(64, 64, 256, 0)
    qa = Q.quantize_per_tensor(a, "e5m2")       # e5m2 where e4m3 was promised
    qb = Q.quantize_per_tensor(b, "e5m2")
    ref = R.reference_gemm(qa, qb)
    out = R.gemm_model(qa, qb, mma_k=32)
    r = G.check_outputs("fp8", out, ref, a.astype(np.float64) @ b.T)
    assert r["passed_same_operands"] and not r["passed_deepgemm"] and not r["passed"]
