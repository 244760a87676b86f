"""Warp-level ``mma.sync`` fragment layouts and ``ldmatrix``, from the PTX ISA's
"Warp-level Matrix Multiply-Accumulate Instructions" (9.7.14.5.x "Matrix Fragments for
mma.m16n8k16 with floating point type", "... mma.m16n8k32", "... mma.m16n8k64"),
9.7.14.3 "Block Scaling" and 9.7.14.5.15 ``ldmatrix``.

The forms covered are ``mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32`` (and f16),
``mma.sync.aligned.m16n8k32.row.col{.kind::f8f6f4|.kind::mxf8f6f4.block_scale}.f32.*.*.f32``
(8-bit containers: the ISA gives one m16n8k32 layout for .u8/.s8/.e4m3/.e5m2/.e3m2/.e2m3/
.e2m1), ``mma.sync.aligned.m16n8k64.row.col.kind::mxf4{nvf4}.block_scale.*.f32.e2m1.e2m1.f32``
(4-bit elements, eight per register) and ``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}.shared.b16``.
In the ISA's words, groupID = %laneid >> 2 and threadID_in_group = %laneid % 4.

API
---
``fragment_layout(shape, operand) -> (rows, cols)``, int64 (32, regs, per_reg)
    shape "m16n8k16" (16-bit A/B), "m16n8k32" (8-bit A/B) or "m16n8k64" (4-bit A/B); operand "a" (16 x K, row
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

Arithmetic (9.7.14.5.14 ``mma``, 9.7.14.3 "Block Scaling"):

``operand_values(regs, shape, operand, fmt) -> float64``
    The whole A (16 x K) or B (K x 8) matrix from the 32 lanes' registers ``regs``
    (uint32 (32, 4) or (32, 2)), element format ``fmt``. For m16n8k32 (``.kind::f8f6f4``
    and ``.kind::mxf8f6f4``) every element sits in an 8-bit container: e4m3/e5m2 fill it,
    e3m2/e2m3 use the low 6 bits, e2m1 the central 4 bits (bits 2..5); for m16n8k64
    (``.kind::mxf4`` / ``.kind::mxf4nvf4``) e2m1 elements are packed eight to a register
    with no padding, element i at bits 4i..4i+3.
``accumulator(regs) -> float32 (16, 8)`` and ``accumulator_regs(mat) -> uint32 (32, 4)``
    C/D fragments (f32, one element per register) to the matrix and back.
``scale_lanes(operand, thread_id) -> int64``
    Which lane supplies the scale factor of each row of A (16) or column of B (8): the
    thread pair ``%laneid % 4 in {2t, 2t+1}`` of every quad for A (the lower lane of the
    pair holds row groupID, the upper row groupID + 8, as A's own fragments do), the one
    thread ``%laneid % 4 == t`` of every quad for B (column groupID).
``scale_values(data, operand, scale_vec, byte_id, thread_id, fmt) -> float64``
    scale_A (16 x V) or scale_B as (8 x V), V = 1, 2, 4 for scale_vec 1X/2X/4X: the bytes
    ``byte_id .. byte_id + V - 1`` of the supplying lane's ``scale-*-data``, the lower
    byte for the lower K block; selectors are checked against the ISA's Table 37.
``mma(a, b, c, scale_a=None, scale_b=None) -> float32 (16, 8)``
    ``D = (A * scale_A)(B * scale_B) + C``: K block j (K / V elements) of row m of A is
    multiplied by scale_a[m, j], of column n of B by scale_b[n, j]; products and sums in
    float64, rounded once to f32 (the ISA leaves accumulation order and rounding open).
"""

from __future__ import annotations

import functools

import numpy as np

from porter.emu.errors import CheckFailed, EmuError

SHAPES = {"m16n8k16": 16, "m16n8k32": 8, "m16n8k64": 4}      # shape -> A/B element bits
K_OF = {"m16n8k16": 16, "m16n8k32": 32, "m16n8k64": 64}


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
    elif shape == "m16n8k32":
        if operand == "a":
            rows = np.where((i < 4) | ((i >= 8) & (i < 12)), g, g + 8)
            cols = np.where(i < 8, tig * 4 + (i & 3), tig * 4 + (i & 3) + 16)
        else:
            rows = np.where(i < 4, tig * 4 + (i & 3), tig * 4 + (i & 3) + 16)
            cols = g + 0 * i
    else:                                        # m16n8k64, 4-bit elements (9.7.14.5.11)
        if operand == "a":
            rows = np.where((i < 8) | ((i >= 16) & (i < 24)), g, g + 8)
            cols = np.where(i < 16, tig * 8 + (i & 7), tig * 8 + (i & 7) + 32)
        else:
            rows = np.where(i < 8, tig * 8 + (i & 7), tig * 8 + (i & 7) + 32)
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


def ldmatrix(smem: np.ndarray, addresses, num: int, trans: bool, where: str = "",
             reg_major: bool = False) -> np.ndarray:
    """Execute ldmatrix.m8n8.x{num}{.trans}.b16; returns each lane's ``num`` registers, uint32
    (32, num), or (num, 32) with ``reg_major`` (row j = register j, as the register file holds it)."""
    at = f"{where}: " if where else ""
    if smem.dtype != np.uint8 or smem.ndim != 1:
        raise EmuError(f"{at}shared memory must be a 1-D uint8 array, got {smem.dtype} {smem.shape}")
    addresses = np.asarray(addresses, dtype=np.int64).reshape(-1)
    if addresses.size != 32:
        raise EmuError(f"{at}ldmatrix needs one address per lane (32), got {addresses.size}")
    if num not in (1, 2, 4):
        raise EmuError(f"ldmatrix .num must be .x1, .x2 or .x4, not x{num}")
    used = addresses[: 8 * num]
    bad = (used % 16 != 0) | (used < 0) | (used + 16 > smem.size)
    if bad.any():
        lane = int(np.argmax(bad))
        a = int(used[lane])
        if a % 16:
            raise CheckFailed(f"{at}ldmatrix row address {a:#x} from lane {lane} is not 16-byte aligned")
        raise CheckFailed(f"{at}ldmatrix row at {a:#x} from lane {lane} is outside the CTA's "
                       f"{smem.size} B of shared memory")
    # mats[m, r, c] = b16 element c of row r of matrix m
    mats = smem[used[:, None] + np.arange(16)].view("<u2").reshape(num, 64)
    lo, hi = _ldmatrix_flat(trans)
    regs = mats[:, lo].astype(np.uint32) | (mats[:, hi].astype(np.uint32) << np.uint32(16))   # (num, 32)
    return regs if reg_major else regs.T.copy()


def ldmatrix_rows(rows_b16: np.ndarray, rows: np.ndarray, num: int, trans: bool) -> np.ndarray:
    """``ldmatrix(..., reg_major=True)`` of rows already checked (16-byte aligned, inside shared
    memory): ``rows_b16`` is shared memory as rows of eight b16 elements (a view), ``rows`` the
    first 8 * num lanes' row indices into it. uint32 (num, 32). The rows are gathered with
    ``take`` and each register half with one flat ``take`` (``_ldmatrix_flat_num``), not by
    fancy indexing of a 2-D array: the same elements, half the cost."""
    mats = rows_b16.take(rows, axis=0).reshape(-1)
    lo, hi = _ldmatrix_flat_num(num, trans)
    return (mats.take(lo) | (mats.take(hi).astype(np.uint32) << _SIXTEEN)).reshape(num, 32)


_SIXTEEN = np.uint32(16)


@functools.lru_cache(maxsize=8)
def _ldmatrix_flat_num(num: int, trans: bool):
    """``_ldmatrix_flat`` for ``num`` matrices flattened: matrix j's flat index + 64 j, so
    element (j, lane) of each half is one ``take`` of the gathered rows."""
    lo, hi = _ldmatrix_flat(trans)
    base = (np.arange(num) * 64)[:, None]
    return (base + lo[None, :]).reshape(-1), (base + hi[None, :]).reshape(-1)


@functools.lru_cache(maxsize=2)
def _ldmatrix_flat(trans: bool):
    rows, cols = ldmatrix_layout(trans)
    flat = rows * 8 + cols
    return flat[:, 0].copy(), flat[:, 1].copy()


# ---- arithmetic -------------------------------------------------------------------------------

FORMATS = {16: ("bf16", "f16"), 8: ("e4m3", "e5m2", "e3m2", "e2m3", "e2m1"), 4: ("e2m1",)}
SCALE_VEC = {"1X": 1, "2X": 2, "4X": 4}
SCALE_FORMATS = ("ue8m0", "ue4m3")


def _decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    from porter.emu.units.tcgen05 import decode

    return decode(codes, fmt)


@functools.lru_cache(maxsize=16)
def _perm(shape: str, operand: str) -> np.ndarray:
    """Flat (lane, register, element) index of each matrix element, row-major: the inverse of
    fragment_layout (which covers every element exactly once)."""
    rows, cols = fragment_layout(shape, operand)
    width = 8 if operand in ("b", "c") else K_OF[shape]
    flat = (rows * width + cols).reshape(-1)
    perm = np.empty(flat.size, dtype=np.int64)
    perm[flat] = np.arange(flat.size)
    return perm


@functools.lru_cache(maxsize=16)
def _table(fmt: str, bits: int) -> np.ndarray | None:
    """float64 value of every code of ``fmt`` as the register holds it (8-bit containers
    with their padding stripped); None for 16-bit formats."""
    if bits == 16:
        return None
    codes = np.arange(1 << bits, dtype=np.uint32)
    if bits == 8:
        if fmt in ("e3m2", "e2m3"):
            codes = codes & np.uint32(0x3F)
        elif fmt == "e2m1":
            codes = (codes >> np.uint32(2)) & np.uint32(0xF)
    return _decode(codes, fmt)


@functools.lru_cache(maxsize=16)
def _perm_reg_major(shape: str, operand: str) -> np.ndarray:
    """``_perm`` for registers held register-major, (regs, 32): each matrix element's flat
    (register, lane, element) index (what the simulator's register file holds, no transpose)."""
    rows, cols = fragment_layout(shape, operand)
    width = 8 if operand in ("b", "c") else K_OF[shape]
    _, regs, per = rows.shape
    pos = ((np.arange(regs)[None, :, None] * 32 + np.arange(32)[:, None, None]) * per
           + np.arange(per)[None, None, :])
    perm = np.empty(rows.size, dtype=np.int64)
    perm[(rows * width + cols).reshape(-1)] = pos.reshape(-1)
    perm.flags.writeable = False
    return perm


def operand_values(regs, shape: str, operand: str, fmt: str, reg_major: bool = False) -> np.ndarray:
    """A (16 x K) or B (K x 8) as float64 from the warp's fragment registers: uint32 (32, regs),
    or (regs, 32) with ``reg_major`` (one row per register, as the register file holds them)."""
    if shape not in SHAPES:
        raise EmuError(f"mma.sync shape {shape!r} not simulated; use one of {', '.join(SHAPES)}")
    bits = SHAPES[shape]
    if fmt not in FORMATS[bits]:
        raise EmuError(f"mma.sync {shape}: element format {fmt!r} is not one of {', '.join(FORMATS[bits])}")
    nregs = 4 if operand == "a" else 2
    regs = np.asarray(regs, dtype=np.uint32)
    want = (nregs, 32) if reg_major else (32, nregs)
    if regs.shape != want:
        raise EmuError(f"mma.sync {shape} operand {operand}: need {want} registers, got {regs.shape}")
    k = K_OF[shape]
    perm = (_perm_reg_major if reg_major else _perm)(shape, operand)
    if bits == 16:
        codes = np.ascontiguousarray(regs).view("<u2").reshape(-1)[perm]
        if fmt == "bf16":
            vals = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32)
        else:
            vals = codes.view(np.float16)
        mat = vals.astype(np.float64)
    else:
        if bits == 8:
            codes = np.ascontiguousarray(regs).view(np.uint8).reshape(-1)
        else:
            b = np.ascontiguousarray(regs).view(np.uint8).reshape(-1)
            codes = np.stack([b & 0xF, b >> 4], axis=1).reshape(-1)      # element 2j in the low nibble
        mat = _table(fmt, bits)[codes[perm]]
    return mat.reshape((16, k) if operand == "a" else (k, 8))


def _register_values(regs: np.ndarray, perm: np.ndarray, table, bits: int, fmt: str) -> np.ndarray:
    """float64 element values, in the matrix's row-major order, of C-contiguous uint32 registers."""
    if bits == 16:                                  # every 16-bit code's value, looked up
        return _table16(fmt)[regs.view("<u2").reshape(-1)[perm]]
    b = regs.view(np.uint8).reshape(-1)
    if bits == 4:
        b = np.stack([b & 0xF, b >> 4], axis=1).reshape(-1)          # element 2j in the low nibble
    return table[b[perm]]


@functools.lru_cache(maxsize=2)
def _table16(fmt: str) -> np.ndarray:
    """float64 value of each of the 65536 bf16 / f16 codes (the conversion operand_values makes)."""
    codes = np.arange(1 << 16, dtype=np.uint32).astype(np.uint16)
    vals = (codes.astype(np.uint32) << np.uint32(16)).view(np.float32) if fmt == "bf16" else codes.view(np.float16)
    with np.errstate(invalid="ignore"):            # NaN codes are values too (built at decode, outside a run)
        out = vals.astype(np.float64)
    out.flags.writeable = False
    return out


@functools.lru_cache(maxsize=32)
def _plan(shape: str, atype: str, btype: str):
    if shape not in SHAPES:
        raise EmuError(f"mma.sync shape {shape!r} not simulated; use one of {', '.join(SHAPES)}")
    bits = SHAPES[shape]
    for fmt in (atype, btype):
        if fmt not in FORMATS[bits]:
            raise EmuError(f"mma.sync {shape}: element format {fmt!r} is not one of {', '.join(FORMATS[bits])}")
    return (bits, K_OF[shape], _perm_reg_major(shape, "a"), _perm_reg_major(shape, "b"),
            _perm_reg_major("m16n8k16", "c"), _table(atype, bits), _table(btype, bits))


def mma_registers(a_regs: np.ndarray, b_regs: np.ndarray, c_regs: np.ndarray, shape: str, atype: str,
                  btype: str) -> np.ndarray:
    """The unscaled ``mma.sync`` from register-major fragments to D's registers in one step:
    ``accumulator_regs(mma(operand_values(a), operand_values(b), accumulator(c)), reg_major)``
    with the layouts and tables planned once per form. ``*_regs``: C-contiguous uint32
    (4, 32), (2, 32), (4, 32); returns uint32 (4, 32), row j = register j of D."""
    bits, k, pa, pb, pc, ta, tb = _plan(shape, atype, btype)
    a = _register_values(a_regs, pa, ta, bits, atype).reshape(16, k)
    b = _register_values(b_regs, pb, tb, bits, btype).reshape(k, 8)
    c = c_regs.view(np.float32).reshape(-1)[pc].reshape(16, 8)
    with np.errstate(invalid="ignore", over="ignore"):
        acc = (np.einsum("mk,kn->mn", a, b) + c.astype(np.float64)).astype(np.float32)
    out = np.empty(128, dtype=np.float32)
    out[pc] = acc.reshape(-1)
    return out.view(np.uint32).reshape(4, 32)


try:                                   # einsum's own kernel, without the Python wrapper's checks
    from numpy._core.multiarray import c_einsum as _einsum
except ImportError:                    # (an older or newer numpy: the public entry computes the same)
    _einsum = np.einsum


@functools.lru_cache(maxsize=32)
def planned_step(shape: str, atype: str, btype: str):
    """``mma_registers`` as one function of the warp's A, B and C registers concatenated
    register-major (uint32 (320,): A's 4 x 32, B's 2 x 32, C's 4 x 32), for the simulator's
    hot path: the same gathers, the same float64 product (einsum) and the same float64 add
    of each D element and its C element, rounded once to f32, in fewer numpy calls (A's and
    B's codes in one gather and one table lookup when they share a format; D taken in
    register order from the product instead of scattered; no errstate, as the scheduler runs
    every instruction with numpy's warnings off). Returns uint32 (4, 32)."""
    bits, k, pa, pb, pc, ta, tb = _plan(shape, atype, btype)
    inv = np.argsort(pc)                 # register-major position -> D's row-major index
    c_words = slice(192, 320)
    if bits == 16:
        table = _table16(atype)
        if atype == btype:
            both = np.concatenate([pa, 256 + pb])      # b16 codes: A's 256, then B's from code 256 on
            na = 16 * k

            def step(x):
                v = table[x[:192].view("<u2")[both]]
                return ((_einsum("mk,kn->mn", v[:na].reshape(16, k), v[na:].reshape(k, 8)).reshape(-1)[inv]
                         + x[c_words].view(np.float32).astype(np.float64)).astype(np.float32)
                        .view(np.uint32).reshape(4, 32))
            return step
        tb16 = _table16(btype)

        def step(x):
            a = table[x[:128].view("<u2")[pa]].reshape(16, k)
            b = tb16[x[128:192].view("<u2")[pb]].reshape(k, 8)
            return ((_einsum("mk,kn->mn", a, b).reshape(-1)[inv] + x[c_words].view(np.float32).astype(np.float64))
                    .astype(np.float32).view(np.uint32).reshape(4, 32))
        return step

    def step(x):
        a = _register_values(x[:128], pa, ta, bits, atype).reshape(16, k)
        b = _register_values(x[128:192], pb, tb, bits, btype).reshape(k, 8)
        return ((_einsum("mk,kn->mn", a, b).reshape(-1)[inv] + x[c_words].view(np.float32).astype(np.float64))
                .astype(np.float32).view(np.uint32).reshape(4, 32))
    return step


@functools.lru_cache(maxsize=32)
def planned_scaled_step(shape: str, atype: str, btype: str, scale_vec: str, stype: str):
    """The block-scaled ``mma.sync`` in one function, as ``planned_step`` for the unscaled one:
    ``step(x, scale_a_data, scale_b_data, byte_a, thread_a, byte_b, thread_b)`` with ``x`` the
    concatenated A, B, C registers and the scale operands' 32 lanes (uint32), selectors already
    checked. The same values as ``accumulator_regs(mma(operand_values(a), operand_values(b),
    accumulator(c), scale_values(...a), scale_values(...b)), reg_major)``: the same operand
    lookups, the scale codes decoded by the same function (and so refused alike), each
    element times its K block's scale in the same float64 multiply on arrays of the same
    layout, the same einsum and add, D taken in register order. Returns uint32 (4, 32)."""
    if scale_vec not in SCALE_VEC or stype not in SCALE_FORMATS:
        raise EmuError(f"mma.sync block scale: scale_vec {scale_vec!r} / format {stype!r} not simulated")
    bits, k, pa, pb, pc, ta, tb = _plan(shape, atype, btype)
    inv = np.argsort(pc)
    v = SCALE_VEC[scale_vec]
    if k % v:
        raise EmuError(f"mma.sync: scales must be (16, V) and (8, V) with V | K, got V = {v}, K = {k}")
    kidx = np.arange(k) // (k // v)              # the K block of each k (np.repeat's index)
    lanes = {("a", t): scale_lanes("a", t) for t in range(2)}
    lanes.update({("b", t): scale_lanes("b", t) for t in range(4)})
    spans = np.arange(v, dtype=np.uint32)

    def scales(data, operand, byte_id, thread_id):
        word = data[lanes[(operand, thread_id)]]
        codes = (word[:, None] >> (np.uint32(8) * (np.uint32(byte_id) + spans))[None, :]) & np.uint32(0xFF)
        return _decode(codes, stype)

    def step(x, da, db, byte_a, thread_a, byte_b, thread_b):
        a = _register_values(x[:128], pa, ta, bits, atype).reshape(16, k)
        b = _register_values(x[128:192], pb, tb, bits, btype).reshape(k, 8)
        a = a * scales(da, "a", byte_a, thread_a)[:, kidx]
        b = b * scales(db, "b", byte_b, thread_b)[:, kidx].T
        return ((_einsum("mk,kn->mn", a, b).reshape(-1)[inv] + x[192:320].view(np.float32).astype(np.float64))
                .astype(np.float32).view(np.uint32).reshape(4, 32))
    return step


def accumulator(regs, reg_major: bool = False) -> np.ndarray:
    """C (16 x 8) from uint32 (32, 4) registers, or (4, 32) with ``reg_major``."""
    regs = np.ascontiguousarray(np.asarray(regs, dtype=np.uint32))
    perm = (_perm_reg_major if reg_major else _perm)("m16n8k16", "c")
    return regs.view(np.float32).reshape(-1)[perm].reshape(16, 8)


def accumulator_regs(mat, reg_major: bool = False) -> np.ndarray:
    """D's registers: uint32 (32, 4), or (4, 32) with ``reg_major`` (row j = register j)."""
    flat = np.ascontiguousarray(np.asarray(mat, dtype=np.float32)).reshape(-1)
    out = np.empty(128, dtype=np.float32)
    out[(_perm_reg_major if reg_major else _perm)("m16n8k16", "c")] = flat
    return out.view(np.uint32).reshape((4, 32) if reg_major else (32, 4))


def scale_lanes(operand: str, thread_id: int) -> np.ndarray:
    if operand == "a":
        r = np.arange(16, dtype=np.int64)
        return 4 * (r % 8) + 2 * thread_id + r // 8
    if operand == "b":
        return 4 * np.arange(8, dtype=np.int64) + thread_id
    raise EmuError(f"mma.sync scale operand {operand!r} must be 'a' or 'b'")


def check_selectors(scale_vec: str, byte_a: int, thread_a: int, byte_b: int, thread_b: int) -> None:
    """Table 37: valid selector values; anything else is undefined behaviour -> an error."""
    bytes_ok = {"1X": (0, 1, 2, 3), "2X": (0, 2), "4X": (0,)}[scale_vec]
    for name, v, ok in (("byte-id-a", byte_a, bytes_ok), ("thread-id-a", thread_a, (0, 1)),
                        ("byte-id-b", byte_b, bytes_ok), ("thread-id-b", thread_b, (0, 1, 2, 3))):
        if v not in ok:
            raise CheckFailed(f"mma.sync block_scale scale_vec::{scale_vec}: {name} = {v} is not one of "
                              f"{list(ok)} (ISA Table 37: undefined behaviour)")


def scale_values(data, operand: str, scale_vec: str, byte_id: int, thread_id: int, fmt: str) -> np.ndarray:
    if scale_vec not in SCALE_VEC or fmt not in SCALE_FORMATS:
        raise EmuError(f"mma.sync block scale: scale_vec {scale_vec!r} / format {fmt!r} not simulated")
    v = SCALE_VEC[scale_vec]
    data = np.asarray(data, dtype=np.uint32).reshape(32)
    lanes = scale_lanes(operand, thread_id)
    word = data[lanes]                                        # (16,) or (8,)
    shifts = (np.uint32(8) * (np.uint32(byte_id) + np.arange(v, dtype=np.uint32)))[None, :]
    codes = (word[:, None] >> shifts) & np.uint32(0xFF)
    return _decode(codes, fmt)


def mma(a, b, c=None, scale_a=None, scale_b=None) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    m, k = a.shape
    if b.shape != (k, 8) or m != 16:
        raise EmuError(f"mma.sync: A must be 16 x K and B K x 8, got {a.shape} and {b.shape}")
    if (scale_a is None) != (scale_b is None):
        raise EmuError("mma.sync: block scaling needs both scale_A and scale_B")
    if scale_a is not None:
        sa = np.asarray(scale_a, np.float64)
        sb = np.asarray(scale_b, np.float64)
        v = sa.shape[1]
        if sa.shape != (16, v) or sb.shape != (8, v) or k % v:
            raise EmuError(f"mma.sync: scales must be (16, V) and (8, V) with V | K, got {sa.shape}, {sb.shape}")
        a = a * np.repeat(sa, k // v, axis=1)
        b = b * np.repeat(sb, k // v, axis=1).T
    with np.errstate(invalid="ignore", over="ignore"):
        acc = np.einsum("mk,kn->mn", a, b)     # not BLAS: tiny products (see units/wgmma.mma)
        if c is not None:
            acc = acc + np.asarray(c, dtype=np.float64)
        return acc.astype(np.float32)
