"""Knob tile_order: the attention kernels' persistent walk (decode_tile in
templates/attention.cu.j2) and the timing model's copy of it (attention_model.tile_walk).

heads_inner (the default) walks Q tiles outer, so a wave of ~132 CTAs holds ~2 Q tiles of
every head and, at 4x16 heads x 8448 keys, streams far more K/V than the L2 holds;
q_inner walks each head's Q tiles inner (a wave holds ~2 heads).
"""

from __future__ import annotations

import re

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import attention as family
from porter.kernels.knobs import knob_space, spec_with_knobs
from porter.timing import attention_model
from porter.timing.figures import Figures

ARCHS = ("hopper", "blackwell")


def _decode_lines(src: str) -> list[str]:
    body = src[src.index("Tile decode_tile("):]
    body = body[:body.index("t.b = bh / p.heads_q;")]
    return [ln.strip() for ln in body.splitlines() if re.match(r"\s*int (bh|pos|qt) = ", ln)]


def _run_decode(lines: list[str], batch: int, heads_q: int, q_tiles: int, linear: int) -> tuple[int, int]:
    """Evaluate the rendered decode_tile's integer lines (C on non-negative ints) in Python."""
    env = {"linear": linear}
    p = {"batch": batch, "heads_q": heads_q, "q_tiles": q_tiles}
    for ln in lines:
        name, expr = re.match(r"int (\w+) = (.*);$", ln).groups()
        expr = re.sub(r"p\.(\w+)", lambda m: str(p[m.group(1)]), expr).replace("/", "//")
        m = re.fullmatch(r"\((.*)\) \? (.*) : (.*)", expr)
        if m:
            expr = f"(({m.group(2)}) if ({m.group(1)}) else ({m.group(3)}))"
        env[name] = eval(expr, {}, dict(env))
    return env["bh"], env["qt"]


@pytest.mark.parametrize("arch_name", ARCHS)
def test_knob_is_declared_and_checked(arch_name):
    arch = load_arch(arch_name)
    for kernel in ("attention.hd128", "attention.hd64.causal"):
        assert knob_space(arch, kernel)["tile_order"] == ("heads_inner", "q_inner")
        spec = spec_with_knobs(arch, kernel, {"tile_order": "q_inner"})
        assert spec.config["tile_order"] == "q_inner"
        assert family.knobs_of(arch, spec)["tile_order"] == "q_inner"
        default = spec_with_knobs(arch, kernel, {})
        assert "tile_order" not in default.config            # default sources unchanged
        assert family.knobs_of(arch, default)["tile_order"] == "heads_inner"
        assert spec_with_knobs(arch, kernel, {"tile_order": "heads_inner"}).config == default.config
    with pytest.raises(PorterError, match=r"tile_order=rows.*heads_inner, q_inner"):
        spec_with_knobs(arch, "attention.hd128", {"tile_order": "rows"})


def test_knob_combines_with_mainloop_knobs():
    arch = load_arch("hopper")
    spec = spec_with_knobs(arch, "attention.hd128.causal", {"tile_order": "q_inner", "stages": 2})
    assert spec.config["stages"] == 2 and spec.config["tile_order"] == "q_inner"
    with pytest.raises(PorterError, match="stages"):
        spec_with_knobs(arch, "attention.hd128", {"tile_order": "q_inner", "stages": 99})


@pytest.mark.parametrize("order", ["heads_inner", "q_inner"])
@pytest.mark.parametrize("b,h,q_tiles", [(1, 3, 5), (2, 4, 7), (1, 1, 1), (3, 2, 4)])
def test_model_walk_is_the_rendered_decode_tile(order, b, h, q_tiles):
    arch = load_arch("hopper")
    spec = spec_with_knobs(arch, "attention.hd128.causal", {"tile_order": order})
    lines = _decode_lines(family.render(spec, arch))
    walk = attention_model.tile_walk(order, b * h, q_tiles)
    assert sorted(walk) == [(bh, qt) for bh in range(b * h) for qt in range(q_tiles)]   # each tile once
    for linear, expected in enumerate(walk):
        assert _run_decode(lines, b, h, q_tiles, linear) == expected, (order, linear)


def test_q_inner_walks_each_heads_q_tiles_together():
    walk = attention_model.tile_walk("q_inner", 6, 9)
    for bh in range(6):
        assert {w[0] for w in walk[bh * 9:(bh + 1) * 9]} == {bh}
    assert [w[0] for w in attention_model.tile_walk("heads_inner", 6, 9)[:6]] == list(range(6))


def test_model_follows_the_knob():
    arch = load_arch("hopper")
    fig = Figures.of(arch)
    shape = "1x3x3x1024x1024"
    for order in ("heads_inner", "q_inner"):
        spec = spec_with_knobs(arch, "attention.hd128.causal", {"tile_order": order})
        out = attention_model.model(spec, arch, fig, shape)
        bm, bn = int(spec.config["block_m"]), int(spec.config["block_n"])
        q_tiles = 1024 // bm
        expected = [min(1024 // bn, ((qt + 1) * bm - 1) // bn + 1)
                    for _, qt in attention_model.tile_walk(order, 3, q_tiles)]
        assert list(out["tile_kv"]) == expected


def test_q_inner_keeps_kv_in_l2_at_the_fa3_shape():
    # 4x16 heads x 8448 keys, hd128: heads_inner re-reads K/V past the L2 every wave
    arch = load_arch("hopper")
    fig = Figures.of(arch)
    shape = "4x16x16x8448x8448"
    kv_once = 4 * 2 * 16 * 8448 * 128 * 2
    hbm = {o: attention_model.model(spec_with_knobs(arch, "attention.hd128", {"tile_order": o}), arch, fig,
                                    shape)["hbm_bytes"] for o in ("heads_inner", "q_inner")}
    assert hbm["heads_inner"] > 5 * kv_once
    assert hbm["q_inner"] < 1.2 * kv_once + 2 * 4 * 16 * 8448 * 128 * 2 + 4 * 16 * 8448 * 4


@pytest.mark.parametrize("q_tiles,units", [(66, 132), (128, 132), (66, 148), (64, 128)])
def test_q_inner_balances_causal_units(q_tiles, units):
    # a unit takes linear u, u + units, ...; with the grid a multiple of q_tiles a plain
    # last-first walk inside each head gives unit 0 the longest tile of every head
    heads = 64
    walk = attention_model.tile_walk("q_inner", heads, q_tiles)
    load = [0] * units
    for i, (_, qt) in enumerate(walk):
        load[i % units] += qt + 1
    mean = sum(load) / units
    assert max(load) < 1.15 * mean, (max(load), mean)
    plain = [0] * units
    for i in range(heads * q_tiles):
        plain[i % units] += q_tiles - i % q_tiles
    if units % q_tiles == 0:
        assert max(plain) > 1.5 * mean       # the imbalance the rotation removes


def test_unknown_order_in_model_is_an_error():
    with pytest.raises(ValueError, match="tile_order"):
        attention_model.tile_walk("diagonal", 2, 2)
