"""L1 of porter's timing model: the per-tile period measured by running the kernel in the
simulator's timed mode (porter.emu.timed) on a reduced problem, one worker (one SM, two
for a CTA pair or cluster) walking a few tiles, instead of L0's period from the
configuration. L2 (porter.timing.schedule) extrapolates it the same way.

Three timed runs of the kernel's own harness (its inputs, checks and tolerances: the
functional results are checked as in any emulation) fit

    cycles(tiles, steps) = prologue + tiles x (fixed + steps x step)

where ``steps`` is the tile's inner length (K blocks of a GEMM tile, K/V tiles of an
attention Q tile): runs at (2, s), (3, s) and (2, 2s) give the step's period, the tile's
fixed part (its epilogue, exposed or not) and the prologue. Every parameter is the
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


def _reduced_shapes(spec, steps: int) -> list:
    """(tiles, steps, shape) of the three runs for one worker."""
    c = spec.config
    if spec.family == "gemm":
        from porter.kernels import gemm

        um, un, uk = gemm.shape_multiples(spec)
        kb = max(uk, int(c.get("tile_k", uk)))
        return [(t, s, (t * um, un, s * kb)) for t, s in ((TILES[0], steps), (TILES[1], steps), (TILES[0], 2 * steps))]
    if spec.family == "attention":
        bm, bn = int(c["block_m"]), int(c["block_n"])
        return [(t, s, (1, t, 1, bm, s * bn)) for t, s in ((TILES[0], steps), (TILES[1], steps), (TILES[0], 2 * steps))]
    raise PorterError(f"L1: no reduced problem for the {spec.family} family ({spec.name}); L0 predicts it")


_MEASURED: dict = {}     # in-process: the same kernel, product and figures are simulated once


def _measure(arch, spec_key: str, spec, params_json: str, expansion_json: str) -> dict:
    key = (arch.digest, arch.product or "", spec_key, params_json, expansion_json)
    if key not in _MEASURED:
        _MEASURED[key] = _simulate(arch, spec, params_json, expansion_json)
    return _MEASURED[key]


def _simulate(arch, spec, params_json: str, expansion_json: str) -> dict:
    from porter.emu.timed import timed
    from porter.runtime.emulated import EmuDevice
    from porter.runtime.emulated_runs import emulate

    p = json.loads(params_json)
    exp = json.loads(expansion_json)
    steps = max(4, int(spec.config.get("stages", 2)))
    cluster = max(1, spec.cluster[0] * spec.cluster[1] * spec.cluster[2])
    cycles, cpu, busies = [], 0.0, []
    for tiles, s, shape in _reduced_shapes(spec, steps):
        t0 = time.process_time()
        with timed(p, exp) as runs:
            res = emulate(spec, arch, shapes=[shape], seeds=1, device=EmuDevice(sm_count=cluster, seed=-1))
        cpu += time.process_time() - t0
        if res["status"] != "passed":
            raise PorterError(f"L1: {spec.name} at the reduced shape {shape} did not pass in the timed simulator: "
                              f"{res['reason'] or res['status']}")
        last = max(runs, key=lambda r: r["cycles"])
        cycles.append(last["cycles"])
        busies.append({u: max(b[u] for b in last["busy"]) for u in last["busy"][0]})
    t2, t3, t2k = cycles
    # each unit's share of the steady-state tile: the third tile's busy cycles over its cycles
    busy = {u: max(0.0, busies[1][u] - busies[0][u]) / max(1.0, t3 - t2) for u in busies[0]}
    step = max(0.0, (t2k - t2) / (TILES[0] * steps))
    tile = max(0.0, t3 - t2)
    fixed = max(0.0, tile - steps * step)
    prologue = max(0.0, t2 - TILES[0] * (fixed + steps * step))
    return {"step_cycles": step, "tile_fixed_cycles": fixed, "prologue_cycles": prologue, "steps": steps,
            "runs_cycles": cycles, "cpu_seconds": cpu, "busy": busy,
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
