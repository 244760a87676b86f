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

Measured instruction costs (``costs``, porter.timing.megakernel_l1: the megakernel's PTX
in the simulator's timed mode): per instruction kind (``instruction_kind``) a ``fixed``
and a ``per_unit`` time. With them an instruction's step 4 lasts the longer of its stream
and ``per_unit x size`` (the SM's own work per row / position / element, which overlaps
the stream), then ``fixed`` (input staging, epilogue, barriers, signal), and step 1's
``overhead_s`` is what L1 did not see (0: the fetch is hidden by the double buffer).

The counter wake-up (``backoff``, the kernel's own constants): a waiter polls with
``ld.acquire`` round trips of ``poll_s`` - ``spin_polls`` back to back, then one per
sleep of ``backoff_min_s`` doubling to ``backoff_max_s`` (x ``sleep_scale``: the PTX ISA
lets __nanosleep last 0 to 2x its argument) - from the moment it starts waiting; a poll
issued after the producer's release (which lands half a round trip after it) returns the
count half a round trip later. Without ``backoff``, a remote producer costs
``dep_latency_s + wakeup_s`` as before.
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
    # measured costs: instruction kind -> (fixed_s, per_unit_s); None: no measured costs
    costs: dict | None = None
    # the kernel's poll schedule (see the module doc); None: dep_latency_s + wakeup_s
    backoff: dict | None = None
    poll_s: float = 0.0
    sleep_scale: float = 1.0

    @classmethod
    def from_arch(cls, arch, **overrides) -> "LatencyModel":
        """The per-instruction costs from the descriptor's perf figures (porter.timing)
        instead of the assumed constants: an instruction's fetch is an L2 read of its
        words plus the named-barrier hand-off to the compute warps and the mbarrier that
        releases its first page; the counter waits by the poll schedule of the arch's
        megakernel (its spin / back-off constants, as porter predict times them), or where
        it has none a remote producer's counter is a release through L2 and an acquire back
        (two L2 latencies) plus perf.counter_wakeup_ns."""
        from porter.timing.figures import Figures

        overrides.setdefault("backoff", kernel_backoff(arch))
        return cls.from_figures(Figures.of(arch), **overrides)

    @classmethod
    def from_figures(cls, fig, *, backoff: dict | None = None, costs: dict | None = None,
                     **overrides) -> "LatencyModel":
        """``backoff``: the kernel's spin / back-off constants (porter.timing.megakernel_l1.backoff):
        the waits are timed by their polls (an L2 round trip each) instead of
        ``counter_wakeup_ns``. ``costs``: per instruction kind (fixed_s, per_unit_s) measured in
        the timed simulator; they replace the fetch overhead built from the figures."""
        cyc = 1.0 / fig.clock_hz
        overhead = (fig["l2_latency_ns"] * 1e-9 + 2 * fig["named_barrier_cycles"] * cyc
                    + fig["mbarrier_cycles"] * cyc + fig["fence_cycles"] * cyc)
        values = {"overhead_s": overhead, "dep_latency_s": 2 * fig["l2_latency_ns"] * 1e-9,
                  "wakeup_s": fig["counter_wakeup_ns"] * 1e-9, "hbm_efficiency": fig["hbm_efficiency"]}
        if backoff is not None:
            values.update(backoff=dict(backoff), poll_s=fig["l2_latency_ns"] * 1e-9)
        if costs is not None:
            values.update(costs=dict(costs), overhead_s=0.0)
        values.update(overrides)
        return cls(**values)


IDLE, OVERHEAD, PRE, WAIT, ARRIVE, POST, TAIL = range(7)


def kernel_backoff(arch) -> dict | None:
    """The spin / back-off constants of the arch's decode megakernel (its rendered source),
    None where the arch builds none or its source has no back-off."""
    from porter.kernels import megakernel as family
    from porter.kernels.knobs import spec_with_knobs
    from porter.timing.megakernel_model import _backoff

    try:
        spec = spec_with_knobs(arch, family.spec_name(next(iter(family.MODELS))), {})
        return _backoff(arch, spec)
    except PorterError:
        return None
    except ImportError:
        # a GPU machine running prepared cubins has no generator (jinja2): the constants are
        # not templated, so its counters header gives what the rendered source would
        from porter.paths import data_dir
        from porter.timing.megakernel_l1 import backoff

        return backoff((data_dir("kernels_src") / "megakernel" / "counters.cuh").read_text())


def instruction_kind(d: dict, cfg) -> str:
    """The cost class of a DAG node: opcode, epilogue, flags and, for a matvec, its K
    (the weight's columns): instructions of one kind cost alike per row."""
    op = getattr(d["op"], "name", str(d["op"]))
    k = ""
    if op == "MATVEC":
        k = f"/k{cfg.weight_shapes()[d['tensors'][0]][1]}"
    return f"{op}/e{int(d.get('epilogue') or 0)}/f{int(d.get('flags') or 0)}{k}"


def poll_return(start: float, release: float, poll: float, b: dict, sleep_scale: float = 1.0) -> float:
    """When a waiter that began polling at ``start`` holds a count its producer released
    (issued its red.release) at ``release``: the return of its first poll issued at or
    after the release (the release and the poll's read each take half a round trip to
    and from L2, so such a poll reads the new count)."""
    if release <= start:
        return start + poll
    spin = int(b["spin_polls"])
    if spin and release <= start + (spin - 1) * poll:
        j = -(-(release - start) // poll) if poll > 0 else 0
        return start + j * poll + poll
    t = start + spin * poll                      # the back-off loop's first poll
    sleep = b["backoff_min_ns"] * 1e-9
    cap = b["backoff_max_ns"] * 1e-9
    while t < release:
        step = poll + sleep * sleep_scale
        if step <= 0:                            # no round trip, no sleep: it sees the release at once
            return release + poll
        t += step
        sleep = min(2 * sleep, cap)
    return t + poll


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
    # measured costs per node (zero without them): the work that overlaps the stream, the rest
    cfg = g.graph.get("cfg")
    var_s, fixed_s = {}, {}
    if model.costs is not None:
        for n, d in g.nodes(data=True):
            kind = instruction_kind(d, cfg)
            if kind not in model.costs:
                raise PorterError(f"latency model: no measured cost for instruction kind {kind} ({d.get('label', n)})")
            fixed, per_unit = model.costs[kind]
            fixed_s[n], var_s[n] = fixed, per_unit * (d["r1"] - d["r0"])
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
    polling = np.zeros(n_sm)             # when the SM's waits began (its polls start then)
    post_start = np.zeros(n_sm)
    busy_s = np.zeros(n_sm)
    now = 0.0
    total = g.number_of_nodes()

    def begin(sm: int) -> None:
        if head[sm] < len(queues[sm]):
            cur[sm] = queues[sm][head[sm]]
            phase[sm], t_end[sm], started[sm] = OVERHEAD, now + model.overhead_s, now

    def after_overhead(sm: int) -> None:
        phase[sm], t_end[sm], remaining[sm] = PRE, np.inf, pre_bytes[cur[sm]]
        polling[sm] = now

    def try_release(sm: int) -> None:
        """WAIT -> ARRIVE once all producers are done."""
        n = cur[sm]
        if any(group_left[k] for k in waits[n]):
            return
        if model.backoff is not None:
            # the waits in the instruction's order, each polled from when the last ended
            t = polling[sm]
            for k in waits[n]:
                t = poll_return(t, group_done[k], model.poll_s, model.backoff, model.sleep_scale)
            ready = max(now, t)
        else:
            ready = now
            for k in waits[n]:
                remote = group_sms[k] != {sm}
                ready = max(ready, group_done[k] + (model.dep_latency_s + model.wakeup_s if remote else 0.0))
        phase[sm], t_end[sm] = ARRIVE, ready

    def finish(sm: int) -> None:
        n = cur[sm]
        done_at[n] = now
        busy_s[sm] += now - started[sm]
        for k in signals[n]:
            group_left[k] -= 1
            group_done[k] = max(group_done[k], now)
        head[sm] += 1
        phase[sm], cur[sm], remaining[sm] = IDLE, None, 0.0
        begin(sm)

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
            due = ((((phase == OVERHEAD) | (phase == ARRIVE) | (phase == TAIL)) & (t_end <= now))
                   | (((phase == PRE) | (phase == POST)) & (remaining <= 1e-6)) | (phase == WAIT))
            for sm in np.flatnonzero(due).tolist():
                ph = phase[sm]
                if ph in (OVERHEAD, ARRIVE, TAIL) and t_end[sm] <= now:
                    if ph == OVERHEAD:
                        after_overhead(sm)
                    elif ph == ARRIVE:
                        phase[sm], t_end[sm], remaining[sm] = POST, np.inf, post_bytes[cur[sm]]
                        post_start[sm] = now
                    else:
                        finish(sm)
                    moved = True
                elif ph == PRE and remaining[sm] <= 1e-6:
                    phase[sm] = WAIT
                    try_release(sm)
                    moved = True
                elif ph == POST and remaining[sm] <= 1e-6:
                    n = cur[sm]
                    end = max(now, post_start[sm] + var_s.get(n, 0.0)) + fixed_s.get(n, 0.0)
                    if end > now:                # the SM's own work outlasts the stream, then its fixed part
                        phase[sm], t_end[sm] = TAIL, end
                    else:
                        finish(sm)
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
        timed = (phase == OVERHEAD) | (phase == ARRIVE) | (phase == TAIL)
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
