"""L1 of porter's timing model: the per-tile period measured by running the kernel in the
simulator's timed mode (porter.emu.timed) on a reduced problem, one worker (one SM, two
for a CTA pair or cluster) walking a few tiles, instead of L0's period from the
configuration. L2 (porter.timing.schedule) extrapolates it the same way.

Four timed runs of the kernel's own harness (its inputs, checks and tolerances: the
functional results are checked as in any emulation), 2 and 3 tiles at ``s`` and ``2s``
steps (a step is a GEMM tile's K block, an attention Q tile's K/V tile), give a tile's
period at each step count (3 tiles minus 2: the prologue and the last epilogue cancel),
the period's slope per step, and the prologue; a full shape's tile period is the longer
run's period extrapolated along the slope. Every parameter is the
descriptor's perf: figure (``params``); the SASS expansion comes from the kernel's own
disassembly (``expansion``). Its figures are predicted by porter's timing model, not
measured on a GPU.
"""

from __future__ import annotations

import json
import time

from porter.errors import PorterError

TILES = (2, 3)
# a unit busy this fraction of the longest run's cycles binds it; below, latency does
BUSY_BOUND = 0.8


def params(fig) -> dict:
    """The timed mode's parameters from the descriptor's perf: figures (``Figures``)."""
    v = fig.values
    need = ("smem_latency_cycles", "mufu_latency_cycles")
    missing = [k for k in need if k not in v]
    if missing:
        raise PorterError(f"perf: L1 needs {', '.join('perf.' + k for k in missing)} in the descriptor "
                          "(the simulator's timed mode reads them)")
    p = {k: v[k] for k in ("alu_latency_cycles", "smem_bytes_per_clk_per_sm", "smem_banks", "smem_latency_cycles",
                           "mma_flop_per_clk_per_sm", "mma_latency_base_cycles", "mma_latency_per_n_cycles",
                           "mufu_ex2_per_clk_per_sm", "mufu_latency_cycles", "mbarrier_cycles",
                           "named_barrier_cycles", "fence_cycles", "cluster_barrier_cycles")}
    p["mma_flop_per_clk_per_sm"] = dict(p["mma_flop_per_clk_per_sm"])
    p.update(schedulers=int(v["issue_per_clk_per_sm"]), l2_bytes_per_clk_per_sm=fig.l2_bytes_per_clk_per_sm,
             l2_latency_cycles=fig.ns_to_cycles(v["l2_latency_ns"]),
             tma_inflight_bytes=v["tma_inflight_kib"] * 1024.0,
             tma_latency_cycles=fig.ns_to_cycles(v["tma_latency_ns"]))
    for k in ("tmem_latency_cycles", "tmem_bytes_per_clk_per_sm"):
        if k in v:
            p[k] = v[k]
    return p


def expansion(spec, arch) -> dict:
    """SASS per PTX instruction per class, from porter's build of the kernel (its .sass
    against its .ptx, the descriptor's sass_ops patterns): {} without a toolchain."""
    import re

    from porter.compile import sass as sasslib
    from porter.emu import ptx as ptxlib
    from porter.emu.timed.expansion import ptx_class, table
    from porter.kernels.build import build_kernel

    build = build_kernel(spec, arch)
    if build.compiled is None or not build.sass:
        return {}
    hist = sasslib.opcode_histogram(build.sass, spec.entry) or sasslib.opcode_histogram(build.sass)
    module = ptxlib.parse(build.compiled.ptx, f"{spec.name}.ptx")
    ptx_counts: dict = {}
    for ins in module.kernels[spec.entry].code:
        c = ptx_class(ins.parts)
        if c:
            ptx_counts[c] = ptx_counts.get(c, 0) + 1
    sass_counts: dict = {}
    for cls in ptx_counts:
        pats = [re.compile(p) for p in (arch.sass_ops.get(cls) or ())]
        if pats:
            sass_counts[cls] = sum(n for op, n in hist.items() if any(p.match(op) for p in pats))
    return table(ptx_counts, sass_counts)


def _reduced_shape(spec, tiles: int, steps: int):
    """One worker's problem of ``tiles`` tiles, each ``steps`` steps long."""
    c = spec.config
    if spec.family == "gemm":
        from porter.kernels import gemm

        um, un, uk = gemm.shape_multiples(spec)
        kb = max(uk, int(c.get("tile_k", uk)))
        return (tiles * um, un, steps * kb)
    if spec.family == "attention":
        return (1, tiles, 1, int(c["block_m"]), steps * int(c["block_n"]))
    raise PorterError(f"L1: no reduced problem for the {spec.family} family ({spec.name}); L0 predicts it")


# In-process: the same kernel, descriptor and figures are simulated once. A product's
# figures reach the simulation only through ``params`` (and its SM count through the
# spec), so two products whose params agree share a measurement (porter tune times each
# candidate once for both).
_MEASURED: dict = {}


def _measure(arch, spec_key: str, spec, params_json: str, expansion_json: str) -> dict:
    import hashlib

    key = (hashlib.sha256(arch.text.encode("utf-8")).hexdigest(), arch.sm_count, spec_key, params_json,
           expansion_json)
    if key not in _MEASURED:
        from .cache import l1_cached       # on disk too, content-keyed: a later process reads it back

        _MEASURED[key] = l1_cached({"what": "tile-period", "key": list(key)},
                                   lambda: _simulate(arch, spec, params_json, expansion_json))
    return _MEASURED[key]


def _simulate(arch, spec, params_json: str, expansion_json: str) -> dict:
    from porter.emu.timed import timed
    from porter.runtime.emulated import EmuDevice
    from porter.runtime.emulated_runs import emulate

    p = json.loads(params_json)
    exp = json.loads(expansion_json)
    steps = max(4, int(spec.config.get("stages", 2)))
    cluster = max(1, spec.cluster[0] * spec.cluster[1] * spec.cluster[2])
    cpu = 0.0

    def run(tiles: int, steps: int) -> tuple[float, dict]:
        nonlocal cpu
        shape = _reduced_shape(spec, tiles, steps)
        t0 = time.process_time()
        with timed(p, exp) as runs:
            res = emulate(spec, arch, shapes=[shape], seeds=1, device=EmuDevice(sm_count=cluster, seed=-1))
        cpu += time.process_time() - t0
        if res["status"] != "passed":
            raise PorterError(f"L1: {spec.name} at the reduced shape {shape} did not pass in the timed simulator: "
                              f"{res['reason'] or res['status']}")
        last = max(runs, key=lambda r: r["cycles"])
        return last["cycles"], {u: max(b[u] for b in last["busy"]) for u in last["busy"][0]}

    def period(steps: int) -> tuple[float, float, dict]:
        """(the third tile's cycles, the two-tile run's cycles, units' busy cycles in the third tile)"""
        (c2, b2), (c3, b3) = run(TILES[0], steps), run(TILES[1], steps)
        return max(0.0, c3 - c2), c2, {u: max(0.0, b3[u] - b2[u]) for u in b2}

    # A tile's period is the third tile's cycles (the two-tile run's prologue and last
    # epilogue cancel); its slope per step is read between two step counts. Where a
    # double-buffered accumulator overlaps a tile's epilogue with the next mainloop, the
    # shorter tile's period hides part of its mainloop and the slope reads low: a step
    # then costs at least what each unit (tensor core, shared-memory port, ...) is busy
    # per added step, which no overlap hides.
    s1, s2 = steps, 2 * steps
    p1, _, b1 = period(s1)
    p2, c2, busy_cycles = period(s2)
    history = [(s1, p1), (s2, p2)]
    marginal = max(max(0.0, busy_cycles[u] - b1[u]) / (s2 - s1) for u in b1)
    step = max(0.0, (p2 - p1) / (s2 - s1), marginal)
    fixed = max(0.0, p2 - s2 * step)
    prologue = max(0.0, c2 - TILES[0] * p2)
    busy = {u: b / max(1.0, p2) for u, b in busy_cycles.items()}     # each unit's share of a tile
    return {"step_cycles": step, "tile_fixed_cycles": fixed, "prologue_cycles": prologue,
            "steps": [h[0] for h in history], "tile_cycles": [round(h[1], 1) for h in history],
            "cpu_seconds": cpu, "busy": busy,
            "bound": max(busy, key=busy.get) if max(busy.values()) >= BUSY_BOUND else "latency (timed)"}


def measure(spec, arch, fig) -> dict:
    """The fitted per-step, per-tile and prologue cycles of ``spec`` under ``fig``."""
    from porter.timing.cache import _spec_dict

    key = json.dumps(_spec_dict(spec), sort_keys=True, default=str)
    return _measure(arch, key, spec, json.dumps(params(fig), sort_keys=True),
                    json.dumps(expansion(spec, arch), sort_keys=True))


def apply(spec, arch, fig, shape: str, out: dict) -> dict:
    """L0's model output with its schedule's tile periods replaced by L1's."""
    from .schedule import Schedule

    m = measure(spec, arch, fig)
    sched = out["schedule"]
    if spec.family == "gemm":
        from .gemm_model import parse_shape

        k = parse_shape(shape)[2]
        kb = int(spec.config["tile_k"])
        per = m["tile_fixed_cycles"] + -(-k // kb) * m["step_cycles"]
        tiles = tuple(per for _ in sched.tile_cycles)
    else:
        lengths = out.get("tile_kv")
        if lengths is None:
            raise PorterError(f"L1: the {spec.family} model gives no K/V lengths per tile ({spec.name})")
        tiles = tuple(m["tile_fixed_cycles"] + n * m["step_cycles"] for n in lengths)
    out = dict(out)
    out["schedule"] = Schedule(sched.units, tiles, m["prologue_cycles"], 0.0)
    out.setdefault("extra", {})
    out["extra"] = {**out["extra"], "l1_step_cycles": round(m["step_cycles"], 1),
                    "l1_tile_fixed_cycles": round(m["tile_fixed_cycles"], 1),
                    "l1_prologue_cycles": round(m["prologue_cycles"], 1), "l1_bound": m["bound"],
                    "l1_busy": {u: round(b, 3) for u, b in m["busy"].items()}}
    return out
