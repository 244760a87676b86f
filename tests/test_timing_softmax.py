"""The attention model's softmax terms read the kernel's own softmax configuration
(porter.timing.attention_model): the row reduction's stated depths, the lazy O rescale's
TMEM traffic, and the share of exp2 moved from the MUFU to the FMA pipe. Predicted by
porter's timing model, not measured."""

from __future__ import annotations

import dataclasses

import pytest

from porter.descriptor.arch import load_arch
from porter.kernels.knobs import spec_with_knobs
from porter.timing import predict
from porter.timing.attention_model import tile_costs
from porter.timing.figures import Figures

SHAPE = "4x16x16x4096x4096"


@pytest.fixture(scope="module")
def bw():
    arch = load_arch("blackwell")
    return arch, Figures.of(arch)


def _with(spec, **cfg):
    return dataclasses.replace(spec, config={**spec.config, **cfg})


def test_a_tree_reduction_predicts_faster_than_a_dependent_chain(bw):
    arch, fig = bw
    spec = spec_with_knobs(arch, "attention.hd128", {})
    rr, bn = spec.config["row_reduction"], int(spec.config["block_n"])
    assert rr["kind"] == "tree" and rr["max_depth"] < bn
    chain = _with(spec, row_reduction={"kind": "chain", "partials": 1, "max_depth": bn, "sum_depth": bn // 2})
    tree_sm, chain_sm = (tile_costs(s, arch, fig)["resources"]["softmax"] for s in (spec, chain))
    # the depth difference, at the ALU latency, is all that separates them
    depth = bn + bn // 2 - rr["max_depth"] - rr["sum_depth"]
    assert chain_sm - tree_sm == pytest.approx(depth * fig["alu_latency_cycles"])
    assert predict(arch, spec, shape=SHAPE).time_us < predict(arch, chain, shape=SHAPE).time_us


def test_a_larger_poly_share_moves_mufu_time_down_and_fma_issue_up(bw):
    arch, fig = bw
    costs = [tile_costs(spec_with_knobs(arch, "attention.hd128", {"poly_exp2_share": s}), arch, fig)["resources"]
             for s in (0, 25, 75)]
    mufu, issue = [c["mufu"] for c in costs], [c["issue"] for c in costs]
    assert mufu[0] > mufu[1] > mufu[2] and mufu[2] == pytest.approx(mufu[0] / 4)
    assert issue[0] < issue[1] < issue[2]


def test_lazy_rescale_costs_tmem_traffic_on_the_share_of_tiles_that_rescale(bw):
    arch, fig = bw
    lazy = spec_with_knobs(arch, "attention.hd128", {"rescale_threshold": 8})
    eager = spec_with_knobs(arch, "attention.hd128", {"rescale_threshold": 0})
    c = lazy.config
    traffic = 2 * int(c["cta_rows"]) * int(c["head_dim"]) * 4 / fig["tmem_bytes_per_clk_per_sm"]
    soft = lambda s, f=fig: tile_costs(s, arch, f)["resources"]["softmax"]   # noqa: E731
    share = fig["lazy_rescale_tile_share"]
    assert soft(eager) - soft(lazy) == pytest.approx((1 - share) * traffic)
    lo, hi = fig.uncertain["lazy_rescale_tile_share"]
    assert soft(lazy, fig.with_value("lazy_rescale_tile_share", lo)) < soft(lazy) \
        < soft(lazy, fig.with_value("lazy_rescale_tile_share", hi))
    # the prediction's slow end takes the larger share
    from porter.timing.predict import _slower_when_larger

    assert _slower_when_larger("lazy_rescale_tile_share")
