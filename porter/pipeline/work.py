"""Units of work that run in pool workers: one kernel build, one numerics check.

Each takes a plain payload (spec as a dict, the Arch, which pickles as its text, the
rendered source) so it runs the same in this process or in a spawned worker, writes
its artifacts atomically and returns a JSON-able summary, including how many times
it really called NVRTC (so the parent can count compiles across processes).
"""

from __future__ import annotations

import importlib
import json
import math
import time
from pathlib import Path

from porter.fsutil import atomic_write


def spec_from_dict(d: dict):
    from porter.kernels.base import KernelSpec, SassRule

    return KernelSpec(
        family=d["family"], name=d["name"], variant=d["variant"], entry=d["entry"],
        config=d["config"], features=tuple(d["features"]),
        sass_required=tuple(SassRule(p, w) for p, w in d["sass_required"]),
        sass_forbidden=tuple(SassRule(p, w) for p, w in d["sass_forbidden"]),
        threads=d["threads"], smem_bytes=d["smem_bytes"], tmem_columns=d["tmem_columns"],
        cluster=tuple(d["cluster"]), template=d.get("template", ""))


def jsonable(obj):
    """Numbers, strings, lists and dicts only (numpy scalars and arrays converted)."""
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple, set, frozenset)):
        return [jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return int(obj)
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    if hasattr(obj, "tolist"):
        return jsonable(obj.tolist())
    if hasattr(obj, "item"):
        return jsonable(obj.item())
    if hasattr(obj, "to_dict"):
        return jsonable(obj.to_dict())
    return str(obj)


def build_unit(payload: dict) -> dict:
    """Compile + disassemble + check one kernel for ``payload['arch']``; write its artifacts."""
    from porter.compile import toolchain
    from porter.kernels.build import build_kernel

    start = time.perf_counter()
    calls0 = toolchain.stats.nvrtc_calls
    spec = spec_from_dict(payload["spec"])
    arch = payload["arch"]
    try:
        build = build_kernel(spec, arch, source=payload["source"])
        error = ""
    except Exception as exc:  # a broken primitive or tool must fail this kernel, not the run
        build, error = None, f"{type(exc).__name__}: {exc}"
    result = {
        "name": spec.name, "variant": spec.variant, "family": spec.family, "target": arch.target,
        "level": int(build.level) if build else 0,
        "checks": [c.to_dict() for c in build.checks] if build else
                  [{"name": "build", "passed": False, "detail": error}],
        "compile_error": (build.compile_error if build else error),
        "resources": build.resources if build else {},
        "histogram": dict(build.histogram) if build else {},
        "spec": payload["spec"],
        "artifacts": {},
    }
    out = payload.get("out_dir")
    if out:
        out = Path(out)
        files = {f"{spec.name}.cu": payload["source"],
                 "checks.json": json.dumps(result["checks"], indent=1),
                 "resources.json": json.dumps({"resources": result["resources"],
                                               "spec": payload["spec"]}, indent=1, sort_keys=True)}
        if build and build.compiled is not None:
            files[f"{spec.name}.ptx"] = build.compiled.ptx
            files[f"{spec.name}.cubin"] = build.compiled.cubin
            files[f"{spec.name}.sass"] = build.sass
        for fname, data in files.items():
            atomic_write(out / fname, data)
            result["artifacts"][fname] = str(out / fname)
    result["nvrtc_calls"] = toolchain.stats.nvrtc_calls - calls0
    result["seconds"] = round(time.perf_counter() - start, 3)
    return result


def numerics_unit(payload: dict) -> dict:
    """The family's CPU numerics model for one spec; writes numerics.json."""
    start = time.perf_counter()
    spec = spec_from_dict(payload["spec"])
    module = importlib.import_module(payload["family_module"])
    try:
        raw = module.numerics(spec, payload["arch"])
        error = ""
    except Exception as exc:  # the reference raising is a failed check, reported as such
        raw, error = None, f"{type(exc).__name__}: {exc}"
    if error:
        passed = False
    elif raw is None:
        passed = None  # the family has no numerics model for this variant
    else:
        passed = bool(raw.get("passed")) if isinstance(raw, dict) else bool(raw)
        if not passed and isinstance(raw, dict):   # the model's own words for the failure
            error = str(raw.get("error") or raw.get("reason") or "")
    result = {"name": spec.name, "passed": passed, "error": error,
              "numerics": jsonable(raw) if raw is not None else None,
              "seconds": round(time.perf_counter() - start, 3), "artifacts": {}}
    return write_unit_json(result, payload.get("out_dir"), "numerics.json")


def write_unit_json(result: dict, out_dir, name: str) -> dict:
    """Write a unit's result as ``out_dir/name`` (when a folder is given) and list it among
    the result's artifacts, so a cache hit is reused only while the file is still there."""
    result.setdefault("artifacts", {})
    if out_dir:
        path = Path(out_dir) / name
        atomic_write(path, json.dumps(result, indent=1, sort_keys=True))
        result["artifacts"][name] = str(path)
    return result
