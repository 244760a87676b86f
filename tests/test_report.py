"""The report: report.json follows its documented schema; report.html is self-contained
and draws the stage DAG, levels, resource bars and numerics plots; a headless Chromium
screenshot when Chromium is installed."""

from __future__ import annotations

import copy
import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from porter.pipeline import RunOptions, run_target
from porter.report.build import numerics_cases
from porter.report.schema import REPORT_SCHEMA, SCHEMA_VERSION, validate

import test_pipeline_support as fam


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    tpl = fam.write_templates(root / "tpl")
    book = root / "rb.yaml"
    book.write_text(fam.RUNBOOK)
    with pytest.MonkeyPatch.context() as mp:
        fam.install(mp, tpl, "report")
        run = run_target(RunOptions("blackwell", runbook=str(book), out=root / "out", jobs=1))
    assert run.exit_code == 0
    return root / "out"


def test_report_json_matches_schema(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    assert report["schema_version"] == SCHEMA_VERSION
    assert validate(report) == []
    assert {s["id"] for s in report["stages"]} == {"descriptor", "before", "kernels", "numerics", "device", "report"}
    axpy = next(k for k in report["kernels"] if k["name"] == "fake.axpy")
    names = {b["name"] for b in axpy["resources"]}
    assert {"registers / thread", "shared memory / block", "threads / block", "TMEM columns"} <= names
    assert len(axpy["numerics"]["cases"]) == 3 and all(c["passed"] for c in axpy["numerics"]["cases"])


def test_schema_validator_catches_breakage(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    broken = copy.deepcopy(report)
    del broken["kernels"][0]["level"]
    broken["stages"][0]["status"] = "great"
    broken["run"]["nvrtc_calls"] = "many"
    errors = validate(broken)
    assert any("kernels[0]: missing 'level'" in e for e in errors)
    assert any("stages[0].status" in e for e in errors)
    assert any("run.nvrtc_calls: expected integer" in e for e in errors)
    assert REPORT_SCHEMA["properties"]["schema_version"]["enum"] == [SCHEMA_VERSION]


def test_markdown_has_stages_kernels_and_no_device_line(report_dir):
    md = (report_dir / "report.md").read_text()
    assert "| kernels | passed |" in md.replace("| 2 ", "| ")
    assert "fake.axpy" in md and "numerics" in md
    assert "no GPU: device validation and benchmarks not run" in md
    # The answer first: the highest level reached and a plain statement that no GPU ran anything.
    head = md.split("## Stages")[0]
    assert "highest level reached: **numerics-model**" in head
    assert "**device**: no GPU" in head and "--device on" in head
    assert "numerics-model (CPU model of the arithmetic, no kernel ran)" in head


def test_report_summary_counts_levels_and_says_what_next(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    s = report["summary"]
    assert s["highest_level"] == "numerics-model" and s["device_ran"] is False
    assert sum(s["levels"].values()) == s["kernels"] == len(report["kernels"])
    assert any("porter target blackwell --device on" in step for step in s["next_steps"])


def test_html_is_self_contained_and_draws_everything(report_dir):
    html = (report_dir / "report.html").read_text()
    assert "<script" not in html and "<link" not in html and "<img" not in html
    # the only URL is the SVG namespace, which is a name, not a fetch
    assert set(re.findall(r"https?://[^\s\"']+", html)) <= {"http://www.w3.org/2000/svg"}
    assert html.count("<svg") >= 5                      # DAG + resource bars + numerics plots
    for sid in ("descriptor", "before", "kernels", "numerics", "device", "report"):
        assert f">{sid}</text>" in html                  # every stage drawn as a box
    assert "marker-end" in html                          # with arrows
    assert "#1565c0" in html                            # device stage coloured as not-run
    assert "no GPU: device validation and benchmarks not run" in html
    assert 'highest level reached: <span class="lvl l-numerics-model">numerics-model</span>' in html
    assert ".l-numerics-model{" in html and "<b>device</b>: no GPU" in html


def test_schema_levels_are_the_level_labels(report_dir):
    """The schema's allowed levels are porter.levels' labels (minor 1 renamed numerics to
    numerics-model); a report says which minor it follows."""
    from porter.levels import Level
    from porter.report.schema import LEVELS, SCHEMA_MINOR

    assert LEVELS == [lvl.label for lvl in Level] and "numerics-model" in LEVELS and "numerics" not in LEVELS
    report = json.loads((report_dir / "report.json").read_text())
    assert report["schema_minor"] == SCHEMA_MINOR == 1
    old = copy.deepcopy(report)
    old["kernels"][0]["level"] = "numerics"
    assert any("kernels[0].level: 'numerics' not one of" in e for e in validate(old))


def test_markdown_and_html_share_one_summary(report_dir):
    """Every summary line report.md shows is in report.html too, built by one function."""
    from html import escape

    from porter.report.summary import summary_lines

    report = json.loads((report_dir / "report.json").read_text())
    md = (report_dir / "report.md").read_text()
    html = (report_dir / "report.html").read_text()
    lines = summary_lines(report)
    assert [line.kind for line in lines][:2] == ["level", "device"] and lines[-1].kind == "legend"
    for line in lines:
        plain = [t for mark, t in line.parts if mark == ""]
        assert all(escape(t) in html for t in plain if t), line
        assert all(t in md for t in plain), line
    assert "<ul><li>next: " in html
    no_summary = dict(report, summary=None)
    assert [line.text for line in summary_lines(no_summary)] == [f"device: not run: {report['device']['detail']}"]


def test_html_run_line_says_what_markdown_says(report_dir):
    report = json.loads((report_dir / "report.json").read_text())
    run = report["run"]
    words = (f"{run['units_cached']} reused from an earlier run, {run['nvrtc_calls']} fresh NVRTC compiles "
             "(compiles found in porter's compile cache are not counted)")
    assert words in (report_dir / "report.md").read_text()
    assert words in (report_dir / "report.html").read_text()


def test_before_that_compiles_but_fails_a_check_says_both(report_dir):
    """A base kernel that compiles for the target but does not fit it is never just "compiles"."""
    from html import escape

    from porter.report.build import before_text
    from porter.report.html import render_html
    from porter.report.markdown import render_markdown

    report = json.loads((report_dir / "report.json").read_text())
    unfit = {"name": "fake.axpy", "variant": "fake.axpy", "compiled": True, "error": "232448 B of 101376 B",
             "checks_failed": [{"name": "shared memory", "detail": "232448 B of 101376 B per block"}]}
    report["before"] = [unfit]
    assert validate(report) == []
    text = "compiles, but fails: shared memory: 232448 B of 101376 B per block"
    assert before_text(unfit) == text
    assert f"- fake.axpy: {text}" in render_markdown(report)
    assert escape(text) in render_html(report)
    assert before_text(dict(unfit, checks_failed=[], error="")) == "compiles"
    assert before_text(dict(unfit, compiled=False, error="ptxas error")) == "fails: ptxas error"


def test_setmaxnreg_register_bar_says_it_is_the_launch_count():
    from types import SimpleNamespace

    from porter.report.build import resource_bars

    arch = SimpleNamespace(max_regs_per_thread=255, smem_per_block_bytes=232448, max_threads_per_block=1024,
                           tmem=SimpleNamespace(columns=0))
    spec = {"features": ["wgmma", "setmaxnreg"], "config": {"producer_regs": 40, "consumer_regs": 232},
            "smem_bytes": 1000, "threads": 384}
    bars = resource_bars({"resources": {"registers": 168, "shared_bytes": 24}, "spec": spec}, arch)
    regs = next(b for b in bars if b["name"] == "registers / thread")
    assert regs["used"] == 168 and regs["note"] == "at launch (producer 40 / consumer 232 via setmaxnreg)"
    plain = resource_bars({"resources": {"registers": 90}, "spec": dict(spec, features=["wgmma"])}, arch)
    assert "note" not in plain[0]


def test_numerics_cases_read_ratio_or_error_layouts():
    ratio = numerics_cases({"results": [{"shape": [128, 128, 64], "seed": 1, "worst_ratio": 0.2, "passed": True}]})
    assert ratio == [{"label": "128x128x64 s1", "error": 0.2, "tolerance": 1.0, "passed": True,
                      "measure": "error / allowed"}]
    plain = numerics_cases({"max_abs_err": 1e-3, "tolerance": 2e-3, "passed": True})
    assert plain[0]["error"] == 1e-3 and plain[0]["tolerance"] == 2e-3


CHROMIUM = Path("/usr/bin/chromium")


@pytest.mark.skipif(not CHROMIUM.exists(), reason="no /usr/bin/chromium (apt-get install -y chromium)")
def test_headless_chromium_renders_the_report(report_dir, tmp_path):
    png = tmp_path / "report.png"
    cmd = [str(CHROMIUM), "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
           "--disable-component-update", "--disable-sync", "--no-first-run",
           f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={png}", "--window-size=1400,2000",
           (report_dir / "report.html").resolve().as_uri()]
    subprocess.run(cmd, capture_output=True, timeout=60)
    assert png.exists() and png.stat().st_size > 20_000   # a blank page is a few KB
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_schedule_of_a_persistent_kernel_is_reported(report_dir):
    """A megakernel's numerics carry its plan on the arch (queues, instructions per SM,
    predicted step vs memory floor); report.json keeps it and md/html show it."""
    from porter.report.build import schedule_fields
    from porter.report.html import render_html
    from porter.report.markdown import render_markdown

    plan = {"model": "llama-3.2-1b", "pos": 511, "queues": 148, "instructions": 21758,
            "per_sm": {"min": 130, "mean": 147.0, "max": 164, "std": 9.0},
            "predicted_latency_us": 413.2, "memory_floor_us": 321.0, "floor_ratio": 0.777}
    assert schedule_fields({"runs": [], "model_plan": plan})["per_sm"] == {"min": 130, "mean": 147.0, "max": 164}
    assert schedule_fields({"runs": []}) is None and schedule_fields(None) is None

    report = json.loads((report_dir / "report.json").read_text())
    assert all(k.get("schedule") is None for k in report["kernels"])   # the fake family has no plan
    report["kernels"][0]["schedule"] = schedule_fields({"model_plan": plan})
    assert validate(report) == []
    md = render_markdown(report)
    assert "## Schedules (predicted by porter's timing model, not measured: the megakernel queue simulation)" in md
    assert "| llama-3.2-1b, pos 511 | 148 | 21758 (130 / 147 / 164) | 413 µs | 321 µs | 78% |" in md
    assert "21758 (130 / 147 / 164)" in render_html(report)
    del report["kernels"][0]["schedule"]["queues"]
    assert any("schedule: missing 'queues'" in e for e in validate(report))
