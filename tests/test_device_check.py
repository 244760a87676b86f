"""benchmarks/device_check.py: the prepared manifest, the fallback cubins, and the whole
run rehearsed without a GPU on porter.runtime.fakedriver (every driver call through the
real binding's argument conversion), with kernels that pass, fail, fault and hang."""
from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from porter.errors import PorterError
from porter.runtime import cubins

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "device_check.py"


def _rehearse(tmp_path, behaviours: str, *extra, timeout=240):
    env = dict(os.environ, PORTER_REHEARSAL=behaviours, PORTER_LAUNCH_TIMEOUT_S="1")
    env.pop("PORTER_DEVICE", None)
    env.pop(cubins.CUBIN_DIR_ENV, None)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(SCRIPT), "rehearse", "--snapshot", "--out", str(tmp_path), *extra],
                          capture_output=True, text=True, timeout=timeout, env=env, cwd=ROOT)
    return done, time.monotonic() - t0


def _by_name(results):
    return {k["name"]: k for k in results["kernels"]}


def _checkout_copy(tmp_path) -> Path:
    """The folders a device machine receives, copied (no .git): other people's edits to a
    shared checkout cannot make the rehearsal's manifest stale halfway through."""
    import shutil

    dest = tmp_path / "checkout"
    for folder in ("porter", "templates", "kernels_src", "arch", "benchmarks", "validation"):
        shutil.copytree(ROOT / folder, dest / folder, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return dest


def _prepare_then_run(tmp_path, behaviours: str, refuse: str = "", prepare_args=(), run_args=()):
    """prepare here, then run as on the GPU machine: no jinja2 there (so nothing can be
    rendered or compiled), the rehearsal GPU behind the real binding's conversion."""
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1")
    env.pop("PORTER_DEVICE", None)
    env.pop(cubins.CUBIN_DIR_ENV, None)
    env.pop("CUDA_MODULE_LOADING", None)                # the run sets it for its children
    checkout = _checkout_copy(tmp_path)
    script = checkout / "benchmarks" / "device_check.py"
    prep = subprocess.run([sys.executable, str(script), "prepare", "--profile", "rehearsal", *prepare_args,
                           "--out", str(tmp_path / "prepared")], capture_output=True, text=True, timeout=600,
                          env=env, cwd=checkout)
    assert prep.returncode == 0, prep.stdout[-2000:] + prep.stderr[-2000:]
    block = tmp_path / "device_python"
    block.mkdir()
    (block / "jinja2.py").write_text('raise ImportError("no jinja2 on the GPU machine")\n')
    env.update(PYTHONPATH=str(block), PORTER_DEVICE="porter.runtime.fakedriver:rehearsal_device",
               PORTER_REHEARSAL=behaviours, PORTER_LAUNCH_TIMEOUT_S="1", PORTER_WARMUP_MS="20",
               PORTER_REHEARSAL_REFUSE=refuse)
    t0 = time.monotonic()
    done = subprocess.run([sys.executable, str(script), "run", "--prepared", str(tmp_path / "prepared"),
                           "--out", str(tmp_path / "results"), *run_args], capture_output=True, text=True,
                          timeout=400, env=env, cwd=checkout)
    return done, time.monotonic() - t0


@pytest.mark.slow   # ~70 s: it builds and rehearses every form of the device check
def test_rehearsal_reports_each_kernel_alone(tmp_path):
    """Validation of every kernel first, then benchmarks; kernels that pass (GEMM bf16 from
    its fallback cubin where an nvcc <= 13.0 is here, fp8 and the megakernel benchmarked),
    fail, fault and hang (cuMemFree blocks on the hung kernel, as the driver's may: the child
    reports and exits without freeing, so the hang is a hang, not a timeout)."""
    from porter.runtime.device_check import _nvcc_fallback, _status
    from porter.runtime.device_plan import PREDICTED_LABEL

    nvcc, _ = _nvcc_fallback()
    done, took = _prepare_then_run(tmp_path, "attention.hd64=fault@2,attention.hd64.causal=hang,"
                                   "attention.hd128.causal=fail", refuse="gemm.bf16" if nvcc else "",
                                   prepare_args=("--fallback-kernels", "gemm.bf16") if nvcc else ("--no-fallback",))
    assert done.returncode == 1, done.stderr[-2000:]
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    k = _by_name(results)
    status = {name: _status(r) for name, r in k.items()}
    assert status == {"gemm.bf16": "passed", "gemm.fp8": "passed",
                      "gemm.fp8[accumulation=promoted,tile_n=128]": "passed",   # AB_FORMS (issue 17 item 5)
                      "attention.hd64": "FAULT",
                      "attention.hd64[o_store=tma]": "FAULT",   # AB_FORMS (o_store=tma); the fault is injected by kernel name
                      "attention.hd64.causal": "HANG", "attention.hd128": "passed",
                      "attention.hd128[o_store=tma]": "passed",          # AB_FORMS (6ea26df)
                      "attention.hd128[tile_order=q_inner]": "passed",   # AB_FORMS (6ea26df)
                      "attention.hd128.causal": "FAILED", "megakernel.llama-decode": "passed"}, status
    # pass: validated at every shape (smoke first, the smallest), then benchmarked
    bf16 = k["gemm.bf16"]
    assert bf16["checks"][0]["shape"] == [256, 256, 64] and all(c["passed"] for c in bf16["checks"])
    assert bf16["bench"] and bf16["bench"][0]["spot_check"]["passed"]
    if nvcc:       # the primary cubin refused at load (EAGER module loading in the child), the fallback used
        assert bf16["loaded_from"] == "fallback cubin (nvcc 13.0)", bf16["loaded_from"]
        assert "prepared cubin (NVRTC" in bf16["notes"][0] and "CUDA_ERROR_INVALID_IMAGE" in bf16["notes"][0]
        # validation loads eagerly (cuModuleLoadData refuses); the lazy bench child's cuFuncLoad refuses too
        assert "cuModuleLoadData failed" in bf16["notes"][0] and any("cuFuncLoad" in n for n in bf16["notes"][1:])
    else:
        assert bf16["loaded_from"].startswith("prepared cubin")
    assert bf16["attributes"]["max_dynamic_smem_bytes"] > 48 * 1024
    assert bf16["sass_checks"] and all(c["passed"] for c in bf16["sass_checks"]) and bf16["resources"]
    # the fp8 and megakernel benchmarks ran and were right; each row carries the model's prediction
    for name in ("gemm.fp8", "megakernel.llama-decode"):
        rows = k[name]["bench"]
        assert rows and all(r["spot_check"]["passed"] for r in rows), name
        pred = rows[0]["predicted"]
        assert pred.get("label") == PREDICTED_LABEL or pred.get("unavailable"), pred
    assert k["megakernel.llama-decode"]["checks"][0]["counters_ok"] is True
    # numerical failure: the smoke launch failed, nothing else ran, no benchmark
    bad = k["attention.hd128.causal"]
    assert bad["smoke_failed"] and len(bad["checks"]) == 1 and not bad["bench"]
    # fault on the second launch: the first check kept, the error named
    fault = k["attention.hd64"]
    assert len(fault["checks"]) == 1 and "CUDA_ERROR_ILLEGAL_ADDRESS" in fault["error"]["message"]
    # hang: the watchdog names kernel, shape and seed; the child ends at once (nothing freed)
    hang = k["attention.hd64.causal"]["error"]["message"]
    assert "attention.hd64.causal execution: still running after 1 s (watchdog)" in hang
    assert "1x1x1x64x64 seed" in hang and k["attention.hd64.causal"]["seconds"] < 15
    # a rehearsal claims no level
    assert {r["level"] for r in results["kernels"]} == {"sass-checked"} and results["rehearsal"] is True
    env = results["environment"]
    for key in ("gpu", "driver_cuda", "cuda_bindings", "torch", "clocks_before", "clocks_after", "sdpa_backend",
                "manifest", "module_loading"):
        assert key in env, key
    assert env["manifest"]["nvrtc"] and env["manifest"]["porter_commit"] == "unknown"     # a copy has no .git
    # bounded, self-describing output: validation lines before every benchmark line
    files = sorted(p.name for p in (tmp_path / "results").iterdir())
    assert files == ["results.json", "run.log"]
    lines = done.stdout.rstrip("\n").splitlines()
    rehearsed = lines[lines.index(next(x for x in lines if x.startswith("porter device check:"))):]
    assert len(rehearsed) <= 100
    phases = [x.split()[0] for x in rehearsed if x.startswith("  validate ") or x.startswith("  bench ")]
    # 7 kernels + the AB_FORMS forms of gemm.fp8, attention.hd64 and attention.hd128 (two) validate;
    # the 7 that pass benchmark
    assert phases == ["validate"] * 11 + ["bench"] * 7, phases
    table = rehearsed[rehearsed.index(next(x for x in rehearsed if x.startswith("==== porter device check"))):]
    assert table[-1].startswith("7 of 11 kernels passed") and len(table) < 25   # 11: with the A/B forms
    assert any(x.startswith("attention.hd64.causal     HANG") for x in table)
    assert table[-2].startswith(f"* predicted: {PREDICTED_LABEL}")
    log = (tmp_path / "results" / "run.log").read_text()
    assert log.count('"event": "launch"') >= sum(len(r["checks"]) for r in results["kernels"])
    assert results["seconds"] < 150 and took < 200


@pytest.mark.slow
def test_rehearsal_survives_a_crash_a_blocked_call_and_a_bug(tmp_path):
    done, _ = _rehearse(tmp_path, "gemm.bf16=bug@2,gemm.fp8=crash,attention.hd64=block",
                        "--kernels", "gemm.bf16", "gemm.fp8", "attention.hd64", "attention.hd128", "--child-limit", "8")
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    k = _by_name(results)
    assert k["gemm.bf16"]["error"]["kind"] == "bug" and len(k["gemm.bf16"]["checks"]) == 1
    assert "ZeroDivisionError" in k["gemm.bf16"]["error"]["traceback"]
    assert k["gemm.fp8"]["error"]["kind"] == "crash" and "exit -11" in k["gemm.fp8"]["error"]["message"]
    assert k["attention.hd64"]["error"]["kind"] == "timeout" and k["attention.hd64"]["seconds"] < 15
    assert k["attention.hd128"]["validated"] is True and done.returncode == 1


@pytest.mark.slow
def test_the_device_check_runs_on_the_emulated_device(tmp_path):
    """PORTER_DEVICE=emu: the same run on porter's PTX simulator; level emulated, no benchmark."""
    pytest.importorskip("porter.runtime.emulated")
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1", PORTER_DEVICE="emu")
    env.pop(cubins.CUBIN_DIR_ENV, None)
    checkout = _checkout_copy(tmp_path)
    script = checkout / "benchmarks" / "device_check.py"
    prep = subprocess.run([sys.executable, str(script), "prepare", "--profile", "rehearsal", "--no-fallback",
                           "--kernels", "gemm.bf16", "--out", str(tmp_path / "prepared")],
                          capture_output=True, text=True, timeout=600, env=env, cwd=checkout)
    assert prep.returncode == 0, prep.stdout[-1000:]
    done = subprocess.run([sys.executable, str(script), "run", "--prepared", str(tmp_path / "prepared"),
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, timeout=600,
                          env=env, cwd=checkout)
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    k = results["kernels"][0]
    assert done.returncode == 0, done.stdout[-2000:]
    assert k["level"] == "emulated" and k["validated"] and "need a GPU" in k["bench_skipped"]
    assert results["environment"]["device_kind"] == "emu"


# ---- the manifest ----------------------------------------------------------------------------------

def _manifest(tmp_path, **over):
    (tmp_path / "cubins").mkdir(exist_ok=True)
    (tmp_path / "cubins" / "k.cubin").write_bytes(b"\x7fELF primary")
    sources = cubins.source_digests()
    m = {"format": cubins.FORMAT, "arch": "hopper", "porter_commit": "abc123", "sources": sources,
         "sources_sha256": cubins.tree_digest(sources),
         "kernels": {"hopper/gemm.bf16": {"cubin": "cubins/k.cubin", "cubin_sha256": cubins.sha256(b"\x7fELF primary")}}}
    m.update(over)
    (tmp_path / cubins.MANIFEST).write_text(json.dumps(m))
    return m


def test_a_fresh_manifest_passes(tmp_path):
    cubins.check_manifest(_manifest(tmp_path), "hopper", tmp_path)


def test_a_stale_manifest_names_the_file_that_changed(tmp_path):
    m = _manifest(tmp_path)
    m["sources"]["templates/gemm.cu.j2"] = "0" * 64
    with pytest.raises(PorterError, match=r"stale: prepared at porter abc123, and 1 source file\(s\) differ here "
                                          r"\(templates/gemm.cu.j2\); run benchmarks/device_check.py prepare again"):
        cubins.check_manifest(m, "hopper", tmp_path)


@pytest.mark.parametrize("change,message", [
    ({"arch": "blackwell"}, "prepared for 'blackwell', this run is for 'hopper'"),
    ({"format": 1}, "manifest format 1, this porter reads 2"),
])
def test_a_foreign_manifest_is_refused(tmp_path, change, message):
    with pytest.raises(PorterError, match=message):
        cubins.check_manifest(_manifest(tmp_path, **change), "hopper", tmp_path)


def test_a_damaged_or_missing_cubin_is_refused(tmp_path):
    m = _manifest(tmp_path)
    (tmp_path / "cubins" / "k.cubin").write_bytes(b"\x7fELF other")
    with pytest.raises(PorterError, match="does not match its recorded sha256"):
        cubins.check_manifest(m, "hopper", tmp_path)
    (tmp_path / "cubins" / "k.cubin").unlink()
    with pytest.raises(PorterError, match="cubins/k.cubin is missing; carry the whole prepared folder"):
        cubins.check_manifest(m, "hopper", tmp_path)


def test_run_refuses_a_stale_manifest_in_one_line(tmp_path, capsys):
    import importlib.util

    m = _manifest(tmp_path)
    m["sources"]["porter/kernels/gemm.py"] = "0" * 64
    (tmp_path / cubins.MANIFEST).write_text(json.dumps(m))
    spec = importlib.util.spec_from_file_location("device_check_script", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert module.main(["run", "--prepared", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "stale" in err[0] and "porter/kernels/gemm.py" in err[0]
    with pytest.raises(PorterError, match="no manifest.json there; run benchmarks/device_check.py prepare"):
        cubins.read_manifest(tmp_path / "nowhere")


# ---- the fallback cubin -----------------------------------------------------------------------------

@pytest.fixture
def prepared_on_rehearsal_gpu(tmp_path, monkeypatch, hopper):
    """A prepared folder for gemm.bf16 whose primary cubin the driver refuses (not ELF)."""
    from porter.commands.kernel import find_kernel
    from porter.pipeline.work import jsonable
    from porter.runtime import device, driver, fakedriver

    spec = find_kernel("gemm.bf16", hopper)[0]
    m = _manifest(tmp_path)
    (tmp_path / "cubins" / "k.cubin").write_bytes(b"NEWER THAN THIS DRIVER")
    (tmp_path / "cubins" / "f.cubin").write_bytes(b"\x7fELF fallback")
    m["kernels"] = {"hopper/gemm.bf16": {"spec": jsonable(spec.to_dict()), "cubin": "cubins/k.cubin",
                                         "fallback_cubin": "cubins/f.cubin", "nvrtc": "NVRTC 13.5",
                                         "fallback_toolchain": "nvcc 13.0", "level": "sass-checked"}}
    (tmp_path / cubins.MANIFEST).write_text(json.dumps(m))
    monkeypatch.setenv(cubins.CUBIN_DIR_ENV, str(tmp_path))
    monkeypatch.delenv(cubins.CHECKED_ENV, raising=False)
    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.setattr(device, "_DEFAULT", {})
    cubins._checked.cache_clear()
    fakedriver.install(fakedriver.FakeGPU("hopper"))
    yield spec, tmp_path
    cubins._checked.cache_clear()
    driver._init.cache_clear()
    driver.context.cache_clear()


def test_a_refused_cubin_falls_back_and_says_why(prepared_on_rehearsal_gpu, hopper):
    from porter.runtime.device import CudaDevice

    spec, folder = prepared_on_rehearsal_gpu
    dev = CudaDevice()
    fn = dev.load(spec, hopper)
    assert fn.source == "fallback cubin (nvcc 13.0)"
    # refused in cuModuleLoadData (eager loading) or cuFuncLoad (lazy): at load either way
    assert re.search(r"prepared cubin \(NVRTC 13.5\): cu(ModuleLoadData|FuncLoad\(\w+\)) failed: "
                     "CUDA_ERROR_INVALID_IMAGE", dev.load_notes[0]), dev.load_notes
    (folder / "cubins" / "f.cubin").write_bytes(b"ALSO REFUSED")
    with pytest.raises(PorterError, match="the driver refused every cubin: prepared cubin .*; fallback cubin"):
        CudaDevice().load(spec, hopper)


def _fresh_gpu(monkeypatch, loading: str, func_load: bool = True):
    from porter.runtime import device, driver, fakedriver

    monkeypatch.setenv(driver.MODULE_LOADING_ENV, loading)
    driver._init.cache_clear()
    driver.context.cache_clear()
    gpu = fakedriver.FakeGPU("hopper")
    if not func_load:                               # a binding without cuFuncLoad
        monkeypatch.setattr(fakedriver.FakeGPU, "cuFuncLoad", None, raising=False)
        monkeypatch.delattr(fakedriver.FakeGPU, "cuFuncLoad")
    fakedriver.install(gpu)
    monkeypatch.setattr(device, "_DEFAULT", {})
    return gpu


@pytest.mark.parametrize("loading,func_load,falls_back", [("LAZY", False, False), ("EAGER", False, True),
                                                          ("LAZY", True, True)])
def test_a_refused_cubin_falls_back_when_loaded_eagerly_or_with_cufuncload(prepared_on_rehearsal_gpu, hopper,
                                                                           monkeypatch, loading, func_load,
                                                                           falls_back):
    """With lazy module loading (the driver's default) the refused primary cubin "loads" and
    the refusal comes at the first launch, past the fallback; eager loading (the validation
    children) or cuFuncLoad right after cuModuleGetFunction (porter's load, for the benchmark
    children, which stay lazy for torch's sake) refuse it at load, and the fallback is used."""
    from porter.runtime import device_runs as dr
    from porter.runtime.device import CudaDevice

    spec, _ = prepared_on_rehearsal_gpu
    _fresh_gpu(monkeypatch, loading, func_load)
    dev = CudaDevice()
    fn = dev.load(spec, hopper)
    if falls_back:
        assert fn.source == "fallback cubin (nvcc 13.0)" and "CUDA_ERROR_INVALID_IMAGE" in dev.load_notes[0]
        assert dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1, device=dev)[0]["passed"]
    else:
        assert fn.source.startswith("prepared cubin") and not dev.load_notes
        with pytest.raises(PorterError, match="CUDA_ERROR_INVALID_IMAGE"):
            dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1, device=dev)


def test_each_child_phase_sets_its_module_loading(monkeypatch, tmp_path):
    from porter.runtime import device_check as dc

    seen = []

    class Proc:
        def __init__(self, cmd, env, **kw):
            seen.append((cmd[-1], env["CUDA_MODULE_LOADING"]))
            r, w = os.pipe()                          # a child that says nothing and ends
            os.close(w)
            self.stdout, self.returncode, self.pid = os.fdopen(r, "rb"), 0, os.getpid()

        def poll(self):
            return 0

        def wait(self, timeout=None):
            return 0

    monkeypatch.setattr(dc.subprocess, "Popen", Proc)
    printer = dc.Printer(open(tmp_path / "log", "w"), quiet=True)
    for phase in ("validate", "bench"):
        dc._run_child(SCRIPT, "gemm.bf16", 5, dict(os.environ), printer, {"checks": [], "bench": []}, phase=phase)
    assert seen == [("validate", "EAGER"), ("bench", "LAZY")]


def test_levels_come_from_the_manifest_on_the_device(prepared_on_rehearsal_gpu, hopper):
    spec, _ = prepared_on_rehearsal_gpu
    ev = cubins.level_evidence(spec, hopper)
    assert ev == {"level": "sass-checked", "sass_checks": [], "resources": None, "from": "prepared manifest"}


def test_a_kernel_missing_from_the_manifest_is_not_built_on_the_device(prepared_on_rehearsal_gpu, hopper):
    from porter.commands.kernel import find_kernel
    from porter.runtime.device import CudaDevice

    with pytest.raises(PorterError, match=r"gemm.fp8: not in the prepared manifest \(prepare did not build it\)"):
        CudaDevice().load(find_kernel("gemm.fp8", hopper)[0], hopper)


@pytest.mark.slow
def test_prepare_builds_a_fallback_set_with_an_older_nvcc(tmp_path):
    from porter.runtime.device_check import _nvcc_fallback, prepare

    nvcc, tool = _nvcc_fallback()
    if nvcc is None:
        pytest.skip(tool)
    assert prepare(tmp_path, kernels=["gemm.bf16"], echo=lambda *_: None) == 0
    m = json.loads((tmp_path / cubins.MANIFEST).read_text())
    e = m["kernels"]["hopper/gemm.bf16"]
    assert m["fallback_toolchain"] == tool and e["fallback_cubin_sha256"] and all(c["passed"] for c in e["fallback_checks"])
    assert e["shapes"]["validate"][0] == [256, 256, 64] and e["cubin_sha256"] and m["nvrtc"]
    cubins.check_manifest(m, "hopper", tmp_path)


def _fake_run(tmp_path, monkeypatch, kernels: dict, budget_s: float, took: dict, estimate=None):
    """dc.run over a manifest of ``kernels`` ({run name: entry}) with children that take
    ``took[phase]`` seconds of a fake clock (or are killed at their limit)."""
    import types

    from porter.runtime import device, device_check as dc, device_plan, driver

    m = _manifest(tmp_path)
    m["arch"], m["target"] = "hopper", "sm_90a"
    m["kernels"] = {f"hopper/{name}": {"cubin": "cubins/k.cubin", "level": "sass-checked", **e}
                    for name, e in kernels.items()}
    (tmp_path / "cubins" / "k.cubin").write_bytes(b"\x7fELF primary")
    (tmp_path / cubins.MANIFEST).write_text(json.dumps(m))
    clock = [1000.0]
    monkeypatch.setattr(dc, "time", types.SimpleNamespace(monotonic=lambda: clock[0], time=time.time))
    calls = []

    def child(script, kernel, limit, env, printer, record, phase="validate"):
        calls.append((phase, kernel, limit))
        spent = min(took[phase], limit)
        clock[0] += spent
        record.update(seconds=spent)
        if phase == "validate":
            record.update(validated=True)
        else:
            record["bench"].append({"family": "gemm", "shape": [8, 8, 8], "tflops": 1.0, "spot_check": {"passed": True},
                                    "time": {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0}})
        assert "CUDA_MODULE_LOADING" not in env          # _run_child sets it per phase

    monkeypatch.setattr(dc, "_run_child", child)
    monkeypatch.setattr(dc, "clocks", lambda: None)
    if estimate is not None:
        monkeypatch.setattr(device_plan, "estimate_s", estimate)
    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.setattr(device, "_DEFAULT", {})
    monkeypatch.setenv(device.DEVICE_ENV, "porter.runtime.fakedriver:rehearsal_device")
    try:
        rc = dc.run(tmp_path / "out", SCRIPT, budget_s=budget_s, prepared=tmp_path)
    finally:
        driver._init.cache_clear()
        driver.context.cache_clear()
    return rc, calls, json.loads((tmp_path / "out" / "results.json").read_text())


def test_the_budget_bounds_every_child_and_stops_starting_kernels(tmp_path, monkeypatch, capsys):
    """Each child's limit is what is left of the budget; under 10 s left, no kernel starts."""
    kernels = {f"k{i}": {"shapes": {"limit_s": 60.0, "validate": [], "bench": []}} for i in range(4)}
    rc, calls, results = _fake_run(tmp_path, monkeypatch, kernels, 60, {"validate": 25.0})
    assert [c[2] for c in calls] == [60.0, 35.0, 10.0] and rc == 1 and results["seconds"] <= 60
    assert [k.get("not_run") for k in results["kernels"]] == [None, None, None, "the run's 60 s budget is spent"]
    assert "NOT RUN" in capsys.readouterr().out.splitlines()[-4]


def test_every_kernel_validates_before_any_benchmark_and_ab_pairs_go_first(tmp_path, monkeypatch, capsys):
    """Validation of every form first; then the A/B pair (old form, then new), then the other
    benchmarks; a benchmark whose estimate no longer fits the budget is skipped, saying so."""
    from porter.runtime.device_plan import PREDICTED_LABEL

    shapes = {"limit_s": 60.0, "validate": [[8, 8, 8]], "bench": [[8, 8, 8]]}
    kernels = {"a": {"shapes": shapes}, "b": {"shapes": shapes},
               "c": {"shapes": shapes, "predicted": {"8x8x8": {"time_us": 800.0, "low": 700.0, "high": 900.0,
                                                                "label": PREDICTED_LABEL}}},
               "c[stages=2]": {"shapes": shapes, "form": {"kernel": "c", "role": "ab-old", "sets": ["stages=2"]},
                               "predicted": {"8x8x8": {"time_us": 1000.0, "low": 900.0, "high": 1100.0,
                                                       "label": PREDICTED_LABEL}}}}
    rc, calls, results = _fake_run(tmp_path, monkeypatch, kernels, 130, {"validate": 10.0, "bench": 30.0},
                                   estimate=lambda entry, phase, arch=None: 30.0)
    assert [(p, k) for p, k, _ in calls] == [("validate", "a"), ("validate", "b"), ("validate", "c"),
                                             ("validate", "c[stages=2]"), ("bench", "c[stages=2]"), ("bench", "c"),
                                             ("bench", "a")]
    k = _by_name(results)
    assert "budget leaves 30 s, this benchmark needs ~30 s" not in (k["a"].get("bench_skipped") or "")
    assert k["b"]["bench_skipped"].startswith("the run's 130 s budget leaves 0 s")
    assert k["c"]["decides"] == "A/B: c new form vs old (stages=2)"
    (ab,) = results["comparisons"]
    assert ab["kernel"] == "c" and ab["old"] == "c[stages=2]" and ab["predicted_speedup"] == pytest.approx(1.25)
    assert ab["predicted_label"] == PREDICTED_LABEL and ab["measured_speedup"] == pytest.approx(1.0)
    out = capsys.readouterr().out
    assert ab["predicted_speedup_range"] == pytest.approx([1.0, 1100 / 700])
    assert f"A/B c vs c[stages=2]: 1.00x measured (within noise), 1.25x [1.00-1.57] {PREDICTED_LABEL}" in out


def test_run_without_a_gpu_says_so_and_keeps_every_kernel_open(tmp_path, monkeypatch, capsys):
    from porter.runtime import device, device_check as dc

    m = _manifest(tmp_path)
    m["kernels"]["hopper/gemm.bf16"].update(level="sass-checked", shapes={"limit_s": 60.0})
    (tmp_path / cubins.MANIFEST).write_text(json.dumps(m))
    monkeypatch.setattr(device, "_DEFAULT", {})
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    assert dc.run(tmp_path / "out", SCRIPT, prepared=tmp_path) == 3
    out = capsys.readouterr().out
    assert "no CUDA device" in out and "device validation and benchmarks of hopper still open" in out
    results = json.loads((tmp_path / "out" / "results.json").read_text())
    assert results["kernels"] == [{"name": "gemm.bf16", "not_run": "no GPU", "checks": [], "bench": [],
                                   "level": "sass-checked"}]


def test_table_lines_are_compact():
    from porter.runtime.device_check import table_lines

    rows = [{"name": f"k{i}", "checks": [{"passed": True}] * 3, "bench": [], "level": "sass-checked",
             "validated": True, "seconds": 1.0} for i in range(7)]
    lines = table_lines({"arch": "hopper", "environment": {"gpu": "G"}, "kernels": rows, "seconds": 9.0, "out": "o"})
    assert len(lines) == 11 and lines[-1].startswith("7 of 7 kernels passed") and all(len(x) < 200 for x in lines)
    assert lines[-2].startswith("* predicted: predicted by porter's timing model, not measured")


def _bench_row(baseline):
    return {"family": "gemm", "shape": [8, 8, 8], "tflops": 700.0, "spot_check": {"passed": True},
            "time": {"median_ms": 1.0, "p10_ms": 1.0, "p90_ms": 1.0}, "baseline": baseline}


def test_a_validated_kernel_keeps_its_level_whatever_the_benchmark_or_its_baseline_did():
    """A baseline that raised is the baseline skipped (porter's timing kept: benchmarked); a
    benchmark child that failed after validation leaves the kernel device-validated."""
    from porter.runtime.device_check import _level, _status, table_lines

    raised = {"name": "gemm_baseline", "skipped": "the baseline raised RuntimeError: cuBLAS refused", "raised": "x"}
    ok = {"name": "g", "validated": True, "checks": [{"passed": True}], "bench": [_bench_row(raised)]}
    assert _level(ok, "sass-checked", False, "cuda") == "benchmarked" and _status(ok) == "passed"
    broke = {"name": "h", "validated": True, "checks": [{"passed": True}], "bench": [],
             "bench_error": {"kind": "bug", "message": "RuntimeError: torch"}}
    assert _level(broke, "sass-checked", False, "cuda") == "device-validated" and _status(broke) == "BENCH ERROR"
    assert _level(broke, "sass-checked", True, "cuda") == "sass-checked"            # a rehearsal claims nothing
    failed = {"name": "f", "validated": False, "checks": [{"passed": False}], "bench": []}
    assert _level(failed, "sass-checked", False, "cuda") == "sass-checked"
    for r in (ok, broke):
        r.update(level=_level(r, "sass-checked", False, "cuda"), seconds=1.0)
    lines = table_lines({"arch": "hopper", "environment": {"gpu": "G"}, "kernels": [ok, broke], "seconds": 2.0,
                         "out": "o"})
    assert any("baseline skipped: the baseline raised RuntimeError: cuBLAS refused" in x for x in lines)
    assert any("bench: RuntimeError: torch" in x for x in lines)


def test_one_failing_optional_query_is_not_no_gpu(monkeypatch):
    """The driver version and the clock rate are asked for on their own: one that fails (an
    attribute a newer driver dropped, an old driver) is recorded as unavailable, the GPU stays."""
    from porter.runtime import device, device_check as dc, driver, fakedriver

    gpu = fakedriver.FakeGPU("hopper")
    a = gpu.d.CUdevice_attribute
    real_attr = gpu.cuDeviceGetAttribute
    monkeypatch.setattr(gpu, "cuDriverGetVersion", lambda: gpu._err("CUDA_ERROR_NOT_SUPPORTED", 0))
    monkeypatch.setattr(gpu, "cuDeviceGetAttribute", lambda attr, dev: gpu._err("CUDA_ERROR_INVALID_VALUE", 0)
                        if attr == a.CU_DEVICE_ATTRIBUTE_CLOCK_RATE else real_attr(attr, dev))
    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.setattr(device, "_DEFAULT", {})
    fakedriver.install(gpu)
    try:
        env = dc._environment(device.CudaDevice())
    finally:
        driver._init.cache_clear()
        driver.context.cache_clear()
    assert env["gpu"] == fakedriver.DEVICE_NAME and env["compute_capability"] == [9, 0] and "why_no_gpu" not in env
    assert env["driver_cuda"] is None and "CUDA_ERROR_NOT_SUPPORTED" in env["unavailable"]["driver_cuda"]
    assert env["max_sm_clock_mhz"] is None and "CLOCK_RATE" in env["unavailable"]["max_sm_clock_mhz"]


def test_prepare_pairs_a_tuned_kernel_with_its_hand_chosen_form_and_an_ab_form(tmp_path, monkeypatch, hopper):
    """A kernel configured by a porter tune entry is prepared twice (tuned, and
    kernel[untuned]), a --ab form beside its kernel; benchmarks: A/B first, then tuned vs
    default, each form with its prediction; the timeline says what --budget drops."""
    import yaml

    from porter.runtime import device_check as dc, device_plan
    from porter.tuning import digests

    # the entry is fresh (its source hash is porter tune's business, tested there)
    monkeypatch.setattr(digests, "source_hash", lambda *args, **kwargs: "fresh")
    tuning = tmp_path / "tuning"
    tuning.mkdir()
    (tuning / "hopper.yaml").write_text(yaml.safe_dump({"kernels": {"gemm.bf16": {
        "default_bucket": "b", "source_hash": "fresh",
        "buckets": {"b": {"knobs": {"stages": 3}}}}}}))
    monkeypatch.setenv("PORTER_TUNING_DIR", str(tuning))
    monkeypatch.setattr(device_plan, "AB_FORMS", ())   # only the --ab form here
    said = []
    assert dc.prepare(tmp_path / "prep", profile="rehearsal", fallback=False, kernels=["gemm.bf16", "gemm.fp8"],
                      ab=["gemm.fp8:stages=4"], echo=said.append) == 0, said
    m = json.loads((tmp_path / "prep" / cubins.MANIFEST).read_text())
    runs = {k.split("/", 1)[1]: e for k, e in m["kernels"].items()}
    assert set(runs) == {"gemm.bf16", "gemm.bf16[untuned]", "gemm.fp8", "gemm.fp8[stages=4]"}
    assert runs["gemm.bf16"]["spec"]["config"] != runs["gemm.bf16[untuned]"]["spec"]["config"]
    assert runs["gemm.bf16"]["form"]["tuned"].endswith("bucket b")
    assert runs["gemm.bf16[untuned]"]["form"]["role"] == "tuned-default" and "gemm.bf16" in m["tuned"]
    for e in runs.values():
        pred = next(iter(e["predicted"].values()))
        assert pred.get("label") == device_plan.PREDICTED_LABEL or pred.get("unavailable"), pred
    order = [i["run"] for i in device_plan.bench_order(runs)]
    assert order == ["gemm.fp8[stages=4]", "gemm.fp8", "gemm.bf16[untuned]", "gemm.bf16"]
    lines = dc.plan_lines(m, budget_s=30)
    assert lines[0].startswith("phase") and sum(x.startswith("validate") for x in lines) == 4
    assert any("over the --budget: not run" in x for x in lines) and "against a 30 s budget" in lines[-1]
    cubins.check_manifest(m, "hopper", tmp_path / "prep", sources=False)


@pytest.mark.slow
def test_rehearse_on_a_snapshot_with_the_gpu_machines_cuda_bindings(tmp_path):
    """``rehearse --snapshot`` with PORTER_GPU_BINDINGS (a folder holding cuda-bindings 13.0,
    the GPU machine's): the default behaviours, the source check on, every driver call
    through that version's argument conversion."""
    from porter.runtime.device_check import GPU_BINDINGS_ENV, _status

    folder = os.environ.get(GPU_BINDINGS_ENV)
    if not folder or not (Path(folder) / "cuda" / "bindings").is_dir():
        pytest.skip(f"{GPU_BINDINGS_ENV} names no folder with cuda-bindings 13.0 "
                    "(pip install --target DIR cuda-bindings==13.0.3)")
    env = dict(os.environ)
    for key in ("PORTER_DEVICE", cubins.CUBIN_DIR_ENV, "PORTER_REHEARSAL", "PORTER_REHEARSAL_REFUSE"):
        env.pop(key, None)
    done = subprocess.run([sys.executable, str(SCRIPT), "rehearse", "--snapshot", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600, env=env, cwd=ROOT)
    assert "rehearsal with cuda-bindings 13.0" in done.stdout, done.stdout[-2000:] + done.stderr[-2000:]
    results = json.loads((tmp_path / "results" / "results.json").read_text())
    assert results["environment"]["cuda_bindings"].startswith("13.0")
    status = {k["name"]: _status(k) for k in results["kernels"]}
    assert status == {"gemm.bf16": "passed", "gemm.fp8": "passed", "attention.hd64": "FAILED",
                      "attention.hd64.causal": "FAULT", "attention.hd128": "passed",
                      "attention.hd128.causal": "HANG", "megakernel.llama-decode": "passed"}, status
    assert done.returncode == 1


def test_a_shared_ab_row_for_a_knob_the_arch_lacks_is_skipped_not_failed(hopper, blackwell):
    # AB_FORMS is one table for every arch: q_tiles is a knob of tcgen05 attention only, so on
    # Hopper prepare skips that row (it used to record it as a failed build)
    from porter.commands.kernel import find_kernel
    from porter.runtime import device_plan
    from porter.runtime.device_check import _has_knobs

    assert ("attention.hd128", ("q_tiles=2",)) in {(k, s) for k, s, _ in device_plan.AB_FORMS}
    assert not _has_knobs(hopper, find_kernel("attention.hd128", hopper)[0], ("q_tiles=2",))
    assert _has_knobs(blackwell, find_kernel("attention.hd128", blackwell)[0], ("q_tiles=2",))
    assert _has_knobs(hopper, find_kernel("attention.hd128", hopper)[0], ("o_store=tma", "tile_order=q_inner"))
