"""Tensor Memory unit: allocation rules, the lane-quarter rule, ld/st shapes and tcgen05.cp.

Expected values are written from the PTX ISA text (9.7.16.1, 9.7.16.7.1, 9.7.16.8, 9.7.16.9.2)
in this file, not taken from porter's generator.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.errors import CheckFailed, EmuError, Unsupported
from porter.emu.units.tmem import TensorMemory, alloc_pair, make_address, split_address


def test_address_is_lane_high_column_low():
    assert split_address(0x0020_0040) == (0x20, 0x40)
    assert make_address(32, 64) == 0x0020_0040


def test_alloc_power_of_two_columns_and_check_exit():
    t = TensorMemory("cta 0")
    a = t.alloc(warp=0, ncols=256)
    assert split_address(a) == (0, 0)
    b = t.alloc(warp=0, ncols=128)
    assert split_address(b) == (0, 256)  # aligned to its size, after the first block
    with pytest.raises(CheckFailed, match="TMEM not deallocated"):
        t.check_exit()
    t.dealloc(0, a, 256)
    t.dealloc(0, b, 128)
    t.check_exit()


@pytest.mark.parametrize("ncols", [0, 16, 48, 96, 1024, 33])
def test_alloc_rejects_bad_ncols(ncols):
    with pytest.raises(EmuError, match="power of 2"):
        TensorMemory().alloc(0, ncols)


def test_alloc_blocks_when_full_and_after_relinquish_is_illegal():
    t = TensorMemory()
    a = t.alloc(0, 512)
    assert t.alloc(0, 32) is None  # the ISA's alloc blocks: the caller parks and retries
    t.dealloc(0, a, 512)
    t.relinquish(0)
    with pytest.raises(CheckFailed, match="relinquish_alloc_permit"):
        t.alloc(0, 32)


def test_alloc_sizes_must_not_increase():
    t = TensorMemory()
    t.alloc(0, 64)
    with pytest.raises(CheckFailed, match="must not increase"):
        t.alloc(0, 128)


def test_dealloc_must_match_an_allocation():
    t = TensorMemory()
    a = t.alloc(4, 128)
    with pytest.raises(CheckFailed, match="not that of an allocation"):
        t.dealloc(4, a + 32, 128)
    with pytest.raises(CheckFailed, match="has 128 columns"):
        t.dealloc(4, a, 64)
    t.dealloc(5, a, 128)          # another warp of the CTA: the ISA states no rule against it
    strict = TensorMemory(same_warp_dealloc=True)
    b = strict.alloc(4, 128)
    with pytest.raises(CheckFailed, match="allocated by warp 4"):
        strict.dealloc(5, b, 128)


def test_cta_group_must_not_change():
    t = TensorMemory()
    t.alloc(0, 32, cta_group=1)
    with pytest.raises(CheckFailed, match="same .cta_group"):
        t.relinquish(0, cta_group=2)


def test_alloc_pair_same_address_in_both():
    t0, t1 = TensorMemory("cta 0"), TensorMemory("cta 1")
    t1._take(0, 128, 9, 2)  # odd CTA already holds columns 0..127
    a = alloc_pair(t0, t1, 0, 0, 128)
    assert split_address(a) == (0, 128)
    assert 128 in t0.allocations and 128 in t1.allocations


def test_ld_st_32x32b_round_trip_and_mapping():
    t = TensorMemory()
    base = t.alloc(0, 64)
    vals = (np.arange(32)[:, None] * 1000 + np.arange(32)[None, :]).astype(np.uint32)
    # warp 6 is warp 2 of its warpgroup: lanes 64..95
    t.st(6, base | (64 << 16), "32x32b", 32, vals)
    assert t.cells[64 + 5, 7] == 5007          # thread t -> lane 64+t, register r -> column r
    assert (t.ld(2, base | (64 << 16) | 0, "32x32b", 32) == vals).all()
    assert (t.ld(6, base | (64 << 16) | 16, "32x32b", 16) == vals[:, 16:]).all()


def test_lane_quarter_rule():
    t = TensorMemory()
    base = t.alloc(0, 32)
    t.st(1, base | (32 << 16), "32x32b", 1, np.zeros((32, 1), np.uint32))
    with pytest.raises(CheckFailed, match="may access TMEM lanes 32..63 only"):
        t.ld(1, base, "32x32b", 1)           # warp 1 reaching lanes 0..31
    with pytest.raises(CheckFailed, match="lanes 0..31 only"):
        t.ld(4, base | (16 << 16), "32x32b", 1)  # warp 4 = quarter 0, lanes 16..47 spill over


def test_access_outside_allocated_columns():
    t = TensorMemory()
    base = t.alloc(0, 32)
    with pytest.raises(CheckFailed, match="column 32 .* not allocated"):
        t.st(0, base | 16, "32x32b", 32, np.zeros((32, 32), np.uint32))
    with pytest.raises(CheckFailed, match="not allocated"):
        t.ld(0, 64, "32x32b", 1)


def test_reading_never_written_tmem_is_reported():
    t = TensorMemory()
    base = t.alloc(0, 32)
    with pytest.raises(CheckFailed, match="never written"):
        t.ld(0, base, "32x32b", 4)


def test_num_must_fit_table_47():
    t = TensorMemory()
    t.alloc(0, 512)
    with pytest.raises(EmuError, match="Table 47"):
        t.ld(0, 0, "16x256b", 64)
    with pytest.raises(EmuError, match="Table 47"):
        t.ld(0, 0, "32x32b", 3)
    with pytest.raises(Unsupported):
        t.ld(0, 0, "16x16b", 1)                    # no such shape


def test_16x32bx2_round_trips_through_its_two_blocks():
    t = TensorMemory()
    t.alloc(0, 64)
    vals = np.arange(32 * 4, dtype=np.uint32).reshape(32, 4) + 1
    t.st(1, (32 + 8) << 16 | 2, "16x32bx2", 4, vals, split=20)    # warp 1: lanes 40..55, columns 2.. and 22..
    assert (t.ld(1, (32 + 8) << 16 | 2, "16x32bx2", 4, split=20) == vals).all()
    assert (t.cells[40:56, 2:6] == vals[:16]).all() and (t.cells[40:56, 22:26] == vals[16:]).all()
    assert not t.defined[40:56, 6:22].any()                       # nothing between the blocks


@pytest.mark.parametrize("shape,num,regs", [("16x64b", 2, 2), ("16x128b", 2, 4), ("16x256b", 1, 4)])
def test_16_lane_shapes_round_trip_and_cover_their_block(shape, num, regs):
    t = TensorMemory()
    t.alloc(0, 32)
    vals = np.arange(32 * regs, dtype=np.uint32).reshape(32, regs) + 1
    t.st(3, (96 + 16) << 16, shape, num, vals)     # warp 3: lanes 96..127, upper 16
    assert (t.ld(7, (96 + 16) << 16, shape, num) == vals).all()
    width = {"16x64b": 2, "16x128b": 4, "16x256b": 8}[shape] * num
    block = t.cells[112:128, :width]
    assert sorted(block.ravel().tolist()) == sorted(vals.ravel().tolist())  # each cell once
    assert not t.cells[96:112].any()


def _smem_rows(rows: int, row_bytes: int, sbo: int) -> tuple[np.ndarray, np.ndarray]:
    """A K-major no-swizzle operand: row r at (r//8)*SBO + (r%8)*16 (16-byte rows)."""
    rng = np.random.default_rng(1)
    data = rng.integers(0, 256, size=(rows, row_bytes), dtype=np.uint8)
    smem = np.zeros(4096, np.uint8)
    for r in range(rows):
        a = 512 + (r // 8) * sbo + (r % 8) * 16
        smem[a:a + row_bytes] = data[r]
    return smem, data


def _desc(start: int, lbo: int, sbo: int, swizzle: int = 0) -> int:
    return (start >> 4) | (lbo >> 4) << 16 | (sbo >> 4) << 32 | 1 << 46 | swizzle << 61


def test_cp_32x128b_warpx4_replicates_to_all_four_quarters():
    t = TensorMemory()
    base = t.alloc(0, 32)
    smem, data = _smem_rows(32, 16, sbo=128)
    t.cp(base | 4, smem, _desc(512, 16, 128), "32x128b", "warpx4")
    words = data.view("<u4").reshape(32, 4)
    for q in range(4):
        assert (t.cells[32 * q:32 * q + 32, 4:8] == words).all()
    assert t.cells[5, 4] == int.from_bytes(bytes(data[5, :4]), "little")


def test_cp_shape_and_multicast_rules():
    t = TensorMemory()
    t.alloc(0, 32)
    smem, _ = _smem_rows(32, 16, 128)
    with pytest.raises(EmuError, match="needs .warpx4"):
        t.cp(0, smem, _desc(512, 16, 128), "32x128b")
    with pytest.raises(Unsupported):
        t.cp(0, smem, _desc(512, 16, 128), "64x128b", "warpx2::02_13")
    with pytest.raises(CheckFailed, match="not allocated"):
        t.cp(32, smem, _desc(512, 16, 128), "32x128b", "warpx4")


def test_cp_128x256b_lane_per_row():
    t = TensorMemory()
    t.alloc(0, 32)
    smem = np.zeros(16384, np.uint8)
    rng = np.random.default_rng(2)
    data = rng.integers(0, 256, size=(128, 32), dtype=np.uint8)
    lbo, sbo = 2048, 128
    for r in range(128):
        for half in range(2):
            a = (r // 8) * sbo + (r % 8) * 16 + half * lbo
            smem[a:a + 16] = data[r, 16 * half:16 * half + 16]
    t.cp(0, smem, _desc(0, lbo, sbo), "128x256b")
    assert (t.cells[:, :8] == data.view("<u4").reshape(128, 8)).all()


@pytest.mark.parametrize("shape,thread,reg,lane,col", [
    ("16x64b", 1, 0, 8, 0), ("16x64b", 2, 0, 0, 1), ("16x64b", 5, 1, 9, 2),
    ("16x128b", 5, 1, 9, 1), ("16x128b", 31, 0, 7, 3),
    ("16x256b", 6, 3, 9, 5), ("16x256b", 3, 0, 0, 6),
])
def test_16_lane_shapes_thread_map(shape, thread, reg, lane, col):
    """Thread t serves row t/4 (and t/4 + 8); .16x64b puts odd threads on rows 8..15."""
    t = TensorMemory()
    t.alloc(0, 32)
    regs = {"16x64b": 1, "16x128b": 2, "16x256b": 4}[shape] * (2 if shape == "16x64b" else 1)
    vals = np.zeros((32, regs), np.uint32)
    vals[thread, reg] = 0xABCD
    t.st(0, 0, shape, 2 if shape == "16x64b" else 1, vals)
    assert t.cells[lane, col] == 0xABCD
    assert np.count_nonzero(t.cells) == 1


def test_16x32bx2_checks_the_allocation_of_its_two_blocks_only():
    t = TensorMemory()
    first, middle, last = (t.alloc(0, 32) for _ in range(3))
    t.dealloc(0, middle, 32)                                      # columns 32..63 freed: a hole
    vals = np.arange(32 * 2, dtype=np.uint32).reshape(32, 2)
    t.st(0, first | 8, "16x32bx2", 2, vals, split=64)             # columns 8..9 and 72..73
    assert (t.ld(0, first | 8, "16x32bx2", 2, split=64) == vals).all()
    with pytest.raises(CheckFailed, match="columns"):
        t.st(0, first | 8, "16x32bx2", 2, vals, split=32)         # the second block in the hole
