"""Contracts between the GEMM kernels and the world around them that neither side checks
alone, each a way to hang or corrupt a kernel on first contact with a GPU:

* the bytes every full barrier is armed for (the kernel's STAGE_TX_BYTES) against the
  bytes the host's tensor maps make TMA deliver to that barrier per stage - multicast
  slices from every CTA of a Hopper cluster, both CTAs of a Blackwell pair on the
  leader's barrier. Too many expected: the MMA waits forever; too few: it reads a stage
  still being written;
* setmaxnreg on Hopper: the consumers' .inc draws only on the registers the CTA got at
  launch, so producer + consumer budgets must fit that pool, for any descriptor.

Rendering only (no compile) except where the register count ptxas chose is the point.
"""

from __future__ import annotations

import re

import pytest

from porter import paths
from porter.descriptor.arch import arch_from_text, load_arch
from porter.errors import PorterError
from porter.kernels import gemm, gemm_wgmma
from porter.kernels.base import Unsupported
from porter.runtime.gemm import operand_maps

from test_gemm_wgmma import source_constants


def _specs():
    out = []
    for arch_name in ("hopper", "blackwell"):
        arch = load_arch(arch_name)
        out += [(arch, s) for s in gemm.variants(arch) if not isinstance(s, Unsupported)]
    return out


SPECS = _specs()
IDS = [f"{a.name}-{s.name}" for a, s in SPECS]


def _host_maps(spec):
    """The tensor maps porter.runtime.gemm builds for the smallest legal problem."""
    cfg = spec.config
    m, n, k = cfg.get("shape_multiple") or (cfg["tile_m"], cfg["tile_n"], cfg["tile_k"])
    bits = {"bf16": 16, "e4m3": 8, "e2m1": 4}[cfg["a_format"]]
    row_bytes = k * bits // 8
    return operand_maps(spec, m, n, k, row_bytes, row_bytes)


@pytest.mark.parametrize("arch,spec", SPECS, ids=IDS)
def test_full_barrier_expects_what_the_host_maps_deliver(arch, spec):
    src = gemm.render(spec, arch)
    const = source_constants(src)
    maps = _host_maps(spec)
    cfg = spec.config
    if cfg["mainloop"] == "wgmma":
        # Per CTA and stage: its own A box, plus one B slice from every CTA of the cluster
        # (each multicasts its slice into all of them, completing tx on each full[s]).
        delivered = maps["tma_a"].box_bytes + const["CLUSTER_M"] * maps["tma_b"].box_bytes
        assert "porter::mbar_arrive_expect_tx(full, STAGE_TX_BYTES);" in src
        assert const["STAGE_TX_BYTES"] == delivered
        # The slices tile the B stage exactly, in the order the descriptor reads them.
        assert const["CLUSTER_M"] * maps["tma_b"].box_bytes == const["B_STAGE_BYTES"]
        assert maps["tma_a"].box_bytes == const["A_STAGE_BYTES"]
    else:
        # Per CTA and stage: A, B, the SFA box and one SFB box per 128-row group of B.
        per_cta = maps["tma_a"].box_bytes + maps["tma_b"].box_bytes
        assert maps["tma_a"].box_bytes == const["A_BYTES"] and maps["tma_b"].box_bytes == const["B_BYTES"]
        if cfg["block_scale"]:
            sfb_loads = const["SFB_CHUNKS"] // const["SF_K_CHUNKS"]
            assert "for (int g = 0; g < SFB_CHUNKS / SF_K_CHUNKS; ++g)" in src
            per_cta += maps["tma_sfa"].box_bytes + sfb_loads * maps["tma_sfb"].box_bytes
            assert maps["tma_sfa"].box_bytes == const["SFA_BYTES"]
            assert sfb_loads * maps["tma_sfb"].box_bytes == const["SFB_BYTES"]
        assert const["STAGE_TX_BYTES"] == per_cta
        if cfg["cta_group"] == 2:
            # Both CTAs' loads complete_tx on the leader's full[s]; only the leader arms it,
            # once, for the pair.
            assert re.search(r"if \(mma_cta\) porter::mbar_arrive_expect_tx\(bar\(bars\.full\[stage\]\), "
                             r"CTA_GROUP \* STAGE_TX_BYTES\);", src)
            assert const["CTA_GROUP"] == 2
        else:
            assert "porter::mbar_arrive_expect_tx(full, STAGE_TX_BYTES);" in src
    # The hardware tx-count holds 2^20 - 1 bytes per phase.
    assert const["STAGE_TX_BYTES"] * spec.cluster[0] < (1 << 20)


def _hopper_with(regs_per_sm: int):
    text = (paths.data_dir("arch") / "hopper.yaml").read_text()
    assert "regs_per_sm: 65536" in text
    return arch_from_text(text.replace("regs_per_sm: 65536", f"regs_per_sm: {regs_per_sm}"), "regs.yaml")


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
@pytest.mark.parametrize("regs_per_sm", [65536, 49152, 40960, 32768])
def test_setmaxnreg_split_fits_the_launch_pool(regs_per_sm, variant):
    """Before the fix the split came from regs_per_sm: at 32768 the consumers asked for
    40 x 128 + 104 x 256 = 31744 registers of a 80 x 384 = 30720 pool (deadlock).
    Promoted fp8 (--set accumulation=promoted) holds two accumulators per consumer thread:
    the smallest file leaves no N for it, which is said rather than spilled; the default
    (fast accumulation, one accumulator) still fits there."""
    arch = _hopper_with(regs_per_sm)
    if variant == "fp8" and regs_per_sm == 32768:
        with pytest.raises(PorterError, match="fits 96 registers per consumer thread with promoted accumulation"):
            gemm_wgmma.make_spec(arch, gemm.VARIANTS[variant], False, accumulation="promoted")
    spec = gemm.make_spec(arch, variant)
    cfg = spec.config
    launch = cfg["registers_at_launch"]
    assert launch == gemm_wgmma.launch_registers(arch) and launch % 8 == 0
    after = cfg["producer_regs"] * 128 + cfg["consumer_regs"] * 128 * cfg["consumers"]
    assert after <= launch * spec.threads
    assert cfg["producer_regs"] <= launch <= cfg["consumer_regs"]
    # The accumulators still fit what the consumers get.
    assert cfg["accumulator_regs"] + gemm_wgmma.CONSUMER_OVERHEAD_REGS <= cfg["consumer_regs"]


def test_setmaxnreg_split_refuses_a_register_file_too_small():
    with pytest.raises(PorterError, match="setmaxnreg needs the producer's 40 <="):
        gemm.make_spec(_hopper_with(12288), "bf16")


@pytest.mark.parametrize("regs_per_sm,variant", [(65536, "bf16"), (32768, "bf16"), (65536, "fp8")])
def test_ptxas_launch_pool_covers_the_split(regs_per_sm, variant):
    """What the GPU really gives the CTA is ptxas's register count R x THREADS; the
    consumers' .inc only succeeds if producer x 128 + consumer x 256 <= that pool. ptxas
    reports R = min(launch-bound cap, largest setmaxnreg count) (168 for the shipped
    descriptor, 96 for the 32768 one whose consumers take 96), so check it on the real
    compile rather than trusting the model."""
    from porter.kernels.build import build_kernel

    arch = _hopper_with(regs_per_sm)
    spec = gemm.make_spec(arch, variant)
    build = build_kernel(spec, arch)
    assert build.compiled is not None, build.compile_error
    cfg, regs = spec.config, build.resources["registers"]
    assert cfg["producer_regs"] <= regs <= cfg["consumer_regs"]
    assert cfg["producer_regs"] * 128 + cfg["consumer_regs"] * 128 * cfg["consumers"] <= regs * spec.threads


def test_expect_tx_check_has_teeth():
    """A host that forgot the multicast split (each CTA loading the whole B tile) would
    over-deliver to every full barrier: the check above must see it."""
    import dataclasses

    arch = load_arch("hopper")
    spec = gemm.make_spec(arch, "bf16")
    const = source_constants(gemm.render(spec, arch))
    bad = dict(spec.config)
    bad["tensor_maps"] = [dict(t) for t in spec.config["tensor_maps"]]
    bad["tensor_maps"][1]["box"] = [bad["tile_k"], bad["tile_n"]]   # whole B tile per CTA
    maps = _host_maps(dataclasses.replace(spec, config=bad))
    delivered = maps["tma_a"].box_bytes + const["CLUSTER_M"] * maps["tma_b"].box_bytes
    assert delivered != const["STAGE_TX_BYTES"]
