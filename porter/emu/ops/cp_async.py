"""Non-bulk asynchronous copies of sm_80: ``cp.async.{ca,cg}.shared{::cta}.global``,
``cp.async.commit_group``, ``cp.async.wait_group N``, ``cp.async.wait_all`` and
``cp.async.mbarrier.arrive{.noinc}`` (PTX ISA 9.7.9.25.3, 9.7.13.15.15). Every other
``cp.*`` form (the bulk and tensor copies) goes to ``porter.emu.ops.tma``.

The ISA makes the copy's writes visible to the executing thread only after the
``wait_group`` that covers its group (or ``wait_all``, or the mbarrier that tracks it), so
the simulator lands the bytes as late as that allows: the global source is read at issue
(bounds-checked then), the shared destination keeps its old bytes until the covering wait
(or, for copies tracked by ``cp.async.mbarrier.arrive``, until the async engine delivers
them just before the arrive-on). A missing or too-weak wait therefore reads stale data.

Groups are per thread, as the ISA says: each lane counts its own commits, and a wait
completes only the executing lanes' copies. Copies still pending when a thread exits are
landed then (the hardware would finish them; nothing can wait for them any more).

Checked: ``ldmatrix``/``stmatrix`` of bytes an issued copy has not yet landed
(``check_not_in_flight``: the copy's own thread lacks the covering wait, or another thread
reads before that wait and a barrier after it); a destination written by anything else
while its copy is in flight (compared at landing); and, with the race detector on, the
landing is the issuing warp's write at its wait, so a reader in another warp needs a
barrier after that wait. Bounds and alignment of source (src-size bytes) and destination.
"""

from __future__ import annotations

import bisect

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.errors import CheckFailed
from porter.emu.ops import tma
from porter.emu.ops.memory import _MAX, _MIN, _OR, _rows_of, mark_written_rows


class _Copy:
    """One cp.async instruction: per lane a destination offset, the bytes to land and the
    destination's bytes at issue (they must not change while the copy is in flight)."""

    __slots__ = ("pending", "group", "dst", "data", "before", "line", "warp", "distinct", "arrive_clocks")

    def __init__(self, pending, group, dst, data, before, line, warp, distinct=False):
        self.pending, self.group, self.dst, self.data = pending, group, dst, data
        self.before, self.line, self.warp = before, line, warp
        self.distinct = distinct        # the lanes' destinations are known to be distinct
        # (lanes, clock) per cp.async.mbarrier.arrive that first tracked some of its lanes: the
        # issuing warp's clock at that arrive. Wherever those lanes' bytes land (that arrive, a
        # later arrive whose completion the engine ran first, a wait_group, the warp's exit), the
        # write is ordered before that arrive's mbarrier phase, so it is stamped with that clock
        self.arrive_clocks: list = []


def inflight(cta) -> np.ndarray:
    """Per byte of the CTA's shared memory: how many issued, not yet landed cp.async write it."""
    a = cta.units.get("cp_async_inflight")
    if a is None:
        a = cta.units["cp_async_inflight"] = np.zeros(cta.smem.data.size, dtype=np.int32)
    return a


def _count(counts: np.ndarray, starts: np.ndarray, idx: np.ndarray, delta: int) -> None:
    """counts[idx] += delta for copies of one size from ``starts`` (aligned to that size, so
    two copies' bytes are disjoint unless they start alike): a plain indexed add then, the
    unbuffered np.add.at (several times slower) only when two lanes copy to one place."""
    if len(set(starts.tolist())) == starts.size:
        counts[idx] += delta
    else:
        np.add.at(counts, idx, delta)


def _count_rows(counts: np.ndarray, starts: np.ndarray, n: int, delta: int, distinct: bool = False) -> bool:
    """``_count`` of copies of ``n`` bytes at the n-aligned offsets ``starts``: the counts as
    rows of n (a view), one row per copy; np.add.at over the bytes when two copies share one.
    ``distinct``: the starts are known to differ (a subset of starts found distinct before).
    Returns whether they are distinct."""
    if distinct or len(set(starts.tolist())) == starts.size:
        counts[:counts.size - counts.size % n].reshape(-1, n)[starts // n] += delta
        return True
    np.add.at(counts, (starts[:, None] + np.arange(n)).reshape(-1), delta)
    return False


def _heap_rows(gmem, n: int) -> np.ndarray:
    """Device memory as rows of ``n`` bytes (a view, rebuilt when the heap grows into a new array)."""
    heap = gmem.heap
    cache = gmem.__dict__.get("_rows")
    if cache is None or cache[0] is not heap:
        cache = gmem._rows = (heap, {})
    r = cache[1].get(n)
    if r is None:
        r = cache[1][n] = heap[:heap.size - heap.size % n].reshape(-1, n)
    return r


def check_not_in_flight(w, offs: np.ndarray, nbytes: int, what: str) -> None:
    """An access of shared bytes that a cp.async is still writing is a race (the ISA makes the
    copy's writes visible only after the wait that covers it, and to other threads only
    after a barrier following that wait): raise naming the copy."""
    a = w.cta.units.get("cp_async_inflight")
    if a is None:
        return
    idx = np.asarray(offs, dtype=np.int64)[:, None] + np.arange(nbytes)
    hit = a[idx].any(axis=1)
    if not hit.any():
        return
    lane = int(np.argmax(hit))
    lo = int(offs[lane])
    who = ""
    for x in w.cta.warps:
        st = x.units.get("cp_async")
        for c in (st.copies if st else ()):
            over = c.pending & (c.dst < lo + nbytes) & (c.dst + c.data.shape[1] > lo)
            if over.any():
                who = (f" by {x.name} lane {int(np.argmax(over))} (the cp.async at {x.prog.file}:{c.line})"
                       + (", not yet covered by its cp.async.wait_group" if x is w
                          else ", before that thread's cp.async.wait_group and a barrier after it"))
                break
        if who:
            break
    raise CheckFailed(f"{what} of lane {lane} accesses shared bytes 0x{lo:x}..0x{lo + nbytes:x} that an "
                      f"asynchronous copy is still writing{who}")


def _land(w, c: _Copy, due: np.ndarray) -> None:
    """Write copy ``c``'s bytes for the lanes ``due`` (bool (32,)) into shared memory. For the
    race detector the write is the issuing warp's (``w``): for lanes a cp.async.mbarrier.arrive
    tracks, at its clock at that arrive (``c.arrive_clocks``), else at its clock now (the wait
    that makes the bytes visible to it). cp.async writes in the generic proxy."""
    n = c.data.shape[1]
    lanes = np.nonzero(due)[0]
    dst = c.dst[lanes]
    rows = dst // n                 # each copy is n bytes at an n-aligned offset: one row of n bytes
    race = w.sched.race
    if race is not None:
        rest = np.ones(lanes.size, dtype=bool)
        for tracked, vc in c.arrive_clocks + [(None, w.vc)]:
            sel = rest if tracked is None else rest & tracked[lanes]
            if sel.any():
                race.check_rows(w.cta, dst[sel], n, w.aid, vc, True, c.line,
                                f"the cp.async of {w.name}", "cp.async landing")
                rest = rest & ~sel
    mark_written_rows(w.cta, n, rows)
    data = _rows_of(w.cta.smem, 1, n)
    now = data[rows]
    before = c.before[lanes]
    if not np.array_equal(now, before):
        same = (now == before).all(axis=1)
        lane = int(lanes[np.argmin(same)])
        off = int(c.dst[lane])
        raise CheckFailed(f"the shared bytes 0x{off:x}..0x{off + n:x} that the cp.async at {w.prog.file}:{c.line} "
                          f"(lane {lane}) copies into were written by something else while the copy was in flight "
                          "(a race: an overlapping cp.async or store before the wait that covers it)")
    data[rows] = c.data[lanes]
    _count_rows(inflight(w.cta), dst, n, -1, c.distinct)
    c.pending = c.pending & ~due


class CpAsyncState:
    def __init__(self):
        self.committed = np.zeros(32, dtype=np.int64)    # groups committed so far, per lane
        self.copies: list[_Copy] = []

    def land(self, w, due_fn) -> None:
        """Land, per lane, every pending copy for which ``due_fn(copy) -> bool (32,)`` holds."""
        keep = []
        for c in self.copies:
            due = c.pending & due_fn(c)
            if due.any():
                _land(w, c, due)
            if c.pending.any():
                keep.append(c)
        self.copies = keep


def _state(w) -> CpAsyncState:
    st = w.units.get("cp_async")
    if st is None:
        st = w.units["cp_async"] = CpAsyncState()
        w.units.setdefault("exit_checks", []).append(_at_exit)
    return st


def _at_exit(w) -> None:
    st = w.units.get("cp_async")
    if st is not None and st.copies and not w.cta.done:
        st.land(w, lambda c: np.ones(32, dtype=bool))


def issue_rows(w, m, dst_fn, src_fn, size: int, line: int) -> bool:
    """A cp.async without src-size or ignore-src, issued in one step when every executing lane's
    copy is aligned, inside the CTA's shared memory and inside one global allocation
    (reductions instead of the per-lane tests, rows of ``size`` bytes instead of bytes): what
    the checking path records; False sends the copy down that path, which reports what is wrong."""
    every = m is None and w.full
    sel = w.live if m is None else m
    dst, src = dst_fn(w), src_fn(w)
    if not every:
        dst, src = dst[sel], src[sel]
    if not dst.size or (_OR(dst) | _OR(src)) & (size - 1):
        return False
    sm = w.cta.smem
    a = dst - sm.base                           # (a new array: the copy keeps it)
    if int(_MIN(a)) < mem.SHARED_RESERVED or int(_MAX(a)) + size > sm.size:
        return False
    gmem = w.cta.launch.gmem
    lo, hi = int(_MIN(src)), int(_MAX(src)) + size
    i = bisect.bisect_right(gmem.starts, lo) - 1
    if i < 0 or hi > gmem.ends[i]:
        return False
    got = _heap_rows(gmem, size)[(src - mem.GLOBAL_BASE) // size]
    rows = a // size
    now = _rows_of(sm, 1, size)[rows]
    if every:
        data, before, full_dst = got, now, a
    else:
        data = np.zeros((32, size), dtype=np.uint8)
        before = np.zeros((32, size), dtype=np.uint8)
        full_dst = np.zeros(32, dtype=np.int64)
        data[sel], before[sel], full_dst[sel] = got, now, a
    st = _state(w)
    distinct = _count_rows(inflight(w.cta), a, size, 1)
    st.copies.append(_Copy(sel.copy(), st.committed.copy(), full_dst, data, before, line, w, distinct))
    w.sched.counters["cp_async"] = w.sched.counters.get("cp_async", 0) + 1
    return True


def _copy(ins, d):
    parts = ins.parts
    if "shared" not in [p.split("::")[0] for p in parts] or "global" not in parts:
        raise d.unsupported("(cp.async copies global -> shared only)")
    if any(p.startswith("shared::") and p != "shared::cta" for p in parts):
        raise d.unsupported("(destination must be the CTA's own shared memory)")
    ops = list(ins.operands)
    hint = "L2::cache_hint" in parts
    if len(ops) < 3:
        raise d.unsupported("(expected [dst], [src], cp-size)")
    if not isinstance(ops[2], ptx.Imm):
        raise d.unsupported("(cp-size must be an integer constant)")
    size = int(ops[2].value)
    if size not in (4, 8, 16):
        raise d.unsupported(f"(cp-size {size}: must be 4, 8 or 16)")
    if parts[2] == "cg" and size != 16:
        raise d.unsupported("(cp.async.cg needs cp-size 16)")
    rest = ops[3:]
    if hint:
        if not rest:
            raise d.unsupported("(.L2::cache_hint needs a cache-policy operand)")
        rest = rest[:-1]                             # the policy: a hint only
    if len(rest) > 1:
        raise d.unsupported("(too many operands)")
    src_size_fn = ignore_fn = None
    if rest:
        op = rest[0]
        if d.is_reg(op) and d.reg_bits[d.rid(op)] == 1:
            ignore_fn = d.src(op, "pred")
        else:
            src_size_fn = d.src(op, "u32")
    dst_fn, dst_sym = d.addr(ops[0], "shared")
    src_fn, src_sym = d.addr(ops[1], "global")
    if dst_sym not in (None, "shared") or src_sym not in (None, "global"):
        raise d.unsupported("(operand symbols in the wrong state space)")
    what = f"cp.async of {size} B"
    cols = np.arange(size, dtype=np.int64)
    line = ins.line

    plain = src_size_fn is None and ignore_fn is None

    def cp_async(w, m):
        if plain and issue_rows(w, m, dst_fn, src_fn, size, line):
            return
        sel = w.live if m is None else m
        lanes = np.nonzero(sel)[0]
        dst = np.asarray(dst_fn(w)).astype(np.int64)[sel]
        src = np.asarray(src_fn(w)).astype(np.int64)[sel]
        mem.check_aligned(dst, size, f"{what} destination")
        mem.check_aligned(src, size, f"{what} source")
        dst = w.cta.smem.check_lanes(dst, size, f"{what} destination")     # offsets from here on
        n = np.full(lanes.size, size, dtype=np.int64)
        if src_size_fn is not None:
            n = np.broadcast_to(np.asarray(src_size_fn(w)), (32,)).astype(np.int64)[sel]
            if (n > size).any():
                lane = int(lanes[np.argmax(n > size)])
                raise CheckFailed(f"src-size {int(n.max())} exceeds cp-size {size} "
                                  f"(lane {lane}; undefined behaviour)")
        if ignore_fn is not None:
            n = np.where(np.broadcast_to(np.asarray(ignore_fn(w)), (32,))[sel], 0, n)
        data = np.zeros((32, size), dtype=np.uint8)
        reading = n > 0
        if reading.any():
            gmem = w.cta.launch.gmem
            # bounds: only the src-size bytes are read
            sizes = (size,) if src_size_fn is None and ignore_fn is None else np.unique(n[reading])
            for nbytes in sizes:
                pick = n == nbytes
                offs = gmem.check_lanes(src[pick].astype(np.uint64), int(nbytes), f"{what} source")
                got = gmem.heap[offs[:, None] + cols[None, :int(nbytes)]]
                data[lanes[pick], :int(nbytes)] = got
        st = _state(w)
        full_dst = np.zeros(32, dtype=np.int64)
        full_dst[sel] = dst
        idx = dst[:, None] + cols[None, :]
        smem = w.cta.smem.data
        before = np.zeros((32, size), dtype=np.uint8)
        before[sel] = smem[idx]
        _count(inflight(w.cta), dst, idx.reshape(-1), 1)
        st.copies.append(_Copy(sel.copy(), st.committed.copy(), full_dst, data, before, line, w))
        w.sched.counters["cp_async"] = w.sched.counters.get("cp_async", 0) + 1
    return cp_async


def _commit(ins, d):
    if ins.operands:
        raise d.unsupported("(cp.async.commit_group takes no operands)")

    def commit(w, m):
        sel = w.live if m is None else m
        st = _state(w)
        st.committed = st.committed + sel
    return commit


def _wait(ins, d, all_: bool):
    if all_:
        if ins.operands:
            raise d.unsupported("(cp.async.wait_all takes no operands)")
        n = 0
    else:
        if len(ins.operands) != 1 or not isinstance(ins.operands[0], ptx.Imm):
            raise d.unsupported("(cp.async.wait_group N: N must be an integer constant)")
        n = int(ins.operands[0].value)
        if n < 0:
            raise d.unsupported("(negative N)")

    def wait(w, m):
        sel = w.live if m is None else m
        st = _state(w)
        if all_:                                    # = commit_group; wait_group 0
            st.committed = st.committed + sel
        limit = st.committed - n
        st.land(w, lambda c: sel & (c.group < limit))
    return wait


def _mbarrier_arrive(ins, d):
    """cp.async.mbarrier.arrive{.noinc}.shared{::cta}.b64 [addr]: an arrive-on the mbarrier
    once every prior cp.async of the executing thread has completed. Without .noinc the
    pending count is first incremented, so the async arrive does not count against init's."""
    from porter.emu.ops.sync import _barrier_at

    parts = ins.parts
    where = d.where(ins)
    if "b64" not in parts or any(p.startswith("shared::") and p != "shared::cta" for p in parts):
        raise d.unsupported("(only .shared{::cta}.b64)")
    noinc = "noinc" in parts
    addr_fn, _ = d.addr(ins.operands[0], "shared")

    def arrive(w, m):
        sel = w.live if m is None else m
        st = _state(w)
        addrs = np.asarray(addr_fn(w)).astype(np.int64)
        for lane in np.nonzero(sel)[0]:
            bar = _barrier_at(w, int(addrs[lane]), where)
            if not noinc:
                bar._require_init("cp.async.mbarrier.arrive")
                bar.pending += 1
            tracked = [(c, c.pending & (np.arange(32) == lane)) for c in st.copies]
            tracked = [(c, t) for c, t in tracked if t.any()]
            race = w.sched.race
            clock = w.vc.copy() if race is not None else None
            if clock is not None:
                for c, t in tracked:
                    new = t.copy()
                    for seen, _ in c.arrive_clocks:
                        new &= ~seen
                    if new.any():
                        c.arrive_clocks.append((new, clock))

            def complete(w=w, bar=bar, tracked=tracked, lane=int(lane), clock=clock):
                if w.cta.done:
                    return
                for c, t in tracked:
                    if c.pending[lane]:
                        _land(w, c, t)
                if clock is not None:
                    w.sched.race.release_clock(clock, bar)
                st.copies = [c for c in st.copies if c.pending.any()]
                bar.arrive(1, f"cp.async.mbarrier.arrive of {w.name} lane {lane}")
            w.sched.engine.submit(w.sched.round, complete, f"cp.async.mbarrier.arrive {bar.where}")
    return arrive


def build_cp(ins, d):
    parts = ins.parts
    if len(parts) >= 3 and parts[1] == "async":
        third = parts[2]
        if third in ("ca", "cg"):
            return _copy(ins, d)
        if third == "commit_group":
            return _commit(ins, d)
        if third == "wait_group":
            return _wait(ins, d, False)
        if third == "wait_all":
            return _wait(ins, d, True)
        if third == "mbarrier" and len(parts) > 3 and parts[3] == "arrive":
            return _mbarrier_arrive(ins, d)
    return tma.build_cp(ins, d)


build_cp.n_dst = 0

BUILDERS = {"cp": build_cp}
