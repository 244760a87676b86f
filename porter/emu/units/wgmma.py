"""wgmma operands and results: the smem matrix descriptor, the canonical shared-memory
layouts, the register fragments and the multiply-accumulate itself.

Written from the PTX ISA text (9.7.15.5.1 "Register Fragments and Shared Memory Matrix
Layouts" and its sub-sections), never from porter's generator encoders.

API
---
``decode_desc(desc, where="", strict=True) -> MatrixDesc``
    The 64-bit matrix descriptor (9.7.15.5.1.2.2 "Matrix Descriptor Format"): bits 13-0
    start address, 29-16 leading dimension byte offset (LBO), 45-32 stride dimension byte
    offset (SBO), each stored as ``(x & 0x3FFFF) >> 4`` and returned here in bytes; 51-49
    the matrix base offset; 63-62 the swizzle mode (0 none, 1 128B, 2 64B, 3 32B).
    ``strict`` rejects set bits outside those fields (the ISA defines none there).
``read_matrix(smem, desc, rows, k, elem_bits, mn_major, where="") -> uint8 (rows, k*elem_bits//8)``
    Row r is row r of the operand (the M index for A, the N index for B) with its K
    elements in K order, as the raw little-endian bytes of each element.
``operand_bytes(desc, rows, k, elem_bits, mn_major, where="") -> int64 (n,)``
    The sorted shared::cta byte addresses that read touches.
``operand_layout(desc, rows, k, elem_bits, mn_major, where="", smem_size=None) -> (addresses, warnings)``
    The addresses read_matrix gathers, int64 (rows, k*elem_bits//8), and the warnings of a
    layout the ISA defines but states no rule about (elements reading the same bytes, a K
    slice crossing its swizzle row): the hardware reads what the fields name, so these are
    warnings for the caller to record, never errors.
``accumulator_layout(n) -> (rows, cols)``, each int64 (128, n//2)
    For warpgroup thread t and the j-th element of the D list {d0, d1, ...} of a
    m64nNk* wgmma, the D element (row, col) it holds.
``a_fragment_layout(k, elem_bits) -> (rows, cols)``, each int64 (128, 4, 32//elem_bits)
    For the register-A form: thread t's i-th 32-bit A register, element e (e = 0 in the
    low bits) -> the A element (row, col) of the 64 x k tile.
``decode_values(raw, fmt) -> float64 (rows, elems)``
    Raw operand bytes to values; fmt is "bf16", "f16", "tf32", "e4m3" or "e5m2".
``mma(a, b, d=None, scale_a=1, scale_b=1) -> float32 (M, N)``
    D = (scale_a*A) . (scale_b*B)^T (+ D).

The shared-memory layout, as this module reads 9.7.15.5.1.2.1 ("Leading/Stride Dimension
Byte Offset", "Canonical Layouts"): with T = 128 / element bits (elements per 16-byte
chunk) and W the swizzle width in bytes (32, 64, 128),

* K-major, no swizzle ("((8,m),(T,2k)):((1T,SBO),(1,LBO))"): core matrices of 8 rows x
  16 bytes, each row 16 contiguous bytes; the next core matrix along K is LBO bytes on,
  the next 8 rows SBO bytes on.
* K-major, swizzled ("((8,m),(T,2k)):((W/16*T,SBO),(1,T))"): 8 rows of W contiguous bytes
  (one swizzle atom), the next 8 rows SBO bytes on; LBO is "not used". Kernels keep a
  wgmma's K slice (always 32 bytes) inside one W-byte row, moving the start address per K
  step; the ISA states no rule that they must, so a slice that crosses its row is read
  where the addresses continue (swizzled by their own bits) with a warning.
* MN-major, no swizzle ("((T,1,m),(8,k)):((1,T,SBO),(1T,LBO))"): each 16-byte chunk
  holds T consecutive MN elements of one K index; the 8 K indices of a core matrix are
  16 bytes apart; the next T MN elements are SBO bytes on, the next 8 K indices LBO.
* MN-major, swizzled ("((T,W/16,m),(8,k)):((1,T,LBO),(W/16*T,SBO))"): W contiguous bytes
  hold W/eb consecutive MN elements of one K index; the 8 K indices are W bytes apart;
  the next W/eb MN elements are LBO bytes on, the next 8 K indices SBO bytes on.

The swizzle ("Swizzle<B,4,3>" on the byte offset, the same permutation as TMA's swizzle
modes in 5.5.7) is applied to the absolute shared-memory byte address: bits [4, 4+B) ^=
bits [7, 7+B), B = log2(W/16), less the descriptor's base offset (``swizzle_from``): the
ISA's base offset is (pattern start address >> 7) & 7, so the phase of a row is counted
from where its pattern starts; base offset 0 is the pattern on its 1024/512/256-byte
boundary, the absolute address bits (as TMA writes it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import ml_dtypes
import numpy as np

from porter.emu.errors import CheckFailed, EmuError
from porter.emu.units.products import abt

SWIZZLE_BY_CODE = {0: "none", 1: "128B", 2: "64B", 3: "32B"}
SWIZZLE_WIDTH = {"none": 0, "128B": 128, "64B": 64, "32B": 32}
# Bits the ISA's descriptor table assigns: 13-0, 29-16, 45-32, 51-49, 63-62.
_DEFINED_BITS = (0x3FFF | (0x3FFF << 16) | (0x3FFF << 32) | (0x7 << 49) | (0x3 << 62))

FORMATS = {"bf16": 16, "f16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8}


def _at(where: str) -> str:
    return f"{where}: " if where else ""


@dataclass(frozen=True)
class MatrixDesc:
    start_address: int        # bytes, shared::cta
    leading_byte_offset: int  # bytes (LBO)
    stride_byte_offset: int   # bytes (SBO)
    base_offset: int          # 0..7
    swizzle: str              # "none" | "128B" | "64B" | "32B"

    @property
    def swizzle_width(self) -> int:
        return SWIZZLE_WIDTH[self.swizzle]


def decode_desc(desc: int, where: str = "", strict: bool = True) -> MatrixDesc:
    """Split a 64-bit wgmma matrix descriptor into its fields (offsets in bytes)."""
    desc = int(desc)
    if not 0 <= desc < 1 << 64:
        raise EmuError(f"{_at(where)}matrix descriptor {desc:#x} is not a 64-bit value")
    stray = desc & ~_DEFINED_BITS
    if strict and stray:
        raise EmuError(f"{_at(where)}matrix descriptor {desc:#018x} sets bits {stray:#018x} that the "
                       f"wgmma descriptor format does not define (a tcgen05 descriptor?)")
    return MatrixDesc(start_address=(desc & 0x3FFF) << 4,
                      leading_byte_offset=((desc >> 16) & 0x3FFF) << 4,
                      stride_byte_offset=((desc >> 32) & 0x3FFF) << 4,
                      base_offset=(desc >> 49) & 0x7,
                      swizzle=SWIZZLE_BY_CODE[(desc >> 62) & 0x3])


def _logical_addresses(md: MatrixDesc, rows: int, k: int, elem_bits: int, mn_major: bool,
                       where: str, notes: list | None = None) -> np.ndarray:
    """Unswizzled byte addresses, shape (rows, k*elem_bits//8): [r, b] holds byte b of row r.
    Layouts the ISA defines but no kernel means (a K slice crossing its swizzle row) add a
    line to ``notes``: the ISA states no rule against them, so they are warnings, not errors."""
    if elem_bits not in (8, 16, 32):
        raise EmuError(f"{_at(where)}wgmma operands are 8-, 16- or 32-bit elements, not {elem_bits}-bit")
    eb = elem_bits // 8
    kbytes = k * eb
    if rows <= 0 or rows % 8:
        raise EmuError(f"{_at(where)}operand rows {rows} must be a positive multiple of 8 (core matrix height)")
    if k <= 0 or kbytes % 16:
        raise EmuError(f"{_at(where)}K extent {k} x {elem_bits} bit = {kbytes} B must be a positive multiple of 16 B")
    start, lbo, sbo, width = md.start_address, md.leading_byte_offset, md.stride_byte_offset, md.swizzle_width
    r = np.arange(rows, dtype=np.int64)[:, None]
    if not mn_major:
        kb = np.arange(kbytes, dtype=np.int64)[None, :]
        if width == 0:
            return start + (r % 8) * 16 + (r // 8) * sbo + (kb % 16) + (kb // 16) * lbo
        if start % width + kbytes > width and notes is not None:
            notes.append(("k-slice", f"K-major {md.swizzle} operand, {kbytes} B K slice at start {start:#x} "
                                     f"(offset {start % width} in its {width} B row)"))
        return start + (r % 8) * width + (r // 8) * sbo + kb
    if elem_bits != 16:
        raise EmuError(f"{_at(where)}MN-major (transposed) operands exist only for .f16/.bf16, "
                       f"not {elem_bits}-bit elements")
    t = 16 // eb
    kk = np.arange(k, dtype=np.int64)[None, :, None]
    byte = np.arange(eb, dtype=np.int64)[None, None, :]
    mn = r[:, :, None]
    if width == 0:
        addr = start + (mn % t) * eb + (mn // t) * sbo + (kk % 8) * 16 + (kk // 8) * lbo
    else:
        per_row = width // eb                         # MN elements in one W-byte row
        if start % width + min(rows, per_row) * eb > width and notes is not None:
            notes.append(("mn-start", f"MN-major {md.swizzle} operand at start {start:#x} (offset {start % width} "
                                      f"in its {width} B row)"))
        addr = start + (mn % per_row) * eb + (mn // per_row) * lbo + (kk % 8) * width + (kk // 8) * sbo
    return (addr + byte).reshape(rows, k * eb)


def swizzle_from(addr: np.ndarray, width: int, base_offset: int) -> np.ndarray:
    """Swizzle<B,4,3> with the pattern's phase taken from the address bits and the descriptor's
    base offset: bits [4, 4+B) ^= ((addr >> 7) - base_offset) mod 2^B. The ISA sets base offset =
    (pattern start address >> 7) & 7, so row r after the pattern's start has phase r mod 2^B
    wherever the pattern starts; with base offset 0 the phase is the absolute address bits
    [7, 7+B), the pattern on its natural 1024/512/256-byte boundary (as TMA writes it)."""
    mask = width // 16 - 1
    return addr ^ ((((addr >> 7) - base_offset) & mask) << 4)


def operand_layout(desc: int, rows: int, k: int, elem_bits: int, mn_major: bool, where: str = "",
                   smem_size: int | None = None) -> tuple[np.ndarray, tuple[tuple[str, str], ...]]:
    """The operand's physical shared::cta byte addresses, int64 (rows, k*elem_bits//8), and the
    warnings its layout earns (rules the PTX ISA does not state), each (kind, what): "alias"
    (operand elements that read the same bytes), "k-slice" (a K slice crossing its swizzle
    row), "mn-start" (an MN-major swizzled operand starting inside its row). Bytes
    outside shared memory are a ``CheckFailed`` (5.1.7: operands lie in the CTA's window)."""
    md = decode_desc(desc, where)
    notes: list[tuple[str, str]] = []
    addr = _logical_addresses(md, rows, k, elem_bits, mn_major, where, notes)
    if md.swizzle_width:
        addr = swizzle_from(addr, md.swizzle_width, md.base_offset)
    lo, hi = int(addr.min()), int(addr.max())
    if lo < 0 or (smem_size is not None and hi >= smem_size):
        raise CheckFailed(f"{_at(where)}matrix descriptor {desc:#x} reads shared bytes {lo:#x}..{hi:#x}, outside "
                       f"the CTA's {smem_size} B of shared memory")
    flat = addr.reshape(-1)
    if np.count_nonzero(np.bincount(flat - lo) > 1):       # (a count per byte: cheaper than np.unique)
        # 9.7.15.5.1.2 defines the layout by LBO and SBO alone and states no rule that they
        # keep the elements apart: the hardware reads what the offsets name (wrong numbers)
        notes.append(("alias", f"matrix descriptor {desc:#x} (LBO {md.leading_byte_offset} B, SBO "
                               f"{md.stride_byte_offset} B, {md.swizzle})"))
    return addr, tuple(notes)


def _physical_addresses(desc: int, rows: int, k: int, elem_bits: int, mn_major: bool, where: str,
                        smem_size: int | None) -> np.ndarray:
    return operand_layout(desc, rows, k, elem_bits, mn_major, where, smem_size)[0]


def read_matrix(smem: np.ndarray, desc: int, rows: int, k: int, elem_bits: int, mn_major: bool,
                where: str = "") -> np.ndarray:
    """The operand's raw bytes: uint8 (rows, k*elem_bits//8), row r = operand row r in K order."""
    if smem.dtype != np.uint8 or smem.ndim != 1:
        raise EmuError(f"{_at(where)}shared memory must be a 1-D uint8 array, got {smem.dtype} {smem.shape}")
    addr = _physical_addresses(desc, rows, k, elem_bits, mn_major, where, smem.size)
    return smem[addr]


def operand_bytes(desc: int, rows: int, k: int, elem_bits: int, mn_major: bool, where: str = "") -> np.ndarray:
    """Sorted int64 shared::cta addresses the operand read covers (for in-flight marking)."""
    return np.unique(_physical_addresses(desc, rows, k, elem_bits, mn_major, where, None))


def _split_thread(t: np.ndarray):
    warp, lane = t // 32, t % 32
    return warp, lane // 4, lane % 4          # warp, groupID, threadID_in_group


def accumulator_layout(n: int) -> tuple[np.ndarray, np.ndarray]:
    """D element (row, col) of thread t's j-th accumulator, for m64nNk* (f32 D; an f16 D
    packs the same element order two to a register). Each warp owns 16 rows; within it
    d[4i+0..1] are row 16*warp + lane/4, cols 8i + 2*(lane%4) + {0,1}, and d[4i+2..3] the
    same cols 8 rows below (ISA figures "WGMMA .m64nNk* register fragment layout for
    accumulator matrix D")."""
    if not (8 <= n <= 256 and n % 8 == 0):
        raise EmuError(f"wgmma N = {n} must be a multiple of 8 in 8..256")
    t = np.arange(128, dtype=np.int64)[:, None]
    j = np.arange(n // 2, dtype=np.int64)[None, :]
    warp, g, q = _split_thread(t)
    rows = 16 * warp + g + 8 * ((j % 4) // 2)
    cols = 8 * (j // 4) + 2 * q + (j % 2)
    return np.broadcast_to(rows, (128, n // 2)).copy(), np.broadcast_to(cols, (128, n // 2)).copy()


def a_fragment_layout(k: int, elem_bits: int) -> tuple[np.ndarray, np.ndarray]:
    """A element (row, col) of thread t's register i, element e, for the register-A form
    (ISA figures "WGMMA .m64nNk16/.m64nNk8/.m64nNk32 register fragment layout for matrix
    A"): each warp owns rows 16*warp..+15; register 0 is row lane/4, register 1 the row 8
    below, registers 2 and 3 the same rows k/2 columns on; within a register the elements
    run along K from column (lane%4) * (32/elem_bits)."""
    per_reg = {16: 2, 8: 4, 32: 1}.get(elem_bits)
    if per_reg is None or k * elem_bits != 256:
        raise EmuError(f"wgmma register A fragment: K = {k} with {elem_bits}-bit elements is not a wgmma shape "
                       f"(k16 for 16-bit, k32 for 8-bit, k8 for tf32)")
    t = np.arange(128, dtype=np.int64)[:, None, None]
    i = np.arange(4, dtype=np.int64)[None, :, None]
    e = np.arange(per_reg, dtype=np.int64)[None, None, :]
    warp, g, q = _split_thread(t)
    rows = 16 * warp + g + 8 * (i % 2)
    cols = (i // 2) * (k // 2) + q * per_reg + e
    shape = (128, 4, per_reg)
    return np.broadcast_to(rows, shape).copy(), np.broadcast_to(cols, shape).copy()


def decode_values(raw: np.ndarray, fmt: str) -> np.ndarray:
    """Raw little-endian operand bytes (rows, nbytes) -> float64 (rows, elements).

    tf32 is read from a 32-bit container with its low 13 mantissa bits dropped (the
    format keeps 10 explicit mantissa bits)."""
    bits = FORMATS.get(fmt)
    if bits is None:
        raise EmuError(f"operand format {fmt!r} unknown; use one of {', '.join(FORMATS)}")
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    if raw.ndim != 2 or raw.shape[1] % (bits // 8):
        raise EmuError(f"{fmt} operand bytes of shape {raw.shape} do not hold whole {bits}-bit elements")
    if bits == 8:                        # 8-bit codes: one lookup in the table of their values (faster
        return _code_values(fmt)[raw]    # than the cast; for 16-bit operands the cast is faster)
    return _convert(raw, fmt)


@functools.lru_cache(maxsize=8)
def _code_values(fmt: str) -> np.ndarray:
    """float64 value of every code of an 8- (or 16-) bit ``fmt``, made by the conversion itself."""
    n = 1 << FORMATS[fmt]
    codes = np.arange(n, dtype=np.uint32).astype(np.uint8 if n == 256 else "<u2")
    with np.errstate(invalid="ignore"):            # NaN codes are values too
        out = _convert(codes.view(np.uint8).reshape(1, -1), fmt).reshape(-1)
    out.flags.writeable = False
    return out


def _convert(raw: np.ndarray, fmt: str) -> np.ndarray:
    if fmt == "bf16":
        vals = raw.view("<u2").view(ml_dtypes.bfloat16)
    elif fmt == "f16":
        vals = raw.view("<f2")
    elif fmt == "tf32":
        vals = (raw.view("<u4") & np.uint32(0xFFFFE000)).view("<f4")
    elif fmt == "e4m3":
        vals = raw.view(ml_dtypes.float8_e4m3fn)
    else:
        vals = raw.view(ml_dtypes.float8_e5m2)
    return vals.astype(np.float64)


def mma(a: np.ndarray, b: np.ndarray, d: np.ndarray | None = None, scale_a: int = 1,
        scale_b: int = 1) -> np.ndarray:
    """D = (scale_a*A) . (scale_b*B)^T (+ D) for A (M, K), B (N, K), D (M, N).

    The ISA does not specify the order or the intermediate precision of the tensor core's
    sums; this emulation's choice is exact float64 products summed in float64 and one
    rounding to float32 at the end (so results may differ from hardware in the last bits)."""
    if scale_a not in (1, -1) or scale_b not in (1, -1):
        raise EmuError(f"wgmma imm-scale-a/b must be 1 or -1, got {scale_a}, {scale_b}")
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.ndim != 2 or b.ndim != 2 or a.shape[1] != b.shape[1]:
        raise EmuError(f"wgmma operands A {a.shape} and B {b.shape} do not share a K dimension")
    # BLAS in blocks that stay on one thread (units/products.py; the same as the tcgen05 unit)
    acc = abt(scale_a * a, scale_b * b)
    if d is not None:
        d = np.asarray(d)
        if d.shape != acc.shape:
            raise EmuError(f"wgmma accumulator D {d.shape} does not match A.B^T {acc.shape}")
        acc = acc + d.astype(np.float64)
    return acc.astype(np.float32)
