"""L0's per-warpgroup dependency chain in porter's Hopper attention (attention_model.
warpgroup_chain): S wgmma -> wait_group 1 -> softmax (under its own P V) -> wait_group 0 ->
O rescale + P pack -> barriers; ping-pong hides only what the other warpgroup's GEMMs cover."""

from __future__ import annotations

from pathlib import Path

from porter.descriptor.arch import load_arch
from porter.kernels.knobs import spec_with_knobs
from porter.timing import attention_model as am
from porter.timing.figures import Figures

def _costs(knobs: dict, fig_changes: dict | None = None) -> dict:
    arch = load_arch("hopper").for_product("H100 SXM")
    fig = Figures.of(arch)
    for k, v in (fig_changes or {}).items():
        fig = fig.with_value(k, v)
    return am.tile_costs(spec_with_knobs(arch, "attention.hd128", knobs), arch, fig)["resources"]


def test_the_chain_formula_intra_warpgroup_overlap_and_queueing():
    # S 512 cycles, done 80 later; softmax 576 runs under P V (512 more) -> the later of the two
    with_overlap = am.warpgroup_chain(512, 80, 80, 576, 96, 130)
    assert with_overlap == max(512 + 80 + 576, 2 * 512 + 80) + 96 + 130
    # FA3's ablation: P V waits for the softmax, the whole chain is serial
    without = am.warpgroup_chain(512, 80, 80, 576, 96, 130, intra_overlap=False)
    assert without == 512 + 80 + 576 + 512 + 80 + 96 + 130 > with_overlap
    # another warpgroup's GEMMs queued ahead (no turn order) lengthen it by their time
    assert am.warpgroup_chain(512, 80, 80, 576, 96, 130, turn_gemms=512) == with_overlap + 512
    # a softmax shorter than its own P V: the P V's completion sets the chain
    assert am.warpgroup_chain(512, 80, 80, 100, 0, 0) == 2 * 512 + 80


def test_fa3_like_default_hides_the_chain_and_removing_ping_pong_exposes_it():
    on, off = _costs({}), _costs({"pingpong": False})
    idle = lambda r: max(0.0, r["warpgroup chain"] - r["tensor"])     # noqa: E731
    assert on["warpgroup chain"] < on["tensor"] and idle(on) == 0.0   # ping-pong covers it
    # without the turns the softmaxes overlap on the MUFU and the P V queues behind every S
    assert off["warpgroup chain"] > on["warpgroup chain"]
    arch = load_arch("hopper").for_product("H100 SXM")
    fig = Figures.of(arch)
    gemm, lat = on["tensor"] / 4, fig["mma_latency_base_cycles"] + fig["mma_latency_per_n_cycles"] * 128
    handoff = 64 * (128 + 64) / 128
    sync_off = 2 * fig["mbarrier_cycles"] + fig["fence_cycles"]
    assert abs(off["warpgroup chain"] - (max(gemm + lat + off["mufu"] + 64, 3 * gemm + lat) + handoff + sync_off)) < 1e-6
    # one warpgroup (no other GEMMs to hide behind): its chain is its own S + softmax + P V
    one = _costs({"consumers": 1, "pingpong": False})
    assert one["warpgroup chain"] > one["tensor"]


def test_the_chain_moves_with_the_sourced_and_uncertain_figures_it_is_built_from():
    base = _costs({})["warpgroup chain"]
    fig = Figures.of(load_arch("hopper").for_product("H100 SXM"))
    # each figure moved by +10 cycles from the descriptor's own value (not a copy of it here)
    plus = {k: fig[k] + 10 for k in ("mbarrier_cycles", "named_barrier_cycles", "mma_latency_base_cycles")}
    # two mbarrier waits per K/V tile on the chain, one named barrier (the turn), one fence
    assert _costs({}, {"mbarrier_cycles": plus["mbarrier_cycles"]})["warpgroup chain"] - base == 2 * 10
    assert _costs({}, {"named_barrier_cycles": plus["named_barrier_cycles"]})["warpgroup chain"] - base == 10
    # the S wgmma's completion latency (n = block_n) sits before the softmax
    assert _costs({}, {"mma_latency_base_cycles": plus["mma_latency_base_cycles"]})["warpgroup chain"] - base == 10


def test_the_chain_follows_the_kernels_own_consumer_loop():
    # the order the chain assumes: S(n) and P V(n-1) issued together, wait_group 1 for S(n),
    # the softmax of S(n) while P V(n-1) runs, wait_group 0 at the top of the next turn
    text = (Path(__file__).resolve().parents[1] / "templates" / "attention" / "wgmma.cu.j2").read_text()
    loop = text[text.index("for (int n = 1; n < t.kv_tiles; ++n)"):]
    order = ["wgmma_wait<0>()", "rescale_o(", "pack_p(", "take_turn(", "mma_qk(", "mma_pv(", "give_turn(",
             "wgmma_wait<1>()", "online_softmax("]
    at = [loop.index(x) for x in order]
    assert at == sorted(at)


def test_the_kv_ring_formula():
    # stage n held one period + 3000 cycles, refilled in 1000: three stages need a 2000-cycle period
    assert am.kv_ring_cycles(3, 3000, 1000) == 2000
    assert am.kv_ring_cycles(2, 3000, 1000) == 4000 > am.kv_ring_cycles(3, 3000, 1000)
    assert am.kv_ring_cycles(1, 3000, 1000) == 4000          # one stage: nothing overlaps


def test_fa3_like_kv_ring_is_hidden_at_three_stages_binds_at_two_and_follows_the_copy_latency():
    on = _costs({})
    assert on["k/v ring"] < on["tensor"]                       # 3 stages: hidden, with little margin
    two = _costs({"stages": 2})
    assert two["k/v ring"] > two["tensor"] and two["k/v ring"] == max(two.values())
    # the copy's latency is on the refill: a slower TMA round trip lengthens the ring term by
    # the added cycles over the (stages - 1) periods that hide it
    arch = load_arch("hopper").for_product("H100 SXM")
    fig = Figures.of(arch)
    slow = _costs({}, {"tma_latency_ns": fig["tma_latency_ns"] + 300})
    assert abs((slow["k/v ring"] - on["k/v ring"]) - fig.ns_to_cycles(300) / 2) < 1e-6
    # the release is the last warpgroup's: its turn starts 2 x (one warpgroup's GEMM) x 1 later
    gemm = on["tensor"] / 2 / 2
    assert abs(2 * on["k/v ring"] - (2 * gemm + _release_own(on, gemm) + _refill(fig))) < 1e-6


def _refill(fig) -> float:
    kv = 2 * 128 * 128 * 2
    return 2 * fig["mbarrier_cycles"] + fig.ns_to_cycles(fig["tma_latency_ns"]) + kv / 2 / fig.l2_bytes_per_clk_per_sm


def _release_own(res: dict, gemm: float) -> float:
    # the warpgroup chain without its hand-off and sync (released right after wait_group 0)
    arch = load_arch("hopper").for_product("H100 SXM")
    fig = Figures.of(arch)
    handoff = 64 * (128 + 64) / 128
    sync = 2 * fig["mbarrier_cycles"] + fig["fence_cycles"] + fig["named_barrier_cycles"]
    return res["warpgroup chain"] - handoff - sync
