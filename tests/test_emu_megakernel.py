"""The megakernel's decode step executed in porter's PTX simulator on both archs: the
whole grid co-resident (cooperative), ld.acquire / red.release dependency counters,
nanosleep back-off and the %globaltimer watchdog on the virtual clock, against the fp64
forward of the tiny Llama-shaped models. Level "emulated": not on a GPU."""

from __future__ import annotations

import pytest

from porter.runtime.emulated_runs import emulate
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


def test_a_wrong_dependency_counter_trips_the_kernels_watchdog(hopper, monkeypatch):
    """Planted bug: one instruction waits for one producer more than its counter will ever
    count. The waiting CTA polls and sleeps; the simulator's virtual clock fast-forwards
    while nothing can change, so the kernel's own %globaltimer watchdog traps (in seconds
    of host time, not the 5 s deadline in real time per probe)."""
    import porter.megakernel.plan as plan_mod
    from porter.megakernel import isa

    build_plan = plan_mod.build_plan

    def planted(*args, **kw):
        plan = build_plan(*args, **kw)
        queue = plan["program"].instructions[0]
        waiting = [i for i in range(queue.shape[0]) if queue[i, isa.W.NWAIT] > 0]
        queue[waiting[-1], isa.W.WAIT0 + 1] += 1
        return plan

    monkeypatch.setattr(plan_mod, "build_plan", planted)
    spec = family_module("megakernel").variants(hopper)[0]
    result = emulate(spec, hopper, shapes=["tiny"], seeds=1)
    assert result["status"] == "failed"
    assert "executed trap" in result["reason"] and "watchdog" in result["reason"]
