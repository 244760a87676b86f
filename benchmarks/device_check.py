"""One prepared device check: validate and benchmark the Hopper GEMM, attention and megakernel.

Two phases, so a lent H200's minutes go to running kernels, not compiling them:

    python benchmarks/device_check.py prepare     # here, no GPU: NVRTC-build every Hopper
                                                  # kernel into build/device_check/ (cubins + manifest)
    python3 benchmarks/device_check.py run        # on the GPU machine, in ONE device call

``run`` executes the user-facing commands, each in a child process (``porter validate
hopper --kernel F --device on --json`` and ``porter bench hopper --kernel F --json`` for
F in gemm, attention, megakernel) with ``PORTER_CUBIN_DIR`` pointing at the prepared cubins
(a kernel whose spec changed since ``prepare`` is rebuilt there), writes every result
as JSON under ``$OUT`` (or build/device_check/out), and prints a short table last.
The device machine's python3 has no porter install: this script puts the checkout on
``sys.path`` and maps ``porter.validation`` onto ``validation/`` itself.

The device call (carry the prepared folder; about 5 minutes on an H200):

    run(command="python3 benchmarks/device_check.py run", carry=["build/device_check"], timeout_s=560)

Each step runs as a child process with its own time limit, all within ``--budget``
seconds (480 by default), so one hung kernel cannot eat the whole lease.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PREPARED = ROOT / "build" / "device_check"
ARCH = "hopper"
# (command, family, extra arguments): attention is benchmarked at head dim 128 as the
# GEMM issue asks (batch 4, 16 heads, seq 4096 and 16384: the harness defaults).
# The last number is the step's time limit in seconds (a hung kernel is killed there).
STEPS = (
    ("validate", "gemm", ["--device", "on", "--seeds", "2"], 120),
    ("bench", "gemm", ["--device", "on"], 90),
    ("validate", "attention", ["--device", "on", "--seeds", "1"], 120),
    ("bench", "attention.hd128", ["--device", "on"], 90),
    ("bench", "attention.hd128.causal", ["--device", "on"], 90),
    ("validate", "megakernel", ["--device", "on", "--seeds", "2"], 60),
    ("bench", "megakernel", ["--device", "on"], 90),
)


def _import_porter() -> None:
    """Make ``porter`` and ``porter.validation`` importable from this checkout."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))
    try:
        import porter.validation  # noqa: F401  (installed, or an editable install)
        return
    except ModuleNotFoundError:
        pass
    spec = importlib.util.spec_from_file_location(
        "porter.validation", ROOT / "validation" / "__init__.py",
        submodule_search_locations=[str(ROOT / "validation")])
    module = importlib.util.module_from_spec(spec)
    sys.modules["porter.validation"] = module
    spec.loader.exec_module(module)
    import porter

    porter.validation = module


def prepare(out: Path = PREPARED) -> int:
    """Build every supported kernel of the three families for ARCH; write cubins + manifest."""
    _import_porter()
    from porter.arch import load_arch
    from porter.fsutil import atomic_write
    from porter.kernels import family_module
    from porter.kernels.base import Unsupported
    from porter.kernels.build import build_kernel
    from porter.pipeline.work import jsonable
    from porter.validation.device_runs import MANIFEST, source_digest

    arch = load_arch(ARCH)
    manifest = {"arch": arch.name, "target": arch.target, "built": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()),
                "kernels": {}, "failed": {}}
    (out / "cubins").mkdir(parents=True, exist_ok=True)
    for family in ("gemm", "attention", "megakernel"):
        for spec in family_module(family).variants(arch):
            if isinstance(spec, Unsupported):
                continue
            t0 = time.time()
            build = build_kernel(spec, arch)
            key = f"{arch.name}/{spec.name}"
            if not build.ok:
                failed = next((c for c in build.checks if not c.passed), None)
                manifest["failed"][key] = build.compile_error or (f"{failed.name}: {failed.detail}" if failed else "")
                print(f"FAILED {key}: {manifest['failed'][key]}")
                continue
            rel = f"cubins/{arch.name}.{spec.name}.cubin"
            atomic_write(out / rel, build.compiled.cubin)
            manifest["kernels"][key] = {"spec": jsonable(spec.to_dict()), "cubin": rel, "level": build.level.label,
                                        "source_sha256": source_digest(spec, arch),
                                        "resources": jsonable(build.resources) if build.resources else None}
            print(f"built {key} ({build.level.label}, {time.time() - t0:.1f} s)")
    atomic_write(out / MANIFEST, json.dumps(manifest, indent=1))
    print(f"wrote {out / MANIFEST}: {len(manifest['kernels'])} kernels, {len(manifest['failed'])} failed")
    return 1 if manifest["failed"] else 0


def step(argv: list[str]) -> int:
    """One porter command in this process (the child of ``run``): its output is the JSON report."""
    _import_porter()
    from porter.cli import main

    return main(argv)


def _run_step(argv: list[str], timeout_s: float, env: dict | None = None) -> tuple[int, str, str]:
    """``porter ARGV`` in a child process, killed after ``timeout_s``: a kernel that never
    finishes (a persistent kernel waiting on a counter, a lost mbarrier phase) costs
    this step, not the remaining ones, and its GPU context dies with the child."""
    import subprocess

    try:
        done = subprocess.run([sys.executable, str(Path(__file__).resolve()), "step", *argv],
                              capture_output=True, text=True, timeout=max(timeout_s, 1), cwd=ROOT, env=env)
        return done.returncode, done.stdout, done.stderr
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err = exc.stderr.decode() if isinstance(exc.stderr, bytes) else (exc.stderr or "")
        return 124, out, err + f"\ntimed out after {timeout_s:.0f} s (killed)"


def _summary_lines(command: str, report: dict) -> list[str]:
    from porter.commands.bench import row_line

    lines = []
    if command == "bench":
        for r in report.get("results", []):
            if r.get("error"):
                lines.append(f"{r['name']}: FAILED: {r['error']}")
            lines += [row_line(row) for row in r["rows"]]
    else:
        for r in report.get("results", []):
            checks = r.get("checks", [])
            bad = sum(not c["passed"] for c in checks)
            lines.append(f"{r['name']:<28} {'passed' if r['passed'] else 'FAILED'} "
                         f"({len(checks) - bad}/{len(checks)} checks, level {r['level']})"
                         + (f": {r['error']}" if r.get("error") else ""))
    return lines


def run(out_dir: Path, budget_s: float = 480.0) -> int:
    # the children's environment: prepared cubins, and a bug's traceback in the step's log
    child_env = dict(os.environ, PORTER_TRACEBACK="1")
    child_env.setdefault("PORTER_CUBIN_DIR", str(PREPARED))
    if not (Path(child_env["PORTER_CUBIN_DIR"]) / "manifest.json").is_file():
        print(f"no prepared cubins in {child_env['PORTER_CUBIN_DIR']}: kernels are built here (needs NVRTC)")
        del child_env["PORTER_CUBIN_DIR"]
    _import_porter()
    out_dir.mkdir(parents=True, exist_ok=True)
    from porter.pipeline.device import list_devices

    devices, why = list_devices()
    env = {"devices": devices, "why_none": why, "python": sys.version.split()[0]}
    try:
        import torch

        env["torch"] = torch.__version__
        if torch.cuda.is_available():
            p = torch.cuda.get_device_properties(0)
            env["device0"] = {"name": p.name, "sm_count": p.multi_processor_count,
                              "l2_bytes": getattr(p, "L2_cache_size", None), "memory_bytes": p.total_memory}
    except ImportError:
        env["torch"] = None
    (out_dir / "environment.json").write_text(json.dumps(env, indent=1))
    from porter.arch import load_arch
    from porter.validation.device_runs import match_device

    dev, reason = match_device(load_arch(ARCH), devices, why)
    if dev is None:
        print(f"{reason}; device validation and benchmarks of {ARCH} still open")
        return 3
    table, worst = [], 0
    deadline = time.time() + budget_s
    for command, kernel, extra, step_s in STEPS:
        argv = [command, ARCH, "--kernel", kernel, "--json", *extra]
        t0 = time.time()
        left = deadline - t0
        if left < 10:
            table.append((f"{command} {kernel}", [f"not run: the {budget_s:.0f} s budget is spent"]))
            worst = max(worst, 124)
            continue
        rc, stdout, stderr = _run_step(argv, min(step_s, left), child_env)
        took = time.time() - t0
        name = f"{command}-{kernel}"
        (out_dir / f"{name}.log").write_text(f"$ porter {' '.join(argv)}\nrc={rc} ({took:.1f} s)\n{stderr}")
        try:
            report = json.loads(stdout)
            (out_dir / f"{name}.json").write_text(json.dumps(report, indent=1))
            lines = _summary_lines(command, report)
        except ValueError:
            (out_dir / f"{name}.out").write_text(stdout)
            lines = [(stderr.strip().splitlines() or stdout.strip().splitlines() or ["no output"])[-1]]
        print(f"porter {' '.join(argv)}: rc={rc} in {took:.0f} s", flush=True)
        table.append((f"{command} {kernel} (rc={rc}, {took:.0f} s)", lines))
        worst = max(worst, rc)
    dev = devices[0]["name"] if devices else f"no device ({why})"
    print(f"\n==== porter device check: {ARCH} on {dev}; JSON in {out_dir} ====")
    for head, lines in table:
        print(head)
        for line in lines:
            print("  " + line)
    return worst


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("phase", choices=("prepare", "run", "step"),
                   help="prepare: build cubins here; run: on the GPU machine; step: one porter command (used by run)")
    p.add_argument("argv", nargs=argparse.REMAINDER, help="step: the porter command line")
    p.add_argument("--budget", type=float, default=480.0, help="run: seconds for all steps together (default 480)")
    args = p.parse_args(argv)
    if args.phase == "prepare":
        return prepare()
    if args.phase == "step":
        return step(args.argv)
    return run(Path(os.environ.get("OUT") or PREPARED / "out"), args.budget)


if __name__ == "__main__":
    sys.exit(main())
