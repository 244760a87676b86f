"""Descriptor text is data (issue #11, items 2 and 7): Rich markup in a summary, a product
or an instruction is printed literally everywhere (tables, diff, live view, target
summary), and report.md never turns descriptor or compiler text into HTML."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from porter import paths
from porter.cli import main

HOPPER = (paths.data_dir("arch") / "hopper.yaml").read_text()
PRODUCTS = re.search(r"^  products: \[.*\]$", HOPPER, re.M).group(0).strip()
MARKUP = {
    'summary: "': 'summary: "[/] [bold]loud[/bold] ',
    PRODUCTS: 'products: ["[bold]B200[/bold]", "[/]"]',
    "instruction: wgmma.mma_async": 'instruction: "wgmma.mma_async[/bold]"',
}


@pytest.fixture
def marked(tmp_path) -> Path:
    text = HOPPER
    for old, new in MARKUP.items():
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    path = tmp_path / "marked.yaml"
    path.write_text(text)
    return path


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def test_arch_show_prints_markup_literally(capsys, marked):
    rc, out, err = run(capsys, "arch", "show", str(marked))
    assert rc == 0, err
    assert "internal error" not in err
    for literal in ("[/] [bold]loud[/bold]", "[bold]B200[/bold], [/]", "wgmma.mma_async[/bold]"):
        assert literal in out, literal


@pytest.mark.parametrize("order", [(0, 1), (1, 0)])
def test_arch_diff_prints_markup_literally(capsys, marked, order):
    files = [str(marked), "blackwell"]
    rc, out, err = run(capsys, "arch", "diff", files[order[0]], files[order[1]])
    assert rc == 0, err
    assert "wgmma.mma_async[/bold]" in out


def test_live_view_prints_stage_summaries_literally():
    from rich.console import Console

    from porter.pipeline.display import RichDisplay

    buf = io.StringIO()
    console = Console(file=buf, width=200, force_terminal=False)
    display = RichDisplay(console)
    stage = SimpleNamespace(id="kernels[/]", title="build [bold]x[/bold]")
    with display:
        display.stage_started(stage, 1)
        display.stage_done(SimpleNamespace(id="kernels[/]", status="passed", seconds=0.1,
                                           units_cached=0, summary="summary [/] and [red]not red[/red]"))
    assert "summary [/] and [red]not red[/red]" in buf.getvalue()


def test_target_summary_prints_check_details_literally(tmp_path):
    from rich.console import Console

    from porter.commands.target import print_summary

    out = tmp_path / "out"
    out.mkdir()
    stage = SimpleNamespace(kind="kernels", id="kernels", status="failed", summary="x", data={
        "unsupported": [{"name": "k.u", "missing": ["tmem"], "reason": "needs [/] tmem"}],
        "kernels": [{"name": "k[/]", "level": 1, "checks": [
            {"name": "limits", "passed": False, "detail": "[/bold] over the limit"}]}]})
    result = SimpleNamespace(arch="marked", out_dir=out, stages=[stage], failed=[stage], units_run=1,
                             units_cached=0, nvrtc_calls=0, seconds=0.1, products=(), arch_arg=None)
    buf = io.StringIO()
    print_summary(Console(file=buf, width=300), result)
    text = buf.getvalue()
    assert "[/bold] over the limit" in text and "k[/]" in text


def test_markdown_report_escapes_html_and_control_text():
    from porter.report.markdown import _cell, _md

    assert _md("<script>alert(1)</script>") == "&lt;script>alert(1)&lt;/script>"
    assert _md("rendered < compiled") == "rendered < compiled" and _md("&amp;") == "&amp;amp;"
    assert "\n" not in _cell("a\n# heading\nb") and "\x1b" not in _md("\x1b[2Jx")
    assert _cell("a | b") == "a \\| b"


def test_markdown_report_of_a_hostile_plan(tmp_path):
    import copy

    import test_pipeline_support as fam
    from porter.pipeline import RunOptions, run_target
    from porter.report.markdown import render_markdown

    tpl = fam.write_templates(tmp_path / "tpl")
    book = tmp_path / "rb.yaml"
    book.write_text(fam.RUNBOOK)
    with pytest.MonkeyPatch.context() as mp:
        fam.install(mp, tpl, "report")
        result = run_target(RunOptions("blackwell", runbook=str(book), out=tmp_path / "out", jobs=1))
    report = json.loads((result.out_dir / "report.json").read_text())
    hostile = copy.deepcopy(report)
    hostile["plan"] = {"summary": ["<img src=x onerror=alert(1)>\n# heading"]}
    md = render_markdown(hostile)
    assert "<img" not in md and "\n# heading" not in md and "&lt;img" in md
