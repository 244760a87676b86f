"""The Ray engine on a local runtime (one CPU, a small object store, loopback only): a
task that hangs past its timeout, one whose worker dies, one that raises: each retried
once and recorded, none ends the run; and porter tune killed with SIGTERM mid-sweep
cancels its tasks, exits 143 and leaves no Ray process behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("ray", reason="ray is not installed (pip install ray)")

from porter.tuning.engine import CRASHED, FAILED, OK, TIMEOUT, RayExecutor, Task  # noqa: E402


def test_hang_crash_and_failure_are_retried_once_and_recorded():
    ex = RayExecutor(num_cpus=1)
    try:
        assert "local Ray runtime: 1 node, 1 CPU" in ex.describe()
        tasks = [Task("hang", "time:sleep", 60, "hangs", timeout_s=3),
                 Task("crash", "os:_exit", 1, "its worker dies"),
                 Task("raise", "porter.tuning.tasks:screen", {}, "raises"),
                 Task("fine", "math:sqrt", 16.0, "fine")]
        seen = []
        start = time.monotonic()
        out = ex.run(tasks, on_done=seen.append)
        assert time.monotonic() - start < 45
    finally:
        ex.close()
    assert out["fine"].status == OK and out["fine"].result == 4.0 and out["fine"].attempts == 1
    assert out["hang"].status == TIMEOUT and out["hang"].attempts == 2 and "per-task timeout" in out["hang"].error
    assert out["crash"].status == CRASHED and out["crash"].attempts == 2
    assert out["raise"].status == FAILED and out["raise"].attempts == 2 and "KeyError" in out["raise"].error
    assert sorted(o.key for o in seen) == sorted(out)


def _children(pid: int) -> set[int]:
    found, todo = set(), [pid]
    parents = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                fields = (d / "stat").read_text().rsplit(")", 1)[1].split()
                if fields[0] != "Z":
                    parents[int(d.name)] = int(fields[1])
            except (OSError, IndexError, ValueError):
                pass
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in found]
        found.update(kids)
        todo += kids
    return found


def _running(pids) -> list[int]:
    alive = []
    for p in pids:
        try:
            if (Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0]) != "Z":
                alive.append(p)
        except OSError:
            pass
    return alive


def test_sigterm_mid_sweep_cancels_and_leaves_nothing(tmp_path):
    _sigterm_mid_sweep(tmp_path, after_s=0.0)


# A SIGTERM landing while a task finishes once killed the driver inside Ray (a cancel racing
# the task's reply trips a RAY_CHECK: exit 1, not 143); screening tasks take about a second,
# so these offsets cover every moment of one.
@pytest.mark.slow
@pytest.mark.parametrize("after_s", [0.2, 0.4, 0.6, 0.8, 1.0, 1.2, 1.4, 1.6])
def test_sigterm_at_any_moment_of_a_task(tmp_path, after_s):
    _sigterm_mid_sweep(tmp_path, after_s)


def _sigterm_mid_sweep(tmp_path, after_s: float) -> None:
    env = dict(os.environ, PORTER_TUNING_DIR=str(tmp_path / "tuning"))
    proc = subprocess.Popen([sys.executable, "-m", "porter", "tune", "blackwell", "--kernel", "gemm.bf16.pair",
                             "--budget", "4", "--fresh", "--workers", "1", "--out", str(tmp_path / "out")],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    seen: set[int] = set()
    deadline = time.monotonic() + 90
    # wait until a task runs on a Ray worker, remembering every process the sweep started
    while time.monotonic() < deadline and proc.poll() is None:
        kids = _children(proc.pid)
        seen |= kids
        if any(Path(f"/proc/{k}/cmdline").read_bytes().startswith(b"ray::call_task") for k in _running(kids)):
            break
        time.sleep(0.1)
    assert proc.poll() is None, proc.communicate()[1][-2000:]
    time.sleep(after_s)
    seen |= _children(proc.pid)
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, err[-2000:]
    assert "interrupted" in err
    deadline = time.monotonic() + 20
    while _running(seen) and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _running(seen) == [], "Ray processes outlived porter tune"
    assert not (tmp_path / "tuning" / "blackwell.B200.yaml").exists()   # nothing half-written
