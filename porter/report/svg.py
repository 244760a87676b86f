"""Inline SVG pictures for report.html: the stage DAG, resource bars, numerics bars."""

from __future__ import annotations

from html import escape

STATUS_COLOR = {"passed": "#2e7d32", "failed": "#c62828", "skipped": "#9e9e9e", "not-run": "#1565c0"}


def stage_dag(stages: list[dict]) -> str:
    """Layered drawing: one row per topological generation, arrows from each need."""
    import networkx as nx

    if not stages:
        return '<span class="muted">no stages</span>'
    g = nx.DiGraph()
    for s in stages:
        g.add_node(s["id"])
    for s in stages:
        for need in s["needs"]:
            if need in g:
                g.add_edge(need, s["id"])
    layers = [sorted(gen) for gen in nx.topological_generations(g)]
    by_id = {s["id"]: s for s in stages}
    bw, bh, gx, gy, pad = 180, 44, 24, 46, 12
    width = max(len(layer) for layer in layers) * (bw + gx) - gx + 2 * pad + bw // 2
    height = len(layers) * (bh + gy) - gy + 2 * pad
    pos = {}
    for row, layer in enumerate(layers):
        span = len(layer) * (bw + gx) - gx
        x0 = (width - span) / 2
        for col, sid in enumerate(layer):
            pos[sid] = (x0 + col * (bw + gx), pad + row * (bh + gy))
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
           f'viewBox="0 0 {width:.0f} {height:.0f}" role="img" aria-label="stage graph">',
           '<defs><marker id="arrow" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
           'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="#555"/></marker></defs>']
    layer_of = {sid: i for i, layer in enumerate(layers) for sid in layer}
    for a, b in g.edges:
        (xa, ya), (xb, yb) = pos[a], pos[b]
        x1, y1, x2, y2 = xa + bw / 2, ya + bh, xb + bw / 2, yb - 2
        if layer_of[b] - layer_of[a] > 1:
            # an edge that skips layers bows out to the right of the boxes it passes
            bow = max(xa, xb) + bw + gx
            out.append(f'<path d="M{xa + bw:.0f},{ya + bh / 2:.0f} C{bow:.0f},{ya + bh / 2:.0f} {bow:.0f},{yb + bh / 2:.0f} '
                       f'{xb + bw + 2:.0f},{yb + bh / 2:.0f}" fill="none" stroke="#999" stroke-width="1.2" '
                       f'stroke-dasharray="5 3" marker-end="url(#arrow)"/>')
            continue
        out.append(f'<line x1="{x1:.0f}" y1="{y1:.0f}" x2="{x2:.0f}" y2="{y2:.0f}" '
                   f'stroke="#777" stroke-width="1.4" marker-end="url(#arrow)"/>')
    for sid, (x, y) in pos.items():
        s = by_id[sid]
        color = STATUS_COLOR.get(s["status"], "#555")
        out.append(f'<g><title>{escape(s["id"])}: {escape(s["status"])}: {escape(s["summary"])}</title>'
                   f'<rect x="{x:.0f}" y="{y:.0f}" width="{bw}" height="{bh}" rx="7" fill="{color}" />'
                   f'<text x="{x + bw / 2:.0f}" y="{y + 18:.0f}" text-anchor="middle" font-size="13" '
                   f'font-weight="bold" fill="#fff">{escape(sid)}</text>'
                   f'<text x="{x + bw / 2:.0f}" y="{y + 35:.0f}" text-anchor="middle" font-size="11" '
                   f'fill="#fff">day {s["day"]} · {escape(s["status"])}</text></g>')
    out.append("</svg>")
    return "".join(out)


def resource_bars(bars: list[dict], width: int = 420) -> str:
    if not bars:
        return '<span class="muted">no resource figures (not compiled)</span>'
    rows, bh = [], 16
    label_w = 150
    for i, b in enumerate(bars):
        y = i * (bh + 6)
        frac = (b["used"] / b["limit"]) if b["limit"] else 0.0
        color = "#c62828" if frac > 1 else ("#ef6c00" if frac > 0.85 else "#2e7d32")
        span = width - label_w - 130
        w = min(frac, 1.0) * span
        # x=2: a glyph at x=0 is clipped by the SVG edge (the browser test measures it)
        rows.append(f'<text x="2" y="{y + 12}" font-size="11">{escape(b["name"])}</text>'
                    f'<rect x="{label_w}" y="{y}" width="{span}" height="{bh}" fill="#eee"/>'
                    f'<rect x="{label_w}" y="{y}" width="{w:.1f}" height="{bh}" fill="{color}"/>'
                    f'<text x="{label_w + span + 4}" y="{y + 12}" font-size="11">{b["used"]}/{b["limit"]} {escape(b["unit"])}</text>')
    h = len(bars) * (bh + 6)
    return f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}">' + "".join(rows) + "</svg>"


def numerics_bars(cases: list[dict], width: int = 520) -> str:
    """Error / tolerance per case on a linear axis; the tolerance is the dashed red line
    at 1 (cases without a tolerance plot their raw error)."""
    cases = [c for c in cases if c["error"] is not None]
    if not cases:
        return '<span class="muted">no per-shape errors reported</span>'
    ratios = [c["error"] / c["tolerance"] if c["tolerance"] else c["error"] for c in cases]
    top_value = max(1.25, 1.1 * max(ratios))
    # Labels run straight down from their bar (rotated -90): the bottom margin grows with
    # the longest one (about 4.8 px a character at 8 px), so none is cut off; the full
    # label is in each bar's tooltip.
    shown = [_short(c["label"]) for c in cases]
    bottom = 14 + int(4.8 * max(len(t) for t in shown)) if len(cases) <= 24 else 14
    h, top, left = 110 + bottom, 10, 45
    n = len(cases)
    slot = (width - left - 5) / n

    def y_of(v):
        return top + (1 - min(v, top_value) / top_value) * (h - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}">']
    for tick in (0, 0.25, 0.5, 0.75, 1.0, top_value):
        y = y_of(tick)
        parts.append(f'<line x1="{left}" y1="{y:.1f}" x2="{width}" y2="{y:.1f}" stroke="#eee"/>'
                     f'<text x="{left - 4}" y="{y + 3:.1f}" font-size="9" text-anchor="end">{tick:.2g}</text>')
    base_y = y_of(0)
    for i, (c, ratio) in enumerate(zip(cases, ratios)):
        y = y_of(ratio)
        x = left + 3 + i * slot
        color = "#c62828" if c["passed"] is False or (c["tolerance"] and ratio > 1) else "#1565c0"
        parts.append(f'<rect x="{x:.1f}" y="{y:.1f}" width="{max(slot - 3, 1):.1f}" height="{max(base_y - y, 1):.1f}" '
                     f'fill="{color}"><title>{escape(_tooltip(c, ratio))}</title></rect>')
        if n <= 24:
            lx, ly = x + slot / 2 + 3, h - bottom + 6
            parts.append(f'<text x="{lx:.1f}" y="{ly:.1f}" font-size="8" text-anchor="end" '
                         f'transform="rotate(-90 {lx:.1f} {ly:.1f})">{escape(shown[i])}</text>')
    tol_y = y_of(1.0)
    parts.append(f'<line x1="{left}" y1="{tol_y:.1f}" x2="{width}" y2="{tol_y:.1f}" stroke="#c62828" stroke-dasharray="4 3"/>'
                 f'<text x="{width - 4}" y="{tol_y - 3:.1f}" font-size="9" text-anchor="end" fill="#c62828">tolerance</text>')
    parts.append("</svg>")
    return "".join(parts)


def _short(label: str, most: int = 28) -> str:
    return label if len(label) <= most else label[:most - 1] + "…"


def _tooltip(c: dict, ratio: float) -> str:
    """A bar's tooltip, rounded: '1024x1024x256: error 0.0123 of 0.05 allowed (25%)'."""
    if c["tolerance"]:
        if c.get("measure") == "error / allowed":
            return f"{c['label']}: error / allowed {ratio:.3g} ({ratio:.0%} of the tolerance)"
        return (f"{c['label']}: {c.get('measure') or 'error'} {c['error']:.3g} of {c['tolerance']:.3g} allowed "
                f"({ratio:.0%})")
    return f"{c['label']}: {c.get('measure') or 'error'} {c['error']:.3g} (no tolerance given)"


def roofline_bars(measured: float, peak: float, label: str, width: int = 360) -> str:
    frac = measured / peak if peak else 0
    w = min(frac, 1) * (width - 120)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="20">'
            f'<rect x="0" y="2" width="{width - 120}" height="16" fill="#eee"/>'
            f'<rect x="0" y="2" width="{w:.1f}" height="16" fill="#6a1b9a"/>'
            f'<text x="{width - 114}" y="14" font-size="11">{escape(label)} {frac:.0%}</text></svg>')


def bottleneck_bars(resources: dict, bound: str, caption: str, width: int = 560) -> str:
    """One kernel's predicted time per resource (whole kernel, us) against the binding one:
    each bar is that resource's time over the binding resource's, the binding bar red.
    Every label is drawn inside the SVG (the browser test measures them); the caption
    names the model ("predicted by porter's timing model, not measured")."""
    # longest first; among equal times the binding resource leads
    items = sorted(((k, float(v)) for k, v in resources.items()), key=lambda kv: (-kv[1], kv[0] != bound))
    if not items:
        return '<span class="muted">no resource times</span>'
    top = max(v for _, v in items) or 1.0
    bh, gap, label_w, value_w, head = 14, 5, 190, 150, 18
    span = width - label_w - value_w - 8
    rows = [f'<text x="2" y="12" font-size="10" fill="#555">{escape(_short(caption, 80))} · red: binding</text>']
    for i, (name, v) in enumerate(items):
        y = head + i * (bh + gap)
        frac = v / top
        color = "#c62828" if name == bound else "#1565c0"
        rows.append(f'<text x="2" y="{y + 11}" font-size="11">{escape(_short(name, 30))}</text>'
                    f'<rect x="{label_w}" y="{y}" width="{span}" height="{bh}" fill="#eee"/>'
                    f'<rect x="{label_w}" y="{y}" width="{max(frac * span, 1):.1f}" height="{bh}" fill="{color}">'
                    f'<title>{escape(name)}: {v:.1f} us ({frac:.0%} of the binding {escape(bound)})</title></rect>'
                    f'<text x="{label_w + span + 4}" y="{y + 11}" font-size="11">{v:,.1f} us · {frac:.0%}</text>')
    h = head + len(items) * (bh + gap)
    return (f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{h}" role="img" '
            f'aria-label="{escape(caption)}">' + "".join(rows) + "</svg>")
