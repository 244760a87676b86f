"""Loads, stores, reductions and atomics in every space porter's kernels use (PTX ISA 9.7.9).

Spaces: ``.param`` (the launch's parameter buffer), ``.const`` and ``.global`` (device
memory, bounds-checked per lane), ``.shared`` / ``.shared::cta`` (the CTA's shared
memory), ``.shared::cluster`` (any CTA of the cluster, by a ``mapa`` address) and
generic addresses (resolved through the generic windows of ``porter.emu.memory``).
Every access checks alignment to its size (vector accesses to the whole vector), as
the ISA requires. Memory ordering qualifiers (``.acquire``, ``.release``,
``.volatile``, ``.nc``, cache hints) change nothing in this sequentially consistent
machine.
"""

from __future__ import annotations

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.decode import NP, UINT, bits, type_of
from porter.emu.errors import CheckFailed, Unsupported
from porter.emu.ops.local import generic_local, local_lanes

_SPACES = ("param", "const", "global", "shared", "local")


def _space(parts: list[str]) -> str:
    for p in parts[1:]:
        head = p.split("::")[0]
        if head in _SPACES:
            return "shared_cluster" if p == "shared::cluster" else head
    return "generic"


def _vector(parts: list[str]) -> int:
    for p in parts:
        if p in ("v2", "v4", "v8"):
            return int(p[1])
    return 1


class SameBytes:
    """For the race detector (``RaceDetector.check``'s ``same``): which of a store's bytes, racing
    with an earlier unordered store, are the bytes shared memory holds already, so that no order
    of the two stores, nor any mix of their bytes, gives the location another value (PTX ISA 8
    "Memory Consistency Model": each read returns the value committed by some write). Triton's
    warp-specialised kernels have every thread of a warpgroup store the same captured scalars to
    the same words. ``values()`` gives the store's bytes, a row per lane in ``offs``' order; it
    runs only when a race is found."""

    def __init__(self, w, cta, offs: np.ndarray, nbytes: int, values):
        self.w, self.cta, self.offs, self.nbytes, self.values = w, cta, offs, nbytes, values

    def __call__(self, byte_offs: np.ndarray) -> np.ndarray:
        span = (self.offs[:, None] + np.arange(self.nbytes)).reshape(-1)
        new = np.ascontiguousarray(self.values()).view(np.uint8).reshape(-1)
        if new.size != span.size:
            return np.zeros(len(byte_offs), dtype=bool)
        differ = span[new != self.cta.smem.data[span]]      # (a byte two lanes store differently: differs)
        return np.isin(byte_offs, span) & ~np.isin(byte_offs, differ)

    def report(self, offset: int, prev: str, prev_where: str) -> None:
        w = self.w
        where = w.prog.where(w.cur)
        w.cta.launch.warn_once(("same bytes", w.cur), lambda: f"{where}: {w.name} stores the same bytes at "
                               f"0x{offset:x} as the unordered earlier store by {prev} at {prev_where}")


def _store_bytes(w, readers, u, sel):
    """A store's bytes, a row per lane (``_store_columns`` of the lanes ``sel``)."""
    cols = _store_columns(w, readers, u, sel)
    return np.array(cols).T.astype(u, copy=False)


def _track(w, cta, offs: np.ndarray, nbytes: int, write: bool, what: str, aligned: bool = True,
           rows: np.ndarray | None = None, values=None) -> None:
    """A shared-memory access as the checkers see it: the race detector (every byte of every
    lane), and for a store the generic-proxy mark the async proxy must not read past.
    ``aligned``: every offset is a multiple of ``nbytes`` (ld/st/atom check it), so the
    bytes are whole rows of ``nbytes`` and are checked and marked a row per lane; ``rows``:
    ``offs // nbytes`` when the caller has it already; ``values``: for a store, a function
    giving its bytes (``SameBytes``), called only if it races with an earlier store."""
    race = w.sched.race
    if race is None and not write:
        return
    same = SameBytes(w, cta, offs, nbytes, values) if write and values is not None and race is not None else None
    if aligned:
        if rows is None:
            rows = offs // nbytes
        if race is not None:
            race.access_rows(w, cta, offs, nbytes, write, w.prog.line(w.cur), what, rows, same)
        if write:
            mark_written_rows(cta, nbytes, rows)
        return
    span = (offs[:, None] + np.arange(nbytes)).reshape(-1)
    if race is not None:
        race.access(w, cta, span, write, w.prog.line(w.cur), what, same)
    if write:
        cta.generic_written[span] = True
        cta.generic_dirty = True


def mark_written_rows(cta, width: int, rows: np.ndarray) -> None:
    """Generic writes of the shared rows ``rows`` of ``width`` bytes (a store, a cp.async
    landing): marked until the next proxy fence."""
    _written_rows(cta, width)[rows] = True
    cta.generic_dirty = True


def _dirty(cta) -> bool:
    """Whether a generic store marked any shared byte since the CTA's last proxy fence (the
    marks are then all clear, and no async read needs its bytes looked at). An object with
    no such flag (a test's stand-in) counts as marked."""
    return getattr(cta, "generic_dirty", True)


def clear_generic_written(cta) -> None:
    """A ``fence.proxy.async`` (or ``fence.proxy.async::generic.release``): the generic
    writes so far are visible to the async proxy; the marks are cleared (a CTA with none
    set skips the pass over its shared memory)."""
    if _dirty(cta):
        cta.generic_written[:] = False
        cta.generic_dirty = False


def _written_rows(cta, width: int) -> np.ndarray:
    """``cta.generic_written`` as rows of ``width`` bytes (a view, rebuilt when the array is
    replaced: a finished CTA's is)."""
    gw = cta.generic_written
    cache = cta.__dict__.get("_written_rows")
    if cache is None or cache[0] is not gw:
        cache = cta._written_rows = (gw, {})
    r = cache[1].get(width)
    if r is None:
        r = cache[1][width] = gw[:gw.size - gw.size % width].reshape(-1, width)
    return r


def _rows_of(smem, nbytes: int, count: int) -> np.ndarray:
    """A CTA's shared memory as rows of ``count`` elements of ``nbytes`` (a view of its data,
    rebuilt when the data is replaced), so a lane's aligned vector is one row."""
    data = smem.data
    cache = smem.__dict__.get("_rows")
    if cache is None or cache[0] is not data:
        cache = smem._rows = (data, {})
    r = cache[1].get((nbytes, count))
    if r is None:
        width = nbytes * count
        r = cache[1][(nbytes, count)] = data[:data.size - data.size % width].view(_UINT_OF[nbytes]).reshape(-1, count)
    return r


_UINT_OF = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.dtype("V16")}
_OR, _MIN, _MAX = np.bitwise_or.reduce, np.minimum.reduce, np.maximum.reduce


def _shared_offsets(w, addrs: np.ndarray, total: int):
    """The offsets of the executing lanes' shared::cta access (``addrs``: theirs) when every
    one is aligned and in the executing CTA's window, else None (then the general path
    reports what is wrong): three reductions instead of the per-lane tests."""
    if not addrs.size or _OR(addrs) & (total - 1):
        return None
    sm = w.cta.smem
    a = addrs - sm.base if sm.base else addrs
    if _MIN(a) < mem.SHARED_RESERVED or _MAX(a) + total > sm.size:
        return None
    return a


def _fast_shared_lanes(w, m, addr_fn, total: int):
    """ld.shared / st.shared's fast path: (the executing lanes' offsets, from _shared_offsets:
    None sends the access down the checking path; the lanes, None when every lane of a full
    warp executes and nothing need be selected)."""
    if m is None and w.full:
        return _shared_offsets(w, addr_fn(w), total), None
    sel = w.live if m is None else m
    return _shared_offsets(w, addr_fn(w)[sel], total), sel


def _store_columns(w, readers, u, sel) -> list:
    """A store's source operands as unsigned columns of ``u``, one per vector element, of
    the lanes ``sel`` (None: all 32); an immediate is spread to every lane."""
    cols = []
    for r in readers:
        v = np.asarray(r(w))
        if v.ndim == 0:
            x = np.empty(32, dtype=v.dtype)
            x.fill(v)
            v = x
        cols.append(v.view(u) if sel is None else v.view(u)[sel])
    return cols


def check_async_read(cta, addrs: np.ndarray, what: str) -> None:
    """The async proxy (wgmma, tcgen05, TMA stores) reading shared memory that generic stores
    wrote with no ``fence.proxy.async`` since: the PTX ISA's memory consistency model gives
    no ordering between the two proxies without that fence."""
    if not _dirty(cta):
        return
    hit = cta.generic_written[np.asarray(addrs).reshape(-1)]
    if hit.any():
        addr = int(np.asarray(addrs).reshape(-1)[int(np.argmax(hit))])
        raise CheckFailed(f"{what} reads {cta.name} shared 0x{addr:x}, written by generic stores with no "
                          "fence.proxy.async since (the async proxy may not see them: PTX ISA 'Memory Consistency "
                          "Model: Proxies' and 'membar/fence')")


def check_async_read_span(cta, lo: int, hi: int, what: str) -> None:
    """``check_async_read`` of the bytes lo .. hi - 1 (a slice, no index array)."""
    if _dirty(cta) and np.count_nonzero(cta.generic_written[lo:hi]):
        check_async_read(cta, np.arange(lo, hi), what)


def check_async_read_rows(cta, addrs: np.ndarray, rows16: np.ndarray | None, what: str) -> None:
    """``check_async_read`` of ``addrs`` when they are whole 16-byte chunks ``rows16`` (chunk
    indices, in the order of ``addrs``; None: they are not): one flag row per chunk; a hit is
    reported by ``check_async_read`` on the bytes, so the message names the same address."""
    if rows16 is None or not async_read_clean(cta, rows16):
        check_async_read(cta, addrs, what)


def async_read_clean(cta, rows16: np.ndarray) -> bool:
    """True when no 16-byte chunk of ``rows16`` was written through the generic proxy since its
    last proxy fence: an async-proxy read of them needs no check (one flag row per chunk)."""
    return not _dirty(cta) or not np.count_nonzero(_written_rows(cta, 16)[rows16])


def _resolve(w, space: str, addrs: np.ndarray, nbytes: int, what: str, write: bool = False, values=None):
    """(buffer, byte offsets) for the lanes' addresses in ``space``; checked (and, for shared
    memory, shown to the race detector; ``values``: as for ``_track``)."""
    launch = w.cta.launch
    if space == "generic":
        a = addrs.astype(np.uint64)
        if not np.count_nonzero(a < mem.GLOBAL_BASE):        # (count_nonzero: cheaper than all())
            space = "global"
        elif not np.count_nonzero((a < mem.SHARED_GENERIC) | (a >= mem.SHARED_GENERIC + mem.WINDOW)):
            space, addrs = "shared", (a - np.uint64(mem.SHARED_GENERIC)).astype(np.int64)
            if np.count_nonzero((addrs >> mem.RANK_SHIFT) != w.cta.rank):   # a peer CTA's (generic mapa)
                space = "shared_cluster"
        elif not np.count_nonzero((a < mem.PARAM_GENERIC) | (a >= mem.PARAM_GENERIC + mem.WINDOW)):
            space, addrs = "param", (a - np.uint64(mem.PARAM_GENERIC)).astype(np.int64)
        elif w.prog.kernel.local and generic_local(a):          # a thread's own frame (ops/local.py)
            return local_lanes(w, a, nbytes, what)
        else:
            lane = int(np.argmax(a < mem.GLOBAL_BASE))
            raise CheckFailed(f"generic {what} at 0x{int(a[lane]):x} (lane {lane}) is in no memory window "
                              "(a null or uninitialised pointer?)")
    if space in ("global", "const"):
        return launch.gmem.heap, launch.gmem.check_lanes(addrs, nbytes, what)
    if space == "shared":
        offs = w.cta.smem.check_lanes(addrs, nbytes, what)
        _track(w, w.cta, offs, nbytes, write, what, values=values)
        return w.cta.smem.data, offs
    if space == "shared_cluster":
        a = addrs.astype(np.int64)
        ranks = (a >> mem.RANK_SHIFT) & mem.RANK_MASK
        if (ranks != ranks[0]).any():
            raise Unsupported(f"shared::cluster {what} whose lanes address several CTAs; the simulator "
                              "takes one CTA per instruction")
        peer = w.cta.peer(int(ranks[0]), w.name) if int(ranks[0]) != w.cta.rank else w.cta
        offs = peer.smem.check_lanes(a, nbytes, what)
        _track(w, peer, offs, nbytes, write, what, values=values)
        return peer.smem.data, offs
    if space == "param":
        a = addrs.astype(np.int64)
        if ((a < 0) | (a + nbytes > launch.params.size)).any():
            raise CheckFailed(f"param {what} at offset {int(a.max())} is outside the {launch.params.size}-byte "
                              "parameter buffer")
        return launch.params, a
    raise Unsupported(f"{space} memory is outside the simulator's subset")


def _access(ins, d, addr_op, regs_op):
    """What a load and a store share: type, space (a symbol base names it for a generic
    access), vector width, element bytes, the address function and the register list."""
    parts = ins.parts
    t = type_of(parts)
    space = _space(parts)
    if space == "local":
        raise d.unsupported("(local memory: a spill, which porter's kernels must not have)")
    nvec = _vector(parts)
    regs = regs_op.items if isinstance(regs_op, ptx.Vec) else (regs_op,)
    if len(regs) != nvec:
        raise d.unsupported("(vector width and register count differ)")
    addr_fn, sym_space = d.addr(addr_op, space)
    if sym_space is not None and space == "generic":
        space = sym_space
    return t, space, nvec, max(bits(t) // 8, 1), addr_fn, regs


def build_ld(ins, d):
    t, space, nvec, nbytes, addr_fn, dsts = _access(ins, d, ins.operands[1], ins.operands[0])
    writers = [d.dst(x, t) for x in dsts]
    total = nbytes * nvec
    dt = NP[t]
    what = f"load ({ins.opcode})"

    def ld(w, m):
        addrs = addr_fn(w)
        if m is None and w.full:                 # every lane: no selecting and spreading back
            mem.check_aligned(addrs, total, what)
            buf, offs = _resolve(w, space, addrs, total, what)
            vals = mem.gather(buf, offs, nbytes, nvec)
            for k, wr in enumerate(writers):
                wr(w, vals[:, k].view(dt), None)
            return
        sel = w.live if m is None else m
        a = addrs[sel]
        mem.check_aligned(a, total, what)
        buf, offs = _resolve(w, space, a, total, what)
        vals = mem.gather(buf, offs, nbytes, nvec)
        full = np.zeros((32, nvec), dtype=vals.dtype)
        full[sel] = vals
        for k, wr in enumerate(writers):
            wr(w, full[:, k].view(dt), m)
    if space != "shared":
        return ld

    def ld_shared(w, m):
        """ld.shared with every executing lane aligned and in bounds: what ``ld`` does."""
        offs, sel = _fast_shared_lanes(w, m, addr_fn, total)
        if offs is None:
            return ld(w, m)
        rows = offs // total
        if w.sched.race is not None:
            w.sched.race.access_rows(w, w.cta, offs, total, False, w.prog.line(w.cur), what, rows)
        vals = _rows_of(w.cta.smem, nbytes, nvec).take(rows, axis=0)
        if sel is not None:
            full = np.zeros((32, nvec), dtype=vals.dtype)
            full[sel] = vals
            vals = full
        for k, wr in enumerate(writers):
            wr(w, vals[:, k].view(dt), m)
    return ld_shared


def _build_st_bulk(ins, d):
    """``st.bulk{.weak}{.shared::cta} [a], size, initval`` (sm_100, PTX ISA "st.bulk"): ``size``
    bytes at ``a`` set to ``initval``, which must be 0; size a multiple of 8, ``a`` 8-aligned."""
    ops = ins.operands
    if len(ops) != 3 or not isinstance(ops[2], ptx.Imm) or int(ops[2].value) != 0:
        raise d.unsupported("(st.bulk [a], size, 0: the ISA allows only initval 0)")
    if any(p.startswith("shared::cluster") for p in ins.parts):
        raise d.unsupported("(st.bulk to shared::cta only)")
    addr_fn, _ = d.addr(ops[0], "shared")
    size_fn = d.src(ops[1], "u64")
    what = f"st.bulk ({ins.opcode})"

    def st_bulk(w, m):
        sel = w.live if m is None else m
        addrs = np.asarray(addr_fn(w))[sel]
        sizes = np.broadcast_to(np.asarray(size_fn(w)), (32,))[sel].astype(np.int64)
        if (sizes % 8).any():
            raise CheckFailed(f"{what}: size {int(sizes[np.argmax(sizes % 8 != 0)])} is not a multiple of 8")
        mem.check_aligned(addrs, 8, what)
        for a, n in zip(addrs, sizes):
            if n:
                offs = w.cta.smem.check_lanes(np.array([a]), int(n), what)
                _track(w, w.cta, offs, int(n), True, what, aligned=False)
                w.cta.smem.data[int(offs[0]):int(offs[0]) + int(n)] = 0
    return st_bulk


def build_st(ins, d):
    if ins.parts[1] == "bulk":
        return _build_st_bulk(ins, d)
    t, space, nvec, nbytes, addr_fn, srcs = _access(ins, d, ins.operands[0], ins.operands[1])
    readers = [d.src(x, t) for x in srcs]
    total = nbytes * nvec
    u = UINT[max(nbytes * 8, 8)]
    what = f"store ({ins.opcode})"

    def st(w, m):
        addrs = addr_fn(w)
        sel = w.live if m is None else m
        every = m is None and w.full             # every lane: no selecting
        a = addrs if every else addrs[sel]
        mem.check_aligned(a, total, what)
        buf, offs = _resolve(w, space, a, total, what, write=True,
                             values=lambda: _store_bytes(w, readers, u, None if every else sel))
        cols = _store_columns(w, readers, u, None if every else sel)
        # (lanes, count); np.array(...).T costs a quarter of np.stack(..., axis=1)
        mem.scatter(buf, offs, nbytes, cols[0][:, None] if len(cols) == 1 else np.array(cols).T)
    if space != "shared":
        return st

    def st_shared(w, m):
        """st.shared with every executing lane aligned and in bounds: what ``st`` does."""
        offs, sel = _fast_shared_lanes(w, m, addr_fn, total)
        if offs is None:
            return st(w, m)
        cta = w.cta
        rows = offs // total
        _track(w, cta, offs, total, True, what, True, rows, lambda: _store_bytes(w, readers, u, sel))
        cols = _store_columns(w, readers, u, sel)
        _rows_of(cta.smem, nbytes, nvec)[rows] = cols[0][:, None] if len(cols) == 1 else np.array(cols).T
    return st_shared


build_st.n_dst = 0


_RED = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
        "xor": np.bitwise_xor}


def _atomic(ins, d, returns: bool):
    parts = ins.parts
    t = type_of(parts)
    space = _space(parts)
    op = next((p for p in parts if p in _RED or p in ("exch", "cas", "inc", "dec")), None)
    if op is None or space not in ("global", "shared", "generic", "shared_cluster"):
        raise d.unsupported()
    nbytes = bits(t) // 8
    ops = ins.operands
    k = 1 if returns else 0
    dst = d.dst(ops[0], t) if returns else None
    addr_fn, _ = d.addr(ops[k], space)
    b = d.src(ops[k + 1], t)
    c = d.src(ops[k + 2], t) if op == "cas" else None
    dt = NP[t]
    what = f"atomic ({ins.opcode})"

    def atom(w, m):
        addrs = addr_fn(w)
        sel = w.live if m is None else m
        lanes = np.nonzero(sel)[0]
        a = addrs[sel]
        mem.check_aligned(a, nbytes, what)
        buf, offs = _resolve(w, space, a, nbytes, what, write=True)
        view = buf[: buf.size - buf.size % nbytes].view(dt)
        bv = np.broadcast_to(np.asarray(b(w), dtype=dt), (32,))
        cv = np.broadcast_to(np.asarray(c(w), dtype=dt), (32,)) if c is not None else None
        old = np.zeros(32, dtype=dt)
        with np.errstate(over="ignore"):
            for j, lane in enumerate(lanes):       # lanes in order: each sees the previous lanes' updates
                idx = offs[j] // nbytes
                cur = view[idx]
                old[lane] = cur
                if op == "exch":
                    new = bv[lane]
                elif op == "cas":
                    new = cv[lane] if cur == bv[lane] else cur
                elif op == "inc":
                    new = dt(0) if cur >= bv[lane] else cur + dt(1)
                elif op == "dec":
                    new = bv[lane] if (cur == 0 or cur > bv[lane]) else cur - dt(1)
                else:
                    new = _RED[op](cur, bv[lane])
                view[idx] = new
        if dst is not None:
            dst(w, old, m)
    return atom


def build_red(ins, d):
    return _atomic(ins, d, returns=False)


def build_atom(ins, d):
    return _atomic(ins, d, returns=True)


build_red.n_dst = 0

BUILDERS = {"ld": build_ld, "st": build_st, "red": build_red, "atom": build_atom}
