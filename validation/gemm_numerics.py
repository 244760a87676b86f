"""CPU numerics check of a GEMM variant: quantize, run the kernel model, judge it.

``check_gemm(variant, m, n, k)``:
  1. random fp32 inputs, normal with a few outliers (x20) so the scale logic is
     exercised; B is divided by sqrt(K) so C has unit RMS;
  2. quantize A and B for the variant (quantize.quantize_for);
  3. the kernel model (reference_gemm.gemm_model) vs the float64 reference on the
     same quantized operands, judged by the variant's tolerance policy;
  4. the DeepGEMM diff of the model output vs the float64 product of the
     unquantized inputs, judged by the variant's DeepGEMM threshold.
It passes when both hold.  ``check_outputs`` is the judging step alone, for a
device output or a deliberately broken model.
"""
from __future__ import annotations

import numpy as np

from porter.errors import PorterError
from porter.validation import metrics, quantize, reference_gemm, tolerance

VARIANTS = quantize.GEMM_VARIANTS

# Shapes for check_gemm_all, a check of the arithmetic alone: square, non-square, K not
# a power of two (but a multiple of every block size and MMA K: 96 = 3 x 32, 320 = 5 x 64,
# 192 = 3 x 64). Several are not shapes any porter kernel takes (M, N below its tiles);
# a kernel's numerics-model level runs porter.kernels.gemm.numerics_shapes(spec) instead.
ALL_SHAPES = ((128, 128, 256), (64, 192, 320), (256, 96, 192), (200, 72, 512), (8, 256, 128))


def random_operands(m: int, n: int, k: int, seed: int = 0,
                    outlier_frac: float = 0.001, outlier_scale: float = 10.0):
    """fp32 A [M, K], B [N, K]: N(0, 1) with a few outliers; B scaled by 1/sqrt(K)."""
    rng = np.random.default_rng(seed)
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((n, k))
    for x in (a, b):
        mask = rng.random(x.shape) < outlier_frac
        x[mask] *= outlier_scale
    b /= np.sqrt(k)
    return a.astype(np.float32), b.astype(np.float32)


def validate_shape(variant: str, m: int, n: int, k: int, mma_k: int | None = None) -> int:
    """The MMA K to use; raises PorterError for a shape the variant cannot take."""
    if variant not in VARIANTS:
        raise PorterError(
            f"gemm_numerics: unknown variant {variant!r}; use one of {', '.join(VARIANTS)}")
    for name, v in (("M", m), ("N", n), ("K", k)):
        if not isinstance(v, (int, np.integer)) or v <= 0:
            raise PorterError(f"gemm_numerics: {name}={v!r} must be a positive integer")
    block = quantize.block_size(variant)
    if k % block != 0:
        fmt = "MXFP8 (ue8m0 scale per 32 along K)" if variant == "mxfp8" else \
            "NVFP4 (e4m3 scale per 16 along K)"
        raise PorterError(
            f"gemm_numerics: shape M={m} N={n} K={k} cannot be {fmt}: K must be a multiple "
            f"of {block}; pad K to {-(-k // block) * block}")
    mk = reference_gemm.DEFAULT_MMA_K[variant] if mma_k is None else int(mma_k)
    if mk <= 0 or k % mk != 0:
        raise PorterError(
            f"gemm_numerics: shape M={m} N={n} K={k}: K must be a multiple of the MMA K "
            f"({mk}) for {variant}; pad K or pass mma_k dividing K")
    return mk


def check_outputs(variant: str, out, ref_same, ref_unquantized) -> dict:
    """Judge an output against both references with the variant's policy."""
    pol = tolerance.gemm_policy(variant)
    ok_same, worst = pol.check_same_operands(out, ref_same)
    ok_dg, dg = pol.check_deepgemm(out, ref_unquantized)
    return {
        "max_abs_err": metrics.max_abs_err(out, ref_same),
        "rel_fro_err": metrics.rel_fro_err(out, ref_same),
        "sqnr_db": metrics.sqnr_db(out, ref_same),
        "worst_ratio": worst,                      # max |out-ref| / allowed, <= 1 passes
        "passed_same_operands": ok_same,
        "deepgemm_diff": dg,
        "deepgemm_max": pol.deepgemm_max,
        "sqnr_db_vs_unquantized": metrics.sqnr_db(out, ref_unquantized),
        "passed_deepgemm": ok_dg,
        "tolerance": {"rtol": pol.rtol, "atol": pol.atol, "atol_units": "rms(ref)",
                      "deepgemm_max": pol.deepgemm_max},
        "reason": pol.reason,
        "passed": bool(ok_same and ok_dg),
    }


def check_gemm(variant: str, m: int, n: int, k: int, seed: int = 0,
               mma_k: int | None = None, mx_rule: str = "rceil", promote_k: int | None = None) -> dict:
    """Run the CPU numerics check of ``variant`` at M x N x K; see the module docstring.

    ``promote_k``: the kernel's promotion interval in K elements (reference_gemm.gemm_model);
    None = one accumulator over the whole K.
    The dict: variant, shape (M, N, K), seed, mma_k, promote_k; max_abs_err, rel_fro_err,
    sqnr_db and worst_ratio (max |out-ref| / allowed) against the same-operand
    reference, passed_same_operands; deepgemm_diff, sqnr_db_vs_unquantized and
    passed_deepgemm against the unquantized float64 product; tolerance (the
    policy's numbers), reason (its why), passed (both checks).
    """
    mk = validate_shape(variant, m, n, k, mma_k)
    a, b = random_operands(m, n, k, seed)
    qa = quantize.quantize_for(variant, a, mx_rule=mx_rule)
    qb = quantize.quantize_for(variant, b, mx_rule=mx_rule)
    out = reference_gemm.gemm_model(qa, qb, mma_k=mk, promote_k=promote_k)
    ref_same = reference_gemm.reference_gemm(qa, qb)
    ref_unq = a.astype(np.float64) @ b.astype(np.float64).T
    res = {"variant": variant, "shape": (m, n, k), "seed": seed, "mma_k": mk, "promote_k": promote_k}
    res.update(check_outputs(variant, out, ref_same, ref_unq))
    return res


def check_gemm_all(variant: str, seeds=(0, 1)) -> list[dict]:
    """check_gemm over ALL_SHAPES and several seeds (KernelBench: all must pass)."""
    return [check_gemm(variant, m, n, k, seed=s) for (m, n, k) in ALL_SHAPES for s in seeds]
