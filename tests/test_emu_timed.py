"""The simulator's timed mode (porter.emu.timed): its calendar and bank-conflict counts,
and on porter's own kernels the same outputs and checks as the functional mode at no more
than 3x its cost."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu import machine
from porter.emu.timed import timed
from porter.emu.timed.banks import wavefronts
from porter.emu.timed.calendar import Calendar


def test_calendar_serves_at_its_rate_and_fills_earlier_gaps():
    c = Calendar(1.0, 16)
    assert [c.reserve(0, 1) for _ in range(3)] == [1.0, 2.0, 3.0]
    assert c.reserve(100, 10) == 110.0
    # a request timed before one already booked is not queued behind it
    assert c.reserve(20, 4) == 24.0
    port = Calendar(128.0)
    assert port.reserve(0, 4096) == 32.0 and port.reserve(0, 4096) == 64.0


@pytest.mark.parametrize("addrs,width,expect", [
    (np.arange(32) * 4, 4, 1),            # consecutive words: one wavefront
    (np.zeros(32, np.int64), 4, 1),       # one word broadcast
    (np.arange(32) * 8, 4, 2),            # stride 2 words: 2-way conflict
    (np.arange(32) * 128, 4, 32),         # one bank: 32-way
    (np.arange(32) * 16, 16, 4),          # 16-byte lanes: 4 phases of 8 lanes
    (np.arange(32) * 64, 16, 16),         # 16-byte lanes, 2 words apart by 64 B: 4-way per phase
])
def test_bank_conflicts(addrs, width, expect):
    assert wavefronts(np.asarray(addrs), width) == expect


def test_timed_mode_is_off_by_default():
    assert machine.TIMING_FACTORY is None


def _emulate(arch_name, kernel, timed_params=None):
    from porter.descriptor.arch import load_arch
    from porter.commands.device_common import select_kernels
    from porter.runtime.emulated import EmuDevice
    from porter.runtime.emulated_cases import emulation_shapes
    from porter.runtime.emulated_runs import emulate

    arch = load_arch(arch_name)
    spec = select_kernels(arch, kernel)[0][0]
    shape = emulation_shapes(spec)[1]
    dev = EmuDevice(sm_count=max(1, spec.cluster[0] * spec.cluster[1] * spec.cluster[2]), seed=-1)
    emulate(spec, arch, shapes=[shape], seeds=1, device=dev)            # build and warm up once
    if timed_params is None:
        return emulate(spec, arch, shapes=[shape], seeds=1, device=dev), None
    with timed(timed_params) as runs:
        res = emulate(spec, arch, shapes=[shape], seeds=1, device=dev)
    return res, list(runs)


def _params(arch_name):
    from porter.descriptor.arch import load_arch
    from porter.timing.figures import Figures
    from porter.timing.l1 import params

    return params(Figures.of(load_arch(arch_name)))


@pytest.mark.parametrize("arch_name,kernel", [
    ("hopper", "gemm.bf16"),
    pytest.param("blackwell", "gemm.bf16.pair", marks=pytest.mark.slow),
    pytest.param("blackwell", "attention.hd128", marks=pytest.mark.slow),
])
def test_same_outputs_and_checks_at_most_3x_the_cost(arch_name, kernel):
    plain, _ = _emulate(arch_name, kernel)
    timed_res, runs = _emulate(arch_name, kernel, _params(arch_name))
    assert plain["passed"] and timed_res["passed"]
    strip = ("seconds",)
    assert [{k: v for k, v in c.items() if k not in strip} for c in timed_res["checks"]] == \
        [{k: v for k, v in c.items() if k not in strip} for c in plain["checks"]]
    # the same instructions ran, in the same order (round-robin warps)
    assert [r["warp_instructions"] for r in timed_res["runs"]] == [r["warp_instructions"] for r in plain["runs"]]
    cpu = lambda res: sum(r["cpu_seconds"] for r in res["runs"][-1:])      # noqa: E731
    assert cpu(timed_res) <= 3.0 * cpu(plain), (cpu(timed_res), cpu(plain))
    assert runs and runs[-1]["cycles"] > 0 and runs[-1]["issued"] > 0
    busy = runs[-1]["busy"][0]
    assert busy["tensor"] > 0 and busy["smem"] > 0 and busy["l2"] > 0
