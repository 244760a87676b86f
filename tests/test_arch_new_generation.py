"""A new generation is a YAML file: consumer Blackwell (sm_120a) from arch/rtx-blackwell.yaml.

The descriptor is the only new input. These tests check that porter reads it with the
right features, that the compiler agrees with every claim and denial (the mma.sync
probes show their QMMA / OMMA SASS on sm_120a and are rejected on sm_90a / sm_100a),
and that the kernel families answer "unsupported, missing X" instead of crashing when
no template path exists for the arch's tensor core. Decisions must follow the
descriptor's content, never its name: a renamed copy gets the same answers.
"""

from __future__ import annotations

import pytest

from porter import paths
from porter.descriptor.arch import FEATURES, arch_from_text, load_arch
from porter.cli import main
from porter.errors import CompileError
from porter.kernels import FAMILIES, family_module
from porter.kernels.base import KernelSpec, Unsupported
from porter.descriptor.probes import NOT_JUDGED, check_arch, discover
from porter.compile.toolchain import compile_cuda

NAME = "rtx-blackwell"
TEXT = (paths.data_dir("arch") / f"{NAME}.yaml").read_text()
CLAIMED = {"mma_sync", "clusters", "dsmem", "tma", "mbarrier", "cp_async", "fp8", "fp6", "fp4",
           "block_scale_mx", "block_scale_nvfp4", "setmaxnreg", "cluster_launch_control"}


@pytest.fixture(scope="module")
def arch():
    return load_arch(NAME)


# Compiles every probe for sm_120a once per session (the on-disk cache makes reruns cheap).
@pytest.fixture(scope="module")
def check(arch):
    return check_arch(arch)


def by_probe(result):
    return {r.probe: r for r in result.probes}


# -- the descriptor ---------------------------------------------------------------------


def test_descriptor_features_and_tensor_core(arch):
    assert arch.target == "sm_120a"
    assert set(arch.features) == CLAIMED
    for lacking in ("wgmma", "tcgen05", "tmem", "cta_pair"):
        assert not arch.has(lacking), lacking
    tc = arch.tensor_core
    assert (tc.generation, tc.issue, tc.accumulator) == ("mma_sync", "warp", "registers")
    assert arch.tmem_bytes == 0 and not arch.tma_multicast
    # Warp-level shapes only: m16n8 with K = 256 bits of A (fp4 packed two per byte).
    assert tc.valid_shape("f16", 16, 8) and tc.k_of("f16") == 16
    assert tc.valid_shape("f8f6f4", 16, 8) and tc.k_of("f8f6f4") == 32
    assert tc.valid_shape("mxf8f6f4", 16, 8) and tc.k_of("mxf8f6f4") == 32
    assert tc.valid_shape("mxf4nvf4", 16, 8) and tc.k_of("mxf4nvf4") == 64
    assert not tc.valid_shape("f16", 64, 8) and not tc.valid_shape("mxf8f6f4", 128, 8)
    assert tc.block_scaled_kinds == {"mxf8f6f4", "mxf4", "mxf4nvf4"}
    assert arch.block_scales["mx"].scale_format == "ue8m0" and arch.block_scales["mx"].block_size == 32
    assert arch.block_scales["nvfp4"].kinds == ("mxf4nvf4",) and arch.block_scales["nvfp4"].block_size == 16
    assert (arch.sm_count, arch.smem_per_block_bytes, arch.max_threads_per_sm) == (170, 99 * 1024, 1536)


def test_uncertain_figures_are_marked(arch):
    assert {"peak.dense_tflops.fp4", "async_copy.tma_multicast", "cluster.max_nonportable"} <= arch.uncertain
    # Only the peak that has a source is given; the others are left out, not guessed.
    assert set(arch.peak_tflops) == {"fp4"}


# -- the compiler agrees ------------------------------------------------------------------


def test_arch_check_passes(check):
    assert check.ok, check.contradictions
    r = by_probe(check)
    expected = {
        "mma_sync_f8f6f4": ["QMMA.16832.F32.E4M3.E4M3", "HMMA.16816.F32.BF16"],
        "mma_sync_fp6": ["QMMA.16832.F32.E2M3.E3M2"],
        "mma_sync_fp4": ["QMMA.16832.F32.E2M1.E2M1"],
        "mma_sync_mxf8f6f4": ["QMMA.SF.16832.F32.E4M3.E4M3.E8"],
        "mma_sync_mxf4": ["OMMA.SF.16864.F32.E2M1.E2M1.E8"],
        "mma_sync_mxf4nvf4": ["OMMA.SF.16864.F32.E2M1.E2M1.UE4M3.4X"],
    }
    for probe, opcodes in expected.items():
        assert r[probe].verdict == "confirmed", (probe, r[probe].verdict)
        seen = {op for hits in r[probe].sass_found.values() for op in hits}
        assert set(opcodes) <= seen, (probe, seen)
    # The two scale registers are operands of the block-scaled MMA, after A, B and C
    # (the descriptor's scale_operands modifier reaches into the instruction's operands).
    for probe in ("mma_sync_mxf8f6f4", "mma_sync_mxf4", "mma_sync_mxf4nvf4"):
        texts = [t for ref, hits in r[probe].sass_found.items() if ref.endswith("/scale_operands") for t in hits]
        assert texts and texts[0].split()[0] in expected[probe], (probe, texts)
        assert len(texts[0].split(",")) >= 6, texts
    for probe in ("wgmma_bf16", "tcgen05_f16", "tmem_ld_st", "tcgen05_cta_pair"):
        assert r[probe].verdict == "denied-confirmed", probe
        assert "not supported on .target 'sm_120a'" in r[probe].error
    # tcgen05's block-scale probes prove nothing about an mma.sync tensor core.
    for probe in ("tcgen05_mxf8f6f4", "tcgen05_mxf4nvf4"):
        assert r[probe].verdict.startswith(NOT_JUDGED) and r[probe].ok, r[probe].verdict
    features = {f.feature: f for f in check.features}
    assert features["block_scale_nvfp4"].signature_seen_in == ["mma_sync_mxf4nvf4"]
    assert features["fp8"].verdict == "confirmed"
    assert check.kinds_without_probe == []  # f16, tf32, i8: mma_sync_bf16, mma_sync_tf32, mma_sync_i8


def test_cli_arch_check(check, capsys):
    assert main(["arch", "check", NAME]) == 0
    assert "descriptor AGREES with the compiler" in capsys.readouterr().out.splitlines()[-1]


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_new_mma_forms_are_rejected_elsewhere(target):
    # The fp6/fp4 and block-scaled mma.sync forms exist only on sm_120a; ptxas says so.
    for probe in discover():
        if probe.name in ("mma_sync_fp6", "mma_sync_fp4", "mma_sync_mxf8f6f4", "mma_sync_mxf4",
                          "mma_sync_mxf4nvf4"):
            with pytest.raises(CompileError, match=f"not supported on .target '{target}'"):
                compile_cuda(probe.source, target, probe.path.name)


# -- kernels: unsupported, with the missing feature named ---------------------------------


def _answers(arch) -> dict[str, tuple]:
    out = {}
    for family in sorted(FAMILIES):
        for v in family_module(family).variants(arch):
            out[v.name] = ("spec", v.features) if isinstance(v, KernelSpec) else ("unsupported", v.missing)
    return out


def test_kernel_variants_report_missing_features(arch):
    answers = _answers(arch)
    gemm_attention = {n: a for n, a in answers.items() if n.startswith(("gemm.", "attention."))}
    assert gemm_attention, "the families list their variants on every arch"
    for name, (status, needs) in gemm_attention.items():
        if status == "unsupported":
            # Named by the features this arch lacks, never by its name.
            assert needs and all(not arch.has(f) for f in needs if f in FEATURES), (name, needs)
        else:
            # Built from the warp-level mma.sync path: only features the arch claims.
            assert "mma_sync" in needs and all(arch.has(f) for f in needs), (name, needs)
    assert answers["megakernel.llama-decode"][0] == "spec"


def test_decisions_follow_content_not_name(arch):
    renamed = arch_from_text(TEXT.replace(f"name: {NAME}", "name: some-future-gpu"), "some-future-gpu.yaml")
    assert renamed.name == "some-future-gpu" and renamed.features == arch.features
    assert _answers(renamed) == _answers(arch)


# -- porting from datacenter Blackwell: swaps in order, diff hunks labelled by feature -------


def test_plan_from_blackwell_names_the_swaps_in_order(arch):
    from porter.planning.plan import porting_plan

    plan = porting_plan(load_arch("blackwell"), arch)
    assert [(s["job"], s["from_primitive"], s["to_primitive"]) for s in plan.swaps] == [
        ("MMA issue", "tcgen05", "mma_sync"),
        ("accumulator storage", "tmem", ""),
        ("block-scale delivery", "block_scale", "mma_sync"),
        ("CTA pairs", "tcgen05", ""),
        ("operand sharing across a cluster", "tma", ""),
    ]
    # TMA and mbarriers stay (sm_120a has both): no swap for loads or stage completion.
    assert not any(s["job"] in ("global->shared tile loads", "stage completion") for s in plan.swaps)
    assert plan.swaps[1]["because"] == ["tmem lost"] and plan.swaps[1]["to"].startswith("registers")
    assert "primitive swaps, in order:" in plan.text()


def test_diff_labels_hunks_by_the_features_and_figures_that_drove_them(arch):
    from porter.commands.diff import kernel_diff
    from porter.kernels import gemm

    base = load_arch("blackwell")
    d = kernel_diff(base, arch, gemm.make_spec(base, "bf16", False), gemm.make_spec(arch, "bf16", False),
                    build=False)
    labels = [label for h in d["hunks"] for label in h.labels]
    # The header names the mainloop: the generation change drove it, not "the template".
    assert "tcgen05 (lost)" in d["hunks"][0].labels and "mma_sync (gained)" in d["hunks"][0].labels
    assert "sm_count (148 -> 170)" in labels and "smem_per_block (232448 -> 101376)" in labels
    assert any(label.startswith("tmem") for label in labels)


def test_configuration_labels_need_evidence():
    from porter.planning.srcdiff import Hunk, label_configuration

    a, b = load_arch("blackwell"), load_arch("rtx-blackwell")
    hunks = [Hunk("@@ -1 +1 @@", ["-grid = min(tiles, 148)", "+grid = min(tiles, 170)"], ["template"]),
             Hunk("@@ -2 +2 @@", ["-tile 128 x 256", "+tile 128 x 128"], ["template"]),
             Hunk("@@ -3 +3 @@", ["-x", "+y"], ["tma"])]
    label_configuration(hunks, a, b)
    assert hunks[0].labels == ["sm_count (148 -> 170)"]
    assert hunks[1].labels == ["template"]        # nothing in it names a changed feature or figure
    assert hunks[2].labels == ["tma"]             # feature-branch labels are left alone
