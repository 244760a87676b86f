"""Benchmark timing on a GPU: input rotation past the L2, device-event timers, warm-up by
time, statistics (median and spread of many launches).

* **rotation**: inputs rotated over enough sets that they do not fit in the descriptor's
  L2 (else the L2 flushed before each timed launch);
* **timing**: device events around each launch (cuda.bindings events, or
  ``torch.cuda.Event`` for torch baselines), warm-up by time first, median of many,
  porter timed before and after its baseline;
* **statistics**: median and spread (p10..p90 over the median) of the samples.
"""
from __future__ import annotations

import math

import numpy as np

from porter.errors import PorterError

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
