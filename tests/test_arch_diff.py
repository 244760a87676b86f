"""``porter.descriptor.archdiff``: the structured Hopper -> Blackwell diff other code reuses."""

from __future__ import annotations

import json

import pytest

from porter.descriptor.arch import load_arch
from porter.descriptor.archdiff import diff_archs


@pytest.fixture(scope="module")
def h2b():
    return diff_archs(load_arch("hopper"), load_arch("blackwell"))


def test_features(h2b):
    assert h2b.features_lost == ("wgmma",)
    assert set(h2b.features_gained) == {"tcgen05", "tmem", "cta_pair", "fp6", "fp4", "cluster_launch_control",
                                        "block_scale_mx", "block_scale_nvfp4"}
    assert {"tma", "mbarrier", "clusters", "fp8"} <= set(h2b.features_kept)


def test_tensor_core_changes(h2b):
    changes = {c.key: (c.before, c.after) for c in h2b.tensor_core}
    assert changes["generation"] == ("wgmma", "tcgen05")
    assert changes["issue"] == ("warpgroup", "thread")
    assert changes["accumulator"] == ("registers", "tmem")


def test_mma_shapes(h2b):
    assert h2b.mma_shapes_changed
    # wgmma's f8 lives on as tcgen05's f8f6f4: a rename, not a loss and a gain
    assert h2b.kinds_lost == ()
    assert set(h2b.kinds_gained) == {"mxf8f6f4", "mxf4", "mxf4nvf4"}
    f16 = next(k for k in h2b.kinds_changed if k.kind == "f16")
    assert not f16.shapes_lost  # Hopper's m64 family survives on tcgen05
    assert {(s.m, s.cta_group) for s in f16.shapes_gained} == {(128, 1), (128, 2), (256, 2)}


def test_formats_and_block_scales(h2b):
    assert set(h2b.formats_gained) == {"e2m3", "e3m2", "e2m1"} and h2b.formats_lost == ()
    assert set(h2b.block_scales_gained) == {"mx", "nvfp4"}


def test_peaks_with_ratio(h2b):
    peaks = {p.dtype: p for p in h2b.peaks}
    assert peaks["bf16"].ratio == pytest.approx(2250 / 989)
    assert peaks["fp8"].ratio == pytest.approx(4500 / 1979)
    assert peaks["fp4"].before_tflops is None and peaks["fp4"].after_tflops == 9000 and peaks["fp4"].ratio is None
    assert peaks["bf16"].ridge_after == pytest.approx(2250e12 / 7.7e12)


def test_figures(h2b):
    figs = {c.key: c for c in h2b.figures}
    assert figs["sm_count"].before == 132 and figs["sm_count"].after == 148
    assert figs["tmem_bytes"].after == 262144
    assert "smem_per_sm_bytes" not in figs  # same 228 KiB on both


def test_self_diff_is_empty():
    a = load_arch("blackwell")
    d = diff_archs(a, a)
    assert d.empty and not d.features_gained and not d.mma_shapes_changed


def test_reverse_diff_mirrors(h2b):
    b2h = diff_archs(load_arch("blackwell"), load_arch("hopper"))
    assert set(b2h.features_gained) == set(h2b.features_lost)
    assert set(b2h.features_lost) == set(h2b.features_gained)


def test_to_dict_is_json(h2b):
    d = json.loads(json.dumps(h2b.to_dict()))
    assert d["before"] == "hopper" and d["after"] == "blackwell" and d["features"]["lost"] == ["wgmma"]


def test_kind_rename_pairs_overlapping_formats(h2b):
    (r,) = h2b.kinds_renamed
    assert (r.before, r.after) == ("f8", "f8f6f4")       # not the block-scaled mxf8f6f4
    assert r.formats_kept == ("e4m3", "e5m2") and set(r.formats_gained) == {"e2m3", "e3m2", "e2m1"}
    assert str(r) == "f8 -> f8f6f4 (e4m3, e5m2 kept; gains e2m3, e3m2, e2m1)"
    back = diff_archs(load_arch("blackwell"), load_arch("hopper"))
    assert [str(x) for x in back.kinds_renamed] == ["f8f6f4 -> f8 (e4m3, e5m2 kept; loses e2m3, e3m2, e2m1)"]
    assert set(back.kinds_lost) == {"mxf8f6f4", "mxf4", "mxf4nvf4"}
    assert h2b.to_dict()["mma"]["kinds_renamed"][0]["after"] == "f8f6f4"


def test_kinds_without_probe_come_from_the_probe_headers(h2b):
    # the same rule as `porter arch check` (tests/test_probes.py), without compiling
    assert h2b.kinds_unprobed_after == ("tf32", "i8", "mxf4")
    assert "f16" not in h2b.kinds_unprobed_before


def test_peak_absent_for_a_kept_format_is_not_given_not_gone(h2b):
    # rtx-blackwell has bf16/f16/e4m3/e2m3 formats but no sourced peak for them
    b2rtx = diff_archs(load_arch("blackwell"), load_arch("rtx-blackwell"))
    changes = {p.dtype: p.change for p in b2rtx.peaks}
    assert changes == {"bf16": "not given", "f16": "not given", "fp8": "not given", "fp6": "not given",
                       "fp4": f"x{1676 / 9000:.2f}"}
    assert b2rtx.to_dict()["peaks"][0]["change"] == "not given"
    # the other way the figure is not given on the before side; a real loss of the format stays "gone"
    back = {p.dtype: p.change for p in diff_archs(load_arch("rtx-blackwell"), load_arch("blackwell")).peaks}
    assert back["bf16"] == "not given"
    b2h = {p.dtype: p.change for p in diff_archs(load_arch("blackwell"), load_arch("hopper")).peaks}
    assert b2h["fp6"] == "gone" and b2h["fp4"] == "gone" and b2h["bf16"] == f"x{989 / 2250:.2f}"
    assert {p.dtype: p.change for p in h2b.peaks}["fp4"] == "new"
