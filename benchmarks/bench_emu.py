"""Simulator throughput: porter's emulation cases and public-style kernels in porter's PTX simulator.

    python benchmarks/bench_emu.py [ARCH ...] [--kernel PATTERN] [--seeds N] [--quick]
                                   [--porter-only | --public-only] [--ab TREE [--repeat R]]

Per kernel: the warp-instructions executed, the seconds the simulator spent (launch to
finish; host-side input generation and references excluded), the CPU seconds of this
process over the same runs, and the rate in warp-instructions per second of each; then
the totals per family of kernels and overall. Every run has the shared-memory race
detector on (unless PORTER_EMU_RACES=0 for porter's cases).

* porter's kernels: each kernel of each ARCH at its emulation cases (2 shapes x ``--seeds``
  input sets), as ``porter target``'s emulation stage runs them;
* public-style kernels (``benchmarks/emu_kernels``): one per tensor-core generation, written
  here the way hand-written public kernels are (TMA + wgmma with token waits, generic
  loads and a divergent epilogue; cp.async + ldmatrix + mma.sync; tcgen05 with TMEM), run
  for the ARCHs of their generation.

``--quick``: porter's kernels at their smallest shape with one seed and the public kernels
at a quarter of their size, for iterating (about a fifth of the full run). The kernels are
built first (NVRTC, cached), so the figures are the simulator's alone. Wall time follows the
machine's load; the CPU-time rate is the steadier figure on a shared machine, but it too
moves with load (caches, frequency): compare runs made back to back.

``--ab TREE``: this checkout's simulator against another checkout's (a git worktree of an
older commit), case by case: two long-lived worker processes, one importing each tree's
``porter``, run every case alternately (the order flipped each repetition), ``--repeat``
times; per case the least CPU time of each, then per-family CPU-time rates and ratios. On a
loaded machine two whole runs back to back differ by 10-20 % from drift in the load alone;
alternating case by case puts both trees under the same load. The warp-instruction counts
of the two must agree case by case (else it stops: not the same cases).
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "emu_kernels"))

# Public-style kernels by the descriptor they run for.
PUBLIC_FOR = {"hopper": "hopper.*", "blackwell": "blackwell.*", "ampere": "ampere.*"}


def _emulate():
    try:
        from porter.runtime.emulated_runs import emulate
    except ImportError:              # checkouts before 2026-12-01 kept it in the simulator's package
        from porter.emu.validate import emulate
    return emulate


class Totals:
    def __init__(self):
        self.rows: dict[str, list[float]] = {}

    def add(self, family: str, wi: float, secs: float, cpu: float) -> None:
        row = self.rows.setdefault(family, [0.0, 0.0, 0.0])
        row[0] += wi
        row[1] += secs
        row[2] += cpu

    def print(self) -> None:
        every = [0.0, 0.0, 0.0]
        for family, (wi, secs, cpu) in self.rows.items():
            print(_total_line(family, wi, secs, cpu))
            every = [every[0] + wi, every[1] + secs, every[2] + cpu]
        if len(self.rows) > 1:
            print(_total_line("all", *every))


def _rate(wi: float, secs: float) -> str:
    return f"{wi / secs:>11,.0f}" if secs else f"{'-':>11}"


def _total_line(family: str, wi: float, secs: float, cpu: float) -> str:
    cpu_part = f", {cpu:.1f} s CPU: {wi / cpu:,.0f}/s" if cpu else ""
    return (f"total {family}: {wi:,.0f} warp-instructions in {secs:.1f} s of simulation: "
            f"{wi / secs:,.0f} warp-instructions/s{cpu_part}") if secs else f"total {family}: nothing ran"


def _row(arch: str, name: str, status: str, cases: int, wi: float, secs: float, cpu: float, wall: float) -> str:
    return (f"{arch:<14} {name:<28} {status:<13} {cases:>5} {wi:>11,.0f} {secs:>7.2f} {cpu:>7.2f} {wall:>7.2f} "
            f"{_rate(wi, secs)} {_rate(wi, cpu)}")


def bench_porter(archs, pattern: str, seeds: int, quick: bool, totals: Totals) -> None:
    from porter.descriptor.arch import load_arch
    from porter.kernels import FAMILIES, family_module
    from porter.kernels.base import KernelSpec

    emulate = _emulate()
    for name in archs:
        arch = load_arch(name)
        for fam in FAMILIES:
            for spec in family_module(fam).variants(arch):
                if not isinstance(spec, KernelSpec) or not fnmatch.fnmatch(spec.name, pattern):
                    continue
                t0 = time.perf_counter()
                r = emulate(spec, arch, seeds=1 if quick else seeds, smallest=quick)
                wall = time.perf_counter() - t0
                wi = sum(x["warp_instructions"] for x in r["runs"])
                secs = sum(x["seconds"] for x in r["runs"])
                cpu = sum(x.get("cpu_seconds", 0.0) for x in r["runs"])
                totals.add(f"porter {spec.family}", wi, secs, cpu)
                print(_row(arch.name, spec.name, r["status"], len(r["runs"]), wi, secs, cpu, wall))
                sys.stdout.flush()


def bench_public(archs, pattern: str, seeds: int, quick: bool, totals: Totals) -> None:
    import cases

    for arch in archs:
        for case in cases.CASES:
            if not fnmatch.fnmatch(case.name, PUBLIC_FOR.get(arch, "-")) or not fnmatch.fnmatch(case.name, pattern):
                continue
            wi = secs = cpu = 0.0
            t0 = time.perf_counter()
            status = "passed"
            for seed in range(seeds):
                try:
                    s = cases.run_case(case, seed=seed, quick=quick)
                except Exception as exc:          # a wrong result or a simulator error: say so, go on
                    status = "failed"
                    print(f"  {case.name} seed {seed}: {str(exc).splitlines()[0]}")
                    break
                wi += s.warp_instructions
                secs += s.seconds
                cpu += getattr(s, "cpu_seconds", 0.0)
            wall = time.perf_counter() - t0
            totals.add(f"public {case.name.split('.')[0]}", wi, secs, cpu)
            print(_row(arch, case.name + " (public)", status, seeds, wi, secs, cpu, wall))
            sys.stdout.flush()


# ---- --ab: case by case against another tree ------------------------------------------------

def _cases(archs, pattern: str, porter_only: bool, public_only: bool) -> list[tuple[str, str]]:
    """(arch, case name) for every porter kernel and public-style kernel bench_emu runs."""
    out = []
    if not public_only:
        from porter.descriptor.arch import load_arch
        from porter.kernels import FAMILIES, family_module
        from porter.kernels.base import KernelSpec

        for name in archs:
            arch = load_arch(name)
            out += [(name, spec.name) for fam in FAMILIES for spec in family_module(fam).variants(arch)
                    if isinstance(spec, KernelSpec) and fnmatch.fnmatch(spec.name, pattern)]
    if not porter_only:
        import cases

        out += [(arch, case.name) for arch in archs for case in cases.CASES
                if fnmatch.fnmatch(case.name, PUBLIC_FOR.get(arch, "-")) and fnmatch.fnmatch(case.name, pattern)]
    return out


def worker(seeds: int, quick: bool) -> int:
    """Read "arch<TAB>case" lines, run each case, answer [warp-instructions, CPU seconds]."""
    import json

    import cases
    from porter.descriptor.arch import load_arch
    from porter.kernels import FAMILIES, family_module

    emulate = _emulate()
    public = {c.name: c for c in cases.CASES}
    print("ready", flush=True)
    for line in sys.stdin:
        arch_name, name = line.rstrip("\n").split("\t")
        if name in public:
            # CPU time around the whole case (its PTX parse, launch and check): an older tree's
            # run summary has no cpu_seconds, and both trees must be timed the same way
            wi = cpu = 0.0
            for seed in range(seeds):
                t0 = time.process_time()
                s = cases.run_case(public[name], seed=seed, quick=quick)
                wi, cpu = wi + s.warp_instructions, cpu + time.process_time() - t0
        else:
            arch = load_arch(arch_name)
            spec = next(sp for fam in FAMILIES for sp in family_module(fam).variants(arch)
                        if getattr(sp, "name", None) == name)
            r = emulate(spec, arch, seeds=seeds, smallest=quick)
            wi = sum(x["warp_instructions"] for x in r["runs"])
            cpu = sum(x.get("cpu_seconds", 0.0) for x in r["runs"])
        print(json.dumps([wi, cpu]), flush=True)
    return 0


def bench_ab(args) -> int:
    import json
    import os
    import subprocess

    other = Path(args.ab).resolve()
    if not (other / "porter" / "__init__.py").is_file():
        print(f"bench_emu: --ab {args.ab}: not a porter checkout (no porter/__init__.py)", file=sys.stderr)
        return 2
    here = Path(__file__).resolve().parents[1]
    trees = {"this": here, "other": other}
    seeds = 1 if args.quick else args.seeds
    cmd = [sys.executable, str(Path(__file__).resolve()), "--worker", "--seeds", str(seeds)] + (["--quick"] if args.quick else [])
    procs = {k: subprocess.Popen(cmd, cwd=t, env={**os.environ, "PYTHONPATH": str(t)}, stdin=subprocess.PIPE,
                                 stdout=subprocess.PIPE, text=True) for k, t in trees.items()}
    try:
        for k, p in procs.items():
            if p.stdout.readline().strip() != "ready":
                print(f"bench_emu: --ab: the worker for {trees[k]} did not start", file=sys.stderr)
                return 2
        jobs = _cases(args.archs, args.kernel, args.porter_only, args.public_only)
        best: dict = {"this": {}, "other": {}}
        counts: dict = {}
        for rep in range(args.repeat):
            for job in jobs:
                for k in (("other", "this") if rep % 2 == 0 else ("this", "other")):
                    procs[k].stdin.write(f"{job[0]}\t{job[1]}\n")
                    procs[k].stdin.flush()
                    answer = procs[k].stdout.readline()
                    if not answer:
                        print(f"bench_emu: --ab: the worker for {trees[k]} stopped at {job[0]} {job[1]}", file=sys.stderr)
                        return 2
                    wi, cpu = json.loads(answer)
                    if args.rates:          # cpu scaled to the case's first recorded count, so count / cpu is each tree's own rate
                        first = counts.setdefault(job, wi)
                        cpu *= first / wi if wi else 1.0
                    elif counts.setdefault(job, wi) != wi:
                        print(f"bench_emu: --ab: {job[0]} {job[1]}: {counts[job]:,.0f} warp-instructions here, "
                              f"{wi:,.0f} in {trees[k]}: not the same cases", file=sys.stderr)
                        return 1
                    best[k][job] = min(cpu, best[k].get(job, float("inf")))
    finally:
        for p in procs.values():
            p.stdin.close()
            p.wait()
    print(f"{'arch':<14} {'case':<34} {'warp-instr':>11} {'cpu s other':>11} {'cpu s this':>10} {'ratio':>6}")
    fams: dict = {}
    for job in jobs:
        public = job[1].split(".")[0] in ("hopper", "blackwell", "ampere")
        fam = ("public " if public else "porter ") + job[1].split(".")[0]
        o, t = best["other"][job], best["this"][job]
        print(f"{job[0]:<14} {job[1] + (' (public)' if public else ''):<34} {counts[job]:>11,.0f} {o:>11.3f} {t:>10.3f} "
              f"{o / t if t else 0:>6.2f}")
        for f in (fam, "all"):
            row = fams.setdefault(f, [0.0, 0.0, 0.0])
            row[0], row[1], row[2] = row[0] + counts[job], row[1] + o, row[2] + t
    for f, (wi, o, t) in sorted(fams.items(), key=lambda kv: kv[0] == "all"):
        print(f"total {f}: {wi:,.0f} warp-instructions, CPU {o:.2f} s ({args.ab}) -> {t:.2f} s (this tree): "
              f"{wi / o:,.0f} -> {wi / t:,.0f} per CPU-second, x{o / t:.3f}")
    return 0


def _positive(text: str) -> int:
    n = int(text)
    if n < 1:
        raise argparse.ArgumentTypeError(f"{text}: a whole number >= 1")
    return n


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archs", nargs="*", default=["hopper"])
    p.add_argument("--kernel", default="*", help="glob over kernel names (default: all)")
    p.add_argument("--seeds", type=int, default=1, help="input sets per case (default 1)")
    p.add_argument("--quick", action="store_true", help="smallest shapes, one seed: for iterating")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--porter-only", action="store_true", help="porter's kernels only")
    which.add_argument("--public-only", action="store_true", help="the public-style kernels only")
    p.add_argument("--ab", metavar="TREE", help="this tree's simulator against TREE's, case by case (CPU time)")
    p.add_argument("--rates", action="store_true",
                   help="with --ab: compare warp-instructions per CPU-second even where the two trees execute "
                        "a case in a different number of warp-instructions (a simulator fix that changes a "
                        "loop's trip count), instead of refusing")
    p.add_argument("--repeat", type=_positive, default=2, help="with --ab: repetitions per case (least CPU time kept)")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        return worker(max(args.seeds, 1), args.quick)
    if args.ab:
        return bench_ab(args)

    totals = Totals()
    print(f"{'arch':<14} {'kernel':<28} {'status':<13} {'cases':>5} {'warp-instr':>11} {'sim s':>7} {'cpu s':>7} "
          f"{'wall s':>7} {'w-instr/s':>11} {'per cpu s':>11}")
    if not args.public_only:
        bench_porter(args.archs, args.kernel, args.seeds, args.quick, totals)
    if not args.porter_only:
        bench_public(args.archs, args.kernel, max(args.seeds, 1), args.quick, totals)
    totals.print()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
