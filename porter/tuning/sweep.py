"""One sweep: every kernel asked for, on one product, over its shape buckets.

1. The space: every combination of the kernel's knob values (``porter.kernels.knobs``).
   ``screen`` tasks prune the illegal ones (each reason counted) and predict the rest by
   L0 at each bucket's shape: milliseconds a combination, no compile.
2. The best ``budget`` of them (the best of each bucket in turn, the default always
   among them) become candidates: one ``evaluate`` task each (render, compile, SASS and
   ptxas resources: a spilling configuration is discarded; predict).
3. The middle stage ranks each bucket's compiled candidates (``ranking``: L0 only until
   L1 lands), and the first ``finalists`` of each bucket, plus the default, are emulated
   at the family's emulation shapes. Only an emulated candidate is eligible; the chosen
   one is the fastest eligible by the ranker.

Every task result is cached by content key, so a rerun hands out only what is missing.
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass, field

import porter.pipeline.keys as keys
from porter.tuning import digests
from porter.tuning.entries import norm_knobs, product_of  # noqa: F401 (product_of: for the command)
from porter.tuning.engine import Task
from porter.tuning.ranking import knob_order, make_ranker

SCREEN_CHUNK = 300          # combinations per screen task
TIMEOUTS = {"screen": 600.0, "evaluate": 600.0, "emulate": 1200.0}


@dataclass
class SweepOptions:
    budget: int = 40
    finalists: int = 2
    shapes: tuple = ()
    ranker: str = "L0"
    timeout_s: float | None = None     # per-task timeout override (all kinds)
    retries: int = 1
    fixed: dict = field(default_factory=dict)   # --set: knobs pinned to one value (a smaller space)


@dataclass
class KernelSweep:
    kernel: str
    product: str
    shapes: dict                       # bucket -> representative shape
    default_knobs: dict
    space_size: int = 0
    pruned: dict = field(default_factory=dict)        # reason -> count
    legal: int = 0
    candidates: list = field(default_factory=list)    # evaluate results (+ "emulation" for finalists)
    buckets: dict = field(default_factory=dict)       # bucket -> chosen / default / finalists
    failures: list = field(default_factory=list)      # tasks that failed twice: kind, label, error
    tasks: dict = field(default_factory=lambda: {"run": 0, "cached": 0, "retried": 0})
    seconds: float = 0.0
    ranker_note: str = ""
    source_hash: str = ""


class Sweep:
    def __init__(self, executor, cache, progress=None, options: SweepOptions | None = None):
        self.executor, self.cache = executor, cache
        self.options = options or SweepOptions()
        self.progress = progress
        self.ranker = make_ranker(self.options.ranker)

    # -- running tasks through the cache ----------------------------------------------------

    def _run(self, sweep: KernelSweep, kind: str, tasks: list[Task]) -> dict:
        """key -> result for ``tasks``: cache hits first, the rest on the executor; a task
        that failed after its retry is recorded in ``sweep.failures`` and left out."""
        results, todo = {}, []
        for t in tasks:
            hit = self.cache.get(t.key)
            if hit is not None:
                results[t.key] = retuple(hit)   # JSON turned tuple knob values into lists
                sweep.tasks["cached"] += 1
            else:
                todo.append(t)
        if self.progress:
            self.progress.phase(sweep, kind, len(tasks), len(tasks) - len(todo))

        def done(out):
            sweep.tasks["run"] += 1
            # per kind: tasks run and their seconds on the workers (the per-candidate cost a
            # projection to N nodes is made from)
            cost = sweep.tasks.setdefault("by_kind", {}).setdefault(kind, {"tasks": 0, "seconds": 0.0})
            cost["tasks"] += 1
            cost["seconds"] = round(cost["seconds"] + out.seconds, 3)
            sweep.tasks["retried"] += max(0, out.attempts - 1)
            if out.ok:
                self.cache.put(out.key, out.result)
                results[out.key] = out.result
            else:
                sweep.failures.append({"kind": kind, "label": out.label, "status": out.status,
                                       "error": out.error, "attempts": out.attempts})
            if self.progress:
                self.progress.task_done(sweep, kind, out)

        if todo:
            self.executor.run(todo, on_done=done, retries=self.options.retries)
        return results

    def _task(self, kind: str, key_parts: list, payload: dict, label: str) -> Task:
        key = keys.digest([kind, digests.tuner_digest()] + key_parts)
        timeout = self.options.timeout_s or TIMEOUTS[kind]
        return Task(key=key, fn=f"porter.tuning.tasks:{kind}", payload=payload, label=label, timeout_s=timeout)

    # -- one kernel -------------------------------------------------------------------------

    def kernel(self, arch, kernel: str, product: str) -> KernelSweep:
        from porter.kernels import family_module
        from porter.kernels.knobs import default_knobs, knob_space, spec_with_knobs
        from porter.tuning.buckets import sweep_shapes
        from porter.tuning.entries import untuned

        start = time.perf_counter()
        with untuned():   # the space and the default are the hand-chosen configuration's
            space = knob_space(arch, kernel)
            default = default_knobs(arch, kernel)
            for name, value in self.options.fixed.items():
                if name not in space:
                    from porter.errors import PorterError

                    raise PorterError(f"--set {name}={value}: {kernel} has no knob {name!r} "
                                      f"(its knobs: {', '.join(space) or 'none'})")
                space[name] = (value,)
            spec = spec_with_knobs(arch, kernel, {})
        shapes = sweep_shapes(spec, self.options.shapes or None)
        sweep = KernelSweep(kernel, product, shapes, default, ranker_note=self.ranker.note,
                            source_hash=digests.source_hash(arch, spec, family_module(spec.family).render))
        common = [arch.digest, product, kernel, sweep.source_hash, shapes, digests.timing_digest(),
                  keys.toolchain_fingerprint()]
        base = {"arch": arch, "kernel": kernel, "product": product, "shapes": shapes}

        # 1. screen the whole space by L0
        names = list(space)
        combos = [dict(zip(names, values)) for values in itertools.product(*(space[n] for n in names))]
        if default not in combos:
            combos.insert(0, dict(default))
        sweep.space_size = len(combos)
        chunks = [combos[i:i + SCREEN_CHUNK] for i in range(0, len(combos), SCREEN_CHUNK)]
        screen_tasks = [self._task("screen", common + [chunk], base | {"combos": chunk},
                                   f"{kernel} screen {i + 1}/{len(chunks)}") for i, chunk in enumerate(chunks)]
        screened = self._run(sweep, "screen", screen_tasks)
        legal = []
        for t in screen_tasks:
            for row in screened.get(t.key, {}).get("rows", []):
                if "pruned" in row:
                    sweep.pruned[row["pruned"]] = sweep.pruned.get(row["pruned"], 0) + 1
                else:
                    legal.append(row)
        sweep.legal = len(legal)

        # 2. the best `budget` by L0, the best of each bucket in turn, the default first
        picked = [dict(default)]
        ranked = {b: self.ranker.rank(b, legal, default) for b in shapes}
        cursors = {b: 0 for b in shapes}
        while len(picked) < max(1, self.options.budget) and any(cursors[b] < len(ranked[b]) for b in shapes):
            for b in shapes:
                while cursors[b] < len(ranked[b]) and ranked[b][cursors[b]]["knobs"] in picked:
                    cursors[b] += 1
                if cursors[b] < len(ranked[b]) and len(picked) < self.options.budget:
                    picked.append(ranked[b][cursors[b]]["knobs"])
                    cursors[b] += 1
        eval_tasks = [self._task("evaluate", common + [k], base | {"knobs": k}, f"{kernel} {_short(k, default)}")
                      for k in picked]
        evaluated = self._run(sweep, "evaluate", eval_tasks)
        cands = [evaluated[t.key] for t in eval_tasks if t.key in evaluated]
        sweep.candidates = cands
        built = [c for c in cands if c["status"] == "built"]

        # 3. the middle stage, then emulate the finalists of every bucket (and the default)
        finalists: list[dict] = []
        order = {}
        for b in shapes:
            order[b] = self.ranker.rank(b, built, default)
            for c in order[b][:self.options.finalists]:
                if c["knobs"] not in [f["knobs"] for f in finalists]:
                    finalists.append(c)
        dflt = next((c for c in built if c["knobs"] == default), None)
        if dflt is not None and default not in [f["knobs"] for f in finalists]:
            finalists.append(dflt)
        emu_common = [arch.digest, kernel, sweep.source_hash, digests.emulation_digest(), keys.toolchain_fingerprint()]
        emu_tasks = {knob_order(c["knobs"]): self._task("emulate", emu_common + [c["knobs"]],
                                                        {"arch": arch, "kernel": kernel, "knobs": c["knobs"],
                                                         "source": c["source"]},
                                                        f"{kernel} emulate {_short(c['knobs'], default)}")
                     for c in finalists}
        emulated = self._run(sweep, "emulate", list(emu_tasks.values()))
        for c in finalists:
            t = emu_tasks[knob_order(c["knobs"])]
            c["emulation"] = emulated.get(t.key) or {"status": "failed", "passed": False,
                                                     "reason": "the emulation task failed (see failures)"}

        for b, shape in shapes.items():
            eligible = [c for c in order[b] if c.get("emulation", {}).get("passed")]
            chosen = eligible[0] if eligible else None
            sweep.buckets[b] = {
                "shape": shape,
                "chosen": _brief(chosen, b) if chosen else None,
                "default": _brief(dflt, b) if dflt else None,
                "finalists": [_brief(c, b) for c in order[b][:self.options.finalists]],
                "why_none": "" if chosen else "no finalist passed emulation at the emulation shapes",
            }
        sweep.seconds = time.perf_counter() - start
        return sweep


def retuple(result: dict) -> dict:
    if isinstance(result.get("knobs"), dict):
        result["knobs"] = norm_knobs(result["knobs"])
    for row in result.get("rows", ()):
        row["knobs"] = norm_knobs(row["knobs"])
    return result


def _brief(c: dict, bucket: str) -> dict:
    p = c["predictions"][bucket]
    emu = c.get("emulation") or {}
    return {"knobs": c["knobs"], "time_us": p["time_us"], "tflops": p["tflops"], "gb_s": p["gb_s"],
            "low": p["low"], "high": p["high"], "bound": p["bound"], "level_model": p.get("level", "L0"),
            "level": emu.get("level") or c.get("level"), "emulation": emu.get("status", "not run"),
            "registers": c.get("resources", {}).get("registers")}


def _short(knobs: dict, default: dict) -> str:
    """The knobs that differ from the default, for progress lines: 'stages=4 tile_n=128'."""
    diff = {k: v for k, v in knobs.items() if default.get(k) != v}
    return " ".join(f"{k}={v}" for k, v in sorted(diff.items())) or "default"
