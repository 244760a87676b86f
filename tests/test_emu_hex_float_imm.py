"""A PTX hex float immediate is its bit pattern (PTX ISA 4.5.1 "Integer and floating-point
constants": 0fXXXXXXXX is the exact single-precision value, 0d the double): an sNaN, a
negative zero and a negated sNaN keep every bit; read through a Python float, the sNaN came
back quieted (0x7FC00001). Kernel written here."""

from __future__ import annotations

import numpy as np

from porter import emu

PTX = """.version 8.7
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 out)
{
.reg .b32 %r<8>;
.reg .f32 %f<8>;
.reg .b64 %rd<4>;
.reg .f64 %fd<2>;
ld.param.u64 %rd1, [out];
cvta.to.global.u64 %rd1, %rd1;
mov.f32 %f1, 0f7F800001;
mov.b32 %r1, %f1;
st.global.u32 [%rd1], %r1;
mov.f32 %f2, -0f7F800001;
mov.b32 %r2, %f2;
st.global.u32 [%rd1+4], %r2;
mov.f32 %f3, 0f80000000;
mov.b32 %r3, %f3;
st.global.u32 [%rd1+8], %r3;
mov.b32 %r4, 0f3F800000;
st.global.u32 [%rd1+12], %r4;
mov.f64 %fd1, 0d7FF0000000000001;
mov.b64 %rd2, %fd1;
st.global.u64 [%rd1+16], %rd2;
ret;
}
"""


def test_hex_float_immediates_keep_their_bits():
    out = np.zeros(6, np.uint32)
    res = emu.launch(PTX, "k", grid=1, block=1, args=[out])
    got = res.outputs[0]
    assert [hex(int(x)) for x in got[:4]] == ["0x7f800001", "0xff800001", "0x80000000", "0x3f800000"]
    assert int(got[4]) | (int(got[5]) << 32) == 0x7FF0000000000001
