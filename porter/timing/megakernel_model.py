"""The timing model for the decode megakernel: porter's per-SM queue simulation
(porter.megakernel.latency) with its per-instruction costs from the descriptor's perf
figures (LatencyModel.from_figures) instead of assumed constants.

A shape is a decode position ("1024"). The step's resources: HBM (the bytes it streams /
the sustained bandwidth), the queue simulation's result (dependency waits, fetch
overheads and HBM sharing together), and the launch. The plan (DAG and queues) depends
on the product's SM count and bandwidth only, so it is cached per (arch digest, pos).
"""

from __future__ import annotations

import functools

from porter.errors import PorterError


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


def model(spec, arch, fig, shape: str) -> dict:
    from porter.megakernel.latency import LatencyModel, simulate

    pos = parse_shape(shape)
    g, queues, hw = _plan(arch, spec.config["model"], pos)
    lat = simulate(g, queues, hw, LatencyModel.from_figures(fig))
    step_s = lat["latency_us"] * 1e-6
    hbm_s = lat["hbm_bytes"] / fig.hbm_bytes_per_s_sustained
    return {"direct": True, "time_s": step_s + fig["launch_us"] * 1e-6,
            "resources_s": {"hbm": hbm_s, "queues (waits + fetch + HBM sharing)": step_s},
            "hbm_bytes": lat["hbm_bytes"], "flops": None, "bytes_moved": lat["hbm_bytes"],
            "peak_key": "", "extra": {"memory_floor_us": lat["memory_floor_us"],
                                      "sm_busy_fraction_mean": lat["sm_busy_fraction_mean"]}}
