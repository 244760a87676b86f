"""The calibration table with each step's time taken as the mean over its `uncertain:` figures,
not at their sourced values: an experiment, not porter's estimator.

    python benchmarks/calibration_mean.py [--samples 2048] [--dist triangular|uniform] [--seed 12345]

porter's point prediction is the time at the sourced values, with a range from every
uncertain figure at its slow end and at its fast end. The kernel time is a maximum over
resources, convex in the figures, so where two resources nearly balance (fast.cu's K6: L2
at 96 % of the tensor time at the sourced L2 figure, binding below about 10.0 TB/s) the
mean over the ranges is slower than the time at their centre. This script draws every
uncertain figure independently (triangular with its mode at the sourced value, or uniform
over its range), times each step at L0 for every draw, and prints the table's statistics
against issue 16's targets with the one factor refitted on the cuBLAS row, beside the
nominal ones. It was written on 2026-12-03, after the nominal table had missed two targets,
so its outcome is evidence to weigh, not a result porter adopts (choosing the estimator
after seeing the table would be tuning to it). At 2048 draws (about 17 s on one core) the
mean orders K6 < K7 < K11 at both shapes (tau 1.00, either distribution) and puts the FA3
row at +14.99 % (triangular, standard error 0.1 %) or +15.9 % (uniform): the rank order is the near-balance of K6's
L2 traffic, the FA3 gap is not.
"""

from __future__ import annotations

import argparse
import math
import sys

import numpy as np

from porter.descriptor.arch import load_arch
from porter.timing import calibration as C
from porter.timing.figures import Figures
from porter.timing.predict import _time


def draws(fig: Figures, n: int, dist: str, seed: int) -> list[Figures]:
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        f = fig
        for key, (lo, hi) in fig.uncertain.items():
            if hi <= lo:
                continue
            mode = min(max(fig[key], lo), hi)
            value = rng.triangular(lo, mode, hi) if dist == "triangular" else rng.uniform(lo, hi)
            f = f.with_value(key, float(value))
        out.append(f)
    return out


def rows(arch, samples: list[Figures]) -> list[dict]:
    fig = Figures.of(arch)
    out = []
    for table, kernel, ladder in (("fast.cu GEMM", C.GEMM_KERNEL, C.GEMM_LADDER),
                                  ("FA3 ablation", C.ATTN_KERNEL, C.ATTN_LADDER)):
        for step in ladder:
            if step.knobs is None:
                continue
            spec = C._spec(arch, kernel, step.knobs)
            for shape, published in step.published.items():
                nominal, _, model = _time(spec, arch, fig, shape)
                times = np.array([_time(spec, arch, f, shape)[0] for f in samples])
                flops = model["flops"]
                out.append({"table": table, "step": step.name, "shape": shape, "published": published,
                            "reproduced": step.reproduced, "nominal": flops / nominal / 1e12,
                            "mean": flops / times.mean() / 1e12,
                            # the mean time's standard error, as a fraction of it
                            "se": times.std(ddof=1) / math.sqrt(times.size) / times.mean()})
    return out


def report(table_rows: list[dict], key: str) -> bool:
    cublas = [r for r in table_rows if r["step"] == "cuBLAS"]
    factor = sum(r["published"] / r[key] for r in cublas) / len(cublas)
    print(f"{key}: factor {factor:.3f} (fitted on the cuBLAS row)")
    every = True
    for table, shape in sorted({(r["table"], r["shape"]) for r in table_rows}):
        steps = [r for r in table_rows if (r["table"], r["shape"]) == (table, shape)
                 and r["step"] != "cuBLAS" and r["reproduced"]]
        pred = [r[key] * factor for r in steps]
        pub = [r["published"] for r in steps]
        tau = C.kendall_tau(pub, pred) if len(steps) >= 2 else None
        ratios = [abs((pred[i + 1] / pred[i]) / (pub[i + 1] / pub[i]) - 1) for i in range(len(steps) - 1)]
        worst_abs = max(abs(p / q - 1) for p, q in zip(pred, pub))
        met = (tau is None or tau >= C.TARGETS["kendall_tau"]) and \
              (not ratios or max(ratios) <= C.TARGETS["max_step_ratio_error"]) and \
              worst_abs <= C.TARGETS["max_abs_error"]
        every &= met
        cells = ", ".join(f"{r['step']} {p:.1f} ({100 * (p / r['published'] - 1):+.1f}%"
                          + (f", se {100 * r['se']:.1f}%)" if key == "mean" else ")") for r, p in zip(steps, pred))
        print(f"  {table} {shape}: {cells}; tau {'-' if tau is None else f'{tau:.2f}'}, worst step ratio "
              f"{'-' if not ratios else f'{100 * max(ratios):.1f}%'}, worst absolute {100 * worst_abs:.2f}%: "
              f"{'met' if met else 'NOT met'}")
    return every


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--samples", type=int, default=2048)   # (the means settle within 0.2 %)
    ap.add_argument("--dist", choices=("triangular", "uniform"), default="triangular")
    ap.add_argument("--seed", type=int, default=12345)
    args = ap.parse_args(argv)
    arch = load_arch("hopper").for_product(C.PRODUCT)
    table_rows = rows(arch, draws(Figures.of(arch), args.samples, args.dist, args.seed))
    print(f"calibration at L0, {C.PRODUCT}; mean over {args.samples} {args.dist} draws of the uncertain figures "
          "(predicted by porter's timing model, not measured)")
    report(table_rows, "nominal")
    report(table_rows, "mean")
    return 0


if __name__ == "__main__":
    sys.exit(main())
