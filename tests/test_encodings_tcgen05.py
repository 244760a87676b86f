"""tcgen05 descriptor encodings, field by field against the PTX ISA tables
(9.7.16.4.2 Tables 42-44: instruction descriptor; 9.7.16.4.1 Table 40: shared-memory
descriptor)."""

from __future__ import annotations

import pytest

from porter.errors import PorterError
from porter.kernels import encodings_tcgen05 as enc


def bits(word: int, lo: int, hi: int) -> int:
    """Bits lo..hi inclusive, as the ISA tables number them."""
    return (word >> lo) & ((1 << (hi - lo + 1)) - 1)


def test_f16_bf16_idesc_fields():
    w = enc.encode_instr_desc(enc.InstrDesc("f16", "bf16", "bf16", m=128, n=256))
    assert bits(w, 0, 1) == 0 and bits(w, 2, 2) == 0 and bits(w, 3, 3) == 0   # dense, no saturate
    assert bits(w, 4, 5) == 1            # D = F32
    assert bits(w, 6, 6) == 0
    assert bits(w, 7, 9) == 1            # A = BF16
    assert bits(w, 10, 12) == 1          # B = BF16
    assert bits(w, 13, 14) == 0          # no negate
    assert bits(w, 15, 16) == 0          # both K-major (no transpose)
    assert bits(w, 17, 22) == 256 >> 3
    assert bits(w, 23, 23) == 0
    assert bits(w, 24, 28) == 128 >> 4
    assert bits(w, 29, 31) == 0
    # The probe kernel's hand-built literal (M=128 N=64) follows the same table.
    assert enc.encode_instr_desc(enc.InstrDesc("f16", "bf16", "bf16", m=128, n=64)) == \
        (1 << 4) | (1 << 7) | (1 << 10) | ((64 >> 3) << 17) | ((128 >> 4) << 24)


@pytest.mark.parametrize("a,b,code_a,code_b", [("e4m3", "e4m3", 0, 0), ("e5m2", "e4m3", 1, 0),
                                               ("e2m3", "e3m2", 3, 4), ("e2m1", "e2m1", 5, 5)])
def test_f8f6f4_type_codes(a, b, code_a, code_b):
    w = enc.encode_instr_desc(enc.InstrDesc("f8f6f4", a, b, m=256, n=256))
    assert bits(w, 7, 9) == code_a and bits(w, 10, 12) == code_b
    assert bits(w, 24, 28) == 256 >> 4 and bits(w, 4, 5) == 1


def test_mxf8f6f4_block_scaled_fields():
    w = enc.encode_instr_desc(enc.InstrDesc("mxf8f6f4", "e4m3", "e4m3", m=128, n=128,
                                            scale_type="ue8m0", sfa_id=3, sfb_id=2))
    assert bits(w, 0, 1) == 0 and bits(w, 2, 2) == 0 and bits(w, 3, 3) == 0
    assert bits(w, 4, 5) == 2            # SFB id (Table 43)
    assert bits(w, 7, 9) == 0 and bits(w, 10, 12) == 0
    assert bits(w, 17, 22) == 128 >> 3
    assert bits(w, 23, 23) == 1          # UE8M0
    assert bits(w, 24, 26) == 0
    assert bits(w, 27, 28) == 128 >> 7   # M >> 7
    assert bits(w, 29, 30) == 3          # SFA id
    assert bits(w, 31, 31) == 0


def test_mxf4nvf4_fields():
    w = enc.encode_instr_desc(enc.InstrDesc("mxf4nvf4", "e2m1", "e2m1", m=256, n=128, scale_type="ue4m3"))
    assert bits(w, 7, 9) == 1 and bits(w, 10, 11) == 1 and bits(w, 12, 12) == 0   # E2M1 = 1
    assert bits(w, 23, 23) == 0          # UE4M3
    assert bits(w, 27, 28) == 2          # M = 256
    assert bits(w, 29, 30) == 0 and bits(w, 4, 5) == 0 and bits(w, 31, 31) == 0    # K = 64


def test_scaled_m_bits_agree_with_plain_m_field():
    # Table 43/44 write M >> 7 at bit 27, Table 42 M >> 4 at bit 24: same bits for 128/256.
    for m in (128, 256):
        assert ((m >> 7) << 27) == ((m >> 4) << 24)


def test_decode_round_trip():
    d = enc.InstrDesc("mxf8f6f4", "e5m2", "e2m1", m=256, n=248, scale_type="ue8m0", sfa_id=1, sfb_id=3)
    f = enc.decode_instr_desc(enc.encode_instr_desc(d), "mxf8f6f4")
    assert (f["m"], f["n"], f["a_type"], f["b_type"], f["sfa_id"], f["sfb_id"], f["scale_type"]) == \
        (256, 248, 1, 5, 1, 3, 1)


@pytest.mark.parametrize("bad", [
    dict(kind="f16", a_type="e4m3", b_type="bf16", m=128, n=128),
    dict(kind="f16", a_type="bf16", b_type="bf16", m=128, n=260),
    dict(kind="f16", a_type="bf16", b_type="bf16", m=96, n=128),
    dict(kind="mxf4nvf4", a_type="e2m1", b_type="e2m1", m=64, n=128, scale_type="ue4m3"),
    dict(kind="mxf8f6f4", a_type="e4m3", b_type="e4m3", m=128, n=128, scale_type="ue4m3"),
    dict(kind="mxf8f6f4", a_type="e4m3", b_type="e4m3", m=128, n=128, scale_type="ue8m0", sfa_id=4),
    dict(kind="f8f6f4", a_type="e4m3", b_type="e4m3", m=128, n=128, scale_type="ue8m0"),
])
def test_idesc_rejects_illegal(bad):
    with pytest.raises(PorterError, match="instruction descriptor"):
        enc.encode_instr_desc(enc.InstrDesc(**bad))


def test_smem_desc_sw128_kmajor_fields():
    d = enc.kmajor_sw128_operand_desc()
    assert bits(d, 0, 13) == 0                 # start filled in at run time
    assert bits(d, 14, 15) == 0
    assert bits(d, 16, 29) == 1                # LBO "1 (assumed)" for swizzled K-major
    assert bits(d, 30, 31) == 0
    assert bits(d, 32, 45) == 1024 >> 4        # SBO: 8 rows x 128 B
    assert bits(d, 46, 48) == 0b001            # fixed constant
    assert bits(d, 49, 51) == 0                # base offset: tiles start on 1024 B
    assert bits(d, 52, 52) == 0                # relative LBO
    assert bits(d, 53, 60) == 0
    assert bits(d, 61, 63) == 2                # 128-byte swizzle (tcgen05 code, not Hopper's 1)


def test_smem_desc_start_address_and_swizzle_codes():
    d = enc.encode_smem_desc(start=0x1A400, lbo=0, sbo=128, swizzle="none")
    assert enc.decode_smem_desc(d)["start"] == 0x1A400 and bits(d, 0, 13) == (0x1A400 >> 4)
    codes = {s: bits(enc.encode_smem_desc(swizzle=s), 61, 63) for s in enc.SWIZZLE}
    assert codes == {"none": 0, "128b_base32b": 1, "128b": 2, "64b": 4, "32b": 6}


def test_scale_factor_copy_desc():
    f = enc.decode_smem_desc(enc.scale_factor_copy_desc())
    assert (f["sbo"], f["lbo"], f["swizzle"], f["version"]) == (128, 0, 0, 1)


@pytest.mark.parametrize("kw", [dict(start=8), dict(sbo=1 << 18), dict(swizzle="96b"), dict(base_offset=8)])
def test_smem_desc_rejects_illegal(kw):
    with pytest.raises(PorterError, match="shared-memory descriptor"):
        enc.encode_smem_desc(**kw)


def test_tmem_address():
    assert enc.tmem_address(96, 17) == (96 << 16) | 17
    with pytest.raises(PorterError):
        enc.tmem_address(128, 0)


def test_negate_and_transpose_bits():
    w = enc.encode_instr_desc(enc.InstrDesc("f16", "f16", "f16", m=64, n=8, negate_a=True,
                                            a_major_mn=True, b_major_mn=True))
    assert bits(w, 13, 13) == 1 and bits(w, 14, 14) == 0
    assert bits(w, 15, 15) == 1 and bits(w, 16, 16) == 1
    assert bits(w, 7, 9) == 0 and bits(w, 17, 22) == 1 and bits(w, 24, 28) == 4
    w = enc.encode_instr_desc(enc.InstrDesc("f16", "bf16", "bf16", m=128, n=16, d_type="f16", negate_b=True))
    assert bits(w, 4, 5) == 0 and bits(w, 14, 14) == 1 and bits(w, 13, 13) == 0
    with pytest.raises(PorterError, match="K-major"):
        enc.encode_instr_desc(enc.InstrDesc("mxf4nvf4", "e2m1", "e2m1", m=128, n=128, scale_type="ue4m3",
                                            b_major_mn=True))


def test_i8_and_tf32_codes():
    w = enc.encode_instr_desc(enc.InstrDesc("i8", "s8", "u8", m=128, n=32, d_type="s32"))
    assert bits(w, 4, 5) == 2 and bits(w, 7, 9) == 1 and bits(w, 10, 12) == 0
    w = enc.encode_instr_desc(enc.InstrDesc("tf32", "tf32", "tf32", m=128, n=64))
    assert bits(w, 7, 9) == 2 and bits(w, 10, 12) == 2
