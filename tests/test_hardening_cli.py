"""The smaller bad-input cases of issue #11 (item 10): JSON on every --json path, one
spelling of --shapes for validate and bench, errors that name the user's path (not a temp
file, not an --out nobody gave), and artifacts that honour the umask."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from porter.cli import main
from porter.errors import PorterError
from porter.fsutil import atomic_write


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def _no_gpu() -> bool:
    from porter.descriptor.arch import load_arch
    from porter.commands.device_common import decide_device

    return decide_device(load_arch("hopper"), "auto")[0] is None


@pytest.mark.parametrize("command", [["validate"], ["bench"]])
def test_json_without_a_gpu_is_json(capsys, command):
    if not _no_gpu():
        pytest.skip("a GPU of the arch is here: the device path runs instead")
    rc, out, err = run(capsys, *command, "hopper", "--kernel", "gemm.bf16", "--json")
    assert rc == 0, err
    data = json.loads(out)
    assert data["skipped"] is True and data["device"] is None and data["results"] == []
    assert data["reason"]


@pytest.mark.parametrize("command,flag", [("validate", "--shape"), ("validate", "--shapes"),
                                          ("bench", "--shape"), ("bench", "--shapes")])
def test_both_commands_take_both_spellings_of_shapes(capsys, command, flag):
    if not _no_gpu():
        pytest.skip("a GPU of the arch is here")
    rc, out, err = run(capsys, command, "hopper", "--kernel", "gemm.bf16", flag, "256x256x256", "--json")
    assert rc == 0, err
    assert json.loads(out)["skipped"] is True


@pytest.mark.parametrize("umask,expected", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_artifacts_honour_the_umask(tmp_path, umask, expected):
    old = os.umask(umask)
    try:
        path = atomic_write(tmp_path / "a.txt", "x")
        plain = tmp_path / "b.txt"
        plain.write_text("x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(path.stat().st_mode) == expected == stat.S_IMODE(plain.stat().st_mode)


def test_a_folder_that_refuses_files_is_named_not_the_temp_file(monkeypatch, tmp_path):
    import tempfile

    def refuse(prefix, suffix, dir):
        raise PermissionError(13, "Permission denied", os.path.join(dir, f"{prefix}abc{suffix}"))

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(PermissionError) as info:
        atomic_write(tmp_path / "out.cu", "x")
    assert info.value.filename == str(tmp_path / "out.cu")


def test_render_to_an_unwritable_place_names_the_path(capsys):
    if not Path("/proc/self").exists():
        pytest.skip("needs /proc")
    rc, out, err = run(capsys, "kernel", "render", "gemm.bf16", "--arch", "hopper", "-o", "/proc/porter-x.cu")
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "/proc/porter-x.cu" in err and ".tmp" not in err


def test_default_output_folder_error_does_not_blame_out(monkeypatch, tmp_path):
    from porter.pipeline.runner import prepare_out_dir

    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").write_text("a file where the build folder goes")
    with pytest.raises(PorterError) as info:
        prepare_out_dir(Path("build") / "blackwell", explicit=False)
    msg = str(info.value)
    assert "--out build" not in msg and "default output folder" in msg and str(tmp_path) in msg
    with pytest.raises(PorterError, match=r"^--out build/blackwell"):
        prepare_out_dir(Path("build") / "blackwell", explicit=True)


def test_target_in_a_read_only_place_says_default_folder(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "build").write_text("in the way")
    rc, out, err = run(capsys, "target", "blackwell", "--quiet")
    assert rc == 2 and "--out" not in err.split(";")[0] and "default output folder" in err


def test_errors_reach_the_terminal_as_one_escaped_bounded_line(capsys, monkeypatch):
    import porter.commands.plan as plan_cmd

    def hostile(args):
        raise PorterError("kernel '\x1b[2J\x1b]0;owned\x07': bad\nsecond line \u202e" + "x" * 5000)

    monkeypatch.setattr(plan_cmd, "run", hostile)
    rc = main(["plan", "blackwell", "--from", "hopper"])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1
    assert "\x1b" not in err and "\u202e" not in err and "\\x1b[2J" in err and len(err) < 2100


def test_a_path_with_control_characters_is_escaped(capsys):
    rc = main(["arch", "show", "/tmp/no\x1b[31msuch\n.yaml"])
    err = capsys.readouterr().err
    assert rc == 2 and "\x1b" not in err and len(err.strip().splitlines()) == 1
