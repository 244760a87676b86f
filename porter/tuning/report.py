"""The tuning report: one HTML page per sweep.

Per kernel and bucket, a chart of every compiled candidate: predicted TFLOP/s (GB/s for
a kernel that is not a FLOP kernel) against the binding resource (one band per resource
the timing model found binding; within a band, candidates spread by registers per
thread), the default and the chosen configuration marked, and the Pareto front of
speed against registers (the fastest candidate at each register count or fewer). Then
the table of chosen configurations per bucket. Every figure is labelled as the timing
model's.
"""

from __future__ import annotations

import html
import json

from porter.tuning.table import LABEL

W, H, PAD = 560, 260, 44


def _val(p: dict) -> float:
    return p["tflops"] if p.get("tflops") is not None else p["gb_s"]


def pareto(points: list[tuple[float, float]]) -> list[tuple[float, float]]:
    """(registers, speed) points not beaten by one with no more registers and more speed."""
    front, best = [], float("-inf")
    for regs, speed in sorted(points, key=lambda p: (p[0], -p[1])):
        if speed > best:
            front.append((regs, speed))
            best = speed
    return front


def chart(sweep, bucket: str) -> str:
    built = [c for c in sweep.candidates if c["status"] == "built" and bucket in c["predictions"]]
    if not built:
        return "<p>no compiled candidate</p>"
    unit = "TFLOP/s" if built[0]["predictions"][bucket].get("tflops") is not None else "GB/s"
    bounds = sorted({c["predictions"][bucket]["bound"] for c in built})
    ys = [_val(c["predictions"][bucket]) for c in built]
    regs = [c["resources"].get("registers") or 0 for c in built]
    ymax = max(ys) * 1.1 or 1.0
    rmin, rmax = min(regs), max(regs)
    band = (W - 2 * PAD) / max(1, len(bounds))

    def xy(c) -> tuple[float, float]:
        b = bounds.index(c["predictions"][bucket]["bound"])
        r = c["resources"].get("registers") or 0
        frac = 0.5 if rmax == rmin else (r - rmin) / (rmax - rmin)
        x = PAD + b * band + band * (0.15 + 0.7 * frac)
        y = H - PAD - (H - 2 * PAD) * _val(c["predictions"][bucket]) / ymax
        return x, y

    chosen = (sweep.buckets.get(bucket) or {}).get("chosen") or {}
    dflt = sweep.default_knobs
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{W}" height="{H}" role="img">',
             f'<line x1="{PAD}" y1="{H - PAD}" x2="{W - PAD}" y2="{H - PAD}" stroke="#888"/>',
             f'<line x1="{PAD}" y1="{PAD}" x2="{PAD}" y2="{H - PAD}" stroke="#888"/>',
             f'<text x="6" y="{PAD - 10}" font-size="11">predicted {unit}</text>',
             f'<text x="{PAD}" y="{PAD - 26}" font-size="10" fill="#555">{html.escape(LABEL)}</text>']
    for i in range(5):
        v = ymax * i / 4
        y = H - PAD - (H - 2 * PAD) * i / 4
        parts.append(f'<text x="4" y="{y + 4:.0f}" font-size="10">{v:.0f}</text>')
    for i, b in enumerate(bounds):
        parts.append(f'<text x="{PAD + i * band + band / 2:.0f}" y="{H - PAD + 16}" font-size="11" '
                     f'text-anchor="middle">bound: {html.escape(b)}</text>')
    parts.append(f'<text x="{W / 2:.0f}" y="{H - 8}" font-size="10" text-anchor="middle">binding resource '
                 f'(within a band: registers per thread, {rmin} to {rmax})</text>')
    # the Pareto front of speed against registers, drawn through the candidates on it
    front = pareto([(c["resources"].get("registers") or 0, _val(c["predictions"][bucket])) for c in built])
    on_front = [c for c in built if ((c["resources"].get("registers") or 0), _val(c["predictions"][bucket])) in front]
    pts = sorted((xy(c) for c in on_front))
    if len(pts) > 1:
        parts.append('<polyline fill="none" stroke="#c60" stroke-dasharray="4 3" points="'
                     + " ".join(f"{x:.1f},{y:.1f}" for x, y in pts) + '"/>')
    for c in built:
        x, y = xy(c)
        tip = html.escape(json.dumps(c["knobs"], default=str) + f": {_val(c['predictions'][bucket]):.1f} {unit}")
        if c["knobs"] == chosen.get("knobs"):
            style = 'r="7" fill="none" stroke="#080" stroke-width="2.5"'
        elif c["knobs"] == dflt:
            style = 'r="7" fill="none" stroke="#00c" stroke-width="2.5"'
        else:
            style = 'r="3" fill="#777" fill-opacity="0.6"'
        parts.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" {style}><title>{tip}</title></circle>')
    parts.append(f'<text x="{W - PAD}" y="{PAD - 10}" font-size="11" text-anchor="end">'
                 '<tspan fill="#080">o chosen</tspan>  <tspan fill="#00c">o default</tspan>  '
                 '<tspan fill="#c60">- - Pareto front (speed vs registers)</tspan></text>')
    parts.append("</svg>")
    return "".join(parts)


def _knobs(k: dict | None, default: dict) -> str:
    if not k:
        return "-"
    diff = {a: v for a, v in k.items() if default.get(a) != v}
    return html.escape(", ".join(f"{a}={v}" for a, v in sorted(diff.items())) or "the default")


def _fig(b: dict | None) -> str:
    if not b:
        return "-"
    v = f"{b['tflops']:.0f} TFLOP/s" if b.get("tflops") is not None else f"{b['gb_s']:.0f} GB/s"
    l0 = b.get("l0") or b
    # the figure it was ranked by (L1, or L0), then L0's with the range its uncertain figures allow
    ranked = f"{html.escape(b.get('level_model', 'L0'))} {b['time_us']:.1f} us, {v}, bound {html.escape(b['bound'])}"
    return ranked + f"; L0 {l0['time_us']:.1f} us ({l0['low']:.1f} to {l0['high']:.1f})"


def page(arch_name: str, product: str, sweeps: list, summary: dict) -> str:
    rows = []
    for s in sweeps:
        for b, row in s.buckets.items():
            c, d = row["chosen"], row["default"]
            gain = (f"{d['time_us'] / c['time_us']:.2f}x" if c and d and c["time_us"] else "-")
            rows.append(f"<tr><td>{html.escape(s.kernel)}</td><td>{html.escape(b)}</td><td>{html.escape(row['shape'])}</td>"
                        f"<td>{_knobs(c['knobs'] if c else None, s.default_knobs)}</td><td>{_fig(c)}</td>"
                        f"<td>{_fig(d)}</td><td>{gain}</td><td>{html.escape(c['level'] if c else row['why_none'])}</td></tr>")
    sections = []
    for s in sweeps:
        pruned = ", ".join(f"{n} x {html.escape(r)}" for r, n in sorted(s.pruned.items(), key=lambda x: -x[1])[:6])
        built = sum(c["status"] == "built" for c in s.candidates)
        discarded = [c for c in s.candidates if c["status"] != "built"]
        fails = "".join(f"<li>{html.escape(f['label'])}: {html.escape(f['status'])}: {html.escape(f['error'])}</li>"
                        for f in s.failures)
        charts = "".join(f"<figure><figcaption>{html.escape(b)} ({html.escape(r['shape'])}; L0)</figcaption>{chart(s, b)}</figure>"
                         for b, r in s.buckets.items())
        why = "".join(f"<li>{_knobs(c['knobs'], s.default_knobs)}: {html.escape(c['reason'])}</li>" for c in discarded[:8])
        sections.append(
            f"<h2>{html.escape(s.kernel)}</h2><p>{s.space_size} configurations, {s.legal} legal"
            f"{' (pruned: ' + pruned + ')' if pruned else ''}; {len(s.candidates)} compiled, {built} passed their "
            f"SASS and resource checks; {html.escape(s.ranker_note)}.</p>"
            + (f"<p>discarded after compiling:</p><ul>{why}</ul>" if why else "")
            + (f"<p>tasks that failed after a retry:</p><ul>{fails}</ul>" if fails else "")
            + f"<div class='charts'>{charts}</div>")
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>porter tune {html.escape(arch_name)} {html.escape(product)}</title>
<style>body{{font-family:sans-serif;margin:2em;max-width:1250px}}table{{border-collapse:collapse}}td,th{{border:1px solid #ccc;padding:3px 6px;font-size:13px}}
figure{{display:inline-block;margin:0 1em 1em 0}}figcaption{{font-size:12px}}</style></head><body>
<h1>porter tune {html.escape(arch_name)} ({html.escape(product)})</h1>
<p><b>Every time, TFLOP/s and GB/s on this page is {html.escape(LABEL)}</b>, with the range its uncertain figures allow.
A chosen configuration was executed in porter's PTX simulator (level <code>emulated</code>, not on a GPU).</p>
<p>{html.escape(summary.get('executor', ''))}; {summary.get('tasks_run', 0)} tasks run, {summary.get('tasks_cached', 0)} from the cache,
{summary.get('retried', 0)} retried, {summary.get('failed', 0)} failed; {summary.get('seconds', 0):.1f} s.</p>
<h2>Chosen configuration per bucket</h2>
<table><tr><th>kernel</th><th>bucket</th><th>shape</th><th>chosen knobs (vs default)</th><th>chosen (predicted)</th>
<th>default (predicted)</th><th>speed-up (predicted)</th><th>level</th></tr>{''.join(rows)}</table>
{''.join(sections)}</body></html>
"""
