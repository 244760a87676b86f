"""Bit encodings for Hopper wgmma: the 64-bit shared-memory matrix descriptor.

PTX ISA, "Asynchronous Warpgroup Level Matrix Multiply-Accumulate Instructions",
section "Matrix Descriptor Format" (wgmma.mma_async, sm_90a):

    bits  0-13  start address        (byte address >> 4; 14 bits -> 256 KiB of smem)
    bits 16-29  leading dimension byte offset (LBO, >> 4)
    bits 32-45  stride dimension byte offset  (SBO, >> 4)
    bits 49-51  matrix base offset   (for swizzle patterns whose start address is
                                      not aligned to the pattern's repeat: 1024 B for 128B)
    bits 62-63  swizzle mode         (0 none, 1 128-byte, 2 64-byte, 3 32-byte)

All other bits are reserved and zero. For a K-major operand in the 128-byte
swizzle mode (what porter's TMA loads produce: rows of 128 bytes, 8-row groups of
1024 bytes), SBO is the distance between consecutive 8-row groups (1024 B) and
LBO is unused by the hardware (the whole K extent of one MMA fits in the 128-byte
row); the ISA asks for it to be set, by convention to 1 (16 bytes).

The kernel receives the descriptor with the start address field zero (a
``template``) and ORs in ``(smem_address & 0x3FFFF) >> 4`` at run time; stepping
along K inside a 128-byte swizzle row adds ``k_bytes >> 4`` to that field, since
the hardware applies the swizzle XOR to the final address bits exactly as TMA
did when it wrote the tile.
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.errors import PorterError

# Swizzle-mode field values (bits 62-63), PTX ISA "Matrix Descriptor Format".
SWIZZLE_MODES = {"none": 0, "128B": 1, "64B": 2, "32B": 3}
# Bytes in one swizzled row for each mode (the TMA box inner extent must not exceed it).
SWIZZLE_BYTES = {"none": 16, "128B": 128, "64B": 64, "32B": 32}

_FIELD_14 = (1 << 14) - 1


@dataclass(frozen=True)
class SmemDescriptor:
    """The decoded fields, in bytes (not >> 4), and the swizzle mode name."""

    start_address: int
    leading_byte_offset: int
    stride_byte_offset: int
    base_offset: int
    swizzle: str


def _field16(name: str, value: int) -> int:
    """A byte quantity stored >> 4 in a 14-bit field: must be 16-byte aligned and < 256 KiB."""
    if value < 0 or value % 16 != 0 or (value >> 4) > _FIELD_14:
        raise PorterError(
            f"wgmma smem descriptor: {name}={value} must be a multiple of 16 below {(_FIELD_14 + 1) * 16}")
    return value >> 4


def encode_smem_descriptor(start_address: int = 0, leading_byte_offset: int = 16,
                           stride_byte_offset: int = 1024, base_offset: int = 0,
                           swizzle: str = "128B") -> int:
    """The 64-bit wgmma matrix descriptor for the given fields (byte values)."""
    if swizzle not in SWIZZLE_MODES:
        raise PorterError(f"wgmma smem descriptor: swizzle={swizzle!r}; use one of {', '.join(SWIZZLE_MODES)}")
    if not 0 <= base_offset <= 7:
        raise PorterError(f"wgmma smem descriptor: base_offset={base_offset} must be in 0..7 (3 bits)")
    return (_field16("start_address", start_address)
            | _field16("leading_byte_offset", leading_byte_offset) << 16
            | _field16("stride_byte_offset", stride_byte_offset) << 32
            | base_offset << 49
            | SWIZZLE_MODES[swizzle] << 62)


def decode_smem_descriptor(desc: int) -> SmemDescriptor:
    """Inverse of encode_smem_descriptor (reserved bits must be zero)."""
    reserved = desc & ~((_FIELD_14) | _FIELD_14 << 16 | _FIELD_14 << 32 | 0x7 << 49 | 0x3 << 62)
    if desc < 0 or desc >> 64 or reserved:
        raise PorterError(f"wgmma smem descriptor 0x{desc:x}: reserved bits set")
    modes = {v: k for k, v in SWIZZLE_MODES.items()}
    return SmemDescriptor(start_address=(desc & _FIELD_14) << 4,
                          leading_byte_offset=((desc >> 16) & _FIELD_14) << 4,
                          stride_byte_offset=((desc >> 32) & _FIELD_14) << 4,
                          base_offset=(desc >> 49) & 0x7,
                          swizzle=modes[(desc >> 62) & 0x3])


def k_major_swizzled_template(row_bytes: int, swizzle: str = "128B") -> int:
    """Descriptor template (start address 0) for a K-major tile whose rows are
    ``row_bytes`` long and stored in ``swizzle`` mode, 8-row groups contiguous.

    Only the layout porter's TMA boxes produce is accepted: one swizzle row per
    tile row (row_bytes == the swizzle width), so SBO = 8 rows x row_bytes.
    """
    if swizzle == "none" or row_bytes != SWIZZLE_BYTES[swizzle]:
        raise PorterError(
            f"wgmma smem descriptor: K-major tile rows of {row_bytes} B need a swizzle mode of the "
            f"same width (128B for 128-byte rows); got {swizzle!r}")
    return encode_smem_descriptor(0, 16, 8 * row_bytes, 0, swizzle)


def k_step_increment(k_elements: int, element_bytes: int) -> int:
    """What to add to the descriptor (start-address field) to advance ``k_elements`` along K."""
    return _field16("k step", k_elements * element_bytes)


def c_literal(value: int) -> str:
    """A 64-bit unsigned CUDA literal, e.g. 0x4000004000010000ull."""
    return f"0x{value:016x}ull"


# ---- address model (what TMA writes and wgmma reads), for CPU checks of the layout ----

def swizzle_128b(address: int) -> int:
    """The 128-byte swizzle on a shared-memory byte address: the 16-byte piece index
    (bits 4-6) is XORed with the row-in-atom index (bits 7-9). TMA's SWIZZLE_128B
    writes with it and the wgmma 128B mode reads with it (PTX ISA "Shared Memory
    Matrix Layout", swizzling modes), so both agree whenever the 1024-byte atom is
    aligned to 1024 in shared memory (base offset 0)."""
    return address ^ (((address >> 7) & 0x7) << 4)


def tma_box_address(base: int, row: int, byte_in_row: int, row_bytes: int = 128) -> int:
    """Where a 2D TMA load with SWIZZLE_128B puts byte ``byte_in_row`` of box row ``row``
    (box inner extent ``row_bytes`` = 128 bytes) for a destination at ``base``."""
    if base % 1024 or row_bytes != 128 or not 0 <= byte_in_row < row_bytes:
        raise PorterError("TMA 128B-swizzle model: base must be 1024-aligned and rows 128 bytes")
    return swizzle_128b(base + row * row_bytes + byte_in_row)


def operand_byte_address(desc: int, row: int, k_byte: int) -> int:
    """The shared-memory byte wgmma reads for (row, k_byte) of a K-major operand in
    the 128B swizzle mode described by ``desc``: rows of one 8-row core-matrix
    group are 128 bytes apart, groups are SBO apart, K runs along the row from the
    start address, and the swizzle applies to the resulting address."""
    d = decode_smem_descriptor(desc)
    if d.swizzle != "128B" or d.base_offset != 0:
        raise PorterError("wgmma operand model: only the K-major 128B swizzle with base offset 0")
    logical = d.start_address + (row // 8) * d.stride_byte_offset + (row % 8) * 128 + k_byte
    return swizzle_128b(logical)
