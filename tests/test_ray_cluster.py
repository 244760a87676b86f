"""porter tune on a real Ray cluster: a head on 127.0.0.1 and one more node, each started
with `ray start` (one CPU, a small object store), a small sweep through --address, the
same sweep with a worker process killed mid-sweep, and the same sweep on porter's own
local runtime: one table. Loopback only; the nodes are stopped (their process groups) at
the end, and the test fails if any of their processes is left."""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray", reason="ray is not installed (pip install ray)")

# `ray start` turns a loopback --node-ip-address into the machine's outward address; this
# wrapper keeps what it was given, so both nodes and every worker listen on 127.0.0.1.
LAUNCH = ("import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h; "
          "from ray.scripts.scripts import main; sys.argv = ['ray'] + sys.argv[1:]; main()")
SWEEP = ["blackwell", "--kernel", "attention.hd64", "--budget", "3", "--finalists", "1", "--l1-top", "1",
         "--shapes", "4x16x16x4096x4096", "--json", "--fresh",
         "--set", "rescale_threshold=8", "--set", "poly_exp2_share=0"]   # pinned: a test-sized space


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stat(pid) -> tuple[str, int, int] | None:
    """(state, parent pid, process group) of a process, None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0], int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return None


def _descendants(roots) -> set[int]:
    """Every running process below ``roots`` (Ray starts some workers in groups of their own)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit() and (st := _stat(d.name)) and st[0] != "Z":
            parent[int(d.name)] = st[1]
    found, todo = set(), list(roots)
    while todo:
        pid = todo.pop()
        kids = [c for c, p in parent.items() if p == pid and c not in found]
        found.update(kids)
        todo += kids
    return found


def _running(pids) -> list[int]:
    return [p for p in pids if (st := _stat(p)) and st[0] != "Z"]


def _group_alive(pgid: int) -> list[int]:
    """Processes of the group that still run (a zombie waiting to be reaped does not)."""
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
                fields = stat.rsplit(")", 1)[1].split()
                if int(fields[2]) == pgid and fields[0] != "Z":
                    pids.append(int(d.name))
            except (OSError, IndexError, ValueError):
                pass
    return pids


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="/tmp/prt")      # short: Ray's socket paths must fit 107 bytes
    env = dict(os.environ, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
               RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1", RAY_USAGE_STATS_ENABLED="0")
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--temp-dir", temp,
              "--object-store-memory", str(80 * 2**20), "--disable-usage-stats"]
    logs = tmp_path_factory.mktemp("ray-logs")
    procs = []

    def start(args, name):
        procs.append(subprocess.Popen([sys.executable, "-c", LAUNCH, "start", *args, *common], env=env,
                                      start_new_session=True, stdout=open(logs / f"{name}.log", "w"),
                                      stderr=subprocess.STDOUT))

    try:
        start(["--head", "--port", str(port), "--include-dashboard", "false"], "head")
        deadline = time.monotonic() + 60
        while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
            assert time.monotonic() < deadline and procs[0].poll() is None, (logs / "head.log").read_text()[-2000:]
            time.sleep(0.3)
        start(["--address", f"127.0.0.1:{port}"], "node")
        while "block forever" not in (logs / "node.log").read_text(errors="replace"):   # the node has joined
            assert time.monotonic() < deadline + 60 and procs[1].poll() is None, (logs / "node.log").read_text()[-2000:]
            time.sleep(0.3)
        yield {"address": f"127.0.0.1:{port}", "env": env, "procs": procs}
    finally:
        started = _descendants([p.pid for p in procs]) | {p.pid for p in procs}
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + 15
        while any(_group_alive(p.pid) for p in procs) and time.monotonic() < deadline:
            time.sleep(0.3)
        for p in procs:
            if _group_alive(p.pid):
                os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)
        deadline = time.monotonic() + 10
        while _running(started) and time.monotonic() < deadline:
            time.sleep(0.3)
        left = _running(started)
        assert left == [], f"Ray processes left behind: {left}"


def _tune(args, env, tmp, name, kill_worker=None):
    out = subprocess.Popen([sys.executable, "-m", "porter", "tune", *SWEEP, *args,
                            "--tuning-file", str(tmp / f"{name}.yaml"), "--out", str(tmp / name)],
                           env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if kill_worker:
        threading.Thread(target=kill_worker, daemon=True).start()
    stdout, stderr = out.communicate(timeout=300)
    assert out.returncode == 0 and stdout.strip(), stderr[-3000:]
    try:
        return json.loads(stdout)
    except ValueError:
        raise AssertionError(f"not JSON: {stdout[:1500]!r}") from None


def _rows(result):
    return [{k: r[k] for k in ("kernel", "product", "bucket", "chosen", "time_us", "default_time_us", "level",
                               "ranked_by", "l0_time_us")}
            for r in result["table"]]


def _worker_running_a_task(roots) -> int | None:
    """A Ray worker of the cluster's nodes busy with a task (its title is ray::call_task)."""
    for pid in _descendants(roots):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(b"ray::call_task"):
                return pid
        except OSError:
            continue
    return None


def test_sweep_on_a_cluster_equals_a_local_run_and_survives_a_killed_worker(cluster, tmp_path):
    # the driver side: a loopback address stays loopback (porter sets this itself for a local runtime)
    env = dict(cluster["env"], PORTER_TUNING_DIR=str(tmp_path / "tuning"), RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    on_cluster = _tune(["--address", cluster["address"]], env, tmp_path, "cluster")
    assert "Ray cluster at 127.0.0.1" in on_cluster["summary"]["executor"]
    assert "2 nodes" in on_cluster["summary"]["executor"]
    assert on_cluster["summary"]["failed"] == 0 and on_cluster["summary"]["tasks_run"] > 0

    killed = []

    def kill_one():
        roots = [p.pid for p in cluster["procs"]]
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not killed:
            pid = _worker_running_a_task(roots)
            if pid:
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
            time.sleep(0.05)

    survived = _tune(["--address", cluster["address"]], env, tmp_path, "killed", kill_worker=kill_one)
    assert killed, "no worker was caught running a task"
    assert survived["summary"]["retried"] >= 1 and survived["summary"]["failed"] == 0

    local = _tune(["--workers", "2"], dict(os.environ, PORTER_TUNING_DIR=str(tmp_path / "tuning")), tmp_path, "local")
    assert "local Ray runtime" in local["summary"]["executor"]
    assert _rows(on_cluster) == _rows(survived) == _rows(local)
    assert all(r["chosen"] and r["level"] == "emulated" for r in _rows(local))
    assert all(r["time_us"] <= r["default_time_us"] for r in _rows(local))


def _strip_times(obj):
    if isinstance(obj, dict):
        # how long things took differs between machines and runs; everything else must not
        return {k: _strip_times(v) for k, v in obj.items()
                if "seconds" not in k and not k.endswith(("_per_s", "wall_s")) and k != "rate"}
    if isinstance(obj, list):
        return [_strip_times(v) for v in obj]
    return obj


def test_validate_in_the_simulator_on_the_cluster_equals_the_local_run(cluster):
    """porter validate --device emu --executor ray: the same report as the local run."""
    args = [sys.executable, "-m", "porter", "validate", "blackwell", "--kernel", "attention.hd64", "--device", "emu",
            "--shapes", "1x2x1x160x100", "--seeds", "1", "--json"]
    env = dict(cluster["env"], RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    there = subprocess.run(args + ["--executor", "ray", "--address", cluster["address"]], env=env,
                           capture_output=True, text=True, timeout=300)
    # Ray runs each worker's BLAS on one thread (OMP_NUM_THREADS=1); the fp64 reference's
    # error figures match to the last digit when the local run does the same
    here = subprocess.run(args, capture_output=True, text=True, timeout=300, env=dict(os.environ, OMP_NUM_THREADS="1"))
    assert there.returncode == here.returncode == 0, there.stderr[-2000:] + here.stderr[-2000:]
    a, b = json.loads(there.stdout), json.loads(here.stdout)
    assert a["results"] and a["results"][0]["level"] == "emulated"
    assert _strip_times(a) == _strip_times(b)



_HANG = """import sys
from porter.tuning.engine import RayExecutor, Task
ex = RayExecutor(address=sys.argv[1])
try:
    ex.run([Task("hang", "time:sleep", 120, "hangs", timeout_s=300)])
except KeyboardInterrupt:
    print("interrupted", flush=True)
finally:
    ex.close()
"""


def test_an_interrupted_run_ends_its_task_on_the_cluster(cluster):
    # porter does not ray.cancel on an interrupt (a cancel racing a finishing task kills the
    # driver inside Ray); the cluster must end a disconnected driver's task itself: here one
    # that would sleep for two minutes
    env = dict(cluster["env"], RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
    proc = subprocess.Popen([sys.executable, "-c", _HANG, cluster["address"]], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    roots = [p.pid for p in cluster["procs"]]
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None and _worker_running_a_task(roots) is None:
        time.sleep(0.05)
    assert proc.poll() is None and _worker_running_a_task(roots), proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert "interrupted" in out, err[-2000:]
    deadline = time.monotonic() + 30
    while _worker_running_a_task(roots) is not None and time.monotonic() < deadline:
        time.sleep(0.3)
    assert _worker_running_a_task(roots) is None, "the interrupted run's task still runs on the cluster"
