"""What a device run is judged by, as host arrays: poisoning, the written check, random
inputs per variant and the comparison against the fp64 references. Everything here is
numerics and runs without a GPU; the launches, timing and entry points are on the device
side (``porter.runtime.device_runs``, ``porter.runtime.timing``, ``porter.runtime.harness``).

* **poison**: every output buffer is filled with 0xFF bytes before a launch (a NaN in
  bf16 and fp32, -1 in int32), so an element the kernel never wrote keeps that exact
  bit pattern and is counted as unwritten; a written NaN fails the tolerance check.
* **inputs**: fresh random operands per check (a new seed per shape and repeat),
  quantized exactly as the kernel reads them (``porter.validation.quantize``).
* **judging**: the variant's tolerance policy (``porter.validation.tolerance``) plus
  the written-check; a check passes only if both hold.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


POISON_BYTE = 0xFF


# ---- poison and the written check ------------------------------------------------------

def poison_host(arr: np.ndarray) -> np.ndarray:
    """Fill ``arr`` (in place) with the poison bytes; returns it."""
    arr.view(np.uint8).reshape(-1)[:] = POISON_BYTE
    return arr


def unwritten_mask(out: np.ndarray) -> np.ndarray:
    """True where an element still holds the poison bit pattern (all 0xFF bytes)."""
    a = np.ascontiguousarray(out)
    raw = a.view(np.uint8).reshape(*a.shape, a.itemsize) if a.ndim else a.view(np.uint8)
    return np.all(raw == POISON_BYTE, axis=-1)


def written_check(out: np.ndarray, what: str = "output") -> dict:
    """How many elements the kernel left unwritten, and how many non-finite it wrote."""
    a = np.asarray(out)
    unwritten = unwritten_mask(a)
    n_unwritten = int(unwritten.sum())
    floats = a.astype(np.float64) if a.dtype.kind in "fV" or a.dtype.name == "bfloat16" else None
    n_nonfinite = int((~np.isfinite(floats) & ~unwritten).sum()) if floats is not None else 0
    first = None
    if n_unwritten:
        first = [int(i) for i in np.unravel_index(int(np.argmax(unwritten.reshape(-1))), a.shape)]
    return {"what": what, "elements": int(a.size), "unwritten": n_unwritten, "first_unwritten": first,
            "nonfinite_written": n_nonfinite, "passed": n_unwritten == 0}


# ---- judging -------------------------------------------------------------------------------

GEMM_AXES = ("row", "col")
ATTENTION_AXES = ("batch", "head", "position", "dim")
LSE_AXES = ("batch", "head", "position")


def first_mismatch(got, want, bound, axes, what: str = "output") -> dict | None:
    """The elements of ``got`` outside ``|got - want| <= bound`` (a scalar or per-element
    bound; NaN is outside, equal infinities are inside): how many, and the first in C order
    with its indices in the output's own terms (``axes``: row/col; batch/head/position/dim),
    expected and got. None when every element is inside."""
    g = np.asarray(got, dtype=np.float64)
    w = np.asarray(want, dtype=np.float64)
    if g.shape != w.shape:
        return {"what": what, "count": int(g.size), "elements": int(g.size), "index": None,
                "expected": None, "got": None, "shape": [list(g.shape), list(w.shape)]}
    with np.errstate(invalid="ignore"):
        inside = (np.abs(g - w) <= bound) | ((g == w) & np.isinf(w))
    bad = ~inside
    count = int(bad.sum())
    if not count:
        return None
    idx = np.unravel_index(int(np.argmax(bad.reshape(-1))), g.shape)
    names = list(axes) + [f"axis{i}" for i in range(len(axes), len(idx))]
    return {"what": what, "count": count, "elements": int(g.size),
            "index": {names[i]: int(v) for i, v in enumerate(idx)},
            "expected": float(w[idx]), "got": float(g[idx])}


def describe_mismatch(m: dict) -> str:
    """One line for a person: ``C[row 3, col 17]: expected 1.25, got 0 (37 of 4096 elements
    outside tolerance)``."""
    if m["what"] == "token":
        return f"next token {int(m['got'])}, the reference picks {int(m['expected'])}"
    if m["what"] == "KV cache row":
        return "a KV cache row written this step is outside tolerance"
    if m.get("index") is None:
        got, want = m.get("shape", [[], []])
        return f"{m['what']}: shape {tuple(got)} but the reference is {tuple(want)}"
    where = ", ".join(f"{k} {v}" for k, v in m["index"].items())
    return (f"{m['what']}[{where}]: expected {m['expected']:.6g}, got {m['got']:.6g} "
            f"({m['count']} of {m['elements']} elements outside tolerance)")


def describe_unwritten(w: dict, axes) -> str:
    """One line for the written check: where the first unwritten element is, and how many."""
    idx = w.get("first_unwritten") or []
    names = list(axes) + [f"axis{i}" for i in range(len(axes), len(idx))]
    where = ", ".join(f"{names[i]} {v}" for i, v in enumerate(idx))
    return f"{w['what']}[{where}]: never written ({w['unwritten']} of {w['elements']} elements unwritten)"


def mismatch_text(check: dict) -> str:
    """The first failing element of a failed check, in words ('' when none is recorded)."""
    written = check.get("written")
    written = written if isinstance(written, list) else [written] if written else []
    for w in written:
        if w and not w.get("passed", True):
            return describe_unwritten(w, LSE_AXES if w.get("what") == "lse" else
                                      ATTENTION_AXES if w.get("what") == "O" else GEMM_AXES)
    for m in check.get("mismatches") or []:
        return describe_mismatch(m)
    return ""

def compare_gemm(variant: str, out, ref_same, ref_unquantized) -> dict:
    """A device GEMM output (bf16 values) against both references, plus the written check."""
    from porter.validation import gemm_numerics

    written = written_check(np.asarray(out), "C")
    got = np.asarray(out).astype(np.float64)
    res = gemm_numerics.check_outputs(variant, got, ref_same, ref_unquantized)
    res["written"] = written
    if not res["passed_same_operands"]:
        from porter.validation import tolerance

        bad = first_mismatch(got, ref_same, tolerance.gemm_policy(variant).bound(ref_same), GEMM_AXES, "C")
        res["mismatches"] = [bad] if bad else []
    res["passed"] = bool(res["passed"] and written["passed"])
    return res


def compare_attention(out, lse, ref, lse_ref, same) -> dict:
    """A device attention (O, lse) against the references, plus the written checks."""
    from porter.validation.attention_numerics import check_attention_outputs

    w_o, w_lse = written_check(np.asarray(out), "O"), written_check(np.asarray(lse), "lse")
    o64, lse64 = np.asarray(out).astype(np.float64), np.asarray(lse, dtype=np.float64)
    res = check_attention_outputs(o64, lse64, ref, lse_ref, same)
    res["written"] = [w_o, w_lse]
    bad = []
    if not res["passed_output"]:
        bad.append(first_mismatch(o64, ref, res["allowed_err"], ATTENTION_AXES, "O"))
    if not res["passed_lse"]:
        bad.append(first_mismatch(lse64, lse_ref, res["tolerance"]["lse_atol"], LSE_AXES, "lse"))
    if bad:
        res["mismatches"] = [m for m in bad if m]
    res["passed"] = bool(res["passed"] and w_o["passed"] and w_lse["passed"])
    return res


def compare_decode_step(logits, token: int, cache_rows: dict, ref_logits, ref_rows: dict,
                        logits_rtol: float, cache_rtol: float, cache_row_rtol: float) -> dict:
    """One megakernel decode step against the fp64 reference (the rule of
    porter.kernels.megakernel.check_step, applied to device outputs)."""
    logits = np.asarray(logits)
    written = written_check(logits, "logits")
    ref = np.asarray(ref_logits, dtype=np.float64)
    scale = float(np.abs(ref).max())
    got = logits.astype(np.float64)
    err = float(np.abs(got - ref).max() / scale) if np.isfinite(got).all() else float("inf")
    cache_ok, cache_unwritten = True, 0
    for name, row in cache_rows.items():
        row = np.asarray(row)
        cache_unwritten += int(unwritten_mask(row).sum())
        want = np.asarray(ref_rows[name], dtype=np.float64).reshape(-1)
        have = row.astype(np.float64).reshape(-1)
        bound = cache_rtol * np.abs(want) + cache_row_rtol * np.abs(want).max()
        cache_ok &= bool(np.all(np.abs(have - want) <= bound))
    top2 = np.sort(ref)[-2:]
    ref_token = int(np.argmax(ref))
    token_ok = token == ref_token or (top2[1] - top2[0]) <= 2 * logits_rtol * scale
    passed = bool(written["passed"] and err <= logits_rtol and cache_ok and cache_unwritten == 0 and token_ok)
    mismatches = []
    if err > logits_rtol:
        bad = first_mismatch(got, ref, logits_rtol * scale, ("vocab",), "logits")
        mismatches += [bad] if bad else []
    if not token_ok:
        mismatches.append({"what": "token", "count": 1, "elements": 1, "index": {"step": 0},
                           "expected": float(ref_token), "got": float(token)})
    if not cache_ok:
        mismatches.append({"what": "KV cache row", "count": 1, "elements": len(cache_rows), "index": None,
                           "expected": None, "got": None, "shape": [[], []]})
    return {"mismatches": mismatches,"logits_rel_err": err, "logits_rtol": logits_rtol, "token": int(token), "reference_token": ref_token,
            "token_ok": bool(token_ok), "cache_ok": bool(cache_ok), "cache_unwritten": cache_unwritten,
            "written": written, "passed": passed}


# ---- random inputs, quantized as the kernel reads them -------------------------------------

@dataclass
class GemmInputs:
    """Host operands in the kernel's byte layout plus what the references need."""

    variant: str
    m: int
    n: int
    k: int
    a: np.ndarray                  # bf16 / e4m3 codes (uint8) / packed e2m1 (uint8, K/2 per row)
    b: np.ndarray
    scales: tuple | None           # (sfa, sfb) raw block-scale bytes [rows, K/block], or None
    scale_a: float
    scale_b: float
    qa: object                     # quantize.Quantized, or the bf16 values (float64) for bf16
    qb: object
    a_f32: np.ndarray              # the unquantized inputs
    b_f32: np.ndarray

    @property
    def nbytes(self) -> int:
        n = self.a.nbytes + self.b.nbytes + 2 * self.m * self.n     # + the bf16 C
        if self.scales is not None:
            n += sum(s.nbytes for s in self.scales)
        return n

    def references(self) -> tuple[np.ndarray, np.ndarray]:
        """(float64 product of the quantized operands, float64 product of the unquantized)."""
        from porter.validation import reference_gemm

        return (reference_gemm.reference_gemm(self.qa, self.qb),
                self.a_f32.astype(np.float64) @ self.b_f32.astype(np.float64).T)


def gemm_inputs(variant: str, m: int, n: int, k: int, seed: int) -> GemmInputs:
    """Fresh random A [M, K], B [N, K] for ``variant`` (bf16, fp8, mxfp8, nvfp4), quantized."""
    import ml_dtypes

    from porter.validation import gemm_numerics, quantize

    gemm_numerics.validate_shape(variant, m, n, k, mma_k=1)
    a32, b32 = gemm_numerics.random_operands(m, n, k, seed)
    qa, qb = quantize.quantize_for(variant, a32), quantize.quantize_for(variant, b32)
    if variant == "bf16":
        a, b = (np.asarray(q, dtype=np.float32).astype(ml_dtypes.bfloat16) for q in (qa, qb))
        return GemmInputs(variant, m, n, k, a, b, None, 1.0, 1.0, qa, qb, a32, b32)
    codes = (quantize.pack_fp4(qa.codes), quantize.pack_fp4(qb.codes)) if variant == "nvfp4" \
        else (qa.codes, qb.codes)
    scales = (qa.block_scales, qb.block_scales) if qa.block_scales is not None else None
    sa = float(qa.tensor_scale) if qa.tensor_scale is not None else 1.0
    sb = float(qb.tensor_scale) if qb.tensor_scale is not None else 1.0
    return GemmInputs(variant, m, n, k, codes[0], codes[1], scales, sa, sb, qa, qb, a32, b32)


def bench_gemm_inputs(variant: str, m: int, n: int, k: int, seed: int) -> GemmInputs:
    """Like ``gemm_inputs`` but drawn in fp32 and cast with ml_dtypes for bf16 and fp8:
    the generic quantizer takes ~50 s per 8192^2 operand pair on one core, the cast a
    fraction of that. Same scheme (per-tensor e4m3, scale = amax / 448, saturating RNE);
    the block-scaled variants keep the generic quantizers."""
    import ml_dtypes

    from porter.validation import quantize
    from porter.validation.formats import get_format

    if variant not in ("bf16", "fp8"):
        return gemm_inputs(variant, m, n, k, seed)
    rng = np.random.default_rng(seed)
    a32 = rng.standard_normal((m, k), dtype=np.float32)
    b32 = rng.standard_normal((n, k), dtype=np.float32) / np.float32(np.sqrt(k))
    if variant == "bf16":
        a, b = a32.astype(ml_dtypes.bfloat16), b32.astype(ml_dtypes.bfloat16)
        qa, qb = a.astype(np.float64), b.astype(np.float64)
        return GemmInputs(variant, m, n, k, a, b, None, 1.0, 1.0, qa, qb, a32, b32)
    fmt = get_format("e4m3")
    quantized = []
    for x in (a32, b32):
        scale = np.float32(np.abs(x).max() / np.float32(fmt.max_finite))
        # float8_e4m3fn casts do not saturate (ARCH_FACTS): clip first, as satfinite does
        codes = np.clip(x / scale, -fmt.max_finite, fmt.max_finite).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        quantized.append(quantize.Quantized("per_tensor", fmt.name, codes, tensor_scale=scale))
    qa, qb = quantized
    return GemmInputs(variant, m, n, k, qa.codes, qb.codes, None, float(qa.tensor_scale), float(qb.tensor_scale),
                      qa, qb, a32, b32)


def attention_inputs(b: int, hq: int, hkv: int, sq: int, sk: int, d: int, seed: int):
    """bf16 q [B,Hq,Sq,D], k, v [B,Hkv,Sk,D] (ml_dtypes arrays), fresh per seed."""
    import ml_dtypes

    from porter.validation.attention_numerics import random_qkv

    return tuple(np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16)
                 for x in random_qkv(b, hq, hkv, sq, sk, d, seed))


def seed_for(shape, repeat: int, base: int = 0) -> int:
    """A distinct, reproducible seed per (shape, repeat): every check draws fresh inputs."""
    h = 1469598103934665603
    for v in (*shape, repeat, base):
        h = ((h ^ int(v)) * 1099511628211) & 0xFFFFFFFF
    return h
