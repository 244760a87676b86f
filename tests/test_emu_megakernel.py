"""The megakernel's decode step executed in porter's PTX simulator on both archs: the
whole grid co-resident (cooperative), ld.acquire / red.release dependency counters,
nanosleep back-off and the %globaltimer watchdog on the virtual clock, against the fp64
forward of the tiny Llama-shaped models. Level "emulated": not on a GPU."""

from __future__ import annotations

import pytest

from porter.emu.validate import emulate
from porter.kernels import family_module


@pytest.mark.parametrize("arch_name", ["hopper", "blackwell"])
def test_megakernel_decode_step_emulated(arch_name, request):
    arch = request.getfixturevalue(arch_name)
    spec = family_module("megakernel").variants(arch)[0]
    result = emulate(spec, arch, seeds=1)
    assert result["status"] == "passed", result["reason"]
    models = {c["model"] for c in result["checks"]}
    assert models == {"tiny", "tiny-gqa4"}
    for c in result["checks"]:
        assert c["passed"] and c["counters_ok"] and c["token_ok"] and c["cache_unwritten"] == 0
    runs = result["runs"]
    # planned on the emulated device's 4 queues: four persistent CTAs waiting on each other
    assert all(r["ctas"] == 4 for r in runs)
