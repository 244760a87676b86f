"""One prediction: a kernel on one product at one shape, with the range its uncertain
figures allow. The words LABEL go wherever a predicted figure is shown."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Mapping

from porter.errors import PorterError

from . import attention_model, gemm_model, megakernel_model
from .figures import Figures
from .schedule import extrapolate

LABEL = "predicted by porter's timing model, not measured"
MODELS = {"gemm": gemm_model, "attention": attention_model, "megakernel": megakernel_model}
# Figures whose larger value makes a kernel slower (latencies, costs); every other figure
# (clocks, rates, bandwidths, efficiencies, windows) makes it faster. The range's slow end
# puts every uncertain figure at its slow end at once, the fast end likewise.
_SLOWER_WHEN_LARGER = ("latency", "_cycles", "_ns", "launch_us", "penalty", "rescale")   # rescale: tiles that pay it


def _slower_when_larger(key: str) -> bool:
    return any(part in key for part in _SLOWER_WHEN_LARGER)


@dataclass(frozen=True)
class Prediction:
    kernel: str
    product: str
    shape: str
    time_us: float
    tflops: float | None
    gb_s: float
    bound: str
    low: float
    high: float
    pct_peak: float | None
    resources: Mapping[str, float]
    label: str = LABEL
    arch: str = ""
    level: str = "L0"              # L0: per-tile times from the configuration (no timed simulation)
    extra: Mapping[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"kernel": self.kernel, "product": self.product, "shape": self.shape,
                "time_us": round(self.time_us, 3), "tflops": None if self.tflops is None else round(self.tflops, 1),
                "gb_s": round(self.gb_s, 1), "bound": self.bound, "low": round(self.low, 3),
                "high": round(self.high, 3),
                "pct_peak": None if self.pct_peak is None else round(self.pct_peak, 1),
                "resources": {k: round(v, 3) for k, v in self.resources.items()},
                "label": self.label, "arch": self.arch, "level": self.level, "extra": dict(self.extra)}


def _time(spec, arch, fig, shape: str, level: str = "L0", end: str | None = None) -> tuple[float, dict, dict]:
    """(seconds, resource -> seconds for the whole kernel, the model's output). ``end``: the
    range's "fast" or "slow" end, for a model with uncertain terms of its own."""
    mod = MODELS.get(spec.family)
    if mod is None:
        raise PorterError(f"timing model: no model for kernel family '{spec.family}' ({spec.name})")
    # a model that takes the level itself (the megakernel's queues: L1 times its instructions)
    out = mod.model(spec, arch, fig, shape, level=level, end=end) if level in getattr(mod, "LEVELS", ()) \
        else mod.model(spec, arch, fig, shape)
    if level == "L1" and not out.get("direct"):       # the per-tile period measured in the timed simulator
        from .l1 import apply

        out = apply(spec, arch, fig, shape, out)
    if out.get("direct"):
        return out["time_s"], dict(out["resources_s"]), out
    ext = extrapolate(out["schedule"], fig, out["hbm_bytes"])
    per_sm = {r: cyc / fig.clock_hz for r, cyc in out["per_tile_resources"].items()}
    # whole-kernel resource times: an SM's resource over the tiles it runs, and HBM
    # GEMM tiles are equal: the busiest unit runs `waves` of them (attention's model
    # already gives its resources over the busiest unit's share of the K/V tiles)
    scale = ext["waves"] if out.get("per_tile") else 1.0
    resources = {r: v * scale for r, v in per_sm.items()}
    resources["hbm"] = ext["hbm_s"]
    resources["launch + prologue"] = ext["launch_s"] + out["schedule"].prologue_cycles / fig.clock_hz
    out["extrapolation"] = ext
    return ext["time_s"], resources, out


def _sensitivity(spec, arch, fig, shape: str, seconds: float, most: int = 3) -> list[str]:
    """The uncertain figures that move this prediction most, one at a time to each end of its
    range (the others central): 'tma_inflight_kib [32, 128]: -0% / +45%' (time change)."""
    swings = []
    for key, ends in fig.uncertain.items():
        times = [_time(spec, arch, fig.with_value(key, v), shape)[0] for v in ends]
        lo, hi = min(times) / seconds - 1, max(times) / seconds - 1
        if hi - lo > 0.005:
            swings.append((hi - lo, f"{key} [{ends[0]:g}, {ends[1]:g}]: {100 * lo:+.0f}% / {100 * hi:+.0f}%"))
    return [text for _, text in sorted(swings, key=lambda x: -x[0])[:most]]


def predict(arch, spec, *, product: str | None = None, shape: str | None = None, level: str = "L0") -> Prediction:
    """Predict ``spec`` (a KernelSpec of ``arch``) on ``product`` (default: the arch's own)
    at ``shape`` (default: the first of ``standard_shapes(spec)``). ``level="L1"``: the
    per-tile period from the simulator's timed mode (porter.timing.l1), not L0's."""
    if level not in ("L0", "L1"):
        raise PorterError(f"timing model: level {level!r}: L0 or L1")
    from .shapes import standard_shapes

    if product and product not in arch.product_names:
        raise PorterError(f"{arch.path}: no product {product!r}; known: {', '.join(arch.product_names)}")
    if product and product != arch.product:
        arch = arch.for_product(product)
    product = product or arch.product or (arch.products[0] if arch.products else "")
    shape = shape or standard_shapes(spec)[0]
    fig = Figures.of(arch)
    seconds, resources, out = _time(spec, arch, fig, shape, level)
    ends = []
    for fast in (True, False):
        f = fig
        for key, (lo, hi) in fig.uncertain.items():
            slow_end = hi if _slower_when_larger(key) else lo
            fast_end = lo if _slower_when_larger(key) else hi
            f = f.with_value(key, fast_end if fast else slow_end)
        ends.append(_time(spec, arch, f, shape, level, end="fast" if fast else "slow")[0])
    low, high = min(ends + [seconds]), max(ends + [seconds])
    sensitivity = _sensitivity(spec, arch, fig, shape, seconds) if not out.get("direct") else []
    bound = max(resources, key=lambda r: resources[r])
    flops = out.get("flops")
    tflops = flops / seconds / 1e12 if flops else None
    gb_s = out["bytes_moved"] / seconds / 1e9
    peak_key = out.get("peak_key")
    extra = dict(out.get("extra", {}))
    if tflops is not None and peak_key:
        pct = 100.0 * tflops / arch.peak_tflops[peak_key]
        extra["peak"] = f"datasheet {peak_key} {arch.peak_tflops[peak_key]:g} TFLOP/s"
    elif tflops is not None and out.get("mma_kind"):
        # no datasheet peak for this format: the one the perf figures imply
        # (SMs x the kind's dense rate x the clock the peaks are quoted at)
        peak = fig.sm_count * fig.mma_rate(out["mma_kind"]) * fig["clock_mhz"] * 1e6 / 1e12
        pct = 100.0 * tflops / peak
        extra["peak"] = f"derived {peak:.0f} TFLOP/s ({fig.sm_count} SMs x {fig.mma_rate(out['mma_kind']):g} FLOP/clk x {fig['clock_mhz']:g} MHz)"
    else:
        pct = 100.0 * gb_s * 1e9 / arch.hbm_bandwidth_bytes_per_s
        extra["peak"] = "HBM bandwidth"
    if sensitivity:
        extra["sensitivity"] = sensitivity
    if "extrapolation" in out:
        extra.update({k: round(v, 4) if isinstance(v, float) else v for k, v in out["extrapolation"].items()
                      if k in ("waves", "tail_fraction")})
    if out.get("direct"):
        level = out.get("level", "L0")               # a direct model says what it used (the megakernel's queues)
    if level == "L1":
        bound = extra.get("l1_bound", bound)        # the timed run's busiest unit, or its latency
    return Prediction(kernel=spec.name, product=product, shape=shape, time_us=seconds * 1e6,
                      tflops=tflops, gb_s=gb_s, bound=bound, low=low * 1e6, high=high * 1e6, pct_peak=pct,
                      resources={r: v * 1e6 for r, v in resources.items()}, arch=arch.name, extra=extra,
                      level=level)
