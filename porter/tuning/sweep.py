"""One sweep: every kernel asked for, on its products, over its shape buckets.

Products that generate the same code (``build_groups``: the same SM count; a product
differs from its descriptor in figures, SM count, memory and peaks, and only the SM
count reaches a kernel's spec) are swept together: one legality check, one compile, one
timed simulation and one emulation per configuration serve them all, and each product
gets its own predictions and its own choice.

1. The space (``space.combinations``): every combination of the kernel's knob values,
   less those a knob rule refuses whatever the other knobs are (collapsed into one).
   ``screen`` tasks prune the illegal ones (each reason counted) and predict the rest by
   L0 at each bucket's shape and product: the central time only, no compile.
2. The best of each bucket and product by L0 in turn (the default first) become
   candidates, up to the budget (default ``PER_BUCKET`` per bucket); two that render the
   same source are one. One ``evaluate`` task each: render, compile, SASS and ptxas
   resources (a spilling configuration is discarded), predict with the range.
3. The middle stage (``ranking``): the ``l1_top`` best built candidates of each bucket
   and product by L0, and the default, are timed by L1 (one ``l1`` task each: the
   candidate's PTX in porter's timed simulator) and rank by it.
4. The first ``finalists`` of each bucket and product by that ranking, plus the default,
   are emulated at the family's emulation shapes. Only an emulated candidate is eligible;
   the chosen one is the fastest eligible by the ranking.

Every task result is cached by content key, so a rerun hands out only what is missing.
"""

from __future__ import annotations

import hashlib
import time
from dataclasses import dataclass, field

import porter.pipeline.keys as keys
from porter.tuning import digests
from porter.tuning.engine import Task
from porter.tuning.entries import norm_knobs, product_of  # noqa: F401 (product_of: for the command)
from porter.tuning.ranking import knob_order, make_ranker

SCREEN_CHUNK = 1000         # at most, combinations per screen task (legality ~0.1 ms, a legal one's L0 ~1 ms per bucket)
SCREEN_SPREAD = 4           # at least this many screen tasks per executor slot, where there are combinations enough
# the default budget: candidates compiled per bucket (all products together): the L1_TOP that
# L1 times, and one more in case a top one spills or fails its SASS checks
PER_BUCKET = 4
L1_TOP = 3                  # candidates timed by L1 per bucket and product (and the default)
TIMEOUTS = {"screen": 900.0, "evaluate": 600.0, "l1": 900.0, "emulate": 1200.0}


@dataclass
class SweepOptions:
    budget: int | None = None          # candidates compiled per kernel; None: PER_BUCKET x buckets
    finalists: int = 2
    shapes: tuple = ()
    ranker: str = "L1"
    l1_top: int = L1_TOP
    timeout_s: float | None = None     # per-task timeout override (all kinds)
    retries: int = 1
    fixed: dict = field(default_factory=dict)   # --set: knobs pinned to one value (a smaller space)


@dataclass
class KernelSweep:
    kernel: str
    product: str
    shapes: dict                       # bucket -> representative shape
    default_knobs: dict
    space_size: int = 0                # combinations screened (after the knob rules' collapse)
    raw_space: int = 0                 # the knob values' cartesian product
    collapsed: dict = field(default_factory=dict)     # knob rule -> combinations collapsed
    pruned: dict = field(default_factory=dict)        # reason -> count
    legal: int = 0
    candidates: list = field(default_factory=list)    # evaluate results (+ "l1", "emulation")
    buckets: dict = field(default_factory=dict)       # bucket -> chosen / default / finalists
    failures: list = field(default_factory=list)      # tasks that failed twice: kind, label, error
    tasks: dict = field(default_factory=lambda: {"run": 0, "cached": 0, "retried": 0})
    seconds: float = 0.0
    ranker_note: str = ""
    source_hash: str = ""
    shared_with: list = field(default_factory=list)   # the other products this sweep's tasks served
    l1_separates: dict = field(default_factory=dict)  # bucket -> does L1 order the timed candidates unlike L0


def build_groups(arch, products: list[str]) -> list[list[str]]:
    """``products`` in groups that generate the same code (the same SM count), in order."""
    groups: dict = {}
    for p in products:
        parch = arch.for_product(p) if p in arch.product_names and p != arch.product else arch
        groups.setdefault(parch.sm_count, []).append(p)
    return list(groups.values())


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
        """One kernel on one product (``kernels`` for several products at once)."""
        return self.kernels(arch, kernel, [product])[0]

    def kernels(self, arch, kernel: str, products: list[str]) -> list[KernelSweep]:
        """One kernel on each of ``products`` (of ``arch``), one KernelSweep per product;
        products that generate the same code share every task."""
        out = {}
        for group in build_groups(arch, products):
            rep = arch.for_product(group[0]) if group[0] in arch.product_names and group[0] != arch.product else arch
            for s in self._group(rep, kernel, group):
                out[s.product] = s
        return [out[p] for p in products]

    def _group(self, arch, kernel: str, products: list[str]) -> list[KernelSweep]:
        from porter.kernels import family_module
        from porter.kernels.knobs import _default_spec, default_knobs, knob_space, spec_with_knobs
        from porter.tuning.buckets import sweep_shapes
        from porter.tuning.entries import untuned
        from porter.tuning.space import combinations, normal

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
            base_spec = _default_spec(arch, kernel)
        default = normal(default)
        render = family_module(base_spec.family).render
        shapes = sweep_shapes(base_spec, self.options.shapes or None)
        sweeps = {p: KernelSweep(kernel, p, shapes, default, ranker_note=self.ranker.note,
                                 source_hash=digests.source_hash(arch, base_spec, render),
                                 shared_with=[q for q in products if q != p]) for p in products}
        first = sweeps[products[0]]          # tasks and failures are counted on the group's first product
        common = [arch.digest, products, kernel, first.source_hash, shapes, digests.timing_digest(),
                  keys.toolchain_fingerprint()]
        base = {"arch": arch, "kernel": kernel, "products": products, "shapes": shapes}

        # 1. screen the whole space by L0 (the central time)
        combos, collapsed, raw = combinations(space, default)
        # a small space whose L0 is slow (the megakernel's queue model: ~3 s a combination)
        # is spread over every slot, not left in one task on one worker
        size = max(1, min(SCREEN_CHUNK, -(-len(combos) // (SCREEN_SPREAD * max(1, getattr(self.executor, "slots", 1))))))
        chunks = [combos[i:i + size] for i in range(0, len(combos), size)]
        screen_tasks = [self._task("screen", common + [chunk], base | {"combos": chunk},
                                   f"{kernel} screen {i + 1}/{len(chunks)}") for i, chunk in enumerate(chunks)]
        screened = self._run(first, "screen", screen_tasks)
        legal, pruned = [], {}
        for t in screen_tasks:
            for row in screened.get(t.key, {}).get("rows", []):
                if "pruned" in row:
                    pruned[row["pruned"]] = pruned.get(row["pruned"], 0) + 1
                else:
                    legal.append(row)
        for s in sweeps.values():
            s.space_size, s.raw_space, s.collapsed, s.pruned, s.legal = len(combos), raw, collapsed, pruned, len(legal)

        # 2. the best by L0 of each bucket and product in turn, the default first, up to the
        # budget; two configurations that render the same source are one candidate
        budget = self.options.budget or PER_BUCKET * len(shapes)
        ranked = [self._l0.rank(b, _view(legal, p), default) for p in products for b in shapes]
        cursors = [0] * len(ranked)
        picked, sources = [], {}
        with untuned():
            def take(knobs) -> None:
                try:
                    src = render(spec_with_knobs(arch, kernel, knobs), arch)
                except Exception:     # the evaluate task records why (it renders it again)
                    src = knob_order(knobs)
                h = hashlib.sha256(src.encode("utf-8")).hexdigest()
                if h not in sources:
                    sources[h] = knobs
                    picked.append((h, knobs))

            take(dict(default))
            while len(picked) < max(1, budget) and any(cursors[i] < len(r) for i, r in enumerate(ranked)):
                for i, r in enumerate(ranked):
                    if cursors[i] < len(r) and len(picked) < budget:
                        take(r[cursors[i]]["knobs"])
                        cursors[i] += 1
        eval_tasks = [self._task("evaluate", common + [h], base | {"knobs": k}, f"{kernel} {_short(k, default)}")
                      for h, k in picked]
        evaluated = self._run(first, "evaluate", eval_tasks)
        cands = []
        for (h, _), t in zip(picked, eval_tasks):
            if t.key in evaluated:
                cands.append(dict(evaluated[t.key], source_hash=h[:16]))
        built = [c for c in cands if c["status"] == "built"]
        dflt = next((c for c in built if c["knobs"] == default), None)

        # 3. the middle stage: the top of each bucket and product by L0 (and the default) timed by L1
        if getattr(self.ranker, "timed", False):
            top = []
            for p in products:
                for b in shapes:
                    top += self._l0.rank(b, _view(built, p), default)[:self.options.l1_top]
            if dflt is not None:
                top.append(_view([dflt], products[0])[0])
            timed = {c["source_hash"]: c for c in built if c["source_hash"] in {t["source_hash"] for t in top}}
            l1_common = common + [digests.emulation_digest()]
            l1_tasks = {h: self._task("l1", l1_common + [h], base | {"knobs": c["knobs"]},
                                      f"{kernel} L1 {_short(c['knobs'], default)}") for h, c in timed.items()}
            got = self._run(first, "l1", list(l1_tasks.values()))
            for h, c in timed.items():
                r = got.get(l1_tasks[h].key) or {"status": "failed", "reason": "the L1 task failed (see failures)"}
                c["l1_status"] = r["status"] if r["status"] != "failed" else f"not timed: {r.get('reason', '')}"
                if r["status"] == "timed":
                    c["l1"] = r["l1"]

        # 4. emulate the finalists of every bucket and product (and the default)
        finalists: dict = {}
        order = {}
        for p in products:
            for b in shapes:
                order[p, b] = self.ranker.rank(b, _view(built, p), default)
                for c in order[p, b][:self.options.finalists]:
                    finalists.setdefault(c["source_hash"], c)
        if dflt is not None:
            finalists.setdefault(dflt["source_hash"], dflt)
        emu_common = [arch.digest, kernel, first.source_hash, digests.emulation_digest(), keys.toolchain_fingerprint()]
        emu_tasks = {h: self._task("emulate", emu_common + [h],
                                   {"arch": arch, "kernel": kernel, "knobs": c["knobs"], "source": c["source"]},
                                   f"{kernel} emulate {_short(c['knobs'], default)}")
                     for h, c in finalists.items()}
        emulated = self._run(first, "emulate", list(emu_tasks.values()))
        by_hash = {c["source_hash"]: c for c in built}
        for h, t in emu_tasks.items():
            by_hash[h]["emulation"] = emulated.get(t.key) or {"status": "failed", "passed": False,
                                                              "reason": "the emulation task failed (see failures)"}

        for p, s in sweeps.items():
            s.candidates = _view(cands, p)
            mine = {c["source_hash"]: c for c in s.candidates}
            d = mine.get(dflt["source_hash"]) if dflt else None
            for b, shape in shapes.items():
                ranked_here = [mine[c["source_hash"]] for c in order[p, b]]
                eligible = [c for c in ranked_here if c.get("emulation", {}).get("passed")]
                chosen = eligible[0] if eligible else None
                s.buckets[b] = {
                    "shape": shape,
                    "chosen": self._brief(chosen, b) if chosen else None,
                    "default": self._brief(d, b) if d else None,
                    "finalists": [self._brief(c, b) for c in ranked_here[:self.options.finalists]],
                    "why_none": "" if chosen else "no finalist passed emulation at the emulation shapes",
                }
                if getattr(self.ranker, "timed", False):
                    s.l1_separates[b] = _separation(ranked_here, b, default)
            s.seconds = time.perf_counter() - start
        return list(sweeps.values())

    @property
    def _l0(self):
        from porter.tuning.ranking import L0Ranker

        return L0Ranker()

    def _brief(self, c: dict, bucket: str) -> dict:
        p = c["predictions"][bucket]
        l1 = (c.get("l1") or {}).get(bucket)
        ranked = l1 if self.ranker.level == "L1" and l1 else p
        emu = c.get("emulation") or {}
        return {"knobs": c["knobs"], "time_us": ranked["time_us"], "tflops": ranked["tflops"], "gb_s": ranked["gb_s"],
                "bound": ranked["bound"], "level_model": ranked.get("level", "L0"),
                "l0": {k: p[k] for k in ("time_us", "tflops", "gb_s", "low", "high", "bound")},
                "l1": ({k: l1[k] for k in ("time_us", "tflops", "gb_s", "bound", "level")} if l1 else None),
                "low": p["low"], "high": p["high"],
                "level": emu.get("level") or c.get("level"), "emulation": emu.get("status", "not run"),
                "registers": c.get("resources", {}).get("registers"), "source_hash": c.get("source_hash")}


def _view(rows: list[dict], product: str) -> list[dict]:
    """Rows (screen rows or candidates) as one product sees them: ``predictions`` and
    ``l1`` by bucket for that product; a pruned or discarded candidate as it is."""
    out = []
    for r in rows:
        if product in r.get("predictions", {}):
            out.append({**r, "predictions": r["predictions"][product], "l1": (r.get("l1") or {}).get(product)})
        elif r.get("status", "built") != "built":
            out.append(r)
    return out


def _separation(ranked: list[dict], bucket: str, default: dict) -> dict:
    """How L1 orders the timed candidates against L0: the spread of their L1 times, and
    whether L1's first differs from L0's first (the honest answer to "does L1 separate
    the top candidates")."""
    timed = [c for c in ranked if (c.get("l1") or {}).get(bucket)]
    if len(timed) < 2:
        return {"timed": len(timed)}
    l1 = [c["l1"][bucket]["time_us"] for c in timed]
    l0_first = min(timed, key=lambda c: (c["predictions"][bucket]["time_us"], c["knobs"] != default,
                                         knob_order(c["knobs"])))
    return {"timed": len(timed), "l1_spread_pct": round(100.0 * (max(l1) / min(l1) - 1.0), 2),
            "l1_first": _short(timed[0]["knobs"], default), "l0_first": _short(l0_first["knobs"], default),
            "reordered": timed[0]["knobs"] != l0_first["knobs"]}


def retuple(result: dict) -> dict:
    if isinstance(result.get("knobs"), dict):
        result["knobs"] = norm_knobs(result["knobs"])
    for row in result.get("rows", ()):
        row["knobs"] = norm_knobs(row["knobs"])
    return result


def _short(knobs: dict, default: dict) -> str:
    """The knobs that differ from the default, for progress lines: 'stages=4 tile_n=128'."""
    diff = {k: v for k, v in knobs.items() if default.get(k) != v}
    return " ".join(f"{k}={v}" for k, v in sorted(diff.items())) or "default"
