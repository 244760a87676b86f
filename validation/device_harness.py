"""Device harness: poisoning, random inputs per variant, judging, timing, statistics.

What a device run needs that is not a kernel launch lives here, and all of it but the
timers runs without a GPU (the tests exercise it on CPU arrays):

* **poison**: every output buffer is filled with 0xFF bytes before a launch (a NaN in
  bf16 and fp32, -1 in int32), so an element the kernel never wrote keeps that exact
  bit pattern and is counted as unwritten; a written NaN fails the tolerance check.
* **inputs**: fresh random operands per check (a new seed per shape and repeat),
  quantized exactly as the kernel reads them (``porter.validation.quantize``).
* **judging**: the variant's tolerance policy (``porter.validation.tolerance``) plus
  the written-check; a check passes only if both hold.
* **timing**: device events around each launch (cuda.bindings events, or
  ``torch.cuda.Event`` for torch baselines), warm-up by time first, median of many,
  inputs rotated over enough sets that they do not fit in the descriptor's L2 (else
  the L2 flushed before each timed launch), porter timed before and after its baseline.
* **statistics**: median and spread (p10..p90 over the median) of the samples.

``validate(spec, arch, out_dir, device=...)`` and ``bench(spec, arch, out_dir)`` are the
entry points the pipeline's device and bench stages call; ``porter validate`` and
``porter bench`` call them too. Validation runs on any ``porter.runtime.device`` Device
(a GPU, or porter's emulator: level ``emulated``); benchmarks need a GPU. The
family-specific launches are in ``device_runs``.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from porter.errors import PorterError

POISON_BYTE = 0xFF
# Input sets together must exceed the L2 by this factor before repeated launches stop
# measuring the cache: one set's worth of lines can survive from the previous launch,
# and the descriptor's L2 figure may be below what the device reports (H200: 50 MB
# datasheet, 60 MB read through PyTorch, ARCH_FACTS / KINDS).
ROTATE_L2_FACTOR = 4
# Device memory the rotation sets may take together; past this, fewer sets.
ROTATION_BUDGET_BYTES = 8 << 30
MAX_ROTATION_SETS = 64
WARMUP_LAUNCHES = 5
# Warm up by device time too: GPU clocks ramp over tens of milliseconds
# (PORTER_WARMUP_MS overrides it, e.g. for a rehearsal whose "GPU" is the host).
WARMUP_MS = 200.0
WARMUP_ENV = "PORTER_WARMUP_MS"
MAX_WARMUP_LAUNCHES = 2000
TIMED_LAUNCHES = 30
# A benchmark's queued launches must drain within this (its watchdog); the longest timed
# region, warm-up included, is a few seconds on an H200.
BENCH_WAIT_S = 60.0


# ---- poison and the written check ------------------------------------------------------

def poison_host(arr: np.ndarray) -> np.ndarray:
    """Fill ``arr`` (in place) with the poison bytes; returns it."""
    arr.view(np.uint8).reshape(-1)[:] = POISON_BYTE
    return arr


def unwritten_mask(out: np.ndarray) -> np.ndarray:
    """True where an element still holds the poison bit pattern (all 0xFF bytes)."""
    a = np.ascontiguousarray(out)
    raw = a.view(np.uint8).reshape(*a.shape, a.itemsize) if a.ndim else a.view(np.uint8)
    return np.all(raw == POISON_BYTE, axis=-1)


def written_check(out: np.ndarray, what: str = "output") -> dict:
    """How many elements the kernel left unwritten, and how many non-finite it wrote."""
    a = np.asarray(out)
    unwritten = unwritten_mask(a)
    n_unwritten = int(unwritten.sum())
    floats = a.astype(np.float64) if a.dtype.kind in "fV" or a.dtype.name == "bfloat16" else None
    n_nonfinite = int((~np.isfinite(floats) & ~unwritten).sum()) if floats is not None else 0
    first = None
    if n_unwritten:
        first = [int(i) for i in np.unravel_index(int(np.argmax(unwritten.reshape(-1))), a.shape)]
    return {"what": what, "elements": int(a.size), "unwritten": n_unwritten, "first_unwritten": first,
            "nonfinite_written": n_nonfinite, "passed": n_unwritten == 0}


# ---- judging -------------------------------------------------------------------------------

def compare_gemm(variant: str, out, ref_same, ref_unquantized) -> dict:
    """A device GEMM output (bf16 values) against both references, plus the written check."""
    from porter.validation import gemm_numerics

    written = written_check(np.asarray(out), "C")
    res = gemm_numerics.check_outputs(variant, np.asarray(out).astype(np.float64), ref_same, ref_unquantized)
    res["written"] = written
    res["passed"] = bool(res["passed"] and written["passed"])
    return res


def compare_attention(out, lse, ref, lse_ref, same) -> dict:
    """A device attention (O, lse) against the references, plus the written checks."""
    from porter.validation.attention_numerics import check_attention_outputs

    w_o, w_lse = written_check(np.asarray(out), "O"), written_check(np.asarray(lse), "lse")
    res = check_attention_outputs(np.asarray(out).astype(np.float64), np.asarray(lse, dtype=np.float64),
                                  ref, lse_ref, same)
    res["written"] = [w_o, w_lse]
    res["passed"] = bool(res["passed"] and w_o["passed"] and w_lse["passed"])
    return res


def compare_decode_step(logits, token: int, cache_rows: dict, ref_logits, ref_rows: dict,
                        logits_rtol: float, cache_rtol: float, cache_row_rtol: float) -> dict:
    """One megakernel decode step against the fp64 reference (the rule of
    porter.kernels.megakernel.check_step, applied to device outputs)."""
    logits = np.asarray(logits)
    written = written_check(logits, "logits")
    ref = np.asarray(ref_logits, dtype=np.float64)
    scale = float(np.abs(ref).max())
    got = logits.astype(np.float64)
    err = float(np.abs(got - ref).max() / scale) if np.isfinite(got).all() else float("inf")
    cache_ok, cache_unwritten = True, 0
    for name, row in cache_rows.items():
        row = np.asarray(row)
        cache_unwritten += int(unwritten_mask(row).sum())
        want = np.asarray(ref_rows[name], dtype=np.float64).reshape(-1)
        have = row.astype(np.float64).reshape(-1)
        bound = cache_rtol * np.abs(want) + cache_row_rtol * np.abs(want).max()
        cache_ok &= bool(np.all(np.abs(have - want) <= bound))
    top2 = np.sort(ref)[-2:]
    ref_token = int(np.argmax(ref))
    token_ok = token == ref_token or (top2[1] - top2[0]) <= 2 * logits_rtol * scale
    passed = bool(written["passed"] and err <= logits_rtol and cache_ok and cache_unwritten == 0 and token_ok)
    return {"logits_rel_err": err, "logits_rtol": logits_rtol, "token": int(token), "reference_token": ref_token,
            "token_ok": bool(token_ok), "cache_ok": bool(cache_ok), "cache_unwritten": cache_unwritten,
            "written": written, "passed": passed}


# ---- random inputs, quantized as the kernel reads them -------------------------------------

@dataclass
class GemmInputs:
    """Host operands in the kernel's byte layout plus what the references need."""

    variant: str
    m: int
    n: int
    k: int
    a: np.ndarray                  # bf16 / e4m3 codes (uint8) / packed e2m1 (uint8, K/2 per row)
    b: np.ndarray
    scales: tuple | None           # (sfa, sfb) raw block-scale bytes [rows, K/block], or None
    scale_a: float
    scale_b: float
    qa: object                     # quantize.Quantized, or the bf16 values (float64) for bf16
    qb: object
    a_f32: np.ndarray              # the unquantized inputs
    b_f32: np.ndarray

    @property
    def nbytes(self) -> int:
        n = self.a.nbytes + self.b.nbytes + 2 * self.m * self.n     # + the bf16 C
        if self.scales is not None:
            n += sum(s.nbytes for s in self.scales)
        return n

    def references(self) -> tuple[np.ndarray, np.ndarray]:
        """(float64 product of the quantized operands, float64 product of the unquantized)."""
        from porter.validation import reference_gemm

        return (reference_gemm.reference_gemm(self.qa, self.qb),
                self.a_f32.astype(np.float64) @ self.b_f32.astype(np.float64).T)


def gemm_inputs(variant: str, m: int, n: int, k: int, seed: int) -> GemmInputs:
    """Fresh random A [M, K], B [N, K] for ``variant`` (bf16, fp8, mxfp8, nvfp4), quantized."""
    import ml_dtypes

    from porter.validation import gemm_numerics, quantize

    gemm_numerics.validate_shape(variant, m, n, k, mma_k=1)
    a32, b32 = gemm_numerics.random_operands(m, n, k, seed)
    qa, qb = quantize.quantize_for(variant, a32), quantize.quantize_for(variant, b32)
    if variant == "bf16":
        a, b = (np.asarray(q, dtype=np.float32).astype(ml_dtypes.bfloat16) for q in (qa, qb))
        return GemmInputs(variant, m, n, k, a, b, None, 1.0, 1.0, qa, qb, a32, b32)
    codes = (quantize.pack_fp4(qa.codes), quantize.pack_fp4(qb.codes)) if variant == "nvfp4" \
        else (qa.codes, qb.codes)
    scales = (qa.block_scales, qb.block_scales) if qa.block_scales is not None else None
    sa = float(qa.tensor_scale) if qa.tensor_scale is not None else 1.0
    sb = float(qb.tensor_scale) if qb.tensor_scale is not None else 1.0
    return GemmInputs(variant, m, n, k, codes[0], codes[1], scales, sa, sb, qa, qb, a32, b32)


def bench_gemm_inputs(variant: str, m: int, n: int, k: int, seed: int) -> GemmInputs:
    """Like ``gemm_inputs`` but drawn in fp32 and cast with ml_dtypes for bf16 and fp8:
    the generic quantizer takes ~50 s per 8192^2 operand pair on one core, the cast a
    fraction of that. Same scheme (per-tensor e4m3, scale = amax / 448, saturating RNE);
    the block-scaled variants keep the generic quantizers."""
    import ml_dtypes

    from porter.validation import quantize
    from porter.validation.formats import get_format

    if variant not in ("bf16", "fp8"):
        return gemm_inputs(variant, m, n, k, seed)
    rng = np.random.default_rng(seed)
    a32 = rng.standard_normal((m, k), dtype=np.float32)
    b32 = rng.standard_normal((n, k), dtype=np.float32) / np.float32(np.sqrt(k))
    if variant == "bf16":
        a, b = a32.astype(ml_dtypes.bfloat16), b32.astype(ml_dtypes.bfloat16)
        qa, qb = a.astype(np.float64), b.astype(np.float64)
        return GemmInputs(variant, m, n, k, a, b, None, 1.0, 1.0, qa, qb, a32, b32)
    fmt = get_format("e4m3")
    quantized = []
    for x in (a32, b32):
        scale = np.float32(np.abs(x).max() / np.float32(fmt.max_finite))
        # float8_e4m3fn casts do not saturate (ARCH_FACTS): clip first, as satfinite does
        codes = np.clip(x / scale, -fmt.max_finite, fmt.max_finite).astype(ml_dtypes.float8_e4m3fn).view(np.uint8)
        quantized.append(quantize.Quantized("per_tensor", fmt.name, codes, tensor_scale=scale))
    qa, qb = quantized
    return GemmInputs(variant, m, n, k, qa.codes, qb.codes, None, float(qa.tensor_scale), float(qb.tensor_scale),
                      qa, qb, a32, b32)


def attention_inputs(b: int, hq: int, hkv: int, sq: int, sk: int, d: int, seed: int):
    """bf16 q [B,Hq,Sq,D], k, v [B,Hkv,Sk,D] (ml_dtypes arrays), fresh per seed."""
    import ml_dtypes

    from porter.validation.attention_numerics import random_qkv

    return tuple(np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16)
                 for x in random_qkv(b, hq, hkv, sq, sk, d, seed))


def seed_for(shape, repeat: int, base: int = 0) -> int:
    """A distinct, reproducible seed per (shape, repeat): every check draws fresh inputs."""
    h = 1469598103934665603
    for v in (*shape, repeat, base):
        h = ((h ^ int(v)) * 1099511628211) & 0xFFFFFFFF
    return h


# ---- L2 rotation --------------------------------------------------------------------------

def rotation_sets(bytes_per_set: int, l2_bytes: int, factor: int | None = None,
                  budget_bytes: int | None = None, max_sets: int | None = None) -> int:
    """How many input sets to rotate through so the sets together exceed ``factor`` x L2.

    One set when a single set already does; never more than the memory budget or
    ``max_sets`` allow (then the timing may see a warm L2, and the bench says so).
    Defaults: ROTATE_L2_FACTOR, ROTATION_BUDGET_BYTES, MAX_ROTATION_SETS.
    """
    factor = ROTATE_L2_FACTOR if factor is None else factor
    budget_bytes = ROTATION_BUDGET_BYTES if budget_bytes is None else budget_bytes
    max_sets = MAX_ROTATION_SETS if max_sets is None else max_sets
    if bytes_per_set <= 0:
        raise PorterError(f"rotation: a set of {bytes_per_set} B is empty")
    if l2_bytes <= 0:
        return 1
    want = math.ceil(factor * l2_bytes / bytes_per_set)
    fit = max(1, budget_bytes // bytes_per_set)
    return int(max(1, min(want, fit, max_sets)))


def rotation_note(sets: int, bytes_per_set: int, l2_bytes: int, factor: int | None = None) -> str:
    factor = ROTATE_L2_FACTOR if factor is None else factor
    total = sets * bytes_per_set
    if total >= factor * l2_bytes:
        return f"{sets} input set(s), {total / 2**20:.0f} MiB >= {factor} x L2 ({l2_bytes / 2**20:.0f} MiB)"
    return (f"{sets} input set(s), {total / 2**20:.0f} MiB < {factor} x L2 ({l2_bytes / 2**20:.0f} MiB): "
            "timing may see a warm L2")


# ---- statistics ------------------------------------------------------------------------------

def summarize(samples_ms) -> dict:
    """Median, mean, min, max, p10, p90 and spread = (p90 - p10) / median of the samples."""
    s = np.asarray(list(samples_ms), dtype=np.float64)
    if s.size == 0:
        raise PorterError("timing: no samples to summarize")
    if not np.all(np.isfinite(s)) or np.any(s < 0):
        raise PorterError(f"timing: samples must be finite and non-negative, got {s.tolist()[:5]} ...")
    med = float(np.median(s))
    p10, p90 = (float(x) for x in np.percentile(s, [10, 90]))
    return {"n": int(s.size), "median_ms": med, "mean_ms": float(s.mean()), "min_ms": float(s.min()),
            "max_ms": float(s.max()), "p10_ms": p10, "p90_ms": p90,
            "spread": (p90 - p10) / med if med > 0 else 0.0}


def distinguishable(a: dict, b: dict) -> bool:
    """Whether two summaries' medians differ by more than either's p10..p90 band
    (METHOD: a difference smaller than the spread is noise)."""
    gap = abs(a["median_ms"] - b["median_ms"])
    return gap > max(a["p90_ms"] - a["p10_ms"], b["p90_ms"] - b["p10_ms"])


def rate(amount: float, stats: dict) -> float:
    """``amount`` per second at the median time (FLOP -> FLOP/s, bytes -> B/s)."""
    return amount / (stats["median_ms"] * 1e-3) if stats["median_ms"] > 0 else float("inf")


# ---- device timing -----------------------------------------------------------------------

class DriverEvents:
    """CUDA events through cuda.bindings.driver on the legacy default stream. Waits poll
    with a deadline (``timeout_s``), so a kernel that hangs during a benchmark becomes a
    KernelHang naming it instead of a stuck process."""

    def __init__(self, timeout_s: float = BENCH_WAIT_S, what: str = "benchmark launches"):
        from porter.runtime import driver

        driver.context()
        self._driver, self._drv, self._check = driver, driver.bindings(), driver.check
        self.timeout_s, self.what = timeout_s, what

    def event(self):
        return self._check(self._driver.call(self._drv.cuEventCreate, self._drv.CUevent_flags.CU_EVENT_DEFAULT,
                                             what="cuEventCreate"), "cuEventCreate")

    def record(self, ev) -> None:
        self._check(self._driver.call(self._drv.cuEventRecord, ev, self._drv.CUstream(0), what="cuEventRecord"),
                    "cuEventRecord")

    def elapsed_ms(self, start, end) -> float:
        self._driver.wait_event(end, f"{self.what} (event)", self.timeout_s)
        return float(self._check(self._driver.call(self._drv.cuEventElapsedTime, start, end,
                                                   what="cuEventElapsedTime"), "cuEventElapsedTime"))

    def synchronize(self) -> None:
        self._driver.wait(self.what, self.timeout_s)

    def destroy(self, ev) -> None:
        self._drv.cuEventDestroy(ev)


class TorchEvents:
    """torch.cuda.Event on torch's current stream (for the torch baselines)."""

    def __init__(self):
        import torch

        self._torch = torch

    def event(self):
        return self._torch.cuda.Event(enable_timing=True)

    def record(self, ev) -> None:
        ev.record()

    def elapsed_ms(self, start, end) -> float:
        end.synchronize()
        return float(start.elapsed_time(end))

    def synchronize(self) -> None:
        self._torch.cuda.synchronize()

    def destroy(self, ev) -> None:
        pass


def time_launches(enqueue, events, warmup: int = WARMUP_LAUNCHES, reps: int = TIMED_LAUNCHES,
                  sets: int = 1, before=None, warmup_ms: float | None = None,
                  max_warmup: int = MAX_WARMUP_LAUNCHES) -> dict:
    """Median-of-``reps`` device time of ``enqueue(i)`` (which only enqueues work for input
    set ``i % sets``), each launch between its own pair of events, after a warm-up of at
    least ``warmup`` launches and ``warmup_ms`` of device time (clocks ramp and caches
    settle by time, not by count; at most ``max_warmup`` launches). ``before(i)`` enqueues
    untimed set-up work (a counter reset, an L2 flush) ahead of each start event.

    Launches are queued back to back and read after one final wait, so host gaps do not
    land inside a timed region except when the queue runs dry. The summary carries the
    samples and how long the warm-up was.
    """
    if warmup_ms is None:
        import os

        warmup_ms = float(os.environ.get(WARMUP_ENV) or WARMUP_MS)
    if reps < 1 or warmup < 0 or sets < 1:
        raise PorterError(f"timing: need reps >= 1, warmup >= 0, sets >= 1; got {reps}, {warmup}, {sets}")

    def launch(i):
        if before is not None:
            before(i % sets)
        enqueue(i % sets)

    for i in range(warmup):
        launch(i)
    events.synchronize()                      # warm-up errors surface here, not in the timing
    done, spent, batch = warmup, 0.0, max(1, warmup)
    while spent < warmup_ms and done < max_warmup:
        start, end = events.event(), events.event()
        events.record(start)
        for i in range(done, done + batch):
            launch(i)
        events.record(end)
        spent += events.elapsed_ms(start, end)
        events.destroy(start)
        events.destroy(end)
        done += batch
        batch = max(1, min(2 * batch, max_warmup - done))
    pairs = [(events.event(), events.event()) for _ in range(reps)]
    for i, (start, end) in enumerate(pairs):
        if before is not None:
            before(i % sets)
        events.record(start)
        enqueue(i % sets)
        events.record(end)
    events.synchronize()
    samples = [events.elapsed_ms(s, e) for s, e in pairs]
    for s, e in pairs:
        events.destroy(s)
        events.destroy(e)
    stats = summarize(samples)
    stats.update(samples_ms=samples, warmup_launches=done, warmup_ms=spent)
    return stats


def merge_timings(first: dict, second: dict) -> dict:
    """One summary of two timing rounds of the same kernel taken before and after its
    baseline (porter, baseline, porter: drift in clocks or temperature shows as the
    difference of the two rounds' medians, ``drift``)."""
    stats = summarize(list(first["samples_ms"]) + list(second["samples_ms"]))
    m1, m2 = first["median_ms"], second["median_ms"]
    stats.update(samples_ms=list(first["samples_ms"]) + list(second["samples_ms"]),
                 rounds_median_ms=[m1, m2], drift=abs(m1 - m2) / min(m1, m2) if min(m1, m2) > 0 else 0.0,
                 warmup_launches=first.get("warmup_launches", 0) + second.get("warmup_launches", 0))
    return stats


# ---- entry points (pipeline stages, porter validate / bench) --------------------------------

def _as_spec(spec):
    from porter.kernels.base import KernelSpec

    if isinstance(spec, KernelSpec):
        return spec
    from porter.pipeline.work import spec_from_dict

    return spec_from_dict(spec)


def validate(spec, arch, out_dir=None, shapes=None, seeds: int = 2, device=None) -> dict:
    """Run ``spec`` at several shapes with fresh inputs on ``device`` (default: the CUDA
    device 0, which must have the descriptor's compute capability); judge every output.

    Returns {name, variant, spec, device, checks: [...], passed, level}: device-validated
    on a GPU, emulated on porter's simulator (a device of kind "emu").
    """
    from porter.levels import Level
    from porter.runtime.device import get_device
    from porter.validation import device_runs

    spec = _as_spec(spec)
    dev = device if device is not None else get_device()
    if dev.kind == "cuda":
        where = device_runs.require_device(arch)
        reached = Level.DEVICE_VALIDATED
    else:
        where = {"kind": dev.kind, "name": dev.name}
        reached = Level.EMULATED
    checks = device_runs.validate_family(spec, arch, shapes, seeds, device=dev)
    passed = bool(checks) and all(c["passed"] for c in checks)
    if passed:
        level = reached
    else:
        # A failed device check establishes nothing new: report what the build itself
        # reached (the prepared manifest's record, or a cache hit here), never a level
        # this run did not check.
        from porter.runtime.cubins import level_evidence

        label = level_evidence(spec, arch)["level"]
        level = min(next(lv for lv in Level if lv.label == label), Level.SASS_CHECKED)
    result = {"name": spec.name, "variant": spec.variant, "spec": spec.to_dict(), "device": where,
              "checks": checks, "passed": passed, "level": level.label}
    _write(out_dir, "device_validation.json", result)
    return result


def bench(spec, arch, out_dir=None, shapes=None, baseline: bool = True) -> dict:
    """Time ``spec`` on device 0 beside its baseline in the same process; see device_runs."""
    from porter.levels import Level
    from porter.validation import device_runs

    spec = _as_spec(spec)
    device = device_runs.require_device(arch)
    rows = device_runs.bench_family(spec, arch, shapes, baseline)
    result = {"name": spec.name, "variant": spec.variant, "device": device, "rows": rows,
              "level": Level.BENCHMARKED.label}
    _write(out_dir, "bench.json", result)
    return result


def _write(out_dir, name: str, data: dict) -> None:
    if out_dir is None:
        return
    import json
    from pathlib import Path

    from porter.fsutil import atomic_write
    from porter.pipeline.work import jsonable

    path = Path(out_dir)
    path.mkdir(parents=True, exist_ok=True)
    atomic_write(path / name, json.dumps(jsonable(data), indent=1))
