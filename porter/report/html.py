"""report.html: one self-contained page (inline CSS and SVG, no scripts, no external assets)."""

from __future__ import annotations

from html import escape

from porter.report import svg
from porter.report.build import before_text, why_unsupported
from porter.report.emulation import HEADING as EMULATION_HEADING, common_checks, emulation_intro, emulation_rows
from porter.report.markdown import _cold_text, _corrupt_text, _filter_text, numerics_note
from porter.report.summary import LEVEL, PLAIN, STRONG, summary_lines

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:24px;color:#222;max-width:1340px}
h1{font-size:22px;margin-bottom:4px} h2{font-size:17px;margin-top:28px;border-bottom:1px solid #ddd}
table{border-collapse:collapse;font-size:12.5px;margin:8px 0} td,th{border:1px solid #ddd;padding:4px 7px;vertical-align:top;text-align:left}
th{background:#f5f5f5} .muted{color:#777} .lvl{font-weight:bold;border-radius:4px;padding:1px 6px;color:#fff;white-space:nowrap}
.l-failed{background:#c62828}.l-rendered{background:#795548}.l-compiled{background:#bf360c}
.l-sass-checked{background:#33691e}.l-numerics-model{background:#2e7d32}.l-emulated{background:#00697a}
.l-device-validated{background:#1565c0}.l-benchmarked{background:#6a1b9a}
.s-passed{color:#2e7d32}.s-failed{color:#c62828;font-weight:bold}.s-skipped{color:#757575}.s-not-run{color:#1565c0}
.cards{display:flex;flex-wrap:wrap;gap:14px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 10px}
.card h3{font-size:13px;margin:0 0 6px 0} code{font-size:12px}
"""


def _level(label: str) -> str:
    return f'<span class="lvl l-{escape(label)}">{escape(label)}</span>'


def render_html(r: dict) -> str:
    arch, base = r["arch"], r["base"]
    p = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>porter: {escape(arch['name'])} bring-up</title>"
         f"<style>{_CSS}</style></head><body>",
         f"<h1>Bring-up report: {escape(arch['name'])} <code>{escape(arch['target'])}</code>"
         + (f" {escape(arch['product'])}" if arch.get("product") else "") + "</h1>",
         f"<div class='muted'>descriptor <code>{escape(arch.get('path') or arch['name'])}</code> "
         f"(sha256 {escape(arch['digest'][:16])}) · runbook <code>{escape(r['runbook'])}</code> · base arch "
         f"{escape(base['name']) if base else 'none'}"
         + (f" ({escape(r['base_why'])})" if r.get("base_why") else "") +
         f" · {r['run']['seconds']:.1f} s · {r['run']['units_run']} units run, "
         f"{r['run']['units_cached']} reused from an earlier run, {r['run']['nvrtc_calls']} fresh NVRTC compiles "
         "(compiles found in porter's compile cache are not counted)"
         f"{escape(_cold_text(r) + _corrupt_text(r) + _filter_text(r))}</div>",
         *_summary(r),
         "<h2>Stages</h2>", svg.stage_dag(r["stages"]),
         "<table><tr><th>day</th><th>stage</th><th>status</th><th>s</th><th>summary</th></tr>"]
    # By day, then in the runbook's order (sorted is stable): never alphabetically within a day.
    for s in sorted(r["stages"], key=lambda s: s["day"]):
        p.append(f"<tr><td>{s['day']}</td><td>{escape(s['id'])}</td><td class='s-{escape(s['status'])}'>{escape(s['status'])}</td>"
                 f"<td>{s['seconds']:.2f}</td><td>{escape(s['summary'])}</td></tr>")
    p.append("</table>")
    p += _levels_table(r)
    p += ["<h2>Resources against limits</h2><div class='cards'>"]
    for k in r["kernels"]:
        notes = "".join(f"<div class='muted'>{escape(b['name'])}: {escape(b['note'])}</div>"
                        for b in k["resources"] if b.get("note"))
        p.append(f"<div class='card'><h3>{escape(k['name'])}</h3>{svg.resource_bars(k['resources'])}{notes}</div>")
    p.append("</div>")
    num = [k for k in r["kernels"] if k["numerics"]]
    p.append("<h2>Numerics: error against tolerance per shape</h2>")
    if not num:
        p.append("<p class='muted'>no numerics results</p>")
    else:
        p.append("<div class='cards'>")
        for k in num:
            p.append(f"<div class='card'><h3>{escape(k['name'])} · {'passed' if k['numerics']['passed'] else 'FAILED'}"
                     f" <span class='muted'>({escape(chart_title(k['numerics']['cases']))})</span></h3>"
                     f"{svg.numerics_bars(k['numerics']['cases'])}"
                     + (f"<div class='muted'>{escape(n)}</div>" if (n := numerics_note(k)) else "") + "</div>")
        p.append("</div>")
    p += _emulation(r)
    p += _prediction(r)
    sched = [k for k in r["kernels"] if k.get("schedule")]
    if sched:
        p.append("<h2>Schedules <span class='muted'>(predicted by porter&#x27;s timing model, not measured: the megakernel queue simulation)</span></h2>"
                 "<table><tr><th>kernel</th><th>model, position</th><th>queues (SMs)</th>"
                 "<th>instructions (per SM min / mean / max)</th><th>predicted step</th>"
                 "<th>memory floor</th><th>floor / predicted</th></tr>")
        for k in sched:
            q = k["schedule"]
            p.append(f"<tr><td>{escape(k['name'])}</td><td>{escape(str(q['model']))}, pos {q['pos']}</td>"
                     f"<td>{q['queues']}</td><td>{q['instructions']} ({q['per_sm']['min']} / "
                     f"{q['per_sm']['mean']:.0f} / {q['per_sm']['max']})</td>"
                     f"<td>{q['predicted_latency_us']:.0f} µs</td><td>{q['memory_floor_us']:.0f} µs</td>"
                     f"<td>{q['floor_ratio']:.0%}</td></tr>")
        p.append("</table>")
    p.append("<h2>Measured against the roofline</h2>")
    measured = [k for k in r["kernels"] if k.get("bench")]
    if not measured:
        p.append(f"<p class='muted'>nothing measured: {escape(r['device']['detail'])}</p>")
    for k in measured:
        b = k["bench"]
        p.append(f"<p>{escape(k['name'])}: {svg.roofline_bars(float(b.get('tflops', 0)), float(b.get('roofline_tflops', 0) or 0), 'of roofline')}</p>")
    if r["plan"]:
        p.append("<h2>Porting plan</h2><ul>" + "".join(f"<li>{escape(s)}</li>" for s in r["plan"].get("summary", [])) + "</ul>")
    p.append("</body></html>")
    return "\n".join(p)


def _prediction(r: dict) -> list[str]:
    """Predicted speed per product and a bottleneck chart per kernel (porter.report.prediction)."""
    from porter.report import prediction as pr

    pred = r.get("prediction")
    if not pred:
        return []
    products, rows = pr.table(pred)
    out = [f"<h2 id='prediction'>{escape(pr.HEADING)}</h2>", f"<p>{escape(pr.intro(pred))}</p>",
           "<table><tr><th>kernel</th><th>shape</th>" + "".join(f"<th>{escape(p)} (predicted)</th>" for p in products)
           + "</tr>"]
    for kernel, shape, cells in rows:
        out.append(f"<tr><td>{escape(kernel)}</td><td>{escape(shape)}</td>" + "".join(
            f"<td title='{escape(pr.LABEL)}'>{escape(pr.cell_text(cells[p]))}</td>" if p in cells else "<td>-</td>"
            for p in products) + "</tr>")
    out.append("</table>")
    out += [f"<p class='muted'>{escape(m['name'])}: no prediction: {escape(m['reason'])}</p>"
            for m in pred.get("missing", [])]
    out.append("<h3>Bottlenecks: each resource's time against the binding one</h3><div class='cards'>")
    for p in pr.chart_rows(pred):
        caption = f"{p['product']}, {p['shape']}: {pr.LABEL}"
        out.append(f"<div class='card'><h3>{escape(p['kernel'])}</h3>"
                   f"{svg.bottleneck_bars(p['resources'], p['bound'], caption)}</div>")
    out.append("</div>")
    return out


def _emulation(r: dict) -> list[str]:
    """What ran in porter's PTX simulator, per kernel (porter.report.emulation)."""
    rows = emulation_rows(r)
    out = [f"<h2 id='emulation'>{escape(EMULATION_HEADING)}</h2>", f"<p>{escape(emulation_intro(r, rows))}</p>"]
    if not rows:
        return out
    per_row = common_checks(rows) is None      # the same checks everywhere are said once, above
    out.append("<table><tr><th>kernel</th><th>result</th><th>shapes</th><th>input seeds</th><th>launches</th>"
               "<th>warp-instructions</th>" + ("<th>checks on</th>" if per_row else "") + "<th>s</th></tr>")
    for x in rows:
        out.append(f"<tr><td>{escape(x['kernel'])}</td><td class='s-{escape(x['result'])}'>{escape(x['result'])}"
                   + (f"<div class='muted'>{escape(x['reason'])}</div>" if x["reason"] else "") + "</td>"
                   f"<td>{escape(x['shapes'])}</td><td>{escape(x['seeds'])}</td><td>{x['launches']}</td>"
                   f"<td>{x['warp_instructions']:,}</td>" + (f"<td>{escape(x['checks_on'])}</td>" if per_row else "")
                   + f"<td>{x['seconds']:.2f}</td></tr>")
    out.append("</table>")
    return out


def chart_title(cases: list[dict]) -> str:
    """What a numerics chart plots: error / allowed whenever a case has a tolerance (the
    bars are divided by it), naming the measure it divides; the raw measure otherwise."""
    measures = sorted({c["measure"] for c in cases if c.get("measure")})
    if any(c.get("tolerance") for c in cases):
        raw = [m for m in measures if m != "error / allowed"]
        return "error / allowed" + (f"; the error is the {', '.join(raw)}" if raw else "")
    return ", ".join(measures) or "error"


def _summary(r: dict) -> list[str]:
    """The summary lines report.md also shows (porter.report.summary), as paragraphs:
    the level as a badge, emphasis in bold, the next steps as one list."""
    marks = {PLAIN: escape, STRONG: lambda t: f"<b>{escape(t)}</b>", LEVEL: _level}
    out, steps = [], []
    for line in summary_lines(r):
        body = "".join(marks[mark](text) for mark, text in line.parts)
        if line.kind == "next":
            steps.append(f"<li>{body}</li>")
            continue
        if steps:
            out.append("<ul>" + "".join(steps) + "</ul>")
            steps = []
        out.append(f"<p class='muted'>{body}</p>" if line.kind == "legend" else f"<p>{body}</p>")
    if steps:
        out.append("<ul>" + "".join(steps) + "</ul>")
    return out


def _levels_table(r: dict) -> list[str]:
    arch, base = r["arch"], r["base"]
    other = (r.get("other_arch_levels") or {}).get(base["name"], {}) if base else {}
    before = {}
    for b in r["before"]:
        before.setdefault(b.get("variant", b["name"]), b)
    here = {}
    for k in r["kernels"]:
        here.setdefault(k["variant"], []).append(k)
    uns: dict[str, list] = {}   # a variant's unsupported forms (its .pair kernel on an arch without pairs)
    for u in r["unsupported"]:
        uns.setdefault(u["variant"], []).append(u)
    variants = sorted(set(here) | set(before) | set(uns) | set(other))
    head = f"<th>{escape(arch['name'])} ({escape(arch['target'])})</th>"
    if base:
        head += (f"<th>{escape(base['name'])} source on {escape(arch['target'])}</th>"
                 f"<th>{escape(base['name'])} on itself</th>")
    out = ["<h2>Validation levels: kernel × arch</h2>", f"<table><tr><th>variant</th>{head}<th>checks failed</th></tr>"]
    for v in variants:
        cells = []
        if v in here:
            forms = [f"{_level(k['level'])} <span class='muted'>{escape(k['name'])}</span>" for k in here[v]]
            forms += [f"<span class='muted'>{escape(u['name'])}: unsupported: {escape(why_unsupported(u))}</span>"
                      for u in uns.get(v, [])]
            cells.append("<td>" + "<br>".join(forms) + "</td>")
            failed = "<br>".join(f"{escape(k['name'])}: {escape(c['name'])}: {escape(c['detail'])}"
                                 for k in here[v] for c in k["checks_failed"]) or "-"
        elif v in uns:
            cells.append("<td class='muted'>" + "<br>".join(
                f"{escape(u['name'])}: unsupported: {escape(why_unsupported(u))}" for u in uns[v]) + "</td>")
            failed = "-"
        else:
            cells.append("<td class='muted'>-</td>")
            failed = "-"
        if base:
            b = before.get(v)
            text = before_text(b) if b is not None else ""
            cells.append("<td class='muted'>-</td>" if b is None else
                         ("<td>compiles</td>" if text == "compiles" else f"<td class='s-failed'>{escape(text)}</td>"))
            cells.append(f"<td>{_level(other[v])}</td>" if v in other else "<td class='muted'>no report</td>")
        out.append(f"<tr><td>{escape(v)}</td>{''.join(cells)}<td>{failed}</td></tr>")
    out.append("</table>")
    return out
