"""The bring-up report: report.json (schema in ``schema.py``), report.md and a
self-contained report.html (inline CSS and SVG, no external assets)."""

from __future__ import annotations

import json
from pathlib import Path

from porter.fsutil import atomic_write


COLD_RUN = "cold_run.json"   # under .stages/: the cost of the run that built everything


def report_stem(kernel_pattern: str | None) -> str:
    """``report``, or ``report.kernel-<pattern>`` for a --kernel run: a run over some
    kernels must not replace the full report with a partial one."""
    if not kernel_pattern:
        return "report"
    import re

    return "report.kernel-" + (re.sub(r"[^A-Za-z0-9_.+-]", "_", kernel_pattern) or "_")


def cold_run(ctx, run: dict) -> dict | None:
    """The cold bring-up's cost, kept across cached reruns: recorded by a full run that
    reused nothing (and built something), read back by every later one."""
    path = Path(ctx.out_dir) / ".stages" / COLD_RUN
    if run["units_cached"] == 0 and run["units_run"] > 0 and not ctx.kernel_pattern:
        atomic_write(path, json.dumps(run, indent=1, sort_keys=True))
        return dict(run)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and {"seconds", "units_run", "nvrtc_calls"} <= set(data) else None


def write_report(ctx) -> list[Path]:
    from porter.report.build import build_report
    from porter.report.html import render_html
    from porter.report.markdown import render_markdown

    report = build_report(ctx)
    report["cold_run"] = cold_run(ctx, report["run"])
    report["kernel_filter"] = ctx.kernel_pattern or None
    out = Path(ctx.out_dir)
    stem = report_stem(ctx.kernel_pattern)
    written = [atomic_write(out / f"{stem}.json", json.dumps(report, indent=1, sort_keys=True)),
               atomic_write(out / f"{stem}.md", render_markdown(report)),
               atomic_write(out / f"{stem}.html", render_html(report))]
    return written
