"""``porter arch list | show | diff``: read arch descriptors and compare them."""

from __future__ import annotations

import argparse
import json
import sys

from porter.descriptor.arch import FEATURES, limits_check, list_archs, load_arch
from porter.descriptor.archdiff import ArchDiff, diff_archs
from porter.errors import PorterError


def register(subparsers) -> None:
    parser = subparsers.add_parser("arch", help="arch descriptors: list, show, diff, check",
                                   description="Read, show and compare GPU arch descriptors (arch/*.yaml).")
    arch_sub = parser.add_subparsers(dest="arch_command", metavar="ACTION")
    parser.set_defaults(func=lambda args: _usage(parser))

    p = arch_sub.add_parser("list", help="the descriptors porter ships")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.set_defaults(func=cmd_list)

    p = arch_sub.add_parser("show", help="one descriptor: identity, limits, tensor core, formats, peaks")
    p.add_argument("arch", metavar="NAME|FILE", help="a bare name (hopper) or a path to a .yaml file")
    p.add_argument("--json", action="store_true", help="print arch.to_dict() as JSON")
    p.set_defaults(func=cmd_show)

    p = arch_sub.add_parser("diff", help="what changes going from arch A to arch B")
    p.add_argument("a", metavar="A", help="the arch a kernel comes from (name or file)")
    p.add_argument("b", metavar="B", help="the arch it goes to (name or file)")
    p.add_argument("--json", action="store_true", help="print the structured diff as JSON")
    p.set_defaults(func=cmd_diff)

    # `porter arch check` lives in its own module (another owner).
    from porter.commands import arch_check

    arch_check.register(arch_sub)


def _usage(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 2


def _console():
    from rich.console import Console

    # Wide enough that the tables stay readable when stdout is a pipe or a file.
    return Console(file=sys.stdout, width=None if sys.stdout.isatty() else 120, highlight=False)


def _lit(text) -> str:
    """Descriptor text as Rich shows it literally: '[bold]' or '[/]' in a summary is data,
    not markup (an unbalanced '[/]' would otherwise end the command in a MarkupError)."""
    from rich.markup import escape

    return escape(str(text))


def _json(data) -> None:
    print(json.dumps(data, indent=2, sort_keys=False))


# -- list ---------------------------------------------------------------------------------


def cmd_list(args) -> int:
    rows = []
    for name in list_archs():
        try:
            a = load_arch(name)
            rows.append({"name": name, "target": a.target, "products": list(a.products),
                         "tensor_core": a.tensor_core.generation,
                         "features": [f for f in FEATURES if a.has(f)], "error": None})
        except PorterError as exc:  # one broken file must not hide the others
            rows.append({"name": name, "target": None, "products": [], "tensor_core": None,
                         "features": [], "error": str(exc)})
    if args.json:
        _json(rows)
        return 1 if any(r["error"] for r in rows) else 0
    from rich.table import Table

    table = Table(title="arch descriptors")
    for col in ("name", "target", "products", "tensor core", "features"):
        table.add_column(col)
    for r in rows:
        if r["error"]:
            table.add_row(r["name"], "-", "-", "-", f"[red]invalid: {_lit(r['error'])}[/red]")
        else:
            table.add_row(r["name"], r["target"], _lit(", ".join(r["products"])), r["tensor_core"],
                          ", ".join(r["features"]))
    _console().print(table)
    return 1 if any(r["error"] for r in rows) else 0


# -- show ---------------------------------------------------------------------------------


def _bytes(n: float) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:g} {unit} ({int(n)} B)"
    return f"{int(n)} B"


def cmd_show(args) -> int:
    a = load_arch(args.arch)
    if args.json:
        _json(a.to_dict())
        return 0
    from rich.table import Table

    con = _console()
    uncertain = lambda key: " [yellow](uncertain)[/yellow]" if key in a.uncertain else ""  # noqa: E731

    t = Table(title=f"{a.name}: {_lit(a.summary)}", show_header=False, title_justify="left")
    t.add_column("key", style="bold")
    t.add_column("value")
    t.add_row("file", _lit(a.path))
    t.add_row("target", f"{a.target} (compute capability {'.'.join(map(str, a.compute_capability))}), "
              f"PTX >= {a.min_ptx}, CUDA >= {a.min_cuda}")
    t.add_row("products", _lit(", ".join(a.products)))
    if a.products_figures:   # each product's own figures (porter target --product NAME)
        def figures(name: str) -> str:
            f = a.products_figures[name]
            peaks = ", ".join(f"{d} {v:g}" for d, v in f.get("dense_tflops", {}).items())
            return (f"{f['sm_count']} SMs, {f['hbm_gb']:g} GB at {f['hbm_bandwidth_tb_s']:g} TB/s, "
                    f"L2 {f['l2_mib']:g} MiB" + (f", dense TFLOP/s {peaks}" if peaks else ""))
        t.add_row("product figures", _lit("; ".join(
            f"{n}{' (default)' if n == a.default_product else ''}: {figures(n)}" for n in a.products_figures)))
    t.add_row("features", ", ".join(f for f in FEATURES if a.has(f)))
    t.add_row("not present", ", ".join(f for f in FEATURES if not a.has(f)) or "-")
    t.add_row("SMs", str(a.sm_count))
    t.add_row("shared memory", f"{_bytes(a.smem_per_sm_bytes)} per SM, {_bytes(a.smem_per_block_bytes)} per block")
    t.add_row("registers", f"{a.regs_per_sm} per SM, {a.max_regs_per_thread} per thread")
    t.add_row("threads", f"{a.max_threads_per_block} per block, {a.max_threads_per_sm} per SM; "
              f"{a.max_blocks_per_sm} blocks per SM")
    t.add_row("limits checked", _lit(limits_check(a)))
    t.add_row("L2", _bytes(a.l2_bytes) + uncertain("memory.l2_mib"))
    # "device memory", not "HBM": the hbm_* keys also hold GDDR parts (rtx-blackwell).
    t.add_row("device memory", f"{a.hbm_bytes / 1e9:g} GB at {a.hbm_bandwidth_bytes_per_s / 1e12:g} TB/s")
    tc = a.tensor_core
    t.add_row("tensor core", f"{tc.generation}: {_lit(tc.instruction)}, issued by a {tc.issue}, "
              f"accumulators in {tc.accumulator}")
    t.add_row("Tensor Memory", f"{a.tmem.lanes} lanes x {a.tmem.columns} columns x {a.tmem.cell_bits} bit "
              f"= {_bytes(a.tmem.bytes)}" if a.tmem.present else "none")
    t.add_row("clusters", f"{a.cluster.max_portable} CTAs portable, {a.cluster.max_nonportable} non-portable; "
              f"distributed smem {'yes' if a.cluster.distributed_smem else 'no'}; "
              f"CTA pairs {'yes' if a.cta_pair else 'no'}")
    t.add_row("async copy", f"TMA {'yes' if a.tma else 'no'} (multicast {'yes' if a.tma_multicast else 'no'}), "
              f"mbarrier {'yes' if a.mbarrier else 'no'}")
    t.add_row("formats", ", ".join(a.formats))
    t.add_row("block scales", "; ".join(f"{b.name}: {b.scale_format} per {b.block_size} ({', '.join(b.kinds)})"
                                        for b in a.block_scales.values()) or "none")
    con.print(t)

    from porter.descriptor.archdiff import kinds_without_probe

    unprobed = set(kinds_without_probe(a) or ())
    k = Table(title="MMA kinds", title_justify="left",
              caption="(no probe): no probe in kernels_src/probes issues this kind; its shapes are the "
                      "descriptor's claim, not proved by a compile" if unprobed else None,
              caption_justify="left")
    for col in ("kind", "formats", "K", "shapes (M, N range/step, cta_group)", "SASS"):
        k.add_column(col)
    for kind, shapes in tc.mma_shapes.items():
        label = kind + (" (block-scaled)" if kind in tc.block_scaled_kinds else "")
        label += " [yellow](no probe)[/yellow]" if kind in unprobed else ""
        k.add_row(label, ", ".join(tc.kind_formats[kind]), str(shapes[0].k),
                  "\n".join(str(s) for s in shapes), _lit(", ".join(tc.kind_sass[kind]) or "-"))
    con.print(k)

    p = Table(title="dense peak rates", title_justify="left")
    for col in ("dtype", "TFLOP/s", "ridge FLOP/byte"):
        p.add_column(col)
    for dtype, rate in a.peak_tflops.items():
        p.add_row(dtype, f"{rate:g}", f"{a.ridge_flop_per_byte(dtype):.0f}")
    con.print(p)

    s = Table(title="SASS signatures (a feature is proven when any pattern matches)", title_justify="left")
    s.add_column("feature")
    s.add_column("patterns")
    for feature, pats in a.sass_signatures.items():
        s.add_row(feature, _lit(", ".join(pats)) + uncertain(f"sass_signatures.{feature}"))
    con.print(s)
    if a.uncertain:
        con.print(f"[yellow]uncertain figures:[/yellow] {_lit(', '.join(sorted(a.uncertain)))}")
    return 0


# -- diff ---------------------------------------------------------------------------------


def _fmt(v) -> str:
    """A figure or descriptor text for a Rich table cell, shown literally (never as markup)."""
    if v is None:
        return "-"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list)):
        return _lit(", ".join(map(str, v))) or "-"
    return _lit(v)


def _fmt_unit(v, unit: str) -> str:
    if unit == "GB" and isinstance(v, (int, float)):
        return f"{v / 1e9:g} GB"
    if unit == "bytes" and isinstance(v, (int, float)):
        return _bytes(v) if v else "0"
    if unit == "bytes/s" and isinstance(v, (int, float)):
        return f"{v / 1e12:g} TB/s"
    return _fmt(v) + (f" {unit}" if unit and v is not None else "")


# Display names of figures whose Arch attribute (from the YAML's hbm_* keys) says HBM:
# the figure is device memory, HBM or GDDR alike.
_FIGURE_LABELS = {"hbm_bytes": "device memory", "hbm_bandwidth_bytes_per_s": "device memory bandwidth"}


def render_diff(d: ArchDiff) -> None:
    from rich.table import Table

    con = _console()
    con.print(f"[bold]{d.before} -> {d.after}[/bold]")
    f = Table(title="features", title_justify="left")
    for col in ("change", "features"):
        f.add_column(col)
    f.add_row("[green]gained[/green]", _fmt(d.features_gained))
    f.add_row("[red]lost[/red]", _fmt(d.features_lost))
    f.add_row("kept", _fmt(d.features_kept))
    con.print(f)

    if d.tensor_core:
        t = Table(title="tensor core", title_justify="left")
        for col in ("property", d.before, d.after):
            t.add_column(col)
        for c in d.tensor_core:
            t.add_row(c.key, _fmt(c.before), _fmt(c.after))
        con.print(t)

    m = Table(title="MMA kinds and shapes", title_justify="left")
    for col in ("kind", "change", "details"):
        m.add_column(col)
    unprobed_b = set(d.kinds_unprobed_before or ())
    unprobed_a = set(d.kinds_unprobed_after or ())

    def probe_note(kind: str, unprobed: set, arch: str) -> str:
        # The shapes shown are the descriptor's claim; without a probe no compile proved them.
        return f"\n[yellow]no probe issues {kind} on {arch}[/yellow]" if kind in unprobed else ""

    for r in d.kinds_renamed:
        details = r.formats_summary
        if r.shapes_before != r.shapes_after:
            details += ("\nshapes before: " + "; ".join(map(str, r.shapes_before))
                        + "\nshapes after: " + "; ".join(map(str, r.shapes_after)))
        m.add_row(f"{r.before} -> {r.after}", "renamed", details + probe_note(r.after, unprobed_a, d.after))
    for kind in d.kinds_lost:
        m.add_row(kind, "[red]lost[/red]", "")
    for kind in d.kinds_gained:
        m.add_row(kind, "[green]gained[/green]", probe_note(kind, unprobed_a, d.after).lstrip("\n"))
    for kc in d.kinds_changed:
        details = []
        if kc.shapes_lost:
            details.append("lost: " + "; ".join(map(str, kc.shapes_lost)))
        if kc.shapes_gained:
            details.append("gained: " + "; ".join(map(str, kc.shapes_gained)))
        if kc.formats_before != kc.formats_after:
            details.append(f"formats {_fmt(kc.formats_before)} -> {_fmt(kc.formats_after)}")
        m.add_row(kc.kind, "shapes changed", "\n".join(details) + probe_note(kc.kind, unprobed_a, d.after))
    if d.mma_shapes_changed:
        con.print(m)
    else:
        con.print("MMA kinds and shapes: unchanged")

    o = Table(title="formats and block scales", title_justify="left")
    for col in ("what", "gained", "lost"):
        o.add_column(col)
    o.add_row("element formats", _fmt(d.formats_gained), _fmt(d.formats_lost))
    o.add_row("block scales", _fmt(d.block_scales_gained), _fmt(d.block_scales_lost))
    for c in d.block_scales_changed:
        o.add_row(f"block scale {c.key}", _fmt(c.after), _fmt(c.before))
    con.print(o)

    p = Table(title="dense peak rates (TFLOP/s) and ridge points (FLOP per device-memory byte)",
              title_justify="left")
    for col in ("dtype", d.before, d.after, "ratio", f"ridge {d.before}", f"ridge {d.after}"):
        p.add_column(col)

    def rate(tflops, has_format: bool) -> str:
        # An absent figure for a format the arch has is unsourced, not absent hardware.
        return "not given" if tflops is None and has_format else _fmt(tflops)

    for pc in d.peaks:
        p.add_row(pc.dtype, rate(pc.before_tflops, pc.format_before), rate(pc.after_tflops, pc.format_after),
                  pc.change,
                  f"{pc.ridge_before:.0f}" if pc.ridge_before is not None else "-",
                  f"{pc.ridge_after:.0f}" if pc.ridge_after is not None else "-")
    con.print(p)

    if d.figures:
        g = Table(title="limits and figures", title_justify="left")
        for col in ("figure", d.before, d.after, "ratio"):
            g.add_column(col)
        for c in d.figures:
            unit = "GB" if c.key == "hbm_bytes" else c.unit  # device memory is sold in decimal GB
            g.add_row(_FIGURE_LABELS.get(c.key, c.key), _fmt_unit(c.before, unit), _fmt_unit(c.after, unit),
                      f"x{c.ratio:.2f}" if c.ratio is not None else "")
        con.print(g)

    if d.sass_signatures:
        s = Table(title="SASS signatures", title_justify="left")
        for col in ("feature", d.before, d.after):
            s.add_column(col)
        for c in d.sass_signatures:
            s.add_row(c.key, _fmt(c.before), _fmt(c.after))
        con.print(s)


def cmd_diff(args) -> int:
    a, b = load_arch(args.a), load_arch(args.b)
    d = diff_archs(a, b)
    if args.json:
        _json(d.to_dict())
    else:
        render_diff(d)
    return 0
