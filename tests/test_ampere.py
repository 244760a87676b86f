"""Ampere (A100, sm_80): the descriptor loads, and the compiler agrees with every claim."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.descriptor.probes import NOT_JUDGED, check_arch, discover


@pytest.fixture(scope="module")
def arch():
    return load_arch("ampere")


@pytest.fixture(scope="module")
def check(arch):
    return check_arch(arch)


def test_descriptor_figures(arch):
    assert arch.target == "sm_80" and arch.compute_capability == (8, 0)
    assert arch.features == {"mma_sync", "cp_async"}
    for lacking in ("wgmma", "tcgen05", "tmem", "tma", "mbarrier", "clusters", "dsmem", "cta_pair",
                    "fp8", "setmaxnreg"):
        assert not arch.has(lacking), lacking
    tc = arch.tensor_core
    assert (tc.generation, tc.issue, tc.accumulator) == ("mma_sync", "warp", "registers")
    assert tc.valid_shape("f16", 16, 8) and tc.k_of("f16") == 16 and tc.k_of("tf32") == 8
    assert arch.sm_count == 108 and arch.smem_per_block_bytes == 163 * 1024
    assert arch.cluster.max_portable == 1
    # 312 TFLOP/s over 2.039 TB/s: the ridge sits near 153 FLOP/byte.
    assert arch.ridge_flop_per_byte("bf16") == pytest.approx(312e12 / 2.039e12)
    assert not arch.block_scales and "e4m3" not in arch.formats


def test_arch_check_agrees(check):
    assert check.ok, check.contradictions
    r = {p.probe: p for p in check.probes}
    assert r["mma_sync_bf16"].verdict == "confirmed"
    assert r["cp_async"].verdict == "confirmed"
    assert any(op.startswith("LDGSTS") for ops in r["cp_async"].sass_found.values() for op in ops)
    # Everything sm_90 brought is rejected by ptxas for sm_80, because of the target.
    for probe in ("tma_load", "mbarrier", "cluster_barrier", "dsmem", "wgmma_bf16", "setmaxnreg",
                  "tcgen05_f16", "cvt_fp8", "mma_sync_f8f6f4"):
        assert r[probe].verdict == "denied-confirmed", (probe, r[probe].verdict)
    features = {f.feature: f for f in check.features}
    assert features["mma_sync"].verdict == "confirmed" and features["mma_sync"].signature_seen_in
    assert features["cp_async"].verdict == "confirmed"
    assert check.kinds_without_probe == []     # f16, tf32 and i8 each have an mma.sync probe
    assert r["mma_sync_tf32"].verdict == r["mma_sync_i8"].verdict == "confirmed"


def test_mma_sync_probe_does_not_judge_a_newer_tensor_core():
    # PTX keeps mma.sync on sm_90a: the probe compiles there, yet Hopper's own tensor core
    # is wgmma, so the probe neither proves nor refutes Hopper's (absent) mma_sync claim.
    hopper = load_arch("hopper")
    probe = next(p for p in discover() if p.name == "mma_sync_bf16")
    check = check_arch(hopper, probes=[probe])
    (result,) = check.probes
    assert result.compiled and result.verdict.startswith(NOT_JUDGED), result.verdict
    assert {f.feature: f for f in check.features}["mma_sync"].verdict.startswith(NOT_JUDGED)


def test_claiming_cp_async_away_is_caught(tmp_path, arch):
    text = arch.text.replace("  cp_async: true\n", "  cp_async: false\n", 1)
    text = text.replace('  cp_async: ["LDGSTS"]\n', "", 1)
    path = tmp_path / "ampere-no-cp-async.yaml"
    path.write_text(text)
    probe = next(p for p in discover() if p.name == "cp_async")
    (result,) = check_arch(load_arch(path), probes=[probe]).probes
    assert result.verdict.startswith("contradicted: descriptor denies cp_async")


# -- porting to Ampere: the plan names the primitive swaps, in order ------------------------


def test_plan_from_hopper_names_the_swaps_in_order():
    from porter.planning.plan import porting_plan

    plan = porting_plan(load_arch("hopper"), load_arch("ampere"))
    swaps = [(s["job"], s["from_primitive"], s["to_primitive"]) for s in plan.swaps]
    assert swaps == [("global->shared tile loads", "tma", "cp_async"),
                     ("stage completion", "mbarrier", "cp_async"),
                     ("MMA issue", "wgmma", "mma_sync"),
                     ("operand sharing across a cluster", "tma", ""),
                     ("register reallocation", "", "")]
    assert all(s["to_primitive_exists"] in (True, None) for s in plan.swaps)
    assert plan.swaps[0]["because"] == ["tma lost"]
    assert "wgmma lost" in plan.swaps[2]["because"] and "mma_sync gained" in plan.swaps[2]["because"]
    text = plan.text()
    assert "primitive swaps, in order:" in text
    assert "1. global->shared tile loads: tma/ TMA tensor-map loads -> cp_async/ per-thread cp.async copies" in text
    assert plan.to_dict()["swaps"] == plan.swaps


def test_megakernel_is_unsupported_by_feature_on_ampere():
    from porter.kernels import megakernel

    (v,) = megakernel.variants(load_arch("ampere"))
    assert not hasattr(v, "features") and v.missing == ("mbarrier",)
