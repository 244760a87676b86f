"""schedule=clc: dynamic persistent scheduling of the tcgen05 GEMMs by cluster launch control
(issue 17 item 3). The knob exists where the descriptor claims cluster_launch_control, is
held to the launch knobs it replaces, launches one cluster per tile, compiles to the
descriptor's try_cancel spelling, runs in porter's simulator with the remainder tiles taken
over by running CTAs, and its new hand-off (the scheduler's tile slots) has planted bugs the
simulator catches. The timing model's greedy schedule is checked against the static one.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import family_module, knobs
from porter.runtime.emulated_cases import emulation_shapes
from porter.runtime.emulated_runs import emulate
from porter.timing.schedule import Schedule

TCGEN05_GEMMS = ("gemm.bf16", "gemm.fp8", "gemm.mxfp8", "gemm.nvfp4",
                 "gemm.bf16.pair", "gemm.fp8.pair", "gemm.mxfp8.pair", "gemm.nvfp4.pair")


def _clc(arch, name):
    return knobs.spec_with_knobs(arch, name, {"schedule": "clc"})


# ---- the knob -------------------------------------------------------------------------------------

def test_schedule_knob_is_there_with_the_feature_and_static_by_default(blackwell):
    assert blackwell.has("cluster_launch_control")
    for name in TCGEN05_GEMMS:
        assert knobs.knob_space(blackwell, name)["schedule"] == ("static", "clc")
        assert knobs.default_knobs(blackwell, name)["persistent"] is True
        assert "schedule" not in knobs.spec_with_knobs(blackwell, name, {}).config   # default sources unchanged
    spec = _clc(blackwell, "gemm.bf16.pair")
    assert spec.config["schedule"] == "clc" and "cluster_launch_control" in spec.features
    assert spec.threads == 7 * 32 and spec.config["warps"]["scheduler"] == 2
    assert spec.config["warps"]["epilogue"] == [3, 4, 5, 6]                 # still one per TMEM lane quarter
    assert knobs.default_knobs(blackwell, "gemm.bf16.pair") != {} and \
        family_module("gemm").knobs_of(blackwell, spec)["schedule"] == "clc"


def test_no_schedule_knob_without_the_feature(tmp_path: Path, blackwell):
    text = Path(blackwell.path).read_text().replace("  launch_control: true\n", "  launch_control: false\n")
    text = text.replace('  cluster_launch_control: ["UGETNEXTWORKID"]\n', "")    # a denied feature has no signature
    assert "launch_control: false" in text and "cluster_launch_control:" not in text
    path = tmp_path / "blackwell.yaml"
    path.write_text(text)
    arch = load_arch(path)
    assert not arch.has("cluster_launch_control")
    assert "schedule" not in knobs.knob_space(arch, "gemm.bf16")
    with pytest.raises(PorterError, match="--set schedule: no such knob"):
        knobs.spec_with_knobs(arch, "gemm.bf16", {"schedule": "clc"})


@pytest.mark.parametrize("sets,match", [
    ({"schedule": "dynamic"}, r"--set schedule=dynamic: legal values: static, clc"),
    ({"schedule": "clc", "persistent": False}, r"--set schedule=clc: .*drop persistent=false"),
    ({"schedule": "clc", "grid_ctas": 64}, r"--set schedule=clc: .*drop grid_ctas"),
])
def test_schedule_knob_errors_name_the_knob(blackwell, sets, match):
    with pytest.raises(PorterError, match=match):
        knobs.spec_with_knobs(blackwell, "gemm.bf16.pair", sets)


def test_clc_launches_one_cluster_per_tile(blackwell):
    import numpy as np
    import ml_dtypes

    from porter.runtime.gemm import plan_gemm

    a = np.zeros((1024, 256), ml_dtypes.bfloat16)
    b = np.zeros((1024, 256), ml_dtypes.bfloat16)
    for name, pair in (("gemm.bf16", False), ("gemm.bf16.pair", True)):
        static = plan_gemm(a, b, blackwell, "bf16", pair=pair, max_ctas=4)
        clc = plan_gemm(a, b, blackwell, "bf16", pair=pair, max_ctas=4, spec=_clc(blackwell, name))
        c = clc.spec.config
        tiles = (1024 // c["tile_m"]) * (1024 // c["tile_n"])
        assert static.grid == 4                                      # capped at the device's SMs
        assert clc.grid == tiles * c["cta_group"] > 4                # one cluster per tile, whatever the SMs
        assert clc.cluster == static.cluster


def test_clc_compiles_to_the_descriptors_try_cancel_without_spills(blackwell):
    from porter.kernels.build import build_kernel

    spec = _clc(blackwell, "gemm.bf16.pair")
    rules = [r.why for r in spec.sass_required]
    assert any("op:clc_try_cancel" in why for why in rules)
    build = build_kernel(spec, blackwell)
    assert build.ok, [c.detail for c in build.checks if not c.passed]
    assert build.resources["spill_store_bytes"] == 0 and build.resources["local_bytes"] == 0


# ---- emulated -------------------------------------------------------------------------------------

def _check_taken_over(result, spec):
    assert result["status"] == "passed", result["reason"]
    m, n, _ = emulation_shapes(spec)[1]
    c = spec.config
    tiles = (m // c["tile_m"]) * (n // c["tile_n"])
    # the reach shape: 2 x workers + 1 tiles, one cluster launched per tile, but only the
    # emulated device's 4 SMs' worth started: the rest were canceled and taken over
    assert tiles == 2 * (4 // c["cta_group"]) + 1
    assert result["runs"][-1]["ctas"] == 4 < tiles * c["cta_group"]
    for check in result["checks"]:
        written = check["written"] if isinstance(check["written"], list) else [check["written"]]
        assert check["passed"] and all(w["passed"] and w["unwritten"] == 0 for w in written)


@pytest.mark.parametrize("name", ("gemm.bf16", "gemm.bf16.pair", "gemm.nvfp4.pair"))
def test_clc_kernels_emulated_with_remainder_tiles_taken_over(blackwell, name):
    spec = _clc(blackwell, name)
    _check_taken_over(emulate(spec, blackwell, seeds=1), spec)


@pytest.mark.slow
@pytest.mark.parametrize("name", TCGEN05_GEMMS)
def test_every_clc_kernel_emulated_two_seeds(blackwell, name):
    spec = _clc(blackwell, name)
    _check_taken_over(emulate(spec, blackwell, seeds=2), spec)


# ---- planted bugs in the new hand-off (issue 17 item 9) -----------------------------------------
# (id, kernel, [(old, new)] on the rendered .cu (each anchor exactly once), expected: a substring)
SLOT_FULL_WAIT = "            porter::mbar_wait(porter::smem_u32(&bars.slot_full[s]), parity);\n"
CLC_MUTATIONS = [
    # a reader takes the tile from its slot before the slot's mbarrier phase: its read races
    # the scheduler's write of the slot
    ("slot-read-before-its-phase", "gemm.bf16", [(SLOT_FULL_WAIT, "")], "shared-memory race"),
    # ... in the pair, where the even CTA's scheduler writes the odd CTA's slot remotely
    ("pair-slot-read-before-its-phase", "gemm.bf16.pair",
     [("            porter::mbar_wait_cluster(porter::smem_u32(&bars.slot_full[s]), parity);\n", "")],
     "shared-memory race"),
    # the wrong parity: a reader passes a slot_full phase that completed a round earlier
    ("slot-wrong-parity", "gemm.bf16",
     [(SLOT_FULL_WAIT, SLOT_FULL_WAIT.replace("parity);", "parity ^ 1);"))], "shared-memory race"),
    # the scheduler refills a slot without waiting for its readers (slot_empty)
    ("slot-overwritten-before-read", "gemm.bf16",
     [("                porter::mbar_wait(bar(bars.slot_empty[s]), parity ^ 1);\n", "")], "shared-memory race"),
    # the scheduler decodes the try_cancel response before it landed (no wait on clc_full)
    ("response-read-before-landed", "gemm.bf16",
     [("                porter::mbar_wait(bar(bars.clc_full), clc_phase);\n", "")],
     "query_cancel of a value that is not a try_cancel response"),
]


@pytest.mark.parametrize("case", CLC_MUTATIONS, ids=[c[0] for c in CLC_MUTATIONS])
def test_planted_clc_bug_is_caught(case, blackwell):
    _, name, edits, reason = case
    spec = _clc(blackwell, name)
    source = family_module("gemm").render(spec, blackwell)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
        source = source.replace(old, new)
    result = emulate(spec, blackwell, shapes=[emulation_shapes(spec)[1]], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert reason in result["reason"], result["reason"]


# ---- the timing model -----------------------------------------------------------------------------

def test_greedy_schedule_evens_unequal_tiles_and_equals_static_on_equal_ones():
    equal = (100.0,) * 10
    assert Schedule(4, equal, 0, 0, dynamic=True).busiest_cycles() == Schedule(4, equal, 0, 0).busiest_cycles() == 300
    assert Schedule(4, equal, 0, 0, dynamic=True).waves == Schedule(4, equal, 0, 0).waves == 3
    # long tiles first in the walk: static deals tiles 0 and 4 (both long) to unit 0
    unequal = (400.0, 100.0, 100.0, 100.0, 400.0, 100.0, 100.0, 100.0)
    assert Schedule(4, unequal, 0, 0).busiest_cycles() == 800
    assert Schedule(4, unequal, 0, 0, dynamic=True).busiest_cycles() == 500      # the long one goes to a freed unit
    # the hand-over cost is paid by every tile a unit takes over, not by its first
    assert Schedule(4, equal, 0, 0, dynamic=True, fetch_cycles=10).busiest_cycles() == 320


def test_clc_prediction_against_static(blackwell):
    from porter.timing.predict import predict

    for name in ("gemm.bf16.pair", "gemm.nvfp4.pair"):
        static, clc = knobs.spec_with_knobs(blackwell, name, {}), _clc(blackwell, name)
        for shape in ("8192x8192x8192", "4096x4096x4096", "6144x6144x6144"):
            a, b = predict(blackwell, static, shape=shape), predict(blackwell, clc, shape=shape)
            # equal tiles: the greedy walk's busiest unit runs as many as the static one's, and
            # the round trip hides behind two tile periods
            assert b.time_us == pytest.approx(a.time_us) and b.extra["waves"] == a.extra["waves"]
            assert b.extra["clc_fetch_exposed_cycles"] == 0
    # one K step per tile: the hand-over no longer hides, and the model says what it costs
    static, clc = knobs.spec_with_knobs(blackwell, "gemm.bf16.pair", {}), _clc(blackwell, "gemm.bf16.pair")
    a, b = predict(blackwell, static, shape="4096x4096x64"), predict(blackwell, clc, shape="4096x4096x64")
    assert b.time_us > a.time_us and b.extra["clc_fetch_exposed_cycles"] > 0
    assert "clc_round_trip_ns" in blackwell.text and b.high > a.high        # its range spans the round trip's
