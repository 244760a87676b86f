"""The ``perf:`` section of an arch descriptor: the figures porter's timing model reads.

Every figure is a bare number whose unit is in its key name, with a ``source`` citing
the descriptor's ``sources`` keys, like the rest of the schema. Figures nobody publishes
sit under ``perf.uncertain`` as ``key: [low, high]`` (the value itself is the central
estimate): porter.timing predicts at the central values and again at the ends of every
range, so a prediction carries the range those figures allow, never a bare point.

A product may carry ``perf:`` figures of its own (``products.<name>.perf``, e.g. a part
with a higher power limit and clock); the figures it leaves out are the architecture's.

Checked here besides types and ranges: every MMA kind of ``tensor_core.kinds`` has a
rate, and every uncertain range holds its central value. ``peak_mismatches`` says where
``sm_count x rate x clock`` misses a datasheet peak (tests hold the shipped descriptors to
it; an edited copy, e.g. with fewer SMs, may differ and still load).
"""

from __future__ import annotations

from typing import Any

# scalar figures: key -> (unit, low, high, required)
SCALARS: dict[str, tuple[str, float, float, bool]] = {
    "clock_mhz": ("MHz (the tensor clock under load that the peaks imply)", 100, 5000, True),
    "boost_clock_mhz": ("MHz", 100, 5000, True),
    # optional: the clock a kernel holds under sustained tensor-core load (the power limit
    # pulls it below the datasheet's); porter.timing converts cycles at it when present
    "sustained_clock_mhz": ("MHz under sustained tensor-core load", 100, 5000, False),
    "mma_latency_base_cycles": ("cycles", 0, 10000, True),
    "mma_latency_per_n_cycles": ("cycles per column of N", 0, 100, True),
    "smem_bytes_per_clk_per_sm": ("bytes per clock per SM", 1, 4096, True),
    "smem_banks": ("banks", 1, 256, True),
    "mufu_ex2_per_clk_per_sm": ("ex2 per clock per SM", 1, 4096, True),
    "fp32_flop_per_clk_per_sm": ("FLOP per clock per SM", 1, 1 << 16, True),
    "issue_per_clk_per_sm": ("warp instructions per clock per SM", 1, 64, True),
    "alu_latency_cycles": ("cycles from a dependent fp32 ALU instruction's issue to its result", 1, 100, True),
    "l2_bandwidth_tb_s": ("TB/s (1e12 bytes/s), whole GPU", 0.01, 1000, True),
    "l2_latency_ns": ("ns", 1, 10000, True),
    "l2_far_penalty_cycles": ("cycles (cross-partition or cross-die)", 0, 10000, True),
    "hbm_efficiency": ("fraction of the datasheet bandwidth a streaming kernel reaches", 0.05, 1.0, True),
    "hbm_latency_ns": ("ns", 1, 100000, True),
    "tma_inflight_kib": ("KiB in flight per SM", 1, 4096, True),
    "tma_latency_ns": ("ns", 1, 100000, True),
    "mbarrier_cycles": ("cycles per arrive + wait", 0, 100000, True),
    "named_barrier_cycles": ("cycles", 0, 100000, True),
    "fence_cycles": ("cycles", 0, 100000, True),
    "cluster_barrier_cycles": ("cycles", 0, 100000, True),
    "launch_us": ("us per kernel launch", 0, 1000, True),
    "counter_wakeup_ns": ("ns from a counter's release to a polling SM seeing it (backoff)", 0, 100000, True),
    # optional, read by the simulator's timed mode (porter.timing.l1) where present
    "smem_latency_cycles": ("cycles from a shared-memory load's issue to its data", 1, 1000, False),
    "mufu_latency_cycles": ("cycles from a special-function (ex2) instruction's issue to its result", 1, 1000, False),
    "tmem_latency_cycles": ("cycles from a tcgen05.ld's issue to its registers", 1, 1000, False),
    "tmem_bytes_per_clk_per_sm": ("bytes per clock per SM between Tensor Memory and registers", 1, 65536, False),
    # optional, read by the GEMM model for kernels scheduled by cluster launch control (schedule=clc)
    "clc_round_trip_ns": ("ns from a clusterlaunchcontrol.try_cancel to its response in shared memory", 1, 100000, False),
    # optional, read by the attention model for kernels that rescale O only past a threshold
    "lazy_rescale_tile_share": ("fraction of K/V tiles after which a lazily rescaling softmax rescales O", 0, 1, False),
}
MAPS = {"mma_flop_per_clk_per_sm": ("dense FLOP per clock per SM", 1, 1 << 20)}
FIGURES = (*SCALARS, *MAPS)
# The peaks may differ from sm_count x rate x clock by this much (datasheets round).
PEAK_TOLERANCE = 0.03


def _number(c, raw, dotted: str, unit: str, lo: float, hi: float) -> float:
    from porter.descriptor.arch_schema import Field

    return float(c.value(raw, Field("number", unit, lo, hi), dotted))


def _figures(c, raw: dict, dotted: str, sources: dict, required: bool) -> dict:
    """The figure keys of one perf mapping (the section or a product's override)."""
    out: dict[str, Any] = {}
    for key, (unit, lo, hi, must) in SCALARS.items():
        if key in raw:
            out[key] = _number(c, raw[key], f"{dotted}.{key}", unit, lo, hi)
        elif must and required:
            c.fail(f"{dotted}.{key}", "missing key", f"add '{key}:' ({unit}) with its source")
    for key, (unit, lo, hi) in MAPS.items():
        if key in raw:
            m = c.mapping(raw[key], f"{dotted}.{key}", "MMA kind -> rate")
            out[key] = {k: _number(c, v, f"{dotted}.{key}.{k}", unit, lo, hi) for k, v in m.items()}
        elif required:
            c.fail(f"{dotted}.{key}", "missing key", "give each tensor_core kind's dense FLOP per clock per SM")
    if "source" not in raw:
        c.fail(f"{dotted}.source", "missing key", "say where each figure comes from, citing [KEY]")
    out["source"] = c.source(raw["source"], f"{dotted}.source", tuple(FIGURES), sources)
    return out


def _uncertain(c, raw: Any, dotted: str, figs: dict) -> dict[str, tuple[float, float]]:
    """``key: [low, high]`` (dotted keys reach into maps: mma_flop_per_clk_per_sm.f16)."""
    if raw is None:
        return {}
    c.mapping(raw, dotted, "figure -> [low, high]")
    out = {}
    for key, rng in raw.items():
        d = f"{dotted}.{key}"
        head, _, sub = key.partition(".")
        value = figs.get(head)
        if isinstance(value, dict):
            value = value.get(sub) if sub else None
        elif sub:
            value = None
        if not isinstance(value, float):
            c.fail(d, f"'{key}' names no figure of this perf section", "name a figure above, e.g. clock_mhz")
        if (not isinstance(rng, list) or len(rng) != 2
                or not all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in rng)):
            c.fail(d, "expected [low, high]", f"write '{key}: [low, high]' around the central {value:g}")
        lo, hi = float(rng[0]), float(rng[1])
        if not lo <= value <= hi:
            c.fail(d, f"the range [{lo:g}, {hi:g}] does not hold the figure's value {value:g}",
                   "make low <= value <= high")
        out[key] = (lo, hi)
    return out


def check_perf(c, raw: Any, sources: dict, d: dict, products_raw: Any) -> dict:
    """The normalised perf section: {figures..., source, uncertain, products: {name: overrides}};
    {} when the descriptor has none (porter predict then says which section to add)."""
    if raw is None:
        return {}
    c.mapping(raw, "perf", "timing-model figures")
    c.keys(raw, "perf", (*FIGURES, "source", "notes", "uncertain"), ())
    out = _figures(c, raw, "perf", sources, required=True)
    out["uncertain"] = _uncertain(c, raw.get("uncertain"), "perf.uncertain", out)
    kinds = d["tensor_core"]["kinds"]
    rates = out["mma_flop_per_clk_per_sm"]
    for kind in kinds:
        if kind not in rates:
            c.fail(f"perf.mma_flop_per_clk_per_sm.{kind}", "missing rate for an MMA kind of tensor_core.kinds",
                   f"add '{kind}:' (dense FLOP per clock per SM)")
    for kind in rates:
        if kind not in kinds:
            c.fail(f"perf.mma_flop_per_clk_per_sm.{kind}", f"no MMA kind '{kind}' in tensor_core.kinds",
                   f"use one of {', '.join(kinds) or 'none'}")
    out["products"] = {}
    for name, spec in (products_raw or {}).items():
        if not isinstance(spec, dict) or "perf" not in spec:
            continue
        dotted = f"products.{name}.perf"
        c.mapping(spec["perf"], dotted, "timing-model figures that differ for this product")
        c.keys(spec["perf"], dotted, (*FIGURES, "source", "notes", "uncertain"), ())
        figs = _figures(c, spec["perf"], dotted, sources, required=False)
        figs["uncertain"] = _uncertain(c, spec["perf"].get("uncertain"), f"{dotted}.uncertain",
                                       {**out, **figs})
        out["products"][name] = figs
    return out


def peak_mismatches(d: dict) -> list[str]:
    """Where rate x clock x SM count misses the datasheet peak (one of them is wrong)."""
    perf = d.get("perf") or {}
    out: list[str] = []
    if not perf:
        return out
    from porter.descriptor.arch_schema import PEAK_DTYPES

    peaks = d["peak"]["dense_tflops"]
    sms = d["limits"]["sm_count"]
    clock = perf["clock_mhz"] * 1e6
    for kind, spec in d["tensor_core"]["kinds"].items():
        # a kind runs at the rate of its first format (f8f6f4 takes fp4 one per byte at the
        # fp8 rate; the fp4 peak belongs to the block-scaled fp4 kinds)
        first = spec["formats"][0]
        dtype = next((p for p, m in PEAK_DTYPES.items() if first in m and p in peaks), None)
        if dtype is not None:
            widest = peaks[dtype]
            model = sms * perf["mma_flop_per_clk_per_sm"][kind] * clock / 1e12
            if abs(model - widest) > PEAK_TOLERANCE * widest:
                out.append(f"perf.mma_flop_per_clk_per_sm.{kind}: {sms} SMs x "
                           f"{perf['mma_flop_per_clk_per_sm'][kind]:g} FLOP/clk x {perf['clock_mhz']:g} MHz = "
                           f"{model:.0f} TFLOP/s, but peak.dense_tflops.{dtype} is {widest:g}")
    return out
