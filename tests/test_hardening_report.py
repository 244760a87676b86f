"""Reports that mislead (issue #11, item 11): the cold bring-up's cost survives cached
reruns, contents do not depend on the cache or compile order, --kernel writes its own
report beside the full one, and unsupported kernels are not listed as failed checks."""

from __future__ import annotations

import io
import json
from types import SimpleNamespace

import pytest

import test_pipeline_support as fam
from porter.pipeline import RunOptions, run_target
from porter.report.build import numerics_cases
from porter.report.schema import validate


@pytest.fixture
def book(monkeypatch, tmp_path):
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    path = tmp_path / "fake.yaml"
    path.write_text(fam.RUNBOOK)
    return path


def test_a_cached_rerun_keeps_the_cold_bring_up_cost(book, tmp_path):
    out = tmp_path / "o"
    cold = run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1))
    first = json.loads((out / "report.json").read_text())
    assert cold.units_run > 0 and first["cold_run"]["units_run"] == cold.units_run
    warm = run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1))
    again = json.loads((out / "report.json").read_text())
    assert warm.units_cached > 0 and again["run"]["units_cached"] > 0
    assert again["cold_run"] == first["cold_run"] and again["cold_run"]["units_run"] > 0
    assert validate(again) == []
    md = (out / "report.md").read_text()
    assert "the cold bring-up this run reuses took" in md and f"{first['cold_run']['units_run']} units" in md
    assert "the cold bring-up this run reuses took" in (out / "report.html").read_text()
    # the report says how far the descriptor's limits were checked (issue #11 item 6)
    assert "known figures for compute capability 10.0" in again["arch"]["limits_checked"]
    assert "- limits: within the known figures" in md


def test_kernel_runs_write_their_own_report_and_keep_the_full_one(book, tmp_path):
    out = tmp_path / "o"
    run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1))
    full = (out / "report.json").read_text()
    run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1, kernel="fake.fp4"))
    assert (out / "report.json").read_text() == full
    part = json.loads((out / "report.kernel-fake.fp4.json").read_text())
    assert [k["name"] for k in part["kernels"]] == ["fake.fp4"] and part["kernel_filter"] == "fake.fp4"
    assert "only the kernels matching --kernel fake.fp4" in (out / "report.kernel-fake.fp4.md").read_text()
    assert validate(part) == []


def test_shape_labels_do_not_depend_on_key_order():
    fresh = {"results": [{"shape": {"M": 128, "N": 64, "K": 32}, "max_abs_err": 0.1, "tolerance": 1.0}]}
    cached = {"results": [{"shape": {"K": 32, "M": 128, "N": 64}, "max_abs_err": 0.1, "tolerance": 1.0}]}
    assert numerics_cases(fresh) == numerics_cases(cached)


def test_before_stage_example_does_not_depend_on_completion_order(monkeypatch, tmp_path):
    from porter.pipeline import stages
    from porter.pipeline.context import Context
    from porter.pipeline.store import StageStore

    rows = [{"name": n, "level": 0, "compile_error": f"{n} broke", "checks": []} for n in ("b.two", "a.one")]
    ctx = Context(arch=SimpleNamespace(target="sm_100a"), base=SimpleNamespace(name="hopper"), runbook=None,
                  out_dir=tmp_path, store=StageStore(tmp_path))
    summaries = []
    for order in (rows, rows[::-1]):
        monkeypatch.setattr(stages, "_render_units", lambda *a, **k: ([], [], []))
        monkeypatch.setattr(ctx, "run_units", lambda stage, units, order=order: {r["name"]: r for r in order})
        stage = SimpleNamespace(id="before", kind="baseline", title="Before")
        summaries.append(stages._baseline(ctx, stage, ["fake"]).summary)
    assert summaries[0] == summaries[1] and "e.g. a.one: a.one broke" in summaries[0]
    assert "before picture complete" in summaries[0] and "expected porting work" in summaries[0]


def test_unsupported_kernels_are_not_failed_checks(tmp_path):
    from rich.console import Console

    from porter.commands.target import print_summary

    stage = SimpleNamespace(kind="kernels", id="kernels", status="passed", summary="x", data={
        "unsupported": [{"name": "k.fp4", "missing": ["fp4"], "reason": ""}],
        "kernels": [{"name": "k.ok", "level": 3, "checks": []}]})
    result = SimpleNamespace(arch="hopper", out_dir=tmp_path, stages=[stage], failed=[], units_run=1,
                             units_cached=0, nvrtc_calls=0, seconds=0.1, products=(), arch_arg=None)
    buf = io.StringIO()
    print_summary(Console(file=buf, width=200), result)
    text = buf.getvalue()
    table, _, rest = text.partition("not built on hopper")
    assert "k.fp4" not in table and "k.fp4" in rest and "needs fp4" in rest


def test_porter_diff_prints_a_summary_unless_asked_for_everything(capsys, tmp_path):
    from porter.cli import main

    assert main(["diff", "hopper", "blackwell", "--no-build"]) == 0
    short = capsys.readouterr().out
    assert main(["diff", "hopper", "blackwell", "--no-build", "--full"]) == 0
    full = capsys.readouterr().out
    assert "(summary; --full for every hunk" in short and "@@" not in short
    assert "@@" in full and len(short.splitlines()) * 10 < len(full.splitlines())
    assert "gemm.bf16" in short and "megakernel.llama-decode" in short
    page = tmp_path / "d.html"
    assert main(["diff", "hopper", "blackwell", "--no-build", "--kernel", "gemm.bf16", "--html", str(page)]) == 0
    capsys.readouterr()
    assert "@@" in page.read_text()   # the page holds the full diff


def test_summary_row_counts_hunks_lines_and_features():
    from porter.commands.diff import summary_row

    h1 = SimpleNamespace(lines=["+a", "+b", "-c", " d"], labels=["tmem (tmem/tmem.cuh)", "tmem (gemm/x.cu.j2)"])
    h2 = SimpleNamespace(lines=["-e"], labels=["wgmma (gemm/wgmma.cu.j2)"])
    d = {"hunks": [h1, h2], "histogram": {"a": {"HGMMA": 4}, "b": {"UTCHMMA": 2}},
         "signature_opcodes": ["HGMMA", "UTCHMMA"], "resources": {"a": {"registers": 90}, "b": {"registers": 100}},
         "notes": []}
    r = summary_row(d)
    assert (r["hunks"], r["added"], r["removed"]) == (2, 2, 2)
    assert r["features"] == ["tmem (1)", "wgmma (1)"]
    assert r["opcodes_new"] == ["UTCHMMA"] and r["opcodes_gone"] == ["HGMMA"] and r["registers"] == "90 -> 100"


# -- the HTML report's charts and tables ------------------------------------------------------


def _cases(labels, ratio=0.5, measure="max abs error", tol=0.05):
    return [{"label": l, "error": ratio * tol, "tolerance": tol, "passed": True, "measure": measure} for l in labels]


def test_numerics_chart_keeps_long_labels_inside_and_rounds_tooltips():
    import re as _re

    from porter.report.svg import numerics_bars

    long_label = "B=2 Hq=8 Hkv=2 Sq=1024 Sk=1024 s1"
    svg_text = numerics_bars(_cases([long_label, "M=128 N=64 K=32"], tol=0.1 / 3))
    height = float(_re.search(r'height="(\d+)"', svg_text).group(1))
    # rotated -90 about (x, y): the text runs from y upward-in-page... it extends down by its length
    for m in _re.finditer(r'<text x="[\d.]+" y="([\d.]+)" font-size="8"[^>]*rotate\(-90[^>]*>([^<]*)</text>', svg_text):
        assert float(m.group(1)) + 4.8 * len(m.group(2)) <= height + 1, m.group(2)
    tips = _re.findall(r"<title>([^<]*)</title>", svg_text)
    assert tips and all("0.0333333" not in t for t in tips)
    assert "0.0167 of 0.0333 allowed (50%)" in tips[0]


def test_chart_title_says_it_plots_error_over_allowed():
    from porter.report.html import chart_title

    assert chart_title(_cases(["a"])) == "error / allowed; the error is the max abs error"
    assert chart_title(_cases(["a"], measure="error / allowed", tol=1.0)) == "error / allowed"
    assert chart_title([{"label": "a", "error": 1.0, "tolerance": None, "passed": None,
                         "measure": "max error"}]) == "max error"


def test_stage_table_keeps_the_runbook_order_within_a_day():
    import re as _re

    from porter.report.html import render_html

    report = _a_report()
    report["stages"] = [dict(s, day=1) for s in report["stages"]]
    html = render_html(report)
    table = html.split("<th>summary</th></tr>", 1)[1].split("</table>", 1)[0]
    ids = _re.findall(r"<tr><td>1</td><td>([^<]+)</td>", table)
    assert ids == [s["id"] for s in report["stages"]] and ids != sorted(ids)


def test_diff_feature_chips_wrap():
    from porter.report.diff_html import _EXTRA

    chip = _EXTRA.split(".feat{", 1)[1].split("}", 1)[0]
    assert "inline-block" in chip and "overflow-wrap:anywhere" in chip and "white-space:normal" in chip


def test_gemm_errors_near_the_bound_are_said_to_be_by_design():
    from porter.report.build import tolerance_note
    from porter.report.markdown import render_markdown

    raw = {"results": [{"shape": [256, 256, 384], "worst_ratio": 0.97, "passed": True,
                        "reason": "bf16 out: ... the final RNE to bf16, bounded by 2^-8 relative"}]}
    note = tolerance_note(raw)
    assert note and "97%" in note and "rounding bound" in note and "by design" in note
    assert tolerance_note({"results": [dict(raw["results"][0], worst_ratio=0.1)]}) is None
    assert tolerance_note({"results": [dict(raw["results"][0], reason="FlashAttention 2x rule")]}) is None
    report = _a_report()
    k = report["kernels"][0]
    k["numerics"] = {"passed": True, "cases": [{"label": "256x256x384 s0", "error": 0.97, "tolerance": 1.0,
                                                "passed": True, "measure": "error / allowed"}], "note": note}
    assert validate(report) == []
    assert f"- {k['name']}: {note}" in render_markdown(report)


_REPORT = {}


def _a_report() -> dict:
    import copy
    import tempfile
    from pathlib import Path

    if not _REPORT:
        with pytest.MonkeyPatch.context() as mp, tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            fam.install(mp, fam.write_templates(root / "tpl"))
            book = root / "fake.yaml"
            book.write_text(fam.RUNBOOK)
            run_target(RunOptions("blackwell", runbook=str(book), out=root / "o", jobs=1))
            _REPORT.update(json.loads((root / "o" / "report.json").read_text()))
    return copy.deepcopy(_REPORT)


def _stable(report: dict) -> dict:
    """report.json without what a rerun honestly changes (timings, units run or reused)."""
    out = json.loads(json.dumps(report))
    for key in ("run", "cold_run"):
        out.pop(key, None)
    for s in out["stages"]:
        s.pop("seconds", None)
        s["summary"] = " ".join(w for w in s["summary"].split() if not w.endswith("s)") and "cached" not in w)
    return out


def test_a_cached_rerun_writes_the_same_report(book, tmp_path):
    out = tmp_path / "o"
    run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1))
    first = json.loads((out / "report.json").read_text())
    md_first = (out / "report.md").read_text()
    run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1))
    again = json.loads((out / "report.json").read_text())
    assert _stable(first) == _stable(again)
    md_again = (out / "report.md").read_text()
    strip = lambda md: [l for l in md.splitlines() if not l.startswith(("- run:", "| "))]  # noqa: E731
    assert strip(md_first) == strip(md_again)
