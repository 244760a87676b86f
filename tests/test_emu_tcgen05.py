"""tcgen05 unit: descriptors, layouts, element formats and the MMA arithmetic.

Every expected value here is built in this file from the PTX ISA's own tables and examples
(bit positions of Tables 40 and 42-44, the canonical-layout examples of 9.7.16.3.3, the
format definitions of 5.2.3), never from porter's generator encoders.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter.emu.errors import CheckFailed, EmuError, Unsupported
from porter.emu.units import tcgen05 as t5
from porter.emu.units.tmem import TensorMemory


# ----------------------------------------------------------------- idesc builders (ISA bits)

def dense_idesc(*, d=1, a=1, b=1, neg_a=0, neg_b=0, ta=0, tb=0, n=128, m=128, sparse=0,
                sel=0, sat=0, shift=0) -> int:
    """Table 42: 0-1 selector, 2 sparse, 3 saturate, 4-5 dtype, 7-9 atype, 10-12 btype,
    13/14 negate, 15/16 transpose, 17-22 N>>3, 24-28 M>>4, 30-31 max shift."""
    return (sel | sparse << 2 | sat << 3 | d << 4 | a << 7 | b << 10 | neg_a << 13 | neg_b << 14
            | ta << 15 | tb << 16 | (n >> 3) << 17 | (m >> 4) << 24 | shift << 30)


def scaled_idesc(*, a=0, b=0, sfa=0, sfb=0, ue8m0=1, n=128, m=128, neg_a=0, neg_b=0,
                 ta=0, tb=0) -> int:
    """Tables 43/44: 4-5 SFB id, 7-9 atype, 10-12 (mxf4: 10-11) btype, 13/14 negate,
    15/16 transpose, 17-22 N>>3, 23 scale type (UE8M0=1, UE4M3=0), 27-28 M>>7, 29-30 SFA id."""
    return (sfb << 4 | a << 7 | b << 10 | neg_a << 13 | neg_b << 14 | ta << 15 | tb << 16
            | (n >> 3) << 17 | ue8m0 << 23 | (m >> 7) << 27 | sfa << 29)


def test_idesc_f16_fields():
    i = t5.decode_idesc("kind::f16", dense_idesc(d=1, a=1, b=0, neg_a=1, tb=1, n=256, m=64))
    assert (i.m, i.n, i.k) == (64, 256, 16)
    assert (i.d_format, i.a_format, i.b_format) == ("f32", "bf16", "f16")
    assert (i.negate_a, i.negate_b, i.a_major, i.b_major) == (True, False, "K", "MN")
    assert not i.sparse and i.scale_vec is None
    h = t5.decode_idesc("f16", dense_idesc(d=0, a=0, b=0, n=8, m=128))
    assert (h.d_format, h.n, h.m) == ("f16", 8, 128)


def test_idesc_other_dense_kinds():
    tf = t5.decode_idesc("tf32", dense_idesc(d=1, a=2, b=2, n=64, m=128))
    assert (tf.a_format, tf.k) == ("tf32", 8)
    f8 = t5.decode_idesc("f8f6f4", dense_idesc(d=1, a=0, b=1, n=64, m=128, ta=1))
    assert (f8.a_format, f8.b_format, f8.k, f8.a_major) == ("e4m3", "e5m2", 32, "MN")
    for code, name in {3: "e2m3", 4: "e3m2", 5: "e2m1"}.items():
        assert t5.decode_idesc("f8f6f4", dense_idesc(a=code, b=code)).a_format == name
    i8 = t5.decode_idesc("i8", dense_idesc(d=2, a=1, b=0, sat=1, n=48, m=64))
    assert (i8.d_format, i8.a_format, i8.b_format, i8.saturate, i8.k) == ("s32", "s8", "u8", True, 32)
    sp = t5.decode_idesc("f16", dense_idesc(sparse=1, sel=2))
    assert sp.sparse and sp.sparsity_selector == 2 and sp.k == 32
    assert t5.decode_idesc("f16", dense_idesc(shift=3)).max_shift == 3


@pytest.mark.parametrize("kind,bits,match", [
    ("f16", dense_idesc(d=2), "dtype"),
    ("f16", dense_idesc(a=2), "atype"),
    ("f16", dense_idesc(b=5), "btype"),
    ("f16", dense_idesc() | 1 << 6, "bit 6"),
    ("f16", dense_idesc() | 1 << 23, "bit 23"),
    ("f16", dense_idesc(sat=1), "saturate"),
    ("tf32", dense_idesc(d=0, a=2, b=2), "dtype"),
    ("f8f6f4", dense_idesc(a=2), "atype"),
    ("i8", dense_idesc(d=2, a=1, b=1, neg_a=1), "negate"),
    ("f16", dense_idesc(m=32), "M .bits 24-28"),
    ("f16", dense_idesc(m=256), "M .bits 24-28"),
    ("f16", dense_idesc(n=0), "N .bits 17-22"),
])
def test_idesc_rejects_bad_fields(kind, bits, match):
    with pytest.raises(EmuError, match=match):
        t5.decode_idesc(kind, bits)


def test_idesc_m_n_rules_per_cta_group():
    assert t5.decode_idesc("f16", dense_idesc(m=256, n=16), cta_group=2).m == 256
    with pytest.raises(EmuError, match="M = 64"):
        t5.decode_idesc("f16", dense_idesc(m=64, n=16), cta_group=2)
    with pytest.raises(EmuError, match="N = 24"):
        t5.decode_idesc("f16", dense_idesc(m=128, n=24), cta_group=2)  # step 16 for ::2
    assert t5.decode_idesc("f16", dense_idesc(m=128, n=24)).n == 24   # step 8 for ::1
    with pytest.raises(EmuError, match="N = 40"):
        t5.decode_idesc("i8", dense_idesc(d=2, a=1, b=1, n=40))       # steps of 16 after 32
    with pytest.raises(EmuError, match="N = 8"):                      # Table 50: 8-bit transpose B
        t5.decode_idesc("f8f6f4", dense_idesc(a=0, b=0, tb=1, n=8))


def test_idesc_mxf8f6f4():
    i = t5.decode_idesc("mxf8f6f4", scaled_idesc(a=0, b=1, sfa=3, sfb=2, n=256, m=128),
                        scale_vec="scale_vec::1X")
    assert (i.a_format, i.b_format, i.m, i.n, i.k) == ("e4m3", "e5m2", 128, 256, 32)
    assert (i.sfa_id, i.sfb_id, i.scale_format, i.scale_vec, i.block_size) == (3, 2, "ue8m0", "1X", 32)
    assert t5.decode_idesc("mxf8f6f4", scaled_idesc(m=256), cta_group=2).m == 256
    with pytest.raises(EmuError, match="M = 256"):
        t5.decode_idesc("mxf8f6f4", scaled_idesc(m=256), cta_group=1)
    with pytest.raises(EmuError, match="scale type"):
        t5.decode_idesc("mxf8f6f4", scaled_idesc(ue8m0=0))
    with pytest.raises(EmuError, match="bits 24-26"):
        t5.decode_idesc("mxf8f6f4", scaled_idesc() | 1 << 24)
    with pytest.raises(EmuError, match="scale_vec"):
        t5.decode_idesc("mxf8f6f4", scaled_idesc(), scale_vec="4X")


def test_idesc_mxf4nvf4():
    i = t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, ue8m0=0, n=128), scale_vec="4X")
    assert (i.a_format, i.k, i.scale_format, i.block_size, i.sfa_id) == ("e2m1", 64, "ue4m3", 16, 0)
    j = t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, sfa=2, sfb=2), scale_vec="2X")
    assert (j.scale_format, j.block_size, j.sfa_id, j.sfb_id) == ("ue8m0", 32, 2, 2)
    with pytest.raises(EmuError, match="scale factor A id"):
        t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, sfa=1), scale_vec="4X")
    with pytest.raises(EmuError, match="need .scale_vec::4X"):
        t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, ue8m0=0), scale_vec="2X")
    with pytest.raises(EmuError, match="transpose"):
        t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, ta=1), scale_vec="4X")
    with pytest.raises(EmuError, match="atype"):
        t5.decode_idesc("mxf4nvf4", scaled_idesc(a=5, b=1), scale_vec="4X")
    with pytest.raises(EmuError, match="explicit"):
        t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1))
    with pytest.raises(Unsupported, match="K dimension = 96"):
        t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1) | 1 << 31, scale_vec="4X")


# ------------------------------------------------------------------ smem descriptor

def smem_desc(start, lbo, sbo, swizzle=0, version=1, base=0, mode=0) -> int:
    """Table 40: 0-13 start>>4, 16-29 LBO>>4, 32-45 SBO>>4, 46-48 0b001, 49-51 base offset,
    52 LBO mode, 61-63 swizzle (0 none, 1 128B/32B atom, 2 128B, 4 64B, 6 32B)."""
    return ((start & 0x3FFFF) >> 4 | (lbo & 0x3FFFF) >> 4 << 16 | (sbo & 0x3FFFF) >> 4 << 32
            | version << 46 | base << 49 | mode << 52 | swizzle << 61)


def test_smem_desc_fields():
    d = t5.decode_smem_desc(smem_desc(0x1_2340, 256, 1024, swizzle=2, base=3))
    assert (d.start, d.lbo, d.sbo, d.version, d.base_offset, d.lbo_mode) == (0x12340, 256, 1024, 1, 3, 0)
    assert (d.swizzle, d.swizzle_name, d.swizzle_bytes) == (2, "128B", 128)
    for code, width in ((0, 0), (4, 64), (6, 32), (1, 128)):
        assert t5.decode_smem_desc(smem_desc(0, 16, 128, swizzle=code)).swizzle_bytes == width


def test_smem_desc_rejects_bad_version_and_swizzle():
    with pytest.raises(EmuError, match="bits 46-48"):
        t5.decode_smem_desc(smem_desc(0, 16, 1024, swizzle=2, version=0))   # Hopper-style
    for sw in (3, 5, 7):
        with pytest.raises(EmuError, match="invalid"):
            t5.decode_smem_desc(smem_desc(0, 16, 1024, swizzle=sw))
    with pytest.raises(EmuError, match="bits 53-60"):
        t5.decode_smem_desc(smem_desc(0, 16, 1024) | 1 << 55)
    with pytest.raises(Unsupported, match="absolute"):
        t5.read_matrix(np.zeros(4096, np.uint8), smem_desc(0, 16, 1024, swizzle=2, mode=1), 8, 32)


def test_k_major_128b_swizzle_round_trip_with_k_steps():
    """A TMA-style 128B-swizzled tile (address bits 4-6 ^= bits 7-9) read 32 K-bytes at a time
    by advancing the descriptor's start address, as an MMA loop does."""
    rows, base = 128, 2048
    rng = np.random.default_rng(0)
    tile = rng.integers(0, 256, size=(rows, 128), dtype=np.uint8)
    smem = np.zeros(base + rows * 128, np.uint8)
    for r in range(rows):
        for kb in range(128):
            a = base + r * 128 + kb
            smem[a ^ ((a >> 7 & 7) << 4)] = tile[r, kb]
    for step in range(4):
        desc = smem_desc(base + 32 * step, 16, 1024, swizzle=2)
        got = t5.read_matrix(smem, desc, rows, 32, "K", 16)
        assert (got == tile[:, 32 * step:32 * step + 32]).all()
        addrs = t5.operand_addresses(desc, rows, 32, "K", 16)
        assert addrs.shape == (rows, 32) and len(np.unique(addrs)) == rows * 32


def _cute_fill(shape_strides, mn_ext, k_ext, elem_bytes, swz_bits, nbytes):
    """Lay out a logical (MN, K) matrix by a CuTe layout of the ISA examples (in elements),
    then Swizzle<swz_bits,4,3> on byte addresses; returns (smem, matrix bytes)."""
    (mn_shape, mn_stride), (k_shape, k_stride) = shape_strides
    rng = np.random.default_rng(5)
    mat = rng.integers(0, 256, size=(mn_ext, k_ext, elem_bytes), dtype=np.uint8)
    smem = np.zeros(nbytes, np.uint8)

    def offset(idx, shape, stride):
        off = 0
        for s, st in zip(shape, stride):
            off += (idx % s) * st
            idx //= s
        return off

    for i in range(mn_ext):
        for k in range(k_ext):
            e = offset(i, mn_shape, mn_stride) + offset(k, k_shape, k_stride)
            for b in range(elem_bytes):
                a = e * elem_bytes + b
                if swz_bits:
                    a ^= ((a >> 7) & ((1 << swz_bits) - 1)) << 4
                smem[a] = mat[i, k, b]
    return smem, mat.reshape(mn_ext, k_ext * elem_bytes)


def test_mn_major_64b_swizzle_bf16_isa_example():
    # 9.7.16.3.3: Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)); LBO 256*2, SBO 512*2
    smem, mat = _cute_fill((((8, 4, 2), (1, 8, 256)), ((8, 2), (32, 512))), 64, 16, 2, 2, 4096)
    got = t5.read_matrix(smem, smem_desc(0, 512, 1024, swizzle=4), 64, 32, "MN", 16)
    assert (got == mat).all()


def test_mn_major_no_swizzle_bf16_isa_example():
    # ((8,1,2),(8,2)):((1,8,64),(8,128)); LBO 128*2, SBO 64*2
    smem, mat = _cute_fill((((8, 1, 2), (1, 8, 64)), ((8, 2), (8, 128))), 16, 16, 2, 0, 1024)
    got = t5.read_matrix(smem, smem_desc(0, 256, 128), 16, 32, "MN", 16)
    assert (got == mat).all()


def test_k_major_no_swizzle_tf32_isa_example():
    # ((8,2),(4,4)):((4,32),(1,64)); LBO 64*4, SBO 32*4
    smem, mat = _cute_fill((((8, 2), (4, 32)), ((4, 4), (1, 64))), 16, 16, 4, 0, 1024)
    got = t5.read_matrix(smem, smem_desc(0, 256, 128), 16, 64, "K", 32)
    assert (got == mat).all()


def test_read_beyond_shared_memory_is_reported():
    with pytest.raises(CheckFailed, match="beyond"):
        t5.read_matrix(np.zeros(1024, np.uint8), smem_desc(0, 16, 1024, swizzle=2), 64, 32)


# ----------------------------------------------------------------------- formats

def test_e2m1_code_points_and_nibble_order():
    pos = [0, 0.5, 1, 1.5, 2, 3, 4, 6]
    assert t5.decode(np.arange(8), "e2m1").tolist() == pos
    assert t5.decode(np.arange(8, 16), "e2m1").tolist() == [-v for v in pos]
    assert t5.unpack_fp4(np.array([[0x71, 0xF2]], np.uint8)).tolist() == [[1, 7, 2, 15]]
    vals = t5.operand_values(np.array([[0x71]], np.uint8), "e2m1")
    assert vals.tolist() == [[0.5, 6.0]]   # low nibble = lower K index


def test_fp6_and_fp8_code_points():
    assert t5.decode([0b000001, 0b001000, 0b011111, 0b111111], "e2m3").tolist() == [0.125, 1.0, 7.5, -7.5]
    assert t5.decode([0b000001, 0b001100, 0b011111], "e3m2").tolist() == [0.0625, 1.0, 28.0]
    assert t5.decode([0x38, 0x7E, 0x01, 0xB8], "e4m3").tolist() == [1.0, 448.0, 2.0 ** -9, -1.0]
    assert np.isnan(t5.decode([0x7F, 0xFF], "e4m3")).all()
    assert t5.decode([0x3C, 0x7B, 0x01], "e5m2").tolist() == [1.0, 57344.0, 2.0 ** -16]
    assert t5.decode([0x7C, 0xFC], "e5m2").tolist() == [np.inf, -np.inf]
    assert np.isnan(t5.decode([0x7D], "e5m2")).all()


@pytest.mark.parametrize("fmt,mldt,bits", [
    ("e4m3", ml_dtypes.float8_e4m3fn, 8), ("e5m2", ml_dtypes.float8_e5m2, 8),
    ("e2m3", ml_dtypes.float6_e2m3fn, 6), ("e3m2", ml_dtypes.float6_e3m2fn, 6),
    ("e2m1", ml_dtypes.float4_e2m1fn, 4)])
def test_formats_agree_with_ml_dtypes(fmt, mldt, bits):
    codes = np.arange(1 << bits, dtype=np.uint8)
    ref = codes.view(mldt).astype(np.float64)
    np.testing.assert_array_equal(t5.decode(codes, fmt), ref)


def test_scale_formats():
    e = np.array([0, 1, 126, 127, 128, 254])
    assert t5.decode(e, "ue8m0").tolist() == [2.0 ** (x - 127) for x in e]
    assert np.isnan(t5.decode([0xFF], "ue8m0")).all()
    assert t5.decode([0x38, 0x7E, 0x08], "ue4m3").tolist() == [1.0, 448.0, 2.0 ** -6]
    assert np.isnan(t5.decode([0x7F], "ue4m3")).all()
    with pytest.raises(CheckFailed, match="MSB"):
        t5.decode([0xB8], "ue4m3")


def test_16_and_32_bit_formats():
    x = np.array([1.5, -2.25, 3.0e-3], np.float32)
    bf = x.astype(ml_dtypes.bfloat16).view(np.uint16)
    np.testing.assert_array_equal(t5.decode(bf, "bf16"), x.astype(ml_dtypes.bfloat16).astype(np.float64))
    np.testing.assert_array_equal(t5.decode(x.astype(np.float16).view(np.uint16), "f16"),
                                  x.astype(np.float16).astype(np.float64))
    one_ulp = np.array([0x3F800001], np.uint32)      # below tf32's 10 mantissa bits
    assert t5.decode(one_ulp, "tf32").tolist() == [1.0]
    raw = np.frombuffer(np.array([1.0, -2.0], "<f2").tobytes(), np.uint8).reshape(1, 4)
    assert t5.operand_values(raw, "f16").tolist() == [[1.0, -2.0]]


# ------------------------------------------------------------------------ arithmetic

def test_mma_f16_against_numpy_and_accumulate():
    i = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=32, m=64))
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((64, 16)), rng.standard_normal((32, 16))
    d0 = rng.standard_normal((64, 32)).astype(np.float32)
    np.testing.assert_array_equal(t5.mma(i, a, b), (a @ b.T).astype(np.float32))
    np.testing.assert_array_equal(t5.mma(i, a, b, d0), (a @ b.T + d0).astype(np.float32))
    np.testing.assert_array_equal(t5.mma(i, a, b, d0, scale_input_d=2),
                                  (a @ b.T + d0 / 4.0).astype(np.float32))
    neg = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=32, m=64, neg_a=1))
    np.testing.assert_array_equal(t5.mma(neg, a, b), (-(a @ b.T)).astype(np.float32))
    with pytest.raises(EmuError, match="must be"):
        t5.mma(i, a[:, :8], b)


def test_mma_block_scaled_against_direct_float64():
    """mxf4nvf4 / 4X: one ue4m3 scale per 16 K; mxf8f6f4 / 1X: one ue8m0 per 32 K."""
    rng = np.random.default_rng(4)
    i = t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, ue8m0=0, n=16, m=128), scale_vec="4X")
    a = t5.decode(rng.integers(0, 16, (128, 64)), "e2m1")
    b = t5.decode(rng.integers(0, 16, (16, 64)), "e2m1")
    sa = t5.decode(rng.integers(0x20, 0x50, (128, 4)), "ue4m3")
    sb = t5.decode(rng.integers(0x20, 0x50, (16, 4)), "ue4m3")
    want = np.zeros((128, 16))
    for m in range(128):
        for n in range(16):
            want[m, n] = sum(a[m, k] * sa[m, k // 16] * b[n, k] * sb[n, k // 16] for k in range(64))
    np.testing.assert_array_equal(t5.mma(i, a, b, None, sa, sb), want.astype(np.float32))

    j = t5.decode_idesc("mxf8f6f4", scaled_idesc(a=0, b=0, n=8, m=128))
    a8 = t5.decode(rng.integers(0, 0x7F, (128, 32)), "e4m3")
    b8 = t5.decode(rng.integers(0, 0x7F, (8, 32)), "e4m3")
    sa8 = t5.decode(rng.integers(120, 135, (128, 1)), "ue8m0")
    sb8 = t5.decode(rng.integers(120, 135, (8, 1)), "ue8m0")
    want8 = (a8 * sa8) @ (b8 * sb8).T
    np.testing.assert_array_equal(t5.mma(j, a8, b8, None, sa8, sb8), want8.astype(np.float32))
    with pytest.raises(EmuError, match="scales must be"):
        t5.mma(j, a8, b8, None, sa8[:, :0], sb8)


def test_mma_i8_saturates_or_wraps():
    sat = t5.decode_idesc("i8", dense_idesc(d=2, a=1, b=1, sat=1, n=8, m=64))
    wrap = t5.decode_idesc("i8", dense_idesc(d=2, a=1, b=1, n=8, m=64))
    a = np.full((64, 32), 127.0)
    b = np.full((8, 32), 127.0)
    d = np.full((64, 8), 2**31 - 10, np.int64)
    assert (t5.mma(sat, a, b, d) == 2**31 - 1).all()
    np.testing.assert_array_equal(t5.mma(wrap, a, b, d).astype(np.int64) % 2**32,
                                  (d + 32 * 127 * 127) % 2**32)


# ------------------------------------------------------------- data-path layouts

def test_d_layouts():
    d = t5.d_layout(128, 64, 1)
    assert d.name == "D" and (d.lane[:, 5] == np.arange(128)).all() and (d.column[7] == np.arange(64)).all()
    f = t5.d_layout(64, 8, 1, lane_base=16)
    assert f.name == "F" and f.lane[:, 0].tolist()[:18] == list(range(16, 32)) + [48, 49]
    assert f.lane[63, 0] == 96 + 16 + 15
    a = t5.d_layout(256, 16, 2)
    assert a.name == "A" and a.cta[127, 0] == 0 and a.cta[128, 0] == 1 and a.lane[200, 3] == 72
    b = t5.d_layout(128, 32, 2)
    assert b.name == "B"
    # each CTA holds 64 rows x 32 columns in 128 distinct (lane, column) cells... per CTA
    for cta in (0, 1):
        sel = b.cta == cta
        cells = set(zip(b.lane[sel].tolist(), b.column[sel].tolist()))
        assert len(cells) == 64 * 32 and max(c for _, c in cells) == 15
    with pytest.raises(Unsupported):
        t5.d_layout(64, 16, 2)
    with pytest.raises(EmuError, match="lane must be 0 or 16"):
        t5.d_layout(64, 16, 1, lane_base=32)


def test_a_from_tmem_m128():
    tm = TensorMemory()
    tm.alloc(0, 32)
    rng = np.random.default_rng(6)
    words = rng.integers(0, 2**32, size=(128, 8), dtype=np.uint64).astype(np.uint32)
    for w in range(4):
        tm.st(w, (32 * w) << 16 | 8, "32x32b", 8, words[32 * w:32 * w + 32])
    raw = t5.a_from_tmem([tm], 8, 128, 1, 32)
    assert raw.shape == (128, 32)
    assert (raw.view("<u4") == words).all()
    vals = t5.operand_values(raw, "bf16")       # element 2c in the low half of column c
    assert vals[3, 0] == t5.decode(np.array([words[3, 0] & 0xFFFF]), "bf16")[0]
    assert vals[3, 1] == t5.decode(np.array([words[3, 0] >> 16]), "bf16")[0]


# --------------------------------------------------------- whole instruction (run_mma)

def _swizzled_tile(vals_bytes: np.ndarray, base: int, smem: np.ndarray) -> None:
    """K-major rows of 128 bytes, 128B swizzle as TMA writes it."""
    rows, width = vals_bytes.shape
    assert width == 128
    for r in range(rows):
        for kb in range(128):
            a = base + r * 128 + kb
            smem[a ^ ((a >> 7 & 7) << 4)] = vals_bytes[r, kb]


def test_run_mma_bf16_128x64_from_swizzled_smem():
    rng = np.random.default_rng(7)
    A = rng.standard_normal((128, 64)).astype(ml_dtypes.bfloat16)
    B = rng.standard_normal((64, 64)).astype(ml_dtypes.bfloat16)
    smem = np.zeros(65536, np.uint8)
    _swizzled_tile(A.view(np.uint8).reshape(128, 128), 0, smem)
    _swizzled_tile(B.view(np.uint8).reshape(64, 128), 32768, smem)
    tm = TensorMemory()
    d_addr = tm.alloc(0, 64)
    idesc = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=64, m=128))
    for step in range(4):   # K = 64 in four K=16 instructions, advancing start by 32 bytes
        t5.run_mma(idesc, [tm], [smem], d_addr, b_desc=smem_desc(32768 + 32 * step, 16, 1024, 2),
                   a_desc=smem_desc(32 * step, 16, 1024, 2), enable_input_d=step > 0)
    want = A.astype(np.float64) @ B.astype(np.float64).T
    got = tm.cells[:, :64].view(np.float32)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_run_mma_pair_m256_splits_a_and_b_between_the_ctas():
    rng = np.random.default_rng(8)
    A = rng.integers(-3, 4, (256, 64)).astype(ml_dtypes.bfloat16)
    B = rng.integers(-3, 4, (32, 64)).astype(ml_dtypes.bfloat16)
    smems = [np.zeros(32768, np.uint8) for _ in range(2)]
    for c in range(2):
        _swizzled_tile(A[128 * c:128 * c + 128].view(np.uint8).reshape(128, 128), 0, smems[c])
        _swizzled_tile(B[16 * c:16 * c + 16].view(np.uint8).reshape(16, 128), 16384, smems[c])
    tms = [TensorMemory("cta 0"), TensorMemory("cta 1")]
    from porter.emu.units.tmem import alloc_pair
    d_addr = alloc_pair(tms[0], tms[1], 0, 0, 32)
    idesc = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=32, m=256), cta_group=2)
    for step in range(4):
        t5.run_mma(idesc, tms, smems, d_addr, smem_desc(16384 + 32 * step, 16, 1024, 2),
                   a_desc=smem_desc(32 * step, 16, 1024, 2), enable_input_d=step > 0)
    want = A.astype(np.float64) @ B.astype(np.float64).T
    assert (tms[0].cells[:, :32].view(np.float32) == want[:128]).all()
    assert (tms[1].cells[:, :32].view(np.float32) == want[128:]).all()


def test_run_mma_reads_d_only_when_enabled_and_checks_columns():
    smem = np.zeros(32768, np.uint8)
    tm = TensorMemory()
    tm.alloc(0, 32)
    idesc = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=32, m=128))
    with pytest.raises(CheckFailed, match="never written"):
        t5.run_mma(idesc, [tm], [smem], 0, smem_desc(16384, 16, 1024, 2),
                   a_desc=smem_desc(0, 16, 1024, 2), enable_input_d=True)
    wide = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=64, m=128))
    with pytest.raises(CheckFailed, match="not allocated"):
        t5.run_mma(wide, [tm], [smem], 0, smem_desc(16384, 16, 1024, 2),
                   a_desc=smem_desc(0, 16, 1024, 2), enable_input_d=False)


def _sf_atom(sf: np.ndarray) -> np.ndarray:
    """128 rows x 4 scale bytes -> the 512-byte source of one tcgen05.cp .32x128b.warpx4:
    16-byte row l holds, in word j, the 4 scale bytes of row 32*j + l."""
    out = np.zeros((32, 16), np.uint8)
    for r in range(sf.shape[0]):
        out[r % 32, 4 * (r // 32):4 * (r // 32) + 4] = sf[r]
    return out.reshape(-1)


def test_run_mma_nvfp4_with_scales_copied_by_tcgen05_cp():
    rng = np.random.default_rng(9)
    M, N = 128, 128
    a_codes = rng.integers(0, 16, (M, 64)).astype(np.uint8)
    b_codes = rng.integers(0, 16, (N, 64)).astype(np.uint8)
    pack = lambda c: (c[:, 0::2] | c[:, 1::2] << 4).astype(np.uint8)   # low nibble first
    sfa = rng.integers(0x28, 0x48, (M, 4)).astype(np.uint8)
    sfb = rng.integers(0x28, 0x48, (N, 4)).astype(np.uint8)
    smem = np.zeros(65536, np.uint8)
    _swizzled_tile(np.pad(pack(a_codes), ((0, 0), (0, 96))), 0, smem)
    _swizzled_tile(np.pad(pack(b_codes), ((0, 0), (0, 96))), 16384, smem)
    smem[40960:40960 + 512] = _sf_atom(sfa)
    smem[41984:41984 + 512] = _sf_atom(sfb)
    tm = TensorMemory()
    d_addr = tm.alloc(0, 256)
    tm.cp(d_addr + 128, smem, smem_desc(40960, 16, 128), "32x128b", "warpx4")
    tm.cp(d_addr + 132, smem, smem_desc(41984, 16, 128), "32x128b", "warpx4")
    idesc = t5.decode_idesc("mxf4nvf4", scaled_idesc(a=1, b=1, ue8m0=0, n=N, m=M), scale_vec="4X")
    t5.run_mma(idesc, [tm], [smem], d_addr, smem_desc(16384, 16, 1024, 2),
               a_desc=smem_desc(0, 16, 1024, 2), enable_input_d=False,
               sfa_address=d_addr + 128, sfb_address=d_addr + 132)
    a = t5.decode(a_codes, "e2m1") * np.repeat(t5.decode(sfa, "ue4m3"), 16, axis=1)
    b = t5.decode(b_codes, "e2m1") * np.repeat(t5.decode(sfb, "ue4m3"), 16, axis=1)
    np.testing.assert_array_equal(tm.cells[:, :N].view(np.float32), (a @ b.T).astype(np.float32))
    # scale factors not duplicated to every lane quarter are an ISA violation
    tm.cells[40, 130] ^= 1
    with pytest.raises(CheckFailed, match="duplicated"):
        t5.run_mma(idesc, [tm], [smem], d_addr, smem_desc(16384, 16, 1024, 2),
                   a_desc=smem_desc(0, 16, 1024, 2), enable_input_d=False,
                   sfa_address=d_addr + 128, sfb_address=d_addr + 132)


def test_scale_ids_pick_bytes_1x():
    tm = TensorMemory()
    tm.alloc(0, 32)
    sf = np.arange(128 * 4, dtype=np.uint32).reshape(128, 4) % 200 + 20
    smem = np.zeros(1024, np.uint8)
    smem[:512] = _sf_atom(sf.astype(np.uint8))
    tm.cp(0, smem, smem_desc(0, 16, 128), "32x128b", "warpx4")
    for sid in range(4):
        got = t5.read_scales(tm, 0, 128, "1X", sid, "ue8m0")
        np.testing.assert_array_equal(got[:, 0], np.ldexp(1.0, sf[:, sid].astype(int) - 127))


def test_mn_major_128b_swizzle_as_porter_attention_v_uses_it():
    """V (seq x 128 bf16) as two TMA boxes of 64 columns (128 B rows, 128B swizzle, 16 KiB
    apart): B[n, k] = V[k, n] read MN-major with LBO = 16 KiB (next 64 N), SBO = 1 KiB (next
    8 K rows); each K=16 step advances the start by 16 rows."""
    rng = np.random.default_rng(10)
    V = rng.standard_normal((128, 128)).astype(ml_dtypes.bfloat16)
    vb = V.view(np.uint8).reshape(128, 256)
    smem = np.zeros(32768, np.uint8)
    for h in range(2):
        for k in range(128):
            for j in range(128):
                a = h * 16384 + k * 128 + j
                smem[a ^ ((a >> 7 & 7) << 4)] = vb[k, 128 * h + j]
    for step in (0, 3):
        desc = smem_desc(step * 16 * 128, 16384, 1024, swizzle=2)
        got = t5.operand_values(t5.read_matrix(smem, desc, 128, 32, "MN", 16), "bf16")
        want = V.astype(np.float64)[16 * step:16 * step + 16, :].T
        np.testing.assert_array_equal(got, want)


def test_run_mma_a_from_tmem_p_times_v():
    rng = np.random.default_rng(11)
    P = rng.standard_normal((128, 16)).astype(ml_dtypes.bfloat16)
    Bt = rng.standard_normal((32, 16)).astype(ml_dtypes.bfloat16)    # N x K, K-major
    smem = np.zeros(16384, np.uint8)
    _swizzled_tile(np.pad(Bt.view(np.uint8).reshape(32, 32), ((0, 0), (0, 96))), 0, smem)
    tm = TensorMemory()
    tm.alloc(0, 64)
    words = P.view(np.uint32).reshape(128, 8)     # two bf16 per column, lower K in low half
    for w in range(4):
        tm.st(w, (32 * w) << 16 | 32, "32x32b", 8, words[32 * w:32 * w + 32])
    idesc = t5.decode_idesc("f16", dense_idesc(d=1, a=1, b=1, n=32, m=128))
    t5.run_mma(idesc, [tm], [smem], 0, smem_desc(0, 16, 1024, 2), a_tmem=32, enable_input_d=False)
    want = P.astype(np.float64) @ Bt.astype(np.float64).T
    np.testing.assert_array_equal(tm.cells[:, :32].view(np.float32), want.astype(np.float32))
    addrs = t5.mma_smem_addresses(idesc, smem_desc(0, 16, 1024, 2))
    assert addrs["A"] is None and addrs["B"].shape == (32, 32) and addrs["B"].max() < 4096


def test_layout_f_and_b_lanes():
    f = t5.d_layout(64, 4, 1)
    assert [int(f.lane[r, 0]) for r in (0, 15, 16, 31, 32, 63)] == [0, 15, 32, 47, 64, 111]
    b = t5.d_layout(128, 64, 2)
    # even CTA: rows 0..63; N-half 0 in lanes 0..63, N-half 1 in lanes 64..127, columns 0..31
    assert (int(b.cta[10, 5]), int(b.lane[10, 5]), int(b.column[10, 5])) == (0, 10, 5)
    assert (int(b.cta[10, 40]), int(b.lane[10, 40]), int(b.column[10, 40])) == (0, 74, 8)
    assert (int(b.cta[100, 40]), int(b.lane[100, 40]), int(b.column[100, 40])) == (1, 100, 8)


def test_run_mma_mxfp8_pair_m256_scales_from_each_ctas_tmem():
    rng = np.random.default_rng(12)
    M, N = 256, 32
    a_codes = rng.integers(0, 0x70, (M, 32)).astype(np.uint8)      # e4m3, K = 32
    b_codes = rng.integers(0, 0x70, (N, 32)).astype(np.uint8)
    sfa = rng.integers(120, 134, (M, 4)).astype(np.uint8)            # 4 K-steps' ue8m0 bytes
    sfb = rng.integers(120, 134, (N, 4)).astype(np.uint8)
    smems, tms = [np.zeros(65536, np.uint8) for _ in range(2)], [TensorMemory("cta 0"), TensorMemory("cta 1")]
    from porter.emu.units.tmem import alloc_pair
    base = alloc_pair(tms[0], tms[1], 0, 0, 64)
    for c in range(2):
        _swizzled_tile(np.pad(a_codes[128 * c:128 * c + 128], ((0, 0), (0, 96))), 0, smems[c])
        _swizzled_tile(np.pad(b_codes[16 * c:16 * c + 16], ((0, 0), (0, 96))), 16384, smems[c])
        smems[c][40960:41472] = _sf_atom(sfa[128 * c:128 * c + 128])
        smems[c][41984:42496] = _sf_atom(np.pad(sfb, ((0, 96), (0, 0))))
        tms[c].cp(base + 32, smems[c], smem_desc(40960, 16, 128), "32x128b", "warpx4", cta_group=2)
        tms[c].cp(base + 36, smems[c], smem_desc(41984, 16, 128), "32x128b", "warpx4", cta_group=2)
    sid = 2
    idesc = t5.decode_idesc("mxf8f6f4", scaled_idesc(a=0, b=0, sfa=sid, sfb=sid, n=N, m=M),
                            cta_group=2, scale_vec="1X")
    t5.run_mma(idesc, tms, smems, base, smem_desc(16384, 16, 1024, 2),
               a_desc=smem_desc(0, 16, 1024, 2), enable_input_d=False,
               sfa_address=base + 32, sfb_address=base + 36)
    a = t5.decode(a_codes, "e4m3") * t5.decode(sfa[:, sid:sid + 1], "ue8m0")
    b = t5.decode(b_codes, "e4m3") * t5.decode(sfb[:, sid:sid + 1], "ue8m0")
    want = (a @ b.T).astype(np.float32)
    assert (tms[0].cells[:, :N].view(np.float32) == want[:128]).all()
    assert (tms[1].cells[:, :N].view(np.float32) == want[128:]).all()
