"""The stepper's straight runs (register-only instructions run in one go by a converged
warp) change nothing a kernel or a report can see: the counts and virtual time are those
of stepping one by one, a fault inside a run names its own PTX line, and a long run is cut
at the scheduling quantum so the warps interleave as before."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu import machine
from porter.emu.errors import EmuError

HEAD = ".version 8.0\n.target sm_90a\n.address_size 64\n"


def _kernel(body: str) -> str:
    return HEAD + (".visible .entry k(.param .u64 out)\n{\n.reg .pred %p<4>;\n.reg .b32 %r<200>;\n"
                   ".reg .b64 %rd<8>;\nld.param.u64 %rd1, [out];\ncvta.to.global.u64 %rd1, %rd1;\n"
                   "mov.u32 %r0, %tid.x;\nmul.wide.u32 %rd2, %r0, 4;\nadd.s64 %rd3, %rd1, %rd2;\n"
                   f"{body}\nret;\n}}\n")


def _long_run(n: int) -> str:
    # n dependent adds (one straight run longer than the quantum), then a store
    lines = ["mov.u32 %r1, 1;"] + [f"add.s32 %r{i + 2}, %r{i + 1}, %r0;" for i in range(n)]
    return "\n".join(lines) + f"\nst.global.u32 [%rd3], %r{n + 1};"


def _launch(body: str, runs: bool, threads: int = 96):
    out = np.zeros(threads, np.uint32)
    saved = machine._straight_runs
    if not runs:
        machine._straight_runs = lambda ops, pure: [None] * len(ops)
    try:
        res = emu.launch(_kernel(body), "k", grid=1, block=threads, args=[out], seed=3)
    finally:
        machine._straight_runs = saved
    return res.outputs[0], res.summary


def test_a_run_longer_than_the_quantum_counts_as_one_by_one():
    body = _long_run(machine.QUANTUM * 2 + 5)
    a, sa = _launch(body, runs=True)
    b, sb = _launch(body, runs=False)
    assert np.array_equal(a, b)
    assert list(a[:4]) == [1 + (machine.QUANTUM * 2 + 5) * t for t in range(4)]
    for field in ("warp_instructions", "thread_instructions", "rounds", "virtual_ns"):
        assert getattr(sa, field) == getattr(sb, field), field


def test_a_fault_inside_a_run_names_its_own_line():
    body = "mov.u32 %r1, 5;\nadd.s32 %r2, %r1, 1;\nmov.u32 %r3, 0;\ndiv.s32 %r4, %r2, %r3;\nadd.s32 %r5, %r4, 1;"
    text = _kernel(body)
    div_line = next(i for i, line in enumerate(text.splitlines(), 1) if line.startswith("div.s32"))
    with pytest.raises(EmuError, match=rf"<ptx>:{div_line}\b.*division by zero"):
        emu.launch(text, "k", grid=1, block=32, args=[np.zeros(32, np.uint32)])
