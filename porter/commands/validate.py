"""``porter validate ARCH --kernel FAMILY|NAME``: run kernels on a GPU against the references.

Each selected kernel runs on device 0 at several shapes with fresh random inputs and
poisoned outputs, and every output is judged by the variant's tolerance policy
(``porter.runtime.harness``). The GPU must be the descriptor's: a sm_100a
kernel is refused on a compute capability 9.0 GPU, with the reason.

``--device``: ``on`` fails (exit 3, one line) without a matching GPU; ``auto`` (the
default) says "skipped: ..." and exits 0; ``off`` runs no kernel: it builds each
kernel (render, NVRTC, SASS and limit checks) and runs the family's CPU model of its
arithmetic at shapes the kernel takes, and reports the level that establishes
(numerics-model at most), saying plainly that no kernel ran.
Exit codes: 0 passed (or skipped), 1 a check failed, 2 bad input, 3 no matching GPU
with --device on.

Kernel selection, shape parsing and the device decision live in
``porter.commands.device_common``, shared with ``porter bench``.
"""

from __future__ import annotations

from porter.commands.device_common import EXIT_CODES, SHAPE_FORMS

DEVICE_MODES = ("auto", "on", "off", "emu")


def register(sub) -> None:
    p = sub.add_parser("validate", help="run kernels on a GPU of the arch against the CPU references",
                       description=f"Run kernels on a GPU of the arch against the CPU references; {EXIT_CODES}.")
    p.add_argument("arch", help="descriptor name or path (the GPU must have its compute capability)")
    p.add_argument("--kernel", metavar="FAMILY|NAME",
                   help="a family (gemm, attention, megakernel) or one kernel, e.g. gemm.bf16 (default: every kernel)")
    p.add_argument("--device", choices=DEVICE_MODES, default="auto",
                   help="on: fail without a matching GPU (exit 3); auto (default): skip without one (exit 0); "
                        "off: no kernel runs: build each kernel and run the CPU model of its arithmetic; "
                        "emu: run each kernel's PTX in porter's simulator (level emulated: not on a GPU)")
    p.add_argument("--source", metavar="FILE.cu",
                   help="with --device emu and one kernel: build this edited copy of the rendered kernel "
                        "(porter kernel render) instead of the template, and validate it in the simulator")
    p.add_argument("--shapes", "--shape", dest="shapes", nargs="+", metavar="SHAPE", help="; ".join(f"{k}: {v}" for k, v in SHAPE_FORMS.items()))
    p.add_argument("--seeds", type=int, default=2, help="fresh random inputs per shape (default 2)")
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    # Limits a requested run is checked against before it starts (porter.runtime.run_budget).
    p.add_argument("--max-host-gb", type=_positive, metavar="GB",
                   help="refuse shapes whose host arrays (inputs, outputs, fp64 references) would need more "
                        "(default: half this machine's memory)")
    p.add_argument("--time-limit", type=_seconds, metavar="SECONDS",
                   help="with --device emu: wall-clock seconds one simulated run may take; a run estimated "
                        "beyond it is refused, one that runs past it is stopped naming the PTX line its warps "
                        "were at (default: PORTER_EMU_TIME_LIMIT, else 120; 0: no limit)")
    p.add_argument("--quiet", "-q", action="store_true", help="no per-kernel progress on stderr")
    from porter.kernels.knobs import add_set_argument

    add_set_argument(p)   # --set KEY=VALUE: knobs, applied to the kernels that have them
    from porter.tuning.engine import add_executor_arguments

    add_executor_arguments(p, "the simulator's runs (--device emu)")
    p.set_defaults(func=run)


def _positive(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not value > 0 or value == float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: give a positive number")
    return value


def _seconds(text: str) -> float:
    import argparse

    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 <= value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text}: give 0 (no limit) or a positive number of seconds")
    return value


# ---- the command ---------------------------------------------------------------------------

def run(args) -> int:
    import json

    from porter.descriptor.arch import load_arch
    from porter.commands.device_common import (check_shapes, decide_device, isolated, one_family, parse_shapes,
                                               select_kernels, skipped_line)
    from porter.errors import PorterError
    from porter.pipeline.work import jsonable

    if args.seeds < 1:
        raise PorterError(f"--seeds {args.seeds}: need at least one seed")
    arch = load_arch(args.arch)
    if args.kernel is None:
        if args.shapes:
            raise PorterError("--shapes: name the family or kernel they are for with --kernel")
        from porter import kernels

        from porter.kernels.base import Unsupported

        specs, unsupported = [], []
        for fam in kernels.FAMILIES:   # a family with nothing on this arch is listed, not an error
            every = list(kernels.family_module(fam).variants(arch))
            specs += [s for s in every if not isinstance(s, Unsupported)]
            unsupported += [s for s in every if isinstance(s, Unsupported)]
        shapes = None
        family = None
        specs = _knobbed(arch, specs, args)
    else:
        specs, unsupported = select_kernels(arch, args.kernel)
        specs = _knobbed(arch, specs, args)
        family = one_family(specs)
        shapes = parse_shapes(family, args.shapes, "validate")
        check_shapes(specs, shapes)
        from porter.runtime.run_budget import check_host_memory

        check_host_memory(specs, shapes, getattr(args, "max_host_gb", None))   # before any array exists
    if args.source and args.device != "emu":
        raise PorterError("--source runs an edited kernel in the simulator: give --device emu with it")
    if args.device == "emu":
        return _emulate(args, arch, specs, unsupported, shapes)
    dev, reason = decide_device(arch, args.device)
    if dev is None and args.device == "auto":
        if args.json:   # --json means JSON on every path, the skipped one included
            print(json.dumps({"arch": arch.name, "target": arch.target, "device": None, "mode": args.device,
                              "skipped": True, "reason": skipped_line(reason, specs, family, arch),
                              "results": [], "unsupported": [u.to_dict() for u in unsupported],
                              "passed": None}, indent=1))
        else:
            print(skipped_line(reason, specs, family, arch))
        return 0
    if args.device == "off":
        if shapes:
            raise PorterError("--shapes with --device off: the CPU model runs at shapes chosen for each kernel's "
                              "tiles; drop --shapes, or give --device on|auto to run the kernels at them")
        results = [_cpu_model_only(spec, arch) for spec in specs]
    else:
        from porter.runtime import harness

        results = [isolated(harness.validate, spec, arch, None, shapes, args.seeds) for spec in specs]
    report = {"arch": arch.name, "target": arch.target, "device": dev, "mode": args.device,
              "results": results, "unsupported": [u.to_dict() for u in unsupported],
              "passed": all(r["passed"] for r in results)}
    if args.json:
        print(json.dumps(jsonable(report), indent=1))
    else:
        print(_text(report))
    return 0 if report["passed"] else 1


def _knobbed(arch, specs, args):
    """The specs with ``--set`` applied (porter.kernels.knobs.apply_knobs; notes on stderr)."""
    from porter.commands.kernel import with_knobs

    return with_knobs(arch, specs, args) if getattr(args, "knobs", None) else specs


def _emulate(args, arch, specs, unsupported, shapes) -> int:
    """--device emu: every selected kernel's PTX run in porter's simulator against the
    fp64 references, with the device harness's own inputs, poisoning and judging."""
    import json
    from pathlib import Path

    from porter.runtime.emulated_runs import EMULATED_NOTE, emulate
    from porter.errors import PorterError
    from porter.pipeline.work import jsonable

    source = None
    if args.source:
        if len(specs) != 1:
            raise PorterError(f"--source {args.source}: select exactly one kernel with --kernel "
                              f"({len(specs)} selected: {', '.join(s.name for s in specs[:4])})")
        path = Path(args.source)
        if not path.is_file():
            raise PorterError(f"--source {args.source}: no such file")
        try:
            source = path.read_bytes().decode("utf-8")
        except UnicodeDecodeError as exc:
            line = path.read_bytes()[:exc.start].count(b"\n") + 1
            raise PorterError(f"--source {args.source}:{line}: not UTF-8 text (byte 0x{exc.object[exc.start]:02x} "
                              f"at offset {exc.start}); save the file as UTF-8") from None
    from porter.runtime.emulated import EmuDevice, time_limit_s

    limit = time_limit_s(getattr(args, "time_limit", None))
    progress = _Progress(len(specs), quiet=getattr(args, "quiet", False) or False)
    if shapes:   # how long the requested shapes take, before running them (refused beyond the limit)
        from porter.runtime.run_budget import check_emulation_time, emulation_estimate

        measured: dict = {}

        def calibrate(spec, arch, shape):   # once per kernel: its smallest case, timed here
            if spec.name not in measured:
                r = emulate(spec, arch, shapes=[shape], seeds=1, source=source,
                            device=EmuDevice(time_limit=limit or 0))
                runs = r.get("runs") or []
                measured[spec.name] = (sum(x["warp_instructions"] for x in runs), sum(x["seconds"] for x in runs))
            return measured[spec.name]

        for spec in specs:
            for shape in shapes:
                said = check_emulation_time(spec, shape, emulation_estimate(spec, arch, shape, calibrate), limit)
                progress.say(said)
    on_executor = _emulate_on_executor(args, arch, specs, shapes, source, limit)
    results, not_emulated = [], []
    for spec in specs:
        progress.start(spec.name)
        r = on_executor[spec.name] if on_executor is not None else emulate(
            spec, arch, shapes=shapes, seeds=args.seeds, source=source, device=EmuDevice(time_limit=limit or 0))
        progress.done(spec.name, r)
        if r["status"] == "not-emulated":
            not_emulated.append(r)
            continue
        r["level"] = r["level"] or "failed in the simulator"
        r["error"] = r["reason"] if r["status"] == "failed" else ""
        r["note"] = EMULATED_NOTE + (f"; built from {args.source}" if source else "")
        results.append(r)
    if not results:
        # every selected kernel needs a PTX form the simulator lacks: input it cannot take (exit 2)
        r = not_emulated[0]
        raise PorterError(f"{r['name']}: not emulated: {r['reason'].splitlines()[0]}"
                          + (f" (and {len(not_emulated) - 1} more kernels)" if len(not_emulated) > 1 else ""))
    device = {"index": None, "name": "porter PTX simulator (emulated, not a GPU)"}
    report = {"arch": arch.name, "target": arch.target, "device": device, "mode": "emu", "results": results,
              "not_emulated": [{"name": r["name"], "reason": r["reason"]} for r in not_emulated],
              "unsupported": [u.to_dict() for u in unsupported], "passed": all(r["passed"] for r in results)}
    if args.json:
        print(json.dumps(jsonable(report), indent=1))
    else:
        text = _text(report)
        lines = [f"{r['name']}: not emulated: {r['reason'].splitlines()[0]}" for r in not_emulated]
        print(text if not lines else text.rsplit("\n", 1)[0] + "\n" + "\n".join(lines) + "\n" + text.rsplit("\n", 1)[1])
    return 0 if report["passed"] else 1


def _emulate_on_executor(args, arch, specs, shapes, source, limit) -> dict | None:
    """With --executor ray: every kernel's simulator run as one Ray task (the same function
    the local path calls), name -> result; None for the local path."""
    if getattr(args, "executor", "local") == "local" and not getattr(args, "address", None):
        return None
    from porter.errors import PorterError
    from porter.pipeline.work import emulate_unit
    from porter.tuning.engine import make_executor, Task

    executor = make_executor(args.executor, args.address)
    try:
        tasks = [Task(key=s.name, fn=f"{emulate_unit.__module__}:{emulate_unit.__name__}", label=s.name,
                      timeout_s=float(limit or 3600) + 60,
                      payload={"spec": s.to_dict(), "arch": arch, "shapes": shapes, "seeds": args.seeds,
                               "source": source, "time_limit": limit or 0}) for s in specs]
        done = executor.run(tasks)
    finally:
        executor.close()
    bad = next((o for o in done.values() if not o.ok), None)
    if bad is not None:
        raise PorterError(f"{bad.label}: {bad.status} on Ray after {bad.attempts} attempts: {bad.error}")
    return {k: o.result for k, o in done.items()}


class _Progress:
    """Per-kernel progress on stderr while the simulator runs (stdout keeps the report):
    a live line in a terminal, one line per finished kernel otherwise, as porter target."""

    def __init__(self, total: int, quiet: bool):
        import sys

        from rich.console import Console

        self.total, self.quiet, self.n = total, quiet, 0
        self.console = Console(stderr=True, soft_wrap=True, highlight=False)
        self.live = self.console.is_terminal and not quiet
        self.status = None
        self._stderr = sys.stderr

    def say(self, line: str) -> None:
        if line and not self.quiet:
            print(line, file=self._stderr, flush=True)

    def start(self, name: str) -> None:
        self.n += 1
        if self.live:
            self.status = self.console.status(f"[{self.n}/{self.total}] {name}: running in porter's PTX simulator")
            self.status.start()

    def done(self, name: str, r: dict) -> None:
        if self.status is not None:
            self.status.stop()
            self.status = None
        if not self.quiet:
            why = f": {r['reason'].splitlines()[0]}" if r["status"] != "passed" and r.get("reason") else ""
            self.say(f"[{self.n}/{self.total}] {name}: {r['status']} ({r['seconds']:.1f} s){why}")


def _cpu_model_only(spec, arch) -> dict:
    """--device off: build the kernel (no run), then the family's CPU model of its
    arithmetic. The level is what those establish: the build's, raised to
    numerics-model only when the build is sass-checked and the model within tolerance."""
    from porter.commands.device_common import level_reached
    from porter.kernels import family_module
    from porter.levels import Level

    level, stopped_by = level_reached(spec, arch)
    try:
        raw, error = family_module(spec.family).numerics(spec, arch), ""
    except Exception as exc:  # noqa: BLE001 - the reference raising is a failed check, reported as such
        raw, error = None, f"CPU model raised {type(exc).__name__}: {exc}"
    model_ok = raw is not None and bool(raw.get("passed"))
    result = {"name": spec.name, "variant": spec.variant, "numerics": raw,
              "passed": level >= Level.SASS_CHECKED and model_ok,
              "level": (Level.NUMERICS_MODEL if level >= Level.SASS_CHECKED and model_ok else level).label,
              "note": error or model_note(raw)}
    if level < Level.SASS_CHECKED:
        result["error"] = f"the kernel's build stops at {level.label}: {stopped_by}"
    return result


def model_note(raw) -> str:
    """What the CPU model showed, in the words "CPU model only: 3 shapes x 2 seeds within
    tolerance; no kernel ran" (or which case failed)."""
    from porter.report.build import numerics_cases, raw_cases

    if raw is None:
        return "no CPU model for this kernel; no kernel ran"
    cases = raw_cases(raw)
    if cases and all("shape" in c for c in cases):
        shapes = {repr(c["shape"]) for c in cases}
        what = f"{len(shapes)} shapes" + (f" x {len(cases) // len(shapes)} seeds" if len(cases) > len(shapes) else "")
    else:
        what = f"{len(cases)} cases"
    if raw.get("passed"):
        return f"CPU model only: {what} within tolerance; no kernel ran"
    bad = [c for c in numerics_cases(raw) if c["passed"] is False]
    worst = max(bad, key=lambda c: c["error"] / c["tolerance"] if c["tolerance"] else c["error"], default=None)
    detail = (f" (worst {worst['label']}: {worst['measure']} {worst['error']:.3g}"
              + (f", allowed {worst['tolerance']:.3g})" if worst["tolerance"] is not None else ")")) if worst else ""
    why = raw.get("error") or f"{len(bad)} of {len(cases)} cases outside tolerance{detail}"
    return f"CPU model of {what} FAILED: {why}; no kernel ran"


def _check_line(c: dict) -> str:
    where = c.get("shape") or (f"{c['model']} position {c.get('pos')}" if "model" in c else None)
    if isinstance(where, dict):
        where = "x".join(str(v) for v in where.values())
    elif isinstance(where, (list, tuple)):
        where = "x".join(map(str, where))
    bits = [f"{'pass' if c['passed'] else 'FAIL'} {where} seed {c.get('seed')}"]
    for key in ("rel_fro_err", "worst_ratio", "deepgemm_diff", "max_abs_err", "allowed_err", "logits_rel_err"):
        if key in c and isinstance(c[key], float):
            bits.append(f"{key} {c[key]:.3g}")
    written = c.get("written")
    for w in written if isinstance(written, list) else [written] if written else []:
        if not w["passed"]:
            bits.append(f"{w['unwritten']} of {w['elements']} {w['what']} elements unwritten")
    for m in (c.get("mismatches") or []) if not c["passed"] else []:   # the first bad element, in its terms
        from porter.validation.device_harness import describe_mismatch

        bits.append(describe_mismatch(m))
    return "  " + ", ".join(bits)


def _text(report: dict) -> str:
    dev = report["device"]
    head = f"{report['arch']} ({report['target']})"
    if dev:
        head += f" on {dev['name']}" if dev.get("index") is None else f" on device {dev['index']} {dev['name']}"
    lines = [f"validate {head}"]
    for r in report["results"]:
        lines.append(f"{r['name']}: {'passed' if r['passed'] else 'FAILED'} (level {r['level']})"
                     + (f": {r['error']}" if r.get("error") else "") + (f"; {r['note']}" if r.get("note") else ""))
        lines += [_check_line(c) for c in r.get("checks", [])]
        lines += [f"  warning: {w}" for w in r.get("warnings") or []]    # --device emu: no ISA rule broken
    for u in report["unsupported"]:
        lines.append(f"{u['name']}: unsupported on {report['arch']} ({u['reason'] or 'needs ' + ', '.join(u['missing'])})")
    n = len(report["results"])
    ok = sum(r["passed"] for r in report["results"])
    lines.append(f"{ok} of {n} kernel(s) passed")
    return "\n".join(lines)
