"""``porter diff A B``: what changed between two archs' kernels, and which feature drove it.

First the descriptor diff (porter.descriptor.archdiff), then per kernel: the unified diff of the
generated sources with each hunk labelled by feature (porter.planning.srcdiff), the SASS opcode
histograms side by side and the resources side by side. ``--html FILE`` writes the
same as one self-contained page.
"""

from __future__ import annotations

from porter.report.diff_summary import summary_row  # noqa: F401  (the terminal summary and the page's)
from porter.report.opcodes import histogram_rows, opcode_mark  # noqa: F401  (also used by tests)


def register(sub) -> None:
    p = sub.add_parser("diff", help="kernels of arch A vs arch B: feature-labelled source diff, SASS opcodes, resources")
    p.add_argument("a", help="base arch (e.g. hopper)")
    p.add_argument("b", help="target arch (e.g. blackwell)")
    p.add_argument("--kernel", help="only this kernel (name, variant or fnmatch pattern)")
    p.add_argument("--html", metavar="FILE", help="also write the full diff as a self-contained HTML page")
    p.add_argument("--full", action="store_true",
                   help="print every source hunk and opcode table (default: one summary row per kernel)")
    p.add_argument("--no-build", action="store_true", help="sources only: skip compiling for the SASS and resources")
    p.set_defaults(func=run)


def pair_kernels(a, b, pattern=None):
    """[(key, spec_a | Unsupported | None, spec_b | ...)] matched by name, then by variant.

    ``pattern`` selects as ``porter kernel show`` does (porter.commands.kernel.match_kernels):
    an exact kernel name on either arch selects that kernel only, on both sides."""
    from porter.commands.kernel import GLOB_CHARS, match_kernels
    from porter.planning.plan import kernel_specs

    # complete: a kernel one arch builds and the other does not offer at all shows as
    # unsupported there (with the features it lacks), not as "no such kernel".
    sa, _ = kernel_specs(a, complete=True)
    sb, _ = kernel_specs(b, complete=True)
    if pattern:
        if not any(c in pattern for c in GLOB_CHARS) and any(s.name == pattern for s in sa + sb):
            sa, sb = [s for s in sa if s.name == pattern], [s for s in sb if s.name == pattern]
        else:
            sa, sb = match_kernels(sa, pattern), match_kernels(sb, pattern)
    by_name_b = {s.name: s for s in sb}
    used_b, pairs = set(), []
    for s in sa:
        other = by_name_b.get(s.name)
        if other is None:
            other = next((t for t in sb if t.variant == s.variant and t.name not in used_b), None)
        if other is not None:
            used_b.add(other.name)
        pairs.append((s.name if other is None or other.name == s.name else f"{s.name} -> {other.name}", s, other))
    pairs += [(t.name, None, t) for t in sb if t.name not in used_b]
    return pairs


# The resources row for a kernel's level, labelled with what the level can be here: at
# most sass-checked (see `porter target` / report.md for numerics-model and above).
BUILD_LEVEL = "build level (this command runs no numerics)"


def kernel_diff(a, b, spec_a, spec_b, build: bool = True) -> dict:
    """Everything ``porter diff`` shows for one pair (either side may be missing or Unsupported)."""
    from porter.kernels import family_module
    from porter.kernels.base import Unsupported
    from porter.planning.srcdiff import label_configuration, labelled_diff, render_with_origins

    out = {"a": None, "b": None, "hunks": [], "notes": [], "histogram": {}, "resources": {},
           "signature_opcodes": []}
    sides = {}
    for key, arch, spec in (("a", a, spec_a), ("b", b, spec_b)):
        if spec is None:
            out["notes"].append(f"no such kernel on {arch.name}")
        elif isinstance(spec, Unsupported):
            from porter.report.build import why_unsupported

            out["notes"].append(f"unsupported on {arch.name}: {why_unsupported(spec.to_dict())}")
        else:
            src = render_with_origins(family_module(spec.family), spec, arch)
            if src.note:
                out["notes"].append(f"{arch.name}: {src.note}")
            sides[key] = (arch, spec, src)
            out[key] = spec.name
    if len(sides) == 2:
        out["hunks"] = labelled_diff(sides["a"][2], sides["b"][2], f"{a.name}/{spec_a.name}.cu", f"{b.name}/{spec_b.name}.cu")
        label_configuration(out["hunks"], a, b)   # configuration hunks: the features and figures behind them
    if build:
        from porter.compile import sass
        from porter.kernels.build import build_kernel

        full = []
        for key, (arch, spec, src) in sides.items():
            kb = build_kernel(spec, arch, source=src.text)
            if kb.histogram:   # no histogram (compile failed): that side shows "-", not zeros
                out["histogram"][key] = dict(sass.base_histogram(kb.histogram))
                full.append(kb.histogram)
            res = dict(kb.resources)
            res["dynamic_smem_bytes"] = spec.smem_bytes
            res["tmem_columns"] = spec.tmem_columns
            res["threads"] = spec.threads
            # The build's level (render, compile, SASS and limit checks): diff runs no numerics
            # model and no device, so it must not read as the level `porter target` reports.
            res[BUILD_LEVEL] = kb.level.label
            if kb.compile_error:
                res["compile_error"] = kb.compile_error
            out["resources"][key] = res
        built = [x for x in (spec_a, spec_b) if x is not None and not isinstance(x, Unsupported)]
        out["signature_opcodes"] = sorted(signature_opcodes(full, signature_patterns((a, b), built)))
    return out


def print_summary(console, a, b, results) -> None:
    """The default output: one row per kernel, not thousands of diff lines."""
    from rich.table import Table
    from rich.text import Text

    t = Table(title=f"kernels {a.name} -> {b.name} (summary; --full for every hunk, --html FILE for a page)",
              title_justify="left")
    for col in ("kernel", "hunks", "+/-", "driven by (hunks)", "SASS new / gone", "registers", "dynamic smem B"):
        t.add_column(col, overflow="fold")
    for key, d in results:
        r = summary_row(d)
        sass = ", ".join([f"+{op}" for op in r["opcodes_new"]] + [f"-{op}" for op in r["opcodes_gone"]]) or "-"
        # The note's head only ("unsupported on hopper"); --full gives its reasons.
        name = key + (f" ({'; '.join(n.split(':', 1)[0] for n in r['notes'])})" if r["notes"] else "")
        t.add_row(Text(name), str(r["hunks"]), f"+{r['added']} -{r['removed']}", Text(", ".join(r["features"]) or "-"),
                  Text(sass), r["registers"] or "-", r["smem"] or "-")
    console.print(t)


def signature_patterns(archs, specs) -> list[str]:
    """Opcode regexes that say what a kernel is built from: every feature signature and
    MMA-kind SASS pattern of both descriptors, plus each built spec's own required rules
    (tcgen05.commit's UTCBAR, the LDTM epilogue), which no descriptor signature names."""
    pats: list[str] = []
    for arch in archs:
        for group in (*arch.sass_signatures.values(), *arch.tensor_core.kind_sass.values()):
            pats += group
    for spec in specs:
        pats += [r.pattern for r in getattr(spec, "sass_required", ())]
    return list(dict.fromkeys(pats))


def signature_opcodes(full_histograms, patterns) -> set[str]:
    """Base opcodes (``UTCOMMA``) with an instruction whose full opcode (``UTCOMMA.4X``)
    or base opcode matches one of ``patterns`` (re.match, as the SASS checks apply them)."""
    import re

    regexes = [re.compile(p) for p in patterns]
    out = set()
    for hist in full_histograms:
        for opcode in hist or {}:
            base = opcode.split(".")[0]
            if any(r.match(opcode) or r.match(base) for r in regexes):
                out.add(base)
    return out


TOP_OPCODES = 30   # other opcodes shown after the signature ones


def _count(n: int | None) -> str:
    return "-" if n is None else str(n)


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from porter.descriptor.arch import load_arch
    from porter.errors import PorterError

    a, b = load_arch(args.a), load_arch(args.b)
    if args.html:
        from porter.cli import check_output_file

        check_output_file(args.html, "--html")
    # Bad input first, before pages of output: a pattern that matches nothing is an error.
    if args.kernel:
        from porter.pipeline.runner import check_kernel_pattern

        check_kernel_pattern(args.kernel, [b, a])
    pairs = pair_kernels(a, b, args.kernel)
    if not pairs:
        raise PorterError(f"--kernel {args.kernel!r}: matches no kernel, variant or family on {a.name} or {b.name}; "
                          f"see porter kernel list --arch {b.name}")
    if not args.no_build:
        from porter.compile.toolchain import require_toolchain

        require_toolchain()
    from rich.markup import escape as lit  # notes and labels quote descriptor text: data, not markup

    import sys

    console = Console(highlight=False, width=None if sys.stdout.isatty() else 160)
    try:
        from porter.descriptor.archdiff import diff_archs
        from porter.commands.arch import render_diff
        archdiff = diff_archs(a, b)
        render_diff(archdiff)
        archdiff = archdiff.to_dict()
    except ImportError:
        from porter.planning.plan import feature_diff

        lost, gained = feature_diff(a, b)
        archdiff = {"features": {"lost": lost, "gained": gained}}
        console.print(f"features lost: {', '.join(lost) or 'none'}; gained: {', '.join(gained) or 'none'}",
                      markup=False)
    results = []
    for key, sa, sb in pairs:
        d = kernel_diff(a, b, sa, sb, build=not args.no_build)
        results.append((key, d))
        if not args.full:
            continue
        console.rule(f"[bold]{lit(key)}")
        for note in d["notes"]:
            console.print(f"[yellow]{lit(note)}[/]")
        for h in d["hunks"]:
            console.print(f"[cyan]{lit(h.header)}[/]  [bold magenta]\\[feature: {lit(', '.join(h.labels))}][/]")
            for line in h.lines:
                style = "red" if line.startswith("-") else "green" if line.startswith("+") else "dim"
                console.print(line, style=style, markup=False)
        if d["histogram"]:
            sig = set(d["signature_opcodes"])
            t = Table(title="SASS opcodes (base opcode)", title_justify="left",
                      caption=f"* = in a descriptor's feature / MMA-kind signatures or the kernel's required SASS "
                              f"(all listed); then the top {TOP_OPCODES} others by change; - = no SASS on that arch",
                      caption_justify="left")
            t.add_column("opcode")
            t.add_column(a.name, justify="right")
            t.add_column(b.name, justify="right")
            for op, x, y in histogram_rows(d["histogram"].get("a"), d["histogram"].get("b"), sig, TOP_OPCODES):
                mark = {"new": " [green]new[/]", "gone": " [red]gone[/]", "": ""}[opcode_mark(x, y)]
                t.add_row(("* " if op in sig else "") + op + mark, _count(x), _count(y))
            console.print(t)
        if d["resources"]:
            t = Table(title="resources", title_justify="left")
            t.add_column("resource")
            t.add_column(a.name, justify="right")
            t.add_column(b.name, justify="right")
            ra, rb = d["resources"].get("a", {}), d["resources"].get("b", {})
            for k in [k for k in dict.fromkeys([*ra, *rb]) if k != "function"]:
                t.add_row(k, str(ra.get(k, "-")), str(rb.get(k, "-")))
            console.print(t)
    if not args.full:
        print_summary(console, a, b, results)
    if args.html:
        from porter.fsutil import atomic_write
        from porter.report.diff_html import render_diff_html

        atomic_write(args.html, render_diff_html(a, b, archdiff, results))
        console.print(f"wrote {args.html}", markup=False)
    return 0
