"""``porter diff A B``: what changed between two archs' kernels, and which feature drove it.

First the descriptor diff (porter.archdiff), then per kernel: the unified diff of the
generated sources with each hunk labelled by feature (porter.srcdiff), the SASS opcode
histograms side by side and the resources side by side. ``--html FILE`` writes the
same as one self-contained page.
"""

from __future__ import annotations


def register(sub) -> None:
    p = sub.add_parser("diff", help="kernels of arch A vs arch B: feature-labelled source diff, SASS opcodes, resources")
    p.add_argument("a", help="base arch (e.g. hopper)")
    p.add_argument("b", help="target arch (e.g. blackwell)")
    p.add_argument("--kernel", help="only this kernel (name, variant or fnmatch pattern)")
    p.add_argument("--html", metavar="FILE", help="also write a self-contained HTML page")
    p.add_argument("--no-build", action="store_true", help="sources only: skip compiling for the SASS and resources")
    p.set_defaults(func=run)


def pair_kernels(a, b, pattern=None):
    """[(key, spec_a | Unsupported | None, spec_b | ...)] matched by name, then by variant."""
    import fnmatch

    from porter.plan import kernel_specs

    sa, _ = kernel_specs(a)
    sb, _ = kernel_specs(b)

    def keep(s):
        return not pattern or any(fnmatch.fnmatchcase(n, pattern) for n in (s.name, s.variant, s.family))

    sa, sb = [s for s in sa if keep(s)], [s for s in sb if keep(s)]
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


def kernel_diff(a, b, spec_a, spec_b, build: bool = True) -> dict:
    """Everything ``porter diff`` shows for one pair (either side may be missing or Unsupported)."""
    from porter.kernels import family_module
    from porter.kernels.base import Unsupported
    from porter.srcdiff import labelled_diff, render_with_origins

    out = {"a": None, "b": None, "hunks": [], "notes": [], "histogram": {}, "resources": {}}
    sides = {}
    for key, arch, spec in (("a", a, spec_a), ("b", b, spec_b)):
        if spec is None:
            out["notes"].append(f"no such kernel on {arch.name}")
        elif isinstance(spec, Unsupported):
            out["notes"].append(f"unsupported on {arch.name}: needs {', '.join(spec.missing)}")
        else:
            src = render_with_origins(family_module(spec.family), spec, arch)
            if src.note:
                out["notes"].append(f"{arch.name}: {src.note}")
            sides[key] = (arch, spec, src)
            out[key] = spec.name
    if len(sides) == 2:
        out["hunks"] = labelled_diff(sides["a"][2], sides["b"][2], f"{a.name}/{spec_a.name}.cu", f"{b.name}/{spec_b.name}.cu")
    if build:
        from porter import sass
        from porter.kernels.build import build_kernel

        for key, (arch, spec, src) in sides.items():
            kb = build_kernel(spec, arch, source=src.text)
            out["histogram"][key] = dict(sass.base_histogram(kb.histogram)) if kb.histogram else {}
            res = dict(kb.resources)
            res["dynamic_smem_bytes"] = spec.smem_bytes
            res["tmem_columns"] = spec.tmem_columns
            res["threads"] = spec.threads
            res["level"] = kb.level.label
            if kb.compile_error:
                res["compile_error"] = kb.compile_error
            out["resources"][key] = res
    return out


def histogram_rows(hist_a: dict, hist_b: dict) -> list[tuple[str, int, int]]:
    """Opcodes that differ first (by size of change), then the shared ones."""
    ops = set(hist_a) | set(hist_b)
    rows = [(op, hist_a.get(op, 0), hist_b.get(op, 0)) for op in ops]
    return sorted(rows, key=lambda r: (r[1] == r[2], -abs(r[1] - r[2]), -(r[1] + r[2]), r[0]))


def run(args) -> int:
    from rich.console import Console
    from rich.table import Table

    from porter.arch import load_arch
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
        from porter.toolchain import require_toolchain

        require_toolchain()
    console = Console(highlight=False)
    try:
        from porter.archdiff import diff_archs
        from porter.commands.arch import render_diff
        archdiff = diff_archs(a, b)
        render_diff(archdiff)
        archdiff = archdiff.to_dict()
    except ImportError:
        from porter.plan import feature_diff

        lost, gained = feature_diff(a, b)
        archdiff = {"features": {"lost": lost, "gained": gained}}
        console.print(f"features lost: {', '.join(lost) or 'none'}; gained: {', '.join(gained) or 'none'}")
    results = []
    for key, sa, sb in pairs:
        d = kernel_diff(a, b, sa, sb, build=not args.no_build)
        results.append((key, d))
        console.rule(f"[bold]{key}")
        for note in d["notes"]:
            console.print(f"[yellow]{note}[/]")
        for h in d["hunks"]:
            console.print(f"[cyan]{h.header}[/]  [bold magenta]\\[feature: {', '.join(h.labels)}][/]")
            for line in h.lines:
                style = "red" if line.startswith("-") else "green" if line.startswith("+") else "dim"
                console.print(line, style=style, markup=False)
        if d["histogram"]:
            t = Table(title="SASS opcodes (base opcode)", title_justify="left")
            t.add_column("opcode")
            t.add_column(a.name, justify="right")
            t.add_column(b.name, justify="right")
            both = "a" in d["histogram"] and "b" in d["histogram"]   # "new"/"gone" only against a real other side
            for op, x, y in histogram_rows(d["histogram"].get("a", {}), d["histogram"].get("b", {}))[:30]:
                mark = "" if x == y or not both else (" [green]new[/]" if x == 0 else " [red]gone[/]" if y == 0 else "")
                t.add_row(op + mark, str(x), str(y))
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
    if args.html:
        from porter.fsutil import atomic_write
        from porter.report.diff_html import render_diff_html

        atomic_write(args.html, render_diff_html(a, b, archdiff, results))
        console.print(f"wrote {args.html}")
    return 0
