"""Public-style kernels for the simulator benchmark: one per tensor-core generation, written
here the way hand-written public kernels are (not by porter's generator), with their inputs,
launch shapes and an fp64 reference each.

    run_case(case, seed) -> porter.emu.machine.RunSummary   (raises if the output is wrong)

They spend the simulator's time differently from porter's kernels: token waits, generic
loads and divergent epilogues (Hopper), cp.async double buffering with ldmatrix and
mma.sync (Ampere), one-thread tcgen05 issue with TMEM loads (Blackwell). Every run has the
shared-memory race detector on, as porter's emulation runs do.
"""

from __future__ import annotations

import functools
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import ml_dtypes
import numpy as np

HERE = Path(__file__).resolve().parent


@dataclass(frozen=True)
class Case:
    name: str               # e.g. "hopper.tma_wgmma"
    source: str             # .cu file beside this module
    target: str             # NVRTC target
    entry: str
    setup: Callable         # (rng, memory, quick) -> (grid, block, args, smem, check(outputs))


def _bf16(rng, shape) -> np.ndarray:
    return (rng.standard_normal(shape) * 0.5).astype(ml_dtypes.bfloat16)


def _close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    err = np.abs(got.astype(np.float64) - want)
    tol = 2e-3 * (1 + np.abs(want))
    if not (err <= tol).all():
        i = tuple(int(x) for x in np.unravel_index(int(np.argmax(err - tol)), err.shape))
        raise AssertionError(f"{what}: {np.count_nonzero(err > tol)} elements differ; worst at {i}: "
                             f"got {got[i]}, expected {want[i]}")


def _tensor_map(name: str, array: np.ndarray, box: tuple[int, int], swizzle: str):
    from porter import emu
    from porter.runtime.tensormap import TensorMapParams

    rows, cols = array.shape
    params = TensorMapParams(name=name, data_type="BFLOAT16", dims=(cols, rows), strides=(cols * 2,),
                             box=box, swizzle=swizzle)
    return emu.tensor_map(params, array)


# ---- Hopper: TMA + wgmma, token waits, generic loads, divergent epilogue ------------------------

def _hopper_setup(rng, memory, quick):
    M, N, K = (120, 100, 256) if quick else (248, 200, 512)
    a, b = _bf16(rng, (M, K)), _bf16(rng, (N, K))
    bias = rng.standard_normal(N).astype(np.float32)
    alpha = 0.75
    out = np.full((M, N), np.nan, dtype=np.float32)
    bias_buf = memory.upload(bias, "bias")
    epi = np.frombuffer(struct.pack("<Qfi", bias_buf.ptr, alpha, N), dtype=np.uint8).copy()
    args = [_tensor_map("A", a, (64, 64), "128B"), _tensor_map("B", b, (64, 64), "128B"), out, epi, M, N, K]

    def check(outputs):
        want = alpha * (a.astype(np.float64) @ b.astype(np.float64).T) + bias
        _close(outputs[2], want, "hopper.tma_wgmma out")
    return (-(-N // 64), -(-M // 64)), 128, args, 0, check


# ---- Ampere: cp.async double buffering, ldmatrix, mma.sync ---------------------------------------

def _ampere_setup(rng, memory, quick):
    M, N, K = (120, 100, 256) if quick else (248, 200, 512)
    a, b = _bf16(rng, (M, K)), _bf16(rng, (N, K))
    out = np.full((M, N), np.nan, dtype=np.float32)
    args = [a.view(np.uint16), b.view(np.uint16), out, M, N, K]

    def check(outputs):
        _close(outputs[2], a.astype(np.float64) @ b.astype(np.float64).T, "ampere.mma_cp_async C")
    return (-(-N // 64), -(-M // 64)), 128, args, 0, check


# ---- Blackwell: TMA, one-thread tcgen05.mma issue, commit, TMEM loads ------------------------------

def _blackwell_setup(rng, memory, quick):
    M, N, K = (200, 100, 256) if quick else (392, 200, 512)
    a, b = _bf16(rng, (M, K)), _bf16(rng, (N, K))
    out = np.full((M, N), np.nan, dtype=np.float32)
    args = [_tensor_map("A", a, (64, 128), "128B"), _tensor_map("B", b, (64, 64), "128B"), out, M, N, K]

    def check(outputs):
        _close(outputs[2], a.astype(np.float64) @ b.astype(np.float64).T, "blackwell.tcgen05 out")
    return (-(-N // 64), -(-M // 128)), 128, args, 0, check


CASES = [
    Case("hopper.tma_wgmma", "hopper_tma_wgmma.cu", "sm_90a", "gemm_tma_wgmma", _hopper_setup),
    Case("ampere.mma_cp_async", "ampere_mma_cp_async.cu", "sm_80", "gemm_mma_cp_async", _ampere_setup),
    Case("blackwell.tcgen05", "blackwell_tcgen05.cu", "sm_100a", "gemm_tcgen05", _blackwell_setup),
]


@functools.lru_cache(maxsize=None)
def ptx_of(case: Case) -> str:
    from porter.compile.toolchain import compile_cuda

    return compile_cuda((HERE / case.source).read_text(), case.target, name=case.source).ptx


def _races_on():
    """Scheduler with the race detector on for porter.emu.launch (its default in later
    versions; passed explicitly so an older simulator is measured the same way)."""
    from porter.emu import machine

    launch_mod = sys.modules["porter.emu.launch"]
    if not getattr(launch_mod.Scheduler, "_bench_races", False):
        sched = functools.partial(machine.Scheduler, check_races=True)
        sched._bench_races = True
        launch_mod.Scheduler = sched


def run_case(case: Case, seed: int = 0, quick: bool = False):
    """One launch of ``case`` (``quick``: a shape about a quarter the size); its RunSummary."""
    from porter import emu
    from porter.emu.launch import Memory

    _races_on()
    rng = np.random.default_rng(seed)
    memory = Memory()
    grid, block, args, smem, check = case.setup(rng, memory, quick)
    res = emu.launch(ptx_of(case), case.entry, grid, block, args, smem=smem, memory=memory, seed=seed,
                     file=case.source)
    check(res.outputs)
    return res.summary
