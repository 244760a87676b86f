"""What one GPU visit runs, in which order, and how long it should take.

The device check (``porter.runtime.device_check``) runs in two phases: every kernel form
is validated first (a kernel that is wrong on the GPU is the most important thing a
visit can learn), then benchmarks in the order of what they decide:

1. **A/B**: each kernel changed by the performance wave against its previous form,
   built from ``--set`` knob settings (``AB_FORMS`` and ``prepare --ab``), old form then
   new, so one visit measures the gain the timing model predicted;
2. **tuned vs default**: each kernel whose variant comes from a ``porter tune`` entry
   (``tuning/ARCH[.PRODUCT].yaml``) against its hand-chosen configuration;
3. the standard benchmarks of every other kernel.

Each benchmark carries porter's timing-model prediction for its shape, made at
``prepare`` time (the GPU machine needs no timing model), labelled ``PREDICTED_LABEL``.

``estimate_s`` is the visit's cost model: seconds a child takes on the GPU machine,
from the host work (input generation and fp64 references, measured on this project's
2-core CPU machine, so an upper bound for the GPU machine's 16 cores) plus the device
work (warm-up and timed launches at the predicted, else roofline, time). ``--budget``
trims the benchmarks from the end of the order by these estimates.
"""

from __future__ import annotations

import re

from porter.errors import PorterError

PREDICTED_LABEL = "predicted by porter's timing model, not measured"
TUNED_NOTE = "tuned vs default: no kernel of this arch has a tuning entry (tuning/ARCH[.PRODUCT].yaml)"
UNTUNED = "untuned"           # the run-name suffix of a tuned kernel's hand-chosen form: kernel[untuned]
# Pair roles in benchmark order: what the visit decides first.
PAIR_ROLES = {"ab-old": "A/B: {kernel} new form vs old ({sets})",
              "tuned-default": "tuned vs default: {kernel} ({why}) vs its hand-chosen configuration"}

# The previous form of each kernel the performance wave (issue 17) changed, as --set
# knob settings: (kernel, (key=value, ...), what the pair decides). The device check
# benchmarks both forms back to back. Add a row when a kernel's default changes.
AB_FORMS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    # issue 17 item 2 (wave-bw): block-scaled tcgen05 GEMMs take N = 256 with one TMEM accumulator
    # (the scale slots leave no room for two) over N = 128 double-buffered
    ("gemm.mxfp8", ("tile_n=128",), "block-scaled N 256 x 1 accumulator vs N 128 x 2"),
    ("gemm.nvfp4", ("tile_n=128",), "block-scaled N 256 x 1 accumulator vs N 128 x 2"),
    ("gemm.mxfp8.pair", ("tile_n=128",), "block-scaled pair 256 x 256, 1 accumulator vs 256 x 128 x 2"),
    ("gemm.nvfp4.pair", ("tile_n=128",), "block-scaled pair 256 x 256, 1 accumulator vs 256 x 128 x 2"),
    # issue 17 item 4 (wave-bw): pair GEMMs' stage / accumulator-full waits at CTA scope (no
    # CCTL.IVALL per K step) vs every wait a cluster-scope acquire
    *((k, ("wait_scope=cluster",), "pair waits: CTA-scope acquire where the ISA allows vs all cluster-scope")
      for k in ("gemm.bf16.pair", "gemm.fp8.pair", "gemm.mxfp8.pair", "gemm.nvfp4.pair")),
    # issue 17 item 5 (wave-hopper): Hopper fp8 accumulates the whole K in the wgmma accumulator
    # (FAST_ACCUM) at 128 x 256 over promotion into fp32 registers every 128 of K at 128 x 128
    ("gemm.fp8", ("accumulation=promoted", "tile_n=128"),
     "fp8 fast accumulation 128 x 256 vs promoted 128 x 128"),
    # issue 17 item 3 (wave-clc): dynamic persistent scheduling by cluster launch control is a
    # knob, not the default (the model sees equal tiles and predicts clc no faster; only tile
    # time variation, which the model lacks, could make it pay): the default static walk vs
    # schedule=clc, so one visit measures what the model cannot
    *((k, ("schedule=clc",), "static tile walk (default) vs dynamic scheduling by cluster launch control")
      for k in ("gemm.bf16.pair", "gemm.nvfp4.pair")),
    # issue 17 item 1 (wave-fa4): FA4's two Q tiles per CTA with a correction warpgroup is a knob,
    # not the default (L1 predicts +1% for the 1-CTA form, -11% for the pair): one visit measures both
    *((k, ("q_tiles=2",), "one Q tile per CTA (default) vs FA4's two Q tiles, two softmax and a correction warpgroup")
      for k in ("attention.hd128", "attention.hd128.pair")),
    # issue 17 items 1 and 6 (wave-attn-tma): O staged in shared memory and stored by TMA is a knob,
    # not the default (L0 predicts it 0.1-2% faster, L1 2-6% slower): one visit measures it on
    # the forms whose staging fits beside their K/V stages (Hopper hd64, Blackwell pair hd128)
    *((k, ("o_store=tma",), "O stored by each row's threads (default) vs staged in shared memory and stored by TMA")
      for k in ("attention.hd64", "attention.hd128.pair")),
    # the one-CTA hd128 forms stage O in their Q buffer (no ring fits beside 3 stages): L0 +0.2-0.6%,
    # L1 -0.4% (H200) to -2.2% (B200 causal), the next Q no longer prefetched under the epilogue
    ("attention.hd128", ("o_store=tma",), "O stored by each row's threads (default) vs staged in the Q buffer and stored by TMA"),
    # issue 17 (wave-walk): the tile walk. Heads inner (default) re-reads K/V from HBM every wave at
    # many heads; Q tiles inner keeps a wave's K/V in the L2 (L0: -2.4% time on H100 at the FA3 shape,
    # equal at L1, causal slower), a cache effect the model only estimates
    ("attention.hd128", ("tile_order=q_inner",), "heads-inner tile walk (default) vs each head's Q tiles inner"),
    # Not here, to keep the megakernel's benchmark inside the 300 s budget (it would be the one
    # dropped): gemm.bf16's epilogue=tma (fast.cu's kernel 11; L0 +0.6-0.8 %, L1 -3 %). A visit
    # with time to spare adds it: prepare --ab gemm.bf16:epilogue=tma
)

# ---- the cost model (seconds on the GPU machine) -----------------------------------------------
# Host figures measured here (2 cores, load ~6) with the command in the README's device-check
# section; the GPU machine has 16 cores, so these over-estimate its host work.
CHILD_START_S = 5.0          # python + numpy + porter imports (~2 s here) + CUDA init / context (lead: ~1-3 s)
HOST_FP64_FLOPS = 13e9       # numpy float64 matmul, 2048^3
GEN_S_PER_ELEM = {"bf16": 1.3e-7, "fp8": 4.4e-7, "mxfp8": 4.4e-7, "nvfp4": 4.4e-7}   # gemm_inputs, per operand element
BENCH_GEN_S_PER_ELEM = {"bf16": 8.3e-8, "fp8": 5.8e-8, "mxfp8": 1.2e-7, "nvfp4": 1.2e-7}   # bench_gemm_inputs
MEGAKERNEL_VALIDATE_S = 2.0  # step_inputs of a tiny model (0.8 s here) + plan + read-back
MEGAKERNEL_BENCH_S = 50.0    # bench_weights of Llama-3.2-1B (30.5 s here, 2.4 GB) + build_plan (13.3 s) + caches, copy, timing
ROUNDS_WITH_BASELINE = 3     # porter, baseline, porter
WARMUP_S = 0.2               # timing.WARMUP_MS per round
TIMED = 30                   # timing.TIMED_LAUNCHES
ROOF_SHARE = 0.6             # device time without a prediction: this share of the descriptor's peak


def form_name(kernel: str, sets) -> str:
    """The run name of a knob form: ``kernel[key=value,...]`` (the default form: ``kernel``)."""
    return f"{kernel}[{','.join(sets)}]" if sets else kernel


def parse_ab(items) -> list[tuple[str, tuple[str, ...], str]]:
    """``--ab KERNEL:key=value[,key=value]`` items as AB_FORMS rows."""
    out = []
    for item in items or ():
        kernel, _, sets = item.partition(":")
        parts = tuple(p.strip() for p in sets.split(",") if p.strip())
        if not kernel or not parts or not all(re.fullmatch(r"[A-Za-z_][\w.]*=[^,=\s]+", p) for p in parts):
            raise PorterError(f"--ab {item!r}: write KERNEL:key=value[,key=value], e.g. gemm.fp8:tile_n=128")
        out.append((kernel.strip(), parts, f"--ab {item}"))
    return out


def knob_spec(arch, kernel: str, sets):
    """The KernelSpec of ``kernel`` with ``sets`` (key=value strings) applied, through
    engineer knobs' ``porter.kernels.knobs`` (the same check of resource budgets as
    ``--set`` everywhere); PorterError when that module is not in this checkout."""
    try:
        from porter.kernels import knobs
    except ImportError:
        raise PorterError(f"{form_name(kernel, sets)}: porter.kernels.knobs is not in this checkout, so --set "
                          "forms cannot be built yet") from None
    return knobs.spec_with_knobs(arch, kernel, knobs.parse_sets(list(sets)))


def shape_key(shape) -> str:
    """A benchmark shape as the command line writes it (8192x8192x8192, 4x16x16x4096x4096, 1024)."""
    if isinstance(shape, (list, tuple)):
        return "x".join(str(int(v)) for v in shape)
    if isinstance(shape, dict):                     # a megakernel step of another model
        return f"{shape.get('model')}:{shape.get('pos')}"
    return str(shape)


def predictions(arch, spec, shapes) -> dict:
    """{shape key: the timing model's prediction (its to_dict, labelled)} for ``spec`` at each
    benchmark shape, or {"unavailable": why} when porter.timing is not in this checkout."""
    try:
        from porter.timing import predict
    except ImportError:
        return {"unavailable": "porter.timing (the timing model) is not in this checkout"}
    out = {}
    for shape in shapes:
        key = shape_key(shape)
        try:
            pred = predict(arch, spec, shape=key)
            d = dict(pred.to_dict() if hasattr(pred, "to_dict") else pred)
        except Exception as exc:  # noqa: BLE001 - a prediction never stops a visit's preparation
            out[key] = {"unavailable": f"{type(exc).__name__}: {exc}"[:200]}
            continue
        d["label"] = PREDICTED_LABEL
        out[key] = d
    return out


def predicted_us(entry: dict, shape) -> float | None:
    p = ((entry.get("predicted") or {}).get(shape_key(shape))) or {}
    t = p.get("time_us")
    return float(t) if isinstance(t, (int, float)) and t > 0 else None


def _span(entry: dict, shape) -> tuple[float | None, float | None]:
    p = ((entry.get("predicted") or {}).get(shape_key(shape))) or {}
    lo, hi = p.get("low"), p.get("high")
    ok = all(isinstance(x, (int, float)) and x > 0 for x in (lo, hi))
    return (float(lo), float(hi)) if ok else (None, None)


def _variant(spec: dict) -> str:
    return spec.get("variant", "").split(".", 1)[-1]


def _device_s(entry: dict, shape, flops: float, peak_tflops: float | None) -> float:
    us = predicted_us(entry, shape)
    t = us * 1e-6 if us else (flops / (peak_tflops * 1e12 * ROOF_SHARE) if peak_tflops else 0.005)
    return ROUNDS_WITH_BASELINE * (WARMUP_S + TIMED * t) + 2 * t


def estimate_s(entry: dict, phase: str, arch=None) -> float:
    """Seconds the ``phase`` ("validate" or "bench") child of ``entry`` should take on the GPU machine."""
    spec, shapes = entry.get("spec") or {}, entry.get("shapes") or {}
    family, seeds = spec.get("family"), int(shapes.get("seeds", 1))
    peaks = getattr(arch, "peak_tflops", None) or {}
    total = CHILD_START_S
    if phase == "validate":
        for s in shapes.get("validate", []):
            if family == "gemm":
                m, n, k = s
                gen = GEN_S_PER_ELEM.get(_variant(spec), 4.4e-7)
                total += seeds * (4.0 * m * n * k / HOST_FP64_FLOPS + (m + n) * k * gen)
            elif family == "attention":
                b, hq, _, sq, sk = s
                d = (spec.get("config") or {}).get("head_dim", 128)
                total += seeds * 3 * 4.0 * b * hq * sq * sk * d / HOST_FP64_FLOPS + 0.05
            else:
                total += seeds * MEGAKERNEL_VALIDATE_S
        return total
    for s in shapes.get("bench", []):
        if family == "gemm":
            m, n, k = s
            v = _variant(spec)
            flops = 2.0 * m * n * k
            gen = (m + n) * k * BENCH_GEN_S_PER_ELEM.get(v, 1.2e-7)
            spot = 2 * 2.0 * 64 * n * k / HOST_FP64_FLOPS
            total += gen + spot + _device_s(entry, s, flops, peaks.get({"bf16": "bf16"}.get(v, "fp8")))
        elif family == "attention":
            b, hq, _, sq, sk = s
            d = (spec.get("config") or {}).get("head_dim", 128)
            flops = 4.0 * b * hq * sq * sk * d * (0.5 if (spec.get("config") or {}).get("causal") else 1.0)
            total += 1.0 + _device_s(entry, s, flops, peaks.get("bf16"))
        else:
            total += MEGAKERNEL_BENCH_S
    return total


# ---- order --------------------------------------------------------------------------------------

def tuned_pair(arch, spec):
    """(where the tuned configuration comes from, the hand-chosen spec) when ``spec`` is a
    kernel variant porter tune's entry configured, else None."""
    try:
        from porter.tuning import entries as tuning
    except ImportError:
        return None
    note = tuning.tuned_note(arch, spec)
    if not note:
        return None
    from porter import kernels as kfam

    with tuning.untuned():
        default = next((s for s in kfam.family_module(spec.family).variants(arch)
                        if getattr(s, "name", None) == spec.name), None)
    return (note, default) if default is not None and default.to_dict() != spec.to_dict() else None


def bench_order(entries: dict) -> list[dict]:
    """Benchmarks in the order of what they decide: A/B pairs (old form, then new), then
    tuned-vs-default pairs (hand-chosen, then tuned), then every other form. ``entries``:
    {run name: manifest entry}. Each item: {run, kernel, role, decides}."""
    out, seen = [], set()
    for role, text in PAIR_ROLES.items():
        for run, e in entries.items():
            form = e.get("form") or {}
            if form.get("role") != role:
                continue
            new = form["kernel"]
            why = text.format(kernel=new, sets=", ".join(form.get("sets", [])), why=form.get("why", ""))
            out.append({"run": run, "kernel": new, "role": role, "decides": why})
            seen.add(run)
            if new in entries and new not in seen:
                out.append({"run": new, "kernel": new, "role": role + "-new", "decides": why})
                seen.add(new)
    out += [{"run": run, "kernel": (e.get("form") or {}).get("kernel", run), "role": "standard",
             "decides": "standard benchmark"} for run, e in entries.items() if run not in seen]
    return out


def comparisons(records: list[dict], entries: dict) -> list[dict]:
    """A/B rows: for each pair both of whose forms were timed, measured new/old speed beside
    the timing model's predicted ratio (where both forms have a prediction)."""
    by_run = {r["name"]: r for r in records}
    out = []
    for run, e in entries.items():
        form = e.get("form") or {}
        if form.get("role") not in PAIR_ROLES or form["kernel"] not in by_run or run not in by_run:
            continue
        old, new = by_run[run], by_run[form["kernel"]]
        for o_row in old.get("bench", []):
            n_row = next((r for r in new.get("bench", []) if r.get("shape") == o_row.get("shape")), None)
            if n_row is None:
                continue
            o_ms, n_ms = o_row["time"]["median_ms"], n_row["time"]["median_ms"]
            row = {"kernel": form["kernel"], "old": run, "role": form["role"], "shape": o_row.get("shape"),
                   "measured_speedup": o_ms / n_ms if n_ms > 0 else None}
            from porter.runtime import timing

            row["beyond_noise"] = timing.distinguishable(o_row["time"], n_row["time"])
            po = predicted_us(e, o_row.get("shape"))
            pn = predicted_us(entries.get(form["kernel"], {}), o_row.get("shape"))
            if po and pn:
                row["predicted_speedup"] = po / pn
                row["predicted_label"] = PREDICTED_LABEL
                lo_o, hi_o = _span(e, o_row.get("shape"))
                lo_n, hi_n = _span(entries.get(form["kernel"], {}), o_row.get("shape"))
                if lo_o and hi_o and lo_n and hi_n:        # the ratio's range from both forms' ranges
                    row["predicted_speedup_range"] = [lo_o / hi_n, hi_o / lo_n]
            out.append(row)
    return out


def timeline(manifest: dict, kernels=None) -> list[dict]:
    """Every child of the visit in run order with its estimated seconds and the running total."""
    from porter.descriptor.arch import load_arch

    try:
        arch = load_arch(manifest["arch"])
    except Exception:  # noqa: BLE001 - the GPU machine may lack what a descriptor load needs
        arch = None
    entries = selected(manifest, kernels)
    rows, total = [], 0.0
    for run, e in entries.items():
        est = estimate_s(e, "validate", arch)
        total += est
        rows.append({"phase": "validate", "run": run, "estimate_s": est, "cumulative_s": total})
    for item in bench_order(entries):
        est = estimate_s(entries[item["run"]], "bench", arch)
        total += est
        rows.append({"phase": "bench", "run": item["run"], "decides": item["decides"], "estimate_s": est,
                     "cumulative_s": total})
    return rows


def selected(manifest: dict, kernels=None) -> dict:
    """{run name: entry} of the manifest, only the kernels named (a kernel brings its A/B forms)."""
    out = {}
    for key, e in (manifest.get("kernels") or {}).items():
        run = key.split("/", 1)[1]
        kernel = (e.get("form") or {}).get("kernel", run)
        if not kernels or run in kernels or kernel in kernels:
            out[run] = e
    return out
