"""One function per runbook stage kind: ``fn(ctx, stage) -> StageResult``.

Expensive work (compiles, numerics models, probes) goes through the content-addressed
store, so a rerun with unchanged inputs does none of it. Each function decides its
own pass/fail from what it found; downstream stages always run, so one failing
kernel does not hide the rest of the picture.
"""

from __future__ import annotations

import re
from dataclasses import asdict, is_dataclass

from porter.levels import Level
from porter.pipeline import keys
from porter.pipeline.context import FAILED, NOT_RUN, PASSED, SKIPPED, StageResult, timed
from porter.pipeline.work import build_unit, jsonable, numerics_unit, prediction_unit
from porter.report.build import why_unsupported


def _n(count: int, noun: str) -> str:
    """'1 variant', '2 variants': summaries are read by people."""
    return f"{count} {noun}{'' if count == 1 else 's'}"


def _result(stage, status, summary, data=None) -> StageResult:
    return StageResult(stage.id, stage.kind, stage.title, status, summary, data or {})


# -- day 1: descriptor, probes, plan, before ------------------------------------------------

def descriptor_checks(arch) -> list[dict]:
    """Internal consistency of a descriptor: claims that contradict each other."""
    tc = arch.tensor_core
    checks = []

    def check(name, ok, detail):
        checks.append({"name": name, "passed": bool(ok), "detail": detail})

    for gen in ("wgmma", "tcgen05"):
        check(f"{gen} feature matches tensor_core.generation",
              arch.has(gen) == (tc.generation == gen),
              f"generation {tc.generation}, {gen} {'claimed' if arch.has(gen) else 'not claimed'}")
    check("accumulator storage matches tmem", (tc.accumulator == "tmem") == (arch.has("tmem") and arch.tmem.columns > 0),
          f"accumulator {tc.accumulator}, tmem {arch.tmem.columns} columns")
    check("per-block smem within per-SM smem", arch.smem_per_block_bytes <= arch.smem_per_sm_bytes,
          f"{arch.smem_per_block_bytes} <= {arch.smem_per_sm_bytes} B")
    if tc.generation not in ("none", ""):
        check("tensor core has MMA kinds", bool(tc.mma_shapes), ", ".join(tc.mma_shapes) or "none")
    for feat, patterns in arch.sass_signatures.items():
        check(f"signature {feat} belongs to a claimed feature", arch.has(feat),
              "claimed" if arch.has(feat) else f"{feat} has SASS signatures but is not claimed")
        for pat in patterns:
            try:
                re.compile(pat)
                ok, detail = True, pat
            except re.error as exc:
                ok, detail = False, f"{pat!r}: {exc}"
            check(f"signature {feat} is a valid regex", ok, detail)
    return checks


@timed
def run_descriptor(ctx, stage):
    arch = ctx.arch
    key = keys.digest([arch.digest, keys.code_version("descriptor")])
    name = f"stage/{stage.id}"
    checks = ctx.store.get(name, key)
    if checks is None:
        checks = descriptor_checks(arch)
        ctx.store.put(name, key, checks)
    failed = [c for c in checks if not c["passed"]]
    data = {"arch": arch.name, "target": arch.target, "digest": arch.digest,
            "features": sorted(arch.features), "checks": checks}
    if failed:
        return _result(stage, FAILED, f"{len(failed)} descriptor check(s) failed: {failed[0]['name']}: {failed[0]['detail']}", data)
    return _result(stage, PASSED, f"{arch.name} ({arch.target}): {len(checks)} checks, "
                   f"features {', '.join(sorted(arch.features))}", data)


def _probe_row(r) -> dict:
    row = asdict(r) if is_dataclass(r) else dict(vars(r))
    return jsonable(row)


@timed
def run_probes(ctx, stage):
    try:
        import importlib

        probes = importlib.import_module("porter.descriptor.probes")
        check_arch = probes.check_arch
    except (ImportError, AttributeError) as exc:
        return _result(stage, FAILED, f"porter.descriptor.probes is not available ({type(exc).__name__}: {exc}); "
                       "the descriptor's claims cannot be proved by probe compiles")
    from porter import paths

    arch = ctx.arch
    key = keys.digest([arch.digest, keys.folder_digest(paths.data_dir("kernels_src") / "probes"),
                       keys.code_version("probes"), keys.toolchain_fingerprint()])
    name = f"stage/{stage.id}"
    data = ctx.store.get(name, key)
    if data is None:
        from porter.compile import toolchain

        found = probes.discover() if hasattr(probes, "discover") else []
        # Compile the probes across the pool first: check_arch then finds every compile
        # in the toolchain cache and only judges (it compiles one after another itself).
        ctx.run_units(stage, [(f"probes/{p.path.name}", keys.digest([p.source, arch.target]), compile_unit,
                               {"source": p.source, "target": arch.target, "name": p.path.name,
                                "out": str(ctx.out_dir / "probes" / p.path.name)}) for p in found])
        before = toolchain.stats.nvrtc_calls
        check = check_arch(arch)
        ctx.nvrtc_calls += toolchain.stats.nvrtc_calls - before
        if hasattr(check, "to_dict"):           # ArchCheck: probes, features, contradictions
            data = jsonable(check.to_dict())
        else:                                   # a plain list of ProbeResult
            rows = [_probe_row(r) for r in check]
            data = {"probes": rows, "contradictions": [f"{r.get('probe')}: {r.get('verdict')}" for r in rows
                                                       if str(r.get("verdict", "")).startswith("contradicted")]}
        ctx.store.put(name, key, data)
    else:
        ctx.units_cached += 1
    bad = data.get("contradictions", [])
    counts = probe_counts(data, getattr(probes, "NOT_JUDGED", "not judged"))
    if bad:
        return _result(stage, FAILED, f"{counts}; {len(bad)} contradiction(s) of the descriptor: {bad[0]}", data)
    return _result(stage, PASSED, f"{counts}, 0 contradictions: the descriptor agrees with the compiler", data)


def probe_counts(data: dict, not_judged: str) -> str:
    """'23 probes: 15 confirmed, 2 denied-confirmed, 6 not judged', counted from the probe
    verdicts as `porter arch check` counts them (porter.commands.arch_check.summary_line),
    so the report and that command give the same numbers; a not-judged probe proves
    nothing either way, so it is never counted as agreeing."""
    verdicts = [str(p.get("verdict", "")) for p in data.get("probes", [])]
    parts = [f"{sum(v == 'confirmed' for v in verdicts)} confirmed",
             f"{sum(v == 'denied-confirmed' for v in verdicts)} denied-confirmed"]
    unjudged = sum(v.startswith(not_judged) for v in verdicts)
    if unjudged:
        parts.append(f"{unjudged} not judged")
    text = f"{_n(len(verdicts), 'probe')}: {', '.join(parts)}"
    unprobed = [f.get("feature") for f in data.get("features", []) if f.get("verdict") == "no probe"]
    return text + (f"; no probe for {', '.join(unprobed)}" if unprobed else "")


@timed
def run_plan(ctx, stage):
    if ctx.base is None:
        return _result(stage, SKIPPED, "no base arch: give --from BASE (or name 'base' in the runbook, or identity.previous in the descriptor)")
    from porter import paths
    from porter.fsutil import atomic_write
    from porter.planning.plan import porting_plan

    from porter import kernels

    # The plan reads the descriptors, the template and primitive text and the families'
    # variants: all of that keys it.
    mods = [keys.module_digest(kernels.family_module(f)) for f in sorted(kernels.FAMILIES)]
    key = keys.digest([ctx.base.digest, ctx.arch.digest, sorted(kernels.FAMILIES), mods,
                       keys.folder_digest(paths.data_dir("templates")),
                       keys.folder_digest(paths.data_dir("kernels_src")), keys.code_version("plan")])
    name = f"stage/{stage.id}"
    cached = ctx.store.get(name, key)
    if cached is None:
        plan = porting_plan(ctx.base, ctx.arch)
        cached = {"plan": plan.to_dict(), "text": plan.text()}
        ctx.store.put(name, key, cached)
    import json

    atomic_write(ctx.out_dir / "plan.txt", cached["text"] + "\n")
    atomic_write(ctx.out_dir / "plan.json", json.dumps(cached["plan"], indent=1))
    plan = cached["plan"]
    return _result(stage, PASSED, f"{ctx.base.name} -> {ctx.arch.name}: lost {', '.join(plan['lost']) or 'none'}; "
                   f"gained {', '.join(plan['gained']) or 'none'}; {_n(len(plan['items']), 'porting step')} (plan.txt)",
                   {"plan": plan})


def _build_key(spec, source: str, arch) -> str:
    return keys.digest([source, arch.target, arch.digest, keys.toolchain_fingerprint(),
                        keys.code_version("build"), spec.to_dict()])


def _render_units(ctx, families, render_arch, build_arch, prefix: str, complete: bool = False):
    """Render each family's variants for ``render_arch`` as build units for ``build_arch``;
    ``complete`` lists the kernels a family offers only elsewhere as unsupported too."""
    from porter.kernels import family_module
    from porter.kernels.base import Unsupported

    units, unsupported, failed = [], [], []
    for fam in families:
        module = family_module(fam)
        try:
            variants = ctx.variants(fam, render_arch, complete)
        except Exception as exc:
            failed.append({"name": f"{fam}.*", "family": fam, "level": 0, "checks": [
                {"name": "variants", "passed": False, "detail": f"{type(exc).__name__}: {exc}"}]})
            continue
        for spec in variants:
            if isinstance(spec, Unsupported):
                unsupported.append(spec.to_dict())
                continue
            try:
                source = module.render(spec, render_arch)
            except Exception as exc:
                failed.append({"name": spec.name, "variant": spec.variant, "family": fam, "level": 0,
                               "spec": spec.to_dict(), "checks": [
                                   {"name": "render", "passed": False, "detail": f"{type(exc).__name__}: {exc}"}]})
                continue
            payload = {"spec": spec.to_dict(), "arch": build_arch, "source": source,
                       "out_dir": str(ctx.out_dir / prefix / spec.name)}
            units.append((f"{prefix}/{spec.name}", _build_key(spec, source, build_arch), build_unit, payload))
    return units, unsupported, failed


@timed
def run_baseline(ctx, stage):
    if ctx.base is None:
        return _result(stage, SKIPPED, "no base arch: give --from BASE (or name 'base' in the runbook, or identity.previous in the descriptor)")
    from porter import kernels

    fams = sorted(kernels.FAMILIES)
    key = _kernels_key(ctx, stage, fams, ctx.base, ctx.arch)
    return ctx.cached_stage(stage, key, lambda: _baseline(ctx, stage, fams))


def _baseline(ctx, stage, fams):
    units, unsupported, failed = _render_units(ctx, fams, ctx.base, ctx.arch, "before")
    done = ctx.run_units(stage, units)
    # By name, not by completion order: the "e.g." below must not depend on which compile finished first.
    rows = sorted([_slim(r) for r in done.values()], key=lambda r: r["name"]) + failed
    data = {"base": ctx.base.name, "target": ctx.arch.target, "kernels": rows, "unsupported": unsupported}
    if failed:
        return _result(stage, FAILED, f"{len(failed)} {ctx.base.name} kernel(s) did not render: "
                       f"{failed[0]['name']}: {failed[0]['checks'][0]['detail']}", data)
    if not rows:
        return _result(stage, SKIPPED, f"no {ctx.base.name} kernels registered to compile", data)
    carried = [r for r in rows if r["level"] >= Level.COMPILED]
    broken = [r for r in rows if r["level"] < Level.COMPILED]
    first = f"; e.g. {broken[0]['name']}: {broken[0]['compile_error']}" if broken else ""
    as_is = (f" ({len(carried)} {'compiles as it is' if len(carried) == 1 else 'compile as they are'})"
             if carried else "")
    # Compiling is not fitting: a kernel sized for the base can overflow the target's limits.
    unfit = [(r["name"], c["detail"]) for r in carried for c in r.get("checks", []) if not c["passed"]]
    if unfit:
        as_is = as_is[:-1] + f", but {unfit[0][0]} fails a check there: {unfit[0][1]})"
    # "passed" says what passed: the picture is complete; the failures in it are the port's work, expected.
    return _result(stage, PASSED, f"before picture complete (all {len(rows)} {ctx.base.name} kernels tried; "
                   f"failures here are the expected porting work): {len(broken)} of {len(rows)} fail to compile for "
                   f"{ctx.arch.target}{as_is}{first}", data)


def _slim(r: dict) -> dict:
    """A unit result as stage data (artifact paths kept: a cached stage checks them)."""
    return dict(r)


def _kernels_key(ctx, stage, fams, *archs) -> str:
    """Everything a kernels or baseline stage reads: families' code, templates, primitives,
    descriptors (every installed one: the complete listing reads them all), toolchain, the
    pipeline's own code, the --kernel filter and the tuning files (an entry changes a variant)."""
    from porter.tuning.entries import files_digest

    return keys.digest([stage.to_dict(), fams, keys.family_files_digest(fams), keys.render_sources_digest(),
                        keys.data_digest("arch", "*.yaml"),
                        [a.digest for a in archs], [files_digest(a) for a in archs], keys.toolchain_fingerprint(),
                        keys.code_version("build"), keys.code_version("stages"), ctx.kernel_pattern])


# -- day 2: primitives -----------------------------------------------------------------------

_NEEDS_DEFINE = re.compile(r'#\s*error\s+"define (\w+) \(([^)]*)\)')


@timed
def run_primitives(ctx, stage):
    """Compile every primitive header the target's features allow, in the order the
    templates inline them. A header that demands a configuration macro
    (``#error "define X (1 or 2) ..."``) is compiled once per value it names, so both
    configurations are proved, not just the one a kernel happens to pick."""
    import itertools

    from porter import paths
    from porter.planning.plan import (FEATURE_PRIMITIVE, file_needs, primitive_folders, primitive_needs,
                             template_file_order)

    arch = ctx.arch
    feats = set(arch.features)
    folders = primitive_folders()
    missing = sorted(f"{feat} (kernels_src/{folder}/)" for feat, folder in FEATURE_PRIMITIVE.items()
                     if feat in feats and folder not in folders)
    # The order the templates inline the headers in (a header's prerequisites come first);
    # a header no template includes yet is listed, not compiled: nothing says what it needs.
    order = template_file_order()
    root = paths.data_dir("kernels_src")
    files, left_out = [], []
    for folder in folders:
        # Feature primitives only (folders that need a descriptor feature, plus common/ they
        # build on). Family folders (attention/, megakernel/) lean on constants their
        # template defines between includes: the kernels stages build them in context.
        family_part = folder != "common" and not primitive_needs(folder)
        for p in sorted((root / folder).rglob("*.cuh")):
            rel = str(p.relative_to(root))
            if family_part:
                left_out.append(f"{rel} (part of a kernel family, built with its kernels)")
            elif not set(file_needs(rel)) <= feats:
                left_out.append(f"{rel} (needs {', '.join(sorted(set(file_needs(rel)) - feats))})")
            elif rel not in order:
                left_out.append(f"{rel} (no template includes it)")
            else:
                files.append(rel)
    files.sort(key=order.__getitem__)
    data = {"files": files, "left_out": left_out, "missing": missing}
    if not files:
        return _result(stage, FAILED if missing else SKIPPED,
                       f"no primitives for {arch.name}" + (f"; missing {', '.join(missing)}" if missing else ""), data)
    from porter.compile.render import environment

    tu = "".join(f'{{% include "{f}" %}}\n' for f in files) + "\n// primitives translation unit\n"
    try:
        body = environment().from_string(tu).render(arch=arch)
    except Exception as exc:
        return _result(stage, FAILED, f"primitives did not render: {type(exc).__name__}: {exc}", data)
    macros = {m: [v for v in re.findall(r"\w+", vals) if v != "or"] for m, vals in _NEEDS_DEFINE.findall(body)}
    configs = [dict(zip(macros, combo)) for combo in itertools.product(*macros.values())] or [{}]
    units = []
    for cfg in configs:
        tag = ",".join(f"{k}={v}" for k, v in cfg.items()) or "default"
        source = "".join(f"#define {k} {v}\n" for k, v in cfg.items()) + body
        key = keys.digest([source, arch.target, keys.toolchain_fingerprint(), keys.code_version("primitives")])
        units.append((f"primitives/{tag}", key, compile_unit,
                      {"source": source, "target": arch.target, "name": "primitives.cu",
                       "out": str(ctx.out_dir / "primitives" / f"primitives.{tag}.cu")}))
    done = ctx.run_units(stage, units)
    data["configs"] = {name.split("/", 1)[1]: r["error"] or "compiles" for name, r in done.items()}
    errors = [(name, r["error"]) for name, r in done.items() if r["error"]]
    if errors:
        return _result(stage, FAILED, f"primitives do not compile for {arch.target} ({errors[0][0]}): {errors[0][1]}", data)
    if missing:
        return _result(stage, FAILED, f"{len(files)} primitive headers compile, but claimed features have none: "
                       f"{', '.join(missing)}", data)
    return _result(stage, PASSED, f"{_n(len(files), 'primitive header')} compile for {arch.target} in "
                   f"{_n(len(configs), 'configuration')} ({', '.join(data['configs'])}); "
                   f"{len(left_out)} left out (arch lacks their features, or unused)", data)


def compile_unit(payload: dict) -> dict:
    """Compile one translation unit (no kernel checks): primitives, probes of a stage."""
    from pathlib import Path

    from porter.compile import toolchain
    from porter.errors import CompileError
    from porter.fsutil import atomic_write

    before = toolchain.stats.nvrtc_calls
    error = ""
    try:
        toolchain.compile_cuda(payload["source"], payload["target"], payload["name"])
    except CompileError as exc:
        error = str(exc)
    atomic_write(Path(payload["out"]), payload["source"])
    return {"error": error, "nvrtc_calls": toolchain.stats.nvrtc_calls - before,
            "artifacts": {"source": payload["out"]}}


# -- days 2-4: kernels and numerics -----------------------------------------------------------

@timed
def run_kernels(ctx, stage):
    fams = ctx.stage_families(stage)
    if not fams:
        what = f"family '{stage.family}' is not registered" if stage.family != "*" else "no other family is registered"
        return _result(stage, SKIPPED, f"{what} (porter.kernels.FAMILIES)")
    key = _kernels_key(ctx, stage, fams, ctx.arch)
    ctx.stage_keys[stage.id] = key
    return ctx.cached_stage(stage, key, lambda: _kernels(ctx, stage, fams))


def _kernels(ctx, stage, fams):
    # complete: the same listing as `porter kernel list` (a CTA-pair form a family creates
    # only where the descriptor has cta_pair is listed as unsupported, with its reason).
    units, unsupported, failed = _render_units(ctx, fams, ctx.arch, ctx.arch, "kernels", complete=True)
    done = ctx.run_units(stage, units)
    rows = sorted([_slim(r) for r in done.values()], key=lambda r: r["name"]) + failed
    data = {"families": fams, "kernels": rows, "unsupported": unsupported, "tuned": _tuned(ctx, fams)}
    if not rows:
        note = f"; {len(unsupported)} unsupported" if unsupported else ""
        return _result(stage, SKIPPED, f"no {', '.join(fams)} variants to build"
                       f"{' matching ' + ctx.kernel_pattern if ctx.kernel_pattern else ''}{note}", data)
    ok = [r for r in rows if r["level"] >= Level.SASS_CHECKED]
    bad = [r for r in rows if r["level"] < Level.SASS_CHECKED]
    more = f"; and {len(unsupported) - 3} more" if len(unsupported) > 3 else ""
    uns = (f"; {len(unsupported)} unsupported (" + "; ".join(f"{u['name']}: {why_unsupported(u)}"
                                                            for u in unsupported[:3]) + more + ")") if unsupported else ""
    if bad:
        first_bad = next((c for c in bad[0]["checks"] if not c["passed"]), {"name": "?", "detail": ""})
        return _result(stage, FAILED, f"{len(bad)} of {len(rows)} {'/'.join(fams)} variants fail: {bad[0]['name']}: "
                       f"{first_bad['name']}: {first_bad['detail']}{uns}", data)
    return _result(stage, PASSED, f"{_n(len(ok), '/'.join(fams) + ' variant')} sass-checked for {ctx.arch.target}{uns}", data)


def _tuned(ctx, fams) -> dict:
    """kernel -> "tuning/x.yaml, bucket b" for each variant built from a tuning/ entry
    (``porter target``'s "tuned:" line reads it from here)."""
    from porter.kernels.base import KernelSpec
    from porter.tuning.entries import tuned_note

    notes = {}
    for fam in fams:
        for spec in ctx.variants(fam, ctx.arch, True):
            if isinstance(spec, KernelSpec) and (note := tuned_note(ctx.arch, spec)):
                notes[spec.name] = note
    return notes


@timed
def run_numerics(ctx, stage):
    from porter import paths
    from porter.kernels import family_module

    built = [r for res in ctx.results.values() if res.kind == "kernels"
             for r in res.data.get("kernels", []) if r.get("spec")]
    if not built:
        return _result(stage, SKIPPED, "no built kernels to check")
    val_digest = keys.data_digest("validation", "*.py")
    fams = sorted({r["family"] for r in built})
    key = keys.digest([sorted(ctx.stage_keys.values()), [r["spec"] for r in built], val_digest,
                       keys.family_files_digest(fams), keys.code_version("numerics"), keys.code_version("stages")])
    return ctx.cached_stage(stage, key, lambda: _numerics(ctx, stage, built, val_digest))


def _numerics(ctx, stage, built, val_digest):
    from porter.kernels import family_module

    units = []
    for r in built:
        module = family_module(r["family"])
        key = keys.digest([r["spec"], ctx.arch.digest, keys.module_digest(module), val_digest,
                           keys.code_version("numerics")])
        units.append((f"numerics/{r['name']}", key, numerics_unit,
                      {"spec": r["spec"], "arch": ctx.arch, "family_module": module.__name__,
                       "out_dir": str(ctx.out_dir / "kernels" / r["name"])}))
    done = {k.split("/", 1)[1]: _slim(v) for k, v in ctx.run_units(stage, units).items()}
    rows = [done[r["name"]] for r in built]
    failed = [r for r in rows if r["passed"] is False]
    none = [r for r in rows if r["passed"] is None]
    data = {"numerics": rows, "kernels": [{"artifacts": r.get("artifacts", {})} for r in rows]}
    tail = f"; {len(none)} without a numerics model" if none else ""
    if failed:
        why = failed[0]["error"] or "outside tolerance"
        return _result(stage, FAILED, f"{len(failed)} of {len(rows)} variants fail numerics: {failed[0]['name']}: {why}{tail}", data)
    meet = "meets its" if len(rows) == 1 else "meet their"
    return _result(stage, PASSED, f"{len(rows) - len(none)} of {_n(len(rows), 'variant')} {meet} tolerance "
                   f"(CPU model){tail}", data)


@timed
def run_emulation(ctx, stage):
    """Each sass-checked kernel executed in porter's PTX simulator (porter.emu) at its
    emulation shapes (porter.runtime.emulated_cases: the smallest, and a remainder tile with
    grouped-query heads and ragged lengths) and the smallest again under a second seeded
    warp order, against the fp64 reference: the level "emulated" (executed
    in porter's PTX simulator, not on a GPU). A kernel whose PTX needs a form the
    simulator lacks is "not emulated", with the form named, and fails nothing."""
    if ctx.emulate == "off":
        return _result(stage, NOT_RUN, "emulation off (--emulate off)")
    built = [r for res in ctx.results.values() if res.kind == "kernels"
             for r in res.data.get("kernels", []) if r.get("spec") and r["level"] >= Level.SASS_CHECKED]
    if not built:
        return _result(stage, SKIPPED, "no sass-checked kernels to emulate")
    from porter.runtime import emulated_runs as emu_validate

    # the simulator, and the emulated device, runs and cases that stand on the runtime side of it
    emu_digest = keys.digest([keys.folder_digest(keys._PKG / "emu", "*.py"),
                              keys.file_digest((keys._PKG / "runtime").glob("emulated*.py"))])
    val_digest = keys.data_digest("validation", "*.py")
    units = []
    for r in built:
        key = keys.digest([r["spec"], ctx.arch.digest, emu_digest, val_digest, keys.code_version("stages"),
                           sorted(ctx.stage_keys.values())])
        units.append((f"emulation/{r['name']}", key, emu_validate.emulation_unit,
                      {"spec": r["spec"], "arch": ctx.arch, "out_dir": str(ctx.out_dir / "kernels" / r["name"])}))
    done = {k.split("/", 1)[1]: v for k, v in ctx.run_units(stage, units).items()}
    rows = [{k: v for k, v in done[r["name"]].items() if k != "checks"} | {"checks": len(done[r["name"]]["checks"])}
            for r in built]
    passed = [r for r in rows if r["status"] == "passed"]
    failed = [r for r in rows if r["status"] == "failed"]
    skipped = [r for r in rows if r["status"] == "not-emulated"]
    data = {"emulation": rows, "kernels": [{"artifacts": r.get("artifacts", {})} for r in rows]}
    wi = sum(run["warp_instructions"] for r in rows for run in r.get("runs", []))
    secs = sum(run["seconds"] for r in rows for run in r.get("runs", []))
    rate = f"; {wi:,} warp-instructions at {wi / secs:,.0f}/s" if secs else ""
    tail = (f"; {len(skipped)} not emulated ({skipped[0]['name']}: {_first_line(skipped[0]['reason'])}"
            + (" and more" if len(skipped) > 1 else "") + ")") if skipped else ""
    if failed:
        return _result(stage, FAILED, f"{len(failed)} of {len(rows)} kernels fail in the simulator: "
                       f"{failed[0]['name']}: {_first_line(failed[0]['reason'])}{tail}", data)
    if not passed:
        return _result(stage, NOT_RUN, f"no kernel could be emulated{tail}", data)
    return _result(stage, PASSED, f"{_n(len(passed), 'kernel')} executed in porter's PTX simulator (not on a GPU) "
                   f"and met the fp64 reference{rate}{tail}", data)


def _first_line(text: str) -> str:
    return (text or "").splitlines()[0] if text else ""


@timed
def run_prediction(ctx, stage):
    """Each kernel's speed on every product the descriptor names, at the device check's
    benchmark shapes, from porter's timing model (porter.timing): predicted, not measured.
    Content-keyed: the kernel specs (knobs included), the descriptor, the selected product
    and the model's source; each prediction is also in porter's prediction cache."""
    from porter.timing import LABEL
    from porter.timing.cache import model_digest

    built = [r for res in ctx.results.values() if res.kind == "kernels"
             for r in res.data.get("kernels", []) if r.get("spec")]
    if not built:
        return _result(stage, SKIPPED, "no kernels to predict")
    arch = ctx.arch
    products = list(getattr(arch, "product_names", ()) or [arch.product])
    key = keys.digest([sorted((r["name"], r["spec"]) for r in built), arch.digest, arch.product or "", products,
                       model_digest(), keys.code_version("stages")])
    name = f"stage/{stage.id}"
    data = ctx.store.get(name, key)
    if data is None:
        # one unit per kernel (a family or descriptor without figures comes back as missing),
        # run where --executor says: the local pool or Ray
        units = [(f"prediction/{r['name']}", keys.digest([key, r["name"]]), prediction_unit,
                  {"spec": r["spec"], "arch": arch, "products": products}) for r in built]
        done = ctx.run_units(stage, units)
        rows = [p for u in units for p in done[u[0]]["rows"]]
        missing = [m for u in units for m in done[u[0]]["missing"]]
        data = {"label": LABEL, "products": products, "predictions": rows, "missing": missing}
        ctx.store.put(name, key, data)
    rows, missing = data["predictions"], data["missing"]
    kernels = sorted({p["kernel"] for p in rows})
    tail = (f"; {len(missing)} without a prediction ({missing[0]['name']}: {missing[0]['reason']})"
            if missing else "")
    if not rows:
        return _result(stage, NOT_RUN, f"no kernel could be predicted{tail}", data)
    return _result(stage, PASSED, f"{_n(len(kernels), 'kernel')} x {_n(len(products), 'product')}: "
                   f"{_n(len(rows), 'prediction')} ({LABEL}){tail}", data)


# -- day 5: device, bench, report -------------------------------------------------------------

@timed
def run_device(ctx, stage):
    """Device validation, only on a GPU whose compute capability is the descriptor's.

    The launch-and-compare code lives in a device harness module,
    ``porter.runtime.harness``, with ``validate(spec: dict, arch, kernel_dir)
    -> {"name", "passed", ...}`` and ``bench(spec, arch, kernel_dir) -> {"name", "tflops",
    "roofline_tflops", ...}``. Without a GPU, or without the harness, the stage says so and
    is "not-run" (failed under --device on); no kernel is ever reported device-validated
    unless the harness ran it and it passed."""
    from porter.pipeline.device import find_device

    if ctx.device == "off":
        return _result(stage, NOT_RUN, "device validation off (--device off)")
    dev, why = find_device(ctx.arch)
    if dev is None and ctx.device == "on":
        # The reason `porter validate/bench --device on` give ("no CUDA device: ..."), and
        # the mark that turns the run's exit code into theirs (3): the GPU was required.
        from porter.pipeline.device import list_devices
        from porter.runtime.device_runs import match_device

        reason = match_device(ctx.arch, *list_devices())[1]
        return _result(stage, FAILED, f"{reason} (--device on): device validation and benchmarks not run",
                       {"device": None, "why": reason, "no_device": True})
    if dev is None:
        return _result(stage, NOT_RUN, f"no GPU: device validation and benchmarks not run ({why})",
                       {"device": None, "why": why})
    try:
        from porter.runtime import harness
    except ImportError:
        status = FAILED if ctx.device == "on" else NOT_RUN
        return _result(stage, status, f"device {dev['name']} present, but no device harness "
                       "(porter.runtime.harness) is installed: device validation not run",
                       {"device": dev})
    rows = []
    for res in ctx.results.values():
        if res.kind != "kernels":
            continue
        for r in res.data.get("kernels", []):
            if r["level"] >= Level.SASS_CHECKED:
                out = ctx.out_dir / "kernels" / r["name"]
                rows.append(jsonable(harness.validate(r["spec"], ctx.arch, out)))
    failed = [r for r in rows if not r.get("passed")]
    data = {"device": dev, "results": rows}
    if failed:
        return _result(stage, FAILED, f"{len(failed)} of {len(rows)} kernels fail on {dev['name']}", data)
    return _result(stage, PASSED, f"{len(rows)} kernels validated on {dev['name']}", data)


@timed
def run_bench(ctx, stage):
    dev_stage = next((r for r in ctx.results.values() if r.kind == "device"), None)
    if dev_stage is None or dev_stage.status != PASSED:
        return _result(stage, NOT_RUN, "nothing measured: benchmarks run after device validation passes")
    try:
        from porter.runtime import harness
        bench = harness.bench
    except (ImportError, AttributeError):
        return _result(stage, NOT_RUN, "no benchmark harness (porter.validation.harness.bench)")
    rows = [jsonable(bench(r["spec"], ctx.arch, ctx.out_dir / "kernels" / r["name"]))
            for r in dev_stage.data.get("results", []) if r.get("passed") and r.get("spec")]
    return _result(stage, PASSED, f"{len(rows)} kernels measured", {"bench": rows})


@timed
def run_report(ctx, stage):
    from porter.report import write_report

    written = write_report(ctx)
    return _result(stage, PASSED, f"report written: {', '.join(p.name for p in written)}",
                   {"files": [str(p) for p in written]})


STAGE_FUNCTIONS = {
    "descriptor-check": run_descriptor,
    "probes": run_probes,
    "plan": run_plan,
    "baseline": run_baseline,
    "primitives": run_primitives,
    "kernels": run_kernels,
    "emulation": run_emulation,
    "prediction": run_prediction,
    "numerics": run_numerics,
    "device": run_device,
    "bench": run_bench,
    "report": run_report,
}
