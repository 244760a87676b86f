"""``porter tune ARCH``: search each kernel's configuration space with the timing model
and the simulator, one Ray task per candidate; write tuning/ARCH.PRODUCT.yaml and an
HTML report (porter.tuning)."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


def register(sub) -> None:
    p = sub.add_parser("tune", help="search kernel configurations per shape bucket (timing model + simulator, on Ray)")
    p.add_argument("arch", help="descriptor name or path")
    p.add_argument("--kernel", metavar="PATTERN", help="kernel name, variant, family or glob (default: every kernel with knobs)")
    p.add_argument("--product", action="append", metavar="NAME",
                   help="product to tune for (repeatable; 'all' for every product; default: the descriptor's default)")
    p.add_argument("--shapes", "--shape", dest="shapes", nargs="+", metavar="SHAPE",
                   help="shapes to bucket (as porter predict takes them; default: the standard shapes and smaller ones)")
    p.add_argument("--budget", type=int, default=None,
                   help="candidates compiled per kernel, all buckets and products together (default: 4 per bucket)")
    p.add_argument("--rank", choices=("L1", "L0"), default="L1",
                   help="the middle stage: L1 (default: the top candidates timed in porter's timed simulator) or L0")
    p.add_argument("--l1-top", type=int, default=3, metavar="N",
                   help="candidates timed by L1 per bucket and product, besides the default (default 3)")
    p.add_argument("--finalists", type=int, default=2, help="candidates emulated per bucket, besides the default (default 2)")
    p.add_argument("--executor", choices=("ray", "local"), default="ray",
                   help="ray (default: a local Ray runtime, or --address) or local (this process, one task at a time)")
    p.add_argument("--address", metavar="ADDR", help="join a running Ray cluster: auto or HOST:PORT")
    p.add_argument("--workers", type=int, default=0, help="CPUs of the local Ray runtime (default: every CPU)")
    p.add_argument("--task-timeout", type=float, default=None, metavar="S",
                   help="seconds per task attempt before it is cancelled and retried (default 600, emulation 1200)")
    p.add_argument("--out", help="folder for report.html and sweep.json (default build/tune/ARCH-PRODUCT; "
                                 "with several products, ARCH-PRODUCT folders under it)")
    p.add_argument("--tuning-file", metavar="PATH", help="write here instead of tuning/ARCH.PRODUCT.yaml (one product)")
    from porter.kernels.knobs import add_set_argument

    add_set_argument(p)   # here: pin a knob to one value; the sweep covers the others
    p.add_argument("--fresh", action="store_true",
                   help="run every task again, ignoring cached results (new results are still cached)")
    p.add_argument("--json", action="store_true", help="print the table as JSON")
    p.add_argument("--quiet", "-q", action="store_true", help="no live progress")
    p.set_defaults(func=run)


class Progress:
    """Live progress on stderr: tasks done / pruned / failed, best so far; one line per
    phase and a throttled line while tasks complete."""

    def __init__(self, quiet: bool = False, stream=None):
        self.quiet = quiet
        self.stream = stream or sys.stderr
        self.tty = getattr(self.stream, "isatty", lambda: False)()
        self.counts: dict = {}
        self.last = 0.0

    def say(self, text: str) -> None:
        if not self.quiet:
            print(text, file=self.stream, flush=True)

    def phase(self, sweep, kind, total, cached) -> None:
        self.counts = {"kind": kind, "total": total, "done": cached, "bad": 0, "failed": 0, "best": None}
        self.say(f"  {sweep.kernel} [{sweep.product}] {kind}: {total} task{'s' if total != 1 else ''}"
                 f"{f', {cached} from the cache' if cached else ''}")

    def task_done(self, sweep, kind, out) -> None:
        c = self.counts
        c["done"] += 1
        if not out.ok:
            c["failed"] += 1
        elif kind == "evaluate" and out.result.get("status") != "built":
            c["bad"] += 1
        elif kind == "evaluate":
            first = next(iter(sweep.shapes))
            p = out.result["predictions"].get(sweep.product, {}).get(first, {})
            v = p.get("tflops") if p.get("tflops") is not None else p.get("gb_s")
            if v is not None and (c["best"] is None or v > c["best"][0]):
                c["best"] = (v, "TFLOP/s" if p.get("tflops") is not None else "GB/s", first)
        now = time.monotonic()
        if now - self.last < 2.0 and c["done"] < c["total"]:
            return
        self.last = now
        best = f"; best so far {c['best'][0]:.0f} {c['best'][1]} at {c['best'][2]} (predicted)" if c["best"] else ""
        bad = f", {c['bad']} pruned or discarded" if kind == "evaluate" else ""
        self.say(f"    {kind} {c['done']}/{c['total']} done{bad}, {c['failed']} failed{best}")


def _kernels(arch, pattern: str | None) -> list[str]:
    from porter.commands.kernel import all_variants, match_kernels
    from porter.errors import PorterError
    from porter.kernels.base import KernelSpec
    from porter.kernels.knobs import knob_space
    from porter.tuning.entries import untuned

    with untuned():
        every = all_variants(arch)
        chosen = match_kernels(every, pattern) if pattern else every
        if pattern and not chosen:
            from porter.commands.kernel import find_kernel

            find_kernel(pattern, arch)   # the one-line error with close names
        names = [v.name for v in chosen if isinstance(v, KernelSpec) and knob_space(arch, v.name)]
    if not names:
        raise PorterError(f"--kernel {pattern}: no kernel with knobs is supported on {arch.name}" if pattern else
                          f"{arch.name}: no kernel with knobs is supported")
    return names


def _products(arch, asked) -> list[str]:
    from porter.errors import PorterError
    from porter.tuning.sweep import product_of

    if not asked:
        return [product_of(arch)]
    if "all" in asked:
        return list(arch.product_names)
    for p in asked:
        if p not in arch.product_names:
            raise PorterError(f"--product {p!r}: {arch.name} names {', '.join(arch.product_names)}")
    return list(dict.fromkeys(asked))


def run(args) -> int:
    from porter.descriptor.arch import load_arch
    from porter.errors import PorterError
    from porter.fsutil import atomic_write
    from porter.tuning import report, table
    from porter.tuning.cache import ResultCache
    from porter.tuning.engine import make_executor
    from porter.tuning.sweep import Sweep, SweepOptions

    if args.budget is not None and args.budget < 1:
        raise PorterError(f"--budget {args.budget}: give 1 or more candidates")
    if args.finalists < 1:
        raise PorterError(f"--finalists {args.finalists}: give 1 or more")
    if args.l1_top < 1:
        raise PorterError(f"--l1-top {args.l1_top}: give 1 or more")
    if args.address and args.executor != "ray":
        raise PorterError(f"--address {args.address}: only with --executor ray")
    from porter.kernels.knobs import parse_sets

    fixed = parse_sets(args.knobs)
    if any(":" in k for k in fixed):
        raise PorterError(f"--set {next(k for k in fixed if ':' in k)}: porter tune pins knobs of the kernels it "
                          "sweeps; give KEY=VALUE without a kernel (and --kernel to choose the kernel)")
    arch = load_arch(args.arch)
    products = _products(arch, args.product)
    if args.tuning_file and len(products) > 1:
        raise PorterError("--tuning-file: one product at a time (give --product)")
    kernels = _kernels(arch, args.kernel)
    if args.shapes:
        from porter.kernels.knobs import spec_with_knobs
        from porter.tuning.buckets import bucket_of

        with table.untuned():
            for k in kernels:
                for s in args.shapes:
                    bucket_of(spec_with_knobs(arch, k, {}), s)   # a malformed shape: one line, before any work
    from porter.compile.toolchain import require_toolchain

    require_toolchain()
    progress = Progress(args.quiet or args.json)
    start = time.perf_counter()
    executor = make_executor(args.executor, args.address, args.workers or None)
    opts = SweepOptions(budget=args.budget, finalists=args.finalists, shapes=tuple(args.shapes or ()),
                        ranker=args.rank, l1_top=args.l1_top, timeout_s=args.task_timeout, fixed=fixed)
    cache = ResultCache(read=not args.fresh)
    written, everything = [], []
    desc = executor.describe()
    try:
        progress.say(f"porter tune {arch.name}: {len(kernels)} kernel{'s' if len(kernels) != 1 else ''} x "
                     f"{len(products)} product{'s' if len(products) != 1 else ''} on {desc}")
        sweeper = Sweep(executor, cache, progress, opts)
        # each kernel on every product at once: products that generate the same code share its tasks
        per_product: dict = {p: [] for p in products}
        for k in kernels:
            for s in sweeper.kernels(arch, k, products):
                per_product[s.product].append(s)
        for product in products:
            sweeps = per_product[product]
            everything += sweeps
            path = table.write(arch, product, sweeps, Path(args.tuning_file) if args.tuning_file else None)
            written.append(path)
            summary = _summary(desc, sweeps, time.perf_counter() - start)
            folder = f"{arch.name}-{table.product_slug(product)}"
            # --out with several products: one folder each under it
            out = (Path(args.out) / folder if len(products) > 1 else Path(args.out)) if args.out else \
                Path("build") / "tune" / folder
            atomic_write(out / "report.html", report.page(arch.name, product, sweeps, summary))
            atomic_write(out / "sweep.json", json.dumps({"summary": summary, "table": table_rows(sweeps)},
                                                        indent=1, default=str))
            progress.say(f"  wrote {table.shown(path)} and {out / 'report.html'}")
    finally:
        executor.close()
    summary = _summary(desc, everything, time.perf_counter() - start)
    rows = table_rows(everything)
    if args.json:
        print(json.dumps({"summary": summary, "table": rows, "files": [str(p) for p in written]}, indent=1, default=str))
    else:
        _print_table(rows, summary)
    return 0 if any(r["chosen"] for r in rows) else 1


def _summary(desc: str, sweeps, seconds: float) -> dict:
    run = sum(s.tasks["run"] for s in sweeps)
    # a task serves every product of its build group: a candidate is counted once per group
    groups = [s for s in sweeps if not any(q.kernel == s.kernel and q.product in s.shared_with
                                           for q in sweeps[:sweeps.index(s)])]
    cands = sum(len(s.candidates) for s in groups)
    screened = sum(s.space_size for s in groups)
    return {"executor": desc,
            "kernels": len({s.kernel for s in sweeps}), "products": sorted({s.product for s in sweeps}),
            "kernel_products": len(sweeps),
            "configurations": sum(s.raw_space for s in groups), "screened": screened,
            "legal": sum(s.legal for s in groups), "candidates": cands,
            "timed_l1": sum(sum(1 for c in s.candidates if c.get("l1_status")) for s in groups),
            "emulated": sum(sum(1 for c in s.candidates if c.get("emulation")) for s in groups),
            "tasks_run": run, "tasks_cached": sum(s.tasks["cached"] for s in sweeps),
            "retried": sum(s.tasks["retried"] for s in sweeps), "failed": sum(len(s.failures) for s in sweeps),
            "seconds": round(seconds, 2), "candidates_per_s": round(cands / seconds, 3) if seconds else None,
            "screened_per_s": round(screened / seconds, 1) if seconds else None,
            "task_seconds": _by_kind(groups),
            "l1_separates": {f"{s.kernel} [{s.product}] {b}": v for s in sweeps for b, v in s.l1_separates.items()}}


def _by_kind(sweeps) -> dict:
    """kind -> {tasks, seconds, configurations}: what the workers spent on each kind of task."""
    out: dict = {}
    for s in sweeps:
        for kind, c in s.tasks.get("by_kind", {}).items():
            o = out.setdefault(kind, {"tasks": 0, "seconds": 0.0})
            o["tasks"] += c["tasks"]
            o["seconds"] = round(o["seconds"] + c["seconds"], 3)
    if "screen" in out:
        out["screen"]["configurations"] = sum(s.space_size for s in sweeps)
    for o in out.values():
        o["per_task_s"] = round(o["seconds"] / o["tasks"], 3) if o["tasks"] else None
    return out


def table_rows(sweeps) -> list[dict]:
    """One row per kernel, product and bucket: what the file records (for --json and tests)."""
    out = []
    for s in sweeps:
        for b, row in s.buckets.items():
            c, d = row["chosen"], row["default"]
            out.append({"kernel": s.kernel, "product": s.product, "bucket": b, "shape": row["shape"],
                        "chosen": dict(c["knobs"]) if c else None,
                        "time_us": round(c["time_us"], 3) if c else None, "ranked_by": c["level_model"] if c else None,
                        "l0_time_us": round(c["l0"]["time_us"], 3) if c else None,
                        "default_l0_time_us": round(d["l0"]["time_us"], 3) if d else None,
                        "same_as_default": bool(c and d and c["knobs"] == d["knobs"]),
                        "tflops": (round(c["tflops"], 1) if c and c["tflops"] is not None else None),
                        "default_time_us": round(d["time_us"], 3) if d else None,
                        "level": c["level"] if c else None, "why_none": row["why_none"],
                        "failures": len(s.failures)})
    return out


def _print_table(rows, summary) -> None:
    from rich.console import Console
    from rich.table import Table

    from porter.tuning.table import LABEL

    t = Table(title=f"chosen configuration per bucket ({LABEL})")
    for col in ("kernel", "product", "bucket", "chosen knobs", "time (us)", "TFLOP/s", "default (us)", "level"):
        t.add_column(col)
    for r in rows:
        knobs = ", ".join(f"{k}={v}" for k, v in (r["chosen"] or {}).items()) or "-"
        t.add_row(r["kernel"], r["product"], r["bucket"], knobs, f"{r['time_us']:.1f}" if r["time_us"] else "-",
                  f"{r['tflops']:.0f}" if r["tflops"] else "-",
                  f"{r['default_time_us']:.1f}" if r["default_time_us"] else "-", r["level"] or r["why_none"])
    Console(width=None if sys.stdout.isatty() else 160).print(t)
    print(f"{summary['candidates']} candidates compiled of {summary['legal']} legal configurations "
          f"({summary['screened']} screened of {summary['configurations']} in the space), {summary['timed_l1']} timed "
          f"by L1, {summary['emulated']} emulated; {summary['tasks_run']} tasks run, {summary['tasks_cached']} "
          f"from the cache, {summary['retried']} retried, {summary['failed']} failed; {summary['seconds']:.1f} s "
          f"on {summary['executor']}")
