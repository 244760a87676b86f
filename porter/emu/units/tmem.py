"""Tensor Memory (TMEM) of one CTA on sm_100a: allocation, tcgen05.ld/st and tcgen05.cp.

Pure numpy; no warps or scheduler. The lead's machine calls these with the issuing warp's
index and the operands it decoded.

API
---
``TensorMemory(where="")``
    ``cells``: ``uint32[128, 512]`` (lane, column), the raw 32-bit words.
    ``defined``: ``bool[128, 512]``, which words were written since their columns were allocated.
``alloc(warp, ncols, cta_group=1) -> int | None``
    The TMEM address (``lane << 16 | column``, lane 0) of ``ncols`` fresh columns, or ``None``
    when no aligned run of ``ncols`` columns is free (the ISA says the instruction *blocks*
    then: the caller parks the warp and retries after a dealloc).
``alloc_pair(tmem0, tmem1, warp0, warp1, ncols) -> int | None``
    ``cta_group::2``: one warp in each CTA of the pair allocates; both get the same address.
``dealloc(warp, address, ncols, cta_group=1)``; ``relinquish(warp, cta_group=1)``; ``check_exit()``
``ld(warp_id, address, shape, num) -> uint32[32, regs]`` (row = lane of the warp, column = register)
``st(warp_id, address, shape, num, values)``
``cp(address, smem, sdesc, shape, multicast=None, cta_group=1)``: shared memory -> TMEM.
``shift_down(address, cta_group=1)``: ``tcgen05.shift.down`` (rows of a 32-lane matrix, 8
    columns wide, down by one); ``shift_region(address) -> (lane0, column, ncols)``.
``read(lane, nlanes, column, ncols, what) / write(lane, column, words, what)``: checked raw
    access for the MMA unit (``porter.emu.units.tcgen05``).
``check_columns(column, ncols, what)``: raise unless every column is inside one allocation.

ISA sections followed (PTX ISA 9.0, chapter 9.7.16 "TensorCore 5th Generation Family"):

* 9.7.16.1 Tensor Memory: 128 lanes x 512 columns of 32-bit cells per CTA.
* 9.7.16.1.1 addressing: bits 31-16 lane, bits 15-0 column.
* 9.7.16.1.2 / 9.7.16.7.1 allocation: unit 32 columns, ``nCols`` a power of two in [32, 512],
  all 128 lanes of a column; ``dealloc``'s ``taddr`` "must point to a previous allocation";
  everything allocated must be deallocated before the kernel exits; no ``alloc`` after the CTA
  executed ``relinquish_alloc_permit``; "the number of columns allocated should not increase
  between any two allocations"; ``cta_group::1``: *one warp* of the CTA allocates and
  deallocates; every tcgen05 instruction of a kernel uses the same ``.cta_group``.
* 9.7.16.8.1 access restrictions: warp ``w % 4`` of a warpgroup reaches lanes
  ``32*(w%4) .. 32*(w%4)+31`` with ``tcgen05.ld/st``.
* 9.7.16.2.3 data-movement shapes and Table 47 (registers per ``.num`` and shape);
  9.7.16.2.3.1.1 ``.32x32b``: the warp's 32 lanes, ``32 * num`` bits (``num`` columns) each.
* 9.7.16.9.2 ``tcgen05.cp``: the source is the matrix the shared-memory descriptor describes;
  ``.32x128b`` needs ``.warpx4`` and is multicast to all four warps' lane quarters;
  ``cta_group::2`` writes both CTAs of the pair (the caller calls ``cp`` on both TMEMs).
* 9.7.16.9.3 ``tcgen05.shift``: the lane of ``taddr`` aligned to 32; 32-byte elements (8
  columns) of the 32-lane matrix move down one row, all rows but the last (shape ``.31x256b``,
  9.7.16.2.3). Emulation choice: the first row keeps its words (the ISA names no value for
  it); one 32-lane matrix per instruction, the one at ``taddr``'s lane (the ISA's "for a warp").

Emulation choices (the ISA leaves them open) and doubts:

* ``alloc`` takes the lowest free run aligned to ``ncols`` (the SASS is
  ``UTCATOMSWS.FIND_AND_SET.ALIGN``); a kernel must not depend on which one it gets.
* ``dealloc`` may come from any warp of the allocating CTA (the ISA states no rule tying it
  to the allocating warp; ``same_warp_dealloc=True`` asks for that stricter reading). What
  it does state stays checked: the address and column count of a live allocation.
* a lane field of 128 or more in a ``tcgen05.ld/st`` address names no TMEM lane the ISA
  defines; the warp's own lane quarter is what it reaches, so the field is read modulo 128
  (the quarter rule, which the ISA states, is checked on that).
* ``.16x64b``, ``.16x128b`` and ``.16x256b`` follow Figures 184-186, which the text only names;
  the thread maps in ``_fragment`` were checked (as facts, not code) against the value layouts
  of CUTLASS's ``SM100_TMEM_LOAD_16dp*`` copy traits: thread ``t`` serves row ``t/4`` (+8 for
  its second half of registers), ``.16x64b`` interleaves ``t%2`` over the two 8-lane halves.
  Porter emits only ``.32x32b``. ``.16x32bx2``, ``.pack::16b`` and the ``.cp`` shapes
  ``.4x256b`` and ``.64x128b`` (warp-pair halves) are ``Unsupported``.
* ``tcgen05.cp`` rows are read as a K-major operand of 8-bit elements, ``row_bytes`` wide
  (16 for ``x128b``, 32 for ``x256b``), by ``tcgen05.read_matrix``; row ``r`` goes to lane ``r``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from porter.emu.errors import CheckFailed, EmuError, Unsupported

LANES = 128
COLUMNS = 512
LANES_PER_WARP = 32

# Table 47: registers per thread for .x1; .num multiplies it.
# .16x32bx2: two 16-lane x 32-bit blocks, the second immHalfSplitoff columns after the first
_REGS_X1 = {"32x32b": 1, "16x64b": 1, "16x128b": 2, "16x256b": 4, "16x32bx2": 1}
_MAX_NUM = {"32x32b": 128, "16x64b": 128, "16x128b": 64, "16x256b": 32, "16x32bx2": 128}
_LANES_OF_SHAPE = {"32x32b": 32, "16x64b": 16, "16x128b": 16, "16x256b": 16, "16x32bx2": 16}
_NUMS = (1, 2, 4, 8, 16, 32, 64, 128)

# tcgen05.cp shapes this unit runs: rows (lanes) x bytes per row, and the multicast each needs.
_CP_SHAPES = {
    "128x256b": (128, 32, None),
    "128x128b": (128, 16, None),
    "32x128b": (32, 16, "warpx4"),
}


def _lane_quarter(warp_id: int, lane0: int, shape: str) -> tuple:
    """9.7.16.8.1: (the warp's quarter, its first lane, the shape's lanes, whether lanes
    lane0 .. lane0 + lanes - 1 lie in the quarter the warp may access)."""
    quarter = warp_id % 4
    lo, nl = LANES_PER_WARP * quarter, _LANES_OF_SHAPE[shape]
    return quarter, lo, nl, lo <= lane0 and lane0 + nl <= lo + LANES_PER_WARP


def quarter_slip(warp_id: int, address: int, shape: str):
    """For an access whose lanes lie in one quarter, but not the warp's own: (the address at the
    same lanes of the warp's own quarter, as release hardware routes it; the finding, as the
    lane check words it). None when the access is allowed, or is not such a slip (the check's
    error stands)."""
    if shape not in _LANES_OF_SHAPE:
        return None
    lane0 = (address >> 16) % LANES
    quarter, lo, nl, allowed = _lane_quarter(warp_id, lane0, shape)
    if allowed or lane0 % LANES_PER_WARP + nl > LANES_PER_WARP:
        return None
    to = lo + lane0 % LANES_PER_WARP
    return ((to << 16) | (address & 0xFFFF),
            f"warp {warp_id} (warp {quarter} of its warpgroup) may access TMEM lanes {lo}..{lo + 31} only, this "
            f"reaches lanes {lane0}..{lane0 + nl - 1}; run at lanes {to}..{to + nl - 1}")


def split_address(address: int) -> tuple[int, int]:
    """A TMEM address as (lane, column): bits 31-16 and 15-0 (ISA 9.7.16.1.1)."""
    address = int(address) & 0xFFFFFFFF
    return address >> 16, address & 0xFFFF


def make_address(lane: int, column: int) -> int:
    return (int(lane) << 16) | int(column)


@dataclass(frozen=True)
class Allocation:
    column: int
    ncols: int
    warp: int
    cta_group: int


class TensorMemory:
    """One CTA's Tensor Memory; ``where`` (e.g. "cta 1") prefixes every error message."""

    def __init__(self, where: str = "", *, same_warp_dealloc: bool = False,
                 check_undefined: bool = True) -> None:
        self.where = where
        self.cells = np.zeros((LANES, COLUMNS), dtype=np.uint32)
        self.defined = np.zeros((LANES, COLUMNS), dtype=bool)
        self.allocations: dict[int, Allocation] = {}
        self.relinquished_by: int | None = None
        self.last_alloc_ncols: int | None = None
        self.cta_group: int | None = None
        self.same_warp_dealloc = same_warp_dealloc
        self.check_undefined = check_undefined

    # ----------------------------------------------------------------- helpers
    def _at(self, what: str) -> str:
        return f"{self.where}: {what}" if self.where else what

    def _note_cta_group(self, cta_group: int, what: str) -> None:
        if cta_group not in (1, 2):
            raise EmuError(self._at(f"{what}: .cta_group::{cta_group} is not 1 or 2"))
        if self.cta_group is None:
            self.cta_group = cta_group
        elif self.cta_group != cta_group:
            raise CheckFailed(self._at(
                f"{what} uses .cta_group::{cta_group} after .cta_group::{self.cta_group}; "
                "every tcgen05 instruction of a kernel must use the same .cta_group"))

    def _owner(self, column: int) -> Allocation | None:
        for a in self.allocations.values():
            if a.column <= column < a.column + a.ncols:
                return a
        return None

    def _used(self) -> np.ndarray:
        used = np.zeros(COLUMNS, dtype=bool)
        for a in self.allocations.values():
            used[a.column:a.column + a.ncols] = True
        return used

    def free_columns(self, ncols: int) -> list[int]:
        """Aligned start columns where ``ncols`` columns are free, lowest first."""
        used = self._used()
        return [c for c in range(0, COLUMNS, ncols) if not used[c:c + ncols].any()]

    def check_columns(self, column: int, ncols: int, what: str) -> None:
        """Raise ``CheckFailed`` unless columns ``column .. column+ncols-1`` are allocated."""
        if column < 0 or column + ncols > COLUMNS:
            raise CheckFailed(self._at(
                f"{what}: TMEM columns {column}..{column + ncols - 1} outside 0..{COLUMNS - 1}"))
        # walk the allocations (a handful of disjoint runs) rather than build a column map
        first, end = column, column + ncols
        for lo, hi in sorted((a.column, a.column + a.ncols) for a in self.allocations.values()):
            if hi <= first:
                continue
            if lo > first:
                break
            first = hi
            if first >= end:
                break
        if first < end:
            raise CheckFailed(self._at(
                f"{what}: TMEM column {first} (of {column}..{column + ncols - 1}) is not "
                "allocated (access outside allocated columns)"))

    def _check_lanes(self, lane: int, nlanes: int, what: str) -> None:
        if lane < 0 or lane + nlanes > LANES:
            raise CheckFailed(self._at(
                f"{what}: TMEM lanes {lane}..{lane + nlanes - 1} outside 0..{LANES - 1}"))

    # -------------------------------------------------------------- allocation
    def alloc(self, warp: int, ncols: int, cta_group: int = 1) -> int | None:
        what = f"warp {warp}: tcgen05.alloc {ncols} columns"
        self._note_cta_group(cta_group, what)
        free = _probe(self, what, int(ncols))
        if not free:
            return None  # the ISA's tcgen05.alloc blocks until columns are freed
        self._take(free[0], int(ncols), warp, cta_group)
        return make_address(0, free[0])

    def _take(self, column: int, ncols: int, warp: int, cta_group: int) -> None:
        self.allocations[column] = Allocation(column, ncols, warp, cta_group)
        self.defined[:, column:column + ncols] = False
        self.last_alloc_ncols = ncols

    def dealloc(self, warp: int, address: int, ncols: int, cta_group: int = 1) -> None:
        lane, column = split_address(address)
        what = f"warp {warp}: tcgen05.dealloc {ncols} columns at {int(address):#x}"
        self._note_cta_group(cta_group, what)
        a = self.allocations.get(column)
        if lane != 0 or a is None:
            raise CheckFailed(self._at(f"{what}: the address is not that of an allocation"))
        if a.ncols != int(ncols):
            raise CheckFailed(self._at(f"{what}: that allocation has {a.ncols} columns"))
        if self.same_warp_dealloc and a.warp != warp:
            raise CheckFailed(self._at(f"{what}: allocated by warp {a.warp}, freed by another"))
        del self.allocations[column]
        self.defined[:, column:column + a.ncols] = False

    def relinquish(self, warp: int, cta_group: int = 1) -> None:
        self._note_cta_group(cta_group, f"warp {warp}: tcgen05.relinquish_alloc_permit")
        if self.relinquished_by is None:
            self.relinquished_by = warp

    def check_exit(self) -> None:
        """At kernel exit: raise if any columns are still allocated."""
        if self.allocations:
            a = min(self.allocations.values(), key=lambda x: x.column)
            raise CheckFailed(self._at(
                f"TMEM not deallocated at exit: columns {a.column}..{a.column + a.ncols - 1} "
                f"allocated by warp {a.warp} ({len(self.allocations)} allocation(s) left)"))

    # ---------------------------------------------------------- raw, checked
    def read(self, lane: int, nlanes: int, column: int, ncols: int, what: str) -> np.ndarray:
        self._check_read(lane, nlanes, column, ncols, what)
        return self.cells[lane:lane + nlanes, column:column + ncols].copy()

    def _check_read(self, lane: int, nlanes: int, column: int, ncols: int, what: str) -> None:
        self._check_lanes(lane, nlanes, what)
        self.check_columns(column, ncols, what)
        if self.check_undefined:
            block = self.defined[lane:lane + nlanes, column:column + ncols]
            if not block.all():
                ln, cl = np.argwhere(~block)[0]
                raise CheckFailed(self._at(
                    f"{what}: reads TMEM lane {lane + ln} column {column + cl}, never written "
                    "since its columns were allocated"))

    def write(self, lane: int, column: int, words: np.ndarray, what: str) -> None:
        words = np.asarray(words)
        nlanes, ncols = words.shape
        self._check_lanes(lane, nlanes, what)
        self.check_columns(column, ncols, what)
        self.cells[lane:lane + nlanes, column:column + ncols] = words.astype(np.uint32)
        self.defined[lane:lane + nlanes, column:column + ncols] = True

    # ------------------------------------------------------------ ld / st
    def _fragment(self, warp_id: int, address: int, shape: str, num: int, op: str, split: int = 0):
        """(lanes[32, regs], columns[32, regs]) that thread t's register r touches; ``split``:
        .16x32bx2's immHalfSplitoff (the second block's first column, from the first's)."""
        what = f"warp {warp_id}: tcgen05.{op}.{shape}.x{num} [{int(address):#x}]" + (f", {split}" if split else "")
        if shape not in _REGS_X1:
            raise Unsupported(self._at(f"{what}: shape .{shape} is not implemented"))
        if num not in _NUMS or num > _MAX_NUM[shape]:
            raise EmuError(self._at(f"{what}: .x{num} is not valid with .{shape} (Table 47)"))
        lane0, col0 = split_address(address)
        lane0 %= LANES                 # (module docstring: lane fields >= 128)
        quarter, lo, nl, allowed = _lane_quarter(warp_id, lane0, shape)
        if not allowed:
            raise CheckFailed(self._at(
                f"{what}: warp {warp_id} (warp {quarter} of its warpgroup) may access TMEM lanes "
                f"{lo}..{lo + 31} only, this reaches lanes {lane0}..{lane0 + nl - 1}"))
        lanes, cols, ncols = _fragment_map(shape, num, split)
        return what, lane0 + lanes, col0 + cols, lane0, nl, col0, ncols

    def ld(self, warp_id: int, address: int, shape: str, num: int, split: int = 0) -> np.ndarray:
        what, lanes, cols, lane0, nl, col0, ncols = self._fragment(warp_id, address, shape, num, "ld", split)
        if shape == "16x32bx2":                            # two blocks: the columns between are not read
            for c in (col0, col0 + split):
                self._check_read(lane0, nl, c, num, what)
        else:
            self._check_read(lane0, nl, col0, ncols, what)  # bounds, allocation, defined-ness
        if shape == "32x32b":                              # thread t: lane t, register r: column r
            return self.cells[lane0:lane0 + 32, col0:col0 + ncols].copy()
        return self.cells[lanes, cols]

    def st(self, warp_id: int, address: int, shape: str, num: int, values, split: int = 0) -> None:
        what, lanes, cols, lane0, nl, col0, ncols = self._fragment(warp_id, address, shape, num, "st", split)
        values = np.asarray(values)
        if values.shape != lanes.shape:
            raise EmuError(self._at(f"{what}: needs {lanes.shape} register values, got {values.shape}"))
        self._check_lanes(lane0, nl, what)
        for c, n in (((col0, num), (col0 + split, num)) if shape == "16x32bx2" else ((col0, ncols),)):
            self.check_columns(c, n, what)               # (.16x32bx2: each block, as ld checks them)
        if values.dtype.kind == "f":
            values = values.astype(np.float32).view(np.uint32)
        self.cells[lanes, cols] = values.astype(np.uint32)
        self.defined[lanes, cols] = True

    # ---------------------------------------------------------------- cp
    def cp(self, address: int, smem: np.ndarray, sdesc: int, shape: str,
           multicast: str | None = None, cta_group: int = 1) -> np.ndarray:
        """``tcgen05.cp``: copy the rows the descriptor describes; returns them (rows, bytes)."""
        from porter.emu.units.tcgen05 import read_matrix  # the descriptor decoder lives there

        what = f"tcgen05.cp.cta_group::{cta_group}.{shape}{'.' + multicast if multicast else ''} [{int(address):#x}]"
        self._note_cta_group(cta_group, what)
        if shape not in _CP_SHAPES:
            raise Unsupported(self._at(f"{what}: shape .{shape} is not implemented"))
        rows, row_bytes, needs = _CP_SHAPES[shape]
        if multicast != needs:
            raise EmuError(self._at(
                f"{what}: .{shape} needs {('.' + needs) if needs else 'no multicast qualifier'}"))
        lane0, col0 = split_address(address)
        if lane0 != 0:
            raise Unsupported(self._at(f"{what}: a lane offset ({lane0}) in the destination"))
        data = read_matrix(smem, sdesc, rows=rows, row_bytes=row_bytes, major="K", elem_bits=8)
        words = np.ascontiguousarray(data).view("<u4").reshape(rows, row_bytes // 4)
        copies = 4 if multicast == "warpx4" else 1
        for q in range(copies):
            self.write(q * LANES_PER_WARP, col0, words, what)
        return data

    # ------------------------------------------------------------- shift
    def shift_down(self, address: int, cta_group: int = 1) -> None:
        """``tcgen05.shift.down`` (ISA 9.7.16.9.3): the 32-byte elements (8 columns) of the
        32-lane matrix at ``address`` move down one row, every row but the last: row
        ``lane0 + i`` goes to ``lane0 + i + 1`` for i in 0..30 (the implicit ``.31x256b``
        shape of 9.7.16.2.3). Row ``lane0`` keeps its words (the ISA writes only the 31
        destination rows); whether a source word was ever written travels with it."""
        what = f"tcgen05.shift.cta_group::{cta_group}.down [{int(address):#x}]"
        self._note_cta_group(cta_group, what)
        lane0, col0, ncols = shift_region(address, what)
        self.check_columns(col0, ncols, what)
        rows = slice(lane0 + 1, lane0 + SHIFT_LANES)
        src = slice(lane0, lane0 + SHIFT_LANES - 1)
        cols = slice(col0, col0 + ncols)
        self.cells[rows, cols] = self.cells[src, cols].copy()
        self.defined[rows, cols] = self.defined[src, cols].copy()


SHIFT_LANES = 32          # tcgen05.shift: one 32-lane matrix (31 rows move), 256 bits wide
SHIFT_COLUMNS = 8


def shift_region(address: int, what: str = "tcgen05.shift") -> tuple[int, int, int]:
    """(lane0, column, ncols) of a ``tcgen05.shift`` at ``address``; its lane must be a
    multiple of 32 (ISA 9.7.16.9.3: "The lane of the address operand taddr must be aligned
    to 32")."""
    lane0, col0 = split_address(address)
    if lane0 % SHIFT_LANES or lane0 >= LANES:
        raise CheckFailed(f"{what}: the lane of the tcgen05.shift address ({lane0}) must be a multiple of 32 "
                          f"below {LANES}")
    return lane0, col0, SHIFT_COLUMNS


@functools.lru_cache(maxsize=64)
def _fragment_map(shape: str, num: int, split: int = 0):
    """(lanes[32, regs], columns[32, regs]) from the address, and the columns spanned, of
    thread t's register r for ``.shape.xnum`` (the ISA's Matrix fragments for tcgen05.ld/st),
    computed once per form (``split``: .16x32bx2's immHalfSplitoff)."""
    t = np.arange(32)[:, None]
    regs = _REGS_X1[shape] * num
    r = np.arange(regs)[None, :]
    if shape == "32x32b":        # thread t: lane t; register r: column r
        lanes, cols = t + 0 * r, r + 0 * t
    elif shape == "16x32bx2":    # lane t%16; column r, in the second block (threads 16..31) + split
        lanes, cols = t % 16 + 0 * r, r + (t // 16) * split
    elif shape == "16x64b":      # lane t/4 + 8*(t%2), column 2*r + (t/2)%2
        lanes, cols = t // 4 + 8 * (t % 2) + 0 * r, 2 * r + (t // 2) % 2
    elif shape == "16x128b":     # r = 2*i + h: lane t/4 + 8h, column 4*i + t%4
        lanes = t // 4 + 8 * (r % 2)
        cols = 4 * (r // 2) + t % 4
    else:                        # 16x256b, r = 4*i + 2*h + j: lane t/4 + 8h, column 8i + 2(t%4) + j
        lanes = t // 4 + 8 * ((r // 2) % 2)
        cols = 8 * (r // 4) + 2 * (t % 4) + r % 2
    for a in (lanes, cols):
        a.flags.writeable = False
    return lanes, cols, int(cols.max()) + 1


def alloc_pair(tmem0: TensorMemory, tmem1: TensorMemory, warp0: int, warp1: int,
               ncols: int) -> int | None:
    """``tcgen05.alloc.cta_group::2``: the same columns in both CTAs of the pair, or None."""
    what0 = f"warp {warp0}: tcgen05.alloc.cta_group::2 {ncols} columns"
    what1 = f"warp {warp1}: tcgen05.alloc.cta_group::2 {ncols} columns"
    tmem0._note_cta_group(2, what0)
    tmem1._note_cta_group(2, what1)
    free0 = set(_probe(tmem0, what0, int(ncols)))
    both = [c for c in _probe(tmem1, what1, int(ncols)) if c in free0]
    if not both:
        return None
    tmem0._take(both[0], ncols, warp0, 2)
    tmem1._take(both[0], ncols, warp1, 2)
    return make_address(0, both[0])


def _probe(t: TensorMemory, what: str, ncols: int) -> list[int]:
    """The rule checks of ``tcgen05.alloc``; the aligned free start columns."""
    if ncols < 32 or ncols > COLUMNS or ncols & (ncols - 1):
        raise EmuError(t._at(f"{what}: nCols must be a power of 2 in [32, 512]"))
    if t.relinquished_by is not None:
        raise CheckFailed(t._at(f"{what} after warp {t.relinquished_by} executed "
                                "tcgen05.relinquish_alloc_permit"))
    if t.last_alloc_ncols is not None and ncols > t.last_alloc_ncols:
        raise CheckFailed(t._at(f"{what} after an allocation of {t.last_alloc_ncols}: the number "
                                "of columns allocated must not increase between two allocations"))
    return t.free_columns(ncols)
