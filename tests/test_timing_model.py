"""porter's timing model (issue 16): perf sections, L0 resource balance, knob directions,
calibration targets that are met. Every figure here is predicted, not measured."""

from __future__ import annotations

import re

import pytest

from porter.descriptor.arch import arch_from_text, load_arch
from porter.descriptor.arch_schema import check_descriptor, parse_yaml
from porter.descriptor.perf_schema import peak_mismatches
from porter.errors import PorterError
from porter.kernels import family_module
from porter.kernels.base import KernelSpec
from porter.kernels.knobs import spec_with_knobs
from porter.timing import LABEL, predict, standard_shapes

ARCHS = ("ampere", "hopper", "blackwell", "rtx-blackwell")


def _specs(arch, families=("gemm", "attention")):
    return [s for f in families for s in family_module(f).variants(arch) if isinstance(s, KernelSpec)]


@pytest.mark.parametrize("name", ARCHS)
def test_every_kernel_on_every_product_has_a_prediction_with_a_range(name):
    arch = load_arch(name)
    for spec in _specs(arch):
        for product in arch.product_names:
            p = predict(arch, spec, product=product, shape=standard_shapes(spec)[0])
            assert p.product == product and p.label == LABEL
            assert 0 < p.low <= p.time_us <= p.high
            assert p.bound in p.resources and p.tflops > 0
            # % of the datasheet peak for the format, or of the one the perf figures imply
            # where the datasheet gives none (never a bandwidth figure for a FLOP kernel)
            assert 0 < p.pct_peak <= 100 and "HBM" not in p.extra["peak"], (spec.name, product, p.extra)


def test_a_descriptor_made_by_yaml_alone_is_predicted(tmp_path):
    text = (load_arch("hopper").path).read_text().replace("name: hopper", "name: myhopper", 1)
    text = text.replace("sm_count: 132", "sm_count: 114", 1)
    arch = arch_from_text(text, tmp_path / "myhopper.yaml")
    spec = next(s for s in _specs(arch, ("gemm",)) if s.name == "gemm.bf16")
    fewer = predict(arch, spec, shape="8192x8192x8192")
    full = predict(load_arch("hopper"), spec_with_knobs(load_arch("hopper"), "gemm.bf16", {}), shape="8192x8192x8192")
    assert fewer.time_us > full.time_us            # fewer SMs, the same per-SM figures


def test_shipped_descriptors_agree_with_their_peaks():
    for name in ARCHS:
        arch = load_arch(name)
        data, lines = parse_yaml(arch.text, str(arch.path))
        assert peak_mismatches(check_descriptor(data, lines, str(arch.path))) == []


def test_perf_section_errors_are_one_line(tmp_path):
    text = load_arch("hopper").path.read_text()
    bad = re.sub(r"(?m)^    sustained_clock_mhz: \[.*\]$", "    sustained_clock_mhz: [1000, 1200]", text, count=1)
    assert bad != text
    with pytest.raises(PorterError, match=r"perf\.uncertain\.sustained_clock_mhz: the range .* does not hold"):
        arch_from_text(bad, "x.yaml")
    bad = text.replace("  smem_bytes_per_clk_per_sm: 128\n", "", 1)
    with pytest.raises(PorterError, match=r"perf\.smem_bytes_per_clk_per_sm: missing key"):
        arch_from_text(bad, "x.yaml")
    bad = text.replace("{f16: 4096, tf32: 2048, f8: 8192, i8: 8192}", "{f16: 4096, tf32: 2048, f8: 8192}", 1)
    with pytest.raises(PorterError, match=r"mma_flop_per_clk_per_sm\.i8: missing rate"):
        arch_from_text(bad, "x.yaml")


def test_l0_flags_the_resource_balance_problems():
    bw, hop = load_arch("blackwell"), load_arch("hopper")
    by = {s.name: s for s in _specs(bw)}
    # one CTA's hd128 attention is not tensor-bound: with its tree row reductions the
    # softmax (MUFU) path sits within a few percent of the shared-memory port, which binds
    p = predict(bw, by["attention.hd128"])
    assert p.bound == "smem" and p.resources["softmax"] > p.resources["tensor"]
    for name in ("gemm.bf16", "gemm.fp8", "gemm.mxfp8", "gemm.nvfp4", "gemm.mxfp8.pair", "gemm.nvfp4.pair"):
        assert predict(bw, by[name]).bound == "smem", name      # 1-CTA and block-scaled GEMMs
    hy = {s.name: s for s in _specs(hop)}
    # promoted Hopper fp8 (two accumulators) fits only 128 x 128, too narrow for the smem port;
    # the default (fast accumulation) takes 128 x 256 and is tensor-bound
    promoted = spec_with_knobs(hop, "gemm.fp8", {"accumulation": "promoted", "tile_n": 128})
    assert predict(hop, promoted).bound == "smem"
    assert predict(hop, hy["gemm.fp8"]).bound == "tensor"
    assert predict(hop, hy["gemm.bf16"]).bound == "tensor"


def _t(arch, kernel, knobs, shape="8192x8192x8192"):
    return predict(arch, spec_with_knobs(arch, kernel, knobs), product="H100 SXM" if arch.name == "hopper" else None,
                   shape=shape).time_us


def test_knobs_the_ladder_says_matter_move_the_prediction_the_right_way():
    hop, bw = load_arch("hopper"), load_arch("blackwell")
    assert _t(hop, "gemm.bf16", {"consumers": 1}) > _t(hop, "gemm.bf16", {})
    assert _t(hop, "gemm.bf16", {"stages": 2}) > _t(hop, "gemm.bf16", {"stages": 4})
    assert _t(hop, "gemm.bf16", {"cluster_m": 1}) >= _t(hop, "gemm.bf16", {})
    assert _t(hop, "gemm.bf16", {"persistent": False}) > _t(hop, "gemm.bf16", {})
    assert _t(hop, "attention.hd128", {"pingpong": False}, "2x16x16x8192x8192") > \
        _t(hop, "attention.hd128", {}, "2x16x16x8192x8192")
    assert _t(bw, "gemm.bf16.pair", {}) < _t(bw, "gemm.bf16", {})   # 1-CTA vs pair


def test_causal_tiles_and_the_last_wave_tail_count():
    hop = load_arch("hopper")
    full = _t(hop, "attention.hd128", {}, "4x16x16x4096x4096")
    causal = _t(hop, "attention.hd128.causal", {}, "4x16x16x4096x4096")
    assert 0.4 * full < causal < 0.75 * full
    # 133 tiles on 132 units: a second, nearly empty wave costs a whole tile period
    spec = spec_with_knobs(hop, "gemm.bf16", {})
    one = predict(hop, spec, shape=f"{128 * 12}x{256 * 11}x4096").time_us       # 132 tiles
    two = predict(hop, spec, shape=f"{128 * 133}x256x4096").time_us            # 133 tiles
    assert two > 1.6 * one


def test_calibration_targets_that_are_met():
    """The targets of issue 16 item 7 this model meets, over the ladder steps porter reproduces
    with knobs (steps with a change porter has no knob for are predicted, shown, left out).
    Not met, and so not asserted (see calibration.table_markdown): the rank of K6 vs K7 (with
    fast.cu's own configurations, 128x256 and two consumers both, they differ only in the
    cluster's multicast of B, and L0 predicts them tied), so tau over K6 < K7 < K11 is 0.82,
    and the FA3 row's absolute error. K11's TMA-store epilogue (epilogue=tma) is predicted
    above K7 at both shapes, as published."""
    from porter.timing.calibration import ATTN_SHAPE, TARGETS, calibrate, met

    cal = calibrate(load_arch("hopper"))
    assert 0.85 < cal["fitted_factor"] < 1.0          # the one factor, on the cuBLAS row; the rest is the model
    s = cal["stats"]
    for shape in ("8192x8192x8192", "6144x6144x6144"):
        st = s[f"fast.cu GEMM {shape}"]
        assert st["steps"] == ["K6", "K7", "K11"]
        pred = {r["step"]: r["predicted"] for r in cal["rows"] if r["shape"] == shape and "predicted" in r}
        assert pred["K11"] > pred["K7"] >= pred["K6"], pred
        ok = met(st)
        assert ok["max_step_ratio_error"] and ok["max_abs_error"], (shape, st)
    assert ATTN_SHAPE == "4x16x16x8448x8448"          # the FA3 paper's ablation shape (section 4.2)
    for r in cal["rows"]:
        if r["step"] == "cuBLAS":
            assert abs(r["abs_error"]) <= TARGETS["max_abs_error"], r
        if r["no_knob"]:
            assert not r["reproduced"] and r["step"] not in s["fast.cu GEMM 8192x8192x8192"]["steps"]


def test_kendall_tau_counts_a_predicted_tie_as_no_rank_order():
    from porter.timing.calibration import kendall_tau

    assert kendall_tau([1, 2], [5, 5]) == 0.0         # published apart, predicted equal
    assert kendall_tau([1, 2], [5, 6]) == 1.0
    assert kendall_tau([1, 2], [6, 5]) == -1.0
    assert kendall_tau([1, 1], [5, 5]) == 1.0         # tied in both


def test_blackwell_is_predicted_beside_held_back_anchors_without_fitting():
    from porter.timing.calibration import held_back

    bw = load_arch("blackwell")
    rows = {(r["kernel"], r["shape"]): r for r in held_back(bw)}
    pair = rows[("gemm.bf16.pair", "4096x4096x4096")]
    raw = predict(bw, spec_with_knobs(bw, "gemm.bf16.pair", {}), product="B200", shape="4096x4096x4096")
    assert pair["predicted"] == raw.tflops and pair["label"] == LABEL   # no factor applied
    assert pair["low_tflops"] <= pair["predicted"] <= pair["high_tflops"]
    # under the sustained clock no B200 GEMM is predicted near the datasheet peak (none published is)
    assert raw.pct_peak < 85


def test_a_prediction_names_the_uncertain_figures_it_is_most_sensitive_to():
    hop = load_arch("hopper")
    p = predict(hop, spec_with_knobs(hop, "gemm.bf16", {}), product="H100 SXM", shape="8192x8192x8192")
    sens = p.extra["sensitivity"]
    assert 1 <= len(sens) <= 3
    from porter.timing.figures import Figures

    names = set(Figures.of(hop.for_product("H100 SXM")).uncertain)
    assert all(s.split(" [")[0] in names for s in sens)
    # the clock under load is an uncertain figure: it must move a tensor-bound GEMM
    assert any(s.startswith("sustained_clock_mhz") for s in sens)
