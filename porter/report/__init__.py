"""The bring-up report: report.json (schema in ``schema.py``), report.md and a
self-contained report.html (inline CSS and SVG, no external assets)."""

from __future__ import annotations

import json
from pathlib import Path

from porter.fsutil import atomic_write


def write_report(ctx) -> list[Path]:
    from porter.report.build import build_report
    from porter.report.html import render_html
    from porter.report.markdown import render_markdown

    report = build_report(ctx)
    out = Path(ctx.out_dir)
    written = [atomic_write(out / "report.json", json.dumps(report, indent=1, sort_keys=True)),
               atomic_write(out / "report.md", render_markdown(report)),
               atomic_write(out / "report.html", render_html(report))]
    return written
