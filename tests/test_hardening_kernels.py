"""The kernels' latent launch and teardown hazards and the host's alignment checks
(issue #11, items 13-16), checked without a GPU: on the generated source, the compiled
PTX, and the host-side launch plan."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter.errors import PorterError
from porter.runtime import plan_gemm

BF16 = ml_dtypes.bfloat16


def bf16(rows: int, cols: int) -> np.ndarray:
    return np.random.default_rng(0).standard_normal((rows, cols)).astype(BF16)


def misaligned_bf16(rows: int, cols: int, offset: int = 2) -> np.ndarray:
    raw = np.zeros(rows * cols * 2 + 64, np.uint8)
    start = (-raw.ctypes.data) % 16 + offset
    return raw[start:start + rows * cols * 2].view(BF16).reshape(rows, cols)


# -- item 16: alignment of every buffer the kernels touch ------------------------------------


@pytest.mark.parametrize("arch", ["hopper", "blackwell"])
def test_misaligned_output_buffer_is_one_line_naming_out(arch):
    out = misaligned_bf16(256, 256)
    assert out.ctypes.data % 16 == 2 and out.flags.c_contiguous
    with pytest.raises(PorterError) as info:
        plan_gemm(bf16(256, 128), bf16(256, 128), arch=arch, out=out)
    msg = str(info.value)
    assert "\n" not in msg and "out starts at" in msg and "16-byte aligned" in msg and "epilogue" in msg


def test_aligned_output_buffer_plans():
    out = np.zeros((256, 256), BF16)
    plan = plan_gemm(bf16(256, 128), bf16(256, 128), arch="hopper", out=out)
    assert plan.out is not None and plan.out.ptr % 16 == 0


@pytest.mark.parametrize("which", ["a", "b"])
def test_misaligned_operands_name_the_argument(which):
    args = {"a": bf16(256, 128), "b": bf16(256, 128)}
    args[which] = misaligned_bf16(256, 128, offset=8)
    with pytest.raises(PorterError, match=f"{which.upper()} starts at 0x[0-9a-f]+, not 16-byte aligned"):
        plan_gemm(args["a"], args["b"], arch="hopper")


# -- items 13 and 14: the CTA-pair kernels' launch check and pipeline drains -------------------


def _specs(family: str, arch_name: str):
    from porter.descriptor.arch import load_arch
    from porter.kernels import family_module
    from porter.kernels.base import KernelSpec

    arch = load_arch(arch_name)
    return arch, [s for s in family_module(family).variants(arch) if isinstance(s, KernelSpec)]


def _render(family: str, spec, arch) -> str:
    from porter.kernels import family_module

    return family_module(family).render(spec, arch)


@pytest.mark.parametrize("family", ["gemm", "attention"])
def test_pair_kernels_trap_when_launched_without_their_cluster(family):
    from porter.kernels.build import build_kernel

    arch, specs = _specs(family, "blackwell")
    pairs = [s for s in specs if s.config.get("cta_group") == 2]
    assert pairs, f"no {family} pair kernel on blackwell"
    for spec in pairs:
        src = _render(family, spec, arch)
        check = src.index("cluster_nctarank() != ")
        # First thing in the kernel body: before any barrier is initialised or the rank is read.
        body = src.rindex('extern "C" __global__' if family == "gemm" else "PORTER_DEVICE void mainloop(", 0, check)
        assert "mbar_init(" not in src[body:check] and "cluster_ctarank()" not in src[body:check]
        assert "__trap();" in src[check:check + 600] and "launched without its cluster of 2 CTAs" in src
        build = build_kernel(spec, arch)
        assert build.compiled is not None and "%cluster_nctarank" in build.compiled.ptx
        assert "trap;" in build.compiled.ptx
        assert build.ok, [c.detail for c in build.checks if not c.passed]   # no local memory for the message
    for spec in (s for s in specs if s.config.get("cta_group", 1) == 1):
        assert "cluster_nctarank() != " not in _render(family, spec, arch)


def _section(src: str, start: str, end: str) -> str:
    i = src.index(start)
    return src[i:src.index(end, i)]


def test_gemm_pipelines_are_drained_before_teardown():
    arch, specs = _specs("gemm", "blackwell")
    for spec in (s for s in specs if s.config.get("mainloop") == "tcgen05"):
        src = _render("gemm", spec, arch)
        producer = _section(src, "// ---- TMA producer", "// ---- MMA issuer")
        loop_end = producer.rindex("if (++stage == STAGES)")
        waits = [i for i in range(len(producer)) if producer.startswith("bars.empty[stage]), phase ^ 1)", i)]
        assert len(waits) == 2, spec.name   # one per load, one in the tail after the loop
        tail = producer[producer.index("Producer tail"):]
        assert "for (int s = 0; s < STAGES; ++s)" in tail and "bars.empty[stage]" in tail
        assert producer.index("Producer tail") < loop_end   # the tail advances the ring like a load
        mma = _section(src, "// ---- MMA issuer", "// ---- Epilogue warps")
        assert "MMA tail" in mma and mma.count("bars.acc_empty[buf]") == 2, spec.name


def test_attention_pipelines_are_drained_before_teardown():
    arch, specs = _specs("attention", "blackwell")
    checked = 0
    for spec in specs:
        src = _render("attention", spec, arch)
        if "tc::commit" not in src:   # only the tcgen05 path commits asynchronously
            continue
        checked += 1
        producer = _section(src, "PORTER_DEVICE void producer(", "// ---- MMA issuer")
        assert producer.count("wait_bar(s.q_empty()") == 2, spec.name
        tail = producer[producer.index("Producer tail"):]
        assert "wait_bar(s.kv_empty(kv_iter % kStages)" in tail and "i < kStages" in tail
    assert checked == len(specs) == 8, (checked, [s.name for s in specs])   # hd64/hd128 x causal x single/pair


# -- item 15: the megakernel's shared-memory margin ---------------------------------------------


def test_megakernel_keeps_the_reserve_and_a_margin_below_the_limit():
    from porter.descriptor.arch import load_arch
    from porter.kernels import megakernel

    for name in ("hopper", "blackwell", "rtx-blackwell"):
        arch = load_arch(name)
        spec = megakernel.make_spec(arch, "llama-decode")
        headroom = arch.smem_per_block_bytes - spec.smem_bytes
        assert headroom >= megakernel.SYSTEM_RESERVE_BYTES + megakernel.SMEM_MARGIN_BYTES, (name, headroom)
        assert spec.config["pages"] >= 2


def test_megakernel_configuration_that_does_not_fit_fails_with_the_figures():
    from porter.kernels import megakernel

    with pytest.raises(PorterError) as info:
        megakernel.check_smem_fit("arch x", 231424, 232448)
    msg = str(info.value)
    assert "231424 B dynamic" in msg and "1024 B static" in msg and "1024 B margin" in msg and "232448 B" in msg
    megakernel.check_smem_fit("arch x", 230400, 232448)   # exactly the margin left: fits


def test_megakernel_too_little_shared_memory_names_reserve_and_margin(tmp_path):
    from porter.descriptor.arch import load_arch
    from porter.kernels import megakernel

    text = load_arch("hopper").path.read_text()
    small = tmp_path / "small.yaml"
    small.write_text(text.replace("smem_per_block_kib: 227", "smem_per_block_kib: 66", 1))
    with pytest.raises(PorterError) as info:
        megakernel.make_spec(load_arch(small), "llama-decode")
    msg = str(info.value)
    assert "1024 B system reserve" in msg and "1024 B margin" in msg and "at least 2" in msg


class _FakeDriver:
    """set/get function attributes as the driver answers them, with a settable ceiling."""

    def __init__(self, ceiling: int, static: int = 1024):
        self.ceiling, self.static, self.value = ceiling, static, 48 * 1024

    def set_function_attributes(self, function, smem_bytes, cluster):
        if smem_bytes > self.ceiling:
            raise PorterError(f"cuFuncSetAttribute(max dynamic shared memory): {smem_bytes} > {self.ceiling}")
        self.value = smem_bytes

    def function_attributes(self, function):
        return {"max_dynamic_smem_bytes": self.value, "static_smem_bytes": self.static}


@pytest.mark.parametrize("ceiling,full", [(232448, True), (231424, False)])
def test_device_run_records_what_the_driver_grants(ceiling, full):
    from porter.descriptor.arch import load_arch
    from porter.kernels import megakernel

    arch = load_arch("blackwell")
    spec = megakernel.make_spec(arch, "llama-decode")
    attrs = megakernel.settle_smem(_FakeDriver(ceiling), None, spec, arch, spec.smem_bytes)
    assert attrs["max_dynamic_smem_bytes"] == spec.smem_bytes and attrs["full_limit_grantable"] is full
    with pytest.raises(PorterError, match="cuFuncSetAttribute"):   # the driver refuses: its own line
        megakernel.settle_smem(_FakeDriver(ceiling), None, spec, arch, ceiling + 1)
    clamping = _FakeDriver(ceiling)
    clamping.function_attributes = lambda f: {"max_dynamic_smem_bytes": 200_000, "static_smem_bytes": 1024}
    with pytest.raises(PorterError, match=r"the driver grants 200000 B .* needs 2\d+ B"):
        megakernel.settle_smem(clamping, None, spec, arch, spec.smem_bytes)


@pytest.mark.parametrize("family,name", [("gemm", "gemm.bf16.pair"), ("attention", "attention.hd128.pair")])
def test_pair_kernel_launched_without_its_cluster_traps_in_the_simulator(family, name):
    """Executed in porter's PTX simulator with the cluster attribute left off: the kernel
    must abort at its check, not run every CTA as rank 0 of a pair that does not exist."""
    from porter.descriptor.arch import load_arch
    from porter.runtime.emulated import EmuDevice
    from porter.runtime.emulated_runs import emulate, emulation_shapes
    from porter.kernels import family_module

    class Unpaired(EmuDevice):
        def launch(self, function, grid, block, smem_bytes, cluster, args, cooperative=False):
            return super().launch(function, grid, block, smem_bytes, (1, 1, 1), args, cooperative)

    arch = load_arch("blackwell")
    spec = next(s for s in family_module(family).variants(arch) if getattr(s, "name", None) == name)
    result = emulate(spec, arch, shapes=emulation_shapes(spec, smallest=True), seeds=1, device=Unpaired())
    assert result["status"] == "failed" and "executed trap" in result["reason"], result["reason"]
