"""A full `porter tune` sweep, measured: every kernel of the descriptors given, every shape
bucket, every product, from empty caches, on porter's local Ray runtime or on a two-node
Ray cluster on 127.0.0.1 that this script starts (``--cluster``) and stops.

    python benchmarks/bench_tune.py --out /tmp/sweep-local hopper blackwell
    python benchmarks/bench_tune.py --cluster --out /tmp/sweep-cluster hopper blackwell

Per descriptor it records the wall time, the CPU seconds of every process involved (porter,
Ray's daemons and workers: sampled from /proc each second, the last value per process kept,
so a worker that exits is still counted; a helper process that lives under a second, such
as one nvdisasm call, can be missed), the load average before and after (`uptime`: the
machine may be shared), and `porter tune --json`'s summary (configurations screened,
candidates compiled, timed by L1, emulated, the seconds per task kind). The result is
``OUT/bench.json``; the tuning files land in ``OUT/tuning/`` (PORTER_TUNING_DIR), the
caches in ``OUT/cache/`` (PORTER_CACHE_DIR: empty at the start, so every compile is cold).
"""

from __future__ import annotations

import argparse
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

HZ = os.sysconf("SC_CLK_TCK")
# `ray start` turns a loopback --node-ip-address into the machine's outward address; this
# wrapper keeps what it was given (as tests/test_ray_cluster.py does).
LAUNCH = ("import sys, ray._private.services as s; s.resolve_ip_for_localhost = lambda h: h; "
          "from ray.scripts.scripts import main; sys.argv = ['ray'] + sys.argv[1:]; main()")


def _stat(pid):
    try:
        f = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(f[1]), (int(f[11]) + int(f[12])) / HZ   # ppid, utime + stime
    except (OSError, IndexError, ValueError):
        return None


class CpuMeter:
    """CPU seconds of ``roots`` and every process below them, sampled each second."""

    def __init__(self, roots):
        self.roots, self.seen, self.stop = set(roots), {}, threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)

    def _sample(self):
        table = {}
        for d in Path("/proc").iterdir():
            if d.name.isdigit() and (st := _stat(d.name)):
                table[int(d.name)] = st
        tree, todo = set(), [r for r in self.roots if r in table]
        while todo:
            pid = todo.pop()
            tree.add(pid)
            todo += [c for c, (pp, _) in table.items() if pp == pid and c not in tree]
        for pid in tree:
            self.seen[pid] = max(self.seen.get(pid, 0.0), table[pid][1])

    def _loop(self):
        while not self.stop.is_set():
            self._sample()
            self.stop.wait(1.0)

    def __enter__(self):
        self.base = 0.0
        self._sample()
        self.base = sum(self.seen.values())   # what the roots had spent before (a cluster's idle start)
        self.thread.start()
        return self

    def add(self, pid):
        self.roots.add(pid)

    def seconds(self) -> float:
        self._sample()
        return sum(self.seen.values()) - self.base

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(5)


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ", 3)[:3].__str__()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_cluster(env, logs: Path) -> tuple[str, list]:
    """A head and one more node on 127.0.0.1, one CPU each (the issue's two-node loopback cluster)."""
    port = _free_port()
    temp = tempfile.mkdtemp(prefix="/tmp/prb")       # Ray's socket paths must fit 107 bytes
    common = ["--block", "--node-ip-address", "127.0.0.1", "--num-cpus", "1", "--temp-dir", temp,
              "--object-store-memory", str(200 * 2**20), "--disable-usage-stats"]
    procs = []

    def start(args, name):
        procs.append(subprocess.Popen([sys.executable, "-c", LAUNCH, "start", *args, *common], env=env,
                                      start_new_session=True, stdout=open(logs / f"{name}.log", "w"),
                                      stderr=subprocess.STDOUT))

    start(["--head", "--port", str(port), "--include-dashboard", "false"], "head")
    deadline = time.monotonic() + 120
    while socket.socket().connect_ex(("127.0.0.1", port)) != 0:
        if time.monotonic() > deadline or procs[0].poll() is not None:
            raise SystemExit((logs / "head.log").read_text()[-2000:])
        time.sleep(0.3)
    start(["--address", f"127.0.0.1:{port}"], "node")
    while "block forever" not in (logs / "node.log").read_text(errors="replace"):
        if time.monotonic() > deadline + 120 or procs[1].poll() is not None:
            raise SystemExit((logs / "node.log").read_text()[-2000:])
        time.sleep(0.3)
    return f"127.0.0.1:{port}", procs


def stop_cluster(procs) -> None:
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    for p in procs:
        try:
            p.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait(10)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("archs", nargs="+")
    ap.add_argument("--out", required=True)
    ap.add_argument("--cluster", action="store_true", help="a two-node Ray cluster on 127.0.0.1, one CPU per node")
    ap.add_argument("--kernel", help="porter tune --kernel (default: every kernel with knobs)")
    ap.add_argument("--extra", nargs=argparse.REMAINDER, default=[], help="more porter tune arguments")
    ap.add_argument("--workers", type=int, default=0, help="porter tune --workers (the local runtime's CPUs)")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    # RAY_worker_niceness: the cluster's workers run at the priority porter's local runtime
    # gives its own (Ray's default, nice 15, starves them on a shared machine)
    env = dict(os.environ, PORTER_TUNING_DIR=str(out / "tuning"), PORTER_CACHE_DIR=str(out / "cache"),
               RAY_USAGE_STATS_ENABLED="0", RAY_worker_niceness="0")
    procs, address = [], None
    record = {"started": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "cpus": os.cpu_count(),
              "mode": "two-node Ray cluster on 127.0.0.1 (1 CPU per node)" if args.cluster else "porter's local Ray runtime",
              "runs": []}
    try:
        if args.cluster:
            cenv = dict(env, RAY_AUTH_MODE="token", RAY_AUTH_TOKEN=secrets.token_hex(32),
                        RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="1")
            address, procs = start_cluster(cenv, out)
            env = dict(cenv, RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER="0")
        for arch in args.archs:
            cmd = [sys.executable, "-m", "porter", "tune", arch, "--product", "all", "--json", "--fresh",
                   "--out", str(out / "report")]
            if args.kernel:
                cmd += ["--kernel", args.kernel]
            if address:
                cmd += ["--address", address]
            elif args.workers:
                cmd += ["--workers", str(args.workers)]
            cmd += args.extra
            load0 = _load()
            t0 = time.perf_counter()
            with CpuMeter([p.pid for p in procs]) as meter:
                proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=open(out / f"{arch}.log", "w"),
                                        text=True)
                meter.add(proc.pid)
                stdout, _ = proc.communicate()
                wall = time.perf_counter() - t0
                cpu = meter.seconds()
            try:
                result = json.loads(stdout)
            except ValueError:
                result = {"error": stdout[-2000:]}
            run = {"arch": arch, "command": " ".join(cmd[2:]), "rc": proc.returncode, "wall_s": round(wall, 1),
                   "cpu_s": round(cpu, 1), "load_before": load0, "load_after": _load(),
                   "summary": result.get("summary"), "table": result.get("table")}
            s = run["summary"] or {}
            if s.get("candidates"):
                run["candidates_per_s"] = round(s["candidates"] / wall, 4)
                run["screened_per_s"] = round(s.get("screened", 0) / wall, 1)
            record["runs"].append(run)
            print(json.dumps({k: v for k, v in run.items() if k not in ("table", "summary")}), flush=True)
            (out / "bench.json").write_text(json.dumps(record, indent=1, default=str))
    finally:
        if procs:
            stop_cluster(procs)
    return 0 if all(r["rc"] == 0 for r in record["runs"]) else 1


if __name__ == "__main__":
    sys.exit(main())
