"""What every stage function gets: the archs, the runbook, the store, the pool."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from porter.pipeline.store import StageStore

# Stage statuses. "not-run" is a stage that had nothing it could honestly do here
# (no device); it never counts as passed in the report, nor as a failure.
PASSED, FAILED, SKIPPED, NOT_RUN = "passed", "failed", "skipped", "not-run"


@dataclass
class StageResult:
    id: str
    kind: str
    title: str
    status: str
    summary: str
    data: dict = field(default_factory=dict)
    seconds: float = 0.0
    units_run: int = 0
    units_cached: int = 0

    def to_dict(self) -> dict:
        return {"id": self.id, "kind": self.kind, "title": self.title, "status": self.status,
                "summary": self.summary, "seconds": round(self.seconds, 3),
                "units_run": self.units_run, "units_cached": self.units_cached, "data": self.data}


_CORRUPT = "_cache_corrupt"   # carried back beside a pool unit's result, never stored


def _corrupt_here() -> int:
    from porter.compile import cache_entry

    return cache_entry.stats.corrupt


def _counting(fn, payload):
    """A unit in a pool worker, with the cache entries it found corrupt: the worker's own
    counter is not the parent's, so the count travels back with the result."""
    before = _corrupt_here()
    result = fn(payload)
    found = _corrupt_here() - before
    if found and isinstance(result, dict):
        result = {**result, _CORRUPT: found}
    return result


class NullDisplay:
    """Progress sink used when nobody is watching (tests, --quiet)."""

    def stage_started(self, stage, total: int) -> None: ...
    def unit_done(self, stage, name: str, cached: bool) -> None: ...
    def stage_done(self, result: StageResult) -> None: ...


@dataclass
class Context:
    arch: object
    base: object | None
    runbook: object
    out_dir: Path
    store: StageStore
    jobs: int = 1
    device: str = "auto"
    emulate: str = "on"
    kernel_pattern: str | None = None
    display: object = field(default_factory=NullDisplay)
    results: dict = field(default_factory=dict)
    nvrtc_calls: int = 0
    units_run: int = 0
    units_cached: int = 0
    worker_corrupt: int = 0   # cache entries pool workers found corrupt (porter.compile.cache_entry)
    _corrupt0: int = field(default_factory=lambda: _corrupt_here())
    _pool: object = None
    _variants: dict = field(default_factory=dict)
    _selected: set | None = None
    stage_keys: dict = field(default_factory=dict)   # kernels stage id -> its input key
    executor: object = None          # --executor ray: a porter.tuning.engine executor for EXECUTOR_STAGES
    knobs: dict = field(default_factory=dict)        # --set (porter.kernels.knobs), for the target's kernels

    # -- kernels ------------------------------------------------------------------

    def wants(self, spec) -> bool:
        """--kernel selects as ``porter kernel show``, ``validate`` and ``diff`` do
        (porter.commands.kernel.match_kernels): an exact kernel name selects that kernel
        only (``gemm.fp8`` is not also ``gemm.fp8.pair``), a glob matches names, variants
        and families, else a variant or family name selects all of its kernels."""
        if not self.kernel_pattern:
            return True
        return spec.name in self.selected_names()

    def selected_names(self) -> set[str]:
        """Kernel names --kernel selects, decided once over the target's complete listing
        (every kernel name the registry knows, the base's included), so the exact-name
        rule applies to the base's kernels too."""
        if self._selected is None:
            from porter.commands.kernel import match_kernels
            from porter.planning.plan import kernel_specs

            every = kernel_specs(self.arch, complete=True)[0]
            if self.base is not None:   # a base kernel the completion could not name still counts
                known = {v.name for v in every}
                every += [v for v in kernel_specs(self.base)[0] if v.name not in known]
            self._selected = {v.name for v in match_kernels(every, self.kernel_pattern)}
        return self._selected

    def variants(self, family: str, arch, complete: bool = False) -> list:
        """The family's variants for ``arch`` that match --kernel (memoized per run). With
        ``complete``, also an Unsupported entry for each kernel the family builds only on
        other installed archs (porter.planning.plan.offered_elsewhere, as ``porter kernel list``
        lists them), so no variant the registry knows drops out of the report."""
        from porter.kernels import family_module
        from porter.planning.plan import merge_listing, offered_elsewhere

        key = (family, arch.digest, complete)
        if key not in self._variants:
            own = list(family_module(family).variants(arch))
            if complete:
                own = merge_listing(own, offered_elsewhere(arch, own, family))
            own = [v for v in own if self.wants(v)]
            if self.knobs and arch.digest == self.arch.digest:   # the base's kernels keep their defaults
                from porter.kernels.knobs import apply_knobs

                own = apply_knobs(arch, own, self.knobs, strict=False)[0]
            self._variants[key] = own
        return self._variants[key]

    def stage_families(self, stage) -> list[str]:
        from porter import kernels

        if stage.family != "*":
            return [stage.family] if stage.family in kernels.FAMILIES else []
        named = {s.family for s in self.runbook.stages.values() if s.kind == "kernels" and s.family != "*"}
        return sorted(f for f in kernels.FAMILIES if f not in named)

    # -- units --------------------------------------------------------------------

    def run_units(self, stage, units: list[tuple[str, str, object, dict]]) -> dict[str, dict]:
        """Run ``(store name, key, function, payload)`` units: store hits are reused (their
        artifacts must still be on disk), the rest run in the pool; each result is stored
        as soon as it arrives, so an interrupted stage resumes where it stopped."""
        done: dict[str, dict] = {}
        todo = []
        self.display.stage_started(stage, len(units))
        for name, key, fn, payload in units:
            hit = self.store.get(name, key)
            if hit is not None and all(Path(p).exists() for p in hit.get("artifacts", {}).values()):
                done[name] = hit
                self.units_cached += 1
                self.display.unit_done(stage, name, True)
            else:
                todo.append((name, key, fn, payload))
        if not todo:
            return done
        from porter.pipeline.work import EXECUTOR_STAGES, run_on_executor

        if self.executor is not None and stage.kind in EXECUTOR_STAGES:
            keyed = {name: key for name, key, _fn, _payload in todo}
            for name, result in run_on_executor(self.executor, todo).items():
                done[name] = self._finish(stage, name, keyed[name], result)
            return done
        if self.jobs <= 1 or len(todo) == 1:
            for name, key, fn, payload in todo:
                done[name] = self._finish(stage, name, key, fn(payload))
            return done
        from concurrent.futures import as_completed
        from concurrent.futures.process import BrokenProcessPool

        try:
            pool = self.pool()
            futures = {pool.submit(_counting, fn, payload): (name, key) for name, key, fn, payload in todo}
            for fut in as_completed(futures):
                name, key = futures[fut]
                done[name] = self._finish(stage, name, key, fut.result())
        except BrokenProcessPool:
            # Workers could not start (e.g. a __main__ that spawn cannot re-import) or died:
            # finish here, one unit at a time, rather than lose the run.
            self._pool, self.jobs = None, 1
            for name, key, fn, payload in todo:
                if name not in done:
                    done[name] = self._finish(stage, name, key, fn(payload))
        return done

    def cached_stage(self, stage, key: str, compute) -> "StageResult":
        """The whole stage's result by the hash of all its inputs: on a hit (and with its
        artifacts still on disk) nothing is rendered, imported or compiled."""
        name = f"stage/{stage.id}"
        if self.knobs:   # a knobbed run never takes a default run's stage result (nor another's)
            from porter.pipeline import keys

            key = keys.digest([key, "knobs", sorted((k, repr(v)) for k, v in self.knobs.items())])
        hit = self.store.get(name, key)
        if hit is not None and all(Path(p).exists() for p in hit.get("artifacts", [])):
            self.units_cached += 1
            result = StageResult(**{k: v for k, v in hit["result"].items() if k != "artifacts"})
            result.units_run, result.units_cached = 0, 1
            return result
        result = compute()
        artifacts = [p for r in result.data.get("kernels", []) for p in (r.get("artifacts") or {}).values()]
        self.store.put(name, key, {"result": result.to_dict(), "artifacts": artifacts})
        return result

    @property
    def corrupt_entries(self) -> int:
        """Cache entries found corrupt, discarded and rebuilt in this run: the stage store's,
        this process's compile cache reads, and those the pool workers reported."""
        return self.store.corrupt + (_corrupt_here() - self._corrupt0) + self.worker_corrupt

    def _finish(self, stage, name: str, key: str, result: dict) -> dict:
        if isinstance(result, dict) and _CORRUPT in result:
            result = dict(result)
            self.worker_corrupt += int(result.pop(_CORRUPT))
        self.nvrtc_calls += int(result.get("nvrtc_calls", 0))
        self.units_run += 1
        self.store.put(name, key, result)
        self.display.unit_done(stage, name, False)
        return result

    def pool(self):
        if self._pool is None:
            import multiprocessing
            from concurrent.futures import ProcessPoolExecutor

            # spawn, not fork: the parent may hold threads (the progress display), and a
            # forked child of a threaded parent can deadlock on a lock it inherited held.
            self._pool = ProcessPoolExecutor(max_workers=self.jobs,
                                             mp_context=multiprocessing.get_context("spawn"),
                                             initializer=_worker_init, initargs=(os.getpid(),))
        return self._pool

    def close(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None


def _ignore_sigint() -> None:
    """Pool workers leave Ctrl-C to the parent: the terminal sends SIGINT to the whole
    process group, and a worker that took it would print its own traceback and could
    kill an nvdisasm mid-run (its children inherit the ignored signal). The parent stops
    handing out units and waits for the running ones, whose results are whole."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_IGN)


# How often an idle worker checks that the porter process that started it is still there.
ORPHAN_POLL_SECONDS = 0.5


def _worker_init(parent_pid: int) -> None:
    """Set up one pool worker: leave Ctrl-C and SIGTERM to the parent (a service manager
    or ``kill -TERM -PGID`` signals the whole group; the parent then stops handing out
    units and shuts the pool down once the running ones are whole, so no worker dies
    mid-write), and exit as soon as the parent is gone. A parent killed with SIGKILL (or
    crashed) never shuts its pool down, and its idle workers (about 120 MB each) would
    otherwise wait on the call queue for ever."""
    import signal

    _ignore_sigint()
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    _exit_with_parent(parent_pid)


def _exit_with_parent(parent_pid: int, poll: float | None = None) -> None:
    """A daemon thread that ends this process when its parent process is no longer
    ``parent_pid`` (the orphan is re-parented to init or a subreaper). Polling, not
    prctl(PR_SET_PDEATHSIG): that one fires when the parent *thread* that spawned the
    worker exits, which is not the parent process going away, and it exists on Linux only."""
    import threading

    interval = ORPHAN_POLL_SECONDS if poll is None else poll

    def watch() -> None:
        while True:
            if os.getppid() != parent_pid:
                os._exit(1)   # no cleanup to run: every artifact is written atomically
            time.sleep(interval)

    if os.getppid() != parent_pid:   # the parent died before this worker got this far
        os._exit(1)
    threading.Thread(target=watch, name="porter-orphan-watch", daemon=True).start()


def default_jobs() -> int:
    return max(1, os.cpu_count() or 1)


def cap_jobs(value: int, flag: str = "--jobs") -> int:
    """At most one worker per CPU: more only compete for the same cores (and each worker is
    a process of its own); said once on stderr when a request is cut."""
    import sys

    cpus = default_jobs()
    if value > cpus:
        print(f"porter: warning: {flag} {value}: this machine has {cpus} CPUs; using {cpus} workers",
              file=sys.stderr, flush=True)
        return cpus
    return value


def timed(fn):
    """Decorator for stage functions: fill in the seconds a stage took."""
    def wrapper(ctx, stage):
        start = time.perf_counter()
        result = fn(ctx, stage)
        result.seconds = time.perf_counter() - start
        return result
    wrapper.__name__ = fn.__name__
    wrapper.__doc__ = fn.__doc__
    return wrapper
