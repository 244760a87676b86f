"""Element formats and ue8m0: our exact encode/decode held against ml_dtypes.

ml_dtypes is the oracle wherever it is exact (decode of every code; RNE of
in-range values); where it is not (fp8 overflow -> NaN instead of satfinite,
e8m0 rounding and zero), the expected codes are computed by hand.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from porter.errors import PorterError
from porter.validation import formats as F

ELEMS = sorted(F.ELEMENT_FORMATS)


def _ml_encode(x32: np.ndarray, f: F.FloatFormat) -> np.ndarray:
    """ml_dtypes' RNE cast after the satfinite clip (ml_dtypes fp8 does not saturate)."""
    return np.clip(x32, -f.max_finite, f.max_finite).astype(f.ml_dtype).view(np.uint8)


def _interesting_values(f: F.FloatFormat) -> np.ndarray:
    """Every finite code value, each midpoint between neighbours, and one fp32 ulp
    either side of both, plus out-of-range values and fp32 subnormals."""
    v = F.decode(F.all_codes(f), f)
    fin = np.unique(v[np.isfinite(v)])
    mids = (fin[1:] + fin[:-1]) / 2                       # exact in fp32 for these formats
    base = np.concatenate([fin, mids]).astype(np.float32)
    up = np.nextafter(base, np.float32(np.inf))
    down = np.nextafter(base, np.float32(-np.inf))
    big = np.float32([f.max_finite * 1.01, f.max_finite * 1.5, f.max_finite * 2, 1e30, 3.4e38])
    tiny = np.float32([1e-45, 1e-40, 1e-38, f.min_subnormal / 4, f.min_subnormal / 2 * 1.0001])
    extra = np.concatenate([big, -big, tiny, -tiny, np.float32([0.0, -0.0])])
    return np.concatenate([base, up, down, extra])


@pytest.mark.parametrize("name", ELEMS)
def test_decode_matches_ml_dtypes_for_every_code(name):
    f = F.get_format(name)
    codes = F.all_codes(f)
    ours = F.decode(codes, f)
    theirs = codes.view(f.ml_dtype).astype(np.float64)
    np.testing.assert_array_equal(ours, theirs)           # NaNs compare equal here
    assert np.max(ours[np.isfinite(ours)]) == f.max_finite


@pytest.mark.parametrize("name", ELEMS)
def test_encode_exhaustive_codes_midpoints_and_neighbours(name):
    f = F.get_format(name)
    x = _interesting_values(f)
    np.testing.assert_array_equal(F.encode(x, f), _ml_encode(x, f))


@pytest.mark.parametrize("name", ELEMS)
def test_encode_every_bf16_value(name):
    """Every bf16 bit pattern (the usual quantizer input) as an fp32 input."""
    f = F.get_format(name)
    x = (np.arange(1 << 16, dtype=np.uint32) << 16).view(np.float32)
    x = x[~np.isnan(x)]
    np.testing.assert_array_equal(F.encode(x, f), _ml_encode(x, f))


@pytest.mark.parametrize("name", ELEMS)
def test_encode_roundtrips_every_finite_code(name):
    f = F.get_format(name)
    codes = F.all_codes(f)
    v = F.decode(codes, f)
    fin = np.isfinite(v)
    back = F.encode(v[fin].astype(np.float32), f)
    np.testing.assert_array_equal(back, codes[fin])


@pytest.mark.parametrize("name", ELEMS)
@settings(max_examples=100, deadline=None)
@given(bits=st.lists(st.integers(0, 2**32 - 1), min_size=1, max_size=64))
def test_encode_random_fp32_bit_patterns(name, bits):
    f = F.get_format(name)
    x = np.array(bits, dtype=np.uint32).view(np.float32)
    x = x[~np.isnan(x)]
    np.testing.assert_array_equal(F.encode(x, f), _ml_encode(x, f))


@pytest.mark.parametrize("name", ELEMS)
@settings(max_examples=100, deadline=None)
@given(x=st.floats(min_value=-1e6, max_value=1e6, width=32, allow_nan=False))
def test_encode_is_nearest_even(name, x):
    """Independent of ml_dtypes: the code's value is a nearest representable value
    (after satfinite), and on a tie the even mantissa wins."""
    f = F.get_format(name)
    code = F.encode(np.float32(x), f)
    got = F.decode(code, f)
    vals = F.decode(F.all_codes(f), f)
    vals = np.unique(vals[np.isfinite(vals)])
    xc = min(max(float(x), -f.max_finite), f.max_finite)
    dist = np.abs(vals - xc)
    best = dist.min()
    assert abs(float(got) - xc) == best
    ties = vals[dist == best]
    if len(ties) == 2:
        assert (int(code) & 1) == 0                     # even mantissa LSB


def test_satfinite_and_specials_e4m3():
    x = np.float32([448, 464, 465, 480, 1e9, np.inf, -np.inf, -500, np.nan])
    codes = F.encode(x, "e4m3")
    # 464 is the midpoint of 448 and (the missing) 480: ties-to-even picks 448 anyway
    assert list(codes[:8]) == [0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0x7E, 0xFE, 0xFE]
    assert codes[8] == 0x7F                              # canonical NaN, as CUDA writes
    # ml_dtypes alone would give NaN for 480: the reason we clip (ARCH_FACTS)
    assert np.isnan(np.float32(480).astype(ml_dtypes.float8_e4m3fn).astype(np.float32))


def test_satfinite_and_specials_e5m2():
    x = np.float32([57344, 61440, 1e9, np.inf, -np.inf, np.nan])
    codes = F.encode(x, "e5m2")
    assert list(codes[:5]) == [0x7B, 0x7B, 0x7B, 0x7B, 0xFB]
    assert np.isnan(F.decode(codes[5], "e5m2"))
    assert F.decode(np.uint8(0x7C), "e5m2") == np.inf     # e5m2 has inf; we never write it


@pytest.mark.parametrize("name,maxcode", [("e2m1", 0x7), ("e2m3", 0x1F), ("e3m2", 0x1F)])
def test_small_formats_saturate_and_reject_nan(name, maxcode):
    f = F.get_format(name)
    codes = F.encode(np.float32([1e6, np.inf, -np.inf]), f)
    sign = 1 << (f.bits - 1)
    assert list(codes) == [maxcode, maxcode, maxcode | sign]
    with pytest.raises(PorterError, match="NaN"):
        F.encode(np.float32([1.0, np.nan]), f)


def test_negative_zero_and_underflow_keep_sign():
    assert F.encode(np.float32(-0.0), "e4m3") == 0x80
    assert F.encode(np.float32(-1e-30), "e4m3") == 0x80
    assert F.encode(np.float32(-0.1), "e2m1") == 0x8
    assert F.encode(np.float32(0.25), "e2m1") == 0x0     # tie 0 / 0.5 -> even (0)
    assert F.encode(np.float32(0.75), "e2m1") == 0x2     # tie 0.5 / 1.0 -> even (1.0)


def test_e2m1_value_table():
    assert list(F.decode(np.arange(8, dtype=np.uint8), "e2m1")) == [0, 0.5, 1, 1.5, 2, 3, 4, 6]


def test_format_properties():
    assert {n: F.get_format(n).emax for n in ELEMS} == {
        "e4m3": 8, "e5m2": 15, "e2m3": 2, "e3m2": 4, "e2m1": 2}   # OCP MX emax_elem
    assert F.get_format("fp4") is F.E2M1
    with pytest.raises(PorterError, match="unknown format"):
        F.get_format("e9m9")


# ---------------------------------------------------------------- ue8m0

def test_ue8m0_decode_matches_ml_dtypes():
    codes = F.all_codes("ue8m0")
    ours = F.decode(codes, "ue8m0")
    theirs = codes.view(ml_dtypes.float8_e8m0fnu).astype(np.float64)
    np.testing.assert_array_equal(ours, theirs)
    assert np.isnan(ours[0xFF]) and ours[0] == 2.0 ** -127 and ours[0xFE] == 2.0 ** 127


def test_ue8m0_encode_powers_of_two_match_ml_dtypes():
    v = np.ldexp(1.0, np.arange(-127, 128))
    ours = F.ue8m0_encode(v)
    theirs = v.astype(ml_dtypes.float8_e8m0fnu).view(np.uint8)
    np.testing.assert_array_equal(ours, theirs)
    np.testing.assert_array_equal(F.ue8m0_encode(v, "floor"), theirs)


def test_ue8m0_encode_hand_cases():
    enc = F.ue8m0_encode
    assert enc(0.0) == 0x00            # no zero in ue8m0: smallest scale (ml_dtypes says NaN)
    assert enc(np.nan) == 0xFF
    assert enc(2.0 ** 127) == 0xFE
    assert enc(2.0 ** 128) == 0xFE     # satfinite
    assert enc(np.inf) == 0xFE
    assert enc(2.0 ** -127) == 0x00
    assert enc(2.0 ** -140) == 0x00    # below range: clamps (fp64 input)
    assert enc(3.0) == 129 and enc(3.0, "floor") == 128
    assert enc(1.0000001) == 128 and enc(1.0000001, "floor") == 127
    assert enc(0.75) == 127 and enc(0.75, "floor") == 126
    # ml_dtypes rounds 0.75 to nearest (ties up) -> 1.0: neither rule; hence our own math
    assert np.float64(0.75).astype(ml_dtypes.float8_e8m0fnu).view(np.uint8) == 127
    with pytest.raises(PorterError, match="negative"):
        enc(-1.0)
    with pytest.raises(PorterError, match="rounding"):
        enc(1.0, "nearest")


@settings(max_examples=200, deadline=None)
@given(x=st.floats(min_value=2.0 ** -126, max_value=2.0 ** 126, allow_nan=False))
def test_ue8m0_encode_brackets_value(x):
    c = int(F.ue8m0_encode(x))
    s = 2.0 ** (c - 127)
    assert s >= x > s / 2                                # ceil
    cf = int(F.ue8m0_encode(x, "floor"))
    sf = 2.0 ** (cf - 127)
    assert sf <= x < sf * 2                              # floor
