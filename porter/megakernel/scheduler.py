"""Assign the instructions of a megakernel DAG to per-SM queues.

A schedule is ``list[list[int]]``: ``queues[sm]`` = node ids in the order that SM runs
them. Both schedulers hand out nodes in a topological order and only append to
queues, so queue order never contradicts a dependency (``checker`` proves it).

* ``round_robin``: program order, node ``i`` of that order to SM ``i % sm_count``.
* ``list_schedule``: critical-path list scheduling. Cost of a node =
  ``bytes / (HBM bandwidth / sm_count) + overhead`` (each SM's fair share of HBM);
  priority = the longest cost path from the node to the end of the step (upward
  rank); each ready node, highest priority first, goes to the SM where it would
  finish earliest (ties: lowest SM index). "Finish" counts the counter round trip
  (``dep_latency_s``) when producers ran on other SMs, and lets the set-up and the
  weight loads overlap the wait (``prefetch``), as the latency model does.
"""

from __future__ import annotations

import heapq

import networkx as nx
import numpy as np

from porter.errors import PorterError

from .dag import dep_groups
from .hw import HwFigures

DEFAULT_OVERHEAD_S = 0.5e-6     # per-instruction fetch/decode/setup (model, not measured)
ACT_BYTES_WEIGHT = 0.25         # activation bytes mostly hit L2: count a quarter
DEFAULT_DEP_LATENCY_S = 0.5e-6  # a counter released on another SM becomes visible (model)


def node_cost_s(d: dict, hw: HwFigures, overhead_s: float = DEFAULT_OVERHEAD_S) -> float:
    share = hw.hbm_bandwidth_bytes_per_s / hw.sm_count
    return (d["hbm_bytes"] + ACT_BYTES_WEIGHT * d["act_bytes"]) / share + overhead_s


def round_robin(g: nx.DiGraph, arch) -> list[list[int]]:
    hw = HwFigures.of(arch)
    queues: list[list[int]] = [[] for _ in range(hw.sm_count)]
    for i, n in enumerate(topo_order(g)):
        queues[i % hw.sm_count].append(n)
    return queues


def topo_order(g: nx.DiGraph) -> list:
    """Program order for build_dag graphs (ids ascend along every edge), else a topological sort."""
    if "producers" in g.graph:
        return sorted(g.nodes)
    return list(nx.topological_sort(g))


def upward_rank(g: nx.DiGraph, cost: dict) -> dict:
    """Longest cost path from each node to the end of the step (inclusive)."""
    producers, waits = dep_groups(g)
    group_rank = {k: 0.0 for k in producers}       # max rank over the waiters of a group
    rank: dict = {}
    signals = {n: [] for n in g.nodes}
    for k, ps in producers.items():
        for p in ps:
            signals[p].append(k)
    for n in reversed(topo_order(g)):
        rank[n] = cost[n] + max((group_rank[k] for k in signals[n]), default=0.0)
        for k in waits[n]:
            if rank[n] > group_rank[k]:
                group_rank[k] = rank[n]
    return rank


def list_schedule(g: nx.DiGraph, arch, overhead_s: float = DEFAULT_OVERHEAD_S,
                  dep_latency_s: float = DEFAULT_DEP_LATENCY_S, prefetch: bool = True) -> list[list[int]]:
    hw = HwFigures.of(arch)
    producers, waits = dep_groups(g)
    cost = {n: node_cost_s(d, hw, overhead_s) for n, d in g.nodes(data=True)}
    share = hw.hbm_bandwidth_bytes_per_s / hw.sm_count
    # the part of each instruction that can run before its waits are met: set-up and
    # (with prefetch) loading its weights, which never change during a step
    early = {n: overhead_s + (d.get("prefetch_bytes", 0) / share if prefetch else 0.0)
             for n, d in g.nodes(data=True)}
    rank = upward_rank(g, cost)
    # a node is ready when every group it waits on is complete
    left_in_group = {k: len(ps) for k, ps in producers.items()}
    group_done_at = {k: 0.0 for k in producers}
    group_sms: dict = {k: set() for k in producers}
    waiters: dict = {k: [] for k in producers}
    missing = {n: len(set(ws)) for n, ws in waits.items()}
    for n, ws in waits.items():
        for k in set(ws):
            waiters[k].append(n)
    signals = {n: [] for n in g.nodes}
    for k, ps in producers.items():
        for p in ps:
            signals[p].append(k)
    sm_free = np.zeros(hw.sm_count)
    queues: list[list[int]] = [[] for _ in range(hw.sm_count)]
    heap = [(-rank[n], n) for n in topo_order(g) if missing[n] == 0]
    heapq.heapify(heap)
    placed = 0
    while heap:
        _, n = heapq.heappop(heap)
        # a counter set on another SM arrives dep_latency_s later than on the same SM
        ready = np.zeros(hw.sm_count)
        for k in waits[n]:
            arrive = np.full(hw.sm_count, group_done_at[k] + dep_latency_s)
            if len(group_sms[k]) == 1:          # all producers on one SM: no round trip there
                arrive[next(iter(group_sms[k]))] = group_done_at[k]
            ready = np.maximum(ready, arrive)
        finish_all = np.maximum(sm_free + early[n], ready) + (cost[n] - early[n])
        sm = int(np.argmin(finish_all))     # earliest finish; ties: lowest SM index
        finish = float(finish_all[sm])
        sm_free[sm] = finish
        queues[sm].append(n)
        placed += 1
        for k in signals[n]:
            group_done_at[k] = max(group_done_at[k], finish)
            group_sms[k].add(sm)
            left_in_group[k] -= 1
            if left_in_group[k] == 0:
                for s in waiters[k]:
                    missing[s] -= 1
                    if missing[s] == 0:
                        heapq.heappush(heap, (-rank[s], s))
    if placed != g.number_of_nodes():
        raise PorterError("megakernel dag: has a dependency cycle; it cannot be scheduled")
    return queues


SCHEDULERS = {"round_robin": round_robin, "list": list_schedule}


def schedule(g: nx.DiGraph, arch, scheduler: str = "list") -> list[list[int]]:
    try:
        fn = SCHEDULERS[scheduler]
    except KeyError:
        raise PorterError(f"megakernel scheduler {scheduler!r} unknown; use one of {sorted(SCHEDULERS)}") from None
    return fn(g, arch)
