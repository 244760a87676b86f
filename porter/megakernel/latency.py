"""Predict one decode step's latency by simulating the per-SM queues.

Model (a planning estimate, not a measurement). Each SM runs its queue in order; an
instruction goes through:

1. ``overhead_s`` (fetch, decode, set-up), using no HBM;
2. if ``prefetch_weights``: stream its weight bytes (``prefetch_bytes``) at once.
   Weights are read-only during a step, so a kernel may load them into its
   shared-memory page ring before the counters it waits on are met (isa.py allows
   this); this overlap is what lets a megakernel hide its dependency waits;
3. wait until every producer it depends on has finished, plus ``dep_latency_s`` when
   a producer ran on another SM (the counter's round trip through L2);
4. stream the rest: KV-cache and other HBM bytes, plus ``ACT_BYTES_WEIGHT * act_bytes``
   (activation vectors mostly hit L2). Without prefetch all of the weight bytes
   stream here.

All SMs streaming at one moment share HBM fairly: each gets
``min(per_sm_cap, hbm_efficiency * bandwidth / streaming SMs)`` (processor sharing),
``per_sm_cap`` = ``per_sm_cap_factor`` x an SM's fair share, since one SM alone cannot
pull the whole HBM bandwidth.

Reported beside the memory floor: the weight bytes one step must read / HBM bandwidth.
Calibration, such as it is: Llama-3.2-1B at pos 512 on H100 figures (132 SMs,
3.35 TB/s) comes out at ~79% of the floor without prefetch and ~84% with it, near
the ~78% published for a hand-written Llama-1B megakernel on an H100. Compare
arches and schedules with it; do not quote its microseconds as measurements.
"""

from __future__ import annotations

from dataclasses import dataclass

import networkx as nx
import numpy as np

from porter.errors import PorterError

from .dag import dep_groups
from .hw import HwFigures
from .scheduler import ACT_BYTES_WEIGHT, DEFAULT_DEP_LATENCY_S, DEFAULT_OVERHEAD_S


@dataclass(frozen=True)
class LatencyModel:
    overhead_s: float = DEFAULT_OVERHEAD_S
    dep_latency_s: float = DEFAULT_DEP_LATENCY_S
    hbm_efficiency: float = 0.92
    per_sm_cap_factor: float = 3.0
    prefetch_weights: bool = True
    # a waiting SM polls its counter with a backoff (NANOSLEEP): it sees a release this
    # long after it lands, on top of dep_latency_s (0 in the assumed-constant model)
    wakeup_s: float = 0.0

    @classmethod
    def from_arch(cls, arch, **overrides) -> "LatencyModel":
        """The per-instruction costs from the descriptor's perf figures (porter.timing)
        instead of the assumed constants: an instruction's fetch is an L2 read of its
        words plus the named-barrier hand-off to the compute warps and the mbarrier that
        releases its first page; a remote producer's counter is a release through L2 and
        an acquire back (two L2 latencies) plus the poller's wake-up delay."""
        from porter.timing.figures import Figures

        return cls.from_figures(Figures.of(arch), **overrides)

    @classmethod
    def from_figures(cls, fig, **overrides) -> "LatencyModel":
        cyc = 1.0 / fig.clock_hz
        overhead = (fig["l2_latency_ns"] * 1e-9 + 2 * fig["named_barrier_cycles"] * cyc
                    + fig["mbarrier_cycles"] * cyc + fig["fence_cycles"] * cyc)
        values = {"overhead_s": overhead, "dep_latency_s": 2 * fig["l2_latency_ns"] * 1e-9,
                  "wakeup_s": fig["counter_wakeup_ns"] * 1e-9, "hbm_efficiency": fig["hbm_efficiency"]}
        values.update(overrides)
        return cls(**values)


IDLE, OVERHEAD, PRE, WAIT, ARRIVE, POST = range(6)


def simulate(g: nx.DiGraph, queues: list[list[int]], arch, model: LatencyModel = LatencyModel(),
             timeline: bool = False) -> dict:
    """Simulate the queues; ``timeline=True`` adds ``finish_us`` (node -> finish time)."""
    hw = HwFigures.of(arch)
    n_sm = len(queues)
    bw = hw.hbm_bandwidth_bytes_per_s * model.hbm_efficiency
    cap = model.per_sm_cap_factor * hw.hbm_bandwidth_bytes_per_s / hw.sm_count
    where = {n: sm for sm, q in enumerate(queues) for n in q}
    pre_bytes, post_bytes = {}, {}
    for n, d in g.nodes(data=True):
        pre = d.get("prefetch_bytes", 0) if model.prefetch_weights else 0
        pre_bytes[n] = pre
        post_bytes[n] = d["hbm_bytes"] - pre + ACT_BYTES_WEIGHT * d["act_bytes"]
    producers, waits = dep_groups(g)
    group_left = {k: len(ps) for k, ps in producers.items()}
    group_done = {k: 0.0 for k in producers}
    group_sms = {k: {where[p] for p in ps} for k, ps in producers.items()}
    signals: dict = {n: [] for n in g.nodes}
    for k, ps in producers.items():
        for p in ps:
            signals[p].append(k)
    head = [0] * n_sm
    done_at: dict = {}
    phase = np.full(n_sm, IDLE, dtype=np.int8)
    t_end = np.full(n_sm, np.inf)       # OVERHEAD and ARRIVE end at a time
    remaining = np.zeros(n_sm)          # PRE and POST end when their bytes are streamed
    cur = [None] * n_sm
    started = np.zeros(n_sm)
    busy_s = np.zeros(n_sm)
    now = 0.0
    total = g.number_of_nodes()

    def begin(sm: int) -> None:
        if head[sm] < len(queues[sm]):
            cur[sm] = queues[sm][head[sm]]
            phase[sm], t_end[sm], started[sm] = OVERHEAD, now + model.overhead_s, now

    def after_overhead(sm: int) -> None:
        phase[sm], t_end[sm], remaining[sm] = PRE, np.inf, pre_bytes[cur[sm]]

    def try_release(sm: int) -> None:
        """WAIT -> ARRIVE once all producers are done."""
        n = cur[sm]
        ready = now
        for k in waits[n]:
            if group_left[k]:
                return
            remote = group_sms[k] != {sm}
            ready = max(ready, group_done[k] + (model.dep_latency_s + model.wakeup_s if remote else 0.0))
        phase[sm], t_end[sm] = ARRIVE, ready

    for sm in range(n_sm):
        begin(sm)
    while len(done_at) < total:
        # zero-length phases advance without time passing
        moved = True
        while moved:
            moved = False
            # only SMs whose phase can end now do anything in a pass (a timed phase that is
            # due, a stream that is drained, a wait): the others are skipped in numpy, not
            # visited one by one; the order within a pass is the SM order as before
            due = ((((phase == OVERHEAD) | (phase == ARRIVE)) & (t_end <= now))
                   | (((phase == PRE) | (phase == POST)) & (remaining <= 1e-6)) | (phase == WAIT))
            for sm in np.flatnonzero(due).tolist():
                ph = phase[sm]
                if ph in (OVERHEAD, ARRIVE) and t_end[sm] <= now:
                    if ph == OVERHEAD:
                        after_overhead(sm)
                    else:
                        phase[sm], t_end[sm], remaining[sm] = POST, np.inf, post_bytes[cur[sm]]
                    moved = True
                elif ph == PRE and remaining[sm] <= 1e-6:
                    phase[sm] = WAIT
                    try_release(sm)
                    moved = True
                elif ph == POST and remaining[sm] <= 1e-6:
                    n = cur[sm]
                    done_at[n] = now
                    busy_s[sm] += now - started[sm]
                    for k in signals[n]:
                        group_left[k] -= 1
                        group_done[k] = max(group_done[k], now)
                    head[sm] += 1
                    phase[sm], cur[sm], remaining[sm] = IDLE, None, 0.0
                    begin(sm)
                    moved = True
                elif ph == WAIT:
                    try_release(sm)
                    moved = moved or phase[sm] != WAIT
        if len(done_at) >= total:
            break
        streaming = (phase == PRE) | (phase == POST)
        n_stream = int(streaming.sum())
        rate = min(cap, bw / n_stream) if n_stream else 0.0
        dt = np.inf
        timed = (phase == OVERHEAD) | (phase == ARRIVE)
        if timed.any():
            dt = float(t_end[timed].min()) - now
        if n_stream:
            dt = min(dt, float(remaining[streaming].min()) / rate)
        if not np.isfinite(dt):
            blocked = [f"SM{sm}:{g.nodes[cur[sm]].get('label', cur[sm])}" for sm in range(n_sm)
                       if phase[sm] == WAIT]
            raise PorterError(f"latency model: deadlock, blocked {blocked[:5]}; run checker.check_schedule")
        now += max(dt, 0.0)
        if n_stream:
            remaining[streaming] -= rate * max(dt, 0.0)
            remaining[streaming & (remaining < rate * 1e-12 + 1e-6)] = 0.0
    latency = now
    hbm_bytes = sum(d["hbm_bytes"] for d in g.nodes.values())
    kv_bytes = sum(d["hbm_bytes"] for d in g.nodes.values() if getattr(d.get("op"), "name", "") == "ATTN_PARTIAL")
    cfg = g.graph.get("cfg")
    weight_bytes = weight_bytes_needed(cfg) if cfg is not None else hbm_bytes - kv_bytes
    floor = weight_bytes / hw.hbm_bandwidth_bytes_per_s
    out = {
        "latency_us": latency * 1e6,
        "memory_floor_us": floor * 1e6,
        "memory_floor_with_kv_us": (weight_bytes + kv_bytes) / hw.hbm_bandwidth_bytes_per_s * 1e6,
        "floor_ratio": floor / latency if latency > 0 else 0.0,
        "achieved_bandwidth_tb_s": hbm_bytes / latency / 1e12 if latency > 0 else 0.0,
        "bandwidth_fraction": hbm_bytes / latency / hw.hbm_bandwidth_bytes_per_s if latency > 0 else 0.0,
        "hbm_bytes": hbm_bytes,
        "weight_bytes": weight_bytes,
        "sm_busy_fraction_mean": float(busy_s.mean() / latency) if latency > 0 else 0.0,
        "model": dict(model.__dict__),
    }
    if timeline:
        out["finish_us"] = {n: t * 1e6 for n, t in done_at.items()}
    return out


def weight_bytes_needed(cfg) -> int:
    """Weight bytes one decode step must read: every parameter once, except that an
    untied embedding table contributes only the looked-up row."""
    total = cfg.param_count() * 2
    if not cfg.tie_word_embeddings:
        total -= (cfg.vocab_size - 1) * cfg.hidden_size * 2
    return total
