"""Running calls of linked ``.func`` functions (``porter.emu.link`` lays out the code; PTX ISA
9.7.12.5 "call", 9.7.12.6 "ret").

Each warp that calls keeps a call stack per lane (``CallStack`` in ``warp.units``): the lane's
depth and, per depth, the pc to return to. Lanes of a warp may be at different depths and in
different functions (a divergent call: each lane group carries its own pc); a ``ret`` sends each
lane to its own return pc, splitting the group when they differ, and the warp reconverges where
the pcs meet again. A recursive function's registers are saved per lane at each call and restored
at its return (references to the immutable register arrays: cheap). A call that would open more
than ``link.CALL_DEPTH_LIMIT`` nested calls stops the run with one line (runaway recursion).
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.control import HANDLED
from porter.emu.errors import CallStackOverflow, Unsupported
from porter.emu.ops.control import guarded_lanes

LANES = np.arange(32)


class CallStack:
    """Per lane: the call depth and each open call's return pc (rows grow on demand)."""

    def __init__(self):
        self.depth = np.zeros(32, dtype=np.int64)
        self.ret = np.zeros((8, 32), dtype=np.int64)
        self.saves: dict[int, dict[int, np.ndarray]] = {}    # depth -> register id -> saved lane values
        self.frames: dict[int, dict[int, np.ndarray]] = {}   # depth -> .local offset -> saved (lane, byte)

    def push(self, sel: np.ndarray, ret_pc: int) -> None:
        top = int(self.depth[sel].max())
        if top >= self.ret.shape[0]:
            self.ret = np.concatenate([self.ret, np.zeros_like(self.ret)])
        self.ret[self.depth[sel], LANES[sel]] = ret_pc
        self.depth[sel] += 1

    def save(self, w, sel: np.ndarray, ids: list[int]) -> None:
        for k in np.unique(self.depth[sel]):
            lk = sel & (self.depth == k)
            frame = self.saves.setdefault(int(k), {})
            for i in ids:
                prev = frame.get(i)
                frame[i] = w.r[i] if prev is None else np.where(lk, w.r[i], prev)

    def save_frame(self, w, sel: np.ndarray, spans, frame: int) -> None:
        """Keep the selected lanes' bytes of ``spans`` ((offset, size) in the thread's local
        frame: the callee's .local variables) at their current depth, as save does registers."""
        from porter.emu.ops.local import _buffer

        buf = _buffer(w, frame)
        base = (w.index * 32 + LANES) * frame
        for k in np.unique(self.depth[sel]):
            lk = sel & (self.depth == k)
            saved = self.frames.setdefault(int(k), {})
            for off, size in spans:
                now = buf[(base + off)[:, None] + np.arange(size)]
                prev = saved.get(off)
                saved[off] = now if prev is None else np.where(lk[:, None], now, prev)

    def restore_frame(self, w, sel: np.ndarray, spans, frame: int) -> None:
        """After the pop: the selected lanes' .local bytes of ``spans`` as saved at their depth."""
        from porter.emu.ops.local import _buffer

        buf = _buffer(w, frame)
        base = (w.index * 32 + LANES) * frame
        for k in np.unique(self.depth[sel]):
            lk = sel & (self.depth == k)
            saved = self.frames.get(int(k), {})
            lanes = np.nonzero(lk)[0]
            for off, size in spans:
                if off in saved:
                    buf[(base[lanes] + off)[:, None] + np.arange(size)] = saved[off][lanes]

    def restore(self, w, sel: np.ndarray, ids: list[int]) -> None:
        """After the pop: each selected lane's registers as saved at its (now current) depth."""
        for k in np.unique(self.depth[sel]):
            lk = sel & (self.depth == k)
            frame = self.saves.get(int(k), {})
            for i in ids:
                if i in frame:
                    w.r[i] = np.where(lk, frame[i], w.r[i])


def _frame_spans(kernel, info) -> tuple[list, int]:
    """((offset, size) of each .local variable of a recursive function in the thread's frame,
    the frame's size): the bytes one activation keeps across a recursive call."""
    if not info.recursive or not getattr(info, "local", ()):
        return [], 0
    from porter.emu.ops.local import frame_layout

    offs, frame = frame_layout(kernel)
    sizes = {v.name: max(v.size, 1) for v in kernel.local}
    return [(offs[n], sizes[n]) for n in info.local if n in offs], frame


def _stack(w) -> CallStack:
    st = w.units.get("calls")
    if st is None:
        st = w.units["calls"] = CallStack()
    return st


def _guard(ins, d):
    if ins.guard is None:
        return None, False
    return d.rid(ptx.Reg(ins.guard)), ins.guard_neg


def _replace_group(w, m, new: list) -> None:
    """The executing lane group (all live lanes of a converged warp) becomes groups ``new``."""
    if w.converged:
        w.groups = new
        w.converged = False
    else:
        i = next(k for k, g in enumerate(w.groups) if g is w.gi)
        w.groups[i:i + 1] = new
    w.merge()


def _expand(formal) -> list[tuple[str, str]]:
    """(register, type) of a formal parameter: itself, or the b8 registers of an aggregate."""
    name, typ, nbytes = formal
    return [(name, typ)] if nbytes is None else [(r, "b8") for r in ptx.byte_regs(name, nbytes)]


def _actual(op, formal, d, fn: str) -> list[tuple[object, str]]:
    """The operands a call passes for one formal parameter (an aggregate slot: its bytes)."""
    name, typ, nbytes = formal
    aggs = getattr(d.kernel, "aggregates", {})
    have = aggs.get(op.name) if isinstance(op, ptx.Reg) else None
    if nbytes is None and have is None:
        return [(op, typ)]
    if nbytes is not None and have == nbytes:
        return [(ptx.Reg(r), "b8") for r in ptx.byte_regs(op.name, nbytes)]
    raise Unsupported(f"{d.where()}: call of {fn}: {op} ({'a ' + str(have) + '-byte array' if have else 'a scalar'}) "
                      f"passed for {name.split('@')[0]} ({'a ' + str(nbytes) + '-byte array' if nbytes else typ}): "
                      "ptxas refuses the mismatch")


def build_func_call(ins, d):
    rets, fn, args = ins.operands[:3]
    linked = d.kernel.link
    info = linked.funcs[fn.name]
    if len(args.items) != len(info.params) or len(rets.items) != len(info.rets):
        raise Unsupported(f"{d.where(ins)}: call of {fn.name} with {len(rets.items)} return value(s) and "
                          f"{len(args.items)} argument(s), but .func {fn.name} ({d.file}:{info.line}) has "
                          f"{len(info.rets)} and {len(info.params)} (ptxas refuses the mismatch)")
    readers, writers = [], []
    for a, formal in zip(args.items, info.params):
        for (ra, ta), (rf, tf) in zip(_actual(a, formal, d, fn.name), _expand(formal)):
            readers.append(d.src(ra, tf))
            writers.append(d.dst(ptx.Reg(rf), tf))
    save_ids = [d.reg_index[r] for r in info.regs] if info.recursive else []
    spans, frame = _frame_spans(d.kernel, info)
    entry, limit, name = info.entry, linked.limit, fn.name
    g, neg = _guard(ins, d)
    where = d.where(ins)

    def call(w, m):
        group, sel = guarded_lanes(w, m, g, neg)
        if sel is None:
            return None
        st = _stack(w)
        if int(st.depth[sel].max()) >= limit:
            lane = int(np.argmax(sel & (st.depth >= limit)))
            raise CallStackOverflow(f"{where}: {w.name} lane {lane}: runaway recursion: the call of {name} would open "
                                    f"more than {limit} nested calls (the simulator's call-depth limit; a device's "
                                    "stack overflows sooner)")
        vals = [r(w) for r in readers]          # (read before a recursive call overwrites them)
        if save_ids:
            st.save(w, sel, save_ids)
        if spans:
            st.save_frame(w, sel, spans, frame)
        whole = sel is group
        for wr, v in zip(writers, vals):
            wr(w, v, m if whole else sel)
        st.push(sel, w.cur + 1)
        if whole or sel.tobytes() == group.tobytes():
            return entry
        w.set_pcs(m, entry, w.cur, sel)
        return HANDLED
    call.handles_guard = True
    return call


build_func_call.n_dst = 0


def build_func_ret(ins, d):
    """``ret`` in a linked function: each lane back to its call site, with the return values."""
    linked = d.kernel.link
    info = linked.funcs[ins.func]
    ret_readers = [d.src(ptx.Reg(r), t) for formal in info.rets for r, t in _expand(formal)]
    site_writers = {}
    sites = list(linked.sites.items()) + [(pc, x) for pc, xs in linked.indirect.items() for x in xs]
    for pc, site in sites:
        if site.callee == info.name:
            site_writers[pc] = [d.dst(op, t) for a, formal in zip(site.rets, info.rets)
                                for op, t in _actual(a, formal, d, info.name)]
    save_ids = [d.reg_index[r] for r in info.regs] if info.recursive else []
    spans, frame = _frame_spans(d.kernel, info)
    g, neg = _guard(ins, d)
    where = d.where(ins)

    def fret(w, m):
        group, sel = guarded_lanes(w, m, g, neg)
        if sel is None:
            return None
        st = w.units.get("calls")
        if st is None or np.count_nonzero(st.depth[sel] <= 0):
            raise Unsupported(f"{where}: {w.name}: ret of .func {info.name} reached by lanes with no open call")
        vals = [r(w) for r in ret_readers]
        st.depth[sel] -= 1
        rp = st.ret[np.maximum(st.depth, 0), LANES]
        if save_ids:
            st.restore(w, sel, save_ids)
        if spans:
            st.restore_frame(w, sel, spans, frame)
        targets = np.unique(rp[sel])
        whole = sel.tobytes() == group.tobytes()
        if len(targets) == 1 and whole:
            t = int(targets[0])
            for wr, v in zip(site_writers[t], vals):
                wr(w, v, m)
            return t
        new = []
        for t in targets:
            lm = sel & (rp == t)
            for wr, v in zip(site_writers[int(t)], vals):
                wr(w, v, lm)
            new.append([int(t), lm, False])
        if not whole:
            new.append([w.cur + 1, group & ~sel, False])
        _replace_group(w, m, new)
        return HANDLED
    fret.handles_guard = True
    return fret


def build_end(ins, d):
    """The end marker after a linked body: reached only by code that falls off its end."""
    what = ins.end_of
    file = d.file

    def end(w, m):
        raise Unsupported(f"{file}: {w.name} ran past the end of {what} (no ret/exit: the simulator needs one)")
    return end


def _byte_access(ins, d, regs_op, bytes_op):
    from porter.emu.decode import UINT, bits, type_of
    t = type_of(ins.parts)
    nvec = next((int(p[1]) for p in ins.parts if p in ("v2", "v4")), 1)
    vals = regs_op.items if isinstance(regs_op, ptx.Vec) and nvec > 1 else (regs_op,)
    if len(vals) != nvec:
        raise d.unsupported("(vector width and register count differ)")
    width = max(bits(t) // 8, 1)
    byte_ids = [d.rid(r) for r in bytes_op.items]
    return t, width, vals, byte_ids, UINT[width * 8]


def build_ld_param_bytes(ins, d):
    """``ld.param{.vN}.T d, [slot+off]`` on a byte-array .param (a by-value struct): the bytes
    the address covers (b8 registers), little-endian, as type T."""
    from porter.emu.decode import NP
    t, width, vals, byte_ids, u = _byte_access(ins, d, ins.operands[0], ins.operands[1])
    writers = [d.dst(v, t) for v in vals]
    dt = NP[t]
    shifts = [u(8 * k) for k in range(width)]

    def ld(w, m):
        for j, wr in enumerate(writers):
            acc = np.zeros(32, dtype=u)
            for k in range(width):
                acc = acc | (w.r[byte_ids[j * width + k]].astype(u) << shifts[k])
            wr(w, acc.view(dt) if dt != u else acc, m)
    return ld


def build_st_param_bytes(ins, d):
    """``st.param{.vN}.T [slot+off], v`` on a byte-array .param: v's bytes into its b8 registers."""
    from porter.emu.decode import NP
    t, width, vals, byte_ids, u = _byte_access(ins, d, ins.operands[1], ins.operands[0])
    readers = [d.src(v, t) for v in vals]
    dt = NP[t]
    shifts = [u(8 * k) for k in range(width)]
    mask = u(0xFF)

    def st(w, m):
        for j, rd in enumerate(readers):
            v = np.broadcast_to(np.asarray(rd(w), dtype=dt), (32,)).view(u)
            for k in range(width):
                i = byte_ids[j * width + k]
                b = ((v >> shifts[k]) & mask).astype(np.uint8)
                w.r[i] = b if m is None else np.where(m, b, w.r[i])
    return st


build_st_param_bytes.n_dst = 0


def build_indirect_call(ins, d):
    """``call (rets), %rd, (args), proto;`` (PTX ISA 9.7.12.5 "call": an indirect call through a
    function address, with a ``.callprototype`` or ``.calltargets`` after the arguments): each
    lane calls the function at its address; lanes with different targets split. The address must
    be one ``mov.u64 %rd, f`` gave for a linked function of the call's arity."""
    rets, fn, args = ins.operands[:3]
    linked = d.kernel.link
    pc = next(i for i, x in enumerate(d.kernel.code) if x is ins)
    cands = {}
    for site in linked.indirect.get(pc + 1, []):
        info = linked.funcs[site.callee]
        readers, writers = [], []
        for a, formal in zip(args.items, info.params):
            for (ra, ta), (rf, tf) in zip(_actual(a, formal, d, info.name), _expand(formal)):
                readers.append(d.src(ra, tf))
                writers.append(d.dst(ptx.Reg(rf), tf))
        save_ids = [d.reg_index[r] for r in info.regs] if info.recursive else []
        cands[linked.address_of(info.name)] = (info.name, info.entry, readers, writers, save_ids,
                                               _frame_spans(d.kernel, info))
    raddr = d.src(fn, "u64")
    limit = linked.limit
    g, neg = _guard(ins, d)
    where = d.where(ins)
    arity = f"{len(args.items)} argument(s) and {len(rets.items)} return value(s)"

    def icall(w, m):
        group, sel = guarded_lanes(w, m, g, neg)
        if sel is None:
            return None
        addr = np.broadcast_to(np.asarray(raddr(w)), (32,))
        targets = np.unique(addr[sel])
        for a in targets:
            if int(a) not in cands:
                lane = int(np.argmax(sel & (addr == a)))
                raise Unsupported(f"{where}: {w.name} lane {lane}: indirect call of address 0x{int(a):x}, which is no "
                                  f"function of the module taking {arity}")
        st = _stack(w)
        if int(st.depth[sel].max()) >= limit:
            lane = int(np.argmax(sel & (st.depth >= limit)))
            raise CallStackOverflow(f"{where}: {w.name} lane {lane}: runaway recursion: the indirect call would open "
                                    f"more than {limit} nested calls (the simulator's call-depth limit; a device's "
                                    "stack overflows sooner)")
        new = []
        for a in targets:
            name, entry, readers, writers, save_ids, (spans, frame) = cands[int(a)]
            lt = sel & (addr == a)
            vals = [r(w) for r in readers]
            if save_ids:
                st.save(w, lt, save_ids)
            if spans:
                st.save_frame(w, lt, spans, frame)
            for wr, v in zip(writers, vals):
                wr(w, v, lt)
            st.push(lt, w.cur + 1)
            new.append([entry, lt, False])
        whole = sel.tobytes() == group.tobytes()
        if len(new) == 1 and whole:
            return new[0][0]
        if not whole:
            new.append([w.cur + 1, group & ~sel, False])
        _replace_group(w, m, new)
        return HANDLED
    icall.handles_guard = True
    return icall


build_indirect_call.n_dst = 0
