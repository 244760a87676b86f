"""The simulator benchmark's public-style kernels (benchmarks/emu_kernels, written here) run in
porter's PTX simulator with the race detector on and match their fp64 references, at the
benchmark's quick shapes; and bench_emu.py's quick mode runs them end to end."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks" / "emu_kernels"))

import cases  # noqa: E402


@pytest.mark.parametrize("case", cases.CASES, ids=lambda c: c.name)
def test_public_style_kernel_matches_its_reference(case):
    summary = cases.run_case(case, seed=1, quick=True)      # raises AssertionError on a wrong element
    assert summary.warp_instructions > 1000
    assert summary.ctas >= 2
    if case.name.startswith("hopper"):
        assert summary.wgmma > 0 and summary.tma > 0
    if case.name.startswith("blackwell"):
        assert summary.tma > 0


def test_a_wrong_output_is_reported():
    """The check is real: a reference that differs in one element fails with its index."""
    import numpy as np

    want = np.zeros((4, 4))
    got = want.astype(np.float32).copy()
    got[2, 3] = 1.0
    with pytest.raises(AssertionError, match=r"1 elements differ; worst at \(2, 3\)"):
        cases._close(got, want, "probe")


def test_bench_quick_public_only_runs():
    r = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "bench_emu.py"), "ampere", "--quick",
                        "--public-only"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "ampere.mma_cp_async (public) passed" in r.stdout
    assert "total public ampere:" in r.stdout
