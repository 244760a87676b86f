"""Quantizers: per-tensor fp8, MX (ue8m0 per 32, RCEIL / OCP floor), NVFP4, fp4 packing."""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from porter.errors import PorterError
from porter.validation import formats as F
from porter.validation import quantize as Q


def _rand(shape, seed=0, outliers=True):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(shape)
    if outliers:
        x[rng.random(shape) < 0.01] *= 30
    return x.astype(np.float32)


def _ml(x32, f):
    f = F.get_format(f)
    return np.clip(x32, -f.max_finite, f.max_finite).astype(f.ml_dtype).view(np.uint8)


# ---------------------------------------------------------------- per-tensor

def test_per_tensor_e4m3_scale_and_codes():
    x = _rand((16, 64))
    q = Q.quantize_per_tensor(x)
    amax = np.float32(np.max(np.abs(x)))
    assert q.tensor_scale == np.float32(amax / np.float32(448))
    assert q.tensor_scale.dtype == np.float32 and q.codes.dtype == np.uint8
    np.testing.assert_array_equal(q.codes, _ml(x / q.tensor_scale, "e4m3"))
    deq = Q.dequantize(q)
    # the amax element maps to (about) 448; relative error of normals <= 2^-4
    assert np.max(np.abs(deq)) == pytest.approx(amax, rel=2 ** -4)
    big = np.abs(x) > 2 ** -6 * q.tensor_scale
    assert np.all(np.abs(deq[big] - x[big]) <= 2 ** -4 * np.abs(x[big]))


def test_per_tensor_zero_tensor_and_nan():
    q = Q.quantize_per_tensor(np.zeros((2, 32), np.float32))
    assert q.tensor_scale == 1.0 and not q.codes.any()
    with pytest.raises(PorterError, match="NaN"):
        Q.quantize_per_tensor(np.float32([[1, np.nan]]))


# ---------------------------------------------------------------- MX

def test_mx_scale_rules_hand_cases():
    s = Q.mx_scale_codes
    # e4m3: max 448, emax 8
    assert s(448.0) == 127                 # 448 / 2^0 fits exactly
    assert s(449.0) == 128                 # RCEIL: needs 2^1
    assert s(449.0, rule="floor") == 127   # OCP: floor(log2 449) - 8 = 0 (element clips)
    assert s(480.0, rule="floor") == 127
    assert s(224.0) == 126 and s(224.1) == 127
    assert s(1.0) == 127 - 8               # 1/448 -> ceil(log2) = -8
    assert s(1.0, rule="floor") == 127 - 8
    assert s(0.0) == 0 and s(0.0, rule="floor") == 0
    assert s(np.nan) == 0xFF and s(np.inf) == 0xFF
    assert s(3.0e38) == 127 + 120          # 3e38 / 448 ~ 2^119.01: fp32 range fits ue8m0
    assert s(3.0e38, rule="floor") == 127 + 119
    # e2m1: max 6, emax 2
    assert s(6.0, "e2m1") == 127 and s(6.5, "e2m1") == 128 and s(6.5, "e2m1", "floor") == 127
    assert s(7.9, "e2m1", "floor") == 127 and s(8.0, "e2m1", "floor") == 128
    with pytest.raises(PorterError, match="rule"):
        s(1.0, rule="round")


@settings(max_examples=300, deadline=None)
@given(amax=st.floats(min_value=2.0 ** -100, max_value=2.0 ** 100, width=32),
       elem=st.sampled_from(["e4m3", "e5m2", "e2m3", "e3m2", "e2m1"]))
def test_mx_rceil_is_smallest_power_that_fits(amax, elem):
    f = F.get_format(elem)
    e = int(Q.mx_scale_codes(amax, elem)) - 127
    assert amax <= f.max_finite * 2.0 ** e
    assert amax > f.max_finite * 2.0 ** (e - 1)
    ef = int(Q.mx_scale_codes(amax, elem, "floor")) - 127
    assert 2.0 ** (ef + f.emax) <= amax < 2.0 ** (ef + f.emax + 1)


@pytest.mark.parametrize("elem", ["e4m3", "e5m2", "e2m3", "e3m2", "e2m1"])
@pytest.mark.parametrize("rule", ["rceil", "floor"])
def test_mx_codes_bit_exact(elem, rule):
    x = _rand((8, 128), seed=3)
    q = Q.quantize_mx(x, elem, rule=rule)
    assert q.block_scales.shape == (8, 4) and q.codes.shape == x.shape
    amax = np.abs(x.reshape(8, 4, 32)).max(-1)
    np.testing.assert_array_equal(q.block_scales, Q.mx_scale_codes(amax, elem, rule))
    e = np.repeat(q.block_scales.astype(np.int64) - 127, 32, axis=-1)
    scaled = (x.astype(np.float64) * np.ldexp(1.0, -e)).astype(np.float32)
    np.testing.assert_array_equal(q.codes, _ml(scaled, elem))
    if rule == "rceil":                       # RCEIL never clips an element
        assert np.all(np.abs(scaled) <= F.get_format(elem).max_finite)


def test_mxfp8_dequant_error_and_zero_block():
    x = _rand((4, 96), seed=1)
    x[1, 32:64] = 0
    q = Q.quantize_mx(x)
    assert q.block_scales[1, 1] == 0 and not q.codes[1, 32:64].any()
    deq = Q.dequantize(q)
    s = np.repeat(F.decode(q.block_scales, "ue8m0"), 32, axis=-1)
    # e4m3 RNE: half an ulp, ulp <= 2^-3 of the binade; subnormal floor 2^-10 * scale
    assert np.all(np.abs(deq - x) <= np.maximum(2 ** -4 * np.abs(x), 2 ** -10 * s))


def test_mx_rejects_bad_k_and_nan():
    with pytest.raises(PorterError, match="multiple of 32.*shape \\(4, 48\\)"):
        Q.quantize_mx(np.ones((4, 48), np.float32))
    with pytest.raises(PorterError, match="NaN"):
        Q.quantize_mx(np.full((1, 32), np.nan, np.float32))


# ---------------------------------------------------------------- NVFP4

def test_nvfp4_two_level_scales_bit_exact():
    x = _rand((6, 64), seed=7)
    q = Q.quantize_nvfp4(x)
    amax = np.float32(np.max(np.abs(x)))
    ts = np.float32(amax / np.float32(2688))
    assert q.tensor_scale == ts and q.block == 16 and q.block_scales.shape == (6, 4)
    bamax = np.abs(x.reshape(6, 4, 16)).max(-1)
    sb = (bamax / np.float32(6)) / ts
    assert sb.dtype == np.float32
    np.testing.assert_array_equal(q.block_scales, _ml(sb, "e4m3"))
    assert np.all(q.block_scales < 0x80)                  # ue4m3: never negative
    assert q.block_scales.max() == 0x7E                   # the amax block uses 448
    sbv = np.repeat(q.block_scales.view(ml_dtypes.float8_e4m3fn).astype(np.float64), 16, -1)
    scaled = (x / (sbv * np.float64(ts))).astype(np.float32)
    np.testing.assert_array_equal(q.codes, _ml(scaled, "e2m1"))
    assert q.codes.max() <= 0xF


def test_nvfp4_dequant_error_bound():
    x = _rand((8, 128), seed=2)
    q = Q.quantize_nvfp4(x)
    deq = Q.dequantize(q)
    step = np.repeat(Q.block_scale_values(q), 16, -1) * np.float64(q.tensor_scale)
    # e2m1 spacing is at most 2 (between 4 and 6) in block-scale units: error <= 1 unit,
    # plus the e4m3 rounding of the scale can push the top element past 6 -> clip
    assert np.all(np.abs(deq - x) <= 1.0 * step + 2 ** -3 * np.abs(x))


def test_nvfp4_without_tensor_scale_and_zero_blocks():
    x = _rand((2, 32), seed=5, outliers=False)
    x[0, :16] = 0
    q = Q.quantize_nvfp4(x, tensor_scale=False)
    assert q.tensor_scale == 1.0
    assert q.block_scales[0, 0] == 0 and not q.codes[0, :16].any()
    with pytest.raises(PorterError, match="multiple of 16"):
        Q.quantize_nvfp4(np.ones((2, 24), np.float32))
    with pytest.raises(PorterError, match="inf"):
        Q.quantize_nvfp4(np.full((1, 16), np.inf, np.float32))


# ---------------------------------------------------------------- fp4 packing

def test_pack_fp4_low_nibble_is_lower_index():
    codes = np.array([[0x1, 0x2, 0xF, 0x8]], dtype=np.uint8)
    packed = Q.pack_fp4(codes)
    assert packed.tolist() == [[0x21, 0x8F]]
    np.testing.assert_array_equal(Q.unpack_fp4(packed), codes)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 15), min_size=2, max_size=64).filter(lambda v: len(v) % 2 == 0))
def test_pack_unpack_roundtrip(vals):
    c = np.array(vals, dtype=np.uint8)
    np.testing.assert_array_equal(Q.unpack_fp4(Q.pack_fp4(c)), c)


def test_pack_fp4_rejects_bad_input():
    with pytest.raises(PorterError, match="even"):
        Q.pack_fp4(np.zeros(3, np.uint8))
    with pytest.raises(PorterError, match="0x0F"):
        Q.pack_fp4(np.array([0x10, 0], np.uint8))


# ---------------------------------------------------------------- by variant

def test_quantize_for_variants():
    x = _rand((4, 64))
    assert isinstance(Q.quantize_for("bf16", x), np.ndarray)
    assert Q.quantize_for("fp8", x).scheme == "per_tensor"
    assert Q.quantize_for("mxfp8", x).scheme == "mx"
    assert Q.quantize_for("nvfp4", x).scheme == "nvfp4"
    with pytest.raises(PorterError, match="unknown GEMM variant"):
        Q.quantize_for("int4", x)
