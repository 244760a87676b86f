"""One call for the pipeline: model + arch -> checked, encoded megakernel plan + latency estimate."""

from __future__ import annotations

import dataclasses

import numpy as np

from .checker import check_program, check_schedule
from .dag import build_dag, dag_totals
from .encode import encode
from .hw import HwFigures
from .latency import LatencyModel, simulate
from .scheduler import schedule


def default_latency_model(arch) -> tuple[LatencyModel, str]:
    """The queue simulation's per-instruction costs for ``arch``: from its descriptor's perf:
    figures (LatencyModel.from_arch: fetch = an L2 read + barrier hand-offs, a remote counter =
    two L2 latencies + the poller's wake-up) where it has them; otherwise (a bare HwFigures, a
    descriptor without perf:) the scheduler's two assumed constants. Returns (model, source)."""
    if getattr(arch, "text", None):
        from porter.errors import PorterError

        try:
            return LatencyModel.from_arch(arch), "perf: figures of the descriptor"
        except PorterError:
            pass
    return LatencyModel(), "assumed constants (no perf: figures)"


def build_plan(arch, model_cfg, pos: int = 0, scheduler: str = "list", *, token: int = 0,
               fuse: bool = True, latency_model: LatencyModel | None = None) -> dict:
    """Plan one decode step at ``pos``; ``model_cfg`` is a ModelConfig or a model name.

    Keys: arch, model, pos, scheduler, sm_count, instructions (total), per_sm (min, mean,
    max), counters, predicted_latency_us (weights prefetched ahead of the waits, as
    isa.py allows), predicted_latency_no_prefetch_us, memory_floor_us, floor_ratio,
    achieved_bandwidth_tb_s, bandwidth_fraction, hbm_bytes, weight_bytes, flops,
    checks, program (EncodedProgram: instruction tensor, counter targets, tensor
    table), dag (built with ``edges=False``: dependencies as counters, see
    ``dag.materialize_edges``), queues, latency_model_source (``default_latency_model``:
    the descriptor's perf: figures unless ``latency_model`` is given or there are none).
    """
    source = "given"
    if latency_model is None:
        latency_model, source = default_latency_model(arch)
    if isinstance(model_cfg, str):
        from porter.validation.model_config import load_model_config
        model_cfg = load_model_config(model_cfg)
    hw = HwFigures.of(arch)
    g = build_dag(model_cfg, hw, pos=pos, token=token, fuse=fuse, edges=False)
    queues = schedule(g, hw, scheduler)
    sched_check = check_schedule(g, queues)
    program = encode(g, queues)
    prog_check = check_program(program.instructions, program.counter_targets)
    lat = simulate(g, queues, hw, latency_model)
    lat_serial = simulate(g, queues, hw, dataclasses.replace(latency_model, prefetch_weights=False))
    lens = np.array([len(q) for q in queues])
    totals = dag_totals(g)
    return {
        "arch": getattr(arch, "name", None),
        "product": hw.product,
        "model": model_cfg.name,
        "pos": pos,
        "scheduler": scheduler,
        "fused": fuse,
        "sm_count": hw.sm_count,
        "ring_bytes": hw.ring_bytes,
        "instructions": int(lens.sum()),
        "per_sm": {"min": int(lens.min()), "mean": float(lens.mean()), "max": int(lens.max())},
        "counters": len(program.counter_targets),
        "attention_splits": g.graph["n_splits"],
        "predicted_latency_us": lat["latency_us"],
        "predicted_latency_no_prefetch_us": lat_serial["latency_us"],
        "memory_floor_us": lat["memory_floor_us"],
        "memory_floor_with_kv_us": lat["memory_floor_with_kv_us"],
        "floor_ratio": lat["floor_ratio"],
        "achieved_bandwidth_tb_s": lat["achieved_bandwidth_tb_s"],
        "bandwidth_fraction": lat["bandwidth_fraction"],
        "hbm_bytes": lat["hbm_bytes"],
        "weight_bytes": lat["weight_bytes"],
        "flops": totals["flops"],
        "latency_model": lat["model"],
        "latency_model_source": source,
        "checks": {"schedule": sched_check, "program": prog_check},
        "program": program,
        "instruction_tensor": program.instructions,
        "dag": g,
        "queues": queues,
    }


def summary(plan: dict) -> dict:
    """The JSON-friendly part of a plan (no arrays, graphs or programs)."""
    skip = {"program", "instruction_tensor", "dag", "queues"}
    out = {k: v for k, v in plan.items() if k not in skip}
    out["instruction_tensor_shape"] = list(plan["instruction_tensor"].shape)
    return out


def compare_archs(source_arch, target_arch, model_cfg, pos: int = 0, scheduler: str = "list") -> dict:
    """The port in numbers: the same decode step planned for two arches, side by side."""
    a = summary(build_plan(source_arch, model_cfg, pos=pos, scheduler=scheduler))
    b = summary(build_plan(target_arch, model_cfg, pos=pos, scheduler=scheduler))
    return {
        "source": a,
        "target": b,
        "predicted_speedup": a["predicted_latency_us"] / b["predicted_latency_us"],
        "memory_floor_speedup": a["memory_floor_us"] / b["memory_floor_us"],
        "floor_ratio_change": b["floor_ratio"] - a["floor_ratio"],
    }
