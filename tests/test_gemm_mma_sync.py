"""Warp-level (mma.sync) GEMM kernels: the path chosen by tensor_core.generation, the
configuration from the descriptor, NVRTC compile, SASS from the descriptor's signatures,
no local memory, limits, the numerics model, launch plans, and a layout model of the
kernel's shared-memory swizzle and ldmatrix addressing judged by porter.emu's mma.sync
and TMA units (read from the PTX ISA separately from the generator).

Builds: gemm.{bf16,fp8,mxfp8,nvfp4} on rtx-blackwell (sm_120a, TMA staging) and gemm.bf16
on ampere (sm_80, cp.async staging)."""

from __future__ import annotations

import numpy as np
import ml_dtypes
import pytest

from porter import paths
from porter.descriptor.arch import arch_from_text, load_arch
from porter.errors import CompileError, PorterError
from porter.kernels import gemm, gemm_mma_sync
from porter.kernels.base import KernelSpec, Unsupported
from porter.kernels.build import build_kernel, sass_checks
from porter.levels import Level
from porter.compile.toolchain import compile_cuda

RTX_VARIANTS = ("bf16", "fp8", "mxfp8", "nvfp4")
BUILDS = tuple(("rtx-blackwell", v) for v in RTX_VARIANTS) + (("ampere", "bf16"),)


@pytest.fixture(scope="module")
def archs():
    return {name: load_arch(name) for name in ("rtx-blackwell", "ampere")}


@pytest.fixture(scope="module")
def builds(archs):
    """Each kernel rendered and compiled once per module (the disk cache helps too)."""
    return {(a, v): build_kernel(gemm.make_spec(archs[a], v), archs[a]) for a, v in BUILDS}


EXPECTED = {
    # (arch, variant): (tile_m, tile_n, tile_k, mma_k, warp tile, stages, staging, primitive)
    ("rtx-blackwell", "bf16"): (128, 128, 64, 16, (64, 32), 3, "tma", "mma_bf16_16816"),
    ("rtx-blackwell", "fp8"): (128, 128, 128, 32, (64, 32), 3, "tma", "mma_e4m3_16832"),
    ("rtx-blackwell", "mxfp8"): (128, 128, 128, 32, (64, 32), 3, "tma", "mma_mxf8_e4m3_16832"),
    ("rtx-blackwell", "nvfp4"): (128, 128, 256, 64, (64, 32), 3, "tma", "mma_nvf4_16864"),
    # 163 KiB on sm_80 holds three 128 x 256 stages; 99 KiB on sm_120a only 128 x 128.
    ("ampere", "bf16"): (128, 256, 64, 16, (64, 64), 3, "cp_async", "mma_bf16_16816"),
}


@pytest.mark.parametrize("key", BUILDS)
def test_config_from_descriptor(archs, key):
    arch = archs[key[0]]
    spec = gemm.make_spec(arch, key[1])
    cfg = spec.config
    tile_m, tile_n, tile_k, mma_k, warp, stages, staging, primitive = EXPECTED[key]
    assert cfg["mainloop"] == arch.tensor_core.generation == "mma_sync"
    assert (cfg["tile_m"], cfg["tile_n"], cfg["tile_k"], cfg["mma_k"]) == (tile_m, tile_n, tile_k, mma_k)
    assert (cfg["warp_m"], cfg["warp_n"]) == warp and spec.threads == 32 * cfg["warps_m"] * cfg["warps_n"]
    assert cfg["stages"] == stages and cfg["staging"] == staging and cfg["mma_primitive"] == primitive
    assert cfg["tile_k"] * cfg["element_bits"] == 8 * 128       # one 128-byte row of K per stage
    assert spec.smem_bytes <= arch.smem_per_block_bytes
    assert cfg["registers_estimate"] <= cfg["registers_budget"] <= arch.max_regs_per_thread
    assert spec.cluster == (1, 1, 1) and spec.tmem_columns == 0


def test_fp8_variants_promote_each_k_block(archs, builds):
    rtx = archs["rtx-blackwell"]
    acc = {v: gemm.make_spec(rtx, v).config["accumulation"] for v in RTX_VARIANTS}
    assert acc == {"bf16": "registers", "fp8": "promoted", "mxfp8": "promoted", "nvfp4": "registers"}
    for v in ("fp8", "mxfp8"):
        spec = builds[("rtx-blackwell", v)].spec
        assert spec.config["promote_every_k"] == spec.config["tile_k"]
        assert any("promotion" in r.why for r in spec.sass_required)
        assert any(op.startswith("FADD") for op in builds[("rtx-blackwell", v)].histogram)
    fast = gemm_mma_sync.make_spec(rtx, gemm.VARIANTS["fp8"], False, accumulation="registers")
    assert fast.config["promote_every_k"] == 0 and fast.config["registers_estimate"] < \
        gemm.make_spec(rtx, "fp8").config["registers_estimate"]
    with pytest.raises(PorterError, match="accumulation 'tensor-core'"):
        gemm_mma_sync.make_spec(rtx, gemm.VARIANTS["fp8"], False, accumulation="tensor-core")


def test_params_follow_the_staging(archs):
    tma = [n for n, _ in gemm.make_spec(archs["rtx-blackwell"], "bf16").config["params"]]
    ptr = [n for n, _ in gemm.make_spec(archs["ampere"], "bf16").config["params"]]
    scaled = [n for n, _ in gemm.make_spec(archs["rtx-blackwell"], "nvfp4").config["params"]]
    tail = ["c", "m", "n", "k", "scale_a", "scale_b"]
    assert tma == ["tma_a", "tma_b"] + tail
    assert ptr == ["a", "b"] + tail
    assert scaled == ["tma_a", "tma_b", "sfa", "sfb"] + tail


def test_variants_the_arch_cannot_support_name_the_missing_feature(archs):
    by_name = {v.name: v for v in gemm.variants(archs["ampere"])}
    assert isinstance(by_name["gemm.bf16"], KernelSpec)
    assert by_name["gemm.fp8"].missing == ("fp8",)
    assert by_name["gemm.mxfp8"].missing == ("fp8", "block_scale_mx")
    assert by_name["gemm.nvfp4"].missing == ("fp4", "block_scale_nvfp4")
    assert "fp8" in by_name["gemm.fp8"].reason
    rtx = {v.name: v for v in gemm.variants(archs["rtx-blackwell"])}
    assert all(isinstance(rtx[f"gemm.{v}"], KernelSpec) for v in RTX_VARIANTS)
    assert all(isinstance(rtx[f"gemm.{v}.pair"], Unsupported) for v in RTX_VARIANTS)
    with pytest.raises(PorterError, match="no CTA-pair MMA"):
        gemm_mma_sync.make_spec(archs["rtx-blackwell"], gemm.VARIANTS["bf16"], True)


def test_no_staging_feature_is_unsupported_not_an_error(archs):
    text = (paths.data_dir("arch") / "ampere.yaml").read_text()
    assert text.count("cp_async: true") == 1
    assert text.count('  cp_async: ["LDGSTS"]\n') == 1
    text = text.replace("cp_async: true", "cp_async: false").replace('  cp_async: ["LDGSTS"]\n', "")
    bare = arch_from_text(text, "ampere-no-cp-async.yaml")
    made = gemm.make_spec(bare, "bf16")
    assert isinstance(made, Unsupported) and made.missing == ("tma|cp_async",)


def test_a_smaller_descriptor_shrinks_the_tile(archs):
    text = (paths.data_dir("arch") / "ampere.yaml").read_text()
    assert text.count("smem_per_block_kib: 163") == 1
    small = arch_from_text(text.replace("smem_per_block_kib: 163", "smem_per_block_kib: 100"), "ampere-100k.yaml")
    spec = gemm.make_spec(small, "bf16")
    assert (spec.config["tile_m"], spec.config["tile_n"], spec.config["stages"]) == (128, 128, 3)
    assert spec.smem_bytes <= 100 * 1024
    tiny = arch_from_text(text.replace("smem_per_block_kib: 163", "smem_per_block_kib: 16"), "ampere-16k.yaml")
    with pytest.raises(PorterError, match="no mma.sync GEMM tile"):
        gemm.make_spec(tiny, "bf16")


@pytest.mark.parametrize("key", BUILDS)
def test_reaches_sass_checked_without_local_memory(builds, key):
    build = builds[key]
    failed = [c for c in build.checks if not c.passed]
    assert build.level >= Level.SASS_CHECKED, failed
    assert build.resources["local_bytes"] == 0 and build.resources["stack_bytes"] == 0
    assert build.resources["spill_store_bytes"] == build.resources["spill_load_bytes"] == 0


@pytest.mark.parametrize("key", BUILDS)
def test_sass_rules_come_from_the_descriptor(archs, builds, key):
    arch = archs[key[0]]
    spec = builds[key].spec
    # Every rule is built from the descriptor's own spellings (no opcode literal in Python).
    known = [p for ops in arch.tensor_core.kind_sass.values() for p in ops]
    known += [p for ps in arch.sass_signatures.values() for p in ps]
    known += [p for ps in getattr(arch, "sass_ops", {}).values() for p in ps]
    for rule in spec.sass_required + spec.sass_forbidden:
        assert any(p in rule.pattern for p in known), rule
    cfg = spec.config
    mma = builds[key].histogram
    # The main loop's MMA count per stage: K_STEPS x (WARP_M / 16) x (WARP_N / 8).
    per_stage = cfg["k_steps"] * (cfg["warp_m"] // 16) * (cfg["warp_n"] // 8)
    kind_ops = arch.tensor_core.kind_sass[cfg["kind"]]
    from porter.compile import sass as sasslib
    assert sum(sasslib.count_matching(mma, p) for p in kind_ops[:1]) == per_stage


def test_staging_shows_in_the_sass(builds):
    rtx = builds[("rtx-blackwell", "bf16")].histogram
    amp = builds[("ampere", "bf16")].histogram
    assert any(op.startswith("UTMALDG") for op in rtx) and not any(op.startswith("LDGSTS") for op in rtx)
    assert any(op.startswith("LDGSTS") for op in amp) and not any(op.startswith("UTMALDG") for op in amp)
    assert any(op.startswith("LDSM") for op in rtx) and any(op.startswith("LDSM") for op in amp)


def test_sass_rules_can_fail(builds):
    # The sm_120a rules judged against the sm_80 machine code: no TMA, no mbarrier.
    checks = sass_checks(builds[("rtx-blackwell", "bf16")].spec, builds[("ampere", "bf16")].histogram)
    assert not all(c.passed for c in checks)
    # An fp8 kernel's rules judged against the bf16 kernel: no QMMA.
    checks = sass_checks(builds[("rtx-blackwell", "fp8")].spec, builds[("rtx-blackwell", "bf16")].histogram)
    assert [c.name for c in checks if not c.passed]


def test_the_compiler_judges_the_staging(builds):
    # The TMA-staged source is not an sm_80 kernel: ptxas rejects cp.async.bulk.tensor there.
    with pytest.raises(CompileError):
        compile_cuda(builds[("rtx-blackwell", "bf16")].source, "sm_80", "gemm_mma_sync_tma_on_sm80.cu")


# fp8 and nvfp4 quantize the most (K up to 1280): outside the default suite; the pipeline's
# numerics stage runs every variant.
NUMERICS_KEYS = [pytest.param(k, marks=pytest.mark.slow) if k[1] in ("fp8", "nvfp4") else k for k in BUILDS]


@pytest.mark.parametrize("key", NUMERICS_KEYS)
def test_numerics_model(archs, key):
    """gemm_model at the instruction K: every MMA adds into fp32 registers (C is a register
    operand); fp8 variants promote each k-block's MMAs (promote_k = TILE_K) as the kernel does."""
    spec = gemm.make_spec(archs[key[0]], key[1])
    result = gemm.numerics(spec, archs[key[0]])
    assert result["passed"], [r for r in result["results"] if not r["passed"]]
    assert result["mma_k"] == spec.config["mma_k"]
    assert result["promote_k"] == (spec.config["tile_k"] if spec.config["accumulation"] == "promoted" else None)
    for m, n, k in result["shapes"]:
        gemm.check_problem_shape(spec, m, n, k)


# ---- layout model: the template's swizzle and ldmatrix addressing, judged by porter.emu ----

def swizzle_128b(row: int, chunk: int) -> int:
    """kernels_src/mma_sync/mma_sync.cuh swizzle_128b."""
    return row * 128 + ((chunk ^ (row & 7)) << 4)


def a_addresses(a_rows: int, i: int, kk: int) -> list[int]:
    """templates/gemm/mma_sync.cu.j2 mma_stage: lane l's ldmatrix row address for A."""
    return [swizzle_128b(a_rows + 16 * i + (lane & 15), 2 * kk + (lane >> 4)) for lane in range(32)]


def b_addresses(b_rows: int, j: int, kk: int) -> list[int]:
    """... and for the pair (2j, 2j + 1) of n8 B fragments."""
    return [swizzle_128b(b_rows + 16 * j + (lane & 7) + ((lane >> 4) << 3), 2 * kk + ((lane >> 3) & 1))
            for lane in range(32)]


def test_template_uses_the_modelled_addresses(builds):
    src = builds[("rtx-blackwell", "bf16")].source
    for text in ("a_rows + (lane & 15u), a_half = lane >> 4",
                 "b_rows + (lane & 7u) + ((lane >> 4) << 3), b_half = (lane >> 3) & 1u",
                 "swizzle_128b(a_row + 16 * i, 2 * kk + a_half)",
                 "swizzle_128b(b_row + 16 * j, 2 * kk + b_half)",
                 "bf[2 * j][0] = r[0]; bf[2 * j][1] = r[1];",
                 "row * 128u + ((chunk ^ (row & 7u)) << 4)"):
        assert text in src, text


def _stage(rows: int, rng) -> tuple[np.ndarray, np.ndarray]:
    """A tile of `rows` x 128 bytes (unique 16-bit values) and its swizzled smem image."""
    from porter.emu.units import tma

    tile = rng.permutation(rows * 64).astype("<u2").reshape(rows, 64)
    linear = np.arange(rows * 128)
    dest = tma.swizzle_array(linear, 128)                 # where TMA SWIZZLE_128B puts each byte
    ours = np.array([swizzle_128b(r, c) + b for r in range(rows) for c in range(8) for b in range(16)])
    assert (dest == ours).all(), "the template's swizzle is TMA's SWIZZLE_128B"
    smem = np.zeros(rows * 128, np.uint8)
    smem[dest] = tile.view(np.uint8).reshape(-1)
    return tile, smem


def _regs_to_bytes(regs: np.ndarray) -> np.ndarray:
    return regs.astype("<u4").view(np.uint8).reshape(32, regs.shape[1], 4)


@pytest.mark.parametrize("shape", ["m16n8k16", "m16n8k32"])
def test_ldmatrix_fragments_are_the_mma_operands(shape):
    """Every A and B fragment the kernel assembles equals what mma.sync expects (PTX ISA
    fragment tables as porter.emu states them) for the 16-bit (bf16) and 8-bit
    (e4m3; packed e2m1 uses the same bytes at k64) operand layouts."""
    from porter.emu.units import mma_sync as emu

    rng = np.random.default_rng(0)
    a_tile, a_smem = _stage(128, rng)
    b_tile, b_smem = _stage(128, rng)
    bits = 16 if shape == "m16n8k16" else 8
    per_k = 32 * 8 // bits                                      # elements per 32-byte K step
    a_el = a_tile if bits == 16 else a_tile.view(np.uint8)       # [rows, elements of K]
    b_el = b_tile if bits == 16 else b_tile.view(np.uint8)
    ar, ac = emu.fragment_layout(shape, "a")
    br, bc = emu.fragment_layout(shape, "b")
    for warp_rows, warp_cols in ((0, 0), (64, 96)):
        for kk in range(4):
            for i in range(4):
                regs = emu.ldmatrix(a_smem, a_addresses(warp_rows, i, kk), 4, False)
                got = regs.astype("<u4").view(a_el.dtype).reshape(32, 4, -1)
                want = a_el[warp_rows + 16 * i + ar, kk * per_k + ac]
                assert (got == want).all(), (shape, "A", warp_rows, i, kk)
            for j in range(2):
                regs = emu.ldmatrix(b_smem, b_addresses(warp_cols, j, kk), 4, False)
                for f, pair in ((2 * j, regs[:, 0:2]), (2 * j + 1, regs[:, 2:4])):
                    got = pair.astype("<u4").view(b_el.dtype).reshape(32, 2, -1)
                    # B fragment (k, n) of C = A x B^T is row n, element k of the [N, K] tile.
                    want = b_el[warp_cols + 8 * f + bc, kk * per_k + br]
                    assert (got == want).all(), (shape, "B", warp_cols, f, kk)


@pytest.mark.parametrize("key", [("rtx-blackwell", "bf16"), ("ampere", "bf16")])
def test_staged_epilogue_model(builds, key):
    """The staged epilogue, modelled from the template's formulas and emu's C fragment
    layout: every element of C lands in the stage once, comes back to its own (row, col) of
    C, each warp's 32-bit staging store hits 32 different banks, and each 16-byte read-back
    belongs to a whole 128-byte line of a C row."""
    from porter.emu.units import mma_sync as emu

    cfg = builds[key].spec.config
    src = builds[key].source
    assert cfg["epilogue"] == "staged"
    for text in ("warp_row + 16 * i + (lane >> 2) + 8 * h",
                 "2u * (warp_col - pass * PASS_COLS + 8 * j + 2 * (lane & 3u))",
                 "last_stage + r * C_ROW_BYTES + (((byte >> 4) ^ (r & 7u)) << 4) + (byte & 15u)",
                 "last_stage + r * C_ROW_BYTES + ((ch ^ (r & 7u)) << 4)",
                 "+ pass * PASS_COLS + 8 * ch, v);"):
        assert text in src, text
    rows, cols = emu.fragment_layout("m16n8k16", "c")
    tile_m, tile_n, warp_m, warp_n = cfg["tile_m"], cfg["tile_n"], cfg["warp_m"], cfg["warp_n"]
    passes = cfg["epilogue_passes"]
    pass_cols = tile_n // passes
    row_bytes = pass_cols * 2
    assert tile_m * row_bytes <= cfg["stage_bytes"] and row_bytes % 128 == 0
    lane = np.arange(32)
    for p in range(passes):
        where = {}                                              # smem byte -> (row, col) of C
        for w in range(cfg["warps_m"] * cfg["warps_n"]):
            warp_row, warp_col = (w // cfg["warps_n"]) * warp_m, (w % cfg["warps_n"]) * warp_n
            if warp_col // pass_cols != p:
                continue
            for i in range(warp_m // 16):
                for j in range(warp_n // 8):
                    for h in range(2):
                        r = warp_row + 16 * i + (lane >> 2) + 8 * h
                        byte = 2 * (warp_col - p * pass_cols + 8 * j + 2 * (lane & 3))
                        addr = r * row_bytes + (((byte >> 4) ^ (r & 7)) << 4) + (byte & 15)
                        assert len(set((addr // 4) % 32)) == 32, "bank conflict in a staging store"
                        # the two columns this store carries, as the C fragment says (register 2h)
                        c_row = warp_row + 16 * i + rows[:, 2 * h, 0]
                        c_col = warp_col + 8 * j + cols[:, 2 * h, 0]
                        assert (c_row == r).all() and (c_col - p * pass_cols == byte // 2).all()
                        for l in range(32):
                            assert addr[l] not in where
                            where[int(addr[l])] = (int(c_row[l]), int(c_col[l]))
        assert len(where) == tile_m * pass_cols // 2           # one word per two columns, all of them
        pieces = row_bytes // 16
        for r in range(tile_m):
            for ch in range(pieces):
                base = r * row_bytes + ((ch ^ (r & 7)) << 4)
                for word in range(4):
                    assert where[base + 4 * word] == (r, p * pass_cols + 8 * ch + 2 * word)


# ---- launch plans ------------------------------------------------------------------------

def test_plan_gemm_tma_and_pointer_staging(archs):
    from porter.runtime.gemm import plan_gemm

    a = np.zeros((256, 512), ml_dtypes.bfloat16)
    b = np.zeros((512, 512), ml_dtypes.bfloat16)
    rtx = plan_gemm(a, b, archs["rtx-blackwell"])
    assert set(rtx.maps) == {"tma_a", "tma_b"}
    assert rtx.maps["tma_a"].box == (64, 128) and rtx.maps["tma_a"].swizzle == "128B"
    assert rtx.maps["tma_b"].box == (64, 128)
    assert rtx.grid == (256 // 128) * (512 // 128) and rtx.block == 256 and rtx.smem_bytes == rtx.spec.smem_bytes
    amp = plan_gemm(a, b, archs["ampere"])
    assert amp.maps == {} and [p for p, _ in amp.params][:2] == ["a", "b"]
    assert amp.grid == (256 // 128) * (512 // 256)
    # A pointer-staged kernel computes row addresses from K: rows must be packed.
    wide = np.zeros((256, 1024), ml_dtypes.bfloat16)[:, :512]
    with pytest.raises(PorterError, match="rows are 2048 bytes apart"):
        plan_gemm(wide, b, archs["ampere"])


def test_plan_gemm_block_scales_are_row_major_pointers(archs):
    from porter.runtime.gemm import plan_gemm

    rtx = archs["rtx-blackwell"]
    a = np.zeros((128, 512), np.uint8)
    sf = np.arange(128 * 16, dtype=np.uint8).reshape(128, 16)
    plan = plan_gemm(a, a, rtx, "mxfp8", scales=(sf, sf))
    assert set(plan.maps) == {"tma_a", "tma_b"} and set(plan.host_scales) == {"sfa", "sfb"}
    assert (plan.host_scales["sfa"] == sf).all()                 # as given: no chunk reordering
    fp4 = np.zeros((128, 256), np.uint8)                          # K = 512 packed e2m1
    sf4 = np.zeros((128, 32), np.uint8)
    plan = plan_gemm(fp4, fp4, rtx, "nvfp4", scales=(sf4, sf4), scale_a=2.0)
    assert plan.maps["tma_a"].dims == (256, 128) and plan.maps["tma_a"].box == (128, 128)
    assert plan.scale_a == 2.0
    with pytest.raises(PorterError, match=r"expected \(128, 32\)"):
        plan_gemm(fp4, fp4, rtx, "nvfp4", scales=(sf4[:, :16], sf4))


def test_block_scale_selectors_step_through_the_scale_words(builds):
    """mxfp8: MMA kk of a stage reads byte kk of its lane's scale word (byte-id 0..3,
    thread-id 0); nvfp4 (scale_vec::4X) reads a whole word with selectors {0, 0}."""
    import re

    per_stage = 4 * (64 // 16) * (32 // 8)
    mx = re.findall(r"kind::mxf8f6f4\.block_scale[^;]*", builds[("rtx-blackwell", "mxfp8")].compiled.ptx)
    ids = [re.findall(r"\{\s*(\d+),\s*(\d+)\s*\}", ins) for ins in mx]
    assert len(mx) == per_stage
    assert sorted({tuple(i) for i in ids}) == [((str(b), "0"), (str(b), "0")) for b in range(4)]
    assert all(sum(1 for i in ids if i[0][0] == str(b)) == per_stage // 4 for b in range(4))
    nv = re.findall(r"kind::mxf4nvf4\.block_scale\.scale_vec::4X[^;]*", builds[("rtx-blackwell", "nvfp4")].compiled.ptx)
    assert len(nv) == per_stage and all(re.findall(r"\{\s*0,\s*0\s*\}", ins) for ins in nv)


def test_scale_words_come_from_the_lanes_the_mma_reads(builds):
    """The template loads, in lane l, the scales of A row l / 4 + 8 (l % 2) of each m16
    fragment and of B column l / 4 of each n8 fragment (thread-id 0); porter.emu's reading of
    the ISA says which lane the MMA takes each row's / column's scale from."""
    from porter.emu.units import mma_sync as emu

    scale_lanes = getattr(emu, "scale_lanes", None)
    if scale_lanes is None:
        pytest.skip("this porter.emu has no block-scaled mma.sync model (scale_lanes)")
    src = builds[("rtx-blackwell", "mxfp8")].source
    assert "warp_row + 16 * i + (lane >> 2) + 8 * (lane & 1u)" in src
    assert "warp_col + 8 * j + (lane >> 2)" in src
    a_lanes, b_lanes = scale_lanes("a", 0), scale_lanes("b", 0)
    for lane in range(32):
        if lane % 4 < 2:
            assert a_lanes[(lane >> 2) + 8 * (lane & 1)] == lane
        if lane % 4 == 0:
            assert b_lanes[lane >> 2] == lane
    assert sorted(a_lanes) == [l for l in range(32) if l % 4 < 2] and sorted(b_lanes) == list(range(0, 32, 4))


def _driver_missing() -> bool:
    try:
        from cuda.bindings import driver as real

        real.cuInit(0)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__ == "DynamicLibNotFoundError"
    return False


@pytest.mark.skipif(not _driver_missing(), reason="the NVIDIA driver is installed: real calls would run")
@pytest.mark.parametrize("arch_name", ["ampere", "rtx-blackwell"])
def test_rehearsal_launch_with_pointers_or_tensor_maps(monkeypatch, archs, arch_name):
    """validate_gemm through the rehearsal GPU (real binding conversions, then a host
    model): the cp.async kernel's a / b pointers and the TMA kernel's maps both reach it."""
    from porter.runtime import cubins, device, driver, fakedriver
    from porter.runtime import timing
    from porter.validation import device_harness as dh
    from porter.runtime import device_runs as dr

    arch = archs[arch_name]
    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.delenv(fakedriver.REHEARSAL_ENV, raising=False)
    monkeypatch.setattr(device, "_DEFAULT", {})
    monkeypatch.setattr(cubins, "candidates", lambda spec, arch: iter([("test", b"\x7fELF test")]))
    monkeypatch.setattr(timing, "MAX_ROTATION_SETS", 2)
    fakedriver.install(fakedriver.FakeGPU(arch_name))
    try:
        spec = gemm.make_spec(arch, "bf16")
        cfg = spec.config
        checks = dr.validate_gemm(spec, arch, shapes=[(cfg["tile_m"], cfg["tile_n"], 2 * cfg["tile_k"])], seeds=1)
        assert checks and all(c["passed"] for c in checks)
    finally:
        driver._init.cache_clear()
        driver.context.cache_clear()


@pytest.mark.parametrize("variant", ["mxfp8", "nvfp4"])
def test_block_scaled_warp_stage_model(builds, variant):
    """One warp's MMAs over one stage of a block-scaled kernel, executed with porter.emu's
    mma.sync arithmetic: the swizzled tiles read through the template's ldmatrix addresses,
    the scale words each lane loads (row-major [rows, K/block] bytes, the template's lanes
    and byte / word per MMA step) - against the dequantized product of the same codes."""
    from porter.emu.units import mma_sync as emu
    from porter.validation import formats

    if "m16n8k64" not in emu.SHAPES or not hasattr(emu, "scale_values"):
        pytest.skip("this porter.emu has no block-scaled mma.sync model")
    spec = builds[("rtx-blackwell", variant)].spec
    cfg = spec.config
    rng = np.random.default_rng(3)
    fmt, sfmt = cfg["a_format"], cfg["scale_format"]
    shape = "m16n8k32" if fmt == "e4m3" else "m16n8k64"
    block = cfg["scale_block_k"]
    k = cfg["tile_k"]                                            # one stage of K elements
    tile_m, tile_n = cfg["tile_m"], cfg["tile_n"]

    def operand(rows):
        raw = rng.integers(0, 256, (rows, 128), dtype=np.uint8)
        if fmt == "e4m3":
            raw[(raw & 0x7F) == 0x7F] = 0                        # no NaN codes
            codes = raw
        else:                                                    # two e2m1 per byte, even k low
            codes = np.stack([raw & 0xF, raw >> 4], axis=-1).reshape(rows, k)
        scales = (rng.integers(120, 135, (rows, k // block)) if sfmt == "ue8m0"
                  else rng.integers(0x20, 0x50, (rows, k // block))).astype(np.uint8)
        values = formats.decode(codes, fmt) * np.repeat(formats.decode(scales, sfmt), block, axis=1)
        smem = np.zeros(rows * 128, np.uint8)
        for r in range(rows):
            for c in range(8):
                smem[swizzle_128b(r, c): swizzle_128b(r, c) + 16] = raw[r, 16 * c: 16 * c + 16]
        return smem, scales, values

    a_smem, sfa, a_vals = operand(tile_m)
    b_smem, sfb, b_vals = operand(tile_n)
    lanes = np.arange(32)

    def words(scales, rows, kk):
        """Each lane's 32-bit scale word for MMA step kk (mx: the k-block's four bytes,
        byte kk selected by byte-id; nvfp4: word kk of the 16 bytes)."""
        chunk = scales[rows]                                     # (32, K/block) bytes
        w = chunk[:, 0:4] if block == 32 else chunk[:, 4 * kk: 4 * kk + 4]
        return np.ascontiguousarray(w).view("<u4").reshape(32)

    for warp_row, warp_col in ((0, 0), (64, 96)):
        acc = np.zeros((4, 4, 16, 8), np.float32)
        for kk in range(4):
            for i in range(4):
                regs_a = emu.ldmatrix(a_smem, a_addresses(warp_row, i, kk), 4, False)
                a16 = emu.operand_values(regs_a, shape, "a", fmt)
                a_rows = warp_row + 16 * i + (lanes >> 2) + 8 * (lanes & 1)
                sa = emu.scale_values(words(sfa, a_rows, kk), "a", "1X" if block == 32 else "4X",
                                      kk if block == 32 else 0, 0, sfmt)
                for jj in range(2):
                    regs_b = emu.ldmatrix(b_smem, b_addresses(warp_col, jj, kk), 4, False)
                    for f, pair in ((2 * jj, regs_b[:, 0:2]), (2 * jj + 1, regs_b[:, 2:4])):
                        b8 = emu.operand_values(pair, shape, "b", fmt)
                        b_cols = warp_col + 8 * f + (lanes >> 2)
                        sb = emu.scale_values(words(sfb, b_cols, kk), "b", "1X" if block == 32 else "4X",
                                              kk if block == 32 else 0, 0, sfmt)
                        acc[i, f] = emu.mma(a16, b8, acc[i, f], sa, sb)
        ref = a_vals[warp_row: warp_row + 64] @ b_vals[warp_col: warp_col + 32].T
        got = acc.transpose(0, 2, 1, 3).reshape(64, 32)
        assert np.allclose(got, ref, rtol=1e-5, atol=1e-5 * np.abs(ref).max()), (variant, warp_row, warp_col)


@pytest.mark.slow
@pytest.mark.parametrize("arch_name,variant,shape", [
    ("rtx-blackwell", "bf16", (256, 256, 320)), ("ampere", "bf16", (256, 512, 320)),
    ("rtx-blackwell", "fp8", (256, 256, 640)), ("rtx-blackwell", "mxfp8", (256, 256, 640)),
    ("rtx-blackwell", "nvfp4", (256, 256, 1280))])
def test_persistent_walk_and_ring_wrap_emulated(archs, arch_name, variant, shape):
    """In porter's PTX simulator on a 2-SM device: two tiles per persistent CTA (the load
    side runs into the next tile while the MMAs finish this one) and five k-blocks through
    a 3-stage ring."""
    validate = pytest.importorskip("porter.runtime.emulated_runs")
    from porter.runtime.emulated import EmuDevice

    arch = archs[arch_name]
    result = validate.emulate(gemm.make_spec(arch, variant), arch, shapes=[shape], seeds=1,
                              device=EmuDevice(sm_count=2))
    assert result["status"] == "passed", result["reason"]


@pytest.mark.slow
@pytest.mark.parametrize("arch_name,anchor", [
    ("rtx-blackwell", "            __syncthreads();                   // this pass's columns are staged\n"),
    ("ampere", "            __syncthreads();                   // MMAs (pass 0) / the previous pass's reads are done\n")])
def test_staged_epilogue_barriers_are_needed(archs, arch_name, anchor):
    """Planted bugs the simulator must catch: without the barrier after the staging stores a
    warp reads rows another warp has not written yet; without the one before a pass, a warp
    overwrites the stage while others still read it (a race, or a wrong C)."""
    validate = pytest.importorskip("porter.runtime.emulated_runs")
    from porter.runtime.emulated import EmuDevice

    arch = archs[arch_name]
    spec = gemm.make_spec(arch, "bf16")
    src = gemm.render(spec, arch)
    assert src.count(anchor) == 1
    shape = (2 * spec.config["tile_m"], 2 * spec.config["tile_n"], 2 * spec.config["tile_k"])
    result = validate.emulate(spec, arch, shapes=[shape], seeds=1, source=src.replace(anchor, ""),
                              device=EmuDevice(sm_count=2))
    assert result["status"] == "failed", result
