"""Executors: run many independent tasks (pure functions of a JSON-able payload) and
hand back one outcome per task, whatever happens to the process that ran it.

``RayExecutor`` is the engine for sweeps: a local Ray runtime by default (started here,
stopped here), or a running cluster joined by address. ``LocalExecutor`` runs the same
tasks in this process, one at a time (no isolation: for debugging and for machines
without Ray). Both give the same results, because a task is a function of its payload.

A task that raises, a worker process that dies under it, or a task past its deadline is
retried once (``retries``), then recorded as failed with its reason: one bad candidate
never ends a sweep. Ctrl-C or SIGTERM (porter's CLI turns SIGTERM into a KeyboardInterrupt)
goes on up at once, and ``close`` ends the outstanding tasks: it stops a runtime this
process started, with every worker it ran, and a cluster kills the workers of a driver
that disconnected. Nothing Ray started outlives porter.

``ray.cancel`` is used only on a task past its deadline, after asking Ray whether it just
finished: in Ray 2.x a cancel that races a task's completion trips a RAY_CHECK
("Tried to complete task that was not pending") that kills the driver
(ray-project/ray#54846, #54798); a sweep interrupted while a task was finishing died of it
with exit 1 instead of 143.
"""

from __future__ import annotations

import importlib
import os
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable

from porter.errors import PorterError

# A worker process dying, its node going away, a task cancelled under us: worth one retry.
CRASHED, FAILED, TIMEOUT, OK = "crashed", "failed", "timeout", "ok"


@dataclass
class Task:
    key: str                  # content key: the cache key and the task's identity in a sweep
    fn: str                   # "module:function", imported where the task runs
    payload: dict
    label: str = ""           # what progress lines call it
    timeout_s: float = 600.0  # per attempt, from the moment it was handed to a worker


@dataclass
class Outcome:
    key: str
    label: str
    status: str               # ok | failed | timeout | crashed
    result: dict | None = None
    error: str = ""
    attempts: int = 0
    seconds: float = 0.0
    history: list = field(default_factory=list)   # (status, error) of each failed attempt

    @property
    def ok(self) -> bool:
        return self.status == OK


def call_task(fn: str, payload: dict) -> dict:
    """Import ``fn`` ("module:function") and call it on ``payload`` (in a worker)."""
    module, _, name = fn.partition(":")
    return getattr(importlib.import_module(module), name)(payload)


class LocalExecutor:
    """Every task in this process, in order. A raising task is retried and recorded like
    a remote one; a hang cannot be cut short here (no per-task timeout in-process)."""

    name = "local"
    slots = 1

    def run(self, tasks: Iterable[Task], on_done: Callable[[Outcome], None] | None = None,
            retries: int = 1) -> dict[str, Outcome]:
        done: dict[str, Outcome] = {}
        for task in tasks:
            out = Outcome(task.key, task.label, FAILED)
            start = time.perf_counter()
            while out.attempts <= retries:
                out.attempts += 1
                try:
                    out.result, out.status, out.error = call_task(task.fn, task.payload), OK, ""
                    break
                except KeyboardInterrupt:
                    raise
                except Exception as exc:  # a broken candidate is recorded, not fatal
                    out.status, out.error = FAILED, f"{type(exc).__name__}: {exc}"
                    out.history.append((out.status, out.error))
            out.seconds = time.perf_counter() - start
            done[task.key] = out
            if on_done:
                on_done(out)
        return done

    def describe(self) -> str:
        return "local executor (this process, one task at a time)"

    def close(self) -> None:
        pass


# Ray's own memory, kept small: the tasks move kilobytes (sources, PTX, JSON), not tensors.
OBJECT_STORE_BYTES = 100 * 1024 * 1024


class _RayThreadsToStderr:
    """sys.stdout while Ray is up: what Ray's own background threads print (the raylet's
    "a worker died" notices) goes to stderr, so stdout stays the command's (--json)."""

    def __init__(self, stdout):
        self.stdout = stdout

    def write(self, text):
        import threading

        if threading.current_thread().name.startswith("ray_"):
            return sys.stderr.write(text)
        return self.stdout.write(text)

    def __getattr__(self, name):
        return getattr(self.stdout, name)


def _loopback(address: str) -> bool:
    host = address.rsplit(":", 1)[0].strip("[]")
    return host in ("127.0.0.1", "localhost", "::1")


class RayExecutor:
    """Tasks on Ray: ``address`` None starts a local runtime (``num_cpus`` workers, on the
    loopback interface only, no dashboard), ``"auto"`` or ``host:port`` joins a cluster.

    At most one task per CPU of the cluster is in flight, so a task handed out is a task
    running, and its deadline can be counted from the hand-out."""

    name = "ray"

    def __init__(self, address: str | None = None, num_cpus: int | None = None):
        import signal

        if address is None or _loopback(address):
            # Ray binds a node to the machine's outward address unless told it is a
            # one-machine runtime; a local runtime listens on loopback only.
            os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
        if address is None:
            # Ray starts its workers at nice 15 (to keep a busy driver responsive); porter's
            # driver only waits, and on a shared machine a niced worker gets a few percent of
            # a CPU (a sweep crawled at 5% per worker beside a dozen ordinary processes).
            # A cluster's own `ray start` environment decides for its workers.
            os.environ.setdefault("RAY_worker_niceness", "0")
        try:
            import ray
        except ImportError:
            raise PorterError("ray is not installed: pip install ray (porter tune runs its sweep on Ray)") from None
        self.ray = ray
        self.address = address
        self.owned = address is None
        # ray.init installs a SIGTERM handler that exits at once; porter's (cancel, clean up,
        # exit 143) must stay in charge.
        old = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
        kwargs = dict(log_to_driver=False, logging_level="ERROR", configure_logging=True,
                      include_dashboard=False)
        try:
            if self.owned:
                # "local": a new runtime of our own, never one a `ray start` left on the machine
                ray.init(address="local", num_cpus=num_cpus or max(1, os.cpu_count() or 1),
                         object_store_memory=OBJECT_STORE_BYTES,
                         _node_ip_address="127.0.0.1", **kwargs)
            else:
                kwargs.pop("include_dashboard")
                ray.init(address=address, **kwargs)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            where = f"--address {address}" if address else "the local Ray runtime"
            raise PorterError(f"{where}: cannot start or join Ray ({first}); for a cluster, "
                              "`ray start --head` on its head node, then --address HOST:PORT or auto") from None
        finally:
            for s, h in old.items():
                if h is not None:
                    signal.signal(s, h)
        self._stdout = sys.stdout
        sys.stdout = _RayThreadsToStderr(sys.stdout)
        self._remote = ray.remote(max_retries=0)(call_task)
        self.slots = max(1, int(ray.cluster_resources().get("CPU", 1)))

    def describe(self) -> str:
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        where = "a local Ray runtime" if self.owned else f"the Ray cluster at {self.address}"
        return f"{where}: {len(nodes)} node{'s' if len(nodes) != 1 else ''}, {self.slots} CPU{'s' if self.slots != 1 else ''}"

    def _classify(self, exc: BaseException) -> tuple[str, str]:
        ex = self.ray.exceptions
        if isinstance(exc, ex.RayTaskError):
            cause = getattr(exc, "cause", None) or exc
            text = str(cause).strip().splitlines()
            return FAILED, f"{type(cause).__name__}: {text[-1] if text else ''}"
        if isinstance(exc, ex.TaskCancelledError):
            return CRASHED, "the task was cancelled under it"
        crashed = tuple(getattr(ex, n) for n in ("WorkerCrashedError", "NodeDiedError", "LocalRayletDiedError",
                                                 "ObjectLostError", "OutOfMemoryError") if hasattr(ex, n))
        first = (str(exc).strip().splitlines() or [""])[0]
        if isinstance(exc, crashed):
            return CRASHED, f"{type(exc).__name__}: {first}"
        return FAILED, f"{type(exc).__name__}: {first}"

    def run(self, tasks: Iterable[Task], on_done: Callable[[Outcome], None] | None = None,
            retries: int = 1) -> dict[str, Outcome]:
        ray = self.ray
        queue = list(tasks)
        queue.reverse()                      # pop() from the end hands them out in order
        outcomes = {t.key: Outcome(t.key, t.label, FAILED) for t in queue}
        started = {t.key: None for t in queue}
        inflight: dict = {}                  # ObjectRef -> (task, deadline)
        done: dict[str, Outcome] = {}

        def submit(task: Task) -> None:
            out = outcomes[task.key]
            out.attempts += 1
            if started[task.key] is None:
                started[task.key] = time.perf_counter()
            ref = self._remote.remote(task.fn, task.payload)
            inflight[ref] = (task, time.monotonic() + task.timeout_s)

        def settle(task: Task, status: str, result=None, error: str = "") -> None:
            out = outcomes[task.key]
            if status != OK:
                out.history.append((status, error))
                if out.attempts <= retries:
                    queue.append(task)       # retried next, before the tasks not yet started
                    return
            out.status, out.result, out.error = status, result, error
            out.seconds = time.perf_counter() - started[task.key]
            done[task.key] = out
            if on_done:
                on_done(out)

        signals = self._note_signals()
        try:
            while queue or inflight:
                while queue and len(inflight) < self.slots:
                    submit(queue.pop())
                now = time.monotonic()
                wait_s = max(0.0, min(d for _, d in inflight.values()) - now)
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=min(wait_s, 1.0))
                for ref in ready:
                    task, _ = inflight.pop(ref)
                    try:
                        settle(task, OK, ray.get(ref))
                    except Exception as exc:  # the task raised or its worker died: classified, retried
                        status, error = self._classify(exc)
                        settle(task, status, error=error)
                now = time.monotonic()
                late = [ref for ref, (_, deadline) in inflight.items() if now >= deadline and ref not in ready]
                if late:
                    # one that finished since the wait above is not cancelled (see the module's note)
                    finished, _ = ray.wait(late, num_returns=len(late), timeout=0)
                    for ref in late:
                        if ref in finished:
                            continue         # collected by the next ray.wait
                        task, _ = inflight.pop(ref)
                        ray.cancel(ref, force=True)   # kills the worker process running it
                        settle(task, TIMEOUT, error=f"no result within {task.timeout_s:g} s (per-task timeout)")
        except BaseException as exc:
            # Ctrl-C, SIGTERM, a bug: the outstanding tasks end with close() (the module's note
            # says why they are not cancelled here)
            # A signal that arrives inside ray.wait comes out of Ray as a bare KeyboardInterrupt:
            # give it back its signal number, so porter exits 143 for SIGTERM, not 130.
            if isinstance(exc, KeyboardInterrupt) and not hasattr(exc, "signum") and signals["got"]:
                exc.signum = signals["got"][-1]
            raise
        finally:
            signals["restore"]()
        return done

    @staticmethod
    def _note_signals() -> dict:
        """While tasks run: remember which of SIGTERM / SIGHUP arrived, then let the handler
        that was there (porter's: raise Terminated) act as before."""
        import signal
        import threading

        got: list[int] = []
        old = {}
        if threading.current_thread() is threading.main_thread():
            for name in ("SIGTERM", "SIGHUP"):
                signum = getattr(signal, name, None)
                prev = signal.getsignal(signum) if signum is not None else None
                if callable(prev):
                    def noted(s, frame, prev=prev):
                        got.append(s)
                        return prev(s, frame)
                    old[signum] = prev
                    signal.signal(signum, noted)

        def restore():
            for signum, prev in old.items():
                signal.signal(signum, prev)
        return {"got": got, "restore": restore}

    def close(self) -> None:
        """Disconnect; a runtime this process started is stopped with every worker it ran."""
        try:
            self.ray.shutdown()
        except Exception:
            pass
        if isinstance(sys.stdout, _RayThreadsToStderr):
            sys.stdout = self._stdout


def make_executor(kind: str = "ray", address: str | None = None, num_cpus: int | None = None):
    """``kind`` local or ray; ``address`` (ray only) auto or host:port."""
    if kind == "local":
        if address:
            raise PorterError(f"--address {address}: only with --executor ray")
        return LocalExecutor()
    if kind != "ray":
        raise PorterError(f"--executor {kind!r}: expected local or ray")
    return RayExecutor(address=address, num_cpus=num_cpus)


def add_executor_arguments(parser, what: str = "the emulation and prediction stages") -> None:
    """--executor local|ray and --address for a command that can hand work to Ray."""
    parser.add_argument("--executor", choices=("local", "ray"), default="local",
                        help=f"where {what} run: local (this machine's worker pool, default) or ray "
                             "(a local Ray runtime, or the cluster --address names); the results are the same")
    parser.add_argument("--address", metavar="ADDR", help="with --executor ray: a running Ray cluster (auto or HOST:PORT)")
