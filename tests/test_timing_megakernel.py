"""The megakernel's plan takes its queue simulation's per-instruction costs from the
descriptor's perf: figures and its counter waits from the kernel's own back-off (issue 16
item 4): a figure's change moves the predicted step, and a target without figures keeps
the assumed constants, saying so."""

from __future__ import annotations

from porter.descriptor.arch import arch_from_text, load_arch
from porter.megakernel.hw import HwFigures
from porter.megakernel.latency import LatencyModel
from porter.megakernel.plan import build_plan

MODEL = "tiny-gqa4"


def test_plan_costs_come_from_the_descriptor_figures(tmp_path):
    hop = load_arch("hopper")
    plan = build_plan(hop, MODEL, pos=30)
    assert plan["latency_model_source"] == "perf: figures of the descriptor"
    assert plan["latency_model"] == LatencyModel.from_arch(hop).__dict__
    assert plan["latency_model"] != LatencyModel().__dict__
    # the waits follow the kernel's own back-off, polled at the L2 round trip (a perf figure):
    # a slower L2 makes the same plan slower
    assert plan["latency_model"]["backoff"]["backoff_max_ns"] > 0
    text = hop.path.read_text().replace("  l2_latency_ns: 150\n", "  l2_latency_ns: 190\n", 1)
    assert text != hop.path.read_text()
    slow = build_plan(arch_from_text(text, tmp_path / "hopper.yaml"), MODEL, pos=30)
    assert slow["predicted_latency_us"] > plan["predicted_latency_us"]
    assert slow["memory_floor_us"] == plan["memory_floor_us"]
    # without a back-off in the kernel the wake-up is the perf figure: a slower one is slower
    text = hop.path.read_text().replace("  counter_wakeup_ns: 500\n", "  counter_wakeup_ns: 1900\n", 1)
    lazy = arch_from_text(text, tmp_path / "hopper2.yaml")
    none = build_plan(hop, MODEL, pos=30, latency_model=LatencyModel.from_arch(hop, backoff=None))
    later = build_plan(lazy, MODEL, pos=30, latency_model=LatencyModel.from_arch(lazy, backoff=None))
    assert later["predicted_latency_us"] > none["predicted_latency_us"]


def test_without_figures_the_assumed_constants_are_named_and_a_given_model_wins():
    bare = build_plan(HwFigures(8, 1e12), MODEL, pos=30)
    assert bare["latency_model_source"] == "assumed constants (no perf: figures)"
    assert bare["latency_model"] == LatencyModel().__dict__
    given = build_plan(load_arch("hopper"), MODEL, pos=30, latency_model=LatencyModel(wakeup_s=1e-6))
    assert given["latency_model_source"] == "given" and given["latency_model"]["wakeup_s"] == 1e-6
