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
