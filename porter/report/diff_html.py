"""The ``porter diff --html`` page: feature table, labelled source hunks, opcodes, resources."""

from __future__ import annotations

import re
from html import escape

from porter.report.diff_summary import summary_row
from porter.report.html import _CSS

_EXTRA = """
pre.diff{font-size:11.5px;background:#fafafa;border:1px solid #ddd;padding:6px;overflow-x:auto}
.add{color:#1b5e20;background:#e8f5e9;display:block}.del{color:#b71c1c;background:#ffebee;display:block}
.hunk{color:#1565c0;display:block;margin-top:6px;white-space:normal}
.feat{background:#6a1b9a;color:#fff;border-radius:3px;padding:0 4px;margin:1px 2px;display:inline-block;
max-width:100%;overflow-wrap:anywhere;white-space:normal}
"""


def section_ids(keys) -> list[str]:
    """An HTML id per kernel section, unique and safe in a URL fragment ("k-gemm.bf16-gemm.bf16.pair")."""
    ids, seen = [], set()
    for key in keys:
        base = "k-" + (re.sub(r"-{2,}", "-", re.sub(r"[^A-Za-z0-9_.-]+", "-", key)).strip("-") or "kernel")
        sid, n = base, 2
        while sid in seen:
            sid, n = f"{base}-{n}", n + 1
        seen.add(sid)
        ids.append(sid)
    return ids


def summary_table(a, b, results: list, ids: list[str]) -> list[str]:
    """The page opens with one row per kernel, each linking to its section below."""
    out = [f"<h2 id='summary'>Kernels {escape(a.name)} → {escape(b.name)}</h2>",
           "<table><tr><th>kernel</th><th>hunks</th><th>+/-</th><th>driven by (hunks)</th>"
           "<th>SASS new / gone</th><th>registers</th><th>dynamic smem B</th><th>notes</th></tr>"]
    for (key, d), sid in zip(results, ids):
        r = summary_row(d)
        sass = ", ".join([f"+{op}" for op in r["opcodes_new"]] + [f"-{op}" for op in r["opcodes_gone"]]) or "-"
        out.append(f"<tr><td><a href='#{escape(sid)}'>{escape(key)}</a></td><td>{r['hunks']}</td>"
                   f"<td>+{r['added']} -{r['removed']}</td><td>{escape(', '.join(r['features']) or '-')}</td>"
                   f"<td>{escape(sass)}</td><td>{escape(r['registers'] or '-')}</td><td>{escape(r['smem'] or '-')}</td>"
                   f"<td class='muted'>{escape('; '.join(n.split(':', 1)[0] for n in r['notes']) or '-')}</td></tr>")
    out.append("</table>")
    return out


def render_diff_html(a, b, archdiff: dict, results: list) -> str:
    from porter.report.opcodes import histogram_rows, opcode_mark

    feats = archdiff.get("features", {})
    ids = section_ids(key for key, _ in results)
    p = [f"<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'><title>porter diff {escape(a.name)} {escape(b.name)}</title>"
         f"<style>{_CSS}{_EXTRA}</style></head><body><h1>{escape(a.name)} ({escape(a.target)}) → {escape(b.name)} ({escape(b.target)})</h1>",
         *summary_table(a, b, results, ids),
         "<h2>Features</h2><table><tr><th>lost</th><th>gained</th><th>kept</th></tr>",
         f"<tr><td>{escape(', '.join(feats.get('lost', [])) or '-')}</td><td>{escape(', '.join(feats.get('gained', [])) or '-')}</td>"
         f"<td>{escape(', '.join(feats.get('kept', [])) or '-')}</td></tr></table>"]
    tc = archdiff.get("tensor_core") or []
    if tc:
        p.append("<table><tr><th>tensor core</th><th>" + escape(a.name) + "</th><th>" + escape(b.name) + "</th></tr>")
        for c in tc:
            p.append(f"<tr><td>{escape(str(c.get('name', c.get('key', ''))))}</td><td>{escape(str(c.get('before')))}</td>"
                     f"<td>{escape(str(c.get('after')))}</td></tr>")
        p.append("</table>")
    renamed = (archdiff.get("mma") or {}).get("kinds_renamed") or []
    if renamed:   # "f8 -> f8f6f4": the same MMA under a new kind name, not a loss and a gain
        p.append("<table><tr><th>MMA kind renamed</th><th>formats</th></tr>")
        for r in renamed:
            kept = ", ".join(r["formats_kept"]) + " kept"
            gains = f"; gains {', '.join(r['formats_gained'])}" if r["formats_gained"] else ""
            loses = f"; loses {', '.join(r['formats_lost'])}" if r["formats_lost"] else ""
            p.append(f"<tr><td>{escape(r['before'])} → {escape(r['after'])}</td>"
                     f"<td>{escape(kept + gains + loses)}</td></tr>")
        p.append("</table>")
    for (key, d), sid in zip(results, ids):
        p.append(f"<h2 id='{escape(sid)}'>{escape(key)} <a class='muted' href='#summary'>(summary)</a></h2>")
        p += [f"<p class='muted'>{escape(n)}</p>" for n in d["notes"]]
        if d["hunks"]:
            body = []
            for h in d["hunks"]:
                body.append(f"<span class='hunk'>{escape(h.header)} " + " ".join(
                    f"<span class='feat'>{escape(l)}</span>" for l in h.labels) + "</span>")
                for line in h.lines:
                    cls = "add" if line.startswith("+") else "del" if line.startswith("-") else ""
                    body.append(f"<span class='{cls}'>{escape(line)}</span>" if cls else escape(line) + "\n")
            p.append("<pre class='diff'>" + "".join(s if s.endswith("\n") or s.endswith("</span>") else s + "\n" for s in body) + "</pre>")
        if d["histogram"]:
            sig = set(d.get("signature_opcodes", ()))
            p.append(f"<table><tr><th>SASS opcode (* tensor-core / feature signature)</th>"
                     f"<th>{escape(a.name)}</th><th>{escape(b.name)}</th></tr>")
            for op, x, y in histogram_rows(d["histogram"].get("a"), d["histogram"].get("b"), sig, 40):
                mark = opcode_mark(x, y)
                p.append(f"<tr><td>{'* ' if op in sig else ''}{escape(op)}{' ' + mark if mark else ''}</td>"
                         f"<td>{'-' if x is None else x}</td><td>{'-' if y is None else y}</td></tr>")
            p.append("</table>")
        if d["resources"]:
            ra, rb = d["resources"].get("a", {}), d["resources"].get("b", {})
            p.append(f"<table><tr><th>resource</th><th>{escape(a.name)}</th><th>{escape(b.name)}</th></tr>")
            for k in [k for k in dict.fromkeys([*ra, *rb]) if k != "function"]:
                p.append(f"<tr><td>{escape(k)}</td><td>{escape(str(ra.get(k, '-')))}</td><td>{escape(str(rb.get(k, '-')))}</td></tr>")
            p.append("</table>")
    p.append("</body></html>")
    return "\n".join(p)
