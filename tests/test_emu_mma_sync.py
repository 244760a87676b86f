"""porter.emu.units.mma_sync: fragment layouts and ldmatrix.

Checked by coverage (every matrix element held exactly once), by spot values read off
the ISA's fragment figures, and by composition: the usual ldmatrix addressing of a
row-major A tile (and .trans of a row-major K x N B tile) must yield exactly the
register fragments the mma layout states; a mistake in either one breaks that.
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.errors import EmuError
from porter.emu.units import mma_sync


@pytest.mark.parametrize("shape,operand,dims,regs,per", [
    ("m16n8k16", "a", (16, 16), 4, 2), ("m16n8k16", "b", (16, 8), 2, 2), ("m16n8k16", "c", (16, 8), 4, 1),
    ("m16n8k32", "a", (16, 32), 4, 4), ("m16n8k32", "b", (32, 8), 2, 4), ("m16n8k32", "c", (16, 8), 4, 1),
])
def test_fragments_cover_the_matrix_once(shape, operand, dims, regs, per):
    rows, cols = mma_sync.fragment_layout(shape, operand)
    assert rows.shape == cols.shape == (32, regs, per)
    assert rows.max() == dims[0] - 1 and cols.max() == dims[1] - 1
    assert np.unique(rows * dims[1] + cols).size == dims[0] * dims[1]


def test_spot_values_from_the_figures():
    a_r, a_c = mma_sync.fragment_layout("m16n8k16", "a")
    # Figure "m16n8k16 A": T0 holds a0,a1 = (0,0),(0,1); a2,a3 = (8,0),(8,1); a4,a5 = (0,8),(0,9)
    assert [(a_r[0, j, e], a_c[0, j, e]) for j in range(4) for e in range(2)] == \
           [(0, 0), (0, 1), (8, 0), (8, 1), (0, 8), (0, 9), (8, 8), (8, 9)]
    # T5: groupID 1, threadID_in_group 1
    assert (a_r[5, 0, 0], a_c[5, 0, 0]) == (1, 2)
    b_r, b_c = mma_sync.fragment_layout("m16n8k16", "b")
    assert [(b_r[6, j, e], b_c[6, j, e]) for j in range(2) for e in range(2)] == [(4, 1), (5, 1), (12, 1), (13, 1)]
    c_r, c_c = mma_sync.fragment_layout("m16n8k16", "c")
    assert [(c_r[31, j, 0], c_c[31, j, 0]) for j in range(4)] == [(7, 6), (7, 7), (15, 6), (15, 7)]
    a8_r, a8_c = mma_sync.fragment_layout("m16n8k32", "a")
    # T1: a0..a3 row 0 cols 4..7; a4..a7 row 8; a8..a11 row 0 cols 20..23
    assert (a8_r[1, 0].tolist(), a8_c[1, 0].tolist()) == ([0] * 4, [4, 5, 6, 7])
    assert (a8_r[1, 1, 0], a8_r[1, 2, 0], a8_c[1, 2, 0], a8_r[1, 3, 3], a8_c[1, 3, 3]) == (8, 0, 20, 8, 23)
    b8_r, b8_c = mma_sync.fragment_layout("m16n8k32", "b")
    assert (b8_r[10, 1].tolist(), b8_c[10, 1, 0]) == ([24, 25, 26, 27], 2)   # T10: tig 2, groupID 2


def test_ldmatrix_address_lanes():
    m, r = mma_sync.ldmatrix_address_lanes(2)
    assert m[:16].tolist() == [0] * 8 + [1] * 8 and r[:16].tolist() == list(range(8)) * 2
    assert (m[16:] == -1).all() and (r[16:] == -1).all()
    with pytest.raises(EmuError, match="x3"):
        mma_sync.ldmatrix_address_lanes(3)


def _smem_matrix(rows: int, cols: int, base: int, pitch: int, seed: int = 0):
    vals = np.random.default_rng(seed).integers(0, 2**16, size=(rows, cols), dtype=np.uint16)
    smem = np.zeros(base + rows * pitch + 64, np.uint8)
    for r in range(rows):
        smem[base + r * pitch: base + r * pitch + 2 * cols] = vals[r].astype("<u2").view(np.uint8)
    return vals, smem


def _unpack(regs):
    return regs & 0xFFFF, regs >> 16


def test_ldmatrix_x4_gives_the_mma_a_fragment():
    vals, smem = _smem_matrix(16, 16, 256, 48)           # padded 48-byte rows
    lane = np.arange(32)
    addrs = 256 + (lane % 16) * 48 + (lane // 16) * 16   # row lane%16, column block lane//16
    regs = mma_sync.ldmatrix(smem, addrs, 4, False)
    assert regs.shape == (32, 4) and regs.dtype == np.uint32
    rows, cols = mma_sync.fragment_layout("m16n8k16", "a")
    lo, hi = _unpack(regs)
    assert np.array_equal(lo, vals[rows[:, :, 0], cols[:, :, 0]])
    assert np.array_equal(hi, vals[rows[:, :, 1], cols[:, :, 1]])


def test_ldmatrix_x2_trans_gives_the_mma_b_fragment():
    vals, smem = _smem_matrix(16, 8, 0, 16)              # B as K x N, row-major (k rows)
    addrs = np.arange(32) % 16 * 16
    regs = mma_sync.ldmatrix(smem, addrs, 2, True)
    rows, cols = mma_sync.fragment_layout("m16n8k16", "b")
    lo, hi = _unpack(regs)
    assert np.array_equal(lo, vals[rows[:, :, 0], cols[:, :, 0]])
    assert np.array_equal(hi, vals[rows[:, :, 1], cols[:, :, 1]])


def test_ldmatrix_x1_rows_need_not_be_contiguous():
    vals, smem = _smem_matrix(8, 8, 0, 16)
    perm = [3, 0, 7, 1, 6, 2, 5, 4]                     # lane j supplies stored row perm[j]
    addrs = np.array([perm[j] * 16 for j in range(8)] + [0] * 24)
    lo, hi = _unpack(mma_sync.ldmatrix(smem, addrs, 1, False)[:, 0])
    lane = np.arange(32)
    assert np.array_equal(lo, vals[np.array(perm)[lane // 4], 2 * (lane % 4)])
    assert np.array_equal(hi, vals[np.array(perm)[lane // 4], 2 * (lane % 4) + 1])


def test_ldmatrix_errors():
    smem = np.zeros(256, np.uint8)
    with pytest.raises(EmuError, match="lane 3 is not 16-byte aligned"):
        mma_sync.ldmatrix(smem, [0, 16, 32, 40] + [0] * 28, 1, False, where="ldmatrix")
    with pytest.raises(EmuError, match="outside"):
        mma_sync.ldmatrix(smem, [0] * 8 + [256] + [0] * 23, 2, False)
    # lanes beyond .x1 are ignored, even with garbage addresses
    mma_sync.ldmatrix(smem, [0] * 8 + [7] * 24, 1, False)
    with pytest.raises(EmuError, match="not simulated"):
        mma_sync.fragment_layout("m16n8k8", "a")
