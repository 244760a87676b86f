"""The predicted-speed section of report.md and report.html, from the `prediction` stage
(porter.timing through porter.pipeline.stages.run_prediction).

report.json keeps the stage's rows under ``prediction``; this module turns them into the
table both formats print (one row per kernel and shape, one column per product: time,
TFLOP/s or GB/s, % of peak, binding resource, range) and, in HTML, a bottleneck chart per
kernel. Every predicted figure is the timing model's, so the words LABEL head the section,
sit in every cell's tooltip and in each chart, and every time carries its range.
"""

from __future__ import annotations

from porter.timing.predict import LABEL

HEADING = f"Predicted speed ({LABEL})"


def section(results_by_kind: dict) -> dict | None:
    """report.json's ``prediction``: {label, products, rows, missing}, or None without the stage."""
    stage = next(iter(results_by_kind.get("prediction", [])), None)
    if stage is None or not stage.data.get("predictions"):
        return None
    d = stage.data
    rows = [{k: p.get(k) for k in ("kernel", "product", "shape", "time_us", "tflops", "gb_s", "pct_peak",
                                   "bound", "low", "high", "resources", "label", "level")}
            | {"sensitivity": list((p.get("extra") or {}).get("sensitivity", []))}
            for p in d["predictions"]]
    return {"label": LABEL, "products": list(d.get("products", [])), "rows": rows,
            "missing": list(d.get("missing", []))}


def rate_text(p: dict) -> str:
    """'948 TFLOP/s' for a FLOP kernel, '4048 GB/s' for a streaming one."""
    return f"{p['tflops']:.0f} TFLOP/s" if p.get("tflops") is not None else f"{p['gb_s']:.0f} GB/s"


def cell_text(p: dict) -> str:
    """One product's cell: rate, % peak, time with its range, binding resource."""
    of = "of peak" if p.get("tflops") is not None else "of HBM bandwidth"
    pct = f" ({p['pct_peak']:.0f}% {of})" if p.get("pct_peak") is not None else ""
    sens = p.get("sensitivity") or []
    most = f"; most sensitive to {sens[0]}" if sens else ""
    return (f"{rate_text(p)}{pct}, {_us(p['time_us'])} (range {_us(p['low'])} to {_us(p['high'])}), "
            f"bound: {p['bound']}{most}")


def _us(v: float) -> str:
    return f"{v / 1000:.2f} ms" if v >= 10000 else f"{v:.1f} us"


def table(pred: dict) -> tuple[list[str], list[tuple[str, str, dict]]]:
    """(products, [(kernel, shape, product -> row)]) in kernel, then shape order as predicted."""
    products = pred["products"] or sorted({p["product"] for p in pred["rows"]})
    out: dict[tuple[str, str], dict] = {}
    for p in pred["rows"]:
        out.setdefault((p["kernel"], p["shape"]), {})[p["product"]] = p
    return products, [(k, s, cells) for (k, s), cells in sorted(out.items(), key=lambda kv: kv[0][0])]


def intro(pred: dict) -> str:
    return (f"Each figure below is {LABEL}: the kernel's configuration and the descriptor's perf: figures "
            "through porter's analytical model (per-tile resources over the persistent tile schedule, capped "
            "by HBM). The range puts every uncertain figure at its slow end, then at its fast end. "
            "Nothing here ran on a GPU.")


def chart_rows(pred: dict) -> list[dict]:
    """Per kernel, its first product and shape: the time of each resource (whole kernel, us)."""
    seen, out = set(), []
    for p in pred["rows"]:
        if p["kernel"] in seen or not p.get("resources"):
            continue
        seen.add(p["kernel"])
        out.append(p)
    return out
