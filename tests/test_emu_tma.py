"""porter.emu.units.tma: the emulated tensor map, the tiled load, the swizzle, bulk rules.

Expectations are written here independently: boxes sliced out of a numpy matrix, the
swizzle placed by the PTX ISA 5.5.7 tables copied cell by cell.
"""

from __future__ import annotations

from dataclasses import replace

import ml_dtypes
import numpy as np
import pytest

from porter.emu.errors import EmuError, Unsupported
from porter.emu.units import tma
from porter.runtime.tensormap import TensorMapParams, matrix_map

# PTX ISA 5.5.7, 128-byte swizzle table: [line][position] = the 16-byte element stored there.
TABLE_128B = [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5],
              [3, 2, 1, 0, 7, 6, 5, 4], [4, 5, 6, 7, 0, 1, 2, 3], [5, 4, 7, 6, 1, 0, 3, 2],
              [6, 7, 4, 5, 2, 3, 0, 1], [7, 6, 5, 4, 3, 2, 1, 0]]
TABLES = {"128B": TABLE_128B, "64B": TABLE_128B[:4], "32B": TABLE_128B[:2]}

GBASE = 0x7000_0000


class Global:
    """A row-major uint16 matrix in 'global memory' that records every read."""

    def __init__(self, rows: int, cols: int, row_stride: int, seed: int = 3):
        self.vals = np.random.default_rng(seed).integers(1, 2**15, size=(rows, cols), dtype=np.uint16)
        self.row_stride = row_stride
        self.mem = np.zeros(rows * row_stride, np.uint8)
        for r in range(rows):
            self.mem[r * row_stride: r * row_stride + cols * 2] = self.vals[r].astype("<u2").view(np.uint8)
        self.reads: list[tuple[int, int]] = []

    def read(self, addr: int, n: int) -> np.ndarray:
        off = addr - GBASE
        if off < 0 or off + n > self.mem.size:
            raise AssertionError(f"read outside the allocation: {addr:#x}+{n}")
        self.reads.append((addr, n))
        return self.mem[off: off + n]


def bf16_map(g: Global, box_cols: int, box_rows: int, swizzle: str = "NONE", **kw) -> tma.TensorMap:
    rows, cols = g.vals.shape
    params = replace(matrix_map("test", "BFLOAT16", rows, cols, g.row_stride, box_cols, box_rows, swizzle), **kw)
    return tma.decode(tma.encode(params, GBASE))


def as_u16(tile: np.ndarray, cols: int) -> np.ndarray:
    return tile.view("<u2").reshape(-1, cols)


# -- the map -----------------------------------------------------------------------------

def test_encode_decode_round_trip():
    p = TensorMapParams("t", "UINT8", dims=(256, 40, 3), strides=(256, 256 * 48), box=(128, 16, 2),
                        swizzle="128B", element_strides=(1, 2, 1), oob_fill="NONE", l2_promotion="L2_128B")
    raw = tma.encode(p, 0x1234_5670)
    assert isinstance(raw, bytes) and len(raw) == 128
    m = tma.decode(raw)
    assert (m.address, m.data_type, m.dims, m.strides, m.box, m.element_strides, m.swizzle, m.oob_fill,
            m.l2_promotion) == (0x1234_5670, "UINT8", (256, 40, 3), (256, 256 * 48), (128, 16, 2), (1, 2, 1),
                                "128B", "NONE", "L2_128B")
    assert m.box_elements == (128, 8, 2) and m.box_bytes == 128 * 8 * 2
    m1 = tma.decode(tma.encode(matrix_map("a", "BFLOAT16", 512, 64, 128, 64, 128, "128B"), 0x1000))
    assert m1.element_strides == (1, 1) and m1.dims == (64, 512) and m1.box == (64, 128)


def test_not_a_porter_map_is_rejected():
    with pytest.raises(EmuError, match="not a map from porter's emulated host"):
        tma.decode(bytes(range(128)))
    with pytest.raises(EmuError, match="128 bytes"):
        tma.decode(b"\0" * 64)
    raw = bytearray(tma.encode(matrix_map("a", "BFLOAT16", 512, 64, 128, 64, 128, "128B"), 0x1000))
    raw[40] ^= 1
    with pytest.raises(EmuError, match="checksum"):
        tma.decode(bytes(raw))


@pytest.mark.parametrize("change,match", [
    (dict(strides=(120,)), "multiple of 16"),
    (dict(box=(72, 8)), "more than the 128B swizzle span"),
    (dict(box=(4, 8), swizzle="NONE"), "multiple of 16 B"),
    (dict(data_type="UINT16", oob_fill="NAN_REQUEST_ZERO_FMA"), "floating-point"),
    (dict(element_strides=(1, 9)), "element stride 9"),
    (dict(swizzle="256B"), "swizzle '256B' unknown"),
])
def test_encode_applies_the_driver_rules(change, match):
    base = TensorMapParams("t", "BFLOAT16", dims=(64, 64), strides=(128,), box=(64, 8), swizzle="128B")
    with pytest.raises(EmuError, match=match):
        tma.encode(replace(base, **change), 0x1000)
    with pytest.raises(EmuError, match="16-byte aligned"):
        tma.encode(base, 0x1008)


# -- tiles ---------------------------------------------------------------------------------

def test_2d_bf16_tile_no_swizzle():
    g = Global(100, 72, 160)                       # 72 bf16 = 144 B rows padded to 160 B
    m = bf16_map(g, 32, 16)
    tile = tma.load_tile(m, (8, 20), g.read, 128)
    assert tile.dtype == np.uint8 and tile.size == 32 * 16 * 2
    assert np.array_equal(as_u16(tile, 32), g.vals[20:36, 8:40])
    assert all(n == 64 for _, n in g.reads) and len(g.reads) == 16


def test_2d_bf16_tile_128b_swizzle_follows_the_isa_table():
    g = Global(64, 128, 256)
    m = bf16_map(g, 64, 16, "128B")
    tile = tma.load_tile(m, (64, 8), g.read, 3 * 1024)
    box = g.vals[8:24, 64:128].astype("<u2").view(np.uint8).reshape(16, 128)   # row r = line r
    expect = np.zeros((16, 128), np.uint8)
    for line in range(16):
        for pos in range(8):
            src = TABLE_128B[line % 8][pos]
            expect[line, pos * 16: pos * 16 + 16] = box[line, src * 16: src * 16 + 16]
    assert np.array_equal(tile.reshape(16, 128), expect)
    assert not np.array_equal(expect, box)         # the swizzle moved something


def test_oob_rows_and_columns_are_zero_filled():
    g = Global(40, 48, 96)
    m = bf16_map(g, 32, 16)
    tile = as_u16(tma.load_tile(m, (32, 30), g.read, 0), 32)     # cols 32..63 of 48, rows 30..45 of 40
    assert np.array_equal(tile[:10, :16], g.vals[30:40, 32:48])
    assert not tile[:10, 16:].any() and not tile[10:].any()
    # only in-tensor spans were read: 10 rows of 16 elements
    assert g.reads == [(GBASE + r * 96 + 64, 32) for r in range(30, 40)]


def test_negative_coordinates():
    g = Global(40, 48, 96)
    tile = as_u16(tma.load_tile(bf16_map(g, 16, 8), (-8, -3), g.read, 256), 16)
    assert not tile[:3].any() and not tile[:, :8].any()
    assert np.array_equal(tile[3:, 8:], g.vals[0:5, 0:8])


def test_box_entirely_outside_reads_nothing():
    g = Global(40, 48, 96)
    tile = tma.load_tile(bf16_map(g, 16, 8), (48, 0), g.read, 0)
    assert not tile.any() and g.reads == []


def test_nan_fill_mode():
    g = Global(40, 48, 96)
    m = bf16_map(g, 16, 8, oob_fill="NAN_REQUEST_ZERO_FMA")
    tile = tma.load_tile(m, (40, 36), g.read, 0).view(ml_dtypes.bfloat16).reshape(8, 16).astype(np.float32)
    assert np.isnan(tile[4:]).all() and np.isnan(tile[:, 8:]).all()
    assert np.array_equal(tile[:4, :8], g.vals[36:40, 40:48].view(ml_dtypes.bfloat16).astype(np.float32))


def test_element_strides_skip_rows():
    g = Global(64, 16, 32)
    m = bf16_map(g, 16, 8, element_strides=(1, 2))
    tile = as_u16(tma.load_tile(m, (0, 3), g.read, 0), 16)
    assert tile.shape == (4, 16)                   # ceil(8 / 2) rows: 3, 5, 7, 9
    assert np.array_equal(tile, g.vals[3:11:2])


def test_3d_tile_dimension_order():
    vals = np.random.default_rng(1).integers(0, 256, size=(4, 6, 32), dtype=np.uint8)   # [d2][d1][d0]
    mem = vals.reshape(-1).copy()
    p = TensorMapParams("t3", "UINT8", dims=(32, 6, 4), strides=(32, 192), box=(16, 2, 3), swizzle="NONE")
    m = tma.decode(tma.encode(p, GBASE))
    tile = tma.load_tile(m, (16, 4, 2), lambda a, n: mem[a - GBASE: a - GBASE + n], 0).reshape(3, 2, 16)
    expect = np.zeros((3, 2, 16), np.uint8)
    expect[:2] = vals[2:4, 4:6, 16:32]             # d2 = 4 is outside
    assert np.array_equal(tile, expect)


def test_misaligned_destination():
    g = Global(64, 128, 256)
    with pytest.raises(EmuError, match="TMA A: .*0x40 is not 128-byte aligned"):
        tma.load_tile(bf16_map(g, 32, 8), (0, 0), g.read, 64, where="TMA A")
    m = bf16_map(g, 64, 8, "128B")
    # off the 1024 B pattern boundary the swizzle follows the address bits, as on the hardware
    tile = tma.load_tile(m, (0, 0), g.read, 512)
    line4 = g.vals[0, :64].astype("<u2").view(np.uint8)           # box row 0 lands on line 4 of the pattern
    assert np.array_equal(tile[:128].reshape(8, 16), line4.reshape(8, 16)[TABLE_128B[4]])


def test_narrow_rows_under_swizzle_unsupported():
    g = Global(64, 128, 256)
    with pytest.raises(Unsupported, match="64 B inner box row"):
        tma.load_tile(bf16_map(g, 32, 8, "128B"), (0, 0), g.read, 0)


def test_wrong_coordinate_count():
    g = Global(8, 16, 32)
    with pytest.raises(EmuError, match="3 coordinates for a rank-2 map"):
        tma.load_tile(bf16_map(g, 16, 8), (0, 0, 0), g.read, 0)


# -- swizzle --------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["128B", "64B", "32B"])
def test_swizzle_matches_the_isa_tables(mode):
    table = TABLES[mode]
    base = 4 * 1024
    for line in range(16):
        for src in range(8):
            dest_pos = table[line % len(table)].index(src)
            for b in (0, 7, 15):
                assert tma.swizzle(base + line * 128 + src * 16 + b, mode) == base + line * 128 + dest_pos * 16 + b
    assert tma.swizzle(0x1234, "NONE") == 0x1234


def test_swizzle_bit_statement():
    # 128B: bits [4:6] ^= bits [7:9]; 64B: [4:5] ^= [7:8]; 32B: [4] ^= [7]
    a = 0b1_0110_1010_0000
    assert tma.swizzle(a, "128B") == a ^ (((a >> 7) & 7) << 4)
    assert tma.swizzle(a, "64B") == a ^ (((a >> 7) & 3) << 4)
    assert tma.swizzle(a, "32B") == a ^ (((a >> 7) & 1) << 4)
    with pytest.raises(EmuError, match="unknown"):
        tma.swizzle(0, "16B")


# -- bulk -------------------------------------------------------------------------------------

def test_bulk_rules():
    tma.check_bulk(0x1000, 0x200, 4096)
    for args, match in [((0x1000, 0x200, 0), "positive multiple of 16"), ((0x1000, 0x200, 24), "multiple of 16"),
                        ((0x1008, 0x200, 32), "source address 0x1008"),
                        ((0x1000, 0x204, 32), "destination address 0x204")]:
        with pytest.raises(EmuError, match=match):
            tma.check_bulk(*args, where="bulk")
    mem = np.arange(64, dtype=np.uint8)
    assert np.array_equal(tma.bulk_copy(16, 0, 32, lambda a, n: mem[a:a + n]), mem[16:48])
