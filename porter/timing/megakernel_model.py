"""The timing model for the decode megakernel: porter's per-SM queue simulation
(porter.megakernel.latency) of the plan for the product.

Its per-instruction costs: at L1 (``level="L1"``) each instruction kind's cost measured by
running the megakernel's own PTX in the simulator's timed mode (porter.timing.megakernel_l1);
where L1 cannot run (no toolchain, a form the simulator lacks) and at L0, the fetch
overhead built from the descriptor's perf figures (LatencyModel.from_figures). Either way
the counter waits are timed by the kernel's own spin / back-off constants (read from its
rendered source), or by perf.counter_wakeup_ns where the source has none. The output's
``extra.costs`` says which was used.

A shape is a decode position ("1024"). The step's resources: HBM (the bytes it streams /
the sustained bandwidth), the queue simulation's result (dependency waits, fetch
overheads and HBM sharing together), and the launch. The plan (DAG and queues) depends
on the product's SM count and bandwidth only, so it is cached per (arch digest, pos).
"""

from __future__ import annotations

import functools

from porter.errors import PorterError

LEVELS = ("L0", "L1")          # the model itself takes the level (it has no tiles for L1 to time) and the range's end
# __nanosleep lasts between 0 and twice its argument (PTX ISA, "nanosleep"): the range's ends
SLEEP_SCALE_RANGE = (0.0, 2.0)


def parse_shape(shape: str) -> int:
    try:
        pos = int(shape)
    except ValueError:
        pos = -1
    if pos < 0:
        raise PorterError(f"shape '{shape}': a megakernel shape is a decode position, e.g. 1024")
    return pos


@functools.lru_cache(maxsize=16)
def _plan(arch, model: str, pos: int):
    from porter.megakernel.dag import build_dag
    from porter.megakernel.hw import HwFigures
    from porter.megakernel.scheduler import schedule
    from porter.validation.model_config import load_model_config

    cfg = load_model_config(model)
    hw = HwFigures.of(arch)
    g = build_dag(cfg, hw, pos=pos, edges=False)
    return g, schedule(g, hw, "list"), hw


_BACKOFF: dict = {}


def _backoff(arch, spec):
    """The kernel's spin / back-off constants from its rendered source (None: it has none)."""
    import json

    from porter.kernels import family_module

    from .cache import _spec_dict
    from .megakernel_l1 import backoff

    key = (arch.digest, json.dumps(_spec_dict(spec), sort_keys=True, default=str))
    if key not in _BACKOFF:
        _BACKOFF[key] = backoff(family_module(spec.family).render(spec, arch))
    return _BACKOFF[key]


def instruction_costs(spec, arch, fig, pos: int) -> tuple[dict | None, str]:
    """(kind -> (fixed_s, per_unit_s), what was used): L1's timed run of the kernel's PTX,
    or (None, the reason) where it cannot run."""
    from porter.emu.errors import Unsupported

    from .megakernel_l1 import measure

    try:
        m = measure(spec, arch, fig, pos)
    except (PorterError, Unsupported, OSError) as exc:
        return None, f"perf: figures (L1 could not run: {str(exc).splitlines()[0][:160]})"
    clock = fig.clock_hz
    costs = {k: (v["fixed_cycles"] / clock, v["per_unit_cycles"] / clock) for k, v in m["kinds"].items()}
    return costs, (f"L1: timed simulation of the megakernel's PTX ({len(costs)} instruction kinds, "
                   f"reduced model {m['reduced_model']['name']} at position {m['reduced_model']['pos']})")


def model(spec, arch, fig, shape: str, level: str = "L0", end: str | None = None) -> dict:
    """``end``: "fast" / "slow" puts the model's own uncertain term (the sleep's length) at
    that end, as porter.timing.predict puts the figures' for the range."""
    from porter.megakernel.latency import LatencyModel, simulate

    pos = parse_shape(shape)
    g, queues, hw = _plan(arch, spec.config["model"], pos)
    costs, source = (None, "perf: figures (L0)")
    if level == "L1":
        costs, source = instruction_costs(spec, arch, fig, pos)
    backoff = _backoff(arch, spec)
    wake = ("the kernel's spin / back-off ({spin_polls} polls, then {backoff_min_ns}-{backoff_max_ns} ns sleeps)"
            .format(**backoff) if backoff else "perf.counter_wakeup_ns (the kernel's source names no back-off)")
    scale = {"fast": SLEEP_SCALE_RANGE[0], "slow": SLEEP_SCALE_RANGE[1]}.get(end, 1.0)
    lat = simulate(g, queues, hw, LatencyModel.from_figures(fig, backoff=backoff, costs=costs, sleep_scale=scale))
    step_s = lat["latency_us"] * 1e-6
    hbm_s = lat["hbm_bytes"] / fig.hbm_bytes_per_s_sustained
    resources = {"hbm": hbm_s, "queues (waits + fetch + HBM sharing)": step_s}
    if costs:
        # the busiest SM's own work as L1 timed it, no waits: what the queues cannot beat. L1's
        # per-row cost includes the SM's own weight stream through its TMA window (its pages
        # in flight over their latency), so this is the SM's instructions and its stream, not
        # instruction issue alone
        from porter.megakernel.latency import instruction_kind

        cfg = g.graph["cfg"]
        work = []
        for q in queues:
            total = 0.0
            for n in q:
                d = g.nodes[n]
                fixed, per_unit = costs[instruction_kind(d, cfg)]
                total += fixed + per_unit * (d["r1"] - d["r0"])
            work.append(total)
        resources["SM work + its stream (L1 costs)"] = max(work)
    return {"direct": True, "time_s": step_s + fig["launch_us"] * 1e-6, "level": "L1" if costs else "L0",
            "resources_s": resources,
            "hbm_bytes": lat["hbm_bytes"], "flops": None, "bytes_moved": lat["hbm_bytes"],
            "peak_key": "", "extra": {"memory_floor_us": lat["memory_floor_us"],
                                      "sm_busy_fraction_mean": lat["sm_busy_fraction_mean"],
                                      "costs": source, "wake_up": wake}}
