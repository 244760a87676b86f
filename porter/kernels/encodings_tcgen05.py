"""Bit encodings of the tcgen05 (Blackwell tensor core) descriptors, computed in Python.

Two encodings reach the generated kernels as literals:

* the 32-bit **instruction descriptor** (``idesc``) of ``tcgen05.mma`` - PTX ISA 9.7.16.4.2
  "Instruction descriptor", Table 42 (kind::tf32 / f16 / f8f6f4 / i8), Table 43
  (kind::mxf8f6f4) and Table 44 (kind::mxf4 / mxf4nvf4);
* the 64-bit **shared-memory descriptor** of an MMA operand or a ``tcgen05.cp`` source -
  PTX ISA 9.7.16.4.1 "Shared memory descriptor", Table 40, with the canonical layouts of
  9.7.16.3.3 (K-major, 128-byte swizzle: SBO = 8 rows x 128 B, LBO unused and "assumed 1").

The kernel only adds the run-time start address (bits 0-13, ``addr >> 4``) to the
shared-memory template; everything else is fixed here and unit-tested field by field.
Cross-checked against CUTLASS ``include/cute/arch/mma_sm100_desc.hpp`` (facts only).
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.errors import PorterError

# ---- instruction descriptor -------------------------------------------------------------

# D (accumulator) type, bits 4-5 (Table 42 "dtype").
DTYPE = {"f16": 0, "f32": 1, "s32": 2}

# A/B type codes, bits 7-9 / 10-12, per kind (Tables 42-44).
AB_TYPE = {
    "f16": {"f16": 0, "bf16": 1},
    "tf32": {"tf32": 2},
    "f8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    "i8": {"u8": 0, "s8": 1},
    "mxf8f6f4": {"e4m3": 0, "e5m2": 1, "e2m3": 3, "e3m2": 4, "e2m1": 5},
    # Table 44: the fp4 kinds only know E2M1, coded 1 (btype is 2 bits wide there).
    "mxf4": {"e2m1": 1},
    "mxf4nvf4": {"e2m1": 1},
}

# Scale matrix type, bit 23 of the block-scaled kinds (Tables 43/44).
SCALE_TYPE = {"ue4m3": 0, "ue8m0": 1}

# Which scale formats each block-scaled kind accepts (Table 57, 9.7.16.10.7.1).
KIND_SCALE_FORMATS = {"mxf8f6f4": ("ue8m0",), "mxf4": ("ue8m0",), "mxf4nvf4": ("ue8m0", "ue4m3")}

BLOCK_SCALED_KINDS = ("mxf8f6f4", "mxf4", "mxf4nvf4")
PLAIN_KINDS = ("f16", "tf32", "f8f6f4", "i8")

# Bit positions shared by all kinds (Tables 42-44).
SPARSE_BIT = 2
SATURATE_BIT = 3
A_TYPE_SHIFT = 7
B_TYPE_SHIFT = 10
NEGATE_A_BIT = 13
NEGATE_B_BIT = 14
TRANSPOSE_A_BIT = 15   # 0 = K-major
TRANSPOSE_B_BIT = 16   # 0 = K-major
N_SHIFT = 17           # N >> 3, 6 bits
# Plain kinds: M >> 4 in bits 24-28 (Table 42). Block-scaled kinds: M >> 7 in bits 27-28
# (Tables 43/44) - the same bits for M = 128 / 256, written the way each table says.
M_SHIFT_PLAIN = 24
M_SHIFT_SCALED = 27
SCALE_TYPE_BIT = 23
SFB_ID_SHIFT = 4       # bits 4-5, block-scaled kinds
SFA_ID_SHIFT = 29      # bits 29-30, block-scaled kinds
K96_BIT = 31           # Table 44: dense K = 96 variant of the fp4 kinds
MAX_SHIFT_SHIFT = 30   # Table 42: .ws B-reuse max shift


@dataclass(frozen=True)
class InstrDesc:
    """What a tcgen05.mma instruction descriptor says, before encoding."""

    kind: str
    a_type: str
    b_type: str
    m: int
    n: int
    d_type: str = "f32"
    a_major_mn: bool = False      # False = K-major (both operands K-major in porter's GEMM)
    b_major_mn: bool = False
    negate_a: bool = False
    negate_b: bool = False
    scale_type: str | None = None  # block-scaled kinds: "ue8m0" or "ue4m3"
    sfa_id: int = 0                # block-scaled: byte (1X) or half-word (2X) of the TMEM word
    sfb_id: int = 0


def _fail(what: str) -> PorterError:
    return PorterError(f"tcgen05 instruction descriptor: {what}")


def encode_instr_desc(d: InstrDesc) -> int:
    """The 32-bit idesc for ``d`` (PTX ISA 9.7.16.4.2, Tables 42-44)."""
    if d.kind not in AB_TYPE:
        raise _fail(f"unknown kind {d.kind!r}; known: {', '.join(AB_TYPE)}")
    types = AB_TYPE[d.kind]
    for role, t in (("A", d.a_type), ("B", d.b_type)):
        if t not in types:
            raise _fail(f"kind::{d.kind} has no {role} type {t!r}; allowed: {', '.join(types)}")
    if d.n % 8 or not 8 <= d.n <= 256:
        raise _fail(f"N = {d.n} is not a multiple of 8 in 8..256")
    word = (types[d.a_type] << A_TYPE_SHIFT) | (types[d.b_type] << B_TYPE_SHIFT)
    word |= (d.n >> 3) << N_SHIFT
    word |= int(d.negate_a) << NEGATE_A_BIT | int(d.negate_b) << NEGATE_B_BIT
    word |= int(d.a_major_mn) << TRANSPOSE_A_BIT | int(d.b_major_mn) << TRANSPOSE_B_BIT
    if d.kind in BLOCK_SCALED_KINDS:
        if d.m not in (128, 256):
            raise _fail(f"block-scaled kind::{d.kind} needs M = 128 or 256, got {d.m}")
        if d.scale_type not in KIND_SCALE_FORMATS[d.kind]:
            raise _fail(f"kind::{d.kind} takes scale type {' or '.join(KIND_SCALE_FORMATS[d.kind])}, "
                        f"got {d.scale_type!r}")
        if d.kind != "mxf8f6f4" and (d.a_major_mn or d.b_major_mn):
            raise _fail(f"kind::{d.kind} operands must be K-major (Table 44: transpose = 0)")
        for name, ident in (("SFA", d.sfa_id), ("SFB", d.sfb_id)):
            if not 0 <= ident <= 3:
                raise _fail(f"{name} id {ident} outside 0..3")
        word |= SCALE_TYPE[d.scale_type] << SCALE_TYPE_BIT
        word |= (d.m >> 7) << M_SHIFT_SCALED
        word |= d.sfa_id << SFA_ID_SHIFT | d.sfb_id << SFB_ID_SHIFT
    else:
        if d.m not in (64, 128, 256):
            raise _fail(f"M = {d.m} is not 64, 128 or 256")
        if d.d_type not in DTYPE:
            raise _fail(f"unknown D type {d.d_type!r}")
        if d.scale_type is not None:
            raise _fail(f"kind::{d.kind} takes no scale type")
        word |= DTYPE[d.d_type] << 4
        word |= (d.m >> 4) << M_SHIFT_PLAIN
    return word


def decode_instr_desc(word: int, kind: str) -> dict:
    """Field values of an idesc (for tests and ``porter kernel show``)."""
    fields = {
        "sparse": (word >> SPARSE_BIT) & 1,
        "a_type": (word >> A_TYPE_SHIFT) & 7,
        "b_type": (word >> B_TYPE_SHIFT) & (3 if kind in ("mxf4", "mxf4nvf4") else 7),
        "negate_a": (word >> NEGATE_A_BIT) & 1,
        "negate_b": (word >> NEGATE_B_BIT) & 1,
        "a_major_mn": (word >> TRANSPOSE_A_BIT) & 1,
        "b_major_mn": (word >> TRANSPOSE_B_BIT) & 1,
        "n": ((word >> N_SHIFT) & 0x3F) << 3,
    }
    if kind in BLOCK_SCALED_KINDS:
        fields.update(m=((word >> M_SHIFT_SCALED) & 3) << 7, scale_type=(word >> SCALE_TYPE_BIT) & 1,
                      sfa_id=(word >> SFA_ID_SHIFT) & 3, sfb_id=(word >> SFB_ID_SHIFT) & 3,
                      k96=(word >> K96_BIT) & 1)
    else:
        fields.update(m=((word >> M_SHIFT_PLAIN) & 0x1F) << 4, d_type=(word >> 4) & 3,
                      saturate=(word >> SATURATE_BIT) & 1, max_shift=(word >> MAX_SHIFT_SHIFT) & 3)
    return fields


# ---- shared-memory descriptor -------------------------------------------------------------

# Swizzle mode, bits 61-63 (Table 40). NOT Hopper's 2-bit code at 62-63.
SWIZZLE = {"none": 0, "128b_base32b": 1, "128b": 2, "64b": 4, "32b": 6}
# Bytes after which each swizzle pattern repeats (Table 41): operands must start there.
SWIZZLE_ATOM_BYTES = {"none": 16, "128b": 1024, "64b": 512, "32b": 256}
VERSION_SHIFT = 46     # bits 46-48: fixed constant 0b001
BASE_OFFSET_SHIFT = 49
LBO_MODE_BIT = 52
SWIZZLE_SHIFT = 61


def _encode14(value: int, what: str) -> int:
    """matrix-descriptor-encode(x) = (x & 0x3FFFF) >> 4 (Table 40); x must be 16-byte aligned."""
    if value % 16 or not 0 <= value < (1 << 18):
        raise PorterError(f"tcgen05 shared-memory descriptor: {what} = {value} must be a "
                          "16-byte multiple below 256 KiB")
    return (value & 0x3FFFF) >> 4


def encode_smem_desc(start: int = 0, lbo: int = 16, sbo: int = 1024, swizzle: str = "128b",
                     base_offset: int = 0, lbo_absolute: bool = False) -> int:
    """64-bit tcgen05 shared-memory descriptor (PTX ISA 9.7.16.4.1, Table 40).

    ``start``, ``lbo`` and ``sbo`` are byte values; with ``start = 0`` the result is the
    template the kernel ORs the run-time ``(smem_addr >> 4)`` into (bits 0-13).
    """
    if swizzle not in SWIZZLE:
        raise PorterError(f"tcgen05 shared-memory descriptor: unknown swizzle {swizzle!r}; "
                          f"known: {', '.join(SWIZZLE)}")
    if not 0 <= base_offset <= 7:
        raise PorterError(f"tcgen05 shared-memory descriptor: base offset {base_offset} outside 0..7")
    return (_encode14(start, "start address")
            | _encode14(lbo, "leading byte offset") << 16
            | _encode14(sbo, "stride byte offset") << 32
            | 1 << VERSION_SHIFT
            | base_offset << BASE_OFFSET_SHIFT
            | int(lbo_absolute) << LBO_MODE_BIT
            | SWIZZLE[swizzle] << SWIZZLE_SHIFT)


def decode_smem_desc(desc: int) -> dict:
    return {
        "start": (desc & 0x3FFF) << 4,
        "lbo": ((desc >> 16) & 0x3FFF) << 4,
        "sbo": ((desc >> 32) & 0x3FFF) << 4,
        "version": (desc >> VERSION_SHIFT) & 7,
        "base_offset": (desc >> BASE_OFFSET_SHIFT) & 7,
        "lbo_absolute": (desc >> LBO_MODE_BIT) & 1,
        "fixed_53_60": (desc >> 53) & 0xFF,
        "swizzle": (desc >> SWIZZLE_SHIFT) & 7,
    }


def kmajor_sw128_operand_desc() -> int:
    """Template for a K-major operand tile stored as rows of 128 bytes with 128-byte swizzle
    (what a TMA box of ``rows x 128 B`` with CU_TENSOR_MAP_SWIZZLE_128B writes):
    8-row core-matrix groups are 1024 B apart (SBO); LBO is unused for swizzled K-major
    layouts and encoded as 1 (PTX ISA 9.7.16.3.3 "Canonical Layouts": "1 (assumed)").
    Successive K slices of one MMA (32 bytes each for every kind porter uses) are reached
    by adding 32 B to the start address inside the 128-byte swizzle row."""
    return encode_smem_desc(lbo=16, sbo=1024, swizzle="128b")


def scale_factor_copy_desc() -> int:
    """Template for the ``tcgen05.cp .32x128b.warpx4`` source: 32 rows x 16 bytes, no swizzle,
    rows contiguous, so 8-row core matrices are 128 B apart (SBO); one 16-byte column of core
    matrices, so LBO is never stepped (encoded 0)."""
    return encode_smem_desc(lbo=0, sbo=128, swizzle="none")


def tmem_address(lane: int, column: int) -> int:
    """Tensor Memory address: lane in bits 16-31, column in bits 0-15
    (PTX ISA 9.7.16.1.1 "Tensor Memory Addressing")."""
    if not 0 <= lane < 128 or not 0 <= column < 512:
        raise PorterError(f"TMEM address lane {lane} / column {column} outside 128 x 512")
    return lane << 16 | column
