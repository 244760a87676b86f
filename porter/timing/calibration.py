"""Calibration of porter's timing model against published ladders (shared/PERF_ANCHORS.md):
the fast.cu H100 GEMM ladder and the FlashAttention-3 ablation, each step as porter knob
settings (porter.kernels.knobs) where a knob exists, predicted on the H100 SXM.

At most ONE factor per product is fitted, on the GEMM ladder's cuBLAS row (porter's
default Hopper bf16 GEMM has cuBLAS's structure: 128x256 tiles, two consumer warpgroups,
a 2-CTA cluster multicasting B); it is applied to the attention table too. Nothing else is
fitted. Steps without a knob are listed with the reason and left out of the statistics.
"""

from __future__ import annotations

from dataclasses import dataclass

from .predict import predict

PRODUCT = "H100 SXM"


@dataclass(frozen=True)
class Step:
    name: str
    published: dict            # shape -> TFLOP/s
    knobs: dict | None         # None: no porter knob reproduces it
    note: str = ""


GEMM_KERNEL = "gemm.bf16"
GEMM_LADDER = (
    Step("cuBLAS", {"8192x8192x8192": 797.8, "6144x6144x6144": 741.1}, {},
         "porter's default gemm.bf16 (the K7/cuBLAS structure); the fitted row"),
    Step("K1", {"8192x8192x8192": 32.4, "6144x6144x6144": 32.1}, None, "CUDA cores only: no tensor-core-off knob"),
    Step("K2", {"8192x8192x8192": 488.5, "6144x6144x6144": 476.6},
         {"consumers": 1, "cluster_m": 1, "persistent": False, "tile_n": 192},
         "one warpgroup, not persistent, no cluster; porter keeps its producer warp (no warp-specialisation-off knob) and 1 CTA per SM"),
    Step("K4", {"8192x8192x8192": 635.4, "6144x6144x6144": 651.2},
         {"consumers": 3, "tile_n": 192, "cluster_m": 1, "persistent": False},
         "3 consumers (192 rows), not persistent; cuda::barrier has no knob (porter uses mbarrier)"),
    Step("K5", {"8192x8192x8192": 658.4, "6144x6144x6144": 625.8},
         {"consumers": 3, "tile_n": 192, "cluster_m": 1, "grid_ctas": 128},
         "persistent on 128 SMs; cuda::barrier has no knob"),
    Step("K6", {"8192x8192x8192": 777.5, "6144x6144x6144": 766.3},
         {"consumers": 3, "tile_n": 192, "cluster_m": 1, "grid_ctas": 128},
         "K5 with mbarrier parity waits: porter always uses them, so the same knobs as K5"),
    Step("K7", {"8192x8192x8192": 799.1, "6144x6144x6144": 774.4},
         {"grid_ctas": 128}, "2 consumers, 128x256, cluster 2 with multicast: porter's default on 128 SMs"),
    Step("K11", {"8192x8192x8192": 807.7, "6144x6144x6144": 794.5},
         None, "Hilbert tile order and TMA-store epilogue: no knob"),
)
ATTN_KERNEL = "attention.hd128"
ATTN_SHAPE = "2x16x16x8192x8192"
ATTN_LADDER = (
    Step("FA3", {ATTN_SHAPE: 661.0}, {}, "warp specialisation + ping-pong: porter's default attention.hd128"),
    Step("no GEMM-softmax pipelining", {ATTN_SHAPE: 582.0}, {"pingpong": False}, "pingpong off"),
    Step("no warp specialisation", {ATTN_SHAPE: 570.0}, None, "no knob: porter's attention is always warp-specialised"),
)


def _spec(arch, kernel, knobs):
    from porter.kernels.knobs import spec_with_knobs

    return spec_with_knobs(arch, kernel, knobs or {})


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two equally long lists (ties in either count as neither)."""
    n = len(xs)
    conc = disc = tx = ty = 0
    for i in range(n):
        for j in range(i + 1, n):
            dx, dy = xs[i] - xs[j], ys[i] - ys[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                tx += 1
            elif dy == 0:
                ty += 1
            elif (dx > 0) == (dy > 0):
                conc += 1
            else:
                disc += 1
    denom = ((conc + disc + tx) * (conc + disc + ty)) ** 0.5
    return (conc - disc) / denom if denom else 1.0


def calibrate(arch) -> dict:
    """The calibration table: per step and shape published, predicted (raw and with the
    one fitted factor), errors; per ladder Kendall tau and the worst step-ratio error."""
    rows = []
    for table, kernel, ladder in (("fast.cu GEMM", GEMM_KERNEL, GEMM_LADDER), ("FA3 ablation", ATTN_KERNEL, ATTN_LADDER)):
        for step in ladder:
            for shape, pub in step.published.items():
                row = {"table": table, "step": step.name, "shape": shape, "published": pub, "note": step.note,
                       "knobs": step.knobs}
                if step.knobs is not None:
                    p = predict(arch, _spec(arch, kernel, step.knobs), product=PRODUCT, shape=shape)
                    row.update(raw=p.tflops, bound=p.bound, low_tflops=p.tflops * p.time_us / p.high,
                               high_tflops=p.tflops * p.time_us / p.low)
                rows.append(row)
    fitted = {}
    for r in rows:
        if r["table"] == "fast.cu GEMM" and r["step"] == "cuBLAS":
            fitted[r["shape"]] = r["published"] / r["raw"]
    factor = sum(fitted.values()) / len(fitted)
    for r in rows:
        if "raw" in r:
            r["predicted"] = r["raw"] * factor
            r["abs_error"] = r["predicted"] / r["published"] - 1
    stats = {}
    for table in ("fast.cu GEMM", "FA3 ablation"):
        for shape in {r["shape"] for r in rows if r["table"] == table}:
            steps = [r for r in rows if r["table"] == table and r["shape"] == shape and "raw" in r
                     and r["step"] != "cuBLAS"]
            pub = [r["published"] for r in steps]
            pred = [r["predicted"] for r in steps]
            ratio_err = []
            for a, b in zip(steps, steps[1:]):
                ratio_err.append(abs((b["predicted"] / a["predicted"]) / (b["published"] / a["published"]) - 1))
            stats[f"{table} {shape}"] = {"kendall_tau": kendall_tau(pub, pred),
                                         "max_step_ratio_error": max(ratio_err) if ratio_err else 0.0,
                                         "max_abs_error": max(abs(r["abs_error"]) for r in steps) if steps else 0.0}
    return {"product": PRODUCT, "fitted_factor": factor, "fitted_on": "fast.cu cuBLAS row (mean over its shapes)",
            "rows": rows, "stats": stats}


def table_markdown(cal: dict) -> str:
    lines = [f"Calibration on {cal['product']} (one fitted factor {cal['fitted_factor']:.3f} on the cuBLAS row; "
             "predicted by porter's timing model, not measured)", "",
             "| table | step | shape | published TFLOP/s | predicted TFLOP/s | error | bound | knobs / note |",
             "|---|---|---|---|---|---|---|---|"]
    for r in cal["rows"]:
        if "predicted" in r:
            lines.append(f"| {r['table']} | {r['step']} | {r['shape']} | {r['published']:.1f} | {r['predicted']:.1f} "
                         f"| {100 * r['abs_error']:+.1f}% | {r['bound']} | {r['knobs'] or 'default'}: {r['note']} |")
        else:
            lines.append(f"| {r['table']} | {r['step']} | {r['shape']} | {r['published']:.1f} | - | - | - | {r['note']} |")
    lines.append("")
    for k, s in cal["stats"].items():
        lines.append(f"- {k}: Kendall tau {s['kendall_tau']:.2f}, worst step ratio error "
                     f"{100 * s['max_step_ratio_error']:.1f}%, worst absolute error {100 * s['max_abs_error']:.1f}%")
    return "\n".join(lines)
