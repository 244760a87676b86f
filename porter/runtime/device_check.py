"""The prepared device check: validate and benchmark every kernel of an arch in one short GPU visit.

``prepare`` (here, with the toolchain) builds every supported kernel, and the previous
form of each changed kernel (``device_plan.AB_FORMS``, ``--ab``) and the hand-chosen form
of each tuned one, records in ``manifest.json`` the cubins (sha256), their level, SASS
checks and resources, porter's timing-model prediction for every benchmark shape,
porter's commit, the NVRTC version, a digest of every source file and the shapes the run
will use, and, where an nvcc no newer than CUDA 13.0 is found, a fallback cubin set for a
driver that refuses the NVRTC cubins. ``run`` (on the GPU machine, no toolchain) checks
the manifest is this checkout's, then runs two phases, each kernel form in its own child
process (validation with ``CUDA_MODULE_LOADING=EAGER`` and benchmarks with ``cuFuncLoad``,
so a refused cubin is refused at load, inside the fallback):

* validation of every form first: the child prints each launch before it starts and each
  check as it finishes (JSON lines), launches a smoke case (the smallest shape) first, then
  every shape;
* then benchmarks of the forms that validated, in the order of what they decide
  (``device_plan.bench_order``: A/B pairs, tuned vs default, the rest), each row with its
  prediction beside it; one that no longer fits the budget by porter's estimate is skipped,
  saying so;
* every launch has a watchdog (polled, not a blocking synchronize): a hang becomes a
  "hang" naming kernel, shape and seed, and the child reports and exits at once without
  freeing anything (cuMemFree may wait on the hung kernel); a sticky fault loses only that
  child; any exception is reported with the partial results kept; a failing baseline is
  a skipped baseline, never a lost measurement or level;
* the parent kills a child past its time limit and stops starting children when the
  run's budget is spent, saying so for each one not run.

It writes ``results.json`` and ``run.log`` to ``--out`` and prints a compact table last.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import traceback
from pathlib import Path

from porter.errors import PorterError
from porter.runtime import cubins
from porter.runtime import device_plan as plan

EVENT_PREFIX = "@@porter "
ARCH = "hopper"
FAMILIES = ("gemm", "attention", "megakernel")
BUDGET_S = 300.0
# Per-kernel time limits (s) on an H200, CPU references included (16 cores there).
LIMITS = {"gemm": 75.0, "attention": 60.0, "megakernel": 90.0}
REHEARSAL_LIMIT_S = 60.0
MAX_PRINT_LINES = 100
# CUDA_MODULE_LOADING per child phase. Validation loads eagerly: a cubin the driver refuses
# is refused in cuModuleLoadData, inside the fallback to the older cubin set. A benchmark
# child also runs torch (the baselines), whose thousands of library kernels eager loading
# would load up front (seconds and GBs of a short visit): it stays lazy, and porter's own
# kernel is loaded at once with cuFuncLoad (driver.load_function) all the same.
MODULE_LOADING = {"validate": "EAGER", "bench": "LAZY"}


# ---- shapes per profile -------------------------------------------------------------------------

def plan_shapes(spec, profile: str) -> dict:
    """{validate: [...], seeds, bench: [...]} for ``spec`` in ``profile`` ("full" or "rehearsal")."""
    from porter.runtime import device_runs as dr

    fam = spec.family
    if fam == "gemm":
        validate = [list(s) for s in dr.gemm_shapes(spec)]
        bench = [list(s) for s in dr.GEMM_BENCH_SHAPES]
        seeds = 2
    elif fam == "attention":
        validate = [list(s) for s in dr.attention_shapes(spec)]
        bench = [list(s) for s in dr.ATTENTION_BENCH_SHAPES]
        if spec.config.get("head_dim") != 128:
            bench = bench[:1]           # the long case for the head dim the issue benchmarks
        seeds = 1
    else:
        validate = list(dr.MEGAKERNEL_VALIDATE_MODELS)
        bench = list(dr.MEGAKERNEL_BENCH_POS)
        seeds = 2
    if profile == "rehearsal":
        if fam == "gemm":
            validate, bench = validate[:2], [[256, 256, validate[0][2]]]
        elif fam == "attention":
            validate = validate[:2] + ([list(dr.ATTENTION_CAUSAL_WIDE)] if spec.config.get("causal") else [])
            bench = [[1, 2, 2, 128, 128]]
        else:
            # the kernel's own model is Llama-3.2-1B (2.4 GB of weights): the rehearsal GPU,
            # which computes on the host, times a step of the tiny model on the full grid
            validate, bench = validate[:1], [{"model": "tiny", "pos": 8}]
        seeds = 1
    elif profile != "full":
        raise PorterError(f"--profile {profile!r}: full or rehearsal")
    limit = REHEARSAL_LIMIT_S if profile == "rehearsal" else LIMITS[fam]
    return {"validate": validate, "seeds": seeds, "bench": bench, "limit_s": limit}


# ---- prepare ----------------------------------------------------------------------------------

def _nvcc_fallback() -> tuple[str | None, str]:
    """(nvcc path, "nvcc 13.0") when an nvcc no newer than CUDA 13.0 is here, else (None, why not)."""
    import re
    import shutil

    for nvcc in filter(None, (os.environ.get("PORTER_FALLBACK_NVCC"), shutil.which("nvcc"),
                              "/usr/local/cuda-13.0/bin/nvcc")):
        if not Path(nvcc).is_file():
            continue
        try:
            out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=30).stdout
        except (OSError, subprocess.SubprocessError):
            continue
        m = re.search(r"release (\d+)\.(\d+)", out)
        if m and (int(m.group(1)), int(m.group(2))) <= (13, 0):
            return nvcc, f"nvcc {m.group(1)}.{m.group(2)}"
    return None, "no nvcc <= 13.0 found (PORTER_FALLBACK_NVCC names one)"


def _nvcc_cubin(nvcc: str, source: str, target: str, name: str) -> bytes:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        src, out = Path(tmp) / f"{name}.cu", Path(tmp) / f"{name}.cubin"
        src.write_text(source)
        done = subprocess.run([nvcc, "-cubin", f"-arch={target}", "-std=c++17", "-lineinfo", "-o", str(out), str(src)],
                              capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            last = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise PorterError(f"nvcc failed for {name}: {last[:200]}")
        return out.read_bytes()


def _sass_checks(spec, cubin: bytes) -> list[dict]:
    """The spec's SASS signature checks on another cubin (the fallback: another compiler)."""
    from porter.compile import sass as sasslib
    from porter.kernels.build import sass_checks

    text = sasslib.disassemble(cubin)
    hist = sasslib.opcode_histogram(text, spec.entry) or sasslib.opcode_histogram(text)
    return [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in sass_checks(spec, hist)]


def _build_entry(spec, arch, profile: str, nvcc, fallback_tool: str, manifest: dict, form: dict, echo) -> dict | None:
    """Build ``spec``; its manifest entry (cubins written under ``out``), or None with the failure recorded."""
    from porter import kernels as kfam
    from porter.fsutil import atomic_write
    from porter.kernels.build import build_kernel
    from porter.pipeline.work import jsonable

    t0 = time.time()
    run_name = plan.form_name(form["kernel"], form.get("sets"))
    key = f"{arch.name}/{run_name}"
    build = build_kernel(spec, arch)
    if not build.ok:
        failed = next((c for c in build.checks if not c.passed), None)
        manifest["failed"][key] = build.compile_error or (f"{failed.name}: {failed.detail}" if failed else "")
        echo(f"FAILED {key}: {manifest['failed'][key]}")
        return None
    out = manifest["_out"]
    stem = run_name.replace("[", "_").replace("]", "").replace(",", "_").replace("=", "-")
    rel = f"cubins/{stem}.cubin"
    atomic_write(out / rel, build.compiled.cubin)
    source = kfam.family_module(spec.family).render(spec, arch)
    shapes = plan_shapes(spec, profile)
    if form.get("role") == "ab-old":
        shapes["validate"] = shapes["validate"][:2]     # the previous form validated before: smoke + one
    entry = {"spec": jsonable(spec.to_dict()), "form": form, "cubin": rel,
             "cubin_sha256": cubins.sha256(build.compiled.cubin),
             "nvrtc": f"NVRTC {manifest['nvrtc']}", "level": build.level.label,
             "checks": [{"name": c.name, "passed": c.passed, "detail": c.detail} for c in build.checks],
             "resources": jsonable(build.resources) if build.resources else None,
             "source_sha256": cubins.sha256(source.encode()), "shapes": shapes,
             "predicted": plan.predictions(arch, spec, shapes["bench"])}
    if nvcc:
        try:
            blob = _nvcc_cubin(nvcc, source, arch.target, stem)
            frel = f"cubins/{stem}.fallback.cubin"
            atomic_write(out / frel, blob)
            entry.update(fallback_cubin=frel, fallback_cubin_sha256=cubins.sha256(blob),
                         fallback_toolchain=fallback_tool, fallback_checks=_sass_checks(spec, blob))
        except (PorterError, subprocess.SubprocessError, OSError) as exc:
            entry["fallback_error"] = str(exc)[:300]
    manifest["kernels"][key] = entry
    echo(f"built {key} ({build.level.label}, {time.time() - t0:.1f} s"
         + (", + fallback" if entry.get("fallback_cubin") else "") + ")")
    return entry


def _has_knobs(arch, spec, sets) -> bool:
    """Every knob ``sets`` (key=value strings) names is one of ``spec``'s on ``arch``."""
    from porter import kernels as kfam
    from porter.kernels.knob_rules import has_knob
    space = kfam.family_module(spec.family).knobs_of(arch, spec)
    return all(has_knob(space, item.split("=", 1)[0]) for item in sets)


def prepare(out: Path, arch_name: str = ARCH, profile: str = "full", fallback: bool = True,
            kernels: list[str] | None = None, echo=print, ab: list[str] | None = None,
            fallback_kernels: list[str] | None = None) -> int:
    """Build every supported kernel of ``arch_name`` into ``out`` (and the previous form of
    each changed kernel: ``device_plan.AB_FORMS`` and ``ab``, "KERNEL:key=value,..."); write
    the manifest. ``fallback_kernels``: build fallback cubins for these only (default: all).
    Exit 0, or 1 if a build failed."""
    from porter import kernels as kfam
    from porter.compile import sass
    from porter.compile import toolchain
    from porter.descriptor.arch import load_arch
    from porter.fsutil import atomic_write
    from porter.kernels.base import Unsupported

    arch = load_arch(arch_name)
    out = Path(out)
    (out / "cubins").mkdir(parents=True, exist_ok=True)
    forms = list(plan.AB_FORMS) + plan.parse_ab(ab)
    builtin_rows = set(plan.AB_FORMS)
    nvcc, fallback_tool = _nvcc_fallback() if fallback else (None, "fallback off")
    sources = cubins.source_digests()
    manifest = {"format": cubins.FORMAT, "arch": arch.name, "target": arch.target, "profile": profile,
                "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "porter_commit": cubins.porter_commit(), "nvrtc": toolchain.nvrtc_version(),
                "nvdisasm": sass.nvdisasm_version(), "fallback_toolchain": fallback_tool if nvcc else None,
                "fallback_note": "" if nvcc else fallback_tool,
                "sources_sha256": cubins.tree_digest(sources), "sources": sources, "kernels": {}, "failed": {},
                "tuned": plan.TUNED_NOTE, "_out": out}
    tuned_runs: list[str] = []
    for family in FAMILIES:
        for spec in kfam.family_module(family).variants(arch):
            if isinstance(spec, Unsupported) or (kernels and spec.name not in kernels):
                continue
            use_nvcc = nvcc if not fallback_kernels or spec.name in fallback_kernels else None
            pair = plan.tuned_pair(arch, spec)
            form = {"kernel": spec.name, "role": "default"}
            if pair:
                form["tuned"] = pair[0]
            built = _build_entry(spec, arch, profile, use_nvcc, fallback_tool, manifest, form, echo)
            if pair and built is not None:
                tuned_runs.append(spec.name)
                _build_entry(pair[1], arch, profile, use_nvcc, fallback_tool, manifest,
                             {"kernel": spec.name, "role": "tuned-default", "sets": [plan.UNTUNED],
                              "why": f"tuned: {pair[0]}"}, echo)
            for kernel, sets, why in forms:
                if kernel != spec.name or built is None:
                    continue
                key = f"{arch.name}/{plan.form_name(kernel, sets)}"
                if (kernel, sets, why) in builtin_rows and not _has_knobs(arch, spec, sets):
                    # a row of the shared table for a knob this arch's form of the kernel lacks
                    # (q_tiles is tcgen05's): nothing to compare here, and not a failed build
                    echo(f"skipped {key}: {spec.name} has no such knob on {arch.name}")
                    continue
                try:
                    old = plan.knob_spec(arch, kernel, sets)
                except PorterError as exc:
                    manifest["failed"][key] = str(exc)
                    echo(f"not built {key}: {exc}")
                    continue
                _build_entry(old, arch, profile, use_nvcc, fallback_tool, manifest,
                             {"kernel": kernel, "role": "ab-old", "sets": list(sets), "why": why}, echo)
    del manifest["_out"]
    if tuned_runs:
        manifest["tuned"] = (f"tuned vs default: {', '.join(tuned_runs)} benchmarked against their hand-chosen "
                             "configurations")
    after = cubins.source_digests()
    changed = sorted(p for p in set(sources) | set(after) if sources.get(p) != after.get(p))
    if changed:
        echo(f"warning: {len(changed)} source file(s) changed while preparing ({', '.join(changed[:3])}): "
             "run will call this manifest stale; prepare again")
    rows = plan.timeline(manifest)
    manifest["estimate_s"] = round(rows[-1]["cumulative_s"], 1) if rows else 0.0
    atomic_write(out / cubins.MANIFEST, json.dumps(manifest, indent=1))
    echo(f"wrote {out / cubins.MANIFEST}: {len(manifest['kernels'])} kernel forms, {len(manifest['failed'])} failed; "
         f"fallback cubins: {fallback_tool if nvcc else 'none (' + fallback_tool + ')'}; "
         f"estimated visit {manifest['estimate_s']:.0f} s of kernel work (benchmarks/device_check.py plan)")
    return 1 if [k for k in manifest["failed"] if k.split("/", 1)[1] in
                 {s.name for f in FAMILIES for s in kfam.family_module(f).variants(arch)}] else 0


def plan_lines(manifest: dict, budget_s: float = None, kernels=None) -> list[str]:
    """The visit's timeline: every child in run order, its estimate, the running total, and
    which benchmarks ``budget_s`` leaves out."""
    budget_s = BUDGET_S if budget_s is None else budget_s
    rows = plan.timeline(manifest, kernels)
    lines = [f"{'phase':<9} {'run':<40} {'est s':>6} {'total':>6}  decides"]
    for r in rows:
        over = "  (over the --budget: not run)" if r["cumulative_s"] > budget_s else ""
        lines.append(f"{r['phase']:<9} {r['run'][:40]:<40} {r['estimate_s']:>6.0f} {r['cumulative_s']:>6.0f}  "
                     f"{r.get('decides', 'validation')}{over}")
    lines.append(f"estimated {rows[-1]['cumulative_s'] if rows else 0:.0f} s against a {budget_s:.0f} s budget "
                 "(host work measured on a 2-core machine: an upper bound); " + manifest.get("tuned", plan.TUNED_NOTE))
    return lines


# ---- the child: one kernel ------------------------------------------------------------------------

def _emit(event: dict) -> None:
    from porter.pipeline.work import jsonable

    sys.stdout.write(EVENT_PREFIX + json.dumps(jsonable(event)) + "\n")
    sys.stdout.flush()


def _shape_of(shape, family):
    """A shape from the manifest (JSON lists) as the family's runs take it."""
    return tuple(shape) if family in ("gemm", "attention") else shape


def child(kernel: str, phase: str = "validate") -> int:
    """Validate (smoke first) or benchmark one prepared kernel form, streaming events to
    stdout. Ends with os._exit. After a failure it reports and exits at once, inside the
    handler: while the exception is alive its frames keep the device buffers referenced,
    so nothing is freed (cuMemFree may wait on a hung kernel forever; after a fault it
    frees nothing); the memory goes with the process."""
    from porter.runtime import driver

    # before the driver initialises (it reads this once, at cuInit)
    os.environ[driver.MODULE_LOADING_ENV] = MODULE_LOADING[phase]
    code = 1
    try:
        code = _child(kernel, phase)
    except BaseException as exc:  # noqa: BLE001 - every failure is reported, with what finished kept
        from porter.runtime.driver import KernelFault, KernelHang

        kind = ("hang" if isinstance(exc, KernelHang) else "fault" if isinstance(exc, KernelFault)
                else "error" if isinstance(exc, PorterError) else "bug")
        event = {"event": "error", "phase": phase, "kind": kind, "message": f"{type(exc).__name__}: {exc}"
                 if kind == "bug" else str(exc)}
        if kind == "bug":
            event["traceback"] = traceback.format_exc()[-3000:]
        _emit(event)
        sys.stdout.flush()
        os._exit(1)
    sys.stdout.flush()
    os._exit(code)


def _child(kernel: str, phase: str) -> int:
    from porter.descriptor.arch import load_arch
    from porter.pipeline.work import spec_from_dict
    from porter.runtime.device import get_device
    from porter.runtime import device_runs as dr

    folder = os.environ.get(cubins.CUBIN_DIR_ENV)
    if not folder:
        raise PorterError(f"{cubins.CUBIN_DIR_ENV} is not set: the child runs prepared kernels only")
    manifest = cubins.read_manifest(folder)
    entry = manifest["kernels"][f"{manifest['arch']}/{kernel}"]
    arch = load_arch(manifest["arch"])
    spec = spec_from_dict(entry["spec"])
    shapes = entry["shapes"]
    dev = get_device()
    if hasattr(dev, "on_note"):
        dev.on_note = lambda text: _emit({"event": "note", "kernel": kernel, "text": text})
    t0 = time.time()
    fn = dev.load(spec, arch)
    loaded = {"event": "loaded", "kernel": kernel, "from": getattr(fn, "source", dev.kind),
              "notes": list(getattr(dev, "load_notes", []))}
    if dev.kind == "cuda" and hasattr(fn, "handle"):
        from porter.runtime import driver

        # opt in first, then read back what the driver granted (settles on a GPU whether
        # the 1 KiB system reserve counts against the opt-in limit, ARCH_FACTS "Host side")
        driver.set_function_attributes(fn.handle, spec.smem_bytes, spec.cluster)
        loaded["attributes"] = driver.function_attributes(fn.handle)
    _emit(loaded)
    if phase == "bench":
        for shape in shapes["bench"]:
            _emit({"event": "launch", "phase": "bench", "kernel": kernel, "shape": shape, "seed": "bench"})
            rows = dr.bench_family(spec, arch, [_shape_of(shape, spec.family)], baseline=True)
            for row in rows:
                preds = entry.get("predicted") or {}
                row["predicted"] = preds.get(plan.shape_key(shape)) or {
                    "unavailable": preds.get("unavailable", "no prediction recorded at prepare")}
                _emit({"event": "bench", "kernel": kernel, "row": row})
        return 0
    validate = [_shape_of(s, spec.family) for s in shapes["validate"]]

    def log(event):
        _emit(event)

    smoke = dr.validate_family(spec, arch, validate[:1], shapes["seeds"], device=dev, log=log)
    passed = all(c["passed"] for c in smoke)
    if not passed:
        _emit({"event": "validated", "kernel": kernel, "passed": False, "smoke_failed": True,
               "seconds": time.time() - t0})
        return 1
    rest = dr.validate_family(spec, arch, validate[1:], shapes["seeds"], device=dev, log=log) if validate[1:] else []
    passed = all(c["passed"] for c in rest)
    _emit({"event": "validated", "kernel": kernel, "passed": passed, "seconds": time.time() - t0})
    return 0 if passed else 1


# ---- the parent: every kernel, bounded ---------------------------------------------------------------

class Printer:
    """stdout, bounded: progress lines while the run goes, the table last (within MAX_PRINT_LINES)."""

    def __init__(self, log_file, quiet: bool = False):
        self.log, self.lines, self.quiet, self.partial = log_file, 0, quiet, ""

    def logline(self, text: str) -> None:
        self.log.write(text.rstrip("\n") + "\n")
        self.log.flush()

    def say(self, text: str, budget: int = MAX_PRINT_LINES - 30) -> None:
        """A progress line, if the progress share of the line budget is not spent."""
        self.logline(text)
        if self.lines < budget and not self.quiet:
            self.flush_partial()
            print(text, flush=True)
            self.lines += 1

    def token(self, text: str, budget: int = MAX_PRINT_LINES - 30) -> None:
        """Part of a progress line (a launch before it starts, its verdict after), wrapped at 110 columns."""
        if self.quiet or self.lines >= budget:
            return
        if len(self.partial) + len(text) > 110:
            self.flush_partial()
        if not self.partial:
            text = "    " + text.lstrip()
        self.partial += text
        print(text, end="", flush=True)

    def flush_partial(self) -> None:
        if self.partial:
            print(flush=True)
            self.partial = ""
            self.lines += 1

    def table(self, lines: list[str]) -> None:
        self.flush_partial()
        for line in lines:
            self.logline(line)
            print(line, flush=True)
        self.lines += len(lines)


def _where(event: dict) -> str:
    shape, seed = event.get("shape"), event.get("seed")
    if event.get("phase") == "bench":
        return f"bench {_where({'shape': shape})[:-len(' seed None')]}"
    if isinstance(shape, dict) and "model" in shape:
        shape = f"{shape['model']} pos {shape.get('pos')}"
    elif isinstance(shape, dict):
        shape = "x".join(str(v) for k, v in shape.items() if k != "head_dim")
    elif isinstance(shape, (list, tuple)):
        shape = "x".join(map(str, shape))
    return f"{shape} seed {seed}"


def _record_event(event: dict, record: dict, printer: Printer, state: dict) -> None:
    """One streamed event from a child into its kernel's record (and the progress line)."""
    kind = event.get("event")
    if kind == "launch":
        state["last"] = event
        printer.token(f"{_where(event)} ")
    elif kind == "check":
        record["checks"].append(event["check"])
        printer.token("ok, " if event["check"].get("passed") else "FAIL, ")
    elif kind == "loaded":
        record["loaded_from"], record["attributes"] = event.get("from"), event.get("attributes")
        record["load_notes"] = event.get("notes") or []     # printed as they came (note events)
    elif kind == "validated":
        record["validated"] = bool(event["passed"])
        if event.get("smoke_failed"):
            record["smoke_failed"] = True
    elif kind == "bench":
        record["bench"].append(event["row"])
        printer.token("timed, " if (event["row"].get("spot_check") or {}).get("passed") else "SPOT CHECK FAILED, ")
    elif kind == "note":
        record.setdefault("notes", []).append(event["text"])
        printer.say(f"    note: {event['text'][:200]}")
    elif kind == "bench_skipped":
        record["bench_skipped"] = event["why"]
    elif kind == "error":
        record["error"] = {k: event[k] for k in ("kind", "message", "traceback") if k in event}
        printer.token(f"{event.get('kind', 'error').upper()} ")


def _run_child(script: Path, kernel: str, limit_s: float, env: dict, printer: Printer, record: dict,
               phase: str = "validate") -> None:
    """One child (``phase`` validate or bench), streamed into ``record``; killed at ``limit_s``."""
    import selectors
    import signal

    cmd = [sys.executable, str(script), "child", kernel, "--phase", phase]
    env = dict(env, **{"CUDA_MODULE_LOADING": MODULE_LOADING[phase]})
    t0 = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env, cwd=str(script.parent.parent),
                            start_new_session=True)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    state = {"buf": b"", "last": None}
    other: list[str] = []

    def feed(chunk: bytes) -> None:
        state["buf"] += chunk
        while b"\n" in state["buf"]:
            raw, state["buf"] = state["buf"].split(b"\n", 1)
            line = raw.decode(errors="replace")
            if not line.startswith(EVENT_PREFIX):
                printer.logline(f"[{kernel}] {line}")
                other.append(line)
                continue
            printer.logline(f"[{kernel}] {line[len(EVENT_PREFIX):]}")
            try:
                event = json.loads(line[len(EVENT_PREFIX):])
            except ValueError:
                continue
            _record_event(event, record, printer, state)

    killed = False
    while True:
        left = limit_s - (time.monotonic() - t0)
        if left <= 0:
            os.killpg(proc.pid, signal.SIGKILL)
            killed = True
            while sel.select(timeout=0.5):            # what the child said before it was killed
                chunk = os.read(proc.stdout.fileno(), 65536)
                if not chunk:
                    break
                feed(chunk)
            break
        if not sel.select(timeout=min(left, 1.0)):
            if proc.poll() is not None:
                break
            continue
        chunk = os.read(proc.stdout.fileno(), 65536)
        if not chunk:
            break
        feed(chunk)
    last_launch = state["last"]
    sel.close()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    record["seconds"] = round(time.monotonic() - t0, 1)
    record["exit_code"] = proc.returncode
    if last_launch is not None:
        record["last_launch"] = {k: last_launch.get(k) for k in ("shape", "seed")}
    if killed:
        record["error"] = {"kind": "timeout", "message": f"killed after {limit_s:.0f} s (the child's limit)"
                           + (f"; last launch {_where(last_launch)}" if last_launch else "")}
    elif "error" not in record and proc.returncode not in (0, 1):
        tail = " | ".join(other[-3:])[-300:]
        record["error"] = {"kind": "crash", "message": f"the child died (exit {proc.returncode})"
                           + (f": {tail}" if tail else "") + (f"; last launch {_where(last_launch)}" if last_launch else "")}
    if record.get("error", {}).get("kind") in ("hang", "fault", "error", "bug") and last_launch:
        record["error"]["message"] += f" (at {_where(last_launch)})"


def _status(record: dict) -> str:
    err = (record.get("error") or {}).get("kind")
    if err:
        return {"hang": "HANG", "fault": "FAULT", "timeout": "TIMEOUT", "crash": "CRASH", "bug": "BUG"}.get(err, "ERROR")
    if record.get("not_run"):
        return "NOT RUN"
    if not record.get("validated"):
        return "FAILED"
    bench_err = (record.get("bench_error") or {}).get("kind")
    if bench_err:
        return "BENCH " + {"timeout": "TIMEOUT", "hang": "HANG", "fault": "FAULT"}.get(bench_err, "ERROR")
    if any(not (r.get("spot_check") or {}).get("passed", True) for r in record["bench"]):
        return "BENCH FAIL"
    return "passed"


def _level(record: dict, manifest_level: str, rehearsal: bool, kind: str) -> str:
    """What this visit established: device-validated once every check passed on a GPU (a
    benchmark's failure, or its baseline's, takes nothing away from that), benchmarked
    when its benchmarks also ran clean; a rehearsal or a failed validation claims nothing."""
    from porter.levels import Level

    validated = record.get("validated") and not record.get("error") and not record.get("not_run")
    if rehearsal or not validated:
        return manifest_level
    if kind == "emu":
        return Level.EMULATED.label
    if kind != "cuda":
        return manifest_level
    bench_ok = record["bench"] and not record.get("bench_error") and all(
        (r.get("spot_check") or {}).get("passed", True) for r in record["bench"])
    return (Level.BENCHMARKED if bench_ok else Level.DEVICE_VALIDATED).label


def _worst_check(checks: list[dict]) -> str:
    bad = [c for c in checks if not c.get("passed")]
    if not bad:
        return ""
    c = bad[0]
    where = c.get("shape") or c.get("model")
    where = "x".join(str(v) for v in where.values()) if isinstance(where, dict) else \
        "x".join(map(str, where)) if isinstance(where, (list, tuple)) else str(where)
    bits = [f"{len(bad)} failed, first {where} seed {c.get('seed')}"]
    for key in ("rel_fro_err", "deepgemm_diff", "max_abs_err", "logits_rel_err"):
        if isinstance(c.get(key), float):
            bits.append(f"{key} {c[key]:.3g}")
    written = c.get("written")
    for w in written if isinstance(written, list) else [written] if written else []:
        if w and not w.get("passed"):
            bits.append(f"{w['unwritten']} {w['what']} unwritten")
    if c.get("counters_ok") is False:
        bits.append("counters short")
    return ", ".join(bits)


def _bench_cell(rows: list[dict]) -> tuple[str, str, str]:
    """(porter measured, predicted by the timing model, baseline) for a record's last row."""
    if not rows:
        return "-", "-", "-"
    row = rows[-1]
    pred = row.get("predicted") or {}
    if row.get("family") == "megakernel":
        base = row.get("copy_floor_us")
        p_us = pred.get("time_us")
        lo, hi = pred.get("low"), pred.get("high")
        span = f" [{lo:.0f}-{hi:.0f}]" if isinstance(lo, (int, float)) and isinstance(hi, (int, float)) else ""
        return (f"{row['us_per_step']:.1f} us", f"{p_us:.1f}{span} us" if isinstance(p_us, (int, float)) else "-",
                f"floor {base:.1f} us" if base else "-")
    base = row.get("baseline") or {}
    ours = f"{row['tflops']:.3g} TF/s"
    p_tf = pred.get("tflops")
    predicted = "-"
    if isinstance(p_tf, (int, float)):
        # the range comes with the figure: TFLOP/s at the model's slowest and fastest time
        t, lo, hi = pred.get("time_us"), pred.get("low"), pred.get("high")
        span = (f" [{p_tf * t / hi:.2g}-{p_tf * t / lo:.2g}]"
                if all(isinstance(x, (int, float)) and x > 0 for x in (t, lo, hi)) else "")
        predicted = f"{p_tf:.3g}{span}"
    if base.get("tflops"):
        return ours, predicted, f"{base['tflops']:.3g} TF/s ({row['pct_of_baseline']:.0f}%)"
    return ours, predicted, "skipped" if base.get("skipped") else "-"


def table_lines(results: dict) -> list[str]:
    env = results["environment"]
    head = (f"==== porter device check: {results['arch']} on {env.get('gpu', '?')}; "
            f"{len(results['kernels'])} kernels in {results['seconds']:.0f} s; {results['out']} ====")
    lines = [head, f"{'kernel':<25} {'result':<11} {'checks':>7}  {'level':<16} {'measured':>11} {'predicted* [range]':>20}  "
                   f"{'baseline':<18} {'s':>4}"]
    predicted_any = False
    for r in results["kernels"]:
        checks = r.get("checks", [])
        ok = sum(bool(c.get("passed")) for c in checks)
        ours, pred, base = _bench_cell(r.get("bench", []))
        predicted_any |= pred != "-"
        lines.append(f"{r['name'][:25]:<25} {_status(r):<11} {ok:>3}/{len(checks):<3}  {r['level']:<16} {ours:>11} "
                     f"{pred:>20}  {base:<18} {r.get('seconds', 0):>4.0f}")
        why = (r.get("error") or {}).get("message") or r.get("not_run") or _worst_check(checks) \
            or ("bench: " + r["bench_error"]["message"] if r.get("bench_error") else "") \
            or ("bench: " + r["bench_skipped"] if r.get("bench_skipped") else "") \
            or _baseline_note(r.get("bench", []))
        if r.get("smoke_failed"):
            why = "smoke launch failed (the other shapes and the benchmark not run): " + why
        if why:
            lines.append(f"    {why[:180]}")
    for c in results.get("comparisons", []):
        span = c.get("predicted_speedup_range")
        pred = (f", {c['predicted_speedup']:.2f}x" + (f" [{span[0]:.2f}-{span[1]:.2f}]" if span else "")
                + f" {plan.PREDICTED_LABEL}" if c.get("predicted_speedup") else ", no prediction")
        what = "A/B" if c.get("role") == "ab-old" else "tuned vs default:"
        lines.append(f"{what} {c['kernel']} vs {c['old']}: {c['measured_speedup']:.2f}x measured"
                     + ("" if c.get("beyond_noise") else " (within noise)") + pred)
    lines.append(f"* predicted: {plan.PREDICTED_LABEL} (TF/s, or us per step; [range] from its sensitivity)"
                 + ("" if predicted_any else
                                                           " (no prediction recorded: see results.json)"))
    n_ok = sum(_status(r) == "passed" for r in results["kernels"])
    lines.append(f"{n_ok} of {len(results['kernels'])} kernels passed; results.json and run.log in {results['out']}")
    return lines


def _baseline_note(rows: list[dict]) -> str:
    skipped = [r["baseline"]["skipped"] for r in rows if (r.get("baseline") or {}).get("skipped")]
    return f"baseline skipped: {skipped[-1]}" if skipped and "raised" in skipped[-1] else ""


def _optional(env: dict, key: str, query) -> None:
    """``env[key] = query()``; a failing query is recorded under env["unavailable"][key],
    never taken for "no GPU" (a deprecated attribute, an old driver: one figure is missing)."""
    try:
        env[key] = query()
    except Exception as exc:  # noqa: BLE001 - an optional figure never decides whether there is a GPU
        env[key] = None
        env.setdefault("unavailable", {})[key] = f"{type(exc).__name__}: {exc}"[:200]


def _environment(dev) -> dict:
    """GPU, driver, CUDA, cuda-bindings, torch; clocks read with nvidia-smi where it is.
    Only the device itself (name, compute capability, SMs) decides whether there is a GPU;
    every other figure is asked for on its own."""
    env = {"python": sys.version.split()[0], "device_kind": dev.kind}
    if dev.kind != "cuda":               # porter's emulator: no GPU to ask
        env["gpu"] = dev.name
        return env
    from porter.runtime import driver

    def bindings_version():
        import cuda.bindings

        return getattr(cuda.bindings, "__version__", "?")

    _optional(env, "cuda_bindings", bindings_version)
    try:
        info = driver.device()
        env.update(gpu=info.name, compute_capability=list(info.compute_capability), sm_count=info.sm_count)
    except PorterError as exc:
        env["gpu"], env["why_no_gpu"] = None, str(exc)
    except Exception as exc:  # noqa: BLE001 - a broken driver install is "no GPU", said in one line
        env["gpu"], env["why_no_gpu"] = None, f"the driver could not be queried ({type(exc).__name__}: {exc})"
    if env.get("gpu") is not None:
        drv = driver.bindings()

        def driver_cuda():
            v = int(driver.check(driver.call(drv.cuDriverGetVersion, what="cuDriverGetVersion"), "cuDriverGetVersion"))
            return f"{v // 1000}.{v % 1000 // 10}"

        def sm_clock():
            a = drv.CUdevice_attribute
            dev0 = driver.check(drv.cuDeviceGet(0), "cuDeviceGet")
            return int(driver.check(drv.cuDeviceGetAttribute(a.CU_DEVICE_ATTRIBUTE_CLOCK_RATE, dev0),
                                    "cuDeviceGetAttribute(CLOCK_RATE)")) // 1000

        _optional(env, "driver_cuda", driver_cuda)
        _optional(env, "max_sm_clock_mhz", sm_clock)

    def torch_version():
        import torch

        env["torch_cuda"] = getattr(torch.version, "cuda", None)
        return torch.__version__

    _optional(env, "torch", torch_version)
    return env


def clocks() -> dict | None:
    """SM / memory clocks, temperature and power now (nvidia-smi), or None without it."""
    import shutil

    smi = shutil.which("nvidia-smi")
    if not smi:
        return None
    fields = "name,driver_version,clocks.sm,clocks.mem,clocks.max.sm,temperature.gpu,power.draw"
    try:
        out = subprocess.run([smi, f"--query-gpu={fields}", "--format=csv,noheader"], capture_output=True,
                             text=True, timeout=15).stdout.strip().splitlines()
    except (OSError, subprocess.SubprocessError):
        return None
    if not out:
        return None
    return dict(zip(fields.split(","), (v.strip() for v in out[0].split(","))))


def run(out: Path, script: Path, budget_s: float = BUDGET_S, prepared: Path | None = None,
        kernels: list[str] | None = None, child_limit_s: float | None = None, check_sources: bool = True) -> int:
    """The whole check; exit 0 all passed, 1 some did not, 2 bad manifest, 3 no GPU of the arch.

    Phase 1 validates every selected kernel form, each in its own child; phase 2 benchmarks
    the forms that validated in the order of ``device_plan.bench_order`` (A/B pairs first),
    skipping, with the reason, a benchmark whose estimate no longer fits the budget."""
    from porter.fsutil import atomic_write
    from porter.pipeline.work import jsonable
    from porter.runtime import driver
    from porter.runtime.device import get_device

    t_start = time.monotonic()
    folder = Path(prepared or os.environ.get(cubins.CUBIN_DIR_ENV) or cubins.checkout_root() / "build" / "device_check")
    manifest = cubins.read_manifest(folder)
    cubins.check_manifest(manifest, manifest.get("arch", ARCH), folder, sources=check_sources)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    env = dict(os.environ, **{cubins.CUBIN_DIR_ENV: str(folder.resolve()),
                              cubins.CHECKED_ENV: manifest.get("sources_sha256") or ""})
    env.pop(driver.MODULE_LOADING_ENV, None)          # each child sets MODULE_LOADING[phase] itself
    dev = get_device()
    rehearsal = bool(getattr(dev, "rehearsal", False))
    environment = _environment(dev)
    environment["clocks_before"] = clocks()
    environment["module_loading"] = dict(MODULE_LOADING)
    environment["manifest"] = {k: manifest.get(k) for k in ("porter_commit", "nvrtc", "built", "profile",
                                                             "fallback_toolchain", "fallback_note")}
    results = {"arch": manifest["arch"], "out": str(out), "environment": environment, "rehearsal": rehearsal,
               "kernels": [], "comparisons": [], "seconds": 0.0, "budget_s": budget_s,
               "tuned_vs_default": manifest.get("tuned", plan.TUNED_NOTE)}
    entries = plan.selected(manifest, kernels)

    def save():
        results["seconds"] = time.monotonic() - t_start
        atomic_write(out / "results.json", json.dumps(jsonable(results), indent=1))   # partial results survive

    with open(out / "run.log", "w") as log_file:
        printer = Printer(log_file)
        printer.logline(f"environment: {json.dumps(jsonable(environment))}")
        want = manifest.get("target")
        cc = environment.get("compute_capability") if dev.kind == "cuda" else None
        why_not = None
        if environment.get("gpu") is None:
            why_not, short = environment.get("why_no_gpu"), "no GPU"
        elif want and cc and f"sm_{cc[0]}{cc[1]}" != want.rstrip("af"):
            why_not = f"compute capability mismatch: {environment['gpu']} is {cc[0]}.{cc[1]}, the kernels are {want}"
            short = why_not
        if why_not:
            printer.say(f"{why_not}; device validation and benchmarks of {manifest['arch']} still open")
            for name, e in entries.items():
                results["kernels"].append({"name": name, "not_run": short, "checks": [], "bench": [],
                                           "level": e["level"]})
            save()
            return 3
        printer.say(f"porter device check: {len(entries)} {manifest['arch']} kernel forms on {environment['gpu']}"
                    + (" (REHEARSAL: no GPU, levels not raised)" if rehearsal else "")
                    + f"; validation first, then benchmarks; budget {budget_s:.0f} s")
        deadline = t_start + budget_s
        records = {}
        for name, entry in entries.items():                     # phase 1: validate every form
            record = {"name": name, "kernel": (entry.get("form") or {}).get("kernel", name),
                      "form": entry.get("form"), "checks": [], "bench": [], "level": entry["level"],
                      # what the toolchain established here, carried in the manifest
                      "sass_checks": entry.get("checks"), "resources": entry.get("resources")}
            records[name] = record
            results["kernels"].append(record)
            left = deadline - time.monotonic()
            if left < 10:
                record["not_run"] = f"the run's {budget_s:.0f} s budget is spent"
                continue
            limit = min(child_limit_s or entry["shapes"]["limit_s"], left)
            printer.say(f"  validate {name} (limit {limit:.0f} s):")
            _run_child(script, name, limit, env, printer, record)
            printer.flush_partial()
            record["validate_s"] = record["seconds"]
            save()
        try:
            from porter.descriptor.arch import load_arch

            arch = load_arch(manifest["arch"])
        except Exception:  # noqa: BLE001 - estimates fall back to the rates without the descriptor
            arch = None
        for item in plan.bench_order(entries):                  # phase 2: benchmarks, what decides most first
            record, entry = records[item["run"]], entries[item["run"]]
            record["decides"] = item["decides"]
            if not record.get("validated") or record.get("error") or record.get("not_run"):
                continue
            if dev.kind != "cuda":
                record["bench_skipped"] = f"benchmarks need a GPU (device is {dev.kind})"
                continue
            if not entry["shapes"].get("bench"):
                record["bench_skipped"] = "no benchmark shapes in this profile"
                continue
            left, est = deadline - time.monotonic(), plan.estimate_s(entry, "bench", arch)
            if left < 10 or est > left:
                record["bench_skipped"] = (f"the run's {budget_s:.0f} s budget leaves {max(left, 0):.0f} s, this "
                                           f"benchmark needs ~{est:.0f} s (porter's estimate)")
                continue
            limit = min(child_limit_s or entry["shapes"]["limit_s"], left)
            printer.say(f"  bench {item['run']} ({item['decides']}; limit {limit:.0f} s):")
            sub = {"checks": [], "bench": []}
            _run_child(script, item["run"], limit, env, printer, sub, phase="bench")
            printer.flush_partial()
            record["bench"] += sub["bench"]
            record["bench_s"] = sub.get("seconds")
            record["seconds"] = round(record.get("validate_s", 0) + (sub.get("seconds") or 0), 1)
            if sub.get("error"):
                record["bench_error"] = sub["error"]
            for key in ("notes", "load_notes"):
                if sub.get(key):
                    record.setdefault(key, []).extend(x for x in sub[key] if x not in record.get(key, []))
            save()
        for record in results["kernels"]:
            record["level"] = _level(record, entries[record["name"]]["level"], rehearsal, dev.kind)
        results["comparisons"] = plan.comparisons(results["kernels"], entries)
        environment["clocks_after"] = clocks()
        sdpa = {r.get("baseline", {}).get("backend") for k in results["kernels"] for r in k["bench"]
                if r.get("family") == "attention"} - {None}
        environment["sdpa_backend"] = sorted(sdpa) or None
        save()
        printer.table(table_lines(results))
    return 0 if all(_status(r) == "passed" for r in results["kernels"]) else 1


# ---- the rehearsal: prepare + run on the rehearsal GPU ------------------------------------------

# Kernels that pass, fail, fault and hang; gemm.bf16's primary cubin refused (its fallback,
# built with nvcc <= 13.0 where one is here, is loaded), and gemm.fp8 and the megakernel
# pass and are benchmarked.
REHEARSAL_BEHAVIOURS = "attention.hd64=fail,attention.hd64.causal=fault,attention.hd128.causal=hang"
REHEARSAL_REFUSED = "gemm.bf16"
# The GPU machine's cuda-bindings (13.0 says a missing libcuda with another error type than
# 13.1+); PORTER_GPU_BINDINGS names a folder holding it for the rehearsal.
GPU_MACHINE_BINDINGS = "13.0"
GPU_BINDINGS_ENV = "PORTER_GPU_BINDINGS"


def rehearse(out: Path, script: Path, budget_s: float = BUDGET_S, kernels: list[str] | None = None,
             child_limit_s: float | None = None, ab: list[str] | None = None, snapshot: bool = False) -> int:
    """``prepare --profile rehearsal`` then ``run`` against porter.runtime.fakedriver (every
    driver call through the real binding's argument conversion), with kernels that pass,
    fail, fault and hang (PORTER_REHEARSAL, default REHEARSAL_BEHAVIOURS), a refused primary
    cubin (PORTER_REHEARSAL_REFUSE, default REHEARSAL_REFUSED) that falls back to its nvcc
    cubin, and the manifest's source check. Exit as ``run``.

    ``snapshot``: first copy the folders a GPU machine receives (SNAPSHOT_FOLDERS) under
    ``out/checkout`` and rehearse there, as the GPU machine runs on a copy: other people's
    edits of a shared checkout cannot make the manifest stale halfway through."""
    from porter.runtime import fakedriver
    from porter.runtime.device import DEVICE_ENV

    out = Path(out)
    if snapshot:
        return _rehearse_snapshot(out, budget_s, kernels, child_limit_s, ab)
    os.environ[DEVICE_ENV] = "porter.runtime.fakedriver:rehearsal_device"
    os.environ.setdefault(fakedriver.REHEARSAL_ENV, REHEARSAL_BEHAVIOURS)
    os.environ.setdefault(fakedriver.REFUSE_ENV, REHEARSAL_REFUSED)
    os.environ.setdefault(fakedriver.TIMEOUT_ENV, "2")
    os.environ.setdefault("PORTER_WARMUP_MS", "20")       # the rehearsal GPU computes on the host
    # ... with small matrices, where a BLAS thread pool on a busy machine costs 100x
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    import cuda.bindings

    version = getattr(cuda.bindings, "__version__", "?")
    print(f"rehearsal with cuda-bindings {version} ({Path(cuda.bindings.__file__).parent})"
          + ("" if version.startswith(GPU_MACHINE_BINDINGS) else
             f"; the GPU machine has {GPU_MACHINE_BINDINGS}: {GPU_BINDINGS_ENV}=DIR rehearses with it "
             f"(pip install --target DIR cuda-bindings=={GPU_MACHINE_BINDINGS}.3)"), flush=True)
    refused = [k for k in os.environ[fakedriver.REFUSE_ENV].split(",") if k]
    rc = prepare(out / "prepared", profile="rehearsal", fallback=bool(refused), kernels=kernels, ab=ab,
                 fallback_kernels=refused or None)
    if rc:
        return rc
    # prepare and run back to back, the source check on: a file changed in between (another
    # person's edit of a shared checkout) is named, as it would be on the GPU machine
    return run(out / "results", script, budget_s, prepared=out / "prepared", kernels=kernels,
               child_limit_s=child_limit_s, check_sources=True)


SNAPSHOT_FOLDERS = ("porter", "templates", "kernels_src", "arch", "benchmarks", "validation", "tuning")


def _rehearse_snapshot(out: Path, budget_s, kernels, child_limit_s, ab) -> int:
    import shutil

    root, dest = cubins.checkout_root(), Path(out) / "checkout"
    shutil.rmtree(dest, ignore_errors=True)
    for folder in SNAPSHOT_FOLDERS:
        if (root / folder).is_dir():
            shutil.copytree(root / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    cmd = [sys.executable, str(dest / "benchmarks" / "device_check.py"), "rehearse", "--out", str(Path(out).resolve()),
           "--budget", str(budget_s)]
    cmd += ["--kernels", *kernels] if kernels else []
    cmd += ["--child-limit", str(child_limit_s)] if child_limit_s else []
    for item in ab or ():
        cmd += ["--ab", item]
    env = dict(os.environ)
    if os.environ.get(GPU_BINDINGS_ENV):       # the GPU machine's cuda-bindings, first on the path
        env["PYTHONPATH"] = os.pathsep.join(filter(None, (os.environ[GPU_BINDINGS_ENV], env.get("PYTHONPATH"))))
    print(f"rehearsing on a copy of the checkout in {dest}", flush=True)
    return subprocess.run(cmd, cwd=str(dest), env=env).returncode
