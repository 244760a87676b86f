"""The decompressing 8-bit matrix loads of sm_100a / sm_120a (PTX ISA 9.7.14.5.15 "ldmatrix":
``.b8x16.b6x16_p32`` and ``.b8x16.b4x16_p64``, shapes m8n16 and m16n16.trans): 16 packed 6- or
4-bit elements per 16-byte row widened to one byte each; and the state-space rule the ISA
states for every ldmatrix / stmatrix. Kernels written here; numbers against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.errors import Unsupported
from test_emu_forms_operands import run

RNG = np.random.default_rng(11)
NBITS = {"b6x16_p32": 6, "b4x16_p64": 4}


def _pack(elems: np.ndarray, nbits: int) -> np.ndarray:
    """(32, 16) elements -> (32, 16) row bytes: element i at bits nbits*i of the row, then
    padding (filled with ones here, so a load that read it would show)."""
    out = np.full((elems.shape[0], 16), 0xFF, np.uint8)
    for r, row in enumerate(elems):
        v = sum(int(e) << (nbits * i) for i, e in enumerate(row))
        used = 16 * nbits // 8
        out[r, :used] = np.frombuffer(v.to_bytes(used, "little"), np.uint8)
    return out


BODY = """
mov.u32 %r10, buf;
shl.b32 %r11, %r0, 4;
add.u32 %r12, %r10, %r11;
mul.wide.u32 %rd6, %r0, 16;
add.s64 %rd7, %rd5, %rd6;
ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd7];
st.shared.v4.u32 [%r12], {%r1, %r2, %r3, %r4};
ld.global.v4.u32 {%r1, %r2, %r3, %r4}, [%rd7+512];
st.shared.v4.u32 [%r12+512], {%r1, %r2, %r3, %r4};
bar.sync 0;
ldmatrix.sync.aligned.m8n16.x4.shared.b8x16.FMT {%r1, %r2, %r3, %r4}, [%r12];
ldmatrix.sync.aligned.m16n16.x2.trans.shared::cta.b8x16.FMT {%r5, %r6, %r7, %r8}, [%r12];
add.u32 %r13, %r12, 512;
ldmatrix.sync.aligned.m16n16.x2.trans.shared.b8 {%r14, %r15, %r16, %r17}, [%r13];
st.global.u32 [%rd3], %r1;
st.global.u32 [%rd3+128], %r2;
st.global.u32 [%rd3+256], %r3;
st.global.u32 [%rd3+384], %r4;
st.global.u32 [%rd3+512], %r5;
st.global.u32 [%rd3+640], %r6;
st.global.u32 [%rd3+768], %r7;
st.global.u32 [%rd3+896], %r8;
st.global.u32 [%rd3+1024], %r14;
st.global.u32 [%rd3+1152], %r15;
st.global.u32 [%rd3+1280], %r16;
st.global.u32 [%rd3+1408], %r17;
"""
PRE = ".shared .align 16 .b8 buf[1024];\n"


@pytest.mark.parametrize("fmt", ["b6x16_p32", "b4x16_p64"])
def test_decompressing_ldmatrix_widens_each_element_to_a_byte(fmt):
    nbits = NBITS[fmt]
    elems = RNG.integers(0, 1 << nbits, size=(32, 16)).astype(np.uint8)     # row r from thread r
    inp = np.concatenate([_pack(elems, nbits).reshape(-1), elems.reshape(-1)]).view(np.uint32)
    got = run(BODY.replace("FMT", fmt), inp, n=32 * 12, target="sm_100a", pre=PRE).reshape(12, 32)
    data = got.view(np.uint8).reshape(12, 32, 4)              # [register, lane, byte]
    lane = np.arange(32)
    # m8n16.x4: register j of lane l holds row l/4 of matrix j (rows of threads 8j..8j+7),
    # bytes 4*(l%4)..4*(l%4)+3
    for j in range(4):
        want = np.stack([elems[8 * j + lane // 4, 4 * (lane % 4) + k] for k in range(4)], axis=1)
        np.testing.assert_array_equal(data[j], want, err_msg=f"m8n16 register {j}")
    # m16n16.trans of the packed rows is the plain .b8 load of the same elements as bytes
    np.testing.assert_array_equal(got[4:8], got[8:12])
    assert (data[4:8] < (1 << nbits)).all()                   # the padding's ones never show


@pytest.mark.parametrize("line", [
    "ldmatrix.sync.aligned.m8n16.x1.shared::cluster.b8x16.b4x16_p64 {%r1}, [%r12];",
    "ldmatrix.sync.aligned.m16n16.x1.trans.shared::cluster.b8 {%r1, %r2}, [%r12];",
    "stmatrix.sync.aligned.m16n8.x1.trans.shared::cluster.b8 [%r12], {%r1};",
    "ldmatrix.sync.aligned.m8n8.x1.shared::cluster.b16 {%r1}, [%r12];",
])
def test_matrix_loads_and_stores_of_shared_cluster_are_refused_naming_the_isa(line):
    with pytest.raises(Unsupported, match=r"state space for .*PTX ISA 9\.7\.14\.5\.15 \"ldmatrix\" / 9\.7\.14\.5\.16"):
        run("mov.u32 %r12, buf;\n" + line, target="sm_100a", pre=PRE)


def test_m8n16_with_trans_is_refused_naming_the_isa():
    with pytest.raises(Unsupported, match=r"takes no \.trans.*PTX ISA 9\.7\.14\.5\.15"):
        run("mov.u32 %r12, buf;\nldmatrix.sync.aligned.m8n16.x1.trans.shared.b8x16.b4x16_p64 {%r1}, [%r12];",
            target="sm_100a", pre=PRE)
