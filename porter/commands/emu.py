"""``porter emu run FILE.cu|FILE.ptx``: run your own kernel in porter's PTX simulator.

A ``.cu`` file is compiled with NVRTC for ``--arch`` (with line info, so every message names
the .cu line beside the PTX line); a ``.ptx`` file runs as it is. ``--harness harness.py``
builds the arguments and the expected outputs (``porter.runtime.emulated_harness`` documents
the file); it runs in a child process under ``--harness-timeout``. The command prints what ran,
each check and the simulator's diagnostics. Results are "emulated": executed in porter's PTX
simulator, not on a GPU.

Exit codes: 0 the kernel ran cleanly and every check passed; 1 a check failed, a checker
fired or the kernel deadlocked; 2 bad input (a file, a flag, the harness, a PTX form the
simulator does not implement).
"""

from __future__ import annotations

import re
from pathlib import Path

EMULATED_NOTE = "executed in porter's PTX simulator, not on a GPU"


def register(sub) -> None:
    p = sub.add_parser("emu", help="run your own kernel (.cu or .ptx) in porter's PTX simulator",
                       description="Run kernels in porter's PTX simulator (results are emulated: not on a GPU).")
    emu_sub = p.add_subparsers(dest="emu_command", metavar="SUBCOMMAND")
    p.set_defaults(func=lambda args: _missing_subcommand(p))
    r = emu_sub.add_parser("run", help="run FILE.cu or FILE.ptx with the arguments a harness builds",
                           description="Run FILE.cu (compiled with NVRTC for --arch) or FILE.ptx in porter's PTX "
                                       "simulator with the arguments --harness builds, and check the outputs "
                                       "against its reference; exit 0 passed, 1 a check failed or a checker "
                                       "fired, 2 bad input.")
    r.add_argument("file", metavar="FILE.cu|FILE.ptx")
    r.add_argument("--entry", help="the kernel (.entry) to run (default: the file's only kernel)")
    r.add_argument("--grid", type=_dim3, help="CTAs: X or X,Y,Z (default 1)")
    r.add_argument("--block", type=_dim3, help="threads per CTA: X or X,Y,Z (default: the kernel's .reqntid/.maxntid, "
                                               "else 128)")
    r.add_argument("--cluster", type=_dim3, help="CTAs per cluster: X or X,Y,Z (default: the kernel's "
                                                 ".reqnctapercluster, else 1)")
    r.add_argument("--smem", type=_nonneg, help="dynamic shared memory in bytes (default 0)")
    r.add_argument("--arch", help="NVRTC target for a .cu file (sm_90a, sm_100a, ...) or a descriptor name "
                                  "(hopper, blackwell, ...)")
    r.add_argument("--harness", metavar="HARNESS.py", help="builds the arguments and the expected outputs "
                                                             "(see porter.runtime.emulated_harness)")
    r.add_argument("--seed", type=int, default=0, help="seed of the harness's random inputs and of the simulator's "
                                                       "warp order (default 0; negative: plain round-robin order)")
    r.add_argument("--harness-timeout", type=float, default=60.0, metavar="SECONDS",
                   help="time limit for the harness's arguments() and reference() (default 60)")
    r.add_argument("--relax", action="append", default=[], metavar="RULE",
                   help="report this PTX ISA rule's errors as warnings and run on (repeatable; rules: "
                        "tcgen05-fences, the fences around a TMEM hand-off between threads, which CUTLASS's sm100 "
                        "kernels and Triton's sm_100a tl.dot omit; tmem-lanes, a tcgen05.ld/st lane field outside "
                        "the warp's lane quarter, routed as release hardware does, as DeepGEMM's sm100 epilogues "
                        "need)")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    r.set_defaults(func=run)


def _missing_subcommand(parser) -> int:
    parser.print_help()
    return 2


def _dim3(text: str) -> tuple[int, int, int]:
    import argparse

    parts = [x for x in re.split(r"[,x ]", text.strip()) if x]
    try:
        dims = [int(x) for x in parts]
    except ValueError:
        dims = []
    if not 1 <= len(dims) <= 3 or any(d < 1 for d in dims):
        raise argparse.ArgumentTypeError(f"{text!r}: give X or X,Y,Z with positive integers")
    return tuple(dims + [1] * (3 - len(dims)))


def _nonneg(text: str) -> int:
    import argparse

    try:
        v = int(text)
    except ValueError:
        v = -1
    if v < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: give a number of bytes, 0 or more")
    return v


# ---- the command ---------------------------------------------------------------------------

def run(args) -> int:
    from porter.emu.errors import CheckFailed, Deadlock, EmuError, Unsupported
    from porter.errors import PorterError
    from porter.runtime.emulated_harness import HarnessSpec, judge, run_harness

    path = Path(args.file)
    if path.suffix not in (".cu", ".ptx"):
        raise PorterError(f"{args.file}: give a .cu or .ptx file")
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise PorterError(f"{args.file}: no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise PorterError(f"{args.file}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    from porter.emu.launch_args import RELAXABLE, unrelaxable
    bad = unrelaxable(args.relax)
    if bad:
        raise PorterError(f"--relax {bad[0]}: not a rule porter can relax (rules: {', '.join(RELAXABLE)})")
    if args.harness_timeout <= 0:
        raise PorterError(f"--harness-timeout {args.harness_timeout:g}: give a positive number of seconds")

    # the harness's inputs are seeded by --seed even when a negative seed asks for plain warp order
    spec = run_harness(args.harness, max(args.seed, 0), args.harness_timeout) if args.harness else \
        HarnessSpec([], {}, {}, {}, {}, False)
    opt = {k: getattr(args, k) for k in ("entry", "grid", "block", "cluster", "smem", "arch")}
    for key, value in spec.launch.items():          # the harness's LAUNCH defaults; flags win
        if opt[key] is None:
            opt[key] = _dim3(str(value).strip("()[] ")) if key in ("grid", "block", "cluster") else value

    ptx_text, ptx_file, regs, target = _ptx(path, text, opt["arch"])
    from porter import emu
    from porter.emu import srcloc
    from porter.emu.launch import _parse

    try:
        module = _parse(ptx_text, ptx_file)
    except EmuError as exc:
        raise srcloc.with_source(exc, ptx_text, ptx_file) from None
    entry = opt["entry"]
    if entry is None:
        if len(module.kernels) != 1:
            raise PorterError(f"{path.name}: {len(module.kernels)} kernels ({', '.join(module.kernels) or 'none'}); "
                              "name one with --entry")
        entry = next(iter(module.kernels))
    elif entry not in module.kernels:
        raise PorterError(f"{path.name}: no kernel {entry!r} (kernels: {', '.join(module.kernels) or 'none'})")
    kernel = module.kernels[entry]
    if kernel.params and not args.harness:
        raise PorterError(f"{entry} takes {len(kernel.params)} parameters: give --harness HARNESS.py that builds "
                          "them (see porter.runtime.emulated_harness)")
    if len(spec.args) != len(kernel.params):
        raise PorterError(f"{args.harness}: arguments() returned {len(spec.args)} arguments; {entry} takes "
                          f"{len(kernel.params)} ({', '.join(p.name for p in kernel.params)})")
    declared = kernel.reqntid or kernel.maxntid
    block = opt["block"] or (tuple(declared) + (1,) * (3 - len(declared)) if declared else (128, 1, 1))
    grid = opt["grid"] or (1, 1, 1)
    cluster = opt["cluster"] or (tuple(kernel.cluster) + (1,) * (3 - len(kernel.cluster)) if kernel.cluster
                                 else (1, 1, 1))
    smem = int(opt["smem"] or 0)
    report = {"file": str(path), "ptx": ptx_file, "entry": entry, "target": target, "grid": list(grid),
              "block": list(block), "cluster": list(cluster), "smem": smem, "seed": args.seed,
              "note": EMULATED_NOTE, "summary": None, "checks": [], "diagnostics": [], "passed": False,
              "relaxed": sorted(set(args.relax))}
    arch_note = _arch_note(path, opt["arch"], target)
    if arch_note:
        report["arch_note"] = arch_note
    try:
        res = emu.launch(ptx_text, entry, grid, block, spec.args, cluster=cluster, smem=smem, seed=args.seed
                         if args.seed >= 0 else None, regs_per_thread=regs.get(entry), file=ptx_file,
                         relax=args.relax)
    except Unsupported:
        raise
    except (CheckFailed, Deadlock) as exc:          # a checker fired, a deadlock: the kernel's diagnostics
        report["diagnostics"].append(str(exc))
        return _finish(report, args.json)
    except EmuError as exc:
        if not getattr(exc, "located", False):      # refused before any warp ran: the launch does not fit
            raise PorterError(f"{Path(args.harness).name if args.harness else path.name}: {exc}") from None
        report["diagnostics"].append(str(exc))      # raised by an instruction: the kernel's own fault
        return _finish(report, args.json)
    report["summary"] = res.summary.to_dict()
    report["warnings"] = list(res.warnings)     # rules the PTX ISA does not state: reported, never failing
    report["checks"] = judge(spec, res.outputs)
    report["has_reference"] = spec.has_reference
    report["tolerance"] = spec.tolerance
    report["passed"] = all(c["passed"] for c in report["checks"]) and not _errors(report)
    return _finish(report, args.json)


def _errors(report) -> bool:
    return report["summary"] is None


def _ptx(path: Path, text: str, arch: str | None) -> tuple[str, str, dict, str]:
    """(PTX text, the name messages give it, registers per thread by kernel from ptxas, target)."""
    from porter.errors import PorterError

    if path.suffix == ".ptx":
        m = re.search(r"^\s*\.target\s+(\w+)", text, re.M)
        return text, path.name, {}, m.group(1) if m else "?"
    if not arch:
        raise PorterError(f"{path.name}: give --arch (an NVRTC target such as sm_90a, or a descriptor such as hopper)")
    target = _target_of(arch)
    from porter.compile import sass as sasslib
    from porter.compile.toolchain import compile_cuda

    compiled = compile_cuda(text, target, name=path.name)        # -lineinfo is in porter's default options
    res = sasslib.resource_usage(compiled.cubin, compiled.log)
    regs = {name: r.registers for name, r in res.items()}
    return compiled.ptx, path.with_suffix(".ptx").name, regs, target


def _target_of(arch: str | None) -> str | None:
    """The NVRTC target ``arch`` names (itself, or a descriptor's target)."""
    if not arch or re.fullmatch(r"sm_\d+[af]?", arch):
        return arch
    from porter.descriptor.arch import load_arch

    return load_arch(arch).target


def _arch_note(path: Path, arch: str | None, target: str) -> str | None:
    """For a .ptx run with an --arch (or LAUNCH arch) other than the file's own .target: one
    line saying which one the run used (the PTX is not recompiled; its .target stands)."""
    if path.suffix != ".ptx" or not arch:
        return None
    want = _target_of(arch)
    if want == target:
        return None
    return (f"note: {path.name} runs as written for its .target {target}; --arch {arch}"
            f"{f' ({want})' if want != arch else ''} only chooses the NVRTC target of a .cu file")


def _finish(report: dict, as_json: bool) -> int:
    import json

    from porter.pipeline.work import jsonable

    if as_json:
        print(json.dumps(jsonable(report), indent=1))
    else:
        print(_text(report))
    if report["summary"] is None:
        return 1
    return 0 if report["passed"] else 1


def _text(r: dict) -> str:
    dims = lambda d: "x".join(map(str, d))  # noqa: E731
    lines = [f"{r['entry']} from {r['file']} ({r['target']}): grid {dims(r['grid'])}, block {dims(r['block'])}, "
             f"cluster {dims(r['cluster'])}, {r['smem']} B dynamic shared memory, seed {r['seed']}"]
    if r.get("arch_note"):
        lines.append(r["arch_note"])
    if r.get("relaxed"):
        lines.append(f"relaxed: {', '.join(r['relaxed'])} (these PTX ISA rules' errors are reported as warnings)")
    s = r["summary"]
    if s is not None:
        lines.append(f"ran: {s['warp_instructions']:,} warp-instructions ({s['thread_instructions']:,} "
                     f"thread-instructions), {s['ctas']} CTAs, {s['warps']} warps, {s['wgmma']} wgmma, {s['tma']} TMA, "
                     f"{s['seconds']:.2f} s")
    if r["checks"]:
        lines.append("checks:")
        tol = r.get("tolerance") or {}
        for c in r["checks"]:
            head = f"  argument {c['argument']} ({dims(c['shape'])} {c['dtype']}): "
            if c["passed"]:
                lines.append(head + f"passed, max abs err {c['max_abs_err']:.3g} (atol {tol.get('atol'):g}, "
                             f"rtol {tol.get('rtol'):g})")
            else:
                lines.append(head + f"FAILED: {c['message']}")
    elif s is not None:
        lines.append("checks: none (the harness defines no reference(); the run only shows the kernel runs cleanly)")
    if r["diagnostics"]:
        lines.append("diagnostics:")
        for d in r["diagnostics"]:
            lines += ["  " + x for x in d.splitlines()]
    else:
        lines.append("diagnostics: none (no checker fired, no deadlock)")
    if r.get("warnings"):
        lines.append("warnings (the run is not failed for them; each says why):")
        lines += ["  " + w for w in r["warnings"]]
    if s is None:
        verdict = "failed in the simulator"
    else:
        verdict = "passed" if r["passed"] else "failed"
    lines.append(f"{verdict}: {r['note']}")
    return "\n".join(lines)
