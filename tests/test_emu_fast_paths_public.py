"""The simulator's fast paths in its units and checkers change nothing a run shows: each
public-style kernel (benchmarks/emu_kernels: TMA + wgmma, cp.async + ldmatrix + mma.sync,
TMA + tcgen05) gives bit-identical outputs and the same run statistics and warnings with
them as with the general paths they stand for (the race detector's per-byte checks, the
async-proxy check per byte, cp.async and ldmatrix through their per-lane checks, mma.sync
through the fragment-by-fragment composition, wgmma operands byte by byte)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "emu_kernels"))

import cases  # noqa: E402


def _general_paths(monkeypatch):
    """Every fast path of the units and checkers replaced by the general path it stands for."""
    from porter.emu import race
    from porter.emu.ops import cluster_async, cp_async, memory, mma_sync, tma, wgmma
    from porter.emu.units import mma_sync as mma_unit

    def check_span(self, cta, lo, hi, aid, vc, write, line, who, what=""):
        if hi > lo:
            self.check(cta, np.arange(lo, hi), aid, vc, write, line, who, what)

    def check_rows(self, cta, offs, width, aid, vc, write, line, who, what="", report=None, rows=None, same=None):
        self.check(cta, (offs[:, None] + np.arange(width)).reshape(-1) if report is None else report.reshape(-1),
                   aid, vc, write, line, who, what, same)

    def read_span(cta, lo, hi, what):
        memory.check_async_read(cta, np.arange(lo, hi), what)

    monkeypatch.setattr(race.RaceDetector, "check_span", check_span)
    monkeypatch.setattr(race.RaceDetector, "check_rows", check_rows)
    for mod in (tma, cluster_async):
        monkeypatch.setattr(mod, "check_async_read_span", read_span)
    monkeypatch.setattr(wgmma, "check_async_read_rows", lambda cta, addrs, rows, what:
                        memory.check_async_read(cta, addrs, what))
    monkeypatch.setattr(wgmma, "chunk_rows", lambda addr, distinct=False: None)
    wgmma._operand.cache_clear()
    monkeypatch.setattr(cp_async, "issue_rows", lambda *a: False)
    monkeypatch.setattr(mma_sync, "_fast_matrix_rows", lambda *a: None)
    monkeypatch.setattr(mma_unit, "planned_step", lambda *a: None)
    monkeypatch.setattr(mma_unit, "planned_scaled_step", lambda *a: None)


def _run(case):
    from porter import emu
    from porter.emu.launch import Memory

    cases._races_on()
    rng = np.random.default_rng(3)
    memory = Memory()
    grid, block, args, smem, check = case.setup(rng, memory, True)
    res = emu.launch(cases.ptx_of(case), case.entry, grid, block, args, smem=smem, memory=memory, seed=3,
                     file=case.source)
    check(res.outputs)
    summary = {k: v for k, v in res.summary.to_dict().items() if k not in ("seconds", "cpu_seconds",
                                                                          "warp_instr_per_s")}
    return [o.copy() for o in res.outputs if isinstance(o, np.ndarray)], summary


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_fast_paths_change_nothing(case, monkeypatch):
    from porter.emu.ops import wgmma

    fast = _run(case)
    with monkeypatch.context() as mp:
        _general_paths(mp)
        general = _run(case)
    wgmma._operand.cache_clear()                 # (its entries were made without chunk rows)
    assert fast[1] == general[1]
    assert len(fast[0]) == len(general[0])
    for a, b in zip(fast[0], general[0]):
        assert a.dtype == b.dtype and np.array_equal(a.view(np.uint8), b.view(np.uint8))
