from __future__ import annotations

import re
from dataclasses import dataclass

import networkx as nx
import pytest
from hypothesis import given, strategies as st

from porter.errors import PorterError
from porter.megakernel.checker import ScheduleError, check_races
from porter.megakernel.dag import build_dag, dag_totals, materialize_edges, split_even
from porter.megakernel.hw import HwFigures
from porter.megakernel.isa import Epilogue, Opcode
from porter.megakernel.latency import weight_bytes_needed
from porter.validation.model_config import config_from_dict, load_model_config


@dataclass
class FakeArch:
    sm_count: int = 132
    hbm_bandwidth_bytes_per_s: float = 4.8e12


MID = dict(name="mid", num_layers=2, hidden_size=512, num_attention_heads=8, num_key_value_heads=2,
           head_dim=64, intermediate_size=2048, vocab_size=8192, rms_norm_eps=1e-5,
           rope_theta=10000.0, max_seq_len=256, tie_word_embeddings=True)


@given(n=st.integers(1, 5000), parts=st.integers(1, 400), granule=st.sampled_from([1, 2, 4, 16]))
def test_split_even_covers_exactly(n, parts, granule):
    blocks = split_even(n, parts, granule)
    assert blocks[0][0] == 0 and blocks[-1][1] == n
    assert all(a < b for a, b in blocks)
    assert all(b1 == a2 for (_, b1), (a2, _) in zip(blocks, blocks[1:]))
    assert len(blocks) <= parts
    assert all((b - a) % granule == 0 for a, b in blocks[:-1])


@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("model", ["tiny", "tiny-gqa4"])
def test_dag_is_program_ordered_and_race_free(model, fuse):
    cfg = load_model_config(model)
    g = build_dag(cfg, FakeArch(), pos=37, token=3, fuse=fuse)
    assert nx.is_directed_acyclic_graph(g)
    assert all(a < b for a, b in g.edges)
    assert check_races(g)["conflicting_pairs_ordered"] > 0
    # every weight is streamed exactly once (the embedding table: one row, unless tied)
    streamed = sum(d["hbm_bytes"] for d in g.nodes.values() if d["op"] in (Opcode.MATVEC, Opcode.EMBED))
    cache_writes = 2 * cfg.num_layers * cfg.kv_dim * 2 if fuse else 0
    norms = (2 * cfg.num_layers + 1) * cfg.hidden_size * 2      # norm weights come from L2 (act_bytes)
    tied_row = cfg.hidden_size * 2 if cfg.tie_word_embeddings else 0
    assert streamed - cache_writes == weight_bytes_needed(cfg) - norms + tied_row


def test_attention_depends_only_on_its_kv_group():
    cfg = load_model_config("tiny-gqa4")
    g = build_dag(cfg, FakeArch(), pos=40)
    for n, d in g.nodes(data=True):
        if d["op"] != Opcode.ATTN_PARTIAL:
            continue
        grp = d["ints"][1]
        preds = [g.nodes[p] for p in g.predecessors(n)]
        pattern = rf"L{d['layer']}\.[qkv]\.g{grp}\["
        assert preds and all(re.match(pattern, p["label"]) for p in preds), d["label"]
        assert {p["label"][len(f"L{d['layer']}."):][0] for p in preds} == {"q", "k", "v"}
        assert d["bytes"] > 0 and d["flops"] > 0


def test_matvec_blocks_fill_whole_waves_and_the_page_ring():
    cfg = config_from_dict(MID)
    for sm in (132, 148):
        hw = HwFigures(sm, 4.8e12)
        g = build_dag(cfg, hw, pos=10)
        gate_up = [d for d in g.nodes.values() if d["label"].startswith("L0.gate_up")]
        assert len(gate_up) % sm == 0 or len(gate_up) == cfg.intermediate_size // 4
        assert max(d["hbm_bytes"] for d in gate_up) <= hw.ring_bytes
        for d in g.nodes.values():
            if d["epilogue"] == Epilogue.ROPE:           # fused RoPE needs whole heads
                assert d["r0"] % cfg.head_dim == 0 and d["r1"] % cfg.head_dim == 0


def test_attention_splits_follow_cache_length():
    cfg = config_from_dict(MID)
    short = build_dag(cfg, FakeArch(), pos=3)
    long = build_dag(cfg, FakeArch(), pos=255)
    assert short.graph["n_splits"] == 1
    assert long.graph["n_splits"] > 4
    parts = [d for d in long.nodes.values() if d["op"] == Opcode.ATTN_PARTIAL and d["layer"] == 0]
    assert sum(d["r1"] - d["r0"] for d in parts) == 256 * cfg.num_key_value_heads


def test_edges_can_be_left_out_and_added_back():
    cfg = load_model_config("tiny")
    full = build_dag(cfg, FakeArch(), pos=5)
    lean = build_dag(cfg, FakeArch(), pos=5, edges=False)
    assert lean.number_of_edges() == 0
    assert set(materialize_edges(lean).edges) == set(full.edges)
    assert dag_totals(full)["bytes"] == dag_totals(lean)["bytes"]


def test_bad_positions_and_tokens():
    cfg = load_model_config("tiny")
    with pytest.raises(PorterError, match="outside the KV cache"):
        build_dag(cfg, FakeArch(), pos=cfg.max_seq_len)
    with pytest.raises(PorterError, match="vocabulary"):
        build_dag(cfg, FakeArch(), pos=0, token=cfg.vocab_size)
    with pytest.raises(PorterError, match="sm_count"):
        build_dag(cfg, {"sm_count": 0, "hbm_bandwidth_bytes_per_s": 1.0}, pos=0)


def test_race_checker_catches_a_missing_dependency():
    cfg = load_model_config("tiny")
    g = build_dag(cfg, FakeArch(), pos=4)
    # drop the wait of the first O-projection block on the attention output
    n = next(n for n, d in g.nodes(data=True) if d["label"].startswith("L0.o["))
    g.nodes[n]["waits"] = []
    with pytest.raises(ScheduleError, match="race on buf"):
        check_races(g)
