"""Inputs that used to end in an internal error, unbounded memory or a silent wait (issue 20
items 4 and 8): a non-UTF-8 --source, a shape whose host arrays cannot exist, a shape the
simulator would take hours on, --jobs beyond the cores, an endless loop under --source,
and the per-kernel progress of `validate --device emu`."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from porter.cli import main
from porter.commands.kernel import find_kernel
from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.pipeline.context import cap_jobs
from porter.runtime import run_budget
from porter.runtime.emulated import time_limit_s


def _one_error_line(capsys) -> str:
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("porter: error: "), err
    assert "Traceback" not in err[0]
    return err[0]


def test_a_non_utf8_source_is_one_line(tmp_path, capsys):
    bad = tmp_path / "edited.cu"
    bad.write_bytes(b'extern "C" __global__ void k() {}\n// caf\xe9\n')
    assert main(["validate", "hopper", "--kernel", "gemm.bf16", "--device", "emu", "--source", str(bad)]) == 2
    line = _one_error_line(capsys)
    assert f"--source {bad}:2: not UTF-8 text (byte 0xe9" in line


@pytest.mark.parametrize("device", ["emu", "auto", "off"])
def test_a_shape_beyond_host_memory_is_refused_before_any_array(capsys, device):
    rc = main(["validate", "hopper", "--kernel", "gemm.bf16", "--device", device,
               "--shapes", "1048576x1048576x1048576"])
    assert rc == 2
    line = _one_error_line(capsys)
    assert "would need about" in line and "of host memory" in line and "--max-host-gb" in line


def test_host_memory_estimate_and_its_override():
    hopper = load_arch("hopper")
    gemm = find_kernel("gemm.bf16", hopper)[0]
    need = run_budget.host_bytes(gemm, (8192, 8192, 8192))
    assert 2e9 < need < 8e9            # A, B, C of 8192^2 with their fp64 copies: a few GB
    with pytest.raises(PorterError, match=r"beyond the limit of 1\.0 GB; .* --max-host-gb"):
        run_budget.check_host_memory([gemm], [(8192, 8192, 8192)], 1.0)
    run_budget.check_host_memory([gemm], [(8192, 8192, 8192)], 64.0)        # raised: accepted
    att = find_kernel("attention.hd128", hopper)[0]
    # the fp64 reference forms B x Hq x Sq x Sk scores: long sequences cost quadratically
    assert run_budget.host_bytes(att, (1, 32, 8, 65536, 65536)) > 1e12


def test_emulation_time_is_said_or_refused():
    hopper = load_arch("hopper")
    gemm = find_kernel("gemm.bf16", hopper)[0]
    calls = []

    def calibrate(spec, arch, shape):     # as if the smallest case ran 12,000 warp-instructions in 0.5 s
        calls.append(shape)
        return 12_000, 0.5

    est = run_budget.emulation_estimate(gemm, hopper, (1024, 1024, 256), calibrate)
    assert calls == [(256, 256, 64)] and est["warp_instructions"] == 12_000 * 64 and est["seconds"] == 32.0
    said = run_budget.check_emulation_time(gemm, (1024, 1024, 256), est, 120.0)
    assert said.startswith("gemm.bf16 at 1024x1024x256: about 768,000 simulated warp-instructions, about 32 s")
    with pytest.raises(PorterError, match=r"beyond the wall-clock limit of 10 s per run; .*--time-limit"):
        run_budget.check_emulation_time(gemm, (1024, 1024, 256), est, 10.0)
    assert run_budget.check_emulation_time(gemm, (1024, 1024, 256), est, None) == said   # 0: no limit
    # Shapes about the calibration's size are not estimated (nor calibrated).
    assert run_budget.emulation_estimate(gemm, hopper, (256, 256, 128), calibrate) is None and len(calls) == 1


def test_a_shape_for_hours_in_the_simulator_is_refused(capsys):
    rc = main(["validate", "hopper", "--kernel", "gemm.bf16", "--device", "emu", "--shapes", "8192x8192x8192"])
    assert rc == 2
    line = _one_error_line(capsys)
    assert re.search(r"about [\d,]+ simulated warp-instructions, about [\d,]+ s in porter's PTX simulator", line)
    assert "--time-limit" in line


def test_jobs_beyond_the_cores_are_capped_with_a_warning(monkeypatch, capsys):
    monkeypatch.setattr("os.cpu_count", lambda: 2)
    assert cap_jobs(64) == 2
    assert "--jobs 64: this machine has 2 CPUs; using 2 workers" in capsys.readouterr().err
    assert cap_jobs(2) == 2 and capsys.readouterr().err == ""


def test_time_limit_setting(monkeypatch):
    monkeypatch.delenv("PORTER_EMU_TIME_LIMIT", raising=False)
    assert time_limit_s() == 120.0 and time_limit_s(5) == 5 and time_limit_s(0) is None
    monkeypatch.setenv("PORTER_EMU_TIME_LIMIT", "0")
    assert time_limit_s() is None
    monkeypatch.setenv("PORTER_EMU_TIME_LIMIT", "soon")
    with pytest.raises(PorterError, match="PORTER_EMU_TIME_LIMIT='soon'"):
        time_limit_s()


def _endless(tmp_path: Path, capsys) -> Path:
    assert main(["kernel", "render", "gemm.bf16", "--arch", "hopper"]) == 0
    text = capsys.readouterr().out
    body = text.index("using namespace gemm;\n", text.index("porter_gemm_bf16_wgmma(")) + len("using namespace gemm;\n")
    path = tmp_path / "endless.cu"
    path.write_text(text[:body] + '    for (;;) { asm volatile(""); }   // planted: an endless loop\n' + text[body:])
    return path


def test_an_endless_loop_is_stopped_by_the_wall_clock_naming_its_line(tmp_path, capsys):
    source = _endless(tmp_path, capsys)
    rc = main(["validate", "hopper", "--kernel", "gemm.bf16", "--device", "emu", "--source", str(source),
               "--seeds", "1", "--time-limit", "2"])
    out, err = capsys.readouterr()
    assert rc == 1
    head = next(line for line in out.splitlines() if line.startswith("gemm.bf16: FAILED"))
    assert re.search(r"wall-clock limit of 2 s reached with the warps at gemm\.bf16\.ptx:\d+ \(gemm\.bf16\.cu:\d+\)", head)
    assert re.search(r"\[1/1\] gemm\.bf16: failed \(\d+\.\d s\): .*wall-clock limit", err)   # progress on stderr


def test_validate_emu_shows_progress_per_kernel(capsys):
    rc = main(["validate", "hopper", "--kernel", "gemm", "--device", "emu", "--seeds", "1",
               "--shapes", "256x256x128"])
    out, err = capsys.readouterr()
    assert rc == 0
    assert re.search(r"^\[1/2\] gemm\.bf16: passed \(\d+\.\d s\)$", err, re.M)
    assert re.search(r"^\[2/2\] gemm\.fp8: passed \(\d+\.\d s\)$", err, re.M)
    assert "[1/2]" not in out                                      # stdout keeps the report
