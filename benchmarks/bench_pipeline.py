"""How long `porter target ARCH` takes cold and cached, and each kernel's compile time.

    python benchmarks/bench_pipeline.py [--arch blackwell] [--jobs N] [--no-compile-table]

Cold = a fresh PORTER_CACHE_DIR (no NVRTC cache, no bundled headers yet) and a fresh
build folder; cached = the same command again (targets on a 2-core machine: cold
<= 60 s, cached <= 2 s). Then every kernel variant is compiled once more with the
cache off, timing NVRTC, and with `nvcc -cubin -arch=<target>` where nvcc exists.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def timed_target(arch: str, out: Path, env: dict, jobs: int) -> tuple[float, int, str]:
    cmd = [sys.executable, "-m", "porter", "target", arch, "--out", str(out), "-q"]
    if jobs:
        cmd += ["--jobs", str(jobs)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    last = [l for l in proc.stdout.splitlines() if "stages," in l]
    return elapsed, proc.returncode, (last[-1] if last else proc.stderr.strip()[-300:])


def compile_table(arch_name: str) -> list[tuple[str, float, float | None, str]]:
    from porter.compile import toolchain
    from porter.descriptor.arch import load_arch
    from porter.errors import CompileError
    from porter.kernels import FAMILIES, family_module
    from porter.kernels.base import Unsupported

    arch = load_arch(arch_name)
    nvcc = shutil.which("nvcc")
    rows = []
    for fam in sorted(FAMILIES):
        try:
            specs = [s for s in family_module(fam).variants(arch) if not isinstance(s, Unsupported)]
        except Exception as exc:
            rows.append((f"{fam}.*", float("nan"), None, f"variants() failed: {exc}"))
            continue
        for spec in specs:
            source = family_module(fam).render(spec, arch)
            start = time.perf_counter()
            note = ""
            try:
                toolchain.compile_cuda(source, arch.target, f"{spec.name}.cu", use_cache=False)
            except CompileError as exc:
                note = str(exc)[:80]
            t_nvrtc = time.perf_counter() - start
            t_nvcc = None
            if nvcc:
                with tempfile.TemporaryDirectory() as tmp:
                    src = Path(tmp) / f"{spec.name}.cu"
                    src.write_text(source)
                    start = time.perf_counter()
                    subprocess.run([nvcc, "-cubin", f"-arch={arch.target}", "-std=c++17", "-o",
                                    str(Path(tmp) / "k.cubin"), str(src)], capture_output=True)
                    t_nvcc = time.perf_counter() - start
            rows.append((spec.name, t_nvrtc, t_nvcc, note))
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", default="blackwell")
    ap.add_argument("--jobs", type=int, default=0)
    ap.add_argument("--no-compile-table", action="store_true")
    args = ap.parse_args()

    work = Path(tempfile.mkdtemp(prefix="porter-bench-"))
    env = dict(os.environ, PORTER_CACHE_DIR=str(work / "cache"))
    out = work / "build" / args.arch
    print(f"machine: {os.cpu_count()} CPUs; load average {os.getloadavg()[0]:.1f}")
    cold = timed_target(args.arch, out, env, args.jobs)
    cached = timed_target(args.arch, out, env, args.jobs)
    print(f"{'run':8s} {'seconds':>8s}  exit  summary")
    for label, (secs, code, summary) in (("cold", cold), ("cached", cached)):
        print(f"{label:8s} {secs:8.2f}  {code:4d}  {summary}")
    print(f"targets: cold <= 60 s ({'ok' if cold[0] <= 60 else 'MISSED'}), "
          f"cached <= 2 s ({'ok' if cached[0] <= 2 else 'MISSED'})")
    if not args.no_compile_table:
        os.environ["PORTER_CACHE_DIR"] = str(work / "cache")
        rows = compile_table(args.arch)
        have_nvcc = any(r[2] is not None for r in rows)
        print(f"\n{'kernel':28s} {'NVRTC s':>8s} {'nvcc s':>8s}  note")
        for name, t1, t2, note in rows:
            print(f"{name:28s} {t1:8.2f} {('%8.2f' % t2) if t2 is not None else '       -'}  {note}")
        if not have_nvcc:
            print("(nvcc not found: NVRTC only)")
    shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
