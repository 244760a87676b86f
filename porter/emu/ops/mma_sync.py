"""Warp-level matrix instructions: ``mma.sync`` (dense, with or without block scaling),
``ldmatrix`` and ``stmatrix`` (PTX ISA 9.7.14.5), on the fragment layouts of
``porter.emu.units.mma_sync``.

All three are ``.sync.aligned`` warp collectives: every thread of the warp must execute
the same instruction, so a diverged warp defers until its lanes meet (DEFER), and a warp
with exited or missing threads is an error. ``mma.sync`` is synchronous: it reads the
A/B/C fragments of all 32 lanes and writes D at once. ``ldmatrix`` / ``stmatrix`` of rows
that an issued, not yet landed ``cp.async`` still writes is a race and an error
(``porter.emu.ops.cp_async.check_not_in_flight``).

Forms: ``mma.sync.aligned.{m16n8k16 (.bf16/.f16), m16n8k32 .e4m3/.e5m2 (sm_89), .kind::f8f6f4 and
.kind::mxf8f6f4.block_scale.scale_vec::1X (ue8m0), m16n8k64 .kind::mxf4 /
.kind::mxf4nvf4.block_scale.scale_vec::{2X,4X} (ue8m0 / ue4m3)}.row.col.f32.*.*.f32``
(the qualifiers in any order); ``ldmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}{.shared{::cta}}.b16``
and ``stmatrix.sync.aligned.m8n8.x{1,2,4}{.trans}{.shared{::cta}}.b16``.
"""

from __future__ import annotations

import re

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.control import DEFER
from porter.emu.errors import CheckFailed, EmuError, Unsupported
from porter.emu.ops.cp_async import check_not_in_flight
from porter.emu.ops.memory import _rows_of, _shared_offsets as _aligned_offsets, _track
from porter.emu.units import mma_sync as unit

_SHAPE = re.compile(r"m(\d+)n(\d+)k(\d+)")
_NUM = {"x1": 1, "x2": 2, "x4": 4}
_KINDS = {"m16n8k16": (None,), "m16n8k32": (None, "f8f6f4", "mxf8f6f4"), "m16n8k64": ("mxf4", "mxf4nvf4")}
_ELEM_TYPES = {"bf16", "f16", "e4m3", "e5m2", "e3m2", "e2m3", "e2m1"}


def _whole_warp(w, m, where: str, what: str):
    """None when the whole warp executes; DEFER while it is diverged."""
    if m is not None and not (m == w.live).all():
        return DEFER
    if not w.live.all():
        raise CheckFailed(f"{what} is a warp collective (.sync.aligned) but only "
                          f"{int(w.live.sum())} of the warp's 32 threads are live")
    return None


def _selector(d, op, what: str):
    """fn(w, m) -> the selector's value: an immediate, or a .u16 register (CUTLASS passes the
    byte/thread ids in registers); a register must hold one value across the executing lanes."""
    if isinstance(op, ptx.Imm):
        v = int(op.value)
        return lambda w, m: v
    r = d.src(op, "u16")
    where = d.where()

    def read(w, m):
        vals = np.broadcast_to(np.asarray(r(w)), (32,))[w.live if m is None else m]
        if vals.size and (vals != vals[0]).any():
            raise Unsupported(f"{where}: {what} in {op.name} differs across the warp's lanes "
                              f"({sorted(set(int(x) for x in vals))}): the simulator takes one value per warp")
        return int(vals[0]) if vals.size else 0
    return read


def build_mma(ins, d):
    parts = ins.parts
    where = d.where(ins)
    if parts[1:3] != ["sync", "aligned"]:
        raise d.unsupported("(only mma.sync.aligned)")
    shape = next((p for p in parts if _SHAPE.fullmatch(p)), None)
    if shape not in unit.SHAPES:
        raise d.unsupported(f"(shape {shape}: the simulator has {', '.join(unit.SHAPES)})")
    if "row" not in parts or "col" not in parts or parts.index("row") > parts.index("col"):
        raise d.unsupported("(only .row.col layouts)")
    kind = next((p.split("::", 1)[1] for p in parts if p.startswith("kind::")), None)
    if kind not in _KINDS[shape]:
        raise d.unsupported(f"(kind {kind} with shape {shape})")
    block_scale = "block_scale" in parts
    scale_vec = next((p.split("::", 1)[1] for p in parts if p.startswith("scale_vec::")), None)
    if block_scale and scale_vec is None:
        if kind == "mxf8f6f4":
            scale_vec = "1X"
        elif kind == "mxf4":
            scale_vec = "2X"
        else:
            raise d.unsupported("(kind::mxf4nvf4 needs an explicit .scale_vec)")
    if kind in ("mxf8f6f4", "mxf4", "mxf4nvf4") and not block_scale:
        raise d.unsupported(f"(kind::{kind} without .block_scale)")
    if kind in (None, "f8f6f4") and (block_scale or scale_vec):
        raise d.unsupported("(block scaling needs kind::mxf8f6f4, mxf4 or mxf4nvf4)")
    types = [p for p in parts[3:] if p in ("f32", "f16", "s32", "ue8m0", "ue4m3") or p in _ELEM_TYPES]
    stype = None
    if block_scale:
        if not types or types[-1] not in unit.SCALE_FORMATS:
            raise d.unsupported("(block_scale needs a .stype of ue8m0 or ue4m3)")
        stype = types.pop()
        ok = {("mxf8f6f4", "1X", "ue8m0"), ("mxf4", "2X", "ue8m0"), ("mxf4nvf4", "2X", "ue8m0"),
              ("mxf4nvf4", "4X", "ue4m3")}
        if (kind, scale_vec, stype) not in ok:
            raise d.unsupported(f"(kind::{kind} with scale_vec::{scale_vec} and .{stype}: not in the ISA's Table 36)")
    if len(types) != 4 or types[0] != "f32" or types[3] != "f32":
        raise d.unsupported("(only f32 D and C)")
    atype, btype = types[1], types[2]
    bits = unit.SHAPES[shape]
    for t in (atype, btype):
        if t not in unit.FORMATS[bits]:
            raise d.unsupported(f"(element type .{t} with shape {shape})")
    if shape == "m16n8k16" and atype != btype:
        raise d.unsupported("(m16n8k16 needs .atype == .btype)")
    if shape == "m16n8k32" and kind is None and not {atype, btype} <= {"e4m3", "e5m2"}:
        raise d.unsupported("(m16n8k32 without .kind takes .e4m3/.e5m2 only)")
    ops = ins.operands
    n_ops = 8 if block_scale else 4
    if len(ops) != n_ops or not all(isinstance(ops[i], ptx.Vec) for i in range(4)):
        raise d.unsupported(f"(expected {n_ops} operands: d, a, b, c{' and the scale operands' if block_scale else ''})")
    dv, av, bv, cv = ops[:4]
    if [len(x.items) for x in (dv, av, bv, cv)] != [4, 4, 2, 4]:
        raise d.unsupported("(expected {4 d}, {4 a}, {2 b}, {4 c} registers)")
    d_w = [d.dst(x, "b32") for x in dv.items]
    a_r = [d.src(x, "b32") for x in av.items]
    b_r = [d.src(x, "b32") for x in bv.items]
    c_r = [d.src(x, "b32") for x in cv.items]
    if block_scale:
        sa_r, sb_r = d.src(ops[4], "b32"), d.src(ops[6], "b32")
        sel = []
        for op in (ops[5], ops[7]):
            if not isinstance(op, ptx.Vec) or len(op.items) != 2:
                raise d.unsupported("(selectors must be {byte-id, thread-id})")
            sel.append([_selector(d, x, "a scale selector") for x in op.items])
        sel_fns = [f for pair in sel for f in pair]

        def selectors(w, m):
            byte_a, thread_a, byte_b, thread_b = (f(w, m) for f in sel_fns)
            try:
                unit.check_selectors(scale_vec, byte_a, thread_a, byte_b, thread_b)
            except CheckFailed as exc:
                raise CheckFailed(f"{where}: {exc}") from None
            return byte_a, thread_a, byte_b, thread_b
        if all(isinstance(x, ptx.Imm) for op in (ops[5], ops[7]) for x in op.items):
            fixed = selectors(None, None)         # immediates: checked once, at decode
            selectors = lambda w, m: fixed        # noqa: E731
    what = f"mma.sync.{shape}"

    def reader(items, readers):
        """fn(w) -> uint32 (len(items), 32), register-major as the register file holds them:
        straight from it when every item is a 32-bit register (the common case), else through
        the operand readers."""
        if all(d.is_reg(x) and d.reg_bits[d.rid(x)] == 32 for x in items):
            ids = [d.rid(x) for x in items]
            return lambda w: np.array([w.r[i] for i in ids], dtype=np.uint32)   # (np.stack: 4x)
        return lambda w: np.stack([np.broadcast_to(np.asarray(r(w)), (32,)) for r in readers],
                                  axis=0).astype(np.uint32)

    a_get, b_get, c_get = reader(av.items, a_r), reader(bv.items, b_r), reader(cv.items, c_r)
    d_ids = ([d.rid(x) for x in dv.items] if all(d.is_reg(x) and d.reg_bits[d.rid(x)] == 32 for x in dv.items)
             else None)

    def write_d(w, rows):
        """The D registers from rows (4, 32): straight into the register file when each is a
        32-bit register (each row a register's lanes, never written in place), else through
        the operand writers."""
        if d_ids is not None:
            for j, i in enumerate(d_ids):
                if w.poisoned and i in w.poisoned:
                    w.poison_write(i)
                w.r[i] = rows[j]
        else:
            for j, wr in enumerate(d_w):
                wr(w, rows[j], None)

    step = scaled_step = None
    unit._plan(shape, atype, btype)                   # the form's layouts and tables, checked at decode
    if not block_scale:
        step = unit.planned_step(shape, atype, btype)
    else:
        scaled_step = unit.planned_scaled_step(shape, atype, btype, scale_vec, stype)
    abc_ids = None
    if all(d.is_reg(x) and d.reg_bits[d.rid(x)] == 32 for x in (*av.items, *bv.items, *cv.items)):
        abc_ids = [d.rid(x) for x in (*av.items, *bv.items, *cv.items)]

    def abc(w):
        """A, B and C's registers concatenated register-major, uint32 (320,)."""
        if abc_ids is not None:                       # straight from the register file
            regs = w.r
            x = np.concatenate([regs[i] for i in abc_ids])
            if x.dtype == np.uint32:                  # (32-bit registers are stored as uint32)
                return x
        return np.concatenate([a_get(w), b_get(w), c_get(w)], axis=None)

    def scale_data(r, w):
        return np.asarray(np.broadcast_to(np.asarray(r(w)), (32,)), dtype=np.uint32)

    def mma(w, m):
        if m is not None or not w.full:
            res = _whole_warp(w, m, where, what)
            if res is not None:
                return res
        if step is not None:                          # the common form: one planned step
            write_d(w, step(abc(w)))
            return None
        if scaled_step is not None:                   # block-scaled: one planned step too
            try:
                x = abc(w)
                byte_a, thread_a, byte_b, thread_b = selectors(w, m)
                rows = scaled_step(x, scale_data(sa_r, w), scale_data(sb_r, w), byte_a, thread_a, byte_b, thread_b)
            except EmuError as exc:
                raise CheckFailed(f"{exc}") from None
            write_d(w, rows)
            return None
        try:
            a = unit.operand_values(a_get(w), shape, "a", atype, reg_major=True)
            b = unit.operand_values(b_get(w), shape, "b", btype, reg_major=True)
            c = unit.accumulator(c_get(w), reg_major=True)
            sa = sb = None
            if block_scale:
                byte_a, thread_a, byte_b, thread_b = selectors(w, m)
                sa = unit.scale_values(np.broadcast_to(np.asarray(sa_r(w)), (32,)), "a", scale_vec, byte_a,
                                       thread_a, stype)
                sb = unit.scale_values(np.broadcast_to(np.asarray(sb_r(w)), (32,)), "b", scale_vec, byte_b,
                                       thread_b, stype)
            rows = unit.accumulator_regs(unit.mma(a, b, c, sa, sb), reg_major=True)   # (4, 32)
        except EmuError as exc:
            raise CheckFailed(f"{exc}") from None
        write_d(w, rows)
    return mma


def _shared_offsets(w, addrs: np.ndarray, space: str, where: str) -> np.ndarray:
    """shared::cta offsets of the lanes' row addresses (generic ones must point into shared)."""
    a = addrs.astype(np.int64)
    if space == "generic":
        lo, hi = mem.SHARED_GENERIC, mem.SHARED_GENERIC + mem.WINDOW
        bad = (a < lo) | (a >= hi)
        if bad.any():
            lane = int(np.argmax(bad))
            raise CheckFailed(f"generic address 0x{int(a[lane]):x} (lane {lane}) is not in "
                              "the shared window (the ISA leaves that undefined)")
        a = a - lo
    return a


def matrix_rows(w, addrs, n: int, space: str, store: bool, where: str, what: str) -> np.ndarray:
    """The shared::cta offsets of an ldmatrix / stmatrix's 16-byte rows at the first ``n``
    lanes' addresses, checked (16-byte aligned, inside shared memory, not in flight for an
    async copy) and told to the race detector (a store also marks the generic proxy)."""
    offs = _shared_offsets(w, np.asarray(addrs)[:n], space, where)
    mem.check_aligned(offs, 16, f"{what} row address")
    offs = w.cta.smem.check_lanes(offs, 16, f"{what} row")
    check_not_in_flight(w, offs, 16, what)
    _track(w, w.cta, offs, 16, store, what)
    return offs


def _fast_matrix_rows(w, addrs, n: int, space: str, store: bool, what: str):
    """``matrix_rows`` when every row address is 16-byte aligned and inside the executing CTA's
    shared memory (three reductions, ``ops.memory._shared_offsets``), else None (then
    ``matrix_rows`` reports what is wrong). The in-flight test reads the cp.async byte
    counts as 16-byte rows; a hit is reported by ``check_not_in_flight`` itself."""
    a = addrs[:n]
    if space == "generic":
        lo = mem.SHARED_GENERIC
        if int(a.min()) < lo or int(a.max()) >= lo + mem.WINDOW:
            return None
        a = a - lo
    offs = _aligned_offsets(w, a, 16)
    if offs is None:
        return None
    rows = offs // 16
    units = w.cta.units
    inflight = units.get("cp_async_inflight")
    if inflight is not None:
        r16 = units.get("_cp_async_inflight16")     # its 16-byte rows (a view, rebuilt if replaced)
        if r16 is None or r16[0] is not inflight:
            r16 = units["_cp_async_inflight16"] = (inflight, inflight[:inflight.size - inflight.size % 16].reshape(-1, 16))
        if np.count_nonzero(r16[1].take(rows, axis=0)):
            check_not_in_flight(w, offs, 16, what)
    _track(w, w.cta, offs, 16, store, what, True, rows)
    return offs, rows


def _matrix_op(ins, d, store: bool):
    parts = ins.parts
    where = d.where(ins)
    name = parts[0]
    if parts[1:3] != ["sync", "aligned"] or "m8n8" not in parts or "b16" not in parts:
        raise d.unsupported(f"(only {name}.sync.aligned.m8n8.x{{1,2,4}}{{.trans}}{{.shared}}.b16)")
    num = next((_NUM[p] for p in parts if p in _NUM), None)
    if num is None:
        raise d.unsupported("(.num must be .x1, .x2 or .x4)")
    trans = "trans" in parts
    space = "shared" if any(p.split("::")[0] == "shared" for p in parts) else "generic"
    if any(p.startswith("shared::") and p != "shared::cta" for p in parts):
        raise d.unsupported(f"({name} reads and writes only the executing CTA's shared memory: the ISA's state "
                            f"space for {name} is .shared{{::cta}})")
    regs_op, addr_op = (ins.operands[1], ins.operands[0]) if store else (ins.operands[0], ins.operands[1])
    if not isinstance(regs_op, ptx.Vec) or len(regs_op.items) != num:
        raise d.unsupported(f"(expected {num} registers)")
    addr_fn, sym_space = d.addr(addr_op, space)
    if sym_space is not None:
        space = "shared" if sym_space == "shared" else sym_space
    if space not in ("shared", "generic"):
        raise d.unsupported(f"(address in .{space})")
    n_used = 8 * num
    what = f"{name}.x{num}"
    rows, cols = unit.ldmatrix_layout(trans)
    if store:
        readers = [d.src(x, "b32") for x in regs_op.items]
    else:
        writers = [d.dst(x, "b32") for x in regs_op.items]
        # each destination a 32-bit register (stored as uint32, as the rows are): stored directly
        ids = ([d.rid(x) for x in regs_op.items]
               if all(d.is_reg(x) and d.reg_bits[d.rid(x)] == 32 for x in regs_op.items) else None)

    def run(w, m):
        if m is not None or not w.full:
            res = _whole_warp(w, m, where, what)
            if res is not None:
                return res
        smem = w.cta.smem
        if not store:
            fast = _fast_matrix_rows(w, addr_fn(w), n_used, space, False, what)
            if fast is not None:             # what unit.ldmatrix gathers, as rows of eight b16
                out = unit.ldmatrix_rows(_rows_of(smem, 2, 8), fast[1], num, trans)      # (num, 32)
                if ids is not None and not w.poisoned:
                    r = w.r
                    for j, i in enumerate(ids):
                        r[i] = out[j]            # what the writer stores: a uint32 row, never written in place
                    return None
                for j, wr in enumerate(writers):
                    wr(w, out[j], None)          # a row: contiguous, never written in place
                return None
        offs = matrix_rows(w, addr_fn(w), n_used, space, store, where, what)
        if not store:
            try:
                out = unit.ldmatrix(smem.data, np.concatenate([offs, np.zeros(32 - n_used, np.int64)]),
                                    num, trans, where, reg_major=True)
            except EmuError as exc:
                raise CheckFailed(f"{exc}") from None
            for j, wr in enumerate(writers):
                wr(w, out[j], None)              # a row: contiguous, never written in place
            return None
        # stmatrix: the inverse of ldmatrix's fragment layout, rows at the same lane addresses
        regs = np.stack([np.broadcast_to(np.asarray(r(w)), (32,)).astype(np.uint32) for r in readers], axis=0)
        halves = np.stack([regs & np.uint32(0xFFFF), regs >> np.uint32(16)], axis=2).astype(np.uint16)
        mats = np.zeros((num, 8, 8), dtype=np.uint16)
        for j in range(num):
            mats[j][rows, cols] = halves[j]
        for lane in range(n_used):
            off = int(offs[lane])
            smem.data[off:off + 16] = mats[lane // 8, lane % 8].astype("<u2").view(np.uint8)
        return None
    return run


def build_ldmatrix(ins, d):
    return _matrix_op(ins, d, store=False)


def build_stmatrix(ins, d):
    return _matrix_op(ins, d, store=True)


build_stmatrix.n_dst = 0

BUILDERS = {"mma": build_mma, "ldmatrix": build_ldmatrix, "stmatrix": build_stmatrix}
