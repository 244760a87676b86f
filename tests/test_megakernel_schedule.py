from __future__ import annotations

import copy

import networkx as nx
import numpy as np
import pytest

from porter.megakernel.checker import ScheduleError, check_program, check_schedule
from porter.megakernel.dag import build_dag
from porter.megakernel.encode import encode
from porter.megakernel.isa import Opcode, W
from porter.megakernel.latency import LatencyModel, simulate
from porter.megakernel.plan import build_plan, summary
from porter.megakernel.scheduler import list_schedule, round_robin, schedule
from porter.errors import PorterError
from porter.validation.model_config import config_from_dict, load_model_config

# The real descriptors, never a stand-in: a broken loader must fail these tests, not let
# them pass on hard-coded figures.
from porter.descriptor.arch import load_arch  # noqa: E402

HOPPER, BLACKWELL = load_arch("hopper"), load_arch("blackwell")

MID = dict(name="mid", num_layers=2, hidden_size=512, num_attention_heads=8, num_key_value_heads=2,
           head_dim=64, intermediate_size=2048, vocab_size=8192, rms_norm_eps=1e-5,
           rope_theta=10000.0, max_seq_len=256, tie_word_embeddings=True)


@pytest.fixture(scope="module")
def tiny_dag():
    return build_dag(load_model_config("tiny-gqa4"), HOPPER, pos=30)


@pytest.mark.parametrize("sched", [round_robin, list_schedule])
def test_schedulers_are_complete_and_deadlock_free(tiny_dag, sched):
    queues = sched(tiny_dag, HOPPER)
    assert len(queues) == HOPPER.sm_count
    assert sorted(n for q in queues for n in q) == sorted(tiny_dag.nodes)
    assert check_schedule(tiny_dag, queues)["instructions"] == tiny_dag.number_of_nodes()
    prog = encode(tiny_dag, queues)
    assert check_program(prog.instructions, prog.counter_targets)["instructions"] == tiny_dag.number_of_nodes()


def test_planted_circular_wait_is_rejected_with_its_cycle():
    g = nx.DiGraph([("A1", "A2"), ("B1", "B2")])
    # SM0 runs A2 (waits A1) before B1; SM1 runs B2 (waits B1) before A1: each waits on the other
    with pytest.raises(ScheduleError, match="circular wait") as err:
        check_schedule(g, [["A2", "B1"], ["B2", "A1"]])
    on_cycle = {a for a, _, _ in err.value.cycle} | {b for _, b, _ in err.value.cycle}
    assert {"A1", "A2", "B1", "B2"} <= {x if isinstance(x, str) else x[1][1] for x in on_cycle}
    check_schedule(g, [["A1", "B1"], ["A2", "B2"]])          # the same work, ordered well


def test_moving_an_instruction_behind_its_dependants_deadlocks(tiny_dag):
    queues = copy.deepcopy(list_schedule(tiny_dag, HOPPER))
    embed = 0                                  # everything depends on the embedding
    for q in queues:
        if embed in q:
            q.remove(embed)
    target = next(q for q in queues if q)
    target.append(embed)
    with pytest.raises(ScheduleError, match="circular wait.*embed") as err:
        check_schedule(tiny_dag, queues)
    assert err.value.cycle
    prog = encode(tiny_dag, queues)             # the encoded tensor is rejected as well
    with pytest.raises(ScheduleError, match="circular wait"):
        check_program(prog.instructions, prog.counter_targets)


def test_incomplete_or_duplicated_schedules_rejected(tiny_dag):
    queues = round_robin(tiny_dag, HOPPER)
    dup = copy.deepcopy(queues)
    dup[1].append(queues[0][0])
    with pytest.raises(ScheduleError, match="appears twice"):
        check_schedule(tiny_dag, dup)
    lost = copy.deepcopy(queues)
    lost[0].pop()
    with pytest.raises(ScheduleError, match="never scheduled"):
        check_schedule(tiny_dag, lost)


def test_encoded_program_checks_counter_targets(tiny_dag):
    prog = encode(tiny_dag, round_robin(tiny_dag, HOPPER))
    bad = prog.counter_targets.copy()
    bad[0] += 1
    with pytest.raises(ScheduleError, match="target"):
        check_program(prog.instructions, bad)
    ins = prog.instructions.copy()
    sm, slot = np.argwhere(ins[:, :, W.NWAIT] > 0)[0]
    ins[sm, slot, W.WAIT0 + 1] += 5
    with pytest.raises(ScheduleError, match="can never run"):
        check_program(ins, prog.counter_targets)


def test_encoding_layout(tiny_dag):
    queues = list_schedule(tiny_dag, HOPPER)
    prog = encode(tiny_dag, queues)
    n_sm, slots, words = prog.instructions.shape
    assert (n_sm, words) == (132, 32) and slots == max(len(q) for q in queues) + 1
    assert (prog.instructions[:, -1, W.OP] == Opcode.STOP).all()     # every row ends in STOP
    assert list(prog.queue_lengths()) == [len(q) for q in queues]
    assert prog.counter_targets.sum() == tiny_dag.number_of_nodes() - 0   # every instruction signals once
    offs = [t.offset for t in prog.tensors]
    assert offs == sorted(offs) and all(o % 256 == 0 for o in offs)
    assert prog.arena_bytes >= sum(t.nbytes for t in prog.tensors)
    names = {t.name for t in prog.tensors}
    assert {"buf.h", "rope.cos", "cache.k.0", "model.norm.weight"} <= names


def test_sm_count_changes_the_queues():
    cfg = config_from_dict(MID)
    ph = build_plan(HOPPER, cfg, pos=100)
    pb = build_plan(BLACKWELL, cfg, pos=100)
    assert ph["instruction_tensor"].shape[0] == 132 and pb["instruction_tensor"].shape[0] == 148
    assert ph["instructions"] != pb["instructions"]           # blocks are cut per wave of SMs
    assert pb["predicted_latency_us"] < ph["predicted_latency_us"]
    for p in (ph, pb):
        assert p["memory_floor_us"] < p["predicted_latency_us"]
        assert 0 < p["floor_ratio"] < 1
        assert p["per_sm"]["min"] <= p["per_sm"]["mean"] <= p["per_sm"]["max"]
        assert p["checks"]["program"]["instructions"] == p["instructions"]
    s = summary(ph)
    assert "program" not in s and s["instruction_tensor_shape"][0] == 132


def test_list_scheduler_beats_round_robin_on_a_skewed_dag():
    # one long chain plus many short independent jobs: critical path first wins
    g = nx.DiGraph()
    for i in range(6):
        g.add_node(f"c{i}", hbm_bytes=4_000_000, act_bytes=0)
        if i:
            g.add_edge(f"c{i-1}", f"c{i}")
    for j in range(40):
        g.add_node(f"s{j}", hbm_bytes=1_000_000, act_bytes=0)
    arch = {"sm_count": 4, "hbm_bandwidth_bytes_per_s": 1e12}
    for q in (list_schedule(g, arch), round_robin(g, arch)):
        check_schedule(g, q)
    t_list = simulate(g, list_schedule(g, arch), arch)["latency_us"]
    t_rr = simulate(g, round_robin(g, arch), arch)["latency_us"]
    assert t_list <= t_rr


def test_latency_model_single_instruction_is_analytic():
    g = nx.DiGraph()
    g.add_node(0, hbm_bytes=1_000_000, act_bytes=0)
    arch = {"sm_count": 2, "hbm_bandwidth_bytes_per_s": 1e12}
    m = LatencyModel(overhead_s=1e-6, dep_latency_s=0, hbm_efficiency=1.0, per_sm_cap_factor=1.0)
    r = simulate(g, [[0], []], arch, m)
    assert r["latency_us"] == pytest.approx(1.0 + 1e6 / 0.5e12 * 1e6)     # overhead + bytes / cap
    assert r["memory_floor_us"] == pytest.approx(1.0)


def test_unknown_scheduler(tiny_dag):
    with pytest.raises(PorterError, match="unknown"):
        schedule(tiny_dag, HOPPER, "fifo")


def test_latency_model_hides_dependency_waits_behind_weight_prefetch():
    g = nx.DiGraph([("A", "B")])
    g.add_node("A", hbm_bytes=1_000_000, act_bytes=0)
    g.add_node("B", hbm_bytes=1_000_000, act_bytes=0, prefetch_bytes=1_000_000)
    arch = {"sm_count": 2, "hbm_bandwidth_bytes_per_s": 1e12}
    base = dict(overhead_s=1e-6, dep_latency_s=0.5e-6, hbm_efficiency=1.0, per_sm_cap_factor=1.0)
    # both SMs stream 1 MB at 0.5 TB/s after 1 us of overhead: done at 3 us; B's counter
    # arrives 0.5 us later and B has nothing left to load
    with_pf = simulate(g, [["A"], ["B"]], arch, LatencyModel(**base, prefetch_weights=True))
    assert with_pf["latency_us"] == pytest.approx(3.5)
    # without prefetch B loads its weights only after the counter: 3.5 + 2
    without = simulate(g, [["A"], ["B"]], arch, LatencyModel(**base, prefetch_weights=False))
    assert without["latency_us"] == pytest.approx(5.5)


def test_compare_archs_reports_the_port():
    from porter.megakernel.plan import compare_archs
    r = compare_archs(HOPPER, BLACKWELL, config_from_dict(MID), pos=64)
    assert r["source"]["sm_count"] == 132 and r["target"]["sm_count"] == 148
    assert r["memory_floor_speedup"] == pytest.approx(7.7 / 4.8)
    assert 1.0 < r["predicted_speedup"] <= r["memory_floor_speedup"] * 1.05
