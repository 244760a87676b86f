"""GEMM references: C = A x B^T with A [M, K] and B [N, K], both K-major.

Two functions of the same quantized operands:

* ``reference_gemm``  the exact answer: float64 product of the dequantized operands
  (every scale applied).  Products of a small-format code value and its scales
  are exact in float64; only the K-sum rounds, at 2^-53.
* ``gemm_model``      what the kernel computes, step by step:
    1. the tensor core consumes K in chunks of the MMA K (``mma_k``: 16 for bf16,
       32 for fp8 / MXFP8, 64 for NVFP4 -- one ``tcgen05.mma`` reads 256 bits of
       each A row, ARCH_FACTS "tcgen05");
    2. inside one MMA the products of a chunk are summed (in float64, i.e. as if
       exactly, then rounded once to fp32) -- block scales (MX ue8m0 per 32, NVFP4 e4m3 per 16)
       are applied *here*, per K-block, as ``kind::mxf8f6f4`` / ``kind::mxf4nvf4``
       do with the scale factors they read from TMEM;
    3. the chunk result is added to the fp32 accumulator (one fp32 rounding per MMA);
       with ``promote_k`` (Hopper fp8 with promotion: the wgmma chain restarts every
       ``promote_k`` elements of K) the chunks of each interval are summed from zero
       in fp32 and the interval sum is then added to a separate fp32 accumulator;
    4. the epilogue multiplies by the per-tensor scales (fp8: scale_a * scale_b;
       NVFP4: tensor_scale_a * tensor_scale_b) in fp32 and rounds to bf16 (RNE).
  The summation order and internal width inside an MMA are undocumented; modelling
  them as exact is the optimistic end, and the tolerances (tolerance.py) leave room for the
  hardware's own order.

Operands are ``Quantized`` records (quantize.py) or, for bf16, float arrays whose
values are bf16 (``quantize.to_bf16``).
"""
from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.errors import PorterError
from porter.validation import formats
from porter.validation.quantize import Quantized, dequantize

# MMA K per variant: 256 bits of A per tcgen05.mma (ARCH_FACTS): 16 x bf16,
# 32 x fp8, 64 x fp4. Warp-level mma.sync reads the same 32 bytes of each A row
# (m16n8k16 bf16, m16n8k32 fp8, m16n8k64 packed fp4) and adds each result into fp32
# registers, so this model is also the mma_sync path's (promote_k = TILE_K for its fp8
# variants, which add each k-block's MMAs into the fp32 accumulator with FADDs).
DEFAULT_MMA_K = {"bf16": 16, "fp8": 32, "mxfp8": 32, "nvfp4": 64}


def _values(op) -> np.ndarray:
    return dequantize(op) if isinstance(op, Quantized) else np.asarray(op, dtype=np.float64)


def _check_shapes(a: np.ndarray, b: np.ndarray) -> None:
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise PorterError(
            f"reference_gemm: need A [M, K] and B [N, K] with the same K (both K-major); "
            f"got A {a.shape}, B {b.shape}")


def reference_gemm(a, b) -> np.ndarray:
    """float64 A x B^T of the (dequantized) operands: the 'same quantized operands' reference."""
    av, bv = _values(a), _values(b)
    _check_shapes(av, bv)
    return av @ bv.T


def round_bf16(x) -> np.ndarray:
    """Round fp32 values to bfloat16 (RNE) and return them as float64."""
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def _inner_values(op) -> tuple[np.ndarray, np.float32]:
    """Values the MMA multiplies (codes x block scales) and the epilogue's per-tensor scale."""
    if not isinstance(op, Quantized):
        return np.asarray(op, dtype=np.float64), np.float32(1.0)
    vals = formats.decode(op.codes, op.elem)
    if op.block_scales is not None:
        s = formats.decode(op.block_scales, op.scale_format)
        vals = vals * np.repeat(s, op.block, axis=-1)       # exact in float64
    ts = np.float32(1.0) if op.tensor_scale is None else np.float32(op.tensor_scale)
    return vals, ts


def gemm_model(a, b, mma_k: int = 32, out_dtype: str = "bf16", promote_k: int | None = None) -> np.ndarray:
    """Model of the kernel: fp32 accumulation over K in MMA chunks, scales as the kernel applies them.

    ``promote_k``: K elements per promotion interval (a multiple of ``mma_k``; the last
    interval may be shorter when K is not a multiple); None or 0 = one accumulator over
    the whole K. Returns float64 values of the output (bf16-rounded unless ``out_dtype="fp32"``).
    """
    av, sa = _inner_values(a)
    bv, sb = _inner_values(b)
    _check_shapes(av, bv)
    m, k = av.shape
    n = bv.shape[0]
    if mma_k <= 0 or k % mma_k != 0:
        raise PorterError(
            f"reference_gemm: K={k} is not a multiple of the MMA K ({mma_k}); "
            "the kernel needs K padded to a multiple of the MMA K")
    for op in (a, b):
        if isinstance(op, Quantized) and op.block is not None:
            if mma_k % op.block != 0 and op.block % mma_k != 0:
                raise PorterError(
                    f"reference_gemm: MMA K {mma_k} and scale block {op.block} do not nest; "
                    "use an MMA K that is a multiple or a divisor of the block")
    chunks = k // mma_k
    if promote_k and (promote_k < 0 or promote_k % mma_k):
        raise PorterError(
            f"reference_gemm: promotion interval {promote_k} is not a positive multiple of the MMA K ({mma_k})")
    per_interval = promote_k // mma_k if promote_k else chunks
    # One exact partial product per MMA: [chunks, M, N], each rounded once to fp32.
    a3 = av.reshape(m, chunks, mma_k).transpose(1, 0, 2)
    b3 = bv.reshape(n, chunks, mma_k).transpose(1, 2, 0)
    partial = np.matmul(a3, b3).astype(np.float32)
    acc = np.zeros((m, n), dtype=np.float32)
    for first in range(0, chunks, per_interval):
        interval = np.zeros((m, n), dtype=np.float32)      # the MMA chain restarts (scale-d 0)
        for c in range(first, min(first + per_interval, chunks)):
            interval += partial[c]                         # fp32 accumulate, in K order
        acc += interval                                    # promotion (exact when not promoting)
    acc = acc * np.float32(sa * sb)                        # epilogue per-tensor scales (fp32)
    if out_dtype == "fp32":
        return acc.astype(np.float64)
    if out_dtype != "bf16":
        raise PorterError(f"reference_gemm: out_dtype {out_dtype!r}; use 'bf16' or 'fp32'")
    return round_bf16(acc)
