"""report.md: the same content as report.json, for people reading in a terminal or a PR."""

from __future__ import annotations

import re

from porter.report.build import before_text, why_unsupported
from porter.report.emulation import HEADING as EMULATION_HEADING, common_checks, emulation_intro, emulation_rows
from porter.report.summary import PLAIN, summary_lines


def _md(text) -> str:
    """Text from a descriptor or a compiler log as literal Markdown: HTML is escaped (a
    '<script>' in a summary is text, not markup) and it stays on one line."""
    # Only what CommonMark would read as HTML: '<' before a tag, comment or declaration
    # start, '&' before an entity; "rendered < compiled" stays as it reads.
    text = re.sub(r"&(?=[A-Za-z#])", "&amp;", str(text))
    text = re.sub(r"<(?=[A-Za-z/!?])", "&lt;", text)
    return "".join(ch if ch.isprintable() else " " for ch in text)


def _cell(text) -> str:
    return _md(text).replace("|", "\\|")


def _line(line) -> str:
    """One summary line as a bullet: marked parts (emphasis, the level) in bold."""
    return "- " + "".join(_md(text) if mark == PLAIN else f"**{_md(text)}**" for mark, text in line.parts)


def _cold_text(r: dict) -> str:
    """The cold bring-up's cost beside this run's, once this run reused earlier work."""
    cold, run = r.get("cold_run"), r["run"]
    if not cold or not run.get("units_cached"):
        return ""
    return (f"; the cold bring-up this run reuses took {cold['seconds']:.1f} s, {cold['units_run']} units, "
            f"{cold['nvrtc_calls']} fresh NVRTC compiles")


def _corrupt_text(r: dict) -> str:
    """'; 2 cache entries were corrupt and rebuilt' when the run found any."""
    from porter.compile.cache_entry import corrupt_text

    text = corrupt_text(int(r["run"].get("cache_corrupt") or 0))
    return f"; {text}" if text else ""


def _filter_text(r: dict) -> str:
    return (f"; only the kernels matching --kernel {r['kernel_filter']} (the full report is report.md)"
            if r.get("kernel_filter") else "")


def numerics_note(k: dict) -> str:
    """A kernel's numerics note (errors near the tolerance by design), or ""."""
    return (k.get("numerics") or {}).get("note") or ""


def emulation_markdown(r: dict) -> list[str]:
    """## Emulation: what ran in porter's PTX simulator (porter.report.emulation)."""
    rows = emulation_rows(r)
    lines = ["", f"## {EMULATION_HEADING}", "", _md(emulation_intro(r, rows))]
    if not rows:
        return lines
    per_row = common_checks(rows) is None      # the same checks everywhere are said once, above
    lines += ["", "| kernel | result | shapes | input seeds | launches | warp-instructions | "
              + ("checks on | " if per_row else "") + "seconds |", "|---|---|---|---|---|---|" + "---|" * per_row + "---|"]
    for x in rows:
        lines.append(f"| {x['kernel']} | {x['result']} | {_cell(x['shapes'])} | {_cell(x['seeds'])} | "
                     f"{x['launches']} | {x['warp_instructions']:,} | "
                     + (f"{_cell(x['checks_on'])} | " if per_row else "") + f"{x['seconds']:.2f} |")
    lines += [f"- {x['kernel']}: {_md(x['reason'])}" for x in rows if x["reason"]]
    return lines


def prediction_markdown(r: dict) -> list[str]:
    """## Predicted speed: one column per product (porter.report.prediction)."""
    from porter.report import prediction as pr

    pred = r.get("prediction")
    if not pred:
        return []
    products, rows = pr.table(pred)
    lines = ["", f"## {pr.HEADING}", "", _md(pr.intro(pred)), "",
             "| kernel | shape | " + " | ".join(_cell(p) for p in products) + " |",
             "|---|---|" + "---|" * len(products)]
    for kernel, shape, cells in rows:
        lines.append(f"| {_cell(kernel)} | {_cell(shape)} | "
                     + " | ".join(_cell(pr.cell_text(cells[p])) if p in cells else "-" for p in products) + " |")
    lines += [f"- {_md(m['name'])}: no prediction: {_md(m['reason'])}" for m in pred.get("missing", [])]
    return lines


def render_markdown(r: dict) -> str:
    base = r["base"]["name"] if r["base"] else "none"
    product = f", {r['arch']['product']}" if r["arch"].get("product") else ""
    lines = [f"# Bring-up report: {r['arch']['name']} ({r['arch']['target']}{_md(product)})", ""]
    lines += [_line(line) for line in summary_lines(r)]
    lines += ["", f"- descriptor: `{_md(r['arch'].get('path') or r['arch']['name'])}` "
              f"(sha256 {r['arch']['digest'][:16]})",
              *([f"- limits: {_md(r['arch']['limits_checked'])}"] if r["arch"].get("limits_checked") else []),
              f"- runbook: `{r['runbook']}`; base arch: {base}"
              + (f" ({_md(r['base_why'])})" if r.get("base_why") else ""),
              f"- features: {', '.join(r['arch']['features'])}",
              f"- run: {r['run']['seconds']:.1f} s, {r['run']['units_run']} units run, "
              f"{r['run']['units_cached']} reused from an earlier run, {r['run']['nvrtc_calls']} fresh NVRTC compiles "
              "(compiles found in porter's compile cache are not counted)"
              + _cold_text(r) + _corrupt_text(r) + _filter_text(r), "",
              "## Stages", "", "| day | stage | status | seconds | summary |", "|---|---|---|---|---|"]
    for s in sorted(r["stages"], key=lambda s: s["day"]):
        lines.append(f"| {s['day']} | {s['id']} | {s['status']} | {s['seconds']:.2f} | {_cell(s['summary'])} |")
    lines += ["", "## Kernels", "", "| kernel | highest level reached | checks failed | resources (used/limit) |",
              "|---|---|---|---|"]
    for k in r["kernels"]:
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in k["checks_failed"]) or "-"
        res = ", ".join(f"{b['name']} {b['used']}/{b['limit']}" + (f" {b['note']}" if b.get("note") else "")
                        for b in k["resources"])
        lines.append(f"| {k['name']} | {k['level']} | {_cell(failed)} | {_cell(res)} |")
    if r["unsupported"]:
        lines += ["", "## Unsupported on this arch", ""]
        lines += [f"- {u['name']}: {_md(why_unsupported(u))}" for u in r["unsupported"]]
    if r["before"]:
        lines += ["", f"## Before: {base} kernels compiled for {r['arch']['target']}", ""]
        lines += [f"- {b['name']}: {_md(before_text(b))}" for b in r["before"]]
    num = [k for k in r["kernels"] if k["numerics"]]
    if num:
        lines += ["", "## Numerics (CPU model against the fp64 reference)", "",
                  "| kernel | result | worst case | error | allowed | measure |", "|---|---|---|---|---|---|"]
        for k in num:
            cases = [c for c in k["numerics"]["cases"] if c["error"] is not None]
            worst = max(cases, key=lambda c: (c["error"] / c["tolerance"]) if c["tolerance"] else c["error"],
                        default=None)
            result = "passed" if k["numerics"]["passed"] else "FAILED"
            if worst:
                allowed = f"{worst['tolerance']:.3g}" if worst["tolerance"] is not None else "-"
                lines.append(f"| {k['name']} | {result} | {_cell(worst['label'])} | {worst['error']:.3g} | "
                             f"{allowed} | {worst['measure']} |")
            else:
                lines.append(f"| {k['name']} | {result} | - | - | - | - |")
        notes = [f"- {k['name']}: {_md(numerics_note(k))}" for k in num if numerics_note(k)]
        if notes:
            lines += [""] + notes
    lines += emulation_markdown(r)
    lines += prediction_markdown(r)
    sched = [k for k in r["kernels"] if k.get("schedule")]
    if sched:
        lines += ["", "## Schedules (predicted by porter's timing model, not measured: the megakernel queue simulation)", "",
                  "| kernel | model, position | queues (SMs) | instructions: total (per SM min / mean / max) "
                  "| predicted step | memory floor | floor / predicted |", "|---|---|---|---|---|---|---|"]
        for k in sched:
            p = k["schedule"]
            lines.append(f"| {k['name']} | {p['model']}, pos {p['pos']} | {p['queues']} | {p['instructions']} "
                         f"({p['per_sm']['min']} / {p['per_sm']['mean']:.0f} / {p['per_sm']['max']}) "
                         f"| {p['predicted_latency_us']:.0f} µs | {p['memory_floor_us']:.0f} µs | {p['floor_ratio']:.0%} |")
    if r["plan"]:
        lines += ["", "## Porting plan", ""] + [f"- {_md(s)}" for s in r["plan"].get("summary", [])]
        swaps = r["plan"].get("swaps") or []
        if swaps:
            lines += ["", "Primitive swaps, in order:", ""]
            lines += [f"{n}. {_md(sw['job'])}: {_md(sw['from'])} -> {_md(sw['to'])}"
                      f" ({_md('; '.join(sw['because']) or 'figures')})" for n, sw in enumerate(swaps, 1)]
    return "\n".join(lines) + "\n"
