"""Signals and orphans (issue #11, item 8): SIGTERM is handled like Ctrl-C (one
"interrupted" line, finished work kept, exit 143), and pool workers never outlive the
porter process that started them, even when it is killed with SIGKILL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import test_cli_errors as cli_tests
import test_pipeline_support as fam

TESTS = Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc (Linux)")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie nobody reaped counts as gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def wait_gone(pids, seconds: float = 15.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        left = [p for p in pids if alive(p)]
        if not left:
            return []
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


POOL_SCRIPT = """\
import os, signal, sys, time
from pathlib import Path
from porter.cli import Terminated, _install_signal_handlers
from porter.pipeline.context import Context
from porter.pipeline.store import StageStore


def main():

    _install_signal_handlers()
    ctx = Context(arch=None, base=None, runbook=None, out_dir=Path({out!r}), store=StageStore(Path({out!r})), jobs=2)
    pool = ctx.pool()
    pids = set()
    while len(pids) < 2:   # make sure both workers are up
        pids |= {{f.result(timeout=60) for f in [pool.submit(os.getpid) for _ in range(8)]}}
    try:   # before the pids go out: the test's SIGTERM may come at once
        print(" ".join(map(str, sorted(pids))), flush=True)
        if {mode!r} == "kill9":
            os.kill(os.getpid(), signal.SIGKILL)
        while True:
            time.sleep(0.1)
    except Terminated as exc:
        ctx.close()
        sys.exit(128 + exc.signum)


if __name__ == "__main__":   # spawn re-imports this file in each worker
    main()
"""


def start_pool(tmp_path, mode: str):
    script = tmp_path / f"pool_{mode}.py"
    script.write_text(POOL_SCRIPT.format(out=str(tmp_path), mode=mode))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, cwd=tmp_path)
    line = proc.stdout.readline()
    assert line.strip(), proc.communicate()
    return proc, [int(p) for p in line.split()]


def test_workers_exit_when_the_parent_is_killed_with_sigkill(tmp_path):
    proc, workers = start_pool(tmp_path, "kill9")
    proc.wait(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    left = wait_gone(workers)
    for pid in left:   # do not leave them behind if the check fails
        os.kill(pid, signal.SIGKILL)
    assert not left, f"orphaned workers still running: {left}"


def test_sigterm_raises_in_the_parent_and_the_pool_is_shut_down(tmp_path):
    proc, workers = start_pool(tmp_path, "term")
    proc.send_signal(signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not wait_gone(workers, 10)


def test_worker_exits_at_once_when_its_parent_is_already_gone():
    code = ("import os\nfrom porter.pipeline.context import _exit_with_parent\n"
            "_exit_with_parent(os.getppid() + 123456)\nprint('still here')\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1 and "still here" not in proc.stdout and proc.stderr == "", proc.stderr


def test_sigterm_is_interrupted_exit_143_and_a_rerun_resumes(tmp_path, monkeypatch):
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    book = tmp_path / "fake.yaml"
    book.write_text(fam.RUNBOOK)
    out_dir, started = tmp_path / "o", tmp_path / "started"
    driver = tmp_path / "driver.py"
    driver.write_text(cli_tests.DRIVER.format(tests=str(TESTS), started=str(started), tpl=str(tmp_path / "tpl"),
                                              book=str(book), out=str(out_dir)))
    env = dict(os.environ, SLOW="1")
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached the numerics stage"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 143, (out, err)
    line = cli_tests.one_line(err)
    assert "interrupted" in line and "run the same command again to resume" in line
    assert (out_dir / ".stages" / "kernels" / "fake.axpy.json").exists()
    env.pop("SLOW")
    rerun = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert rerun.returncode == 0, rerun.stderr


def test_main_restores_the_callers_signal_handlers(capsys):
    from porter.cli import main

    before = signal.getsignal(signal.SIGTERM)
    assert main(["arch", "list"]) == 0
    capsys.readouterr()
    assert signal.getsignal(signal.SIGTERM) is before


def test_pool_workers_leave_sigterm_to_the_parent(tmp_path):
    from porter.pipeline.context import Context
    from porter.pipeline.store import StageStore

    ctx = Context(arch=None, base=None, runbook=None, out_dir=tmp_path, store=StageStore(tmp_path), jobs=2)
    try:
        handler = ctx.pool().submit(signal.getsignal, signal.SIGTERM).result(timeout=60)
    finally:
        ctx.close()
    assert handler == signal.SIG_IGN


def test_sigterm_to_the_whole_group_leaves_no_worker_and_no_half_file(tmp_path):
    proc, workers = start_pool(tmp_path, "term")
    # As a service manager or `kill -TERM -PGID` would: the parent and every worker (one by
    # one: the group is pytest's own).
    for pid in [*workers, proc.pid]:
        os.kill(pid, signal.SIGTERM)
    proc.communicate(timeout=60)
    assert proc.returncode == 143
    assert not wait_gone(workers, 10)
    assert not list(tmp_path.rglob("*.tmp"))
