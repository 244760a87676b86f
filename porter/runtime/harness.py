"""The device-side entry points: validate a kernel on a device (a GPU, or porter's
simulator: level ``emulated``) and benchmark it on a GPU.

``validate(spec, arch, out_dir, device=...)`` and ``bench(spec, arch, out_dir)`` are what
the pipeline's device and bench stages call; ``porter validate`` and ``porter bench`` call
them too. The family-specific launches are in ``porter.runtime.device_runs``; the judging
(poison, written check, references) in ``porter.validation.device_harness``.
"""
from __future__ import annotations

def _as_spec(spec):
    from porter.kernels.base import KernelSpec

    if isinstance(spec, KernelSpec):
        return spec
    from porter.pipeline.work import spec_from_dict

    return spec_from_dict(spec)


def validate(spec, arch, out_dir=None, shapes=None, seeds: int = 2, device=None) -> dict:
    """Run ``spec`` at several shapes with fresh inputs on ``device`` (default: the CUDA
    device 0, which must have the descriptor's compute capability); judge every output.

    Returns {name, variant, spec, device, checks: [...], passed, level}: device-validated
    on a GPU, emulated on porter's simulator (a device of kind "emu").
    """
    from porter.levels import Level
    from porter.runtime.device import get_device
    from porter.runtime import device_runs

    spec = _as_spec(spec)
    dev = device if device is not None else get_device()
    if dev.kind == "cuda":
        where = device_runs.require_device(arch)
        reached = Level.DEVICE_VALIDATED
    else:
        where = {"kind": dev.kind, "name": dev.name}
        reached = Level.EMULATED
    checks = device_runs.validate_family(spec, arch, shapes, seeds, device=dev)
    passed = bool(checks) and all(c["passed"] for c in checks)
    if passed:
        level = reached
    else:
        # A failed device check establishes nothing new: report what the build itself
        # reached (the prepared manifest's record, or a cache hit here), never a level
        # this run did not check.
        from porter.runtime.cubins import level_evidence

        label = level_evidence(spec, arch)["level"]
        level = min(next(lv for lv in Level if lv.label == label), Level.SASS_CHECKED)
    result = {"name": spec.name, "variant": spec.variant, "spec": spec.to_dict(), "device": where,
              "checks": checks, "passed": passed, "level": level.label}
    _write(out_dir, "device_validation.json", result)
    return result


def bench(spec, arch, out_dir=None, shapes=None, baseline: bool = True) -> dict:
    """Time ``spec`` on device 0 beside its baseline in the same process; see device_runs."""
    from porter.levels import Level
    from porter.runtime import device_runs

    spec = _as_spec(spec)
    device = device_runs.require_device(arch)
    rows = device_runs.bench_family(spec, arch, shapes, baseline)
    result = {"name": spec.name, "variant": spec.variant, "device": device, "rows": rows,
              "level": Level.BENCHMARKED.label}
    _write(out_dir, "bench.json", result)
    return result


def _write(out_dir, name: str, data: dict) -> None:
    if out_dir is None:
        return
    import json
    from pathlib import Path

    from porter.fsutil import atomic_write
    from porter.pipeline.work import jsonable

    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    atomic_write(path / name, json.dumps(jsonable(data), indent=1))
