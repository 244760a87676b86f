"""Assemble report.json's content from a run's stage results (see schema.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from porter.levels import LEGACY_LABELS, Level
from porter.report.schema import SCHEMA_MINOR, SCHEMA_VERSION

_RATIO_KEYS = ("worst_ratio", "ratio")
# Error measures a family's model may report, with the words a report uses for each.
_ERROR_KEYS = {"max_abs_err": "max abs error", "max_abs_error": "max abs error", "max_error": "max error",
               "max_err": "max error", "logits_rel_err": "relative error of the logits",
               "error": "error", "diff": "difference"}
_TOL_KEYS = ("allowed_err", "tolerance", "tol", "atol", "threshold", "bound", "logits_rtol")


def before_text(b: dict) -> str:
    """One base kernel compiled for the target, in words: "compiles", "compiles, but
    fails: shared memory: ..." (it compiled but does not fit), or "fails: <compile error>"."""
    if not b["compiled"]:
        return f"fails: {b['error']}"
    failed = b.get("checks_failed")
    if failed is None and b.get("error"):      # a report from before checks_failed was kept
        return f"compiles, but fails: {b['error']}"
    if failed:
        return "compiles, but fails: " + "; ".join(f"{c['name']}: {c['detail']}" for c in failed)
    return "compiles"


def why_unsupported(u: dict) -> str:
    """'needs fp4, tcgen05' (+ the family's reason), or the reason alone when no feature is named."""
    needs = f"needs {', '.join(u['missing'])}" if u.get("missing") else ""
    reason = u.get("reason") or ""
    restated = re.fullmatch(r"\S+ lacks (.+)", reason)
    if restated and {f.strip() for f in restated.group(1).split(",")} == set(u.get("missing") or ()):
        reason = ""   # "hopper lacks fp4" says no more than "needs fp4"
    return "; ".join(x for x in (needs, reason) if x) or "unsupported (no reason given)"


def _num(v):
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def raw_cases(numerics) -> list[dict]:
    """The per-case dicts of a family's numerics dict, whatever list it keeps them in
    (GEMM "results", attention "cases", the megakernel's VM "runs"); the dict itself
    when it is one case."""
    if not isinstance(numerics, dict):
        return []
    for key in ("results", "cases", "shapes", "checks", "runs"):
        if isinstance(numerics.get(key), list):
            return [c for c in numerics[key] if isinstance(c, dict)]
    return [numerics]


def numerics_cases(numerics) -> list[dict]:
    """Per-shape (error, tolerance) pairs from a family's numerics dict, whatever its layout:
    a normalized ratio (error / allowed, passes at <= 1) when the model gives one, else
    the max error against a numeric tolerance."""
    out = []
    for i, c in enumerate(raw_cases(numerics)):
        shape = c.get("shape") or c.get("label") or c.get("name") or c.get("order") or i
        if isinstance(shape, (list, tuple)):
            label = "x".join(str(s) for s in shape)
        elif isinstance(shape, dict):
            # Sorted: a fresh result keeps the model's key order, a cached one comes back
            # sorted (the store writes sort_keys), and the report must read the same either way.
            label = " ".join(f"{k}={v}" for k, v in sorted(shape.items()))
        else:
            label = str(shape)
        if "seed" in c:
            label += f" s{c['seed']}"
        ratio = next((_num(c[k]) for k in _RATIO_KEYS if _num(c.get(k)) is not None), None)
        if ratio is not None:
            out.append({"label": label, "error": ratio, "tolerance": 1.0, "passed": c.get("passed"),
                        "measure": "error / allowed"})
            continue
        err_key = next((k for k in _ERROR_KEYS if _num(c.get(k)) is not None), None)
        if err_key is None:
            continue
        # A case's own bound first, else the one the model states for all its cases.
        tol = next((_num(src[k]) for src in (c, numerics) for k in _TOL_KEYS if _num(src.get(k)) is not None), None)
        out.append({"label": label, "error": _num(c[err_key]), "tolerance": tol, "passed": c.get("passed"),
                    "measure": _ERROR_KEYS[err_key]})
    return out


def tolerance_note(numerics) -> str | None:
    """Why errors close to the tolerance are expected, where the model's own tolerance
    reason says its bound is the output rounding bound: a correct kernel's one legitimate
    difference from the reference is that final rounding, so it lands just under the
    bound by design (a wrong one lands far above it)."""
    cases = raw_cases(numerics)
    ratios = [_num(c.get(k)) for c in cases for k in _RATIO_KEYS if _num(c.get(k)) is not None]
    reasons = " ".join(c["reason"] for c in cases if isinstance(c.get("reason"), str))
    if not ratios or max(ratios) < 0.5 or not re.search(r"rounding bound|RNE to bf16", reasons):
        return None
    return (f"errors up to {max(ratios):.0%} of the tolerance are by design: the bound is the bf16 "
            "output rounding bound, which the final round to bf16 of a correct kernel nearly reaches; "
            "a wrong kernel lands far above it")


def resource_bars(row: dict, arch) -> list[dict]:
    res, spec = row.get("resources") or {}, row.get("spec") or {}
    bars = []
    if res:
        # A setmaxnreg kernel launches with one count and moves registers between warp
        # roles after: the bar is the launch count, and its name says what the roles get.
        cfg = spec.get("config") or {}
        bar = {"name": "registers / thread", "used": res.get("registers", 0),
               "limit": arch.max_regs_per_thread, "unit": "regs"}
        if "setmaxnreg" in (spec.get("features") or ()) and {"producer_regs", "consumer_regs"} <= set(cfg):
            bar["note"] = (f"at launch (producer {cfg['producer_regs']} / consumer {cfg['consumer_regs']} "
                           "via setmaxnreg)")
        bars.append(bar)
    if spec:
        smem = (res.get("shared_bytes", 0) if res else 0) + spec.get("smem_bytes", 0)
        bars.append({"name": "shared memory / block", "used": smem, "limit": arch.smem_per_block_bytes, "unit": "B"})
        bars.append({"name": "threads / block", "used": spec.get("threads", 0),
                     "limit": arch.max_threads_per_block, "unit": "threads"})
        if arch.tmem.columns or spec.get("tmem_columns"):
            bars.append({"name": "TMEM columns", "used": spec.get("tmem_columns", 0),
                         "limit": arch.tmem.columns, "unit": "cols"})
    return bars


def schedule_fields(raw) -> dict | None:
    """A persistent kernel's schedule on this arch (the megakernel's plan of its own model):
    queues, instructions per SM, predicted step latency against the memory floor."""
    plan = raw.get("model_plan") if isinstance(raw, dict) else None
    if not plan:
        return None
    return {"model": plan["model"], "pos": plan["pos"], "queues": plan["queues"],
            "instructions": plan["instructions"],
            "per_sm": {k: plan["per_sm"][k] for k in ("min", "mean", "max")},
            "predicted_latency_us": plan["predicted_latency_us"],
            "memory_floor_us": plan["memory_floor_us"], "floor_ratio": plan["floor_ratio"]}


# A kernel's emulation entry in report.json: always these, and what the run recorded of these
# (results cached before they were recorded lack them; the report then says "not recorded").
_EMU_FIELDS = ("status", "reason", "seconds", "runs", "note")
_EMU_RECORDED = ("shapes", "seeds", "checks_on", "sm_count", "warp_order_seed")


def build_report(ctx) -> dict:
    from porter import __version__

    arch, results = ctx.arch, ctx.results
    by_kind: dict[str, list] = {}
    for r in results.values():
        by_kind.setdefault(r.kind, []).append(r)
    numerics = {n["name"]: n for r in by_kind.get("numerics", []) for n in r.data.get("numerics", [])}
    emulation = {e["name"]: e for r in by_kind.get("emulation", []) for e in r.data.get("emulation", [])}
    device_rows = {d.get("name"): d for r in by_kind.get("device", []) for d in r.data.get("results", [])}
    bench_rows = {b.get("name"): b for r in by_kind.get("bench", []) for b in r.data.get("bench", [])}
    kernels, unsupported = [], []
    for stage in by_kind.get("kernels", []):
        unsupported += stage.data.get("unsupported", [])
        for row in stage.data.get("kernels", []):
            level = Level(row["level"])
            num = numerics.get(row["name"])
            if num and num["passed"] and level >= Level.SASS_CHECKED:
                level = Level.NUMERICS_MODEL
            emu = emulation.get(row["name"])
            if emu and emu.get("status") == "passed" and level >= Level.NUMERICS_MODEL:
                level = Level.EMULATED
            dev = device_rows.get(row["name"])
            if dev and dev.get("passed") and level >= Level.NUMERICS_MODEL:
                level = Level.DEVICE_VALIDATED
            bench = bench_rows.get(row["name"])
            if bench and level >= Level.DEVICE_VALIDATED:
                level = Level.BENCHMARKED
            failed = [{"name": c["name"], "detail": str(c["detail"])} for c in row.get("checks", []) if not c["passed"]]
            if num and num["passed"] is False:
                failed.append({"name": "numerics", "detail": num.get("error") or "outside tolerance"})
            if emu and emu.get("status") == "failed":
                failed.append({"name": "emulation", "detail": (emu.get("reason") or "").splitlines()[0]})
            kernels.append({
                "name": row["name"], "variant": row.get("variant", row["name"]), "family": row.get("family", ""),
                "target": arch.target, "level": level.label, "checks_failed": failed,
                "resources": resource_bars(row, arch),
                "numerics": None if num is None or num["numerics"] is None else
                {"passed": num["passed"], "cases": numerics_cases(num["numerics"]),
                 "note": tolerance_note(num["numerics"])},
                "schedule": schedule_fields(num["numerics"]) if num else None,
                "emulation": None if emu is None else
                # what ran: shapes, input seeds, the checks on, the emulated device (porter.report.emulation)
                {k: emu.get(k) for k in _EMU_FIELDS} | {k: emu[k] for k in _EMU_RECORDED if k in emu},
                "device": dev, "bench": bench})
    before = []
    for stage in by_kind.get("baseline", []):
        for row in stage.data.get("kernels", []):
            # A base kernel can compile for the target and still not fit it (shared memory
            # sized for the base): its failed checks travel with it, so "compiles" is never
            # said without them.
            failed = [{"name": c["name"], "detail": str(c["detail"])} for c in row.get("checks", []) if not c["passed"]]
            before.append({"name": row["name"], "variant": row.get("variant", row["name"]),
                           "compiled": row["level"] >= Level.COMPILED,
                           "error": row.get("compile_error") or next((c["detail"] for c in failed), ""),
                           "checks_failed": failed})
    dev_stage = next(iter(by_kind.get("device", [])), None)
    plan = next((r.data.get("plan") for r in by_kind.get("plan", []) if r.data.get("plan")), None)
    run = ctx.run_info
    stages = []
    for sid, r in results.items():
        st = ctx.runbook.stages[sid]
        stages.append({"id": sid, "kind": r.kind, "title": r.title, "day": st.day, "needs": list(st.needs),
                       "status": r.status, "summary": r.summary, "seconds": round(r.seconds, 3)})
    for sid, st in ctx.runbook.stages.items():  # the report stage itself, still running
        if sid not in results:
            stages.append({"id": sid, "kind": st.kind, "title": st.title, "day": st.day, "needs": list(st.needs),
                           "status": "passed", "summary": "this report", "seconds": 0.0})
    device = {"ran": bool(dev_stage and dev_stage.status == "passed"),
              "detail": dev_stage.summary if dev_stage else "no device stage in the runbook",
              # --device on found no GPU of the arch: the run already was the device run
              "required_but_absent": bool(dev_stage and dev_stage.data.get("no_device"))}
    return {
        "schema_version": SCHEMA_VERSION,
        "schema_minor": SCHEMA_MINOR,
        "porter_version": __version__,
        # path and digest (sha256 of the descriptor's bytes): which file this report is of.
        "arch": {"name": arch.name, "target": arch.target, "digest": arch.digest, "features": sorted(arch.features),
                 "products": list(getattr(arch, "products", ())),
                 # The product whose SM count, memory and peaks this run scheduled for.
                 "product": getattr(arch, "product", ""),
                 "path": str(Path(arch.path).resolve()) if getattr(arch, "path", None) else "",
                 "limits_checked": _limits_checked(arch)},
        "base": {"name": ctx.base.name, "target": ctx.base.target, "why": run.base_why}
                if ctx.base is not None else None,
        "base_why": run.base_why,
        "runbook": ctx.runbook.name,
        "device": device,
        "summary": level_summary(kernels, unsupported, device, arch),
        "run": {"seconds": round(run.seconds, 3), "nvrtc_calls": ctx.nvrtc_calls,
                "units_run": ctx.units_run, "units_cached": ctx.units_cached,
                # cache entries whose content failed its digest: discarded and rebuilt (cache_entry)
                "cache_corrupt": int(getattr(ctx, "corrupt_entries", 0))},
        "stages": stages,
        "kernels": sorted(kernels, key=lambda k: k["name"]),
        "before": sorted(before, key=lambda b: b["name"]),
        "unsupported": sorted(unsupported, key=lambda u: u["name"]),
        "plan": plan,
        # the prediction stage's rows (porter.report.prediction): predicted by porter's timing model, not measured
        "prediction": _prediction_section(by_kind),
        "other_arch_levels": _other_levels(ctx),
    }


def _prediction_section(by_kind: dict):
    from porter.report.prediction import section

    return section(by_kind)


def _limits_checked(arch) -> str:
    """How far the descriptor's limits were checked (porter.descriptor.arch.limits_check), in words."""
    try:
        from porter.descriptor.arch import limits_check

        return limits_check(arch)
    except (ImportError, AttributeError, ValueError):   # a stand-in arch without a target
        return ""


def arch_argument(arch) -> str:
    """How to name ``arch`` on the command line: its bare name when porter ships it, else its file."""
    from porter import paths

    try:
        shipped = paths.data_dir("arch") / f"{arch.name}.yaml"
    except FileNotFoundError:
        shipped = None
    path = getattr(arch, "path", None)
    if path is None or (shipped is not None and Path(path).resolve() == shipped.resolve()):
        return arch.name
    return str(path)


def level_summary(kernels: list[dict], unsupported: list, device: dict, arch) -> dict:
    """What a person needs first: the highest level reached, how many kernels reached
    each level, whether a GPU was there, and what to do next."""
    counts = {lvl.label: 0 for lvl in Level}
    for k in kernels:
        counts[k["level"]] += 1
    reached = [lvl for lvl in Level if counts[lvl.label]]
    highest = max(reached).label if reached else None
    short = [k["name"] for k in kernels if k["checks_failed"]]
    steps = []
    if short:
        steps.append(f"fix the failed checks of {', '.join(short[:4])}{' and more' if len(short) > 4 else ''} "
                     "(see 'checks failed'), then rerun: unchanged work is taken from the cache")
    if not device["ran"] and reached and max(reached) >= Level.SASS_CHECKED:
        products = ", ".join(getattr(arch, "products", ())) or f"{arch.target} GPUs"
        chosen = getattr(arch, "product", "")
        if chosen and chosen != getattr(arch, "default_product", ""):
            # A non-default product's report: its figures are what the run scheduled for.
            products = f"the {chosen}"
            arch_arg = f'{arch_argument(arch)} --product "{chosen}"'
        else:
            arch_arg = arch_argument(arch)
        if device.get("required_but_absent"):
            # This run was `--device on` and found no GPU: never suggest the command that just failed.
            steps.append(f"device validation needs one of {products}; the machine this report was made on "
                         "has none (see the device stage)")
        else:
            steps.append(f"on a machine with {'one of ' if not products.startswith('the ') else ''}{products}, "
                         f"run `porter target {arch_arg} --device on` "
                         "to reach device-validated and benchmarked")
    return {"highest_level": highest, "levels": {k: v for k, v in counts.items() if v},
            "kernels": len(kernels), "unsupported": len(unsupported),
            "device_ran": bool(device["ran"]), "next_steps": steps}


def _other_levels(ctx) -> dict:
    """Levels the base arch's kernels reached on the base itself, when a report of a
    ``porter target BASE`` run sits beside this one (build/<base>/report.json)."""
    if ctx.base is None or Path(ctx.out_dir).name != ctx.arch.name:
        # Only in the build/<arch>/ layout: a custom --out folder's parent is the
        # user's, and a report found beside it could belong to anything.
        return {}
    path = Path(ctx.out_dir).parent / ctx.base.name / "report.json"
    try:
        other = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if other.get("arch", {}).get("name") != ctx.base.name:
        return {}
    return {ctx.base.name: {k["variant"]: LEGACY_LABELS.get(k["level"], k["level"])
                            for k in other.get("kernels", [])}}
