"""TMA: porter's emulated tensor maps, the tiled ``cp.async.bulk.tensor`` load, the
shared-memory swizzle, and the rules of the non-tensor ``cp.async.bulk``.

Sources: PTX ISA 5.5 "Tensors" (5.5.3 tiled mode: 5.5.3.1 bounding box, 5.5.3.2
traversal stride, 5.5.3.3 out-of-boundary access; 5.5.7 swizzling modes; 5.5.8
tensor-map), 9.7.10.28.4.1 ``cp.async.bulk`` and 9.7.10.28.5.3 ``cp.async.bulk.tensor``;
the CUDA driver API's ``cuTensorMapEncodeTiled`` parameter rules.

The 128-byte map is porter's own emulated layout, not the driver's (which is
undocumented): the emulated host serialises the ``cuTensorMapEncodeTiled`` arguments
behind a magic tag and a CRC, and only this module reads them. A real driver map, or
any other 128 bytes a kernel passes where a map belongs, fails ``decode``.

API
---
``encode(params, address) -> bytes`` (128)
    ``params`` is duck-typed like ``porter.runtime.tensormap.TensorMapParams``: data_type
    (a CUtensorMapDataType name without prefix), dims (innermost first), strides (bytes,
    of dims[1:]), box, element_strides (() = all 1), swizzle ("NONE", "32B", "64B",
    "128B"), oob_fill ("NONE" or "NAN_REQUEST_ZERO_FMA"), l2_promotion (kept, unused).
    The driver's documented rules are checked here (EmuError naming the rule).
``decode(raw) -> TensorMap``
``load_tile(tmap, coords, read_global, dst_address, where="") -> uint8``
    The bytes as they land in shared memory from ``dst_address`` on (len = the box's
    bytes = the complete-tx count). Box elements are laid out innermost dimension first,
    box rows consecutive; element i of the box along dimension d (d >= 1) is tensor
    coordinate ``coords[d] + i * element_strides[d]`` and ceil(box[d] / element_strides[d])
    of them are loaded (dimension 0's traversal stride is ignored without interleave).
    Elements outside the tensor are 0, or a quiet NaN of the element type under the NaN
    fill mode. ``read_global(addr, n)`` is called only for in-tensor spans.
``swizzle(address, mode) -> int`` and ``swizzle_array(addresses, width) -> ndarray``
    The swizzle permutation on shared-memory byte addresses (5.5.7's tables): for width
    W = 32/64/128, 16-byte chunk bits [4, 4+B) ^= the 128-byte line bits [7, 7+B), B =
    log2(W/16): 128B [4:6]^[7:9], 64B [4:5]^[7:8], 32B [4]^[7].
``check_bulk(src, dst, size, where="")`` and ``bulk_copy(src, dst, size, read_global)``
    ``cp.async.bulk``: size a multiple of 16, both addresses 16-byte aligned.

Destination alignment: the ISA asks 16 bytes of a bounding box address; the CUDA
programming guide's TMA rules ask 128 bytes of the shared-memory destination, which is
checked. The swizzle is a function of the destination's shared-memory address bits
(5.5.7: bits [4, 4+B) ^= bits [7, 7+B)), so a destination that is not on the 1024/512/256-byte
pattern boundary gets the pattern shifted by its "base offset", as the hardware lays it out
(the descriptors of wgmma/tcgen05 carry that base offset for their readers).
``store_tile`` is the tensor store (shared -> global): the inverse permutation, and elements
outside the tensor are not written. A box whose inner row is narrower than the swizzle
width is Unsupported (the ISA does not say how such rows are packed).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import struct
import zlib
from dataclasses import dataclass
from itertools import product
from typing import Callable

import numpy as np

from porter.emu.errors import CheckFailed, EmuError, Unsupported

MAGIC = b"porter-emu-tmap\x01"          # 16 bytes
MAP_BYTES = 128
# CUtensorMapDataType names, in the driver enum's order, with element bytes.
DATA_TYPES = {"UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
              "FLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "BFLOAT16": 2, "FLOAT32_FTZ": 4,
              "TFLOAT32": 4, "TFLOAT32_FTZ": 4, "16U4_ALIGN8B": 1}
# CU_TENSOR_MAP_DATA_TYPE_16U4_ALIGN8B: 4-bit elements, sixteen packed in 8 bytes in global and
# (unlike 16U4_ALIGN16B, not simulated) in shared memory alike (CUTLASS's sm120 nvfp4 operands).
# Dims, box and coordinates count 4-bit elements; its "element bytes" above is that of the byte
# view each copy runs on (``_byte_view``: dim 0, box 0 and coordinate 0 halved).
PACKED_4BIT = "16U4_ALIGN8B"
_TYPE_CODES = {name: i for i, name in enumerate(DATA_TYPES)}
# Quiet NaN bit patterns used for the NaN fill mode ("a special NaN called OOB-NaN";
# the ISA does not give its bits).
_NAN_BITS = {"FLOAT16": (0x7E00, "<u2"), "BFLOAT16": (0x7FC0, "<u2"), "FLOAT32": (0x7FC00000, "<u4"),
             "FLOAT32_FTZ": (0x7FC00000, "<u4"), "TFLOAT32": (0x7FC00000, "<u4"),
             "TFLOAT32_FTZ": (0x7FC00000, "<u4"), "FLOAT64": (0x7FF8000000000000, "<u8")}
SWIZZLES = ("NONE", "32B", "64B", "128B", "128B_ATOM_32B")
SWIZZLE_WIDTH = {"NONE": 0, "32B": 32, "64B": 64, "128B": 128, "128B_ATOM_32B": 128}
# The unit the swizzle moves (its atomicity): 16-byte chunks, but 32-byte ones for
# CU_TENSOR_MAP_SWIZZLE_128B_ATOM_32B (tensormap.replace's .swizzle_atomicity 32B): the four
# 32-byte halves-of-lines of a 128-byte row XOR the row's bits 0-1, CuTe's Swizzle<2,5,2>,
# which CUTLASS's sm100 fp32 epilogues pair with this mode (cute/atom/copy_traits_sm90_tma_swizzle.hpp)
SWIZZLE_GRAIN = {"128B_ATOM_32B": 32}
# The start address of each swizzle pattern's repetition (5.5.7).
SWIZZLE_ATOM = {32: 256, 64: 512, 128: 1024}
OOB_FILLS = ("NONE", "NAN_REQUEST_ZERO_FMA")
L2_PROMOTIONS = ("NONE", "L2_64B", "L2_128B", "L2_256B")
MAX_RANK, MAX_BOX = 5, 256
SMEM_ALIGN = 128
BULK_ALIGN = 16

# Little-endian body after the magic: address, type, rank, swizzle, oob fill, l2
# promotion, 3 pad bytes, dims[5] u64, strides[4] u64, box[5] u16, element strides[5]
# u8, 5 pad bytes; then a CRC-32 of everything before it.
_BODY = struct.Struct("<Q5B3x5Q4Q5H5B5x")
assert len(MAGIC) + _BODY.size + 4 == MAP_BYTES


def _at(where: str) -> str:
    return f"{where}: " if where else ""


@dataclass(frozen=True)
class TensorMap:
    address: int
    data_type: str
    dims: tuple[int, ...]
    strides: tuple[int, ...]
    box: tuple[int, ...]
    element_strides: tuple[int, ...]
    swizzle: str
    oob_fill: str
    l2_promotion: str

    @property
    def rank(self) -> int:
        return len(self.dims)

    @property
    def element_bytes(self) -> int:
        return DATA_TYPES[self.data_type]

    @property
    def box_elements(self) -> tuple[int, ...]:
        """Elements loaded per dimension: box[0], then ceil(box[d] / element_strides[d])."""
        return (self.box[0],) + tuple(-(-b // e) for b, e in zip(self.box[1:], self.element_strides[1:]))

    @property
    def box_bytes(self) -> int:
        n = math.prod(self.box_elements) * self.element_bytes
        return n // 2 if self.data_type == PACKED_4BIT else n


def _validate(m: TensorMap, where: str) -> TensorMap:
    """The cuTensorMapEncodeTiled rules (driver API docs) porter's maps must meet."""
    w = _at(where)
    if m.data_type not in DATA_TYPES:
        raise EmuError(f"{w}tensor map data type {m.data_type!r} unknown; use one of {', '.join(DATA_TYPES)}")
    if not 1 <= m.rank <= MAX_RANK:
        raise EmuError(f"{w}tensor map rank {m.rank} must be 1..{MAX_RANK}")
    if len(m.strides) != m.rank - 1 or len(m.box) != m.rank or len(m.element_strides) != m.rank:
        raise EmuError(f"{w}tensor map of rank {m.rank} needs {m.rank - 1} strides and {m.rank} box sizes and "
                       f"element strides, got {len(m.strides)}, {len(m.box)}, {len(m.element_strides)}")
    if m.address % 16:
        raise EmuError(f"{w}tensor map global address {m.address:#x} is not 16-byte aligned")
    for i, d in enumerate(m.dims):
        if not 0 < d <= 1 << 32:
            raise EmuError(f"{w}tensor map dim {i} = {d} must be in 1..2^32")
    for i, s in enumerate(m.strides):
        if s % 16 or not 0 <= s < 1 << 40:     # the driver's rule; 0 is legal (a size-1 dim's stride: fast.cu's rank-5 maps)
            raise EmuError(f"{w}tensor map stride of dim {i + 1} = {s} B must be a multiple of 16 below 2^40")
    for i, b in enumerate(m.box):
        if not 0 < b <= MAX_BOX:
            raise EmuError(f"{w}tensor map box size {b} in dim {i} must be in 1..{MAX_BOX}")
    for i, e in enumerate(m.element_strides):
        if not 1 <= e <= 8:
            raise EmuError(f"{w}tensor map element stride {e} in dim {i} must be in 1..8")
    row = m.box[0] * m.element_bytes
    if m.data_type == PACKED_4BIT:
        if m.dims[0] % 16:
            raise EmuError(f"{w}tensor map dim 0 = {m.dims[0]} 4-bit elements: 16U4_ALIGN8B packs sixteen to 8 "
                           "bytes, so it must be a multiple of 16 (CUDA driver API cuTensorMapEncodeTiled)")
        row = m.box[0] // 2 if m.box[0] % 2 == 0 else 1
    if row % 16:
        raise EmuError(f"{w}tensor map inner box row is {row} B; the bounding box must be a multiple of 16 B")
    if m.swizzle not in SWIZZLES:
        raise EmuError(f"{w}tensor map swizzle {m.swizzle!r} unknown; use one of {', '.join(SWIZZLES)}")
    width = SWIZZLE_WIDTH[m.swizzle]
    if width and row > width:
        raise EmuError(f"{w}tensor map inner box row is {row} B, more than the {m.swizzle} swizzle span")
    if m.oob_fill not in OOB_FILLS:
        raise EmuError(f"{w}tensor map OOB fill {m.oob_fill!r} unknown; use one of {', '.join(OOB_FILLS)}")
    if m.oob_fill != "NONE" and m.data_type not in _NAN_BITS:
        raise EmuError(f"{w}tensor map NaN OOB fill needs a floating-point data type, not {m.data_type}")
    if m.l2_promotion not in L2_PROMOTIONS:
        raise EmuError(f"{w}tensor map L2 promotion {m.l2_promotion!r} unknown; use one of {', '.join(L2_PROMOTIONS)}")
    return m


def encode(params, address: int) -> bytes:
    """Serialise cuTensorMapEncodeTiled's parameters into porter's emulated 128-byte map."""
    name = getattr(params, "name", "")
    rank = len(params.dims)
    m = _validate(TensorMap(address=int(address), data_type=params.data_type,
                            dims=tuple(int(d) for d in params.dims),
                            strides=tuple(int(s) for s in params.strides),
                            box=tuple(int(b) for b in params.box),
                            element_strides=tuple(int(e) for e in (params.element_strides or (1,) * rank)),
                            swizzle=params.swizzle, oob_fill=getattr(params, "oob_fill", "NONE"),
                            l2_promotion=getattr(params, "l2_promotion", "NONE")),
                  f"tensor map {name}" if name else "")
    pad = MAX_RANK - rank
    body = _BODY.pack(m.address, _TYPE_CODES[m.data_type], rank, SWIZZLES.index(m.swizzle),
                      OOB_FILLS.index(m.oob_fill), L2_PROMOTIONS.index(m.l2_promotion),
                      *(m.dims + (0,) * pad), *(m.strides + (0,) * pad),
                      *(m.box + (0,) * pad), *(m.element_strides + (0,) * pad))
    head = MAGIC + body
    return head + struct.pack("<I", zlib.crc32(head))


def decode(raw: bytes, where: str = "") -> TensorMap:
    """The map ``encode`` wrote; EmuError for any other bytes (a driver map, a wrong param)."""
    raw = bytes(raw)
    w = _at(where)
    if len(raw) != MAP_BYTES:
        raise EmuError(f"{w}a tensor map is {MAP_BYTES} bytes, got {len(raw)}")
    if raw[:len(MAGIC)] != MAGIC:
        raise EmuError(f"{w}the 128 bytes at the tensor-map operand are not a map from porter's emulated host "
                       f"(a real driver CUtensorMap, or the wrong kernel parameter)")
    (crc,) = struct.unpack_from("<I", raw, MAP_BYTES - 4)
    if zlib.crc32(raw[:MAP_BYTES - 4]) != crc:
        raise EmuError(f"{w}tensor map bytes are corrupted (checksum mismatch): the map was overwritten")
    f = _BODY.unpack_from(raw, len(MAGIC))
    address, tcode, rank, scode, ocode, lcode = f[:6]
    dims, strides, box, estr = f[6:11], f[11:15], f[15:20], f[20:25]
    if rank == 0:       # only a map begun from 128 zero bytes on the device (ops.tensormap) has rank 0
        raise EmuError(f"{w}the 128 bytes at the tensor-map operand are not a map from porter's emulated host, and "
                       "as a map built on the device from zero bytes they never had tensormap.replace .rank "
                       "(rank 0) [PTX ISA 9.7.9.28 tensormap.replace]")
    try:
        m = TensorMap(address=address, data_type=list(DATA_TYPES)[tcode], dims=tuple(dims[:rank]),
                      strides=tuple(strides[:max(rank - 1, 0)]), box=tuple(box[:rank]),
                      element_strides=tuple(estr[:rank]), swizzle=SWIZZLES[scode], oob_fill=OOB_FILLS[ocode],
                      l2_promotion=L2_PROMOTIONS[lcode])
    except IndexError:
        raise EmuError(f"{w}tensor map holds an out-of-range enum code") from None
    return _validate(m, where)


def swizzle_array(addresses: np.ndarray, width: int, grain: int = 16) -> np.ndarray:
    """Vectorised ``swizzle`` for a width of 32, 64 or 128 bytes (0: identity), moving
    ``grain``-byte units (16, or 32 for the 128-byte swizzle with 32-byte atomicity)."""
    a = np.asarray(addresses, dtype=np.int64)
    if width == 0:
        return a
    if width not in SWIZZLE_ATOM:
        raise EmuError(f"swizzle width {width} B is not 32, 64 or 128")
    if grain not in (16, 32) or (grain == 32 and width != 128):
        raise EmuError(f"swizzle atomicity {grain} B with a {width} B span is not simulated")
    mask = width // grain - 1
    return a ^ (((a >> 7) & mask) << grain.bit_length() - 1)


def swizzle(address: int, mode: str) -> int:
    """The shared-memory byte address a linear address lands on under ``mode``."""
    key = mode.upper()
    if key not in SWIZZLE_WIDTH:
        raise EmuError(f"swizzle mode {mode!r} unknown; use one of {', '.join(SWIZZLES)}")
    return int(swizzle_array(np.int64(address), SWIZZLE_WIDTH[key], SWIZZLE_GRAIN.get(key, 16)))


def _byte_view(tmap: TensorMap, coords, where: str):
    """A 16U4_ALIGN8B map and its coordinates as the byte map they move (dim 0, box 0 and
    coordinate 0 halved); other maps as they are."""
    if tmap.data_type != PACKED_4BIT:
        return tmap, coords
    if int(coords[0]) % 2:
        raise Unsupported(f"{_at(where)}16U4_ALIGN8B tensor coordinate {coords[0]} is odd: only copies starting "
                          "on a byte are simulated")
    half = dataclasses.replace(tmap, data_type="UINT8", dims=(tmap.dims[0] // 2,) + tmap.dims[1:],
                               box=(tmap.box[0] // 2,) + tmap.box[1:])
    return half, (int(coords[0]) // 2,) + tuple(coords[1:])


def load_tile(tmap: TensorMap, coords: tuple[int, ...], read_global: Callable[[int, int], np.ndarray],
              dst_address: int, where: str = "", read_spans=None) -> np.ndarray:
    """The box at ``coords`` as it lands in shared memory at ``dst_address`` (uint8).

    ``read_spans(addresses, nbytes) -> uint8 (len(addresses), nbytes) | None``, if given, reads
    every in-tensor row span at once (one gather); None from it (a span it cannot vouch for)
    falls back to ``read_global`` row by row, whose error names the first bad row."""
    w = _at(where)
    if len(coords) != tmap.rank:
        raise EmuError(f"{w}cp.async.bulk.tensor gives {len(coords)} coordinates for a rank-{tmap.rank} map")
    tmap, coords = _byte_view(tmap, coords, where)
    for c in coords:
        if not -(1 << 31) <= int(c) < 1 << 31:
            raise EmuError(f"{w}tensor coordinate {c} does not fit in .s32")
    if dst_address % SMEM_ALIGN:
        raise CheckFailed(f"{w}cp.async.bulk.tensor destination {dst_address:#x} is not {SMEM_ALIGN}-byte aligned")
    width = SWIZZLE_WIDTH[tmap.swizzle]
    eb = tmap.element_bytes
    row_bytes = tmap.box[0] * eb
    if width:
        if row_bytes != width:
            raise Unsupported(f"{w}{tmap.swizzle} swizzle with a {row_bytes} B inner box row: only rows of exactly "
                              f"the swizzle width are simulated")
    size = tmap.box_bytes
    fill = _NAN_BITS[tmap.data_type] if tmap.oob_fill != "NONE" else None

    def blank():                                    # the box before any row lands: zeros, or the NaN fill
        data = np.zeros(size, dtype=np.uint8)
        if fill is not None:
            data.view(fill[1])[:] = fill[0]
        return data
    if _int64_safe(tmap, coords):
        row_at, gaddr, nbytes = _row_arrays(tmap, tuple(int(c) for c in coords))
        spans = read_spans(gaddr, nbytes) if read_spans is not None and row_at.size else None
        rows = () if spans is not None else zip(row_at.tolist(), gaddr.tolist(), [nbytes] * row_at.size)
        if spans is not None and nbytes == row_bytes and spans.size == size:
            data = spans.reshape(-1)                # every row whole and inside: the box as read
        else:
            data = blank()
            if spans is not None:
                data[row_at[:, None] + np.arange(nbytes)] = spans
    else:                                           # addresses beyond int64: Python integers
        data = blank()
        rows = _rows(tmap, coords)
    for at, ga, nb in rows:
        data[at:at + nb] = np.asarray(read_global(ga, nb), dtype=np.uint8).reshape(-1)
    if not width:
        return data
    grain = SWIZZLE_GRAIN.get(tmap.swizzle, 16)
    landed = _landed(dst_address, data.size, width, grain)
    if dst_address % 128 == 0 and data.size % 128 == 0:
        # the swizzle only permutes 16- (or 32-) byte units inside each 128-byte line, and twice is the
        # identity: on whole lines the landing map is its own inverse, so a gather places it (as
        # whole units where the map moves units intact: a gather of size / grain rows)
        units = _landed_units(dst_address, data.size, width, grain)
        if units is not None:
            return data.reshape(-1, grain)[units].reshape(-1)
        return data[landed]
    out = np.empty_like(data)
    out[landed] = data
    return out


def _int64_safe(tmap: TensorMap, coords) -> bool:
    """Every row address of the box (in-tensor or not) fits in int64 arithmetic."""
    reach = tmap.address + (abs(int(coords[0])) + tmap.box[0]) * tmap.element_bytes
    for d in range(1, tmap.rank):
        reach += (abs(int(coords[d])) + tmap.box[d] * tmap.element_strides[d]) * tmap.strides[d - 1]
    return reach < 1 << 62


@functools.lru_cache(maxsize=1024)
def _row_arrays(tmap: TensorMap, coords: tuple[int, ...]):
    """``_rows`` as arrays, in the same order: (box byte offsets, global addresses, bytes per row)
    of the box rows whose span is inside the tensor. Cached per (map, coordinates), read-only:
    the CTAs of a GEMM load the same boxes (an A tile per N-tile, a B tile per M-tile)."""
    at, addr, nbytes = _row_arrays_of(tmap, coords)
    at.flags.writeable = False
    addr.flags.writeable = False
    return at, addr, nbytes


def _row_arrays_of(tmap: TensorMap, coords: tuple[int, ...]):
    n = tmap.box_elements
    eb = tmap.element_bytes
    row_bytes = tmap.box[0] * eb
    x0 = coords[0]
    lo, hi = max(x0, 0), min(x0 + tmap.box[0], tmap.dims[0])
    nbytes = max(hi - lo, 0) * eb
    offset = np.full((1,) * (tmap.rank - 1), tmap.address + lo * eb, dtype=np.int64)
    inside = np.full(offset.shape, lo < hi)
    for d in range(1, tmap.rank):                   # axis rank-1-d: the slowest dimension first
        shape = [1] * (tmap.rank - 1)
        shape[tmap.rank - 1 - d] = n[d]
        c = coords[d] + np.arange(n[d], dtype=np.int64) * tmap.element_strides[d]
        offset = offset + (c * tmap.strides[d - 1]).reshape(shape)
        inside = inside & ((c >= 0) & (c < tmap.dims[d])).reshape(shape)
    inside = np.broadcast_to(inside, offset.shape).reshape(-1)
    linear = np.flatnonzero(inside)
    return linear * row_bytes + (lo - x0) * eb, offset.reshape(-1)[linear], nbytes


@functools.lru_cache(maxsize=1024)
def _landed(address: int, size: int, width: int, grain: int = 16) -> np.ndarray:
    """Per byte of a box in its linear order: its offset from ``address`` once swizzled. The
    swizzle is a function of the shared-memory address bits (5.5.7), so a start that is not on
    the pattern's boundary gets the pattern shifted, as the hardware lays it out."""
    out = swizzle_array(address + np.arange(size, dtype=np.int64), width, grain) - address
    out.flags.writeable = False             # cached: one per (destination, size, width)
    return out


@functools.lru_cache(maxsize=1024)
def _landed_units(address: int, size: int, width: int, grain: int):
    """``_landed`` as a map of whole ``grain``-byte units (unit j of the result is unit
    units[j] of the box), or None where it does not move whole units intact; checked
    against the byte map itself."""
    landed = _landed(address, size, width, grain)
    if size % grain:
        return None
    units = landed[::grain] // grain
    if not np.array_equal(landed, (units[:, None] * grain + np.arange(grain)).reshape(-1)):
        return None
    units.flags.writeable = False
    return units


def _rows(tmap: TensorMap, coords: tuple[int, ...]):
    """(byte offset in the box, global address, bytes) of each box row's in-tensor span."""
    n = tmap.box_elements
    eb = tmap.element_bytes
    row_bytes = tmap.box[0] * eb
    x0 = int(coords[0])
    lo, hi = max(x0, 0), min(x0 + tmap.box[0], tmap.dims[0])
    for outer in product(*(range(k) for k in reversed(n[1:]))):      # slowest dimension first
        idx = tuple(reversed(outer))                                 # idx[d-1] for dimension d
        offset = tmap.address
        inside = lo < hi
        for d, j in enumerate(idx, start=1):
            c = int(coords[d]) + j * tmap.element_strides[d]
            inside = inside and 0 <= c < tmap.dims[d]
            offset += c * tmap.strides[d - 1]
        if not inside:
            continue
        linear = 0
        for d in range(len(idx), 0, -1):
            linear = linear * n[d] + idx[d - 1]
        yield linear * row_bytes + (lo - x0) * eb, offset + lo * eb, (hi - lo) * eb


def store_tile(tmap: TensorMap, coords: tuple[int, ...], smem_bytes: np.ndarray, src_address: int,
               write_global: Callable[[int, np.ndarray], None], where: str = "") -> None:
    """The tensor store (shared -> global, 9.7.9.25.5.2): the box read from shared memory at
    ``src_address`` (``smem_bytes``, as laid out there, swizzled per the map) is written at
    ``coords``; elements outside the tensor are not written (5.5.3.3)."""
    w = _at(where)
    if len(coords) != tmap.rank:
        raise EmuError(f"{w}cp.async.bulk.tensor gives {len(coords)} coordinates for a rank-{tmap.rank} map")
    tmap, coords = _byte_view(tmap, coords, where)
    if src_address % SMEM_ALIGN:
        raise CheckFailed(f"{w}cp.async.bulk.tensor shared source {src_address:#x} is not {SMEM_ALIGN}-byte aligned")
    width = SWIZZLE_WIDTH[tmap.swizzle]
    if width and tmap.box[0] * tmap.element_bytes != width:
        raise Unsupported(f"{w}{tmap.swizzle} swizzle with a {tmap.box[0] * tmap.element_bytes} B inner box row: "
                          "only rows of exactly the swizzle width are simulated")
    data = np.asarray(smem_bytes, dtype=np.uint8).reshape(-1)
    if width:
        data = data[_landed(src_address, data.size, width, SWIZZLE_GRAIN.get(tmap.swizzle, 16))]
    for row_at, gaddr, nbytes in _rows(tmap, coords):
        write_global(gaddr, data[row_at:row_at + nbytes])


def check_bulk(src: int, dst: int, size: int, where: str = "") -> None:
    """``cp.async.bulk``: size a positive multiple of 16; src and dst 16-byte aligned."""
    w = _at(where)
    if size <= 0 or size % BULK_ALIGN:
        raise CheckFailed(f"{w}cp.async.bulk size {size} B must be a positive multiple of {BULK_ALIGN}")
    for what, addr in (("source", src), ("destination", dst)):
        if addr % BULK_ALIGN:
            raise CheckFailed(f"{w}cp.async.bulk {what} address {addr:#x} is not {BULK_ALIGN}-byte aligned")


def bulk_copy(src: int, dst: int, size: int, read_global: Callable[[int, int], np.ndarray],
              where: str = "") -> np.ndarray:
    """The ``size`` bytes a checked ``cp.async.bulk`` copies (they land at dst unchanged)."""
    check_bulk(src, dst, size, where)
    return np.asarray(read_global(src, size), dtype=np.uint8).reshape(-1)
