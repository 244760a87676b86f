"""L1 of porter's timing model (porter.timing.l1): the timed simulator's parameters from the
descriptor's perf: figures, the SASS expansion table from porter's own disassembly, the
fitted per-step period against the tensor core's rate, and predict(level="L1")."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.emu.timed import REQUIRED
from porter.timing.figures import Figures
from porter.timing import l1


def _spec(arch, name):
    from porter.commands.device_common import select_kernels

    return select_kernels(arch, name)[0][0]


@pytest.mark.parametrize("name", ["hopper", "blackwell"])
def test_params_are_the_descriptors_figures(name):
    fig = Figures.of(load_arch(name))
    p = l1.params(fig)
    assert set(REQUIRED) <= set(p)
    assert p["smem_bytes_per_clk_per_sm"] == fig["smem_bytes_per_clk_per_sm"]
    assert p["tma_inflight_bytes"] == fig["tma_inflight_kib"] * 1024
    assert p["l2_bytes_per_clk_per_sm"] == pytest.approx(fig.l2_bytes_per_clk_per_sm)
    assert p["mma_flop_per_clk_per_sm"] == dict(fig["mma_flop_per_clk_per_sm"])
    assert ("tmem_latency_cycles" in p) == ("tmem_latency_cycles" in fig.values)


def test_expansion_table_from_the_kernels_sass():
    """Blackwell fuses two max.f32 into one three-input max (the row max: 128 -> 64, beside
    other max/min that stay single); Hopper does not."""
    bw, hp = load_arch("blackwell"), load_arch("hopper")
    assert 0.45 <= l1.expansion(_spec(bw, "attention.hd128"), bw)["fp32_minmax"] <= 0.75
    assert l1.expansion(_spec(hp, "attention.hd128"), hp)["fp32_minmax"] == pytest.approx(1.0)


def test_pair_gemm_step_is_at_least_the_tensor_cores_time():
    arch = load_arch("blackwell")
    spec = _spec(arch, "gemm.bf16.pair")
    fig = Figures.of(arch)
    m = l1.measure(spec, arch, fig)
    c = spec.config
    tensor = 2.0 * int(c["cta_rows"]) * int(c["tile_n"]) * int(c["tile_k"]) / fig.mma_rate(c["kind"])
    assert tensor <= m["step_cycles"] <= 1.5 * tensor
    assert m["prologue_cycles"] > 0 and m["busy"]["tensor"] > 0.5


@pytest.mark.slow
@pytest.mark.parametrize("arch_name,kernel", [("hopper", "gemm.bf16"), ("blackwell", "gemm.bf16.pair")])
def test_predict_l1_is_labelled_ranged_and_near_l0(arch_name, kernel):
    from porter.timing import LABEL, predict

    arch = load_arch(arch_name)
    spec = _spec(arch, kernel)
    p0, p1 = predict(arch, spec), predict(arch, spec, level="L1")
    assert p1.level == "L1" and p1.label == LABEL
    assert p1.low <= p1.time_us <= p1.high
    assert 0.5 < p1.time_us / p0.time_us < 2.0
    assert "l1_step_cycles" in p1.extra
