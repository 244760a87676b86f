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


# -- the executor seam: units on Ray (porter.tuning.engine) ---------------------------------------

# Stage kinds whose units `--executor ray` hands to Ray; the rest stay on the local pool.
EXECUTOR_STAGES = ("emulation", "prediction")


def prediction_unit(payload: dict) -> dict:
    """One kernel's predictions on every product at its standard shapes (porter.timing):
    {"rows": [...], "missing": [...]}: a family or descriptor without figures is missing."""
    from porter.errors import PorterError
    from porter.timing import standard_shapes
    from porter.timing.cache import cached_predict

    rows, missing = [], []
    try:
        spec = spec_from_dict(payload["spec"])
        for product in payload["products"]:
            for shape in standard_shapes(spec):
                rows.append(cached_predict(payload["arch"], spec, product=product, shape=shape))
    except PorterError as exc:
        text = str(exc)
        missing.append({"name": payload["spec"]["name"], "reason": text.splitlines()[0] if text else ""})
    return {"rows": rows, "missing": missing, "artifacts": {}}


def emulate_unit(payload: dict) -> dict:
    """``porter validate --device emu`` for one kernel: the simulator at the given shapes
    and seeds (optionally an edited source), its result as the local run returns it."""
    from porter.runtime.emulated import EmuDevice
    from porter.runtime.emulated_runs import emulate

    spec = spec_from_dict(payload["spec"])
    return emulate(spec, payload["arch"], shapes=payload.get("shapes"), seeds=payload.get("seeds", 2),
                   source=payload.get("source"), device=EmuDevice(time_limit=payload.get("time_limit") or 0))


def captured_unit(payload: dict) -> dict:
    """Run the unit ``payload['fn']`` with its ``out_dir`` moved to a scratch folder on the
    machine that runs it, and return its result with the files it wrote (as bytes): the
    artifacts travel back in the result, so no file system is shared with the workers."""
    import shutil
    import tempfile

    from porter.tuning.engine import call_task

    inner = dict(payload["payload"])
    scratch = tempfile.mkdtemp(prefix="porter-unit-")
    try:
        if inner.get("out_dir"):
            inner["out_dir"] = scratch
        result = call_task(payload["fn"], inner)
        files = {str(p.relative_to(scratch)): p.read_bytes() for p in Path(scratch).rglob("*") if p.is_file()}
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return {"result": result, "files": files, "scratch": scratch}


def land_captured(captured: dict, out_dir) -> dict:
    """Write a captured unit's files into ``out_dir`` (atomically) and point its artifact
    paths there; the unit's result, as if it had run here."""
    result, scratch = captured["result"], captured["scratch"]
    if out_dir:
        for rel, data in captured["files"].items():
            atomic_write(Path(out_dir) / rel, data)
    arts = result.get("artifacts") if isinstance(result, dict) else None
    if isinstance(arts, dict) and out_dir:
        result["artifacts"] = {k: str(Path(out_dir) / Path(v).relative_to(scratch)) if str(v).startswith(scratch) else v
                               for k, v in arts.items()}
    return result


def run_on_executor(executor, units: list) -> dict:
    """``(store name, key, function, payload)`` units on ``executor``: name -> result, with
    each unit's files landed in its own out_dir. A unit that fails after its retry ends
    the stage with one line naming it, as a unit raising in the local pool does."""
    from porter.errors import PorterError
    from porter.tuning.engine import Task

    tasks, by_key = [], {}
    for name, key, fn, payload in units:
        task_key = f"{name}\0{key}"
        by_key[task_key] = (name, payload)
        tasks.append(Task(key=task_key, fn="porter.pipeline.work:captured_unit", label=name,
                          payload={"fn": f"{fn.__module__}:{fn.__name__}", "payload": payload},
                          timeout_s=float(payload.get("timeout_s", 1800))))
    done = {}
    for task_key, out in executor.run(tasks).items():
        name, payload = by_key[task_key]
        if not out.ok:
            raise PorterError(f"{name}: {out.status} on {executor.name} after {out.attempts} attempts: {out.error}")
        done[name] = land_captured(out.result, payload.get("out_dir"))
    return done
