"""Warp-level ``mma.sync`` fragment layouts and ``ldmatrix``, from the PTX ISA's
"Warp-level Matrix Multiply-Accumulate Instructions" (9.7.14.5.x "Matrix Fragments for
mma.m16n8k16 with floating point type" and "... mma.m16n8k32", 9.7.14.5.15 ``ldmatrix``).

The forms covered are ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (and f16),
``mma.sync.aligned.m16n8k32.row.col{.kind::f8f6f4}.f32.e4m3.e4m3.f32`` (8-bit containers:
the ISA gives one m16n8k32 layout for .u8/.s8/.e4m3/.e5m2/.e3m2/.e2m3/.e2m1) and
``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16``. In the ISA's words,
groupID = %laneid >> 2 and threadID_in_group = %laneid % 4.

API
---
``fragment_layout(shape, operand) -> (rows, cols)``, int64 (32, regs, per_reg)
    shape "m16n8k16" (16-bit A/B) or "m16n8k32" (8-bit A/B); operand "a" (16 x K, row
    index M), "b" (K x 8, row index K, col index N) or "c" (16 x 8, C and D, one f32 per
    register so per_reg = 1). Element e of register j (e = 0 in the low bits) is the
    ISA's a_i / b_i / c_i with i = j * per_reg + e.
``ldmatrix_address_lanes(num) -> (matrix, row)``, int64 (32,)
    Which 8x8 matrix and which of its rows each lane's address supplies (-1: ignored).
``ldmatrix_layout(trans) -> (rows, cols)``, int64 (32, 2)
    Element e of a lane's destination register for one matrix -> (row, col) of that 8x8
    matrix, row = the row whose address was supplied, col = the b16 element in it.
``ldmatrix(smem, addresses, num, trans, where="") -> uint32 (32, num)``
    Execute: ``addresses[l]`` is lane l's shared::cta address; register j of every lane
    holds its fragment of matrix j. Rows must be 16-byte aligned and inside smem.
"""

from __future__ import annotations

import numpy as np

from porter.emu.errors import EmuError

SHAPES = {"m16n8k16": 16, "m16n8k32": 8}      # shape -> A/B element bits


def _lane_ids():
    lane = np.arange(32, dtype=np.int64)
    return lane >> 2, lane % 4                   # groupID, threadID_in_group


def fragment_layout(shape: str, operand: str) -> tuple[np.ndarray, np.ndarray]:
    """(row, col) of each lane's fragment elements for ``mma.sync`` ``shape``, ``operand``."""
    if shape not in SHAPES:
        raise EmuError(f"mma.sync shape {shape!r} not simulated; use one of {', '.join(SHAPES)}")
    g, tig = (x[:, None] for x in _lane_ids())
    if operand == "c":
        i = np.arange(4, dtype=np.int64)[None, :]
        rows = np.where(i < 2, g, g + 8)
        cols = tig * 2 + (i & 1)
        return np.broadcast_to(rows, (32, 4))[:, :, None].copy(), np.broadcast_to(cols, (32, 4))[:, :, None].copy()
    if operand not in ("a", "b"):
        raise EmuError(f"mma.sync operand {operand!r} must be 'a', 'b' or 'c'")
    bits = SHAPES[shape]
    per_reg = 32 // bits
    regs = 4 if operand == "a" else 2
    i = np.arange(regs * per_reg, dtype=np.int64)[None, :]
    if shape == "m16n8k16":
        if operand == "a":
            rows = np.where((i < 2) | ((i >= 4) & (i < 6)), g, g + 8)
            cols = np.where(i < 4, tig * 2 + (i & 1), tig * 2 + (i & 1) + 8)
        else:
            rows = np.where(i < 2, tig * 2 + (i & 1), tig * 2 + (i & 1) + 8)
            cols = g + 0 * i
    else:
        if operand == "a":
            rows = np.where((i < 4) | ((i >= 8) & (i < 12)), g, g + 8)
            cols = np.where(i < 8, tig * 4 + (i & 3), tig * 4 + (i & 3) + 16)
        else:
            rows = np.where(i < 4, tig * 4 + (i & 3), tig * 4 + (i & 3) + 16)
            cols = g + 0 * i
    shape3 = (32, regs, per_reg)
    return (np.broadcast_to(rows, (32, regs * per_reg)).reshape(shape3).copy(),
            np.broadcast_to(cols, (32, regs * per_reg)).reshape(shape3).copy())


def ldmatrix_address_lanes(num: int) -> tuple[np.ndarray, np.ndarray]:
    """Threads 0-7 give addr0-addr7 (the rows of matrix 0), 8-15 those of matrix 1, ...;
    lanes beyond ``num`` matrices are ignored (-1)."""
    if num not in (1, 2, 4):
        raise EmuError(f"ldmatrix .num must be .x1, .x2 or .x4, not x{num}")
    lane = np.arange(32, dtype=np.int64)
    used = lane < 8 * num
    return np.where(used, lane // 8, -1), np.where(used, lane % 8, -1)


def ldmatrix_layout(trans: bool) -> tuple[np.ndarray, np.ndarray]:
    """A group of four lanes holds one row (column with .trans): lane l's register holds
    elements (l/4, 2*(l%4) + e), or (2*(l%4) + e, l/4) with .trans."""
    g, tig = (x[:, None] for x in _lane_ids())
    e = np.arange(2, dtype=np.int64)[None, :]
    rows, cols = np.broadcast_to(g, (32, 2)), np.broadcast_to(tig * 2 + e, (32, 2))
    if trans:
        rows, cols = cols, rows
    return rows.copy(), cols.copy()


def ldmatrix(smem: np.ndarray, addresses, num: int, trans: bool, where: str = "") -> np.ndarray:
    """Execute ldmatrix.m8n8.x{num}{.trans}.b16; returns each lane's ``num`` registers."""
    at = f"{where}: " if where else ""
    if smem.dtype != np.uint8 or smem.ndim != 1:
        raise EmuError(f"{at}shared memory must be a 1-D uint8 array, got {smem.dtype} {smem.shape}")
    addresses = np.asarray(addresses, dtype=np.int64).reshape(-1)
    if addresses.size != 32:
        raise EmuError(f"{at}ldmatrix needs one address per lane (32), got {addresses.size}")
    matrix, row = ldmatrix_address_lanes(num)
    used = addresses[: 8 * num]
    for lane, a in enumerate(used):
        if a % 16:
            raise EmuError(f"{at}ldmatrix row address {int(a):#x} from lane {lane} is not 16-byte aligned")
        if a < 0 or a + 16 > smem.size:
            raise EmuError(f"{at}ldmatrix row at {int(a):#x} from lane {lane} is outside the CTA's "
                           f"{smem.size} B of shared memory")
    # mats[m, r, c] = b16 element c of row r of matrix m
    mats = np.stack([smem[a: a + 16].view("<u2") for a in used]).reshape(num, 8, 8)
    rows, cols = ldmatrix_layout(trans)
    elems = mats[:, rows, cols].astype(np.uint32)          # (num, 32, 2)
    regs = elems[:, :, 0] | (elems[:, :, 1] << np.uint32(16))
    return regs.T.copy()
