"""Low-precision number formats: bit layouts, exact encode (RNE, saturating) and decode.

The element formats the Blackwell tensor cores read (e4m3, e5m2, e2m3, e3m2, e2m1)
and the ue8m0 scale format, described once as data (``FloatFormat``) and converted
with exact arithmetic of our own, *independent of ml_dtypes*, so that the tests can
hold the two against each other (``tests/test_validation_formats.py``).

Why not just cast with ml_dtypes: ARCH_FACTS ("Low-precision formats") records that
ml_dtypes' float8_e4m3fn / e5m2 casts overflow to NaN / inf instead of saturating
(CUDA's ``.satfinite`` conversions clamp to +-max), fp4/fp6 casts turn NaN into -0,
and e8m0 casts round ties up and map 0 to NaN.  Every encode here follows the
device's ``cvt.rn.satfinite`` rule instead:

* round to nearest, ties to even, on the exact value of the fp32 input;
* finite values past the largest finite code, and +-inf, become +-max (satfinite);
* NaN becomes the canonical NaN code 0x7F for formats that have NaN (e4m3, e5m2);
  formats without NaN (e2m1, e2m3, e3m2) reject NaN with a PorterError, because
  there is no code to hold it (ml_dtypes' answer, -0, would silently hide it);
* the sign survives rounding to zero (-1e-30 -> -0), as on the device.

Inputs are fp32 (the dtype quantization kernels compute in); a float64 input is
first rounded to fp32, so encode(x) == encode(float32(x)).

All arithmetic is exact: values are handled as float64 (which holds every fp32
value and every product of a code value by a power of two we use exactly), the
exponent comes from ``np.frexp`` (integer), the rounding is ``np.rint`` (ties to
even) on a value scaled by a power of two, and codes are assembled with integer ops.
"""
from __future__ import annotations

from dataclasses import dataclass

import ml_dtypes
import numpy as np

from porter.errors import PorterError


@dataclass(frozen=True)
class FloatFormat:
    """One small float format: field widths, bias, largest finite value, specials."""

    name: str
    exp_bits: int
    man_bits: int
    bias: int
    max_finite: float       # largest finite magnitude (satfinite clamps here)
    has_nan: bool
    has_inf: bool
    signed: bool
    ml_dtype: type          # the ml_dtypes scalar type with the same bit layout

    @property
    def bits(self) -> int:
        return int(self.signed) + self.exp_bits + self.man_bits

    @property
    def emin(self) -> int:
        """Exponent of the smallest normal value (1 - bias)."""
        return 1 - self.bias

    @property
    def emax(self) -> int:
        """Exponent of the largest finite value: the OCP MX ``emax_elem``."""
        return int(np.floor(np.log2(self.max_finite)))

    @property
    def min_subnormal(self) -> float:
        return float(2.0 ** (self.emin - self.man_bits))

    @property
    def nan_code(self) -> int:
        """Canonical NaN code written by the encoder (0x7F, as CUDA's fp8 converts do)."""
        if not self.has_nan:
            raise PorterError(f"formats: {self.name} has no NaN code")
        return 0x7F


# Field widths and maxima: OCP MX v1.0 / OCP 8-bit FP spec, as in ARCH_FACTS
# ("Low-precision formats"): e4m3 448 (no inf), e5m2 57344 (has inf), e2m3 7.5,
# e3m2 28, e2m1 6; ue8m0 is an unsigned power of two, 2^-127 .. 2^127, 0xFF = NaN.
E4M3 = FloatFormat("e4m3", 4, 3, 7, 448.0, True, False, True, ml_dtypes.float8_e4m3fn)
E5M2 = FloatFormat("e5m2", 5, 2, 15, 57344.0, True, True, True, ml_dtypes.float8_e5m2)
E2M3 = FloatFormat("e2m3", 2, 3, 1, 7.5, False, False, True, ml_dtypes.float6_e2m3fn)
E3M2 = FloatFormat("e3m2", 3, 2, 3, 28.0, False, False, True, ml_dtypes.float6_e3m2fn)
E2M1 = FloatFormat("e2m1", 2, 1, 1, 6.0, False, False, True, ml_dtypes.float4_e2m1fn)
UE8M0 = FloatFormat("ue8m0", 8, 0, 127, 2.0 ** 127, True, False, False, ml_dtypes.float8_e8m0fnu)

ELEMENT_FORMATS: dict[str, FloatFormat] = {f.name: f for f in (E4M3, E5M2, E2M3, E3M2, E2M1)}
FORMATS: dict[str, FloatFormat] = {**ELEMENT_FORMATS, "ue8m0": UE8M0}
_ALIASES = {"fp4": "e2m1", "ue4m3": "e4m3", "e8m0": "ue8m0"}


def get_format(name: str | FloatFormat) -> FloatFormat:
    """The format called ``name`` (e4m3, e5m2, e2m3, e3m2, e2m1, ue8m0; fp4 = e2m1)."""
    if isinstance(name, FloatFormat):
        return name
    key = _ALIASES.get(str(name).lower(), str(name).lower())
    if key not in FORMATS:
        raise PorterError(
            f"formats: unknown format {name!r}; use one of {', '.join(sorted(FORMATS))}")
    return FORMATS[key]


def _as_f32(x) -> np.ndarray:
    return np.asarray(x, dtype=np.float32)


def encode(x, fmt: str | FloatFormat) -> np.ndarray:
    """Codes (uint8, raw bit patterns) of fp32 ``x`` in element format ``fmt``.

    Round to nearest even, satfinite (see the module docstring for NaN / inf / -0).
    """
    f = get_format(fmt)
    if not f.signed:
        raise PorterError(f"formats: encode() is for element formats; use ue8m0_encode for {f.name}")
    x32 = _as_f32(x)
    nan = np.isnan(x32)
    if nan.any() and not f.has_nan:
        raise PorterError(
            f"formats: NaN cannot be encoded in {f.name} (the format has no NaN code); "
            "remove NaNs before quantizing")
    sign = np.signbit(x32)
    mag = np.abs(x32.astype(np.float64))
    mag = np.where(nan, 0.0, mag)
    mag = np.minimum(mag, f.max_finite)          # satfinite: +-inf and overflow -> +-max
    # Quantum of the binade holding mag (subnormal range shares the quantum of emin).
    _, e2 = np.frexp(mag)                         # mag = m * 2^e2, m in [0.5, 1)
    e = np.maximum(e2.astype(np.int64) - 1, f.emin)   # floor(log2 mag), clamped at emin
    quantum_exp = e - f.man_bits
    n = np.rint(np.ldexp(mag, -quantum_exp))     # exact scaling by 2^-q, then RNE
    val = np.ldexp(n, quantum_exp)
    # mag <= max_finite and max_finite is a code value, so RNE never lands above it
    code = _magnitude_code(val, f)
    code = code | (sign.astype(np.int64) << (f.exp_bits + f.man_bits))
    if f.has_nan:
        code = np.where(nan, f.nan_code, code)
    return code.astype(np.uint8)


def _magnitude_code(val: np.ndarray, f: FloatFormat) -> np.ndarray:
    """Code (without sign) of exactly representable non-negative ``val``."""
    _, e2 = np.frexp(val)
    e = e2.astype(np.int64) - 1
    sub = val < 2.0 ** f.emin
    # subnormal: exponent field 0, mantissa = val / 2^(emin - M)
    sub_code = np.ldexp(val, -(f.emin - f.man_bits)).astype(np.int64)
    e_n = np.where(sub, f.emin, e)
    man = np.ldexp(val, -(e_n - f.man_bits)).astype(np.int64) - (1 << f.man_bits)
    norm_code = ((e_n + f.bias) << f.man_bits) | man
    return np.where(sub, sub_code, norm_code)


def decode(codes, fmt: str | FloatFormat) -> np.ndarray:
    """Exact float64 values of raw codes (uint8) in format ``fmt`` (NaN codes -> NaN)."""
    f = get_format(fmt)
    c = np.asarray(codes).astype(np.int64)
    width = f.exp_bits + f.man_bits
    if (c < 0).any() or (c >= (1 << f.bits)).any():
        raise PorterError(f"formats: code out of range for {f.name} ({f.bits} bits)")
    if f.name == "ue8m0":
        return ue8m0_decode(c)
    sign = (c >> width) & 1
    ef = (c >> f.man_bits) & ((1 << f.exp_bits) - 1)
    mf = c & ((1 << f.man_bits) - 1)
    sub = ef == 0
    mag = np.where(sub,
                   np.ldexp(mf.astype(np.float64), f.emin - f.man_bits),
                   np.ldexp((mf + (1 << f.man_bits)).astype(np.float64), ef - f.bias - f.man_bits))
    out = np.where(sign == 1, -mag, mag)
    all_ones_exp = ef == (1 << f.exp_bits) - 1
    if f.name == "e4m3":          # e4m3fn: only S.1111.111 is NaN, no inf
        out = np.where(all_ones_exp & (mf == 7), np.nan, out)
    elif f.has_inf:               # IEEE-like (e5m2): all-ones exponent is inf / NaN
        out = np.where(all_ones_exp & (mf == 0), np.where(sign == 1, -np.inf, np.inf), out)
        out = np.where(all_ones_exp & (mf != 0), np.nan, out)
    return out


def all_codes(fmt: str | FloatFormat) -> np.ndarray:
    """Every code of ``fmt`` as uint8, in increasing code order."""
    f = get_format(fmt)
    return np.arange(1 << f.bits, dtype=np.uint8)


# ---------------------------------------------------------------- ue8m0 (scales)

UE8M0_NAN = 0xFF
UE8M0_MAX_CODE = 0xFE   # 2^127
UE8M0_MIN_CODE = 0x00   # 2^-127 (ue8m0 has no zero)


def ue8m0_decode(codes) -> np.ndarray:
    """2^(code - 127) as float64; 0xFF -> NaN."""
    c = np.asarray(codes).astype(np.int64)
    out = np.ldexp(1.0, c - 127)
    return np.where(c == UE8M0_NAN, np.nan, out)


def ue8m0_encode(value, rounding: str = "ceil") -> np.ndarray:
    """ue8m0 code of the power of two nearest ``value`` in the direction ``rounding``.

    ``rounding="ceil"``: 2^ceil(log2 value) (PTX ``cvt.rp.satfinite.ue8m0x2.f32``);
    ``rounding="floor"``: 2^floor(log2 value) (``cvt.rz``).  Exact: the exponent
    comes from frexp, never from a float log.  Saturates to [2^-127, 2^127]
    (codes 0x00..0xFE): 0 and values below 2^-127 give 0x00 (ue8m0 has no zero);
    +inf and values above 2^127 give 0xFE; NaN gives 0xFF.  Negative values are an
    error (a scale is a magnitude).
    """
    if rounding not in ("ceil", "floor"):
        raise PorterError(f"formats: ue8m0 rounding {rounding!r}; use 'ceil' or 'floor'")
    v = np.asarray(value, dtype=np.float64)
    if (v < 0).any():
        raise PorterError("formats: ue8m0 cannot hold a negative scale; pass a magnitude")
    nan = np.isnan(v)
    safe = np.where(nan | (v == 0) | np.isinf(v), 1.0, v)
    m, e2 = np.frexp(safe)                       # safe = m * 2^e2, m in [0.5, 1)
    floor_e = e2.astype(np.int64) - 1
    exact_pow2 = m == 0.5
    e = floor_e if rounding == "floor" else np.where(exact_pow2, floor_e, floor_e + 1)
    e = np.where(v == 0, -127, e)
    e = np.where(np.isinf(v), 127, e)
    code = np.clip(e, -127, 127) + 127
    code = np.where(nan, UE8M0_NAN, code)
    return code.astype(np.uint8)
