"""Proofs about a megakernel schedule: complete, satisfiable, deadlock-free, race-free.

Deadlock freedom: an SM runs its queue in order, and an instruction blocks until all
producers of each counter it waits on are done. Build the wait-for graph with an
edge ``a -> b`` when ``b`` cannot start before ``a`` finishes: consecutive
instructions of one queue, and producer -> waiter for every wait. If that graph is
acyclic every instruction eventually runs (induction over a topological order); if
it has a cycle, the instructions on it wait on each other forever. ``ScheduleError``
names the cycle.

Race freedom (``check_races``): two instructions that touch overlapping elements of
one tensor, at least one writing, must be ordered by the dependency DAG (not just by
happening to share a queue), so any valid interleaving computes the same result.
"""

from __future__ import annotations

from collections import defaultdict

import networkx as nx
import numpy as np

from porter.errors import PorterError

from .dag import dep_groups
from .isa import WORDS, Opcode, W
from .scheduler import topo_order


class ScheduleError(PorterError):
    """A schedule that could hang or is incomplete; ``cycle`` holds a circular wait if found."""

    def __init__(self, message: str, cycle: list | None = None):
        super().__init__(message)
        self.cycle = cycle or []


def find_cycle(succ: dict) -> list | None:
    """A cycle [(a, b, kind), ...] in the graph ``succ[a] = [(b, kind), ...]``, or None.

    Kahn's algorithm (linear); on failure, walk predecessors among the unsorted
    nodes until one repeats.
    """
    indeg: dict = {n: 0 for n in succ}
    for a, outs in succ.items():
        for b, _ in outs:
            indeg[b] = indeg.get(b, 0) + 1
    stack = [n for n, d in indeg.items() if d == 0]
    seen = 0
    while stack:
        a = stack.pop()
        seen += 1
        for b, _ in succ.get(a, ()):
            indeg[b] -= 1
            if indeg[b] == 0:
                stack.append(b)
    if seen == len(indeg):
        return None
    left = {n for n, d in indeg.items() if d > 0}
    pred: dict = {}
    for a, outs in succ.items():
        if a in left:
            for b, kind in outs:
                if b in left:
                    pred.setdefault(b, (a, kind))
    path, pos = [], {}
    n = next(iter(left))
    while n not in pos:
        pos[n] = len(path)
        a, kind = pred[n]
        path.append((a, n, kind))
        n = a
    cyc = path[pos[n]:]
    cyc.reverse()
    return cyc


def _cycle_text(cycle, describe) -> str:
    hops = [describe(a) for a, _, _ in cycle]
    kinds = [k for _, _, k in cycle]
    parts = [f"{h} -[{k}]-> " for h, k in zip(hops, kinds)]
    return "".join(parts) + hops[0]


def check_schedule(g: nx.DiGraph, queues: list[list[int]]) -> dict:
    """Prove ``queues`` runs every node of ``g`` exactly once without deadlock.

    Returns {"instructions", "queues", "wait_edges"}; raises ScheduleError otherwise.
    """
    seen: dict[int, tuple[int, int]] = {}
    for sm, q in enumerate(queues):
        for i, n in enumerate(q):
            if n not in g:
                raise ScheduleError(f"schedule: SM {sm} slot {i} holds unknown instruction {n!r}")
            if n in seen:
                raise ScheduleError(f"schedule: instruction {n} ({g.nodes[n].get('label', n)}) appears twice "
                                    f"(SM {seen[n][0]} slot {seen[n][1]} and SM {sm} slot {i})")
            seen[n] = (sm, i)
    missing = [n for n in g.nodes if n not in seen]
    if missing:
        labels = ", ".join(str(g.nodes[n].get("label", n)) for n in missing[:5])
        raise ScheduleError(f"schedule: {len(missing)} instruction(s) never scheduled, e.g. {labels}; "
                            f"their dependants would wait forever")
    # wait-for graph: queue order, and producer -> group -> waiter (a group node stands
    # for "all producers of this counter", which keeps the graph linear in size)
    producers, waits = dep_groups(g)
    succ: dict = {n: [] for n in g.nodes}
    for q in queues:
        for a, b in zip(q, q[1:]):
            succ[a].append((b, "then"))
    for k, ps in producers.items():
        succ[("group", k)] = []
        for p in ps:
            succ[p].append((("group", k), "signals"))
    for n, ks in waits.items():
        for k in ks:
            succ[("group", k)].append((n, "releases"))
    cyc = find_cycle(succ)
    if cyc:
        def describe(n):
            if isinstance(n, tuple) and n and n[0] == "group":
                return f"counter {n[1]}"
            sm, i = seen[n]
            return f"{g.nodes[n].get('label', n)}@SM{sm}#{i}"
        raise ScheduleError("schedule: circular wait across queues (deadlock): "
                            + _cycle_text(cyc, describe), cycle=cyc)
    n_edges = sum(len(v) for v in succ.values())
    return {"instructions": len(seen), "queues": len(queues), "wait_edges": n_edges}


def decode_queues(instructions: np.ndarray) -> list[list[tuple[int, np.ndarray]]]:
    """Per SM, the (slot, words) of each instruction before the first STOP."""
    if instructions.ndim != 3 or instructions.shape[2] != WORDS:
        raise ScheduleError(f"instruction tensor: shape {instructions.shape}, expected [sm, slots, {WORDS}]")
    out = []
    for sm in range(instructions.shape[0]):
        q = []
        for slot in range(instructions.shape[1]):
            w = instructions[sm, slot]
            if w[W.OP] == Opcode.STOP:
                break
            q.append((slot, w))
        out.append(q)
    return out


def check_program(instructions: np.ndarray, counter_targets: np.ndarray) -> dict:
    """The same proof on the encoded tensor the GPU will run (counters, not DAG edges)."""
    queues = decode_queues(instructions)
    n_counters = len(counter_targets)
    signallers: dict[int, list[tuple[int, int]]] = defaultdict(list)
    for sm, q in enumerate(queues):
        for slot, w in q:
            try:
                Opcode(int(w[W.OP]))
            except ValueError:
                raise ScheduleError(f"instruction tensor: SM {sm} slot {slot}: unknown opcode {int(w[W.OP])}") from None
            c = int(w[W.SIGNAL])
            if c >= n_counters:
                raise ScheduleError(f"instruction tensor: SM {sm} slot {slot} signals counter {c} >= {n_counters}")
            if c >= 0:
                signallers[c].append((sm, slot))
    for c in range(n_counters):
        if len(signallers[c]) != int(counter_targets[c]):
            raise ScheduleError(f"counter {c}: target {int(counter_targets[c])} but "
                                f"{len(signallers[c])} instruction(s) signal it")
    succ: dict = {("ctr", c): [] for c in range(n_counters)}
    for sm, q in enumerate(queues):
        for (s0, _), (s1, _) in zip(q, q[1:]):
            succ.setdefault((sm, s0), []).append(((sm, s1), "then"))
        for slot, w in q:
            succ.setdefault((sm, slot), [])
            c = int(w[W.SIGNAL])
            if c >= 0:
                succ[(sm, slot)].append((("ctr", c), "signals"))
            for i in range(int(w[W.NWAIT])):
                c, t = int(w[W.WAIT0 + 2 * i]), int(w[W.WAIT0 + 2 * i + 1])
                if not 0 <= c < n_counters:
                    raise ScheduleError(f"instruction tensor: SM {sm} slot {slot} waits on unknown counter {c}")
                if t > len(signallers[c]):
                    raise ScheduleError(f"instruction tensor: SM {sm} slot {slot} waits for counter {c} >= {t} "
                                        f"but only {len(signallers[c])} instruction(s) signal it: it can never run")
                if t != len(signallers[c]):
                    raise ScheduleError(f"instruction tensor: SM {sm} slot {slot} waits for {t} of the "
                                        f"{len(signallers[c])} signals of counter {c}; porter only proves "
                                        f"full-count waits")
                succ[("ctr", c)].append(((sm, slot), "releases"))
    cyc = find_cycle(succ)
    if cyc:
        def describe(n):
            return f"counter {n[1]}" if n[0] == "ctr" else f"SM{n[0]}#{n[1]}"
        raise ScheduleError("instruction tensor: circular wait across queues (deadlock): "
                            + _cycle_text(cyc, describe), cycle=cyc)
    return {"instructions": sum(len(q) for q in queues), "counters": n_counters,
            "wait_edges": sum(len(v) for v in succ.values())}


def _overlap(a: tuple, b: tuple) -> bool:
    return a[1] < b[2] and b[1] < a[2] and a[3] < b[4] and b[3] < a[4]


def check_races(g: nx.DiGraph) -> dict:
    """Every conflicting pair of accesses is ordered by the DAG; raises ScheduleError if not.

    Quadratic in the accesses per tensor: meant for test-sized models.
    """
    order = topo_order(g)
    index = {n: i for i, n in enumerate(order)}
    producers, waits = dep_groups(g)
    anc: dict = {}
    group_anc: dict = {}
    for n in order:
        bits = 0
        for k in waits[n]:
            if k not in group_anc:
                gb = 0
                for p in producers[k]:
                    gb |= anc[p] | (1 << index[p])
                group_anc[k] = gb
            bits |= group_anc[k]
        anc[n] = bits
    by_tensor: dict[str, list[tuple[int, tuple, bool]]] = defaultdict(list)
    for n, d in g.nodes(data=True):
        for r in d["reads"]:
            by_tensor[r[0]].append((n, r, False))
        for r in d["writes"]:
            by_tensor[r[0]].append((n, r, True))
    pairs = 0
    for name, acc in by_tensor.items():
        writes = [a for a in acc if a[2]]
        for wn, wr, _ in writes:
            for on, orr, is_w in acc:
                if on == wn or (is_w and index[on] < index[wn]) or not _overlap(wr, orr):
                    continue
                pairs += 1
                if not ((anc[on] >> index[wn]) & 1 or (anc[wn] >> index[on]) & 1):
                    la, lb = g.nodes[wn]["label"], g.nodes[on]["label"]
                    raise ScheduleError(f"race on {name}: {la} writes {wr[1:]} and {lb} "
                                        f"{'writes' if is_w else 'reads'} {orr[1:]} with no dependency "
                                        f"between them")
    return {"conflicting_pairs_ordered": pairs}
