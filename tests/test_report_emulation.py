"""The reports show what ran in porter's PTX simulator (issue 20 item 1): report.md and
report.html carry an emulation section (shapes, input seeds, warp-instructions, the checks
on, time) headed "executed in porter's PTX simulator, not on a GPU", and report.html styles
every level with a readable badge (the browser test checks the pixels; this one the CSS)."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from porter.levels import Level
from porter.report.html import _CSS, render_html
from porter.report.markdown import render_markdown
from porter.report.schema import validate
from porter.runtime.emulated_runs import run_conditions

WORDS = "executed in porter's PTX simulator, not on a GPU"


def _luminance(hex_colour: str) -> float:
    if len(hex_colour) == 4:   # #fff
        hex_colour = "#" + "".join(ch * 2 for ch in hex_colour[1:])

    def lin(v: int) -> float:
        c = v / 255
        return c / 12.92 if c <= 0.04045 else ((c + 0.055) / 1.055) ** 2.4
    r, g, b = (int(hex_colour[i:i + 2], 16) for i in (1, 3, 5))
    return 0.2126 * lin(r) + 0.7152 * lin(g) + 0.0722 * lin(b)


def test_every_level_has_a_badge_style_with_readable_contrast():
    badge_text = re.search(r"\.lvl\{[^}]*[;{]color:(#[0-9a-f]{6}|#[0-9a-f]{3})\b", _CSS).group(1)
    for lvl in Level:
        m = re.search(rf"\.l-{re.escape(lvl.label)}\{{background:(#[0-9a-f]{{6}})\}}", _CSS)
        assert m, f"report.html has no badge style for level {lvl.label}"
        hi, lo = sorted((_luminance(badge_text), _luminance(m.group(1))), reverse=True)
        assert (hi + 0.05) / (lo + 0.05) >= 4.5, f"{lvl.label}: {badge_text} on {m.group(1)}"


def _report(emulation: dict | None, stages=None) -> dict:
    kernel = {"name": "gemm.bf16", "variant": "gemm.bf16", "family": "gemm", "target": "sm_90a",
              "level": "emulated" if emulation and emulation["status"] == "passed" else "numerics-model",
              "checks_failed": [], "resources": [], "numerics": None, "emulation": emulation}
    return {"schema_version": 1, "porter_version": "0", "runbook": "rb", "plan": None, "before": [],
            "unsupported": [], "base": None, "base_why": "",
            "arch": {"name": "hopper", "target": "sm_90a", "digest": "0" * 64, "features": []},
            "device": {"ran": False, "detail": "no GPU"},
            "run": {"seconds": 1.0, "nvrtc_calls": 0, "units_run": 1, "units_cached": 0},
            "stages": stages or [], "kernels": [kernel]}


RECORD = {"status": "passed", "reason": "", "seconds": 0.64, "note": WORDS,
          "runs": [{"warp_instructions": 11760, "seconds": 0.5}, {"warp_instructions": 240, "seconds": 0.1}],
          "shapes": [[256, 256, 64], {"b": 1, "sq": 128, "causal": True}], "seeds": [3, 4], "sm_count": 4,
          "warp_order_seed": 0, "checks_on": ["memory bounds and alignment", "shared-memory races"]}


def test_markdown_has_the_emulation_section():
    md = render_markdown(_report(RECORD))
    section = md[md.index(f"## Emulation ({WORDS})"):]
    assert "1 of 1 kernels passed" in section and "an emulated device of 4 SMs" in section
    assert "12,000 warp-instructions in 0.6 s" in section
    assert "Checks on in every run: memory bounds and alignment; shared-memory races" in section
    row = next(line for line in section.splitlines() if line.startswith("| gemm.bf16"))
    assert row == "| gemm.bf16 | passed | 256x256x64, b=1 sq=128 causal=True | 3, 4 | 2 | 12,000 | 0.64 |"


def test_html_has_the_emulation_section():
    html = render_html(_report(RECORD))
    assert "<h2 id='emulation'>Emulation (executed in porter&#x27;s PTX simulator, not on a GPU)</h2>" in html
    assert "<td>256x256x64, b=1 sq=128 causal=True</td><td>3, 4</td><td>2</td><td>12,000</td>" in html
    assert '<span class="lvl l-emulated">emulated</span>' in html


def test_a_failed_run_says_why_and_checks_that_differ_get_a_column():
    failed = dict(RECORD, status="failed", reason="deadlock: every warp parked\nwarp 0 at line 12",
                  checks_on=["memory bounds and alignment"])
    r = _report(RECORD)
    r["kernels"].append(dict(r["kernels"][0], name="gemm.fp8", emulation=failed))
    md = render_markdown(r)
    assert "| checks on |" in md and "- gemm.fp8: deadlock: every warp parked" in md
    assert "warp 0 at line 12" not in md            # the first line only
    assert "1 of 2 kernels passed" in md


def test_without_emulation_the_section_says_why():
    stage = {"id": "emulation", "kind": "emulation", "title": "E", "day": 3, "needs": [], "status": "not-run",
             "summary": "emulation off (--emulate off)", "seconds": 0.0}
    md = render_markdown(_report(None, [stage]))
    assert "nothing ran in the simulator (the emulation stage not-run: emulation off (--emulate off))" in md
    assert "nothing ran in the simulator (the runbook has no emulation stage)" in render_html(_report(None))


def test_old_records_without_shapes_say_not_recorded_and_validate():
    old = {k: RECORD[k] for k in ("status", "reason", "seconds", "runs", "note")}
    r = _report(old)
    assert validate(r) == []
    assert "| not recorded | not recorded |" in render_markdown(r)
    assert validate(_report(RECORD)) == []


@pytest.mark.parametrize("races", [True, False])
def test_a_run_records_shapes_seeds_and_the_checks_on(races):
    dev = SimpleNamespace(check_races=races, sm_count=4, seed=5)
    checks = [{"shape": [128, 128, 64], "seed": 0}, {"shape": [128, 128, 64], "seed": 1},
              {"shape": {"b": 1, "sq": 64}, "causal": True, "seed": 0}, {"model": "tiny", "pos": 3, "seed": 0}]
    got = run_conditions(dev, checks)
    assert got["shapes"] == [[128, 128, 64], {"b": 1, "sq": 64, "causal": True}, {"model": "tiny", "pos": 3}]
    assert got["seeds"] == [0, 1] and got["sm_count"] == 4 and got["warp_order_seed"] == 5
    assert ("shared-memory races" in got["checks_on"]) is races
    assert any("PORTER_EMU_RACES=0" in c for c in got["checks_on"]) is not races
