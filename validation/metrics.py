"""Error metrics used across the numerics checks (all computed in float64).

* ``max_abs_err``       max |out - ref|
* ``rel_fro_err``       ||out - ref||_F / ||ref||_F
* ``deepgemm_diff``     DeepGEMM's similarity: 1 - 2 * sum(x*y) / sum(x^2 + y^2)
                        = sum((x - y)^2) / sum(x^2 + y^2); 0 for identical tensors,
                        about rel_fro_err^2 / 2 for small errors
* ``sqnr_db``           10 log10(sum(ref^2) / sum((out - ref)^2)), as torchao reports it
"""
from __future__ import annotations

import numpy as np

from porter.errors import PorterError


def _pair(out, ref) -> tuple[np.ndarray, np.ndarray]:
    o = np.asarray(out, dtype=np.float64)
    r = np.asarray(ref, dtype=np.float64)
    if o.shape != r.shape:
        raise PorterError(f"metrics: shapes differ: output {o.shape} vs reference {r.shape}")
    return o, r


def max_abs_err(out, ref) -> float:
    o, r = _pair(out, ref)
    return float(np.max(np.abs(o - r))) if o.size else 0.0


def rel_fro_err(out, ref) -> float:
    o, r = _pair(out, ref)
    num = float(np.linalg.norm((o - r).ravel()))
    den = float(np.linalg.norm(r.ravel()))
    if den == 0.0:
        return 0.0 if num == 0.0 else float("inf")
    return num / den


def deepgemm_diff(out, ref) -> float:
    """1 - 2*sum(x*y)/sum(x^2+y^2) in float64 (0 = identical; both zero -> 0)."""
    x, y = _pair(out, ref)
    denom = float(np.sum(x * x + y * y))
    if denom == 0.0:
        return 0.0
    return float(1.0 - 2.0 * float(np.sum(x * y)) / denom)


def sqnr_db(out, ref) -> float:
    """Signal-to-quantization-noise ratio of ``out`` against ``ref`` in dB (inf if equal)."""
    o, r = _pair(out, ref)
    noise = float(np.sum((o - r) ** 2))
    signal = float(np.sum(r * r))
    if noise == 0.0:
        return float("inf")
    if signal == 0.0:
        return float("-inf")
    return float(10.0 * np.log10(signal / noise))


def rms(x) -> float:
    a = np.asarray(x, dtype=np.float64)
    return float(np.sqrt(np.mean(a * a))) if a.size else 0.0


def all_metrics(out, ref) -> dict[str, float]:
    return {
        "max_abs_err": max_abs_err(out, ref),
        "rel_fro_err": rel_fro_err(out, ref),
        "deepgemm_diff": deepgemm_diff(out, ref),
        "sqnr_db": sqnr_db(out, ref),
    }
