"""The two-Q-tile form of the tcgen05 attention (knob ``q_tiles=2``, FA4's structure): two
128-row Q tiles per CTA, a softmax warpgroup per Q tile taking turns on the tensor core, a
correction warpgroup rescaling O in TMEM, P written into S's own columns (S_0, S_1, O_0,
O_1 fill the 512 columns at hd128), K and V of a stage released separately. The knob's
checks, the configuration the template and the timing model read, the simulator running
it (``emulated``), and a planted bug per new synchronisation pattern that the simulator
must catch for its planted reason."""
from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import attention, attention_tcgen05
from porter.runtime.emulated_runs import emulate

KNOBS = {"q_tiles": 2}


@pytest.fixture(scope="module")
def tc_arch():
    return load_arch("blackwell")


def _spec(arch, head_dim=128, causal=False, pair=False, **extra):
    return attention_tcgen05.make_one(arch, head_dim, causal, pair=pair, knobs={**KNOBS, **extra})


def test_q_tiles_knob_is_checked(tc_arch):
    with pytest.raises(PorterError, match=r"q_tiles=3.*legal values: 1, 2"):
        _spec(tc_arch, q_tiles=3)
    default = attention_tcgen05.make_one(tc_arch, 128, False, pair=False)
    assert default.config["cta_q_tiles"] == 1 and default.threads == 192
    assert attention_tcgen05.knobs_of(default.config)["q_tiles"] == 1


@pytest.mark.parametrize("head_dim,pair", [(128, False), (128, True), (64, False), (64, True)])
def test_two_q_tiles_fill_tmem_and_the_register_file(tc_arch, head_dim, pair):
    spec = _spec(tc_arch, head_dim, pair=pair)
    cfg = spec.config
    bn, g = cfg["block_n"], cfg["cta_group"]
    assert cfg["block_m"] == 2 * 128 * g and cfg["cta_rows"] == 128 and spec.threads == 512
    cols = cfg["tmem_columns"]
    # S_j holds P_j (its first block_n / 2 columns); O_0, O_1 after both S
    assert cols["s"] == [0, bn] and cols["p"] == 0 and cols["o"] == [2 * bn, 2 * bn + head_dim]
    assert cols["used"] == 2 * bn + 2 * head_dim <= spec.tmem_columns == 512
    regs = cfg["regs"]
    assert regs["launch"] == tc_arch.regs_per_sm // 512
    assert 128 * (regs["other"] + 2 * regs["softmax"] + regs["correction"]) <= regs["launch"] * 512
    assert regs["softmax"] >= bn + attention_tcgen05.SOFTMAX_ROW_OVERHEAD
    w = cfg["warps"]
    assert w["softmax"] == list(range(4, 12)) and w["correction"] == list(range(12, 16))
    # Q tiles, the K/V ring and the stats ring within the block's shared memory
    budget = cfg["smem_budget"]
    assert budget["q"] == 2 * cfg["q_bytes"] and spec.smem_bytes <= tc_arch.smem_per_block_bytes
    assert cfg["stats_bytes"] == 4 * 2 * attention_tcgen05.STAT_SLOTS * 128
    src = attention.render(spec, tc_arch)
    assert "constexpr int kCtaQTiles = 2;" in src and "setmaxnreg.inc.sync.aligned.u32" in src


def test_a_block_n_whose_row_does_not_fit_the_softmax_registers_is_refused(tc_arch):
    with pytest.raises(PorterError, match=r"--set block_n=192: .*S row: 192 \+ .* registers"):
        _spec(tc_arch, 64, block_n=192)
    with pytest.raises(PorterError, match=r"--set q_tiles=2: Tensor Memory: .* 768 columns"):
        _spec(tc_arch, block_n=256)


def test_timing_model_costs_the_two_q_tiles(tc_arch):
    """L0 (porter.timing.attention_model): per K/V tile an SM works 256 rows; K and V are
    loaded once for both Q tiles (the smem term per row drops), each softmax warpgroup costs
    its own rows, and the turn on the tensor core (softmax + hand-offs + its Q tile's MMAs)
    is a term of its own, as is the correction warpgroup."""
    from porter.timing import attention_model
    from porter.timing.figures import Figures

    arch = tc_arch.for_product("B200")
    fig = Figures.of(arch)
    one = attention_model.tile_costs(attention_tcgen05.make_one(arch, 128, False, pair=False), arch, fig)
    two = attention_model.tile_costs(_spec(arch), arch, fig)
    r1, r2 = one["resources"], two["resources"]
    assert r2["tensor"] == pytest.approx(2 * r1["tensor"]) and r2["mufu"] == pytest.approx(2 * r1["mufu"])
    assert r2["smem"] < 2 * r1["smem"]                    # K / V read from smem per row: less
    assert r2["l2"] == pytest.approx(r1["l2"])            # one K/V tile per step either way
    assert "softmax turn" in r2 and "correction" in r2 and "softmax turn" not in r1
    assert r2["softmax turn"] > r2["softmax"] + r2["tensor"] / 2


@pytest.mark.parametrize("head_dim,causal,pair,shape", [
    (128, True, True, (1, 2, 1, 700, 530)),       # both CTAs of the pair, both Q tiles, ragged, causal
    (64, False, False, (2, 2, 1, 300, 460)),
])
def test_two_q_tile_form_emulated_at_larger_shapes(tc_arch, head_dim, causal, pair, shape):
    spec = _spec(tc_arch, head_dim, causal, pair)
    res = emulate(spec, tc_arch, shapes=[shape], seeds=1)
    assert res["status"] == "passed", res["reason"]
    assert all(c["passed"] for c in res["checks"])


def test_two_q_tile_form_with_classic_rescale_emulated(tc_arch):
    """rescale_threshold=0: the correction warpgroup rescales O on nearly every tile, so
    its hand-off (and the softmax's release of O where no row moved) is exercised."""
    spec = _spec(tc_arch, rescale_threshold=0)
    res = emulate(spec, tc_arch, shapes=[(1, 2, 1, 300, 640)], seeds=1)
    assert res["status"] == "passed", res["reason"]


# ---- planted bugs: one per new synchronisation pattern ------------------------------------------
# (id, knobs, [(old, new)] applied to the rendered .cu (each must match exactly once), shape,
#  expected: substrings of the failure, any of which names the planted reason)
TMEM_RACE = ("TMEM hand-off race in CTA", "still writes (it has not completed", "still reads (it has not completed",
             "before that warp's tcgen05.wait::st", "without tcgen05.fence")
MUTATIONS = [
    # turn-taking: the MMA issuer waits for softmax warpgroup 0's P before either Q tile's
    # P V, so P_1 V reads P_1 while softmax warpgroup 1 may still be writing it
    ("softmax-turn-waits-the-wrong-warpgroup", {},
     [("    wait_bar(s.p_full(j, 0), it & 1u);", "    wait_bar(s.p_full(0, 0), it & 1u);"),
      ("        wait_bar(s.p_full(j, kPChunks - 1), it & 1u);", "        wait_bar(s.p_full(0, kPChunks - 1), it & 1u);")],
     (1, 1, 1, 256, 512), TMEM_RACE + ("outside tolerance",)),
    # P handed over chunk by chunk: the MMAs over the second chunk's keys are issued without
    # waiting for its p_full, so they read P columns the softmax is still writing
    ("p-second-chunk-read-before-its-hand-off", {},
     [("        wait_bar(s.p_full(j, kPChunks - 1), it & 1u);\n", "")],
     (1, 1, 1, 256, 512), TMEM_RACE + ("outside tolerance",)),
    # correction hand-off: the softmax warp releases O_j to the MMA even when one of its rows
    # moved its max, while the correction warp rescales it: the next P V and the rescale
    # meet in TMEM (at threshold 0 nearly every tile rescales)
    ("softmax-releases-o-the-correction-still-rescales", {"rescale_threshold": 0},
     [("if (n > 0 && !__any_sync(0xffffffffu, alpha != 1.f) && lane == 0) arrive_leader(s.o_ready(j));",
       "if (n > 0 && lane == 0) arrive_leader(s.o_ready(j));")],
     (1, 1, 1, 256, 512), TMEM_RACE + ("outside tolerance", "deadlock")),
    # P in S's columns: S_j(n) issued before the P V that reads P_j(n - 1) from the same
    # columns (and before softmax j handed P over): the MMA overwrites P unordered
    ("p-in-s-overwritten-before-its-p-v", {},
     [("                pv_step(s, tmem, j, it - 1, n == 1);\n                qk_step(s, tmem, j, stage);",
       "                qk_step(s, tmem, j, stage);\n                pv_step(s, tmem, j, it - 1, n == 1);")],
     (1, 1, 1, 256, 512), TMEM_RACE + ("outside tolerance",)),
    # K released after the first Q tile's Q K^T instead of the second's: the producer refills
    # the stage while S_1 = Q_1 K^T still reads it (16 K/V tiles: the refill lands inside the
    # window between the two commits in the seeded order)
    ("k-released-before-the-second-q-tile-read-it", {},
     [("    if (j == kCtaQTiles - 1) commit_bar(s.k_empty(stage));", "    if (j == 0) commit_bar(s.k_empty(stage));")],
     (1, 1, 1, 256, 2048), ("changed before the operation completed", "outside tolerance")),
]


@pytest.mark.parametrize("case", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_planted_bug_is_caught(case, tc_arch):
    _, extra, edits, shape, reasons = case
    spec = _spec(tc_arch, **extra)
    source = attention.render(spec, tc_arch)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
        source = source.replace(old, new)
    result = emulate(spec, tc_arch, shapes=[shape], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert any(r in result["reason"] for r in reasons), result["reason"]


def test_unmutated_form_passes_at_the_mutation_shapes(tc_arch):
    """Every failure above is the planted bug's: the generated kernel passes there."""
    for extra in ({}, {"rescale_threshold": 0}):
        shapes = sorted({m[3] for m in MUTATIONS if m[1] == extra})
        res = emulate(_spec(tc_arch, **extra), tc_arch, shapes=shapes, seeds=1)
        assert res["status"] == "passed", (extra, res["reason"])
