"""The tasks of a sweep, as pure functions of their payload (they run on Ray workers).

A payload names the products that share one build (``products``: a descriptor's products
with the same SM count generate the same specs and sources, so one legality check, one
compile, one timed simulation and one emulation serve them all); predictions come back
per product and bucket.

- ``screen``: a chunk of knob combinations: illegal ones pruned with the knobs' own reason,
  the rest predicted by L0 at every bucket's shape (the central time only, ``model.point``:
  no compile, no range: what a ranking reads).
- ``evaluate``: one candidate (one rendered source): render, compile (NVRTC), disassemble
  and check its SASS and ptxas resource usage (a configuration that spills is discarded),
  predict per product and bucket by L0 with its range. The rendered source comes back in
  the result: it is the artifact the later tasks run, so no file system is shared.
- ``l1``: one top candidate by L1: its per-tile period measured in porter's timed
  simulator on its own PTX (``porter.timing.l1``; the functional results checked as in any
  emulation), then each product and bucket's time from it (the central time).
- ``emulate``: one finalist at the family's emulation shapes in porter's simulator against
  the fp64 references (level ``emulated``, or the candidate is not eligible).

Payloads carry the Arch object (it pickles as its text and product), so a worker needs
porter installed and nothing else.
"""

from __future__ import annotations

import re

from porter.errors import PorterError


def _predictions(arch, spec, products: list, shapes: dict) -> dict:
    """product -> bucket -> the full prediction (central time and range) by L0."""
    from porter.timing import predict

    out: dict = {}
    for product in products:
        for bucket, shape in shapes.items():
            p = predict(arch, spec, product=product or None, shape=shape)
            out.setdefault(product, {})[bucket] = {
                "shape": shape, "time_us": p.time_us, "tflops": p.tflops, "gb_s": p.gb_s, "bound": p.bound,
                "low": p.low, "high": p.high, "level": p.level, "resources": dict(p.resources)}
    return out


def _points(arch, spec, products: list, shapes: dict, level: str) -> dict:
    """product -> bucket -> the central time at ``level`` (porter.tuning.model.point)."""
    from porter.tuning.model import point

    return {product: {bucket: point(arch, spec, product, shape, level) for bucket, shape in shapes.items()}
            for product in products}


_PREFIX = re.compile(r"^[^:]*: --set [^:]*: ")


def prune_reason(message: str) -> str:
    """The knobs' message without its 'KERNEL: --set k=v ...:' prefix, numbers kept: the
    reason a combination cannot work, counted across the space."""
    return _PREFIX.sub("", message.strip().splitlines()[0] if message.strip() else "illegal")


def screen(payload: dict) -> dict:
    from porter.tuning.entries import untuned

    with untuned():   # a combination is knobs over the hand-chosen configuration, whatever tuning/ holds here
        return _screen(payload)


def evaluate(payload: dict) -> dict:
    from porter.tuning.entries import untuned

    with untuned():
        return _evaluate(payload)


def emulate(payload: dict) -> dict:
    from porter.tuning.entries import untuned

    with untuned():
        return _emulate(payload)


def l1(payload: dict) -> dict:
    from porter.tuning.entries import untuned

    with untuned():
        return _l1(payload)


def _screen(payload: dict) -> dict:
    from porter.kernels.knobs import _default_spec, spec_with_knobs

    arch, kernel, products, shapes = payload["arch"], payload["kernel"], payload["products"], payload["shapes"]
    default = _default_spec(arch, kernel)
    rows = []
    for knobs in payload["combos"]:
        try:
            spec = spec_with_knobs(arch, kernel, knobs, default=default)
        except PorterError as exc:
            rows.append({"knobs": knobs, "pruned": prune_reason(str(exc))})
            continue
        try:
            pts = _points(arch, spec, products, shapes, "L0")
        except PorterError as exc:
            rows.append({"knobs": knobs, "pruned": f"timing model: {prune_reason(str(exc))}"})
            continue
        # what a ranking reads (the central time) and what progress shows (the bound)
        rows.append({"knobs": knobs, "predictions": {p: {b: {"time_us": v["time_us"], "bound": v["bound"]}
                                                          for b, v in by.items()} for p, by in pts.items()}})
    return {"rows": rows}


def _evaluate(payload: dict) -> dict:
    import time as clock

    from porter.compile import toolchain
    from porter.kernels import family_module
    from porter.kernels.build import build_kernel
    from porter.kernels.knobs import spec_with_knobs
    from porter.levels import Level

    start = clock.perf_counter()
    arch, kernel, knobs = payload["arch"], payload["kernel"], payload["knobs"]
    out = {"knobs": knobs, "status": "discarded", "reason": "", "level": "failed", "resources": {},
           "predictions": {}, "source": "", "nvrtc_calls": 0}
    calls0 = toolchain.stats.nvrtc_calls
    try:
        spec = spec_with_knobs(arch, kernel, knobs)
    except PorterError as exc:
        out.update(status="pruned", reason=prune_reason(str(exc)))
        return out
    source = family_module(spec.family).render(spec, arch)
    build = build_kernel(spec, arch, source=source)
    out["nvrtc_calls"] = toolchain.stats.nvrtc_calls - calls0
    out["level"] = build.level.label
    out["resources"] = {k: v for k, v in (build.resources or {}).items() if isinstance(v, (int, float, str))}
    failed = [c for c in build.checks if not c.passed]
    if build.compile_error:
        out["reason"] = f"compile: {build.compile_error.strip().splitlines()[0] if build.compile_error.strip() else 'failed'}"
    elif failed:
        # spills (ptxas resource usage), registers, shared memory, missing SASS: not a candidate
        out["reason"] = f"{failed[0].name}: {failed[0].detail}"
    elif build.level < Level.SASS_CHECKED:
        out["reason"] = f"reached {build.level.label} only"
    else:
        out["status"] = "built"
        out["source"] = source
        out["predictions"] = _predictions(arch, spec, payload["products"], payload["shapes"])
    out["seconds"] = round(clock.perf_counter() - start, 3)
    return out


def _l1(payload: dict) -> dict:
    """L1 of one candidate: {"status": "timed", "l1": product -> bucket -> point} or
    {"status": "failed", "reason": ...} (it did not pass in the timed simulator, or its
    family has no reduced problem to time: L0 ranks it)."""
    import time as clock

    from porter.kernels.knobs import spec_with_knobs

    start = clock.perf_counter()
    arch, kernel, knobs = payload["arch"], payload["kernel"], payload["knobs"]
    spec = spec_with_knobs(arch, kernel, knobs)
    try:
        l1 = _points(arch, spec, payload["products"], payload["shapes"], "L1")
    except PorterError as exc:
        return {"knobs": knobs, "status": "failed", "reason": prune_reason(str(exc)),
                "seconds": round(clock.perf_counter() - start, 3)}
    return {"knobs": knobs, "status": "timed", "l1": l1, "seconds": round(clock.perf_counter() - start, 3)}


def _emulate(payload: dict) -> dict:
    from porter.kernels.knobs import spec_with_knobs
    from porter.runtime.emulated_runs import emulate as run_emulation

    arch, kernel, knobs = payload["arch"], payload["kernel"], payload["knobs"]
    spec = spec_with_knobs(arch, kernel, knobs)
    r = run_emulation(spec, arch, seeds=payload.get("seeds", 1), source=payload.get("source") or None)
    return {"knobs": knobs, "status": r["status"], "passed": r["passed"], "level": r["level"],
            "reason": (r.get("reason") or "").splitlines()[0] if r.get("reason") else "",
            "checks": len(r.get("checks", [])), "seconds": r.get("seconds", 0.0),
            "warp_instructions": sum(run.get("warp_instructions", 0) for run in r.get("runs", []))}
