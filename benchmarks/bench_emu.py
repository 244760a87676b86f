"""Simulator throughput: each kernel's emulation cases in porter's PTX simulator.

    python benchmarks/bench_emu.py [ARCH ...] [--kernel PATTERN] [--seeds N]

Prints, per kernel and case, the warp-instructions executed, the seconds the simulator
spent (launch to finish, host-side input generation and references excluded) and the
rate in warp-instructions per second; then the totals. The kernels are built first
(NVRTC; cached), so the figures are the simulator's alone.
"""

from __future__ import annotations

import argparse
import fnmatch
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("archs", nargs="*", default=["hopper"])
    p.add_argument("--kernel", default="*", help="glob over kernel names (default: all)")
    p.add_argument("--seeds", type=int, default=1)
    args = p.parse_args(argv)

    from porter.descriptor.arch import load_arch
    from porter.runtime.emulated_runs import emulate
    from porter.kernels import FAMILIES, family_module
    from porter.kernels.base import KernelSpec

    total_wi = total_s = 0.0
    print(f"{'arch':<14} {'kernel':<28} {'status':<13} {'cases':>5} {'warp-instr':>11} {'sim s':>7} "
          f"{'wall s':>7} {'warp-instr/s':>13}")
    for name in args.archs:
        arch = load_arch(name)
        for fam in FAMILIES:
            for spec in family_module(fam).variants(arch):
                if not isinstance(spec, KernelSpec) or not fnmatch.fnmatch(spec.name, args.kernel):
                    continue
                t0 = time.perf_counter()
                r = emulate(spec, arch, seeds=args.seeds)
                wall = time.perf_counter() - t0
                wi = sum(x["warp_instructions"] for x in r["runs"])
                secs = sum(x["seconds"] for x in r["runs"])
                total_wi += wi
                total_s += secs
                rate = f"{wi / secs:>13,.0f}" if secs else f"{'-':>13}"
                print(f"{arch.name:<14} {spec.name:<28} {r['status']:<13} {len(r['runs']):>5} {wi:>11,} "
                      f"{secs:>7.2f} {wall:>7.2f} {rate}")
                sys.stdout.flush()
    if total_s:
        print(f"total: {total_wi:,.0f} warp-instructions in {total_s:.1f} s of simulation: "
              f"{total_wi / total_s:,.0f} warp-instructions/s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
