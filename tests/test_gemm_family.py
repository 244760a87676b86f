"""The GEMM family's variant table, Unsupported reporting, dispatch, shapes and numerics."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import family_module, gemm, gemm_wgmma
from porter.kernels.base import KernelSpec, Unsupported




class NoTensorCoreArch:
    """Stands in for a descriptor with neither wgmma nor tcgen05 (e.g. an sm_80 one)."""

    name = "ampere-like"

    def has(self, feature):
        return feature in {"fp8"}


def test_registered():
    assert family_module("gemm") is gemm
    assert gemm.FAMILY == "gemm"


def test_variant_table_is_data():
    assert set(gemm.VARIANTS) == {"bf16", "fp8", "mxfp8", "nvfp4"}
    assert gemm.VARIANTS["bf16"].features == ()
    assert gemm.VARIANTS["fp8"].features == ("fp8",)
    assert gemm.VARIANTS["mxfp8"].features == ("fp8", "block_scale_mx")
    assert gemm.VARIANTS["nvfp4"].features == ("fp4", "block_scale_nvfp4")
    assert gemm.VARIANTS["mxfp8"].scale_block_k == 32 and gemm.VARIANTS["mxfp8"].scale_format == "ue8m0"
    assert gemm.VARIANTS["nvfp4"].scale_block_k == 16 and gemm.VARIANTS["nvfp4"].scale_format == "ue4m3"


def test_hopper_variants(hopper):
    by_name = {v.name: v for v in gemm.variants(hopper)}
    assert len(by_name) == 8
    assert isinstance(by_name["gemm.bf16"], KernelSpec) and isinstance(by_name["gemm.fp8"], KernelSpec)
    # CTA pairs exist only on the tcgen05 path, so its features are named too: the wgmma
    # path cannot build them whatever else hopper claims. Block scales have two paths
    # (tcgen05, mma_sync), named as the alternative, and the scale features hopper lacks.
    expected_missing = {
        "gemm.mxfp8": ("tcgen05|mma_sync", "block_scale_mx"),
        "gemm.nvfp4": ("tcgen05|mma_sync", "fp4", "block_scale_nvfp4"),
        "gemm.bf16.pair": ("cta_pair", "tcgen05", "tmem"),
        "gemm.fp8.pair": ("cta_pair", "tcgen05", "tmem"),
        "gemm.mxfp8.pair": ("block_scale_mx", "cta_pair", "tcgen05", "tmem"),
        "gemm.nvfp4.pair": ("fp4", "block_scale_nvfp4", "cta_pair", "tcgen05", "tmem"),
    }
    for name, missing in expected_missing.items():
        item = by_name[name]
        assert isinstance(item, Unsupported), name
        assert item.missing == missing and item.family == "gemm"
        assert item.variant == name.removesuffix(".pair")
        assert all(f in item.reason for f in missing)


def test_hopper_copy_claiming_cta_pair_still_lists_pairs_as_unsupported(hopper, tmp_path, capsys):
    # A (false) cta_pair claim on a wgmma arch must not route .pair to the wgmma path,
    # which has no pair MMA: the pair forms still need tcgen05 and tmem.
    from porter.descriptor.arch import arch_from_text
    from porter.errors import PorterError
    from porter.cli import main
    from porter import paths

    class ClaimsCtaPair:               # the claim added past the loader (see below)
        def __init__(self, arch):
            self._arch = arch

        def __getattr__(self, name):
            return getattr(self._arch, name)

        def has(self, feature):
            return feature == "cta_pair" or self._arch.has(feature)

    arch = ClaimsCtaPair(hopper)
    assert arch.has("cta_pair") and not arch.has("tcgen05")
    by_name = {v.name: v for v in gemm.variants(arch)}   # never raises for a consistent descriptor
    assert by_name["gemm.bf16.pair"].missing == ("tcgen05", "tmem")
    assert isinstance(by_name["gemm.bf16"], KernelSpec)

    # As a file the claim cannot be made consistent: cta_pair needs a cta_group 2 MMA shape,
    # which wgmma does not have (the PTX ISA's shape table), so the loader refuses it in one line.
    text = (paths.data_dir("arch") / "hopper.yaml").read_text()
    anchor = "        - {m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}\n    tf32:"
    assert text.count(anchor) == 1 and text.count("cta_pair: false") == 1
    text = text.replace("cta_pair: false", "cta_pair: true").replace(anchor, anchor.replace(
        "\n    tf32:", "\n        - {m: 128, n_min: 16, n_max: 256, n_step: 16, cta_group: 2}\n    tf32:"))
    with pytest.raises(PorterError, match="cta_group 2 is not a wgmma shape"):
        arch_from_text(text, "hopper-pair.yaml")
    path = tmp_path / "hopper-pair.yaml"
    path.write_text(text)
    assert main(["kernel", "list", "--arch", str(path)]) == 2
    assert "hopper-pair.yaml" in capsys.readouterr().err


def test_rtx_blackwell_builds_every_single_cta_variant_on_the_mma_sync_path():
    rtx = load_arch("rtx-blackwell")
    by_name = {v.name: v for v in gemm.variants(rtx)}
    for name in ("gemm.bf16", "gemm.fp8", "gemm.mxfp8", "gemm.nvfp4"):
        assert isinstance(by_name[name], KernelSpec) and by_name[name].config["mainloop"] == "mma_sync", name
    # CTA pairs exist only on the tcgen05 path: their missing features are named one by one
    assert by_name["gemm.bf16.pair"].missing == ("cta_pair", "tcgen05", "tmem")
    assert not any("|" in m for v in by_name.values() if v.name.endswith(".pair") for m in v.missing)


def test_blackwell_lacks_nothing(blackwell):
    for v in gemm.VARIANTS.values():
        for pair in (False, True):
            assert gemm.missing_features(blackwell, v, pair) == ()


def test_no_tensor_core_path_is_named():
    arch = NoTensorCoreArch()
    item = gemm.make_spec(arch, "fp8")
    assert isinstance(item, Unsupported)
    assert item.missing == ("tcgen05|wgmma|mma_sync",)   # any generation would do
    assert "no tensor-core generation" in item.reason


def test_unknown_variant():
    with pytest.raises(PorterError, match="unknown variant 'int4'"):
        gemm.make_spec(NoTensorCoreArch(), "int4")


def test_dispatch_by_feature(hopper):
    spec = gemm.make_spec(hopper, "bf16")
    assert spec.config["mainloop"] == "wgmma" == hopper.tensor_core.generation
    assert spec.template == "gemm.cu.j2" and spec.family == "gemm"
    assert spec.entry == "porter_gemm_bf16_wgmma"


def test_kernel_params_uniform():
    base = [("tma_a", "TmaDescriptor"), ("tma_b", "TmaDescriptor")]
    tail = [("c", "__nv_bfloat16*"), ("m", "int"), ("n", "int"), ("k", "int"),
            ("scale_a", "float"), ("scale_b", "float")]
    assert gemm.kernel_params(gemm.VARIANTS["bf16"]) == base + tail
    assert gemm.kernel_params(gemm.VARIANTS["fp8"]) == base + tail
    scales = [("tma_sfa", "TmaDescriptor"), ("tma_sfb", "TmaDescriptor")]
    assert gemm.kernel_params(gemm.VARIANTS["nvfp4"]) == base + scales + tail


def test_rendered_header_lists_params(hopper):
    spec = gemm.make_spec(hopper, "fp8")
    src = gemm.render(spec, hopper)
    header = src[: src.index("#ifndef PORTER_COMMON_CUH")]
    for name, ctype in spec.config["params"]:
        assert f"//   {name}" in header and ctype in header
    # fp8 tile 128 x 256 x 128 (fast accumulation): A 128 rows; B this CTA's 128-row slice of 256.
    assert header.count("box {128, 128}") == 2
    assert "clusters of 2" in header and "M % 256 == 0, N % 256 == 0, K % 128 == 0" in header
    assert f"{spec.entry}(const __grid_constant__ TmaDescriptor tma_a" in src


def test_problem_shape_checks(hopper):
    spec = gemm.make_spec(hopper, "bf16")
    gemm.check_problem_shape(spec, 256, 512, 128)
    with pytest.raises(PorterError, match=r"N=300 must be a positive multiple of 256.*pad N to 512"):
        gemm.check_problem_shape(spec, 256, 300, 64)
    with pytest.raises(PorterError, match="K=0"):
        gemm.check_problem_shape(spec, 256, 256, 0)


@pytest.mark.parametrize("variant", ["bf16", "fp8"])
def test_numerics_at_config_mma_k(hopper, variant):
    spec = gemm.make_spec(hopper, variant)
    result = gemm.numerics(spec, hopper)
    assert result["mma_k"] == spec.config["mma_k"] == hopper.tensor_core.k_of(spec.config["kind"])
    assert result["results"] and all(r["mma_k"] == spec.config["mma_k"] for r in result["results"])
    # The model promotes where the kernel does: neither default promotes (fp8 accumulates
    # fast); fp8 with accumulation=promoted every TILE_K.
    assert result["promote_k"] is None and all(r["promote_k"] is None for r in result["results"])
    assert result["passed"] is True
    if variant == "fp8":
        promoted = gemm_wgmma.make_spec(hopper, gemm.VARIANTS["fp8"], False, accumulation="promoted")
        res = gemm.numerics(promoted, hopper)
        assert res["promote_k"] == promoted.config["tile_k"] and res["passed"] is True


def test_numerics_model_promotion_interval():
    """gemm_model(promote_k): an interval of one MMA is the plain fp32 accumulation; a
    longer one changes the rounding order (not the tolerance verdict); a K that is not a
    multiple of the interval ends in a short interval; bad intervals are refused."""
    import numpy as np

    from porter.validation import gemm_numerics
    from porter.validation.reference_gemm import gemm_model

    a, b = gemm_numerics.random_operands(32, 24, 640, seed=5)
    plain = gemm_model(a, b, mma_k=32, out_dtype="fp32")
    np.testing.assert_array_equal(gemm_model(a, b, mma_k=32, out_dtype="fp32", promote_k=32), plain)
    promoted = gemm_model(a, b, mma_k=32, out_dtype="fp32", promote_k=128)   # 640 = 5 x 128
    assert (promoted != plain).any() and np.allclose(promoted, plain, rtol=1e-5, atol=1e-5)
    short = gemm_model(a, b, mma_k=32, out_dtype="fp32", promote_k=256)      # 256 + 256 + 128
    assert np.allclose(short, plain, rtol=1e-5, atol=1e-5)
    with pytest.raises(PorterError, match="promotion interval 48 is not a positive multiple of the MMA K"):
        gemm_model(a, b, mma_k=32, promote_k=48)
    res = gemm_numerics.check_gemm("fp8", 64, 64, 1024, mma_k=32, promote_k=128)
    assert res["promote_k"] == 128 and res["passed"]


def test_render_names_missing_config_keys(hopper):
    spec = gemm.make_spec(hopper, "bf16")
    broken = KernelSpec(**{**{f: getattr(spec, f) for f in spec.__dataclass_fields__},
                           "config": {k: v for k, v in spec.config.items() if k not in ("tma_maps", "stages")}})
    with pytest.raises(PorterError, match="lacks tma_maps, stages"):
        gemm.render(broken, hopper)


@pytest.mark.parametrize("num_m,num_n,group_m,grid", [(16, 8, 8, 132), (13, 5, 8, 7), (3, 11, 8, 4), (1, 1, 8, 132)])
def test_tile_order_covers_every_tile_once(num_m, num_n, group_m, grid):
    tiles = [t for cta in range(grid) for t in gemm.tile_order(num_m, num_n, group_m, cta, grid)]
    assert sorted(tiles) == [(i, j) for i in range(num_m) for j in range(num_n)]


def test_tile_order_groups_rows_for_l2():
    # The first 16 units of a 16 x 8 grid with GROUP_M 8: 8 rows of column 0, then of column 1.
    order = gemm.tile_order(16, 8, 8)
    assert order[:16] == [(i, 0) for i in range(8)] + [(i, 1) for i in range(8)]
    assert order[64] == (8, 0)  # second group starts at row 8


def test_template_scheduler_matches_model(hopper):
    # The template's formula, statement by statement, is what tile_order models.
    src = gemm.render(gemm.make_spec(hopper, "bf16"), hopper)
    for stmt in ("const int per_group = GROUP_M * num_n;", "const int first_m = group * GROUP_M;",
                 "const int rows = min(num_m - first_m, GROUP_M);",
                 "tile_m = first_m + in_group % rows;", "tile_n = in_group / rows;"):
        assert stmt in src


# ---- the shared primitives (kernels_src/common, mbarrier, tma) on both targets ----

PRIMITIVES_PROBE = '''
{% include "common/common.cuh" %}
{% include "mbarrier/mbarrier.cuh" %}
{% include "tma/tma.cuh" %}
extern "C" __global__ void __launch_bounds__(128, 1)
primitives_probe(const __grid_constant__ TmaDescriptor map, uint32_t* out, int pair) {
    __shared__ alignas(1024) uint8_t tile[4096];
    __shared__ uint64_t bar;
    const uint32_t b = porter::smem_u32(&bar), dst = porter::smem_u32(tile);
    if (threadIdx.x == 0) { porter::mbar_init(b, 1); porter::mbar_fence_init(); }
    porter::cluster_sync();
    if (porter::warp_id() == 0 && porter::elect_one_sync()) {
        porter::tma_prefetch_descriptor(&map);
        porter::mbar_arrive_expect_tx(b, 3 * 4096);
        porter::tma_load_2d(dst, &map, b, 0, 0);
        porter::tma_load_2d_multicast(dst, &map, porter::map_to_cta(b, 0), 64, 0, 0x3);
        PAIR_LOADS
    }
    porter::mbar_wait(b, 0);
    porter::mbar_wait_cluster(b, 1);
    porter::fence_proxy_async_smem();
    porter::named_barrier_sync(1, 128);
    if (threadIdx.x == 0) {
        porter::tma_store_2d(&map, dst, 0, 0);
        porter::tma_store_commit();
        porter::tma_store_wait_read<0>();
        porter::tma_store_wait_all<0>();
        porter::mbar_arrive(b);
        porter::mbar_arrive_cluster(porter::map_to_cta(b, porter::cluster_ctarank() ^ 1));
        porter::mbar_expect_tx(b, 16);
    }
    out[threadIdx.x] = porter::pack_bf16x2(1.f, 2.f) + porter::pack_e4m3x2(1.f, 2.f) + porter::cluster_nctarank();
}
'''
PAIR_LOADS = ("porter::tma_load_2d_pair(dst, &map, b, 0, 0);"
              " porter::tma_load_2d_pair_multicast(dst, &map, b, 0, 0, 0x3);")


def _probe_histogram(target, pair_loads):
    from porter.compile import sass
    from porter.compile.render import environment
    from porter.compile.toolchain import compile_cuda

    src = environment().from_string(PRIMITIVES_PROBE.replace("PAIR_LOADS", pair_loads)).render()
    res = compile_cuda(src, target, "primitives_probe.cu")
    return sass.opcode_histogram(sass.disassemble(res.cubin))


@pytest.mark.parametrize("target", ["sm_90a", "sm_100a"])
def test_primitives_compile_to_their_sass(target):
    hist = _probe_histogram(target, PAIR_LOADS if target == "sm_100a" else "")
    for opcode in ("UTMALDG.2D", "UTMALDG.2D.MULTICAST", "UTMASTG.2D", "UTMACCTL.PF", "ELECT",
                   "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT", "FENCE.VIEW.ASYNC.S",
                   "UCGABAR_ARV", "UCGABAR_WAIT"):
        assert hist.get(opcode), (opcode, dict(hist))
    pair_forms = {op for op in hist if op.startswith("UTMALDG") and op.endswith(".2CTA")}
    assert pair_forms == ({"UTMALDG.2D.2CTA", "UTMALDG.2D.MULTICAST.2CTA"} if target == "sm_100a" else set())


def test_pair_tma_is_rejected_on_hopper():
    from porter.errors import CompileError

    with pytest.raises(CompileError, match="cta_group"):
        _probe_histogram("sm_90a", PAIR_LOADS)
