"""Attention family skeleton: variants by feature, names, parameters, numerics, host checks."""
from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import FAMILIES, attention, family_module
from porter.kernels.base import KernelSpec, Unsupported

EXPECTED_NAMES = ["attention.hd64", "attention.hd64.causal", "attention.hd128", "attention.hd128.causal"]



class _NoTensorCore:
    """A descriptor stand-in with no tensor-core feature at all."""

    name = "none"
    target = "sm_80"

    def has(self, feature: str) -> bool:
        return False


def test_registered_as_a_family():
    assert FAMILIES["attention"] == "attention"
    assert family_module("attention") is attention


def test_hopper_variants_are_the_four_wgmma_specs(hopper):
    specs = attention.variants(hopper)
    assert [s.name for s in specs] == EXPECTED_NAMES
    assert all(isinstance(s, KernelSpec) for s in specs)
    assert [s.variant for s in specs] == ["attention.bf16.hd64", "attention.bf16.hd64.causal",
                                          "attention.bf16.hd128", "attention.bf16.hd128.causal"]
    assert {s.config["mainloop"] for s in specs} == {hopper.tensor_core.generation}
    assert len({s.entry for s in specs}) == 4, "entries must be unique per spec"
    for s in specs:
        assert s.config["causal"] == s.name.endswith(".causal")
        assert s.config["head_dim"] == int(s.name.split(".")[1][2:])


def test_no_tensor_core_means_unsupported_with_the_missing_feature():
    out = attention.variants(_NoTensorCore())
    assert [u.name for u in out] == EXPECTED_NAMES
    assert all(isinstance(u, Unsupported) and u.missing for u in out)


def test_params_recorded_in_launch_order(hopper):
    spec = attention.variants(hopper)[0]
    names = [n for n, _ in spec.config["params"]]
    assert names == ["tma_q", "tma_k", "tma_v", "o", "lse", "batch", "heads_q", "heads_kv",
                     "seq_q", "seq_k", "softmax_scale_log2"]
    src = attention.render(spec, hopper)
    # The rendered signature lists them in exactly that order with their C types
    # (TmaDescriptor by value as const __grid_constant__, pointers __restrict__).
    sig = src[src.index(f"{spec.entry}(") + len(spec.entry) + 1:]
    args = [a.split() for a in sig[:sig.index(")")].split(",")]
    assert [a[-1] for a in args] == names
    for a, (_, ctype) in zip(args, spec.config["params"]):
        if ctype == "TmaDescriptor":
            assert a[:-1] == ["const", "__grid_constant__", "TmaDescriptor"]
        else:
            assert a[0] == ctype


def test_render_is_self_contained_and_feature_driven(hopper):
    spec = attention.variants(hopper)[3]
    src = attention.render(spec, hopper)
    assert "#include \"" not in src, "primitives must be inlined by the template"
    assert "constexpr bool kCausal = true;" in src
    assert f"constexpr int kHeadDim = {spec.config['head_dim']};" in src


def test_templates_and_modules_branch_on_features_not_names():
    from porter import paths

    files = [paths.data_dir("templates") / "attention.cu.j2", paths.data_dir("templates") / "attention" / "wgmma.cu.j2"]
    files += [paths.data_dir("kernels_src") / "attention" / f for f in ("softmax.cuh", "mask.cuh")]
    files += [Path(attention.__file__), Path(attention.__file__).with_name("attention_wgmma.py")]
    for f in files:
        text = f.read_text().lower()
        for word in ("hopper", "blackwell", "sm_90", "sm_100", "arch.name =="):
            assert word not in text, f"{f.name} mentions {word!r}"


@pytest.mark.parametrize("idx", [0, 3])
def test_numerics_model_passes_at_the_spec_tile(hopper, idx):
    spec = attention.variants(hopper)[idx]
    res = attention.numerics(spec, hopper)
    assert res["passed"], res
    assert res["block_n"] == spec.config["block_n"]
    assert len(res["cases"]) == len(attention.NUMERICS_CASES)
    assert all(c["causal"] == spec.config["causal"] for c in res["cases"])


def _bf16(shape):
    return np.zeros(shape, dtype=ml_dtypes.bfloat16)


@pytest.mark.parametrize("q,k,v,words", [
    (_bf16((1, 2, 8, 96)), _bf16((1, 2, 8, 96)), _bf16((1, 2, 8, 96)), "head dim 96 is not supported"),
    (np.zeros((1, 2, 8, 64), np.float16), _bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 64)), "q has dtype float16"),
    (_bf16((1, 2, 8, 64)), np.zeros((1, 2, 8, 64), np.float32), _bf16((1, 2, 8, 64)), "k has dtype float32"),
    (_bf16((1, 3, 8, 64)), _bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 64)), "Hq % Hkv == 0"),
    (_bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 64)), _bf16((1, 2, 9, 64)), "must have the same shape"),
    (_bf16((2, 8, 64)), _bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 64)), "must be 4-D"),
    (_bf16((2, 2, 8, 64)), _bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 64)), "batch differs"),
    (_bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 128)), _bf16((1, 2, 8, 128)), "head dim differs"),
    ([[1.0]], _bf16((1, 2, 8, 64)), _bf16((1, 2, 8, 64)), "numpy array or a DLPack tensor"),
])
def test_host_validation_errors_before_any_gpu(q, k, v, words):
    with pytest.raises(PorterError) as exc:
        attention.attention(q, k, v)
    msg = str(exc.value)
    assert words in msg and msg.startswith("attention:") and "\n" not in msg


class _TorchLike:
    """Shape/dtype like a torch tensor (dtype prints as 'torch.bfloat16')."""

    def __init__(self, shape, dtype="torch.bfloat16"):
        self.shape, self.dtype = shape, dtype


def test_host_validation_accepts_dlpack_style_bf16():
    q, kv = _TorchLike((2, 8, 33, 128)), _TorchLike((2, 2, 70, 128))
    assert attention.validate_inputs(q, kv, kv) == (2, 8, 2, 33, 70, 128)
    with pytest.raises(PorterError, match="dtype float16"):
        attention.validate_inputs(_TorchLike((1, 1, 4, 64), "torch.float16"), q, q)


def test_valid_inputs_without_a_device_say_so(hopper):
    from porter.runtime import driver

    try:
        driver.device()
        pytest.skip("a CUDA device is present; the launch itself is covered by GPU tests")
    except PorterError:
        pass
    x = _bf16((1, 2, 16, 64))
    with pytest.raises(PorterError, match="^no CUDA device: "):
        attention.attention(x, x, x, causal=True, arch=hopper)
    with pytest.raises(PorterError, match="^no CUDA device: "):
        attention.attention(x, x, x)


def test_host_maps_are_valid_tensor_maps_even_for_tiny_problems(hopper):
    spec = attention.find_spec(hopper, 128, False)
    b, hq, hkv, sq, sk, d = 1, 2, 1, 40, 100, 128
    q, kv = _bf16((b, hq, sq, d)), _bf16((b, hkv, sk, d))
    plan = attention.launch_plan(spec, hopper, b, hq, hkv, sq, sk)
    host = attention._pad_to_box(plan, {"tma_q": q, "tma_k": kv, "tma_v": kv})
    maps = attention.tensor_maps(spec, plan, d * 2)      # checked against the driver's rules
    for param, m in maps.items():
        assert m.data_type == "BFLOAT16" and m.swizzle == "128B"
        assert m.dims == (d, host[param].shape[0]) and m.strides == (d * 2,)
        assert m.box == (64, spec.config["tma_boxes"][param[-1]][1])
        assert host[param].shape[0] >= m.box[1] and host[param].flags["C_CONTIGUOUS"]
    assert host["tma_q"].shape[0] == 128 and host["tma_k"].shape[0] == 128   # padded from 80 / 100
    big = attention.launch_plan(spec, hopper, 2, 4, 2, 300, 500)
    host = attention._pad_to_box(big, {"tma_q": _bf16((2, 4, 300, d)), "tma_k": _bf16((2, 2, 500, d)),
                                        "tma_v": _bf16((2, 2, 500, d))})
    assert host["tma_q"].shape == (2 * 4 * 300, d) and host["tma_k"].shape == (2 * 2 * 500, d)


def test_find_spec_names_the_unsupported_head_dim(hopper):
    assert attention.find_spec(hopper, 128, True).name == "attention.hd128.causal"
    with pytest.raises(PorterError, match="head_dim=256"):
        attention.find_spec(hopper, 256, False)


# ---- the shared masking helpers, compiled for the host --------------------------------
# kernels_src/attention/mask.cuh is plain integer logic, so a host C++ compiler can run
# the very source the kernels inline and we can compare it with the reference mask.

_MASK_HARNESS = r"""
#define PORTER_COMMON_CUH
#define PORTER_DEVICE static inline
#include <cstdio>
#include "attention/mask.cuh"
using namespace porter::attn;
template <bool C> void dump(int bm, int bn) {
    for (int sq = 1; sq <= 13; ++sq) for (int sk = 1; sk <= 13; ++sk)
        for (int q0 = 0; q0 < sq; q0 += bm) {
            int n = kv_tile_count<C>(q0, bm, bn, sq, sk);
            std::printf("%d %d %d %d %d %d %d", C, bm, bn, sq, sk, q0, n);
            for (int t = 0; t * bn < sk + bn; ++t) std::printf(" %d", (int)kv_tile_needs_mask<C>(q0, t * bn, bn, sq, sk));
            std::printf(" |");
            for (int r = q0; r < q0 + bm; ++r) std::printf(" %d", key_limit<C>(r, sq, sk));
            std::printf("\n");
        }
}
int main() { for (int bm = 1; bm <= 4; ++bm) for (int bn = 1; bn <= 5; bn += 2) { dump<false>(bm, bn); dump<true>(bm, bn); } }
"""


def test_mask_helpers_match_the_reference_mask(tmp_path):
    import shutil
    import subprocess

    from porter import paths
    from porter.validation.reference_attention import causal_mask

    cxx = shutil.which("g++") or shutil.which("clang++")
    if cxx is None:
        pytest.skip("no host C++ compiler to run kernels_src/attention/mask.cuh on the CPU")
    src = tmp_path / "mask_harness.cpp"
    src.write_text(_MASK_HARNESS)
    exe = tmp_path / "mask_harness"
    subprocess.run([cxx, "-std=c++17", "-O1", f"-I{paths.data_dir('kernels_src')}", str(src), "-o", str(exe)],
                   check=True, capture_output=True)
    lines = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout.splitlines()
    assert len(lines) > 1000
    for line in lines:
        head, limits = line.split("|")
        causal, bm, bn, sq, sk, q0, n, *needs = map(int, head.split())
        visible = causal_mask(sq, sk) if causal else np.ones((sq, sk), bool)
        rows = range(q0, min(q0 + bm, sq))
        # key_limit: row r sees exactly keys [0, limit).
        for r, lim in zip(rows, map(int, limits.split())):
            assert visible[r].sum() == lim and visible[r, :lim].all(), line
        # kv_tile_count: the fewest tiles covering every key any stored row sees.
        last_key = max((int(np.nonzero(visible[r])[0].max()) for r in rows if visible[r].any()), default=-1)
        assert n == (last_key + 1 + bn - 1) // bn, line
        # kv_tile_needs_mask: False only where every (stored row, key) of the tile is visible.
        for t, flag in enumerate(needs):
            cols = range(t * bn, t * bn + bn)
            all_visible = all(c < sk and visible[r, c] for r in rows for c in cols)
            assert flag or all_visible, f"tile {t} skips the mask but hides keys: {line}"
            if not causal:
                assert flag == (t * bn + bn > sk), line


def test_launch_plan_is_persistent_and_matches_the_spec(hopper):
    spec = attention.find_spec(hopper, 128, True)
    plan = attention.launch_plan(spec, hopper, b=2, hq=8, hkv=2, sq=1000, sk=1500)
    tiles = 2 * 8 * 8   # ceil(1000 / 128) = 8 query tiles per (batch, head)
    assert plan["tiles"] == tiles and plan["grid"] == (min(tiles, hopper.sm_count), 1, 1)
    assert plan["block"] == (spec.threads, 1, 1) and plan["smem_bytes"] == spec.smem_bytes
    assert plan["tensor_maps"]["tma_q"]["rows"] == 2 * 8 * 1000
    assert plan["tensor_maps"]["tma_k"]["rows"] == 2 * 2 * 1500
    assert plan["tensor_maps"]["tma_v"]["box"] == [64, spec.config["block_n"]]
    assert abs(plan["scalars"]["softmax_scale_log2"] - 128 ** -0.5 * 1.4426950408889634) < 1e-12
    # Every scalar kernel parameter is provided, in the recorded order.
    names = [n for n, _ in spec.config["params"]]
    assert [n for n in names if n in plan["scalars"]] == names[5:]
    small = attention.launch_plan(spec, hopper, 1, 1, 1, 5, 5, softmax_scale=0.5)
    assert small["grid"] == (1, 1, 1) and small["scalars"]["softmax_scale_log2"] == 0.5 * 1.4426950408889634


@pytest.mark.parametrize("arch_name", ["hopper", "blackwell"])
def test_launch_plan_grid_respects_clusters_and_sms(arch_name):
    arch = load_arch(arch_name)
    specs = [s for s in attention.variants(arch) if isinstance(s, KernelSpec)]
    # Both archs build attention kernels: none at all is a broken family, not a skip.
    assert specs, f"no attention kernel for {arch_name}: {attention.variants(arch)}"
    assert {"attention.hd64", "attention.hd128"} <= {s.name for s in specs}
    for spec in specs:
        cluster = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
        for b, hq, sq in ((1, 1, 1), (1, 2, 300), (4, 32, 4096)):
            plan = attention.launch_plan(spec, arch, b, hq, 1, sq, 512)
            grid = plan["grid"][0]
            assert grid % cluster == 0 and cluster <= grid <= arch.sm_count, (spec.name, grid)
            # Never more clusters than tiles (an idle cluster would only wait at exit).
            assert grid // cluster <= max(1, plan["tiles"]), spec.name


# ---- which kernel attention() launches: single CTA or CTA pair --------------------------

def test_find_spec_picks_single_or_pair_and_says_why_not(hopper):
    bw = load_arch("blackwell")
    single = attention.find_spec(bw, 128, True)
    pair = attention.find_spec(bw, 128, True, pair=True)
    assert single.name == "attention.hd128.causal" and attention.cluster_size(single) == 1
    assert pair.name == "attention.hd128.causal.pair" and attention.cluster_size(pair) == 2
    # hd64 has a pair kernel too (its V half takes the 64-byte swizzle); Hopper has no CTA
    # pairs at all, and the error says so.
    assert attention.find_spec(bw, 64, False, pair=True).name == "attention.hd64.pair"
    with pytest.raises(PorterError, match="no CTA-pair kernel"):
        attention.find_spec(hopper, 128, False, pair=True)


def test_choose_spec_prefers_the_pair_unless_it_needs_more_waves(hopper):
    bw = load_arch("blackwell")
    # Enough query tiles to fill the machine either way: same waves, the pair wins the tie
    # (half the K/V bytes per CTA), and its grid is a whole number of pairs.
    big = attention.choose_spec(bw, 128, False, b=4, hq=32, sq=4096, sk=4096)
    assert attention.cluster_size(big) == 2
    plan = attention.launch_plan(big, bw, 4, 32, 8, 4096, 4096)
    assert plan["grid"][0] == 2 * min(plan["tiles"], bw.sm_count // 2) and plan["grid"][0] % 2 == 0
    # One 128-row query tile per head on every SM: one wave single, two as pairs (a pair
    # tile is 256 rows and only sm_count / 2 pairs run at once).
    heads = bw.sm_count
    short = attention.choose_spec(bw, 128, False, b=1, hq=heads, sq=128, sk=4096)
    assert attention.cluster_size(short) == 1
    assert (attention.estimated_steps(short, bw, 1, heads, 128, 4096)
            < attention.estimated_steps(attention.find_spec(bw, 128, False, pair=True), bw, 1, heads, 128, 4096))
    # Forcing either one, and no pair where there is none.
    assert attention.cluster_size(attention.choose_spec(bw, 128, False, 4, 32, 4096, 4096, pair=False)) == 1
    assert attention.cluster_size(attention.choose_spec(hopper, 128, False, 4, 32, 4096, 4096)) == 1
    # hd64 now has a pair as well, chosen at the long shape as hd128's is
    assert attention.cluster_size(attention.choose_spec(bw, 64, False, 4, 32, 4096, 4096)) == 2


def test_causal_cost_counts_the_longest_query_tile():
    bw = load_arch("blackwell")
    spec = attention.find_spec(bw, 128, True)
    # Sq = Sk = 1024: the last 128-row tile sees all 1024 keys = 8 K/V tiles; one wave.
    assert attention.estimated_steps(spec, bw, 1, 1, 1024, 1024) == 8
    # Sq > Sk: bottom-right alignment, the last rows see every key, the first none.
    assert attention._kv_tiles(0, 128, 128, 1024, 100, True) == 0
    assert attention._kv_tiles(896, 128, 128, 1024, 100, True) == 1


def test_pair_error_comes_before_the_device(hopper):
    x = _bf16((1, 2, 16, 128))
    with pytest.raises(PorterError, match="no CTA-pair kernel"):
        attention.attention(x, x, x, arch=hopper, pair=True)


def test_rescale_factor_is_exactly_one_when_the_max_does_not_move():
    """alpha = 2^(m_old c - m_new c) is computed as ex2(fma(m_old, c, -(m_new c))). With
    m_old == m_new that is ex2 of the rounding error of m c - not 0 - and comes out as
    1 + 1 ulp for |m c| >= 2, which defeats the TMEM mainloop's "skip the O correction
    when no max moved" test (alpha != 1). The shared helper must special-case it."""
    from porter import paths

    c = np.float32(128 ** -0.5 * attention.LOG2E)
    m = np.random.default_rng(0).uniform(0, 64, 4096).astype(np.float32)
    neg_mc = -(m * c)                                            # float32 product, rounded
    residual = (m.astype(np.float64) * np.float64(c) + neg_mc.astype(np.float64)).astype(np.float32)  # fmaf
    alpha = np.exp2(residual).astype(np.float32)
    assert np.any(residual != 0) and np.any(alpha != 1), "the premise: the unguarded alpha is not 1"
    src = (paths.data_dir("kernels_src") / "attention" / "softmax.cuh").read_text()
    body = src[src.index("PORTER_DEVICE float rescale_factor("):]
    body = body[:body.index("}")]
    assert "m_old == m_new ? 1.f :" in body
    # every wgmma and tcgen05 attention source as rendered (the tcgen05 forms share their
    # online max through an included file; q_tiles=2 is FA4's two-Q-tile form)
    from porter.descriptor.arch import load_arch
    from porter.kernels import family_module
    from porter.kernels.knobs import spec_with_knobs

    for arch_name, knobs in (("hopper", {}), ("blackwell", {}), ("blackwell", {"q_tiles": 2})):
        arch = load_arch(arch_name)
        spec = spec_with_knobs(arch, "attention.hd128", knobs)
        text = family_module(spec.family).render(spec, arch)
        assert re.search(r"rescale_factor\(m(\[i\])?, mx, scale_log2, neg_m\)", text), (arch_name, knobs)


@pytest.mark.parametrize("scale", [0.0, -0.125, float("nan"), float("inf")])
def test_launch_plan_rejects_a_scale_the_raw_score_max_cannot_take(hopper, scale):
    """The kernels track max(raw S) and fold the scale into the exponent, which equals
    max(scale * S) only for scale > 0: any other scale is refused, not silently wrong."""
    spec = attention.find_spec(hopper, 64, False)
    with pytest.raises(PorterError, match="softmax_scale must be a finite number > 0"):
        attention.launch_plan(spec, hopper, 1, 1, 1, 64, 64, softmax_scale=scale)
