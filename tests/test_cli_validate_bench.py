"""``porter validate`` and ``porter bench`` without a GPU: argument checks, the no-device
and wrong-device paths (stand-in device lists), exit codes, and the plumbing to the
harness (stubbed where a GPU would run)."""
from __future__ import annotations

import json

import pytest

from porter.cli import main
from porter.pipeline import device as pdev
from porter.runtime import harness

H200 = {"index": 0, "name": "NVIDIA H200", "compute_capability": [9, 0]}


@pytest.fixture
def no_gpu(monkeypatch):
    monkeypatch.setattr(pdev, "list_devices", lambda: ([], "the driver sees no GPU"))


@pytest.fixture
def h200(monkeypatch):
    monkeypatch.setattr(pdev, "list_devices", lambda: ([H200], ""))


def run(capsys, *argv):
    try:
        rc = main(list(argv))
    except SystemExit as exc:          # argparse rejects before porter runs
        rc = exc.code
    out, err = capsys.readouterr()
    return rc, out, err


# ---- argument validation (exit 2, one line) ---------------------------------------------------

@pytest.mark.parametrize("argv, needle", [
    (["validate", "hopper", "--kernel", "gemm", "--seeds", "0"], "--seeds 0"),
    (["validate", "hopper", "--kernel", "gemm", "--shapes", "12x34"], "MxNxK"),
    (["validate", "hopper", "--kernel", "gemm", "--shapes", "0x256x256"], "positive integers"),
    (["validate", "hopper", "--kernel", "gemm", "--shapes", "100x256x256"], "pad M to 256"),
    (["validate", "hopper", "--kernel", "attention", "--shapes", "1x6x4x128x128"], "multiple of heads_kv"),
    (["validate", "hopper", "--kernel", "megakernel", "--shapes", "no-such-model"], "no-such-model"),
    (["bench", "hopper", "--kernel", "megakernel", "--shape", "tiny"], "decode positions"),
    (["validate", "hopper", "--kernel", "gemm.nvfp4"], "nothing runs on hopper"),
    (["validate", "hopper", "--kernel", "gemm.bf17"], "did you mean"),
    (["bench", "nosucharch", "--kernel", "gemm"], "nosucharch"),
])
def test_bad_arguments_exit_2_with_one_line(capsys, no_gpu, argv, needle):
    rc, out, err = run(capsys, *argv)
    assert rc == 2, (out, err)
    assert needle in err and len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_bad_device_mode_is_an_argparse_error(capsys):
    rc, _, err = run(capsys, "validate", "hopper", "--kernel", "gemm", "--device", "maybe")
    assert rc == 2 and "invalid choice" in err
    rc, _, err = run(capsys, "bench", "hopper", "--kernel", "gemm", "--device", "off")
    assert rc == 2 and "invalid choice" in err


# ---- no device ------------------------------------------------------------------------------

def test_validate_device_on_without_gpu_fails_in_one_line(capsys, no_gpu):
    rc, out, err = run(capsys, "validate", "hopper", "--kernel", "gemm", "--device", "on")
    assert rc == 3 and out == ""
    assert err.strip().splitlines() == ["porter: error: no CUDA device: the driver sees no GPU"]


def test_validate_device_auto_without_gpu_skips(capsys, no_gpu):
    rc, out, err = run(capsys, "validate", "hopper", "--kernel", "gemm")
    assert rc == 0 and err == ""
    assert out.startswith("skipped: no CUDA device") and "still open" in out and len(out.splitlines()) == 1


def test_bench_without_gpu_skips_like_validate(capsys, no_gpu):
    """bench defaults to --device auto as validate does: the same one "skipped" line, exit 0;
    --device on exits 3 for both."""
    rc, out, err = run(capsys, "bench", "hopper", "--kernel", "gemm")
    assert rc == 0 and err == "" and len(out.splitlines()) == 1
    assert out.startswith("skipped: no CUDA device") and "device validation and benchmarks" in out
    assert "still open" in out
    rc_v, out_v, _ = run(capsys, "validate", "hopper", "--kernel", "gemm")
    assert rc_v == 0 and out_v == out
    for command in ("bench", "validate"):
        rc, out, err = run(capsys, command, "hopper", "--kernel", "gemm", "--device", "on")
        assert rc == 3 and out == "" and "no CUDA device" in err


@pytest.mark.parametrize("command", ["validate", "bench"])
def test_help_lists_the_exit_codes(capsys, command):
    rc, out, _ = run(capsys, command, "--help")
    text = " ".join(out.split())
    assert rc == 0
    assert "0 passed (or skipped), 1 a check failed, 2 bad input, 3 no matching GPU with --device on" in text


def test_real_driver_probe_gives_one_line(capsys):
    """Whatever this machine has: no traceback, and a GPU-less machine exits 3."""
    devices, _ = pdev.list_devices()
    if devices:
        pytest.skip("a GPU is present")
    rc, out, err = run(capsys, "validate", "hopper", "--kernel", "gemm.bf16", "--device", "on")
    assert rc == 3 and len(err.strip().splitlines()) == 1 and "no CUDA device" in err


# ---- wrong device (stand-in capability) ---------------------------------------------------------

def test_blackwell_kernel_refused_on_hopper_gpu(capsys, h200):
    rc, out, err = run(capsys, "validate", "blackwell", "--kernel", "gemm.bf16", "--device", "on")
    assert rc == 3
    assert "compute capability mismatch" in err and "sm_100a" in err and "NVIDIA H200" in err
    rc, out, err = run(capsys, "validate", "blackwell", "--kernel", "gemm", "--device", "auto")
    assert rc == 0 and out.startswith("skipped: compute capability mismatch")
    rc, out, err = run(capsys, "bench", "blackwell", "--kernel", "attention", "--device", "on")
    assert rc == 3 and "compute capability mismatch" in err
    rc, out, err = run(capsys, "bench", "blackwell", "--kernel", "attention")
    assert rc == 0 and out.startswith("skipped: compute capability mismatch")


# ---- a matching device: the harness is stubbed (no GPU here) -----------------------------------

def _fake_validate(passed):
    calls = []

    def validate(spec, arch, out_dir, shapes, seeds):
        calls.append((spec.name, arch.name, shapes, seeds))
        return {"name": spec.name, "variant": spec.variant, "passed": passed,
                "level": "device-validated" if passed else "sass-checked",
                "checks": [{"shape": [256, 256, 256], "seed": 1, "passed": passed, "rel_fro_err": 1e-3,
                            "written": {"what": "C", "passed": passed, "unwritten": 0 if passed else 4,
                                        "elements": 65536}}]}
    return validate, calls


def test_validate_with_matching_device_runs_every_supported_kernel(capsys, h200, monkeypatch):
    fake, calls = _fake_validate(True)
    monkeypatch.setattr(harness, "validate", fake)
    rc, out, err = run(capsys, "validate", "hopper", "--kernel", "gemm", "--device", "on",
                       "--shapes", "256x256x256", "512x512x1024", "--seeds", "3")
    assert rc == 0, err
    assert [c[0] for c in calls] == ["gemm.bf16", "gemm.fp8"]
    assert calls[0][2] == [(256, 256, 256), (512, 512, 1024)] and calls[0][3] == 3
    assert "gemm.bf16: passed (level device-validated)" in out and "gemm.nvfp4: unsupported" in out


def test_validate_failure_exits_1_and_names_unwritten(capsys, h200, monkeypatch):
    fake, _ = _fake_validate(False)
    monkeypatch.setattr(harness, "validate", fake)
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.fp8", "--device", "on")
    assert rc == 1 and "FAILED" in out and "4 of 65536 C elements unwritten" in out


def test_validate_json(capsys, h200, monkeypatch):
    fake, _ = _fake_validate(True)
    monkeypatch.setattr(harness, "validate", fake)
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "attention.hd128", "--shapes", "1x2x128", "--json")
    report = json.loads(out)
    assert rc == 0 and report["passed"] and report["device"] == H200
    assert [r["name"] for r in report["results"]] == ["attention.hd128"]


def test_validate_device_off_builds_then_runs_the_cpu_model(capsys, no_gpu):
    """--device off runs no kernel: it builds one (level sass-checked) and runs the CPU model,
    and says so; numerics-model is the most it claims."""
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.bf16", "--device", "off")
    assert rc == 0, out
    assert ("gemm.bf16: passed (level numerics-model); CPU model only: 3 shapes x 2 seeds within tolerance; "
            "no kernel ran") in out
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.bf16", "--device", "off", "--json")
    result = json.loads(out)["results"][0]
    assert rc == 0 and result["level"] == "numerics-model" and result["numerics"]["passed"] is True
    rc, _, err = run(capsys, "validate", "hopper", "--kernel", "gemm.bf16", "--device", "off",
                     "--shapes", "256x256x256")
    assert rc == 2 and "--shapes with --device off" in err


def test_validate_device_off_reports_a_failing_model(capsys, no_gpu, monkeypatch):
    """A kernel model 1% off the reference: the model fails, the level stays at the build's."""
    from porter.validation import reference_gemm

    real = reference_gemm.gemm_model
    monkeypatch.setattr(reference_gemm, "gemm_model", lambda *a, **kw: real(*a, **kw) * 1.01)
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.bf16", "--device", "off")
    assert rc == 1
    line = next(x for x in out.splitlines() if x.startswith("gemm.bf16"))
    assert line.startswith("gemm.bf16: FAILED (level sass-checked); CPU model of 3 shapes x 2 seeds FAILED: ")
    assert "6 of 6 cases outside tolerance (worst " in line and line.endswith("; no kernel ran")


def _stopped_build(level_name):
    from porter.kernels.build import Check, KernelBuild
    from porter.levels import Level

    def build_kernel(spec, arch, source=None):
        return KernelBuild(spec=spec, target=arch.target, level=Level[level_name],
                           checks=[Check("compile", True, "cubin"), Check("sass has HGMMA", False, "missing HGMMA")])
    return build_kernel


def test_validate_device_off_reports_the_level_the_build_reached(capsys, no_gpu, monkeypatch):
    from porter.kernels import build as kbuild

    monkeypatch.setattr(kbuild, "build_kernel", _stopped_build("COMPILED"))
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.bf16", "--device", "off")
    assert rc == 1
    assert ("gemm.bf16: FAILED (level compiled): the kernel's build stops at compiled: sass has HGMMA: "
            "missing HGMMA; CPU model only: 3 shapes x 2 seeds within tolerance; no kernel ran") in out


def _bench_row(pct_target_met=True, spot_ok=True):
    stats = {"n": 30, "median_ms": 1.5, "mean_ms": 1.5, "min_ms": 1.4, "max_ms": 1.7, "p10_ms": 1.45,
             "p90_ms": 1.55, "spread": 0.0667}
    base = dict(stats, median_ms=1.4 if pct_target_met else 1.0, p10_ms=1.35, p90_ms=1.45)
    flops = 2.0 * 8192 ** 3
    row = {"family": "gemm", "name": "gemm.bf16", "shape": [8192, 8192, 8192], "flops": flops, "time": stats,
           "tflops": flops / 1.5e-3 / 1e12, "peak_tflops": 989.0, "rotation": "1 input set(s)",
           "spot_check": {"passed": spot_ok}}
    row["pct_of_peak"] = 100 * row["tflops"] / 989.0
    row["baseline"] = {"name": "torch.matmul (bf16)", "time": base}
    from porter.runtime.device_runs import _relate

    _relate(row)
    return row


def test_bench_reports_beside_the_baseline(capsys, h200, monkeypatch):
    seen = []

    def fake_bench(spec, arch, out_dir, shapes, baseline=True):
        seen.append((spec.name, shapes, baseline))
        return {"name": spec.name, "rows": [_bench_row()]}

    monkeypatch.setattr(harness, "bench", fake_bench)
    rc, out, err = run(capsys, "bench", "hopper", "--kernel", "gemm.bf16", "--shape", "8192x8192x8192")
    assert rc == 0, err
    assert seen == [("gemm.bf16", [(8192, 8192, 8192)], True)]
    assert "TFLOP/s" in out and "torch.matmul (bf16)" in out and "93%" in out and "meets the 90% target" in out


def test_bench_row_ratios_and_failed_spot_check(capsys, h200, monkeypatch):
    row = _bench_row(pct_target_met=False)
    assert row["pct_of_baseline"] == pytest.approx(100 * 1.0 / 1.5)
    assert row["baseline"]["tflops"] == pytest.approx(2.0 * 8192 ** 3 / 1e-3 / 1e12)
    assert row["beyond_noise"]
    monkeypatch.setattr(harness, "bench",
                        lambda spec, arch, out_dir, shapes, baseline=True:
                        {"name": spec.name, "rows": [_bench_row(False, spot_ok=False)]})
    rc, out, _ = run(capsys, "bench", "hopper", "--kernel", "gemm.bf16", "--no-baseline")
    assert rc == 1 and "below the 90% target" in out and "OUTPUT CHECK FAILED" in out


def test_megakernel_bench_line():
    from porter.commands.bench import row_line

    stats = {"n": 20, "median_ms": 0.7, "mean_ms": 0.7, "min_ms": 0.69, "max_ms": 0.72, "p10_ms": 0.69,
             "p90_ms": 0.71, "spread": 0.03}
    row = {"family": "megakernel", "name": "megakernel.llama-decode", "shape": {"model": "llama-3.2-1b", "pos": 1024},
           "time": stats, "us_per_step": 700.0, "achieved_gb_s": 3532.7, "pct_of_peak_bandwidth": 73.6,
           "predicted_latency_us": 596.0, "baseline": {"bytes_per_s": 4.3e12}, "pct_of_copy_bandwidth": 82.2,
           "spot_check": {"passed": True}}
    line = row_line(row)
    assert "700.0 us/step" in line and "3533 GB/s" in line and "copy 4300 GB/s: 82% of it" in line


def test_lazy_host_entry_points():
    import porter
    from porter.kernels.attention import attention
    from porter.runtime.gemm import gemm

    assert porter.gemm is gemm and porter.attention is attention
    with pytest.raises(AttributeError):
        porter.no_such_thing


def test_one_kernels_error_does_not_hide_the_others(capsys, h200, monkeypatch):
    from porter.errors import PorterError

    fake, _ = _fake_validate(True)

    def flaky(spec, *args):
        if spec.name == "gemm.bf16":
            raise PorterError("kernel execution (cuCtxSynchronize) failed: CUDA_ERROR_ILLEGAL_ADDRESS")
        return fake(spec, *args)

    monkeypatch.setattr(harness, "validate", flaky)
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm", "--device", "on")
    assert rc == 1
    assert "gemm.bf16: FAILED (level sass-checked): kernel execution" in out and "gemm.fp8: passed" in out



def test_a_device_error_reports_the_level_the_build_reached(capsys, h200, monkeypatch):
    """isolated() asks the kernel's build which level it reached instead of assuming one."""
    from porter.errors import PorterError
    from porter.kernels import build as kbuild

    def refused(spec, *args):
        raise PorterError(f"{spec.name}: kernel not usable on hopper: sass has HGMMA: missing HGMMA")

    monkeypatch.setattr(harness, "validate", refused)
    monkeypatch.setattr(kbuild, "build_kernel", _stopped_build("COMPILED"))
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.fp8", "--device", "on")
    assert rc == 1 and "gemm.fp8: FAILED (level compiled): gemm.fp8: kernel not usable" in out

    def raises(spec, arch, source=None):
        raise PorterError("templates/gemm.cu.j2: render failed")

    monkeypatch.setattr(kbuild, "build_kernel", raises)
    rc, out, _ = run(capsys, "validate", "hopper", "--kernel", "gemm.fp8", "--device", "on", "--json")
    assert rc == 1 and json.loads(out)["results"][0]["level"] == "failed"
