"""``porter target ARCH``: run the bring-up runbook for ARCH (see porter.pipeline)."""

from __future__ import annotations

from pathlib import Path


from porter.cli import jobs_arg


def register(sub) -> None:
    p = sub.add_parser("target", help="run the bring-up pipeline for an arch (probes, plan, kernels, numerics, report)",
                       description="Run the runbook's stages as a DAG for ARCH: descriptor and probes, "
                       "the base arch's kernels on the target, every kernel variant rebuilt and checked, "
                       "numerics on the CPU, device validation when a GPU of ARCH is present, and a report "
                       "under build/ARCH/. Unchanged inputs are taken from the stage cache.")
    p.add_argument("arch", help="descriptor name (blackwell) or path to a .yaml")
    p.add_argument("--from", dest="base", metavar="BASE", help="the arch the port starts from (default: the runbook's base, else the descriptor's "
                   "identity.previous, else none)")
    p.add_argument("--product", metavar="NAME",
                   help="schedule and report for one product of the arch (its SM count, memory and peaks from "
                        "the descriptor's products section, e.g. \"H100 SXM\"; default: the descriptor's default)")
    p.add_argument("--runbook", help="runbook name or path (default: ARCH-bringup, else generic-bringup)")
    p.add_argument("--device", choices=("auto", "on", "off"), default="auto",
                   help="device validation: auto = when a GPU of ARCH is present; on = required "
                        "(exit 3 without one, after the other stages ran)")
    p.add_argument("--emulate", choices=("on", "off"), default="on",
                   help="on (default): run each sass-checked kernel in porter's PTX simulator at its emulation "
                        "shapes (the smallest; a remainder tile, grouped-query heads, ragged lengths) and the "
                        "smallest again under a second warp order (level emulated: executed in the simulator, "
                        "not on a GPU); off: skip that stage")
    p.add_argument("--jobs", "-j", type=jobs_arg, default=0, help="parallel compile workers (default 0: one per CPU)")
    p.add_argument("--out", help="folder the artifacts and report.{md,json,html} are written into, as they are (default build/ARCH)")
    p.add_argument("--kernel", metavar="PATTERN",
                   help="only these kernels: an exact kernel name selects that kernel only; a variant or family "
                        "name all of its kernels; a glob (*, ?, [) matches names, variants and families; "
                        "the report goes to report.kernel-PATTERN.* and the full report.* is left as it is")
    p.add_argument("--quiet", "-q", action="store_true", help="no live progress, summary only")
    from porter.kernels.knobs import add_set_argument

    add_set_argument(p)   # knobs: KEY=VALUE to every kernel that has the knob, KERNEL:KEY=VALUE to KERNEL's
    from porter.tuning.engine import add_executor_arguments

    add_executor_arguments(p)
    p.set_defaults(func=run)


def run(args) -> int:
    import sys

    from rich.console import Console

    from porter.pipeline import RunOptions, run_target

    console = Console(stderr=False, soft_wrap=True)
    knobs = check_target_knobs(args)
    opts = RunOptions(arch=args.arch, base=args.base, runbook=args.runbook, out=args.out, product=args.product,
                      jobs=args.jobs, device=args.device, emulate=args.emulate, kernel=args.kernel, knobs=knobs,
                      executor=args.executor, address=args.address)
    try:
        if args.quiet or not console.is_terminal:
            from porter.pipeline.context import NullDisplay

            class _Lines(NullDisplay):  # one plain line per stage when no live view is wanted
                def stage_done(self, r):
                    if not args.quiet:
                        cached = f", {r.units_cached} cached" if r.units_cached else ""
                        print(f"{r.status:8s} {r.id} ({r.seconds:.1f}s{cached}) {r.summary}", flush=True)
            result = run_target(opts, _Lines())
        else:
            from porter.pipeline.display import RichDisplay

            with RichDisplay(console) as display:
                result = run_target(opts, display)
    except KeyboardInterrupt as exc:   # Ctrl-C, or SIGTERM / SIGHUP (porter.cli.Terminated)
        # Every finished unit is already stored whole (atomic writes), so say how to go on.
        from porter.cli import interrupted_exit_code

        print("porter: interrupted; finished work is kept, run the same command again to resume",
              file=sys.stderr)
        return interrupted_exit_code(exc)
    print_summary(console, result)
    if result.base_why:   # say which base the port started from, and why (never a silent guess)
        console.print(f"base arch: {result.base or 'none'} ({result.base_why})" if result.base
                      else f"base arch: {result.base_why}", highlight=False, markup=False)
    no_device = result.no_device
    others = [s for s in result.failed if s is not no_device]
    if no_device is not None:
        # As `porter validate/bench --device on` say it (exit 3); the other stages ran.
        print(f"porter: error: {no_device.data['why']} (--device on); the other stages' results are in "
              f"{result.out_dir}/", file=sys.stderr)
    if others:
        names = ", ".join(f"'{s.id}'" for s in others)
        print(f"porter: stage {names} failed: {others[0].summary}", file=sys.stderr)
    return result.exit_code


def check_target_knobs(args) -> dict:
    """``--set`` parsed and checked against the kernels the run builds, before any stage runs
    (an illegal knob is one line, exit 2); which kernels an unscoped knob leaves at their
    defaults is said on stderr."""
    import sys

    from porter.kernels.knobs import apply_knobs, parse_sets

    knobs = parse_sets(getattr(args, "knobs", None))
    if not knobs:
        return {}
    from porter.commands.kernel import all_variants, match_kernels
    from porter.descriptor.arch import load_arch

    arch = load_arch(args.arch)
    if args.product:   # a product's own figures (its SM count bounds grid_ctas), as the run uses them
        arch = arch.for_product(args.product)
    every = all_variants(arch)
    selected = match_kernels(every, args.kernel) if args.kernel else every
    for note in apply_knobs(arch, selected, knobs, every=every)[1]:
        print(f"porter: {note}", file=sys.stderr)
    return knobs


def print_summary(console, result) -> None:
    from rich.table import Table

    from porter.levels import Level
    from porter.report.build import why_unsupported

    named = f"{result.arch} ({result.product})" if getattr(result, "product", "") else result.arch
    table = Table(title=f"{named}: kernels by the highest level each reached", title_justify="left")
    table.add_column("kernel", no_wrap=True)
    table.add_column("level", no_wrap=True)
    table.add_column("checks failed", overflow="fold")
    # The report this run wrote (a --kernel run writes report.kernel-<pattern>.json beside the full one).
    report_stage = next((s for s in result.stages if s.kind == "report"), None)
    report_json = next((Path(f) for f in (report_stage.data.get("files", []) if report_stage else [])
                        if str(f).endswith(".json")), result.out_dir / "report.json")
    kernels, unsupported = [], []
    if report_json.exists():
        import json

        rep = json.loads(report_json.read_text())
        kernels, unsupported = rep["kernels"], rep["unsupported"]
    else:  # runbook without a report stage: read the stage results directly
        for s in result.stages:
            if s.kind == "kernels":
                unsupported += s.data.get("unsupported", [])
                kernels += [{"name": k["name"], "level": Level(k["level"]).label,
                             "checks_failed": [c for c in k.get("checks", []) if not c["passed"]]}
                            for k in s.data.get("kernels", [])]
    from rich.markup import escape as lit  # check details quote descriptor text: show it literally

    for k in kernels:
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in k["checks_failed"]) or "-"
        table.add_row(lit(k["name"]), k["level"], lit(failed))
    console.print(table)
    from porter.tuning.table import tuned_line   # which kernels the kernels stage built from a tuning/ entry

    kernels_stages = [s for s in result.stages if s.kind == "kernels" and isinstance(s.data, dict)]
    if kernels_stages:
        tuned = {n: note for s in kernels_stages for n, note in (s.data.get("tuned") or {}).items()}
        console.print(tuned_line(tuned, [k["name"] for k in kernels]), highlight=False, markup=False)
    if unsupported:
        # Not built, so nothing was checked: the reason is what the arch lacks, not a failed check.
        nope = Table(title=f"not built on {result.arch} (unsupported: the arch lacks what they need)",
                     title_justify="left")
        nope.add_column("kernel", no_wrap=True)
        nope.add_column("why not", overflow="fold")
        for u in unsupported:
            nope.add_row(lit(u["name"]), lit(why_unsupported(u)))
        console.print(nope)
    for k in kernels:
        q = k.get("schedule")
        if q:  # a persistent kernel's plan on this arch (predicted, see report.md "Schedules")
            console.print(f"{k['name']} schedule: {q['model']} at pos {q['pos']} on {q['queues']} queues, "
                          f"{q['instructions']} instructions ({q['per_sm']['min']}-{q['per_sm']['max']} per SM); "
                          f"predicted {q['predicted_latency_us']:.0f} us per step vs a "
                          f"{q['memory_floor_us']:.0f} us memory floor, i.e. {q['floor_ratio']:.0%} of the descriptor's bandwidth (a model, not a measurement)",
                          highlight=False, markup=False)
    dev = next((s for s in result.stages if s.kind == "device"), None)
    if dev is not None:
        console.print(f"device: {dev.summary}", highlight=False, markup=False)
    for line in verdict_lines(result, kernels, unsupported, dev):
        console.print(line, highlight=False, markup=False)
    from porter.compile.cache_entry import corrupt_text

    corrupt = corrupt_text(getattr(result, "cache_corrupt", 0))
    if corrupt:   # a cache entry whose bytes failed its digest was never used: rebuilt instead
        why = "its content did not match its digest" if getattr(result, "cache_corrupt", 0) == 1 else "each one's content did not match its digest"
        console.print(f"{corrupt} ({why})", highlight=False, markup=False)
    # "fresh": compiles found in porter's compile cache (shared by every run) are not counted.
    console.print(f"{len(result.stages)} stages, {len(result.failed)} failed; {result.units_run} units run, "
                  f"{result.units_cached} reused from an earlier run, {result.nvrtc_calls} fresh NVRTC compiles; "
                  f"{result.seconds:.1f} s; "
                  f"artifacts in {result.out_dir}/", highlight=False, markup=False)


def verdict_lines(result, kernels: list[dict], unsupported: list, dev) -> list[str]:
    """What the run amounts to, in words: the highest level reached and what to do next."""
    from porter.levels import QUALIFIERS, Level

    if not kernels:
        return []
    order = {lvl.label: lvl for lvl in Level}
    highest = max((order[k["level"]] for k in kernels), default=None)
    n_top = sum(order[k["level"]] == highest for k in kernels)
    uns = f"; {len(unsupported)} unsupported on {result.arch}" if unsupported else ""
    note = f" ({QUALIFIERS[highest]})" if highest in QUALIFIERS else ""
    if highest == Level.FAILED:
        lines = [f"no kernel got through: all {len(kernels)} failed{uns}"]
    else:
        lines = [f"highest level reached: {highest.label}{note}, by {n_top} of {len(kernels)} kernels{uns}"]
    short = [k["name"] for k in kernels if k["checks_failed"]]
    if short:
        lines.append(f"next: fix the failed checks of {', '.join(short[:4])}{' and more' if len(short) > 4 else ''} "
                     f"(details in {result.out_dir}/report.md), then rerun: unchanged work comes from the cache")
    # Device validation takes the kernels that passed their SASS checks: suggest it once there are some.
    if dev is not None and dev.status != "passed" and highest >= Level.SASS_CHECKED:
        import shlex

        # The product this run used (its figures, its build folder): name it and carry --product,
        # so the suggested command repeats this run on the GPU rather than the descriptor's default.
        product = getattr(result, "product", "")
        # "an" before a letter whose name starts with a vowel sound (an H200, an RTX 5090, a B200)
        where = (f"an {product}" if product[:1].upper() in "AEFHILMNORSX" else f"a {product}") if product else \
            f"one of {', '.join(result.products) or f'{result.arch} GPUs'}"
        again = f" --product {shlex.quote(product)}" if product else ""
        if getattr(dev, "data", {}).get("no_device"):
            # This run was `--device on` and found no GPU: never suggest the command that just failed.
            lines.append(f"next: device validation needs {where}; this machine has none "
                         f"({dev.data.get('why', 'no matching GPU')})")
        else:
            lines.append(f"next: on a machine with {where}, run `porter target {result.arch_arg or result.arch}"
                         f"{again} --device on` to reach device-validated and benchmarked")
    return lines
