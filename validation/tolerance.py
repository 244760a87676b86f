"""Tolerance policies: one per GEMM variant and one for attention, each with its reason.

GEMM (same quantized operands): the kernel's output ``out`` passes against the
float64 reference ``ref`` computed from the *same* codes and scales when, for
every element,

    |out - ref| <= atol * rms(ref) + rtol * |ref|

``atol`` is in units of the reference's RMS so that a policy does not depend on
the scale of the inputs (check_gemm feeds unit-RMS outputs, where it is the plain
absolute tolerance).  Separately, the DeepGEMM difference between ``out`` and the
float64 product of the *unquantized* inputs must stay under ``deepgemm_max``: that
bounds the quantization scheme's own loss, which the same-operand check cannot see.

Attention (FlashAttention's rule): with ``ref`` in float64 and ``same`` a plain
softmax attention computed at the kernel's precision (bf16 inputs and outputs),

    max|out - ref| <= factor * max|same - ref| + atol * max|ref|

plus the log-sum-exp, which the kernel keeps in fp32:
``max|lse - lse_ref| <= lse_atol``.

The reasons cite the field practice recorded in ARCH_FACTS ("Validation practice
in the field"): DeepGEMM's diff thresholds, TransformerEngine's NVFP4 atol/rtol,
FlashAttention's 2x rule, and the bf16 output rounding bound.
"""
from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from porter.errors import PorterError
from porter.validation import metrics

BF16_UNIT_ROUNDOFF = 2.0 ** -8   # RNE to an 8-bit significand: |bf16(x) - x| <= 2^-8 |x|


@dataclass(frozen=True)
class GemmTolerance:
    variant: str
    rtol: float
    atol: float            # times rms(ref)
    deepgemm_max: float    # vs the float64 product of the unquantized inputs
    reason: str

    def bound(self, ref) -> np.ndarray:
        r = np.asarray(ref, dtype=np.float64)
        return self.atol * metrics.rms(r) + self.rtol * np.abs(r)

    def check_same_operands(self, out, ref) -> tuple[bool, float]:
        """(passed, worst ratio |out-ref| / bound) on the same quantized operands."""
        o = np.asarray(out, dtype=np.float64)
        r = np.asarray(ref, dtype=np.float64)
        if o.shape != r.shape:
            raise PorterError(f"tolerance: output shape {o.shape} != reference shape {r.shape}")
        if not np.isfinite(o).all():
            return False, float("inf")
        bound = self.bound(r)
        err = np.abs(o - r)
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(bound > 0, err / np.where(bound > 0, bound, 1.0),
                             np.where(err > 0, np.inf, 0.0))
        worst = float(np.max(ratio)) if ratio.size else 0.0
        return bool(worst <= 1.0), worst

    def check_deepgemm(self, out, unquantized_ref) -> tuple[bool, float]:
        d = metrics.deepgemm_diff(out, unquantized_ref)
        return bool(np.isfinite(d) and d <= self.deepgemm_max), d

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class AttentionTolerance:
    variant: str
    factor: float          # times max|same_precision - ref|
    atol: float            # times max|ref|
    lse_atol: float        # absolute, natural-log units
    reason: str

    def check(self, out, ref, same) -> tuple[bool, float, float]:
        """(passed, max|out-ref|, allowed bound)."""
        o = np.asarray(out, dtype=np.float64)
        r = np.asarray(ref, dtype=np.float64)
        s = np.asarray(same, dtype=np.float64)
        if not np.isfinite(o).all():
            return False, float("inf"), 0.0
        err = metrics.max_abs_err(o, r)
        bound = self.factor * metrics.max_abs_err(s, r) + self.atol * float(np.max(np.abs(r)) if r.size else 0.0)
        return bool(err <= bound), err, bound

    def check_lse(self, lse, lse_ref) -> tuple[bool, float]:
        a = np.asarray(lse, dtype=np.float64)
        b = np.asarray(lse_ref, dtype=np.float64)
        both_inf = np.isinf(a) & np.isinf(b) & (np.sign(a) == np.sign(b))   # empty rows
        with np.errstate(invalid="ignore"):
            diff = np.where(both_inf, 0.0, np.abs(a - b))
        if np.isnan(diff).any():
            return False, float("inf")
        worst = float(np.max(diff)) if diff.size else 0.0
        return bool(worst <= self.lse_atol), worst

    def as_dict(self) -> dict:
        return asdict(self)


_GEMM = {
    "bf16": GemmTolerance(
        "bf16", rtol=BF16_UNIT_ROUNDOFF, atol=1e-4, deepgemm_max=1e-5,
        reason=("bf16 x bf16 -> fp32 accumulate -> bf16 out: the only legitimate "
                "difference from the float64 reference on the same bf16 operands is the "
                "final RNE to bf16, bounded by 2^-8 relative (rtol = 2^-8), plus fp32 "
                "accumulation error, far below 1e-4 of the output RMS for K <= 16k "
                "(atol = 1e-4 x rms). Against the unquantized product, DeepGEMM's bf16 "
                "threshold diff <= 1e-5.")),
    "fp8": GemmTolerance(
        "fp8", rtol=BF16_UNIT_ROUNDOFF, atol=2.0 ** -10, deepgemm_max=1e-3,
        reason=("per-tensor e4m3 x e4m3 -> fp32 accumulate, scale_a*scale_b in the "
                "epilogue, bf16 out: same operands, the bf16 output rounding bound "
                "2^-8 relative (rtol) plus 2^-10 x rms for the MMA's own summation "
                "order and fp32 accumulation (atol; Hopper's fp8 wgmma accumulates with "
                "fewer bits, which DeepGEMM works around by promoting to fp32 every few "
                "MMAs). Against the unquantized product, DeepGEMM's fp8 threshold "
                "diff <= 1e-3.")),
    # Fast accumulation (cuBLASLt's CUBLASLT_MATMUL_DESC_FAST_ACCUM): the whole K summed in
    # the fp8 wgmma accumulator, never promoted into fp32 registers (gemm_wgmma accumulation
    # "tensor-core"). Not a variant of its own: the policy of an fp8 kernel so built
    # (gemm_policy_for).
    "fp8.fast-accum": GemmTolerance(
        "fp8.fast-accum", rtol=BF16_UNIT_ROUNDOFF, atol=2.0 ** -3, deepgemm_max=1e-2,
        reason=("per-tensor e4m3 x e4m3 with fast accumulation (cuBLASLt FAST_ACCUM): the "
                "whole K accumulates in Hopper's fp8 wgmma accumulator, which keeps about 14 "
                "bits rather than fp32's 24 (DeepSeek-V3 report, section 3.3.2: a maximum "
                "relative error of nearly 2% at K = 4096), and its truncation error grows "
                "about linearly with K, so ~8% of the output RMS at K = 16384, the longest K "
                "porter validates. Same operands: the bf16 rounding bound 2^-8 relative "
                "(rtol) plus 2^-3 x rms (atol), which still fails a wrong tile, index, phase "
                "or unwritten output (errors of order the RMS itself). Against the "
                "unquantized product, diff <= 1e-2 (an 8% relative error gives ~3e-3). "
                "The promoted form (accumulation=promoted) is judged by the fp8 policy.")),
    "mxfp8": GemmTolerance(
        "mxfp8", rtol=BF16_UNIT_ROUNDOFF, atol=2.0 ** -10, deepgemm_max=1e-3,
        reason=("MXFP8: e4m3 elements, ue8m0 scale per 32 along K applied inside the "
                "MMA (kind::mxf8f6f4), fp32 accumulate, bf16 out. Power-of-two scales "
                "are exact, so the same-operand budget is the fp8 one: bf16 output "
                "rounding 2^-8 relative (rtol) + 2^-10 x rms (atol). Against the "
                "unquantized product, DeepGEMM's fp8 threshold diff <= 1e-3.")),
    "nvfp4": GemmTolerance(
        "nvfp4", rtol=8e-3, atol=8e-3, deepgemm_max=0.02,
        reason=("NVFP4: e2m1 elements, e4m3 scale per 16 along K inside the MMA "
                "(kind::mxf4nvf4, scale_vec::4X), per-tensor fp32 scales in the "
                "epilogue, bf16 out. Same operands: TransformerEngine's NVFP4 GEMM test, "
                "atol = rtol = 8e-3 (atol here x rms; the bf16 rounding bound 2^-8 ~ 3.9e-3 "
                "fits inside). Against the unquantized product, DeepGEMM's threshold "
                "for both operands in fp4, diff <= 0.02.")),
}

_ATTENTION = {
    "bf16": AttentionTolerance(
        "bf16", factor=2.0, atol=2.0 ** -8, lse_atol=1e-4,
        reason=("FlashAttention's rule: max|out - ref| <= 2 x max|out_same_precision - ref| "
                "+ atol, ref in high precision (float64 here), the same-precision "
                "reference being plain softmax attention at bf16 (scores and P rounded "
                "to bf16, fp32 accumulation). atol = 2^-8 x max|ref|, the bf16 output "
                "rounding bound at the output's largest magnitude, so tiny problems where "
                "the same-precision error happens to be ~0 still pass a correct kernel. "
                "The LSE is kept in fp32 from fp32 scores: |lse - lse_ref| <= 1e-4 "
                "(fp32 rounding of O(10) values over D <= 256 terms is ~1e-5). The same bound "
                "holds for FA4's lazy rescaling (the tcgen05 kernel keeps a row's running max "
                "unless it grows by more than 2^8): O and l share the stale max and the final "
                "O / l and LSE normalise exactly, only at a larger fp32 scale (P <= 256, no "
                "overflow, bf16's relative precision unchanged); and for exp2 by a degree-4 "
                "polynomial on the FMA units (relative error 2.7e-6, far below bf16 P's 2^-9 "
                "and, through l, the LSE's 1e-4).")),
}


def gemm_policy(variant: str) -> GemmTolerance:
    """The GEMM tolerance policy for ``variant`` (bf16, fp8, mxfp8, nvfp4, fp8.fast-accum)."""
    if variant not in _GEMM:
        raise PorterError(
            f"tolerance: no GEMM policy for {variant!r}; use one of {', '.join(_GEMM)}")
    return _GEMM[variant]


# Configurations whose MMA accumulator keeps fewer bits than fp32 for a variant: the
# (variant, config accumulation) -> policy key. Only where a path records it (gemm_wgmma).
_REDUCED_ACCUMULATION = {("fp8", "tensor-core"): "fp8.fast-accum"}


def policy_key(variant: str, accumulation: str | None = None) -> str:
    """The GEMM policy name for ``variant`` built with ``accumulation`` (a kernel config's
    ``accumulation``; None or a full-precision one: the variant's own policy)."""
    return _REDUCED_ACCUMULATION.get((variant, accumulation), variant)


def gemm_policy_for(variant: str, accumulation: str | None = None) -> GemmTolerance:
    """The policy of a ``variant`` kernel accumulating as ``accumulation`` (policy_key)."""
    return gemm_policy(policy_key(variant, accumulation))


def attention_policy(variant: str = "bf16") -> AttentionTolerance:
    """The attention tolerance policy (only bf16 for now)."""
    if variant not in _ATTENTION:
        raise PorterError(
            f"tolerance: no attention policy for {variant!r}; use one of {', '.join(_ATTENTION)}")
    return _ATTENTION[variant]


def policy(family: str, variant: str):
    """Policy by family ('gemm' | 'attention') and variant."""
    if family == "gemm":
        return gemm_policy(variant)
    if family == "attention":
        return attention_policy(variant)
    raise PorterError(f"tolerance: unknown family {family!r}; use 'gemm' or 'attention'")


GEMM_POLICIES = dict(_GEMM)
ATTENTION_POLICIES = dict(_ATTENTION)
