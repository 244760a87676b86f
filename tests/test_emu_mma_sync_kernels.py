"""The mma_sync tensor-core kernels (warp-level mma.sync, ldmatrix, TMA or cp.async staging)
executed in porter's PTX simulator (level "emulated": not on a GPU): every GEMM and
attention variant of rtx-blackwell (sm_120a) and ampere (sm_80), at the emulation shapes
of porter.runtime.emulated_runs (GEMM: one k-block, then several tiles per CTA; attention: ragged
lengths, grouped-query heads, causal both ways), one input set each, with the device
harness's poisoned outputs and fp64 references.

Then planted bugs, each of which must fail: a cp.async.wait_group one group too weak (the
stage is read before its copies land: the in-flight check names the copy) in the GEMM and
in attention, the barrier after the wait left out (other warps read bytes the copying
thread landed at its wait with nothing ordering them: the race detector), and an
mxf8f6f4 block-scale byte selector that picks another K step's scales.
"""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.runtime.emulated_runs import emulate, emulation_shapes
from porter.kernels import family_module

KERNELS = [("rtx-blackwell", "gemm", v) for v in ("gemm.bf16", "gemm.fp8", "gemm.mxfp8", "gemm.nvfp4")] + \
          [("rtx-blackwell", "attention", v) for v in ("attention.hd64", "attention.hd128", "attention.hd64.causal",
                                                       "attention.hd128.causal")] + \
          [("ampere", "gemm", "gemm.bf16"), ("ampere", "attention", "attention.hd64")]
# the rest of ampere's attention (the same template as rtx-blackwell's with cp.async staging,
# which gemm.bf16 and attention.hd64 cover) takes 5-9 s each: outside the default suite
SLOW = [("ampere", "attention", v) for v in ("attention.hd128", "attention.hd64.causal", "attention.hd128.causal")]


@pytest.fixture(scope="module")
def archs():
    return {name: load_arch(name) for name in ("rtx-blackwell", "ampere")}


def _spec(arch, family: str, name: str):
    specs = {s.name: s for s in family_module(family).variants(arch) if hasattr(s, "config")}
    assert name in specs, f"{name} is not a {family} variant on {arch.name}: {sorted(specs)}"
    return specs[name]


def _check_emulated(archs, arch_name, family, name):
    arch = archs[arch_name]
    spec = _spec(arch, family, name)
    assert spec.config["mainloop"] == "mma_sync"
    result = emulate(spec, arch, seeds=1)
    assert result["status"] == "passed", result["reason"]
    assert result["level"] == "emulated"
    assert len(result["checks"]) == len(emulation_shapes(spec)) >= 2
    for c in result["checks"]:
        written = c["written"] if isinstance(c["written"], list) else [c["written"]]
        assert c["passed"] and written and all(w["passed"] and w["unwritten"] == 0 for w in written)
    assert result["runs"] and all(r["warp_instructions"] > 1000 for r in result["runs"])


@pytest.mark.parametrize("arch_name,family,name", KERNELS, ids=[f"{a}-{n}" for a, _, n in KERNELS])
def test_mma_sync_kernel_emulated(archs, arch_name, family, name):
    _check_emulated(archs, arch_name, family, name)


@pytest.mark.slow
@pytest.mark.parametrize("arch_name,family,name", SLOW, ids=[f"{a}-{n}" for a, _, n in SLOW])
def test_mma_sync_kernel_emulated_slow(archs, arch_name, family, name):
    _check_emulated(archs, arch_name, family, name)


def test_every_mma_sync_gemm_and_attention_variant_is_covered(archs):
    for arch_name, arch in archs.items():
        for family in ("gemm", "attention"):
            names = {s.name for s in family_module(family).variants(arch)
                     if hasattr(s, "config") and s.config.get("mainloop") == "mma_sync"}
            covered = {n for a, f, n in KERNELS + SLOW if a == arch_name and f == family}
            assert names == covered, (arch_name, family, names ^ covered)


# (id, arch, family, kernel, [(old, new)], shape, expected reason)
MUTATIONS = [
    ("cp-async-wait-too-weak", "ampere", "gemm", "gemm.bf16",
     [("porter::cp_async_wait<STAGES - 2>();", "porter::cp_async_wait<STAGES - 1>();")],
     (128, 256, 256), "that an asynchronous copy is still writing"),
    ("missing-barrier-after-cp-async-wait", "ampere", "gemm", "gemm.bf16",
     [("            __syncthreads();\n            issue_next_load();", "            issue_next_load();")],
     (128, 256, 256), "shared-memory race"),
    ("attention-cp-async-wait-too-weak", "ampere", "attention", "attention.hd64",
     [("cp_async_wait<kStages - 2>();", "cp_async_wait<kStages - 1>();")],
     (1, 2, 1, 160, 100), "that an asynchronous copy is still writing"),
    ("mxf8-scale-byte", "rtx-blackwell", "gemm", "gemm.mxfp8",
     [("case 1: mma_mxf8_e4m3_16832<1>(", "case 1: mma_mxf8_e4m3_16832<0>(")],
     (128, 128, 128), "outside tolerance or unwritten"),
]


@pytest.mark.parametrize("case", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_planted_bug_is_caught(case, archs, emulate_planted):
    _, arch_name, family, name, edits, shape, reason = case
    arch = archs[arch_name]
    spec = _spec(arch, family, name)
    result = emulate_planted(arch, name, edits, shape)
    assert result["status"] == "failed", result
    assert reason in result["reason"], result["reason"]
    clean = emulate(spec, arch, shapes=[shape], seeds=1)
    assert clean["status"] == "passed", clean["reason"]


def test_validate_without_kernel_lists_a_family_that_has_nothing_on_the_arch(monkeypatch, capsys):
    """`porter validate ampere --device emu`: the megakernel family has no variant on sm_80;
    it is listed as unsupported and the GEMM and attention kernels still run."""
    from porter.cli import main
    from porter.commands import validate

    seen = {}

    def fake(args, arch, specs, unsupported, shapes):
        seen.update(specs=[s.name for s in specs], unsupported=[u.name for u in unsupported])
        return 0

    monkeypatch.setattr(validate, "_emulate", fake)
    assert main(["validate", "ampere", "--device", "emu"]) == 0
    assert "gemm.bf16" in seen["specs"] and "attention.hd64" in seen["specs"]
    assert "megakernel.llama-decode" in seen["unsupported"]
