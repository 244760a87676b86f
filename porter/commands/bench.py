"""``porter bench ARCH --kernel FAMILY|NAME``: time kernels beside the vendor baseline.

In one process on device 0: porter's kernel (device events, warm-up, median of
many launches, inputs rotated past the descriptor's L2) and its baseline on the
same inputs (torch.matmul / torch._scaled_mm for GEMM, torch SDPA for attention, a
device-to-device copy for the megakernel's bandwidth). Reported: TFLOP/s (GEMM,
attention) or µs per step and GB/s (megakernel), % of the baseline, % of the
descriptor's peak, and the spread of the samples. Without a matching GPU:
``--device auto`` (the default, as for ``porter validate``) prints "skipped: ..." and
exits 0; ``--device on`` exits 3 with one line.
Exit codes: 0 measured (or skipped), 1 a check failed (a kernel's error or its output
spot check), 2 bad input, 3 no matching GPU with --device on.
"""

from __future__ import annotations

# A kernel "meets" its target at this share of the baseline (GEMM issue item 9).
TARGET_PCT_OF_BASELINE = 90.0


def register(sub) -> None:
    from porter.commands.device_common import EXIT_CODES, SHAPE_FORMS

    p = sub.add_parser("bench", help="time kernels on a GPU beside torch's matmul / scaled_mm / SDPA",
                       description=f"Time kernels on a GPU beside torch's matmul / scaled_mm / SDPA; {EXIT_CODES}.")
    p.add_argument("arch", help="descriptor name or path (the GPU must have its compute capability)")
    p.add_argument("--kernel", required=True, metavar="FAMILY|NAME",
                   help="a family (gemm, attention, megakernel) or one kernel, e.g. gemm.fp8")
    p.add_argument("--shape", "--shapes", dest="shape", nargs="+", metavar="SHAPE",   # validate says --shapes
                   help="; ".join(f"{k}: {v}" for k, v in SHAPE_FORMS.items()))
    p.add_argument("--device", choices=("on", "auto"), default="auto",
                   help="on: fail without a matching GPU (exit 3); auto (default): skip without one (exit 0)")
    p.add_argument("--product", metavar="NAME",
                   help="the product on the bench (its SM count, memory and peaks from the descriptor's products "
                        "section set the roofline), e.g. \"H100 SXM\"; default: the descriptor's default product")
    p.add_argument("--no-baseline", action="store_true", help="time porter's kernels only")
    p.add_argument("--json", action="store_true", help="print the measurements as JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    import json

    from porter.descriptor.arch import load_arch
    from porter.commands.device_common import (check_shapes, decide_device, isolated, one_family, parse_shapes,
                                               select_kernels, skipped_line)
    from porter.pipeline.work import jsonable

    arch = load_arch(args.arch)
    if args.product:
        arch = arch.for_product(args.product)
    specs, unsupported = select_kernels(arch, args.kernel)
    family = one_family(specs)
    shapes = parse_shapes(family, args.shape, "bench")
    check_shapes(specs, shapes)
    dev, reason = decide_device(arch, args.device)
    if dev is None:
        if args.json:   # --json means JSON on every path, the skipped one included
            print(json.dumps({"arch": arch.name, "target": arch.target, "device": None, "skipped": True,
                              "reason": skipped_line(reason, specs, family, arch), "results": [],
                              "unsupported": [u.to_dict() for u in unsupported]}, indent=1))
        else:
            print(skipped_line(reason, specs, family, arch))
        return 0
    from porter.runtime import harness

    results = [isolated(harness.bench, spec, arch, None, shapes, baseline=not args.no_baseline)
               for spec in specs]
    report = {"arch": arch.name, "target": arch.target, "device": dev, "results": results,
              "unsupported": [u.to_dict() for u in unsupported],
              "target_pct_of_baseline": TARGET_PCT_OF_BASELINE}
    if args.json:
        print(json.dumps(jsonable(report), indent=1))
    else:
        print(table(report))
    # a benchmark whose own output check failed measured a wrong kernel
    failed = any(r.get("error") for r in results) or not all(
        row.get("spot_check", {}).get("passed", True) for r in results for row in r["rows"])
    return 1 if failed else 0


def _shape(shape) -> str:
    if isinstance(shape, dict):
        return "x".join(str(v) for v in shape.values())
    return "x".join(map(str, shape))


def row_line(row: dict) -> str:
    """One line per measurement: porter, the baseline, the ratios, the spread."""
    t = row["time"]
    spread = f"spread {100 * t['spread']:.1f}%"
    ok = "" if row.get("spot_check", {}).get("passed", True) else "  OUTPUT CHECK FAILED"
    base = row.get("baseline") or {}
    if row["family"] == "megakernel":
        line = (f"{row['name']:<28} {_shape(row['shape']):<20} {row['us_per_step']:9.1f} us/step "
                f"{row['achieved_gb_s']:8.0f} GB/s ({row['pct_of_peak_bandwidth']:.0f}% of descriptor bw) "
                f"predicted {row['predicted_latency_us']:.0f} us")
        if "bytes_per_s" in base:
            line += f" | copy {base['bytes_per_s'] / 1e9:.0f} GB/s: {row['pct_of_copy_bandwidth']:.0f}% of it"
        elif base.get("skipped"):
            line += f" | baseline skipped: {base['skipped']}"
        return line + f"  {spread}{ok}"
    peak = f"{row['pct_of_peak']:.0f}% of peak" if row.get("pct_of_peak") is not None else "no peak in descriptor"
    if row.get("pct_of_roofline") is not None and row.get("roofline_tflops") != row.get("peak_tflops"):
        peak += f", {row['pct_of_roofline']:.0f}% of the {row['roofline_tflops']:.0f} TFLOP/s roofline"
    line = (f"{row['name']:<28} {_shape(row['shape']):<20} {t['median_ms']:9.3f} ms {row['tflops']:7.1f} TFLOP/s "
            f"({peak})")
    if base.get("time"):
        met = "meets" if row["pct_of_baseline"] >= TARGET_PCT_OF_BASELINE else "below"
        line += (f" | {base['name']}: {base['tflops']:.1f} TFLOP/s -> {row['pct_of_baseline']:.0f}% "
                 f"({met} the {TARGET_PCT_OF_BASELINE:.0f}% target"
                 + ("" if row.get("beyond_noise") else ", within noise") + ")")
    elif base.get("skipped"):
        line += f" | baseline skipped: {base['skipped']}"
    return line + f"  {spread}{ok}"


def table(report: dict) -> str:
    dev = report["device"]
    lines = [f"bench {report['arch']} ({report['target']}) on device {dev['index']} {dev['name']}"]
    for r in report["results"]:
        if r.get("error"):
            lines.append(f"{r['name']}: FAILED: {r['error']}")
        lines += [row_line(row) for row in r["rows"]]
    for u in report["unsupported"]:
        lines.append(f"{u['name']}: unsupported on {report['arch']}")
    return "\n".join(lines)
