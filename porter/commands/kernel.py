"""``porter kernel list|show|render``: the kernel variants of every family, one arch at a time."""

from __future__ import annotations


from porter.kernels.knobs import add_set_argument


def register(sub) -> None:
    p = sub.add_parser("kernel", help="list, show or render kernel variants for an arch")
    ks = p.add_subparsers(dest="kernel_command", metavar="SUBCOMMAND", required=True)
    ls = ks.add_parser("list", help="variants with supported / unsupported and missing features")
    ls.add_argument("--arch", required=True)
    ls.set_defaults(func=run_list)
    show = ks.add_parser("show", help="a variant's chosen configuration and resource budget")
    show.add_argument("kernel", help="variant or kernel name, e.g. gemm.nvfp4")
    show.add_argument("--arch", required=True)
    add_set_argument(show)
    show.set_defaults(func=run_show)
    rend = ks.add_parser("render", help="write a variant's generated CUDA source")
    rend.add_argument("kernel")
    rend.add_argument("--arch", required=True)
    rend.add_argument("-o", "--output", help="file to write (default: stdout)")
    add_set_argument(rend)
    rend.set_defaults(func=run_render)


def _console():
    """A terminal's own width; 120 columns into a pipe or a file, so tables stay readable."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 120)


def all_variants(arch) -> list:
    """Every family's variants for ``arch``, plus an Unsupported entry for each kernel a
    family offers only on other installed archs (attention's ``.pair`` specs exist where
    the descriptor has CTA pairs), so every arch lists the same kernels."""
    from porter import kernels
    from porter.planning.plan import merge_listing, offered_elsewhere

    out = []
    for fam in sorted(kernels.FAMILIES):
        own = list(kernels.family_module(fam).variants(arch))
        out += merge_listing(own, offered_elsewhere(arch, own, fam))
    return out


GLOB_CHARS = "*?["


def match_kernels(every: list, pattern: str) -> list:
    """The entries ``pattern`` selects. An exact spec name selects that kernel only (so
    ``gemm.nvfp4`` is not also ``gemm.nvfp4.pair``, whose variant is ``gemm.nvfp4``); a glob
    pattern (``*``, ``?``, ``[``) is matched against names, variants and families; otherwise a
    variant or family name selects all of its kernels."""
    import fnmatch

    if any(c in pattern for c in GLOB_CHARS):
        return [v for v in every if any(fnmatch.fnmatchcase(n, pattern) for n in (v.name, v.variant, v.family))]
    exact = [v for v in every if v.name == pattern]
    return exact or [v for v in every if pattern in (v.variant, v.family)]


def find_kernel(name: str, arch) -> list:
    """The specs (or Unsupported) ``name`` selects (see match_kernels); PorterError with close names."""
    import difflib

    from porter.errors import PorterError

    every = all_variants(arch)
    hits = match_kernels(every, name)
    if hits:
        return hits
    names = sorted({v.name for v in every} | {v.variant for v in every})
    close = difflib.get_close_matches(name, names, n=4, cutoff=0.4)
    hint = f"did you mean {', '.join(close)}?" if close else f"known: {', '.join(names) or 'none'}"
    raise PorterError(f"kernel '{name}': no such variant for {arch.name}; {hint}")


def run_list(args) -> int:
    from rich.table import Table

    from rich.text import Text  # reasons are data: a "[...]" in one is not markup

    from porter.descriptor.arch import load_arch
    from porter.kernels.base import Unsupported
    from porter.report.build import why_unsupported

    arch = load_arch(args.arch)
    table = Table(title=f"kernel variants for {arch.name} ({arch.target})", title_justify="left")
    # Two names per row: the kernel (spec) name is unique per arch and is what show/render
    # take to select one kernel; the variant name groups a kernel's forms (single-CTA, .pair).
    for col in ("kernel (spec name)", "variant (shared by its forms)", "status"):
        table.add_column(col, no_wrap=True)   # names are what people copy: never cut them
    table.add_column("features / missing")
    for v in all_variants(arch):
        if isinstance(v, Unsupported):
            table.add_row(v.name, v.variant, "[red]unsupported[/]", Text(why_unsupported(v.to_dict())))
        else:
            table.add_row(v.name, v.variant, "[green]supported[/]", ", ".join(v.features))
    _console().print(table)
    return 0


def run_show(args) -> int:
    from rich.table import Table
    from rich.text import Text

    from porter.descriptor.arch import load_arch
    from porter.kernels.base import Unsupported
    from porter.report.build import why_unsupported

    arch = load_arch(args.arch)
    console = _console()
    for spec in with_knobs(arch, find_kernel(args.kernel, arch), args):
        if isinstance(spec, Unsupported):
            console.print(Text.assemble((spec.name, "bold"), f" on {arch.name}: unsupported, "
                                        f"{why_unsupported(spec.to_dict())}"), highlight=False)
            continue
        console.print(f"[bold]{spec.name}[/] ({spec.variant}) on {arch.name} {arch.target}: entry {spec.entry}, "
                      f"template {spec.template or '-'}", highlight=False)
        from porter.tuning.entries import tuned_note   # which tuning/ entry chose this configuration

        note = tuned_note(arch, spec)
        console.print(f"tuned: {note}" if note else "tuned: no (the hand-chosen configuration)", highlight=False)
        cfg = Table(title="configuration", title_justify="left")
        cfg.add_column("key")
        cfg.add_column("value")
        for k, v in spec.config.items():
            cfg.add_row(str(k), Text(config_text(v)))   # Text: a "[...]" in a value is not markup
        console.print(cfg)
        built, where = last_build(spec, arch)
        budget = Table(title="resource budget", title_justify="left")
        for col in ("resource", "uses", "limit"):
            budget.add_column(col)
        csize = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
        budget.add_row("threads / block", str(spec.threads), str(arch.max_threads_per_block))
        budget.add_row("shared memory / block", Text(smem_text(spec, built, where, arch)),
                       f"{arch.smem_per_block_bytes} B")
        budget.add_row("TMEM columns", str(spec.tmem_columns), str(arch.tmem.columns))
        budget.add_row("cluster", "x".join(map(str, spec.cluster)),
                       f"{arch.cluster.max_portable} CTAs portable" if arch.has("clusters") else "no clusters")
        budget.add_row("registers / thread", Text(registers_text(spec, built, where, arch)),
                       str(arch.max_regs_per_thread))
        console.print(budget)
        if csize > 1 and not arch.has("clusters"):
            console.print("[red]cluster launch needs the clusters feature[/]")
        console.print("features: " + ", ".join(spec.features), highlight=False)
        knob_table(console, arch, spec)
    return 0


def with_knobs(arch, specs: list, args) -> list:
    """``specs`` with the command's ``--set`` knobs applied (porter.kernels.knobs), saying
    which selected kernels an unscoped knob left at their defaults."""
    import sys

    from porter.kernels.knobs import apply_knobs, parse_sets

    out, notes = apply_knobs(arch, specs, parse_sets(getattr(args, "knobs", None)), every=all_variants(arch))
    for note in notes:
        print(f"porter: {note}", file=sys.stderr)
    return out


def knob_table(console, arch, spec) -> None:
    """The kernel's knobs: the value this spec has, the default, the legal values."""
    from rich.table import Table

    from porter.kernels import knob_rules, knobs

    rows = knobs.describe(arch, spec.name)
    if not rows:
        return
    now = knobs._family(spec.name).knobs_of(arch, spec)
    table = Table(title="knobs (--set KEY=VALUE; each checked against the budgets above)", title_justify="left")
    for col in ("knob", "value", "default", "legal values"):
        table.add_column(col)
    for name, default, legal in rows:
        table.add_row(name, knob_rules.show(now.get(name, "-")), default, legal)
    console.print(table)


def _scalar(v) -> str:
    if isinstance(v, (list, tuple)):
        return "[" + ", ".join(_scalar(x) for x in v) + "]"
    if isinstance(v, dict):
        return ", ".join(f"{k} {_scalar(x)}" for k, x in v.items())
    return str(v)


def config_text(value) -> str:
    """A config value for people: kernel parameters as ``type name`` one per line, a list
    of records (tensor maps) one record per line as ``key value, ...``, other lists
    comma-separated; never a Python repr."""
    if isinstance(value, (list, tuple)) and value:
        if all(isinstance(p, (list, tuple)) and len(p) == 2 and all(isinstance(x, str) for x in p) for p in value):
            return "\n".join(f"{t} {n}" for n, t in value)          # (name, C type) pairs: params
        if all(isinstance(x, dict) for x in value):
            return "\n".join(_scalar(x) for x in value)
        if all(isinstance(x, str) for x in value) and any(len(x) > 40 for x in value):
            return "\n".join(value)                                  # long descriptions: one per line
        return ", ".join(_scalar(x) for x in value)
    return _scalar(value)


def last_build(spec, arch) -> tuple[dict | None, str]:
    """(resources of the last `porter target` build of this very spec, its file) from
    build/<arch>/kernels/<name>/resources.json; None when there is no build, or the build
    was of another configuration (its spec differs: its figures would not be this kernel's)."""
    import json
    from pathlib import Path

    from porter.pipeline.work import jsonable

    path = Path("build") / arch.name / "kernels" / spec.name / "resources.json"
    try:
        stored = json.loads(path.read_text())
        resources = stored["resources"]
    except (OSError, ValueError, KeyError, TypeError):
        return None, str(path)
    if not isinstance(resources, dict) or stored.get("spec") != jsonable(spec.to_dict()):
        return None, f"{path} (of another configuration)"
    return resources, str(path)


def smem_text(spec, built, where: str, arch) -> str:
    """Dynamic bytes come from the spec; static bytes (the kernel's __shared__ variables)
    only from a compile, and the limit applies to the sum, which the report prints."""
    dynamic = f"dynamic {spec.smem_bytes} B"
    static = (built or {}).get("shared_bytes")
    if not isinstance(static, int):
        return f"{dynamic} + static (known after a build: porter target {arch.name})"
    return f"{dynamic} + static {static} B (from the last build, {where}) = {spec.smem_bytes + static} B"


def registers_text(spec, built, where: str, arch) -> str:
    """The launch register count (the last build's, else the family's plan), and for a
    kernel that moves registers between warp roles with setmaxnreg, what each role runs
    with: the launch count alone understates the consumers' budget."""
    cfg = spec.config
    regs = (built or {}).get("registers")
    split = ""
    if "setmaxnreg" in spec.features and {"producer_regs", "consumer_regs"} <= set(cfg):
        split = f"producer {cfg['producer_regs']} / consumer {cfg['consumer_regs']} via setmaxnreg"
    if regs is not None:
        notes = [n for n in (split, f"from the last build, {where}") if n]
    elif cfg.get("registers_at_launch") is not None:
        regs = cfg["registers_at_launch"]
        notes = [n for n in (split, f"planned; the compiled count is known after porter target {arch.name}") if n]
    else:
        return f"known after a build (porter target {arch.name})" + (f"; {split}" if split else "")
    return f"{regs} at launch ({'; '.join(notes)})"


def run_render(args) -> int:
    from porter.descriptor.arch import load_arch
    from porter.errors import PorterError
    from porter.fsutil import atomic_write
    from porter.kernels import family_module
    from porter.kernels.base import Unsupported

    arch = load_arch(args.arch)
    if args.output:
        from porter.cli import check_output_file

        check_output_file(args.output, "-o")
    specs = [s for s in with_knobs(arch, find_kernel(args.kernel, arch), args) if not isinstance(s, Unsupported)]
    if not specs:
        missing = find_kernel(args.kernel, arch)[0].missing
        raise PorterError(f"kernel '{args.kernel}': unsupported on {arch.name} (needs {', '.join(missing)}); nothing to render")
    spec = specs[0]
    source = family_module(spec.family).render(spec, arch)
    if args.output:
        atomic_write(args.output, source)
        print(f"wrote {args.output} ({spec.name} for {arch.target}, {len(source.splitlines())} lines)")
    else:
        print(source, end="")
    return 0
