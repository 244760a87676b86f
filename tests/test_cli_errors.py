"""Bad input to every command ends in ONE line naming what and where, a non-zero exit,
no traceback and nothing half-written; Ctrl-C exits 130 and a rerun resumes.

Kernel-level cases use the fake family (tests/test_pipeline_support.py) so they do not
depend on the real families' progress; descriptor cases use the shipped descriptors.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

import test_pipeline_support as fam
from porter.cli import main

TESTS = Path(__file__).resolve().parent
REPO = TESTS.parent


def run(capsys, *argv) -> tuple[int, str, str]:
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def one_line(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def fake(monkeypatch, tmp_path):
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    book = tmp_path / "fake.yaml"
    book.write_text(fam.RUNBOOK)
    return book


@pytest.fixture
def bad_descriptors(tmp_path):
    hopper = (REPO / "arch" / "hopper.yaml").read_text()
    files = {
        "malformed.yaml": "name: x\n  bad: [\n",
        "unknown_key.yaml": hopper + "\nfrobnicate: 3\n",
        "empty.yaml": "",
        "list.yaml": "- a\n",
    }
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    return tmp_path


# -- descriptors: every command that takes an arch ----------------------------------------------

ARCH_COMMANDS = [
    ["arch", "show", "{a}"],
    ["arch", "diff", "hopper", "{a}"],
    ["arch", "check", "{a}"],
    ["plan", "{a}", "--from", "hopper"],
    ["kernel", "list", "--arch", "{a}"],
    ["target", "{a}", "--out", "{out}"],
    ["diff", "hopper", "{a}", "--no-build"],
]


@pytest.mark.parametrize("argv", ARCH_COMMANDS, ids=lambda a: " ".join(a[:2]))
@pytest.mark.parametrize("arch, needle", [
    ("blackwel", "did you mean 'blackwell'"),          # unknown name: a close one suggested
    ("{tmp}/missing.yaml", "missing.yaml: arch descriptor file not found"),
    ("{tmp}/malformed.yaml", "malformed.yaml:2:"),     # the file and the line
    ("{tmp}/unknown_key.yaml", "frobnicate: unknown key"),
    ("{tmp}/empty.yaml", "the file is empty"),
    ("{tmp}/list.yaml", "expected a mapping"),
])
def test_bad_descriptor_is_one_line_exit_2(capsys, bad_descriptors, argv, arch, needle):
    a = arch.format(tmp=bad_descriptors)
    out_dir = bad_descriptors / "out"
    rc, _, err = run(capsys, *[x.format(a=a, out=out_dir) for x in argv])
    assert rc == 2
    assert needle in one_line(err)
    assert not out_dir.exists()                         # nothing written for bad input


# -- kernels and families ------------------------------------------------------------------------

def test_unknown_kernel_suggests_close_names(capsys, fake):
    rc, _, err = run(capsys, "kernel", "render", "fake.axyp", "--arch", "blackwell")
    assert rc == 2 and "did you mean fake.axpy" in one_line(err)


@pytest.mark.parametrize("pattern, needle", [
    ("conv", "families: fake"),                          # an unknown family
    ("fake.axyp", "did you mean fake.axpy"),            # a typo in a kernel name
])
def test_target_kernel_filter_matching_nothing_is_an_error(capsys, fake, tmp_path, pattern, needle):
    out_dir = tmp_path / "o"
    rc, out, err = run(capsys, "target", "blackwell", "--runbook", str(fake), "--out", str(out_dir),
                       "--kernel", pattern)
    line = one_line(err)
    assert rc == 2 and f"--kernel '{pattern}'" in line and needle in line
    assert out == "" and not out_dir.exists()           # no stage ran on nothing


def test_diff_kernel_filter_matching_nothing_fails_before_any_output(capsys, fake):
    rc, out, err = run(capsys, "diff", "hopper", "blackwell", "--kernel", "conv.*", "--no-build")
    assert rc == 2 and "--kernel 'conv.*'" in one_line(err)
    assert out == ""


# -- output paths --------------------------------------------------------------------------------

@pytest.fixture
def blocker(tmp_path):
    """A plain file where a folder is needed: unwritable for every user, root included."""
    path = tmp_path / "blocker"
    path.write_text("not a folder\n")
    return path


def test_unwritable_out_dir(capsys, fake, blocker):
    rc, out, err = run(capsys, "target", "blackwell", "--runbook", str(fake), "--out", str(blocker / "sub"))
    line = one_line(err)
    assert rc == 2 and f"--out {blocker / 'sub'}: cannot create the output folder" in line
    rc, _, err = run(capsys, "target", "blackwell", "--runbook", str(fake), "--out", str(blocker))
    assert rc == 2 and "a file of that name is in the way" in one_line(err)


@pytest.mark.parametrize("argv, flag", [
    (["kernel", "render", "fake.axpy", "--arch", "hopper", "-o", "{p}"], "-o"),
    (["diff", "hopper", "blackwell", "--kernel", "fake.axpy", "--no-build", "--html", "{p}"], "--html"),
])
def test_unwritable_output_file_fails_before_any_work(capsys, fake, blocker, tmp_path, argv, flag):
    target = blocker / "x.out"
    rc, out, err = run(capsys, *[a.format(p=target) for a in argv])
    assert rc == 2 and f"{flag} {target}: cannot create folder" in one_line(err)
    assert out == ""
    rc, _, err = run(capsys, *[a.format(p=tmp_path) for a in argv])   # a folder, not a file
    assert rc == 2 and "is a folder; give a file name" in one_line(err)


# -- arguments -----------------------------------------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["target", "blackwell", "--jobs", "-1"], "-1 workers"),
    (["target", "blackwell", "--jobs", "many"], "'many' is not a number of workers"),
    (["arch", "check", "blackwell", "--jobs", "-3"], "-3 workers"),
    (["target", "blackwell", "--device", "maybe"], "invalid choice: 'maybe'"),
    (["kernel"], "required: SUBCOMMAND"),
])
def test_bad_argument_is_one_line_exit_2(capsys, argv, needle):
    rc, out, err = run(capsys, *argv)
    line = one_line(err)
    assert rc == 2 and needle in line and line.endswith("--help")
    assert out == ""


def test_plan_from_itself_is_an_error(capsys):
    rc, _, err = run(capsys, "plan", "blackwell", "--from", "blackwell")
    assert rc == 2 and "the base is the target itself" in one_line(err)


# -- runbooks ------------------------------------------------------------------------------------

def test_runbook_with_a_cycle(capsys, tmp_path):
    book = tmp_path / "cycle.yaml"
    book.write_text("name: cyc\nbase: hopper\nstages:\n"
                    "  - {id: a, title: A, day: 1, needs: [b], kind: descriptor-check, proves: x}\n"
                    "  - {id: b, title: B, day: 1, needs: [a], kind: probes, proves: y}\n")
    rc, _, err = run(capsys, "target", "blackwell", "--runbook", str(book), "--out", str(tmp_path / "o"))
    line = one_line(err)
    assert rc == 2 and "cycle.yaml" in line and "dependency cycle" in line
    assert not (tmp_path / "o").exists()


def test_missing_runbook_lists_the_known_ones(capsys, tmp_path):
    rc, _, err = run(capsys, "target", "blackwell", "--runbook", "nosuch", "--out", str(tmp_path / "o"))
    assert rc == 2 and "runbook not found" in one_line(err) and "blackwell-bringup" in err


# -- a missing toolchain piece -------------------------------------------------------------------

@pytest.fixture
def no_nvdisasm(monkeypatch, tmp_path):
    """nvdisasm gone from the wheels (a broken lookup) and from PATH."""
    import nvidia

    from porter.compile import sass

    from porter.compile import toolchain

    monkeypatch.setattr(nvidia, "__path__", [])
    monkeypatch.setenv("PATH", str(tmp_path / "empty-bin"))
    # Versions are memoized per process: forget them so the lookup really runs again.
    toolchain.toolchain_versions.cache_clear()
    sass.nvdisasm_version.cache_clear()
    yield
    toolchain.toolchain_versions.cache_clear()
    sass.nvdisasm_version.cache_clear()


@pytest.mark.parametrize("argv", [
    ["target", "blackwell", "--runbook", "{book}", "--out", "{out}"],
    ["arch", "check", "hopper"],
    ["diff", "hopper", "blackwell", "--kernel", "fake.axpy"],
])
def test_missing_nvdisasm_is_one_line_before_any_work(capsys, fake, no_nvdisasm, tmp_path, argv):
    out_dir = tmp_path / "o"
    rc, out, err = run(capsys, *[a.format(book=fake, out=out_dir) for a in argv])
    line = one_line(err)
    assert rc == 2
    assert "nvdisasm not found" in line and "pip install nvidia-cuda-nvdisasm" in line
    assert not out_dir.exists()


@pytest.fixture
def no_nvrtc_library(monkeypatch):
    """The nvidia-cuda-nvrtc wheel gone: cuda.bindings cannot load libnvrtc."""
    from cuda.bindings import nvrtc
    from cuda.pathfinder import DynamicLibNotFoundError

    from porter.compile import toolchain

    def missing():
        raise DynamicLibNotFoundError('Failure finding "libnvrtc.so"')

    monkeypatch.setattr(nvrtc, "nvrtcVersion", missing)
    toolchain.nvrtc_version.cache_clear()
    toolchain.toolchain_versions.cache_clear()
    yield
    toolchain.nvrtc_version.cache_clear()
    toolchain.toolchain_versions.cache_clear()


@pytest.mark.parametrize("argv", [
    ["target", "blackwell", "--runbook", "{book}", "--out", "{out}"],
    ["arch", "check", "blackwell"],
])
def test_missing_nvrtc_library_is_one_line(capsys, fake, no_nvrtc_library, tmp_path, argv):
    out_dir = tmp_path / "o"
    rc, _, err = run(capsys, *[a.format(book=fake, out=out_dir) for a in argv])
    line = one_line(err)
    assert rc == 2 and "NVRTC library not found" in line and "pip install 'nvidia-cuda-nvrtc" in line
    assert not out_dir.exists()


@pytest.mark.parametrize("argv", [
    ["target", "blackwell", "--runbook", "{book}", "--out", "{out}"],
    ["arch", "check", "hopper"],
])
def test_unwritable_compile_cache_is_one_line(capsys, fake, blocker, monkeypatch, tmp_path, argv):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(blocker / "cache"))
    out_dir = tmp_path / "o"
    rc, _, err = run(capsys, *[a.format(book=fake, out=out_dir) for a in argv])
    line = one_line(err)
    assert rc == 2 and "cannot create porter's compile cache" in line and "PORTER_CACHE_DIR" in line
    assert not out_dir.exists()


# -- what is not bad input: a bug, a file-system refusal ------------------------------------------

def test_a_bug_is_one_line_naming_where(capsys, monkeypatch):
    import porter.commands.plan as plan_cmd

    def broken(args):
        raise ValueError("boom")

    monkeypatch.setattr(plan_cmd, "run", broken)
    monkeypatch.delenv("PORTER_TRACEBACK", raising=False)
    rc, _, err = run(capsys, "plan", "blackwell", "--from", "hopper")
    line = one_line(err)
    assert rc == 1 and "internal error: ValueError: boom" in line and "test_cli_errors.py" in line


def test_a_file_system_error_names_the_path(capsys, monkeypatch):
    import porter.commands.plan as plan_cmd

    def refused(args):
        raise PermissionError(13, "Permission denied", "/srv/out/plan.txt")

    monkeypatch.setattr(plan_cmd, "run", refused)
    rc, _, err = run(capsys, "plan", "blackwell", "--from", "hopper")
    assert rc == 2 and one_line(err) == "porter: error: /srv/out/plan.txt: Permission denied"


# -- Ctrl-C --------------------------------------------------------------------------------------

DRIVER = """\
import os, sys, time
from pathlib import Path
sys.path.insert(0, {tests!r})
import pytest
import test_pipeline_support as fam
from porter.cli import main

real_numerics = fam.numerics

def slow_numerics(spec, arch):
    # The kernels are built and stored by now: tell the test, then take long enough
    # for the SIGINT to land mid-stage.
    Path({started!r}).write_text("numerics")
    if os.environ.get("SLOW"):
        time.sleep(30)
    return real_numerics(spec, arch)

with pytest.MonkeyPatch.context() as mp:
    fam.install(mp, Path({tpl!r}))
    mp.setattr(fam, "numerics", slow_numerics)
    code = main(["target", "blackwell", "--runbook", {book!r}, "--out", {out!r}, "--jobs", "1",
                 "--device", "off"])
sys.exit(code)
"""


def test_ctrl_c_exits_130_with_one_line_and_a_rerun_resumes(fake, tmp_path):
    out_dir, started = tmp_path / "o", tmp_path / "started"
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER.format(tests=str(TESTS), started=str(started), tpl=str(tmp_path / "tpl"),
                                    book=str(fake), out=str(out_dir)))
    env = dict(os.environ, SLOW="1")
    proc = subprocess.Popen([sys.executable, str(driver)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env, cwd=tmp_path)
    deadline = time.monotonic() + 60
    while not started.exists():
        assert proc.poll() is None, proc.communicate()
        assert time.monotonic() < deadline, "the run never reached the numerics stage"
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, (out, err)
    line = one_line(err)
    assert "interrupted" in line and "run the same command again to resume" in line
    assert not list(out_dir.rglob("*.tmp")) and not list(out_dir.rglob(".*.tmp"))   # no half files
    assert not (out_dir / "report.json").exists()
    assert (out_dir / ".stages" / "kernels" / "fake.axpy.json").exists()              # finished work kept

    env.pop("SLOW")
    rerun = subprocess.run([sys.executable, str(driver)], capture_output=True, text=True, env=env,
                           cwd=tmp_path, timeout=120)
    assert rerun.returncode == 0, rerun.stderr
    kernels_line = next(l for l in rerun.stdout.splitlines() if l.split()[1:2] == ["kernels"])
    assert "cached" in kernels_line                     # the stored stage came back, not rebuilt
    assert (out_dir / "report.json").exists()


def test_pool_workers_leave_ctrl_c_to_the_parent(tmp_path):
    from porter.pipeline.context import Context
    from porter.pipeline.store import StageStore

    ctx = Context(arch=None, base=None, runbook=None, out_dir=tmp_path, store=StageStore(tmp_path), jobs=2)
    try:
        handler = ctx.pool().submit(signal.getsignal, signal.SIGINT).result(timeout=60)
    finally:
        ctx.close()
    assert handler == signal.SIG_IGN


# -- the installed wheel carries everything the commands read ------------------------------------

def _pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")
    return tomllib.loads((REPO / "pyproject.toml").read_text())


def test_every_data_file_ships_in_the_wheel():
    # pip install (not -e) copies only what package-data names; a file it misses works in the
    # checkout and fails for users with "template not found" (or worse, a missing probe).
    import glob

    setup = _pyproject()["tool"]["setuptools"]
    patterns = setup["package-data"]["*"]
    for package, folder in setup["package-dir"].items():
        if package == "porter":
            continue
        root = REPO / folder
        shipped = {Path(p) for pat in patterns for p in glob.glob(str(root / pat), recursive=True)}
        for path in root.rglob("*"):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".py":
                assert path in shipped, f"{path.relative_to(REPO)} would be left out of the wheel"


def test_every_subpackage_is_listed():
    packages = set(_pyproject()["tool"]["setuptools"]["packages"])
    for init in (REPO / "porter").rglob("__init__.py"):
        name = ".".join(init.parent.relative_to(REPO).parts)
        assert name in packages, f"{name} is missing from [tool.setuptools] packages in pyproject.toml"
