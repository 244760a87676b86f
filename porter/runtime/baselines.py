"""Vendor baselines timed in the same process as porter's kernels, on the same inputs.

* GEMM bf16: ``torch.matmul(A, B^T)`` (cuBLAS); GEMM fp8: ``torch._scaled_mm`` with the
  same per-tensor fp32 scales (A row-major, B^T column-major, bf16 out): the call
  porter's fp8 kernel replaces. Block-scaled variants have no wired baseline yet.
* attention: ``torch.nn.functional.scaled_dot_product_attention`` on the same bf16
  q, k, v (PyTorch picks its backend; ``sdpa_backend`` asks its dispatcher which).
* megakernel: a device-to-device copy through the driver (no torch needed), the
  bandwidth ceiling a memory-bound decode step is measured against.

Each returns {"name", "time": summary} or {"name", "skipped": why} when torch (or a
CUDA-enabled torch) is missing, so a benchmark still reports porter's own numbers.
"""
from __future__ import annotations

import numpy as np

from porter.runtime import timing


COPY_MAX_BYTES = 1 << 30


def torch_cuda():
    """(torch, "") when a CUDA-enabled torch is importable, else (None, why not)."""
    try:
        import torch
    except ImportError:
        return None, "torch is not installed: no baseline (pip install torch)"
    if not torch.cuda.is_available():
        return None, f"torch {torch.__version__} sees no CUDA device: no baseline"
    return torch, ""


def _to_torch(torch, arr: np.ndarray, dtype):
    """A device tensor holding ``arr``'s bytes, reinterpreted as ``dtype`` (bf16 / fp8 via raw bits)."""
    raw = np.ascontiguousarray(arr)
    view = {1: np.uint8, 2: np.int16, 4: np.int32}[raw.itemsize]
    return torch.from_numpy(raw.view(view)).cuda().view(dtype)


def gemm_baseline(variant: str, inputs: list, sets: int, before=None) -> dict:
    """cuBLAS through torch on porter's operands (``device_harness.GemmInputs``), rotated the same way."""
    torch, why = torch_cuda()
    name = {"bf16": "torch.matmul (bf16)", "fp8": "torch._scaled_mm (e4m3, per-tensor scales)"}.get(variant)
    if name is None:
        return {"name": f"none for {variant}",
                "skipped": f"no torch baseline wired for block-scaled {variant} (torch._scaled_mm block-scale layouts)"}
    if torch is None:
        return {"name": name, "skipped": why}
    dt = torch.bfloat16 if variant == "bf16" else torch.float8_e4m3fn
    a = [_to_torch(torch, inp.a, dt) for inp in inputs]
    b = [_to_torch(torch, inp.b, dt) for inp in inputs]
    c = [torch.empty((inp.m, inp.n), dtype=torch.bfloat16, device="cuda") for inp in inputs]
    if variant == "bf16":
        def enqueue(i):
            torch.matmul(a[i], b[i].t(), out=c[i])      # out= keeps allocation out of the timing
    else:
        sa = [torch.tensor(inp.scale_a, dtype=torch.float32, device="cuda") for inp in inputs]
        sb = [torch.tensor(inp.scale_b, dtype=torch.float32, device="cuda") for inp in inputs]

        def enqueue(i):
            # B is [N, K] row-major, so b.t() is the column-major [K, N] operand _scaled_mm wants.
            torch._scaled_mm(a[i], b[i].t(), scale_a=sa[i], scale_b=sb[i], out_dtype=torch.bfloat16)
    stats = timing.time_launches(enqueue, timing.TorchEvents(), sets=sets, before=before)   # before: porter's L2 flush
    del a, b, c
    torch.cuda.empty_cache()
    return {"name": name, "torch": torch.__version__, "time": stats}


def attention_baseline(qkvs: list, causal: bool, sets: int, before=None) -> dict:
    """torch SDPA on the same bf16 q, k, v sets ([B, H, S, D])."""
    torch, why = torch_cuda()
    name = "torch.nn.functional.scaled_dot_product_attention"
    if torch is None:
        return {"name": name, "skipped": why}
    q0, k0 = qkvs[0][0], qkvs[0][1]
    if causal and q0.shape[2] != k0.shape[2]:
        # torch's is_causal aligns the mask top-left, porter's bottom-right: only Sq == Sk compares.
        return {"name": name, "skipped": "causal with Sq != Sk: torch's mask alignment differs from porter's"}
    gqa = q0.shape[1] != k0.shape[1]
    tensors = [tuple(_to_torch(torch, x, torch.bfloat16) for x in qkv) for qkv in qkvs]
    sdpa = torch.nn.functional.scaled_dot_product_attention
    extra = {"enable_gqa": True} if gqa else {}     # older torch lacks the keyword; pass it only for GQA

    def enqueue(i):
        q, k, v = tensors[i]
        sdpa(q, k, v, is_causal=causal, **extra)
    stats = timing.time_launches(enqueue, timing.TorchEvents(), sets=sets, before=before)
    backend = sdpa_backend(torch, *tensors[0], causal, gqa)
    del tensors
    torch.cuda.empty_cache()
    return {"name": name, "torch": torch.__version__, "time": stats, "backend": backend}


def sdpa_backend(torch, q, k, v, causal: bool, gqa: bool) -> str:
    """The backend torch's SDPA dispatcher picks for these inputs (torch._fused_sdp_choice,
    the dispatcher's own choice), or why it cannot be told."""
    try:
        from torch.nn.attention import SDPBackend

        extra = {"enable_gqa": True} if gqa else {}
        return SDPBackend(int(torch._fused_sdp_choice(q, k, v, is_causal=causal, **extra))).name
    except Exception as exc:  # noqa: BLE001 - a private API: report, never fail the benchmark
        return f"unknown ({type(exc).__name__})"


def copy_bandwidth(nbytes: int) -> dict:
    """Device-to-device copy of min(nbytes, 1 GiB): bytes read + written per second."""
    from porter.runtime import driver

    size = int(min(max(nbytes, 1 << 20), COPY_MAX_BYTES))
    src, dst = driver.DeviceBuffer(size), driver.DeviceBuffer(size)
    drv = driver.bindings()
    driver.check(drv.cuMemsetD8(src.ptr, 0x5A, size), "cuMemsetD8 (copy source)")

    def enqueue(i):
        driver.check(drv.cuMemcpyDtoDAsync(dst.ptr, src.ptr, size, drv.CUstream(0)), "cuMemcpyDtoDAsync")
    stats = timing.time_launches(enqueue, timing.DriverEvents(), warmup=3, reps=20)
    src.free()
    dst.free()
    return {"name": "device-to-device copy (cuMemcpyDtoDAsync)", "bytes": size, "time": stats,
            "bytes_per_s": timing.rate(2 * size, stats)}
