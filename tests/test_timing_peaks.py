"""No prediction of porter's timing model beats the product it is made for: a FLOP kernel's
TFLOP/s stays at or under the product's dense peak for its format (the datasheet's, or the
one the perf figures imply), and every kernel's GB/s at or under the product's HBM
bandwidth where HBM is what it is measured against. Checked at L0 for every kernel, product
and standard shape of every shipped descriptor, across the prediction's range (its fast end
too), and at L1 (the timed simulator's period) for the CTA-pair kernels, whose pair of SMs
once had its period dealt to every SM (2782 TFLOP/s predicted for a 2250 TFLOP/s B200)."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.kernels import family_module
from porter.kernels.base import KernelSpec
from porter.timing import predict, standard_shapes
from porter.timing.predict import _time

ARCHS = ("ampere", "hopper", "blackwell", "rtx-blackwell")
FAMILIES = ("gemm", "attention", "megakernel")


def _specs(arch):
    return [s for f in FAMILIES for s in family_module(f).variants(arch) if isinstance(s, KernelSpec)]


def _within_peaks(arch, p, seconds=None):
    """(ok, what): the prediction (at ``seconds``, default its central time) against its peak."""
    seconds = seconds or p.time_us * 1e-6
    scale = p.time_us * 1e-6 / seconds
    if p.tflops is not None:
        pct = p.pct_peak * scale
        return pct <= 100.0, f"{p.tflops * scale:.0f} TFLOP/s = {pct:.1f}% of {p.extra['peak']}"
    gbs = p.gb_s * scale
    return gbs * 1e9 <= arch.hbm_bandwidth_bytes_per_s, f"{gbs:.0f} GB/s of {arch.hbm_bandwidth_bytes_per_s / 1e9:.0f}"


@pytest.mark.parametrize("name", ARCHS)
def test_no_l0_prediction_beats_its_products_peak(name):
    base = load_arch(name)
    bad = []
    for product in base.product_names:
        arch = base.for_product(product) if product != base.product else base
        for spec in _specs(base):
            for shape in standard_shapes(spec):
                p = predict(base, spec, product=product, shape=shape)
                for end, seconds in (("central", None), ("fast end", p.low * 1e-6)):
                    ok, what = _within_peaks(arch, p, seconds)
                    if not ok:
                        bad.append(f"{spec.name} {product} {shape} {end}: {what}")
    assert bad == []


PAIRS = ("attention.hd128.pair", "gemm.bf16.pair")


def _pair_spec(arch, kernel):
    from porter.commands.device_common import select_kernels

    return select_kernels(arch, kernel)[0][0]


@pytest.mark.parametrize("kernel", PAIRS)
def test_l1_of_a_cta_pair_stays_under_the_peak(kernel):
    """The timed simulator measures one tile's period on the pair's two SMs: the schedule
    deals tiles to pairs, not to SMs (central figures; the slow test covers the range)."""
    from porter.timing.figures import Figures

    arch = load_arch("blackwell")
    spec = _pair_spec(arch, kernel)
    fig = Figures.of(arch)
    flops_peak = arch.peak_tflops["bf16"] * 1e12
    for shape in standard_shapes(spec):
        seconds, _, out = _time(spec, arch, fig, shape, "L1")
        assert out["schedule"].units == fig.sm_count // 2
        assert out["flops"] / seconds <= flops_peak, (kernel, shape, out["flops"] / seconds / 1e12)


@pytest.mark.slow
@pytest.mark.parametrize("name", ARCHS)
def test_no_l1_prediction_beats_its_products_peak(name):
    arch = load_arch(name)
    bad = []
    for spec in _specs(arch):
        for shape in standard_shapes(spec):
            p = predict(arch, spec, shape=shape, level="L1")
            for end, seconds in (("central", None), ("fast end", p.low * 1e-6)):
                ok, what = _within_peaks(arch, p, seconds)
                if not ok:
                    bad.append(f"{spec.name} {shape} {end}: {what}")
    assert bad == []
