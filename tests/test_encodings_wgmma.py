"""The wgmma shared-memory matrix descriptor, field by field against the PTX ISA table
("Matrix Descriptor Format": start address 0-13, LBO 16-29, SBO 32-45 (all >> 4),
base offset 49-51, swizzle 62-63 with 0 none / 1 128B / 2 64B / 3 32B)."""

from __future__ import annotations

import pytest

from porter.errors import PorterError
from porter.kernels import encodings_wgmma as enc


def bits(value: int, lo: int, hi: int) -> int:
    return (value >> lo) & ((1 << (hi - lo + 1)) - 1)


def test_start_address_bits_0_13():
    desc = enc.encode_smem_descriptor(start_address=0x3FFF0, leading_byte_offset=0,
                                      stride_byte_offset=0, swizzle="none")
    assert desc == 0x3FFF  # 0x3FFF0 >> 4, nothing else set
    assert bits(enc.encode_smem_descriptor(0x1230, 0, 0, 0, "none"), 0, 13) == 0x123


def test_leading_byte_offset_bits_16_29():
    desc = enc.encode_smem_descriptor(0, leading_byte_offset=0x20, stride_byte_offset=0, swizzle="none")
    assert desc == 0x2 << 16
    assert bits(enc.encode_smem_descriptor(0, 0x3FFF0, 0, 0, "none"), 16, 29) == 0x3FFF


def test_stride_byte_offset_bits_32_45():
    desc = enc.encode_smem_descriptor(0, 0, stride_byte_offset=1024, swizzle="none")
    assert desc == 64 << 32
    assert bits(enc.encode_smem_descriptor(0, 0, 0x3FFF0, 0, "none"), 32, 45) == 0x3FFF


def test_base_offset_bits_49_51():
    for value in range(8):
        desc = enc.encode_smem_descriptor(0, 0, 0, base_offset=value, swizzle="none")
        assert desc == value << 49


@pytest.mark.parametrize("mode,field", [("none", 0), ("128B", 1), ("64B", 2), ("32B", 3)])
def test_swizzle_bits_62_63(mode, field):
    desc = enc.encode_smem_descriptor(0, 0, 0, 0, swizzle=mode)
    assert desc == field << 62
    assert enc.decode_smem_descriptor(desc).swizzle == mode


def test_fields_do_not_overlap_and_round_trip():
    desc = enc.encode_smem_descriptor(0x2A0, 0x30, 0x400, 3, "64B")
    d = enc.decode_smem_descriptor(desc)
    assert (d.start_address, d.leading_byte_offset, d.stride_byte_offset, d.base_offset, d.swizzle) == \
        (0x2A0, 0x30, 0x400, 3, "64B")
    # Reserved bits (14-15, 30-31, 46-48, 52-61) stay zero.
    full = enc.encode_smem_descriptor(0x3FFF0, 0x3FFF0, 0x3FFF0, 7, "32B")
    reserved = (0x3 << 14) | (0x3 << 30) | (0x7 << 46) | (((1 << 10) - 1) << 52)
    assert full & reserved == 0
    with pytest.raises(PorterError, match="reserved"):
        enc.decode_smem_descriptor(1 << 14)


def test_k_major_128b_template():
    # 128-byte rows, 8-row groups of 1024 B: SBO 1024, LBO 16 (unused by the hardware), 128B swizzle.
    desc = enc.k_major_swizzled_template(128, "128B")
    assert desc == 0x4000004000010000
    d = enc.decode_smem_descriptor(desc)
    assert (d.start_address, d.leading_byte_offset, d.stride_byte_offset, d.swizzle) == (0, 16, 1024, "128B")
    with pytest.raises(PorterError, match="128B"):
        enc.k_major_swizzled_template(64, "128B")


def test_k_step_increment():
    assert enc.k_step_increment(16, 2) == 2   # bf16 m64nNk16: 32 bytes along the swizzle row
    assert enc.k_step_increment(32, 1) == 2   # e4m3 m64nNk32: 32 bytes
    with pytest.raises(PorterError):
        enc.k_step_increment(4, 2)            # 8 bytes is not 16-byte aligned


@pytest.mark.parametrize("kwargs,needle", [
    ({"start_address": 8}, "start_address"),
    ({"stride_byte_offset": 1 << 18}, "stride_byte_offset"),
    ({"base_offset": 8}, "base_offset"),
    ({"swizzle": "256B"}, "swizzle"),
])
def test_bad_fields_are_one_line_errors(kwargs, needle):
    with pytest.raises(PorterError, match=needle) as info:
        enc.encode_smem_descriptor(**kwargs)
    assert "\n" not in str(info.value)


def test_c_literal():
    assert enc.c_literal(0x4000004000010000) == "0x4000004000010000ull"


def test_swizzle_128b_is_a_permutation_of_each_atom():
    for atom in (0, 1024, 7 * 1024):
        image = {enc.swizzle_128b(atom + i) for i in range(1024)}
        assert image == set(range(atom, atom + 1024))
    assert enc.swizzle_128b(3 * 128 + 16) == 3 * 128 + (1 ^ 3) * 16   # row 3, piece 1 -> piece 2
