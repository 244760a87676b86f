"""Harness for tma_wgmma.cu (``porter emu run examples/emu/tma_wgmma.cu --harness
examples/emu/tma_wgmma_harness.py``): A (64 x 64) and B (128 x 64) bf16, both K-major, read by
the kernel through 128B-swizzled tensor maps; C (64 x 128) fp32 = A · Bᵀ."""

import numpy as np

M, N, K = 64, 128, 64
TILE = 64

# defaults for the command's flags (a flag given on the command line wins)
LAUNCH = {"arch": "sm_90a", "entry": "tile_gemm", "grid": N // TILE, "block": 128}
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}       # fp32 accumulation of exact bf16 products, K = 64
AXES = {2: ("row", "col")}


def arguments(h):
    """The kernel's parameters in order: map_a, map_b, c, ldc."""
    a = h.rng.standard_normal((M, K)).astype(h.bfloat16)
    b = h.rng.standard_normal((N, K)).astype(h.bfloat16)
    c = np.zeros((M, N), np.float32)
    return [h.tensor_map(a, box=(K, TILE), swizzle="128B", name="A"),
            h.tensor_map(b, box=(K, TILE), swizzle="128B", name="B"),
            c, N]


def reference(args):
    """The expected contents of argument 2 (C) after the run, in float64."""
    a, b = (x.astype(np.float64) for x in args[:2])
    return {2: a @ b.T}
