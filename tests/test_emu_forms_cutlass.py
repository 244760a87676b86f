"""Forms met surveying CUTLASS examples 72 (Blackwell narrow-precision GEMM), 79 (Blackwell
GeForce GEMM), 77 (Blackwell FMHA) and 88 (Hopper FMHA) compiled to PTX (the survey is in the
project notes, cutlass_forms.md). Each test kernel is written here; results are checked against
numpy.

- ``mov.b16 d, {a, b}`` with two .b8 operands (one may be an immediate): the inline asm that
  packs one ``cvt.rn.satfinite.e2m1x2.f32`` byte into a 16-bit register. PTX ISA 9.7.9.10 "mov":
  a vector of two .b8 packs into .b16, the first element in the low byte.
"""

from __future__ import annotations

import numpy as np

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
