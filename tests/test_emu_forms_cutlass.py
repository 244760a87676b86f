"""Forms met surveying CUTLASS examples 72 (Blackwell narrow-precision GEMM), 79 (Blackwell
GeForce GEMM), 77 (Blackwell FMHA) and 88 (Hopper FMHA) compiled to PTX (the survey is in the
project notes, cutlass_forms.md). Each test kernel is written here; results are checked against
numpy.

- ``mov.b16 d, {a, b}`` with two .b8 operands (one may be an immediate): the inline asm that
  packs one ``cvt.rn.satfinite.e2m1x2.f32`` byte into a 16-bit register (79b, 79d). PTX ISA
  9.7.9.10 "mov": a vector of two .b8 packs into .b16, the first element in the low byte.
- ``.ftz`` on f32 add/sub/mul/div/min/max/abs/neg/fma/setp and cvt between f32 and f64 (88,
  built with --use_fast_math); ``cvt.rn.f32.{s64,u64}`` rounded once; ``fma.rn.f64`` fused;
  ``rcp.approx.ftz.f64`` flushing f64 (not f32) subnormals, and the sign of a zero kept by the
  ``.ftz`` flush of rcp/rsqrt/sqrt. Each was decoded but computed differently from the ISA.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu

HEAD = ".version 8.7\n.target sm_100a\n.address_size 64\n"


def _lanes(body: str, a: np.ndarray, b: np.ndarray | None = None, regs: str = "") -> np.ndarray:
    """Run ``body`` once per lane with %r1 = a[lane], %r2 = b[lane] (and %f1, %f2 their bits as
    f32); the lane's result is %r3."""
    n = len(a)
    b = np.zeros(n, np.uint32) if b is None else b
    src = HEAD + (
        ".visible .entry k(.param .u64 pa, .param .u64 pb, .param .u64 po)\n{\n"
        ".reg .pred %p<8>;\n.reg .b8 %c<8>;\n.reg .b16 %h<8>;\n.reg .b32 %r<16>;\n.reg .f32 %f<16>;\n"
        ".reg .b64 %rd<16>;\n" + regs +
        "ld.param.u64 %rd1, [pa];\nld.param.u64 %rd2, [pb];\nld.param.u64 %rd3, [po];\n"
        "mov.u32 %r15, %tid.x;\nmul.wide.u32 %rd4, %r15, 4;\n"
        "add.s64 %rd5, %rd1, %rd4;\nadd.s64 %rd6, %rd2, %rd4;\nadd.s64 %rd7, %rd3, %rd4;\n"
        "ld.global.u32 %r1, [%rd5];\nld.global.u32 %r2, [%rd6];\nmov.b32 %f1, %r1;\nmov.b32 %f2, %r2;\n"
        + body + "\nst.global.u32 [%rd7], %r3;\nret;\n}\n")
    out = np.zeros(n, np.uint32)
    return emu.launch(src, "k", grid=1, block=n, args=[a.astype(np.uint32), b.astype(np.uint32), out]).outputs[2]


def test_mov_b16_packs_two_bytes_low_first():
    rng = np.random.default_rng(7)
    a = rng.integers(0, 1 << 16, 32, dtype=np.uint32)
    # swap the two bytes of a 16-bit value through a .b8 pair, then pack one byte with an immediate
    got = _lanes("cvt.u16.u32 %h1, %r1;\nmov.b16 {%c1, %c2}, %h1;\nmov.b16 %h2, {%c2, %c1};\n"
                 "mov.b16 %h3, {%c1, 0};\ncvt.u32.u16 %r3, %h2;\ncvt.u32.u16 %r4, %h3;\n"
                 "shl.b32 %r4, %r4, 16;\nor.b32 %r3, %r3, %r4;", a)
    lo, hi = a & 0xFF, a >> 8
    np.testing.assert_array_equal(got, (lo << 8 | hi) | (lo << 16))


def test_mov_b16_packs_an_e2m1x2_byte():
    # the CUTLASS idiom: { .reg .b8 t; cvt.rn.satfinite.e2m1x2.f32 t, hi, lo; mov.b16 d, {t, 0}; }
    hi = np.array([1.0, -2.0, 0.5, 6.0, 100.0, -0.0, 3.0, 1.5], np.float32)
    lo = np.array([-1.0, 4.0, 0.0, -6.0, -0.5, 2.0, -3.0, 1.0], np.float32)
    got = _lanes("{\n.reg .b8 t;\ncvt.rn.satfinite.e2m1x2.f32 t, %f1, %f2;\nmov.b16 %h1, {t, 0};\n}\n"
                 "cvt.u32.u16 %r3, %h1;", hi.view(np.uint32), lo.view(np.uint32))
    # e2m1 codes: 0, 0.5, 1, 1.5, 2, 3, 4, 6 (bit 3 the sign); satfinite clamps 100 to 6
    code = {0.0: 0, 0.5: 1, 1.0: 2, 1.5: 3, 2.0: 4, 3.0: 5, 4.0: 6, 6.0: 7}

    def e2m1(x):
        return (8 if np.signbit(x) else 0) | code[min(abs(float(x)), 6.0)]
    want = [e2m1(h) << 4 | e2m1(l) for h, l in zip(hi, lo)]
    np.testing.assert_array_equal(got, want)


# ---- .ftz on f32 (88_hopper_fmha is built with --use_fast_math: a quarter of its instructions
# are add/sub/mul/max/setp/fma .ftz.f32). PTX ISA 9.7.3 "Floating-Point Instructions": .ftz
# flushes subnormal inputs and results to sign-preserving zero. The plain builders computed
# these as if .ftz were absent (1e-40 * 1e38 gave 0.01, setp.eq.ftz of 1e-40 and 0 was false).

def _ftz(x):
    x = np.asarray(x, np.float32)
    return np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(np.float32(0), x), x).astype(np.float32)


def _mixed_f32(seed: int) -> np.ndarray:
    """32 f32 values: normals, zeros of both signs, subnormals of both signs, inf, NaN."""
    rng = np.random.default_rng(seed)
    v = (rng.standard_normal(32) * 4).astype(np.float32)
    sub = (rng.integers(1, 1 << 23, 12) * rng.choice([-1, 1], 12)).astype(np.int64)
    v[:12] = (np.abs(sub).astype(np.uint32) | np.where(sub < 0, np.uint32(1 << 31), np.uint32(0))).view(np.float32)
    v[12], v[13], v[14], v[15] = 0.0, -0.0, np.inf, np.nan
    return rng.permutation(v)


def _bits(x) -> np.ndarray:
    return np.asarray(x, np.float32).view(np.uint32)


def _same(got_bits, want) -> None:
    """Bit-exact, except that any NaN matches any NaN."""
    got = got_bits.view(np.float32)
    want = np.asarray(want, np.float32)
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got_bits[~nan], _bits(want)[~nan])


@pytest.mark.parametrize("op,ref", [
    ("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("min", np.fmin), ("max", np.fmax),
    ("div.rn", np.divide)])
def test_ftz_binary_flushes_inputs_and_result(op, ref):
    a, b = _mixed_f32(1), _mixed_f32(2)
    b[:6] = a[:6] * np.float32(1e30)          # subnormal * big: far from zero unless the input is flushed
    got = _lanes(f"{op}.ftz.f32 %f3, %f1, %f2;\nmov.b32 %r3, %f3;", _bits(a), _bits(b))
    with np.errstate(all="ignore"):
        _same(got, _ftz(ref(_ftz(a), _ftz(b))))


def test_ftz_mul_and_fma_flush_a_subnormal_result():
    a = np.array([1e-20, -2e-19, 3e-20, 1.5, 1e-19, -1e-25] + [2.0] * 26, np.float32)
    got = _lanes("mul.ftz.f32 %f3, %f1, %f1;\nfma.rn.ftz.f32 %f4, %f1, %f1, %f3;\nmov.b32 %r3, %f4;", _bits(a))
    sq = _ftz(a * a)
    _same(got, _ftz((a.astype(np.float64) * a + sq).astype(np.float32)))
    plain = _lanes("mul.f32 %f3, %f1, %f1;\nmov.b32 %r3, %f3;", _bits(a))
    assert plain.view(np.float32)[1] != 0          # the same product without .ftz stays subnormal


def test_ftz_fma_with_an_immediate_flushes_a_subnormal_input():
    a, c = _mixed_f32(3), _mixed_f32(4)
    got = _lanes("fma.rn.ftz.f32 %f3, %f1, 0f7E967699, %f2;\nmov.b32 %r3, %f3;", _bits(a), _bits(c))
    big = np.float32(1e38)
    with np.errstate(all="ignore"):
        _same(got, _ftz((_ftz(a).astype(np.float64) * big + _ftz(c)).astype(np.float32)))


@pytest.mark.parametrize("op,ref", [("abs", np.abs), ("neg", np.negative)])
def test_ftz_abs_neg(op, ref):
    a = _mixed_f32(5)
    _same(_lanes(f"{op}.ftz.f32 %f3, %f1;\nmov.b32 %r3, %f3;", _bits(a)), ref(_ftz(a)))


@pytest.mark.parametrize("cmp,ref", [("eq", np.equal), ("ne", lambda x, y: (x < y) | (x > y)), ("lt", np.less),
                                     ("ge", np.greater_equal), ("equ", lambda x, y: ~((x < y) | (x > y))),
                                     ("gtu", lambda x, y: ~(x <= y))])
def test_ftz_setp_compares_subnormals_as_zeros(cmp, ref):
    a, b = _mixed_f32(6), _mixed_f32(7)
    b[:8] = -a[:8]                             # -sub vs sub: equal once both are flushed
    got = _lanes(f"setp.{cmp}.ftz.f32 %p1, %f1, %f2;\nselp.u32 %r3, 1, 0, %p1;", _bits(a), _bits(b))
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(got, ref(_ftz(a), _ftz(b)).astype(np.uint32))


def test_ftz_cvt_between_f32_and_f64():
    a = _mixed_f32(8)
    got = _lanes(".reg .f64 %d1;\ncvt.ftz.f64.f32 %d1, %f1;\ncvt.rn.f32.f64 %f3, %d1;\nmov.b32 %r3, %f3;", _bits(a))
    _same(got, _ftz(a))
    # a normal f32 scaled into the subnormal range in f64, then narrowed with .ftz
    small = np.array([1.0, 0.5, 0.25, 3.0, -0.75, 1.5] + [2.0] * 26, np.float32)
    got = _lanes(".reg .f64 %d1;\ncvt.f64.f32 %d1, %f1;\nmul.f64 %d1, %d1, 0d3810000000000000;\n"
                 "cvt.rn.ftz.f32.f64 %f3, %d1;\nmov.b32 %r3, %f3;", _bits(small))
    _same(got, _ftz((small.astype(np.float64) * 2.0 ** -126).astype(np.float32)))



def test_ftz_cvt_f32_to_f32_flushes_with_and_without_sat():
    # cvt.ftz.f32.f32 and cvt.ftz.sat.f32.f32 (__saturatef under --use_fast_math): the same-type
    # forms flush a subnormal to a zero of its sign too (they went to the plain cvt, which did not)
    a = _mixed_f32(9)
    got = _lanes("cvt.ftz.f32.f32 %f3, %f1;\nmov.b32 %r3, %f3;", _bits(a))
    _same(got, _ftz(a))
    got = _lanes("cvt.ftz.sat.f32.f32 %f3, %f1;\nmov.b32 %r3, %f3;", _bits(a))
    with np.errstate(invalid="ignore"):
        want = np.where(np.isnan(a), np.float32(0), np.clip(_ftz(a), np.float32(0), np.float32(1)))
    # (the value, not the sign of a zero: the ISA's .sat clamps to [0.0, 1.0] and states no sign for -0.0)
    np.testing.assert_array_equal(got.view(np.float32), want.astype(np.float32))

# ---- cvt.rn.f32.s64 / .u64 (88_hopper_fmha): PTX ISA 9.7.9.21 "cvt": .rn rounds to nearest even,
# once. Through f64 a magnitude of 2^53 or more was rounded twice (2^60 + 2^36 + 1 gave 2^60).

def _f32_of_int(v: int) -> np.float32:
    """v rounded to nearest even into f32, with Python integers (exact)."""
    m = abs(v)
    shift = m.bit_length() - 24
    if shift > 0:
        q, rem = divmod(m, 1 << shift)
        if rem > 1 << (shift - 1) or (rem == 1 << (shift - 1) and q & 1):
            q += 1
        m = q << shift
    return np.float32(float(-m if v < 0 else m))


@pytest.mark.parametrize("typ", ["s64", "u64"])
def test_cvt_f32_from_64_bit_int_rounds_once(typ):
    rng = np.random.default_rng(11 if typ == "s64" else 12)
    if typ == "s64":
        vals = [int(v) for v in rng.integers(-2 ** 63, 2 ** 63 - 1, 16, dtype=np.int64)]
        vals += [2 ** 60 + 2 ** 36 + 1, -(2 ** 60 + 2 ** 36 + 1), -2 ** 63, 2 ** 63 - 1, 0, -1, 2 ** 53 + 1, -(2 ** 24 + 1)]
    else:
        vals = [int(v) for v in rng.integers(0, 2 ** 64 - 1, 16, dtype=np.uint64)]
        vals += [2 ** 64 - 1, 2 ** 60 + 2 ** 36 + 1, 2 ** 63, 0, 1, 2 ** 53 + 1, 2 ** 24 + 1, 2 ** 54 + 3]
    for i in range(8):              # exact halfway cases, and one above halfway, at several scales
        shift = int(rng.integers(30, 39))
        vals[i] = int(rng.integers(2 ** 23, 2 ** 24)) << shift | 1 << (shift - 1) | (i & 1)
    words = np.array([v & (2 ** 64 - 1) for v in vals], np.uint64)
    lo, hi = (words & np.uint64(0xFFFFFFFF)).astype(np.uint32), (words >> np.uint64(32)).astype(np.uint32)
    got = _lanes(f".reg .b64 %x1;\nmov.b64 %x1, {{%r1, %r2}};\ncvt.rn.f32.{typ} %f3, %x1;\nmov.b32 %r3, %f3;", lo, hi)
    want = np.array([_f32_of_int(v) for v in vals], np.float32)
    np.testing.assert_array_equal(got, want.view(np.uint32))


# ---- fma.rn.f64 is fused (88_hopper_fmha's f64 math: rcp.approx.ftz.f64 refined by Newton steps
# e = fma(-x, r, 1)). PTX ISA 9.7.3 "fma": the product in infinite precision, one rounding. The
# simulator computed a * b + c in numpy, rounding the product first.

def _fused(a: float, b: float, c: float) -> float:
    from fractions import Fraction
    if not all(np.isfinite([a, b, c])):
        return a * b + c
    x = Fraction(a) * Fraction(b) + Fraction(c)
    return float(x) if x != 0 else a * b + c


def test_fma_f64_rounds_once():
    rng = np.random.default_rng(21)
    a = rng.standard_normal(32) * 2.0 ** rng.integers(-40, 40, 32)
    b = rng.standard_normal(32)
    c = rng.standard_normal(32)
    c[:12] = -(a[:12] * b[:12])                       # the rounded product: the fused result is its error
    a[12:16] = 1 + 2.0 ** -30
    b[12:16] = 1 + 2.0 ** -30
    c[12:16] = -(1 + 2.0 ** -29)                      # exact a * b - c = 2^-60; unfused: 0
    a[16:20] = rng.integers(1, 2 ** 27, 4) * 2.0 ** -20     # short significands: exact ties of p + c
    b[16:20] = rng.integers(1, 2 ** 27, 4) * 2.0 ** -7
    c[16:20] = rng.integers(-2 ** 40, 2 ** 40, 4) * 2.0 ** -30
    a[20], b[20], c[20] = np.inf, 0.0, 1.0            # NaN
    a[21], b[21], c[21] = -0.0, 5.0, 0.0              # +0
    a[22], b[22], c[22] = 2.0 ** -537, 2.0 ** -538, 2.0 ** -1074    # the product underflows to 0 in f64:
    a[23], b[23], c[23] = -(2.0 ** -600), 2.0 ** -600, 0.0          # exact 1.5 * 2^-1074 (a tie) and -2^-1200
    got = _run_fma64(a, b, c)
    want = np.array([_fused(float(x), float(y), float(z)) for x, y, z in zip(a, b, c)])
    nan = np.isnan(want)
    np.testing.assert_array_equal(np.isnan(got), nan)
    np.testing.assert_array_equal(got[~nan].view(np.uint64), want[~nan].view(np.uint64))


def _run_fma64(a, b, c) -> np.ndarray:
    src = HEAD + (
        ".visible .entry f(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u64 po)\n{\n"
        ".reg .b32 %r<4>;\n.reg .b64 %rd<16>;\n.reg .f64 %d<4>;\n"
        "ld.param.u64 %rd1, [pa];\nld.param.u64 %rd2, [pb];\nld.param.u64 %rd3, [pc];\nld.param.u64 %rd4, [po];\n"
        "mov.u32 %r1, %tid.x;\nmul.wide.u32 %rd5, %r1, 8;\n"
        "add.s64 %rd6, %rd1, %rd5;\nadd.s64 %rd7, %rd2, %rd5;\nadd.s64 %rd8, %rd3, %rd5;\nadd.s64 %rd9, %rd4, %rd5;\n"
        "ld.global.f64 %d1, [%rd6];\nld.global.f64 %d2, [%rd7];\nld.global.f64 %d3, [%rd8];\n"
        "fma.rn.f64 %d1, %d1, %d2, %d3;\nst.global.f64 [%rd9], %d1;\nret;\n}\n")
    out = np.zeros(32, np.float64)
    return emu.launch(src, "f", grid=1, block=32, args=[a, b, c, out]).outputs[3]


# ---- rcp.approx.ftz.f64 (88_hopper_fmha's f64 math): .ftz flushes f64 subnormals (below
# 2^-1022), PTX ISA 9.7.3 "rcp.approx.ftz.f64". The simulator flushed every input and result
# below f32's least normal (2^-126): 1/1e300 came out 0 and 1/1e-300 infinite.

def test_rcp_approx_ftz_f64_flushes_f64_subnormals_only():
    x = np.array([1e-300, 1e-40, 3.0, 1e300, 1e-310, -1e-45, 0.0, 2.0 ** -130, -2.0 ** 1023, 5e-324] * 3 + [7.0, -0.0])
    src = HEAD + (
        ".visible .entry f(.param .u64 pa, .param .u64 po)\n{\n.reg .b32 %r<4>;\n.reg .b64 %rd<8>;\n"
        ".reg .f64 %d<4>;\nld.param.u64 %rd1, [pa];\nld.param.u64 %rd2, [po];\nmov.u32 %r1, %tid.x;\n"
        "mul.wide.u32 %rd3, %r1, 8;\nadd.s64 %rd4, %rd1, %rd3;\nadd.s64 %rd5, %rd2, %rd3;\n"
        "ld.global.f64 %d1, [%rd4];\nrcp.approx.ftz.f64 %d2, %d1;\nst.global.f64 [%rd5], %d2;\nret;\n}\n")
    got = emu.launch(src, "f", grid=1, block=32, args=[x, np.zeros(32)]).outputs[1]
    tiny = np.finfo(np.float64).tiny
    flushed = np.where(np.abs(x) < tiny, np.copysign(0.0, x), x)
    with np.errstate(divide="ignore", over="ignore"):
        want = 1.0 / flushed
    want = np.where(np.abs(want) < tiny, np.copysign(0.0, want), want)
    np.testing.assert_array_equal(got.view(np.uint64), want.view(np.uint64))


def test_rcp_rsqrt_sqrt_ftz_f32_keep_the_sign_of_zero():
    # -0.0 is not a subnormal: rcp(-0) = -inf, rsqrt(-0) = -inf, sqrt(-0) = -0 (PTX ISA 9.7.3 rcp,
    # rsqrt, sqrt); the flush made -0.0 +0.0 first. A negative subnormal flushes to -0.0 the same way.
    x = np.array([-0.0, 0.0, -1e-40, 1e-40, 4.0, 0.25, -np.inf, np.inf] * 4, np.float32)
    for op, ref in [("rcp.approx.ftz", lambda v: np.float32(1) / v), ("rsqrt.approx.ftz", lambda v: np.float32(1) / np.sqrt(v)),
                    ("sqrt.approx.ftz", np.sqrt), ("rcp.rn.ftz", lambda v: np.float32(1) / v)]:
        got = _lanes(f"{op}.f32 %f3, %f1;\nmov.b32 %r3, %f3;", _bits(x))
        with np.errstate(all="ignore"):
            _same(got, _ftz(ref(_ftz(x))))
