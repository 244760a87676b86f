"""The device harness without a GPU: poisoning and the written check, judging, inputs per
variant, L2 rotation sizing, statistics, the timing loop (fake events), and the launch
plans the device runs would use (tensor maps, tiles, arenas) for every default shape."""
from __future__ import annotations

import types

import ml_dtypes
import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.runtime import timing
from porter.validation import device_harness as dh
from porter.runtime import device_runs as dr
from porter.validation import quantize, reference_gemm




# ---- poison and judging --------------------------------------------------------------------

def _gemm_case(variant="bf16", m=64, n=64, k=128, seed=3):
    inp = dh.gemm_inputs(variant, m, n, k, seed)
    ref_same, ref_unq = inp.references()
    good = reference_gemm.gemm_model(inp.qa, inp.qb, mma_k=reference_gemm.DEFAULT_MMA_K[variant])
    return good.astype(np.float32).astype(ml_dtypes.bfloat16), ref_same, ref_unq


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
def test_correct_gemm_output_passes(variant):
    out, ref_same, ref_unq = _gemm_case(variant)
    res = dh.compare_gemm(variant, out, ref_same, ref_unq)
    assert res["passed"], res
    assert res["written"]["unwritten"] == 0


def test_unwritten_gemm_element_fails():
    out, ref_same, ref_unq = _gemm_case()
    dh.poison_host(out[5:6, 7:8])               # one element the "kernel" never wrote
    res = dh.compare_gemm("bf16", out, ref_same, ref_unq)
    assert not res["passed"]
    assert res["written"]["unwritten"] == 1 and res["written"]["first_unwritten"] == [5, 7]


def test_written_nan_fails_but_is_not_counted_unwritten():
    out, ref_same, ref_unq = _gemm_case()
    out[0, 0] = np.nan                          # a quiet NaN (0x7FC0), not the poison pattern
    res = dh.compare_gemm("bf16", out, ref_same, ref_unq)
    assert not res["passed"]
    assert res["written"]["unwritten"] == 0 and res["written"]["nonfinite_written"] == 1


def test_wrong_gemm_output_fails():
    out, ref_same, ref_unq = _gemm_case()
    bad = (out.astype(np.float32) * 1.01).astype(ml_dtypes.bfloat16)
    assert not dh.compare_gemm("bf16", bad, ref_same, ref_unq)["passed"]


def test_poison_pattern_per_dtype():
    for dtype in (ml_dtypes.bfloat16, np.float32, np.int32, np.uint8):
        a = dh.poison_host(np.zeros(7, dtype=dtype))
        assert dh.unwritten_mask(a).all()
        a[3] = 0
        assert dh.unwritten_mask(a).sum() == 6
    f = dh.poison_host(np.zeros(2, dtype=np.float32))
    assert np.isnan(f).all()                    # poison is a NaN: it can never pass a tolerance


def test_attention_compare(hopper):
    from porter.validation.reference_attention import attention_same_precision, reference_attention

    q, k, v = (x.astype(np.float64) for x in dh.attention_inputs(1, 2, 1, 40, 72, 64, seed=5))
    ref, lse_ref = reference_attention(q, k, v, causal=True)
    same, _ = attention_same_precision(q, k, v, causal=True)
    out = ref.astype(np.float32).astype(ml_dtypes.bfloat16)
    lse = lse_ref.astype(np.float32)
    assert dh.compare_attention(out, lse, ref, lse_ref, same)["passed"]
    lse_bad = lse.copy()
    dh.poison_host(lse_bad[0, 1, 3:4])
    res = dh.compare_attention(out, lse_bad, ref, lse_ref, same)
    assert not res["passed"] and res["written"][1]["unwritten"] == 1


def test_decode_step_compare():
    ref = np.linspace(-3, 5, 50)
    rows = {"cache.k.0": np.ones(8)}
    cache = {"cache.k.0": np.ones(8, dtype=ml_dtypes.bfloat16)}
    kw = dict(logits_rtol=1e-2, cache_rtol=2 ** -8, cache_row_rtol=2 ** -9)
    logits = ref.astype(np.float32)
    assert dh.compare_decode_step(logits, 49, cache, ref, rows, **kw)["passed"]
    assert not dh.compare_decode_step(logits, 3, cache, ref, rows, **kw)["passed"]       # wrong token
    poisoned = dh.poison_host(logits.copy()[:])
    assert not dh.compare_decode_step(poisoned, 49, cache, ref, rows, **kw)["passed"]
    stale = {"cache.k.0": dh.poison_host(np.ones(8, dtype=ml_dtypes.bfloat16))}
    res = dh.compare_decode_step(logits, 49, stale, ref, rows, **kw)
    assert not res["passed"] and res["cache_unwritten"] == 8


# ---- inputs -----------------------------------------------------------------------------------

def test_gemm_inputs_layout_per_variant():
    m, n, k = 64, 128, 256
    bf = dh.gemm_inputs("bf16", m, n, k, 1)
    assert bf.a.dtype == ml_dtypes.bfloat16 and bf.a.shape == (m, k) and bf.scales is None
    f8 = dh.gemm_inputs("fp8", m, n, k, 1)
    assert f8.a.dtype == np.uint8 and f8.scale_a == pytest.approx(float(f8.qa.tensor_scale))
    mx = dh.gemm_inputs("mxfp8", m, n, k, 1)
    assert [s.shape for s in mx.scales] == [(m, k // 32), (n, k // 32)] and mx.scale_a == 1.0
    nv = dh.gemm_inputs("nvfp4", m, n, k, 1)
    assert nv.a.shape == (m, k // 2) and [s.shape for s in nv.scales] == [(m, k // 16), (n, k // 16)]
    assert np.array_equal(quantize.unpack_fp4(nv.a), nv.qa.codes)


def test_fresh_inputs_per_seed_and_shape():
    a = dh.gemm_inputs("bf16", 32, 32, 64, dh.seed_for((32, 32, 64), 0)).a
    b = dh.gemm_inputs("bf16", 32, 32, 64, dh.seed_for((32, 32, 64), 1)).a
    assert not np.array_equal(a.view(np.uint16), b.view(np.uint16))
    assert len({dh.seed_for(s, r) for s in ((1, 2, 3), (3, 2, 1)) for r in range(3)}) == 6


def test_bench_fp8_fast_path_matches_quantizer():
    fast = dh.bench_gemm_inputs("fp8", 64, 96, 512, seed=11)
    for codes, x, scale in ((fast.a, fast.a_f32, fast.scale_a), (fast.b, fast.b_f32, fast.scale_b)):
        slow = quantize.quantize_per_tensor(x, "e4m3")
        assert np.array_equal(codes, slow.codes)
        assert scale == pytest.approx(float(slow.tensor_scale), rel=0)


# ---- rotation and statistics -------------------------------------------------------------------

def test_rotation_sets_follow_the_descriptors_l2(hopper, blackwell):
    big = 3 * 8192 * 8192 * 2                           # bf16 A, B, C at 8192^3
    assert timing.rotation_sets(big, hopper.l2_bytes) == 1
    small = 3 * 256 * 256 * 2
    assert timing.rotation_sets(small, hopper.l2_bytes) == timing.MAX_ROTATION_SETS
    mid = 24 << 20
    n_h, n_b = timing.rotation_sets(mid, hopper.l2_bytes), timing.rotation_sets(mid, blackwell.l2_bytes)
    assert n_h * mid >= timing.ROTATE_L2_FACTOR * hopper.l2_bytes > (n_h - 1) * mid
    assert n_b > n_h                                    # a bigger L2 needs more sets
    assert timing.rotation_sets(3 << 30, hopper.l2_bytes) == 1
    assert timing.rotation_sets(100 << 20, 10 << 30, budget_bytes=1 << 30) == 10     # memory budget caps
    assert "warm L2" in timing.rotation_note(1, 1 << 20, hopper.l2_bytes)
    with pytest.raises(PorterError):
        timing.rotation_sets(0, hopper.l2_bytes)


def test_summarize_median_and_spread():
    s = timing.summarize([1.0, 2.0, 3.0, 4.0, 100.0])
    assert s["median_ms"] == 3.0 and s["n"] == 5 and s["min_ms"] == 1.0 and s["max_ms"] == 100.0
    p10, p90 = np.percentile([1, 2, 3, 4, 100], [10, 90])
    assert s["spread"] == pytest.approx((p90 - p10) / 3.0)
    flat = timing.summarize([2.0] * 9)
    assert flat["spread"] == 0.0 and flat["median_ms"] == 2.0
    assert timing.rate(2e12, {"median_ms": 2.0}) == pytest.approx(1e15)
    for bad in ([], [1.0, float("nan")], [-1.0]):
        with pytest.raises(PorterError):
            timing.summarize(bad)


def test_distinguishable():
    a = timing.summarize([1.0, 1.01, 0.99, 1.0])
    b = timing.summarize([1.2, 1.21, 1.19, 1.2])
    c = timing.summarize([1.005, 1.0, 1.01, 0.995])
    assert timing.distinguishable(a, b) and not timing.distinguishable(a, c)


class FakeEvents:
    """Events whose elapsed time is the launch's set index + 1 ms; records the call order."""

    def __init__(self):
        self.log, self.t = [], 0

    def event(self):
        return {"t": None}

    def record(self, ev):
        ev["t"] = self.t
        self.log.append("rec")

    def elapsed_ms(self, s, e):
        return float(e["t"] - s["t"])

    def synchronize(self):
        self.log.append("sync")

    def destroy(self, ev):
        pass


def test_time_launches_warms_up_rotates_and_times_each_launch():
    ev = FakeEvents()
    seen, before = [], []

    def enqueue(i):
        seen.append(i)
        ev.t += i + 1

    stats = timing.time_launches(enqueue, ev, warmup=4, reps=6, sets=3, before=before.append, warmup_ms=0)
    assert seen == [0, 1, 2, 0] + [0, 1, 2, 0, 1, 2]
    assert before == seen                               # untimed set-up before every launch
    assert ev.log[:1] == ["sync"] and ev.log[-1] == "sync"   # warm-up drained before timing
    assert stats["n"] == 6 and stats["median_ms"] == 2.0 and stats["min_ms"] == 1.0
    with pytest.raises(PorterError):
        timing.time_launches(enqueue, ev, reps=0)


def test_warm_up_runs_by_device_time_and_rounds_merge():
    ev = FakeEvents()
    seen = []

    def enqueue(i):
        seen.append(i)
        ev.t += 1                                       # 1 ms a launch

    stats = timing.time_launches(enqueue, ev, warmup=2, reps=30, warmup_ms=50)
    assert stats["warmup_launches"] >= 50 and stats["warmup_ms"] >= 50 and len(seen) == stats["warmup_launches"] + 30
    capped = timing.time_launches(enqueue, ev, warmup=2, reps=3, warmup_ms=1e9, max_warmup=20)
    assert capped["warmup_launches"] == 20
    other = dict(stats, samples_ms=[2.0] * 30, median_ms=2.0)
    merged = timing.merge_timings(stats, other)
    assert merged["n"] == 60 and merged["rounds_median_ms"] == [1.0, 2.0] and merged["drift"] == 1.0


# ---- device selection (stand-in capabilities) ------------------------------------------------

H200 = {"index": 0, "name": "NVIDIA H200", "compute_capability": [9, 0]}
B200 = {"index": 0, "name": "NVIDIA B200", "compute_capability": [10, 0]}


def test_match_device(hopper, blackwell):
    assert dr.match_device(hopper, [H200]) == (H200, "")
    dev, why = dr.match_device(blackwell, [H200])
    assert dev is None and "compute capability mismatch" in why and "sm_100a" in why and "9.0" in why
    dev, why = dr.match_device(hopper, [], "the driver sees no GPU")
    assert dev is None and why.startswith("no CUDA device")
    assert dr.match_device(blackwell, [H200, dict(B200, index=1)])[0]["index"] == 1


def test_require_device(hopper, blackwell):
    assert dr.require_device(hopper, [H200]) is H200
    with pytest.raises(dr.NoDevice, match="compute capability mismatch") as exc:
        dr.require_device(blackwell, [H200])
    assert exc.value.exit_code == 3
    with pytest.raises(dr.NoDevice, match="CUDA_VISIBLE_DEVICES=1"):
        dr.require_device(blackwell, [H200, dict(B200, index=1)])


# ---- launch plans for every default shape (what a GPU run would encode) -------------------------

def _fake_inputs(variant, m, n, k):
    """Operands with the right dtypes and shapes, no data (plans never read the data)."""
    dt = ml_dtypes.bfloat16 if variant == "bf16" else np.uint8
    a, b = np.empty((m, k), dtype=dt), np.empty((n, k), dtype=dt)
    return dh.GemmInputs(variant, m, n, k, a, b, None, 1.0, 1.0, None, None, a, b)


def _gemm_specs(arch):
    from porter.kernels import gemm
    from porter.kernels.base import KernelSpec

    return [s for s in gemm.variants(arch) if isinstance(s, KernelSpec)]


@pytest.mark.parametrize("arch_name", ["hopper", "blackwell"])
def test_gemm_plans_for_default_shapes(arch_name):
    from porter.kernels import gemm

    arch = load_arch(arch_name)
    buf = types.SimpleNamespace(ptr=1 << 20)
    for spec in _gemm_specs(arch):
        variant = spec.variant.split(".")[1]
        shapes = [dr._fit(s, gemm.shape_multiples(spec)) for s in dr.GEMM_VALIDATE_SHAPES] + list(dr.GEMM_BENCH_SHAPES)
        for shape in shapes:
            if variant in ("bf16", "fp8"):
                inp = _fake_inputs(variant, *shape)
            elif shape == shapes[0]:
                inp = dh.gemm_inputs(variant, *shape, seed=0)   # block scales need real codes
            else:
                continue
            plan = dr.gemm_plan(spec, arch, inp, buf, buf, buf)
            assert (plan.m, plan.n, plan.k) == shape and plan.spec.entry == spec.entry
            assert {p for p, c in plan.params if c == "TmaDescriptor"} <= set(plan.maps)
            assert 1 <= plan.grid and plan.block == spec.threads


def test_gemm_plan_rejects_untiled_shape(hopper):
    spec = _gemm_specs(hopper)[0]
    buf = types.SimpleNamespace(ptr=1 << 20)
    with pytest.raises(PorterError, match="multiple of"):
        dr.gemm_plan(spec, hopper, _fake_inputs("bf16", 100, 256, 256), buf, buf, buf)


def test_attention_plans_for_default_shapes(hopper):
    from porter.kernels import attention
    from porter.kernels.base import KernelSpec

    specs = [s for s in attention.variants(hopper) if isinstance(s, KernelSpec)]
    assert specs
    for spec in specs:
        d = spec.config["head_dim"]
        for b, hq, hkv, sq, sk in dr.ATTENTION_VALIDATE_SHAPES + dr.ATTENTION_BENCH_SHAPES:
            q = np.empty((b, hq, sq, d), dtype=ml_dtypes.bfloat16)
            kv = np.empty((b, hkv, sk, d), dtype=ml_dtypes.bfloat16)
            plan, host, maps = dr.attention_plan(spec, hopper, q, kv, kv)
            assert set(maps) == {"tma_q", "tma_k", "tma_v"}
            assert plan["grid"][0] <= hopper.sm_count
            assert all(x.shape[0] >= plan["tensor_maps"][p]["box"][1] for p, x in host.items())


def test_attention_flops():
    full = dr.attention_flops(1, 1, 128, 128, 64, causal=False)
    assert full == 4 * 128 * 128 * 64
    causal = dr.attention_flops(1, 1, 128, 128, 64, causal=True)
    assert causal == 4 * 64 * (128 * 129 // 2)
    assert dr.attention_flops(1, 1, 160, 100, 64, causal=True) == 4 * 64 * (100 * 101 // 2)  # 60 rows see nothing


def test_megakernel_arena_is_poisoned_where_the_step_writes(hopper):
    from porter.kernels import megakernel
    from porter.megakernel.plan import build_plan

    inp = megakernel.step_inputs("tiny", pos=10, seed=0)
    program = build_plan(hopper, inp["cfg"], pos=10, token=inp["token"])["program"]
    clean = megakernel.host_arena(program, inp["cfg"], inp["weights"], inp["caches"])
    arena = dr.poisoned_arena(program, inp["cfg"], inp["weights"], inp["caches"], pos=10)
    for t in program.tensors:
        got, want = arena[t.offset:t.offset + t.nbytes], clean[t.offset:t.offset + t.nbytes]
        if t.kind in ("weight", "table"):
            assert np.array_equal(got, want), t.name
        elif t.kind == "cache":
            row = t.nbytes // t.shape[0]
            assert np.array_equal(got[:10 * row], want[:10 * row]), t.name
            assert (got[10 * row:] == dh.POISON_BYTE).all(), t.name
        else:
            assert (got == dh.POISON_BYTE).all(), t.name


# ---- the device runs end to end on the rehearsal GPU ---------------------------------------------
# porter.runtime.fakedriver: every driver call goes through the real cuda.bindings argument
# conversion first, then a host-memory GPU whose kernels compute from the tensor maps
# and pointers they are given. It proves the harness's plumbing: uploads, tensor maps,
# argument packing, poisoning, read-back, judging and the timing loop; a kernel that
# computes a wrong result, or none, must fail validation.


@pytest.fixture
def rehearsal_gpu(monkeypatch):
    from porter.runtime import cubins, device, driver, fakedriver

    monkeypatch.setattr(driver, "bindings", driver.bindings)      # restored after the test
    monkeypatch.delenv(fakedriver.REHEARSAL_ENV, raising=False)
    gpu = fakedriver.FakeGPU("hopper")
    fakedriver.install(gpu)
    monkeypatch.setattr(device, "_DEFAULT", {})
    monkeypatch.setattr(cubins, "candidates", lambda spec, arch: iter([("test cubin", b"\x7fELF test")]))
    yield gpu
    driver._init.cache_clear()
    driver.context.cache_clear()


@pytest.mark.parametrize("name", ["gemm.bf16", "gemm.fp8"])
def test_validate_gemm_on_the_rehearsal_gpu(rehearsal_gpu, hopper, name):
    from porter.commands.kernel import find_kernel

    spec = find_kernel(name, hopper)[0]
    checks = dr.validate_gemm(spec, hopper, shapes=[(256, 256, 256), (512, 256, 384)], seeds=2)
    assert len(checks) == 4 and all(c["passed"] for c in checks), checks
    assert len({c["seed"] for c in checks}) == 4 and rehearsal_gpu.launches == [name] * 4
    assert rehearsal_gpu.last["cluster"] == tuple(spec.cluster) and rehearsal_gpu.last["smem_bytes"] == spec.smem_bytes
    rehearsal_gpu.behaviours[name] = "fail"
    bad = dr.validate_gemm(spec, hopper, shapes=[(256, 256, 256)], seeds=1)
    assert not bad[0]["passed"] and bad[0]["written"]["unwritten"] == 0


def test_a_refused_cluster_attribute_is_retried_without_it_and_said(rehearsal_gpu, monkeypatch, hopper):
    from porter.commands.kernel import find_kernel
    from porter.runtime import device, driver

    monkeypatch.setattr(driver, "_COMPILED_CLUSTER", set())
    spec = find_kernel("gemm.bf16", hopper)[0]
    rehearsal_gpu.refuse_cluster_attribute = True
    checks = dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1)
    assert checks[0]["passed"] and rehearsal_gpu.last["cluster"] == (1, 1, 1)
    note = device.get_device().load_notes[-1]
    assert "the driver refused the cluster launch attribute (2, 1, 1)" in note and "CUDA_ERROR_INVALID_VALUE" in note
    monkeypatch.setattr("porter.runtime.baselines.torch_cuda", lambda: (None, "no torch here"))
    monkeypatch.setenv(timing.WARMUP_ENV, "5")
    row = dr.bench_gemm(spec, hopper, shapes=[(256, 256, 64)])[0]         # the bench reuses what validation learnt
    assert row["spot_check"]["passed"]
    rehearsal_gpu.refuse_cluster_attribute = False


def test_bench_gemm_on_the_rehearsal_gpu(rehearsal_gpu, monkeypatch, hopper):
    from porter.commands.kernel import find_kernel
    from porter.runtime import fakedriver

    spec = find_kernel("gemm.bf16", hopper)[0]
    monkeypatch.setattr(timing, "MAX_ROTATION_SETS", 3)
    monkeypatch.setenv(timing.WARMUP_ENV, "10")
    monkeypatch.setattr("porter.runtime.baselines.torch_cuda", lambda: (None, "no torch here"))
    rows = dr.bench_gemm(spec, hopper, shapes=[(256, 256, 256)])
    row = rows[0]
    modelled_ms = max(2 * 256 ** 3 / fakedriver.MODEL_FLOPS_PER_S * 1e3, fakedriver.MODEL_MIN_LAUNCH_MS)
    assert row["spot_check"]["passed"] and row["time"]["n"] == timing.TIMED_LAUNCHES
    assert row["time"]["median_ms"] == pytest.approx(modelled_ms)
    assert row["tflops"] == pytest.approx(2 * 256 ** 3 / (modelled_ms * 1e-3) / 1e12)
    assert row["baseline"]["skipped"] == "no torch here" and "pct_of_baseline" not in row
    assert "3 input set(s)" in row["rotation"] and "warm L2" in row["rotation"]
    assert row["pct_of_peak"] == pytest.approx(100 * row["tflops"] / hopper.peak_tflops["bf16"])


def test_bench_attention_judges_a_poisoned_final_launch_and_flushes_the_l2(rehearsal_gpu, monkeypatch, hopper):
    from porter.commands.kernel import find_kernel

    spec = find_kernel("attention.hd64", hopper)[0]
    monkeypatch.setattr(timing, "MAX_ROTATION_SETS", 2)
    monkeypatch.setenv(timing.WARMUP_ENV, "10")
    monkeypatch.setattr("porter.runtime.baselines.torch_cuda", lambda: (None, "no torch here"))
    row = dr.bench_attention(spec, hopper, shapes=[(1, 2, 2, 128, 128)])[0]
    assert row["spot_check"]["passed"] and "L2 flushed before each timed launch" in row["rotation"]
    assert row["time"]["warmup_ms"] >= 10 and row["time"]["n"] == timing.TIMED_LAUNCHES
    rehearsal_gpu.behaviours[spec.name] = "skip@2"        # writes its output only on the first launch
    bad = dr.bench_attention(spec, hopper, shapes=[(1, 2, 2, 128, 128)])[0]
    o = bad["spot_check"]["written"][0]
    assert not bad["spot_check"]["passed"] and o["unwritten"] == o["elements"]


def test_validate_attention_on_the_rehearsal_gpu(rehearsal_gpu, hopper):
    from porter.commands.kernel import find_kernel

    spec = find_kernel("attention.hd64.causal", hopper)[0]
    checks = dr.validate_attention(spec, hopper, shapes=[(1, 2, 1, 160, 100), (1, 2, 2, 64, 64), (1, 2, 1, 1024, 96)],
                                   seeds=1)
    assert [c["passed"] for c in checks] == [True, True, True], checks


def test_the_megakernel_passes_on_the_rehearsal_gpu(rehearsal_gpu, hopper):
    """The rehearsal GPU runs the step with porter's megakernel VM on the arena the launch
    points at (instructions, tensor table, counters): a correct step passes, one lost
    signal fails on the counters."""
    from porter.kernels import megakernel

    spec = megakernel.variants(hopper)[0]
    c = dr.validate_megakernel(spec, hopper, shapes=["tiny"], seeds=1)[0]
    assert c["passed"] and c["counters_ok"], c
    rehearsal_gpu.behaviours[spec.name] = "fail"
    c = dr.validate_megakernel(spec, hopper, shapes=["tiny"], seeds=1)[0]
    assert not c["passed"] and not c["counters_ok"]


def test_validate_megakernel_on_the_rehearsal_gpu_catches_an_idle_kernel(rehearsal_gpu, hopper):
    from porter.kernels import megakernel

    spec = megakernel.variants(hopper)[0]
    rehearsal_gpu.behaviours[spec.name] = "skip"
    checks = dr.validate_megakernel(spec, hopper, shapes=["tiny"], seeds=1)
    c = checks[0]
    assert not c["passed"] and not c["counters_ok"]
    assert rehearsal_gpu.last["cooperative"] is True                   # persistent CTAs wait on each other
    assert c["written"]["unwritten"] == c["written"]["elements"] and c["cache_unwritten"] > 0


def test_a_fault_is_sticky_and_a_hang_is_named(rehearsal_gpu, hopper):
    from porter.commands.kernel import find_kernel
    from porter.runtime import device
    from porter.runtime.device import KernelFault, KernelHang

    spec = find_kernel("gemm.bf16", hopper)[0]
    rehearsal_gpu.behaviours[spec.name] = "hang"
    device.get_device().launch_timeout_s = 0.2
    with pytest.raises(KernelHang, match=r"gemm.bf16 execution: still running after 0 s \(watchdog\)"):
        dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1)
    rehearsal_gpu.hung, rehearsal_gpu.behaviours[spec.name] = False, "fault"
    with pytest.raises(KernelFault, match="CUDA_ERROR_ILLEGAL_ADDRESS"):
        dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1)
    with pytest.raises(KernelFault, match="cuMemAlloc"):               # the context is lost
        device.get_device().alloc(16)


def test_after_a_hang_nothing_is_freed(rehearsal_gpu, hopper):
    """cuMemFree may synchronise on a hung kernel and never return (the rehearsal GPU's blocks
    forever): once a kernel hung or faulted, buffers are dropped without it."""
    import threading

    from porter.commands.kernel import find_kernel
    from porter.runtime import device, driver
    from porter.runtime.device import KernelHang

    spec = find_kernel("gemm.bf16", hopper)[0]
    buf = device.get_device().alloc(64)
    rehearsal_gpu.behaviours[spec.name] = "hang"
    device.get_device().launch_timeout_s = 0.2
    with pytest.raises(KernelHang):
        dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1)
    assert "still running" in driver.context_lost()
    freed = threading.Thread(target=buf.free, daemon=True)
    freed.start()
    freed.join(5)
    assert not freed.is_alive() and buf.ptr == 0
    blocked = threading.Thread(target=rehearsal_gpu.cuMemFree, args=(1 << 20,), daemon=True)
    blocked.start()                                 # the model: the driver's own free would block
    blocked.join(0.5)
    assert blocked.is_alive()


def test_a_baseline_that_raises_keeps_porters_timing(rehearsal_gpu, monkeypatch, hopper):
    from porter.commands.kernel import find_kernel
    from porter.runtime import baselines

    def broken(*args, **kwargs):
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED")

    monkeypatch.setattr(baselines, "gemm_baseline", broken)
    monkeypatch.setattr(baselines, "attention_baseline", broken)
    monkeypatch.setenv(timing.WARMUP_ENV, "5")
    monkeypatch.setattr(timing, "MAX_ROTATION_SETS", 2)
    row = dr.bench_gemm(find_kernel("gemm.bf16", hopper)[0], hopper, shapes=[(256, 256, 64)])[0]
    assert row["tflops"] > 0 and row["spot_check"]["passed"] and row["time"]["n"] == timing.TIMED_LAUNCHES
    assert row["baseline"]["skipped"] == "the baseline raised RuntimeError: CUDA error: CUBLAS_STATUS_NOT_SUPPORTED"
    assert "pct_of_baseline" not in row
    row = dr.bench_attention(find_kernel("attention.hd64", hopper)[0], hopper, shapes=[(1, 2, 2, 128, 128)])[0]
    assert row["tflops"] > 0 and row["spot_check"]["passed"] and "raised RuntimeError" in row["baseline"]["skipped"]


def test_bench_qkv_is_fast_random_and_seeded(monkeypatch):
    monkeypatch.setattr(dr, "BENCH_POOL", 1 << 12)
    q, k, v = dr._bench_qkv(1, 2, 1, 4096, 2048, 64, seed=3)           # q past the pool: tiled from it
    assert q.shape == (1, 2, 4096, 64) and k.shape == v.shape == (1, 1, 2048, 64)
    vals = q.astype(np.float32)
    assert np.isfinite(vals).all() and 0.9 < np.std(vals) < 1.1 and not np.array_equal(k, v)
    q2, _, _ = dr._bench_qkv(1, 2, 1, 4096, 2048, 64, seed=3)
    assert np.array_equal(q.view(np.uint16), q2.view(np.uint16))


def test_bench_weights_look_like_random_weights():
    from porter.validation.model_config import load_model_config
    from porter.validation.weights import random_weights

    cfg = load_model_config("tiny")
    fast, slow = dr.bench_weights(cfg, seed=1, pool_size=1 << 16), random_weights(cfg, seed=1)
    assert sorted(fast) == sorted(slow)
    for name, w in fast.items():
        assert w.shape == slow[name].shape and w.dtype == slow[name].dtype
        vals = w.astype(np.float32)
        assert np.isfinite(vals).all() and np.count_nonzero(vals) > 0.99 * vals.size   # never time on zeros
        assert np.std(vals) == pytest.approx(np.std(slow[name].astype(np.float32)), rel=0.2)


def test_roofline(hopper):
    big = dr.roofline_tflops(2.0 * 8192 ** 3, 3 * 8192 ** 2 * 2, hopper, "bf16")
    assert big == hopper.peak_tflops["bf16"]                      # compute-bound: the peak
    thin = dr.roofline_tflops(2.0 * 8192 * 8192 * 16, (8192 * 16 * 2 + 8192 * 16 * 2 + 8192 * 8192 * 2),
                              hopper, "bf16")
    assert thin < hopper.peak_tflops["bf16"]                      # K=16: bound by HBM bandwidth
    assert thin == pytest.approx(2.0 * 8192 * 8192 * 16 / (8192 * 16 * 4 + 8192 * 8192 * 2)
                                 * hopper.hbm_bandwidth_bytes_per_s / 1e12)
    assert dr.roofline_tflops(1.0, 1.0, hopper, "fp4") is None    # no fp4 rate on Hopper
