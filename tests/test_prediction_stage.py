"""The `prediction` stage of `porter target` and its report section (issue 16 item 5): cached
in the stage store, content-keyed (a --set knob re-predicts), every product the descriptor
names, and in report.md / report.json / report.html a column per product and a bottleneck
chart, each figure labelled as the timing model's with its range."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from porter.descriptor.arch import load_arch
from porter.kernels.knobs import spec_with_knobs
from porter.pipeline.context import StageResult
from porter.pipeline.stages import run_prediction
from porter.pipeline.store import StageStore
from porter.planning.runbook import Stage
from porter.timing import LABEL

STAGE = Stage("prediction", "Predicted speed", 4, ("kernels",), "predicted", "prediction")


@pytest.fixture(autouse=True)
def _cache(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path / "cache"))


def _ctx(tmp_path, arch, specs):
    rows = [{"name": s.name, "spec": s.to_dict(), "level": 3} for s in specs]
    kernels = StageResult("kernels", "kernels", "k", "passed", "", {"kernels": rows})
    # run_units as the pipeline's Context runs them, here in this process, one after another
    run_units = lambda stage, units: {name: fn(payload) for name, _key, fn, payload in units}  # noqa: E731
    return SimpleNamespace(arch=arch, results={"kernels": kernels}, store=StageStore(tmp_path / "stages"),
                           run_units=run_units)


def test_stage_predicts_every_product_and_is_cached_and_keyed_on_knobs(tmp_path):
    arch = load_arch("hopper")
    ctx = _ctx(tmp_path, arch, [spec_with_knobs(arch, "gemm.bf16", {})])
    first = run_prediction(ctx, STAGE)
    assert first.status == "passed" and LABEL in first.summary
    rows = first.data["predictions"]
    assert {r["product"] for r in rows} == set(arch.product_names)
    assert all(r["low"] <= r["time_us"] <= r["high"] and r["label"] == LABEL for r in rows)
    hits = ctx.store.hits
    again = run_prediction(ctx, STAGE)
    assert ctx.store.hits == hits + 1 and again.data == first.data
    knobbed = _ctx(tmp_path, arch, [spec_with_knobs(arch, "gemm.bf16", {"consumers": 1})])
    misses = knobbed.store.misses
    slower = run_prediction(knobbed, STAGE)
    assert knobbed.store.misses == misses + 1
    assert slower.data["predictions"][0]["time_us"] > rows[0]["time_us"]


def test_a_kernel_the_model_cannot_time_is_listed_not_fatal(tmp_path):
    arch = load_arch("hopper")
    good = spec_with_knobs(arch, "gemm.bf16", {})
    d = {**good.to_dict(), "family": "no-such-family", "name": "odd.kernel"}
    ctx = _ctx(tmp_path, arch, [good])
    ctx.results["kernels"].data["kernels"].append({"name": "odd.kernel", "spec": d, "level": 3})
    res = run_prediction(ctx, STAGE)
    assert res.status == "passed" and "odd.kernel" in res.summary
    assert res.data["missing"] == [{"name": "odd.kernel",
                                    "reason": "timing model: no standard shapes for kernel family 'no-such-family'"}]
    assert {r["kernel"] for r in res.data["predictions"]} == {"gemm.bf16"}


def _report(tmp_path):
    from porter.report.prediction import section

    arch = load_arch("hopper")
    ctx = _ctx(tmp_path, arch, [spec_with_knobs(arch, "gemm.bf16", {}),
                                spec_with_knobs(arch, "attention.hd128", {})])
    res = run_prediction(ctx, STAGE)
    return section({"prediction": [res]}), arch


def test_markdown_has_a_column_per_product_with_range_and_label(tmp_path):
    from porter.report.markdown import prediction_markdown

    pred, arch = _report(tmp_path)
    md = "\n".join(prediction_markdown({"prediction": pred}))
    assert f"## Predicted speed ({LABEL})" in md
    header = next(line for line in md.splitlines() if line.startswith("| kernel | shape |"))
    assert all(p in header for p in arch.product_names)
    row = next(line for line in md.splitlines() if line.startswith("| gemm.bf16 |"))
    assert "TFLOP/s" in row and "% of peak" in row and "range" in row and "bound: " in row
    assert row.count("range") == len(arch.product_names)


def test_html_chart_labels_sit_inside_the_svg_and_json_validates(tmp_path):
    from porter.report.html import _prediction
    from porter.report.schema import REPORT_SCHEMA, validate

    pred, _ = _report(tmp_path)
    html = "\n".join(_prediction({"prediction": pred}))
    assert html.count("<svg") == 2 and LABEL.replace("'", "&#x27;") in html
    for svg in re.findall(r"<svg.*?</svg>", html, flags=re.S):
        width = float(re.search(r'width="(\d+)"', svg).group(1))
        xs = [float(x) for x in re.findall(r'<text x="([\d.]+)"', svg)]
        assert xs and min(xs) >= 2 and max(xs) < width - 60      # room for the value text
        assert 'fill="#c62828"' in svg                            # the binding resource is marked
    assert validate(pred, REPORT_SCHEMA["properties"]["prediction"], "prediction") == []
    broken = {**pred, "rows": [{k: v for k, v in pred["rows"][0].items() if k != "label"}]}
    assert validate(broken, REPORT_SCHEMA["properties"]["prediction"], "prediction")
