"""report.md: the same content as report.json, for people reading in a terminal or a PR."""

from __future__ import annotations

from porter.report.build import why_unsupported


def _cell(text) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def render_markdown(r: dict) -> str:
    base = r["base"]["name"] if r["base"] else "none"
    lines = [f"# Bring-up report: {r['arch']['name']} ({r['arch']['target']})", "",
             f"- runbook: `{r['runbook']}`; base arch: {base}",
             f"- features: {', '.join(r['arch']['features'])}",
             f"- device: {'ran' if r['device']['ran'] else 'not run'}: {r['device']['detail']}",
             f"- run: {r['run']['seconds']:.1f} s, {r['run']['units_run']} units run, "
             f"{r['run']['units_cached']} from cache, {r['run']['nvrtc_calls']} NVRTC compiles", "",
             "## Stages", "", "| day | stage | status | seconds | summary |", "|---|---|---|---|---|"]
    for s in sorted(r["stages"], key=lambda s: s["day"]):
        lines.append(f"| {s['day']} | {s['id']} | {s['status']} | {s['seconds']:.2f} | {_cell(s['summary'])} |")
    lines += ["", "## Kernels", "", "| kernel | level | checks failed | resources |", "|---|---|---|---|"]
    for k in r["kernels"]:
        failed = "; ".join(f"{c['name']}: {c['detail']}" for c in k["checks_failed"]) or "-"
        res = ", ".join(f"{b['name']} {b['used']}/{b['limit']}" for b in k["resources"])
        lines.append(f"| {k['name']} | {k['level']} | {_cell(failed)} | {_cell(res)} |")
    if r["unsupported"]:
        lines += ["", "## Unsupported on this arch", ""]
        lines += [f"- {u['name']}: {why_unsupported(u)}" for u in r["unsupported"]]
    if r["before"]:
        lines += ["", f"## Before: {base} kernels compiled for {r['arch']['target']}", ""]
        lines += [f"- {b['name']}: " + ("compiles" if b["compiled"] else f"fails: {b['error']}") for b in r["before"]]
    num = [k for k in r["kernels"] if k["numerics"]]
    if num:
        lines += ["", "## Numerics", "", "| kernel | passed | worst case | measure |", "|---|---|---|---|"]
        for k in num:
            cases = [c for c in k["numerics"]["cases"] if c["error"] is not None]
            worst = max(cases, key=lambda c: (c["error"] / c["tolerance"]) if c["tolerance"] else c["error"],
                        default=None)
            desc = f"{worst['label']}: {worst['error']:.3g} vs {worst['tolerance']}" if worst else "-"
            lines.append(f"| {k['name']} | {k['numerics']['passed']} | {desc} | {worst['measure'] if worst else ''} |")
    if r["plan"]:
        lines += ["", "## Porting plan", ""] + [f"- {s}" for s in r["plan"].get("summary", [])]
    return "\n".join(lines) + "\n"
