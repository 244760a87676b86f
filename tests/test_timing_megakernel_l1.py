"""The megakernel's queue model with L1's measured instruction costs and the kernel's own
counter back-off (issue 16 item 4): the waiter's poll schedule, the back-off constants read
from the kernel's source, the measured costs moving the step, the fallback to the perf:
figures named where L1 cannot run, and (slow) the timed run of the megakernel's PTX."""

from __future__ import annotations

import dataclasses

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import family_module
from porter.kernels.knobs import spec_with_knobs
from porter.megakernel.dag import build_dag
from porter.megakernel.hw import HwFigures
from porter.megakernel.latency import LatencyModel, instruction_kind, poll_return, simulate
from porter.megakernel.scheduler import schedule
from porter.timing import LABEL, megakernel_model, predict
from porter.timing.figures import Figures
from porter.timing.megakernel_l1 import backoff
from porter.validation.model_config import load_model_config

B = {"spin_polls": 4, "backoff_min_ns": 32, "backoff_max_ns": 512}
POLL = 100e-9


def test_a_release_before_the_wait_costs_one_poll():
    assert poll_return(1e-6, 0.5e-6, POLL, B) == pytest.approx(1e-6 + POLL)


def test_a_release_while_spinning_is_seen_by_the_next_poll():
    # polls issue at 0, 100, 200, 300 ns: a release at 150 ns is read by the 200 ns poll
    assert poll_return(0.0, 150e-9, POLL, B) == pytest.approx(300e-9)


def test_a_release_during_back_off_waits_for_the_sleep_then_the_cap_holds():
    # after the spin: polls at 400, 400+100+32, +100+64, +100+128, +100+256, +100+512, +100+512 ...
    t = [400e-9]
    sleep = 32e-9
    for _ in range(8):
        t.append(t[-1] + POLL + sleep)
        sleep = min(2 * sleep, 512e-9)
    release = t[6] - 1e-9
    assert poll_return(0.0, release, POLL, B) == pytest.approx(t[6] + POLL)
    assert t[8] - t[7] == pytest.approx(POLL + 512e-9)          # capped
    # no sleep (the ISA lets __nanosleep run short): polls back to back, seen within a round trip
    assert release + POLL <= poll_return(0.0, release, POLL, B, sleep_scale=0.0) <= release + 2 * POLL
    assert poll_return(0.0, 5e-6, 0.0, B, sleep_scale=0.0) == pytest.approx(5e-6)


def test_back_off_constants_come_from_the_kernel_source():
    hop = load_arch("hopper")
    spec = spec_with_knobs(hop, "megakernel.llama-decode", {})
    got = backoff(family_module("megakernel").render(spec, hop))
    assert got is not None and got["spin_polls"] > 0 and got["backoff_min_ns"] < got["backoff_max_ns"]
    # the form before issue 17 item 8: no spin, a 1024 ns cap
    old = "constexpr unsigned kBackoffMinNs = 32;\nconstexpr unsigned kBackoffMaxNs = 1024;\n"
    assert backoff(old) == {"spin_polls": 0, "backoff_min_ns": 32, "backoff_max_ns": 1024}
    assert backoff("while (ld_acquire_gpu(c) < t) {}") is None


def _tiny_plan(sm: int = 4):
    cfg = load_model_config("tiny-gqa4")
    hw = HwFigures(sm, 1e12)
    g = build_dag(cfg, hw, pos=30, edges=False)
    return g, schedule(g, hw, "list"), hw, cfg


def test_a_slower_back_off_and_measured_costs_move_the_step():
    g, queues, hw, cfg = _tiny_plan()
    fig = Figures.of(load_arch("hopper"))
    base = simulate(g, queues, hw, LatencyModel.from_figures(fig, backoff=B))["latency_us"]
    lazy = dict(B, spin_polls=0, backoff_min_ns=4000, backoff_max_ns=8000)
    assert simulate(g, queues, hw, LatencyModel.from_figures(fig, backoff=lazy))["latency_us"] > base
    kinds = {instruction_kind(d, cfg) for _, d in g.nodes(data=True)}
    cheap = {k: (0.0, 0.0) for k in kinds}
    costly = {k: (2e-6, 1e-8) for k in kinds}
    t_cheap = simulate(g, queues, hw, LatencyModel.from_figures(fig, backoff=B, costs=cheap))["latency_us"]
    t_costly = simulate(g, queues, hw, LatencyModel.from_figures(fig, backoff=B, costs=costly))["latency_us"]
    assert t_costly > t_cheap + 2.0          # every instruction pays at least 2 us more on its SM
    with pytest.raises(PorterError, match="no measured cost for instruction kind"):
        simulate(g, queues, hw, LatencyModel.from_figures(fig, costs={}))


def test_the_figures_model_is_unchanged_without_costs_and_back_off():
    g, queues, hw, _ = _tiny_plan()
    fig = Figures.of(load_arch("hopper"))
    lm = LatencyModel.from_figures(fig)
    assert lm.costs is None and lm.backoff is None
    a = simulate(g, queues, hw, lm)["latency_us"]
    b = simulate(g, queues, hw, dataclasses.replace(lm, sleep_scale=2.0))["latency_us"]
    assert a == b                          # the sleep scale only acts on a back-off


def test_l0_names_its_costs_and_the_kernels_back_off(monkeypatch):
    hop = load_arch("hopper")
    spec = spec_with_knobs(hop, "megakernel.llama-decode", {})
    p = predict(hop, spec, shape="256")
    assert p.level == "L0" and p.label == LABEL and p.low <= p.time_us <= p.high
    assert p.extra["costs"] == "perf: figures (L0)"
    assert "spin / back-off" in p.extra["wake_up"]

    def fail(*a, **k):
        raise PorterError("no toolchain here")
    monkeypatch.setattr("porter.timing.megakernel_l1.measure", fail)
    q = predict(hop, spec, shape="256", level="L1")
    assert q.level == "L0" and q.extra["costs"].startswith("perf: figures (L1 could not run: no toolchain here")
    assert q.time_us == pytest.approx(p.time_us)


@pytest.mark.slow
def test_l1_times_the_megakernels_own_instructions():
    hop = load_arch("hopper")
    spec = spec_with_knobs(hop, "megakernel.llama-decode", {})
    fig = Figures.of(hop)
    costs, source = megakernel_model.instruction_costs(spec, hop, fig, 256)
    assert costs is not None and source.startswith("L1: timed simulation")
    kinds = {k.split("/")[0] for k in costs}
    assert {"MATVEC", "ATTN_PARTIAL", "ATTN_REDUCE", "EMBED", "ARGMAX_REDUCE"} <= kinds
    # a matvec costs more per row at K 8192 than at K 2048 (four times the dot product)
    per_row = {k: v[1] for k, v in costs.items() if k.startswith("MATVEC/e1/f0/")}
    assert per_row["MATVEC/e1/f0/k8192"] > per_row["MATVEC/e1/f0/k2048"]
    p = predict(hop, spec, shape="256", level="L1")
    l0 = predict(hop, spec, shape="256")
    assert p.level == "L1" and p.extra["costs"].startswith("L1:") and p.label == LABEL
    assert p.low <= p.time_us <= p.high
    assert p.time_us >= l0.extra["memory_floor_us"]
