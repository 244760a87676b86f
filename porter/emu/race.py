"""A shared-memory race detector with vector clocks (happens-before, as in FastTrack).

Agents are the launch's warps (a warp's lanes run in lock step here, so a warp is one
agent). Each warp carries a vector clock; synchronisation moves clocks:

* mbarrier: an arrive (and a TMA's complete-tx, with the issuing warp's clock at issue)
  releases into the barrier's current phase; the phase's completion publishes it; a
  successful ``try_wait`` acquires it.
* named barriers (``bar.sync`` / ``bar.arrive``) and ``barrier.cluster``: every arrival
  releases into the barrier's phase, every waiter acquires the completed phase.

Every shared-memory byte keeps its last write and its last read as (warp, clock, PTX
line). A write races with an earlier write or read, and a read with an earlier write,
when that access is not ordered before it: its warp's clock at the access is beyond what
the accessing warp has acquired from it. Asynchronous writes (TMA, bulk copies) are
checked when they land, with the issuing warp's clock from issue time; wgmma operand
reads at issue, and recorded again where they end: the ``wgmma.wait_group`` that completes the
operation (``ops.wgmma``: as a read of the warp's wgmma completion, an agent of its own whose
clock a warp acquires by completing the operation), so a write must be ordered after that wait,
not only after the issue.

A store that races only with earlier stores of the very bytes it writes (the location holds
them already) leaves no value undefined, so it is a warning, once per instruction, not a race
(``check``'s ``same``: ``ops.memory.SameBytes``).

Limits (v1): one last reader per byte is kept, so of two unordered readers only the later
is checked against a later write; accesses within one warp are program-ordered; global
memory is not checked.
"""

from __future__ import annotations

import numpy as np

from porter.emu.errors import CheckFailed


# A byte's last write and last read are each one int64 "epoch": (agent + 1) << AGENT_SHIFT
# | the agent's clock at the access, 0 for none. One gather per kind then decides a whole
# access (see RaceDetector.check); the PTX lines are kept beside, read only for a report.
AGENT_SHIFT = 40
CLOCK_MASK = (1 << AGENT_SHIFT) - 1
_NEVER = np.iinfo(np.int64).max      # a clock no access exceeds: "ordered" (own agent, no agent)


def _any_beyond(e: np.ndarray, limit: np.ndarray) -> bool:
    """Whether any epoch of ``e`` (a shadow slice) races: ``e > limit[e >> AGENT_SHIFT]``
    somewhere. The usual slice was last touched by one agent (a TMA box its producer
    landed, a stage its consumer read): then the largest epoch decides (every epoch has
    that agent's field, so the largest clock is the one to test), two reductions instead
    of a gather over the slice; anything else takes the element-wise test."""
    hi, lo = int(e.max()), int(e.min())
    if hi >> AGENT_SHIFT == lo >> AGENT_SHIFT:
        return hi > int(limit[hi >> AGENT_SHIFT])
    return bool(np.count_nonzero(e > limit[e >> AGENT_SHIFT]))


# After the bound test fails for an agent's access, its next accesses with a new limit or
# shadow version skip it this many times (where warps keep writing past each other's limits,
# as a decode megakernel's reductions do, the bound rarely holds and its test is pure cost).
_QUIET_BACKOFF = 8


def _grown(top: np.ndarray, size: int) -> np.ndarray:
    """A per-agent bound array (Shadow.w_top / r_top) padded with zeros to ``size`` agents + 1."""
    return np.concatenate([top, np.zeros(size - top.size, dtype=np.int64)])


class Shadow:
    """Per byte of one CTA's shared memory: the last write and the last read."""

    def __init__(self, size: int):
        self.w_epoch = np.zeros(size, dtype=np.int64)
        self.w_line = np.zeros(size, dtype=np.int32)
        self.r_epoch = np.zeros(size, dtype=np.int64)
        self.r_line = np.zeros(size, dtype=np.int32)
        self._rows: dict[int, tuple] = {}
        # By agent + 1: the largest epoch that agent ever stored in w_epoch / r_epoch, an upper
        # bound of what the arrays hold of it (a write's zeroing of r_epoch only lowers them);
        # ``version`` counts the changes of either. ``quiet``: per (agent, write) key, the
        # limit table, version, outcome of the last bound test and back-off left (RaceDetector._quiet).
        self.w_top = np.zeros(1, dtype=np.int64)
        self.r_top = np.zeros(1, dtype=np.int64)
        self.version = 0
        self.quiet: dict[int, tuple] = {}

    def rows(self, width: int) -> tuple:
        """The four arrays as rows of ``width`` bytes (views: the same memory), for accesses
        of ``width`` bytes per lane aligned to ``width``; then the same four as 1-D arrays of
        one ``width``-element void item per row (a row is stored as one item: numpy's
        fancy assignment of a void scalar costs a third of a 2-D row assignment's)."""
        r = self._rows.get(width)
        if r is None:
            n = self.w_epoch.size - self.w_epoch.size % width
            arrays = (self.w_epoch, self.w_line, self.r_epoch, self.r_line)
            r = self._rows[width] = (tuple(a[:n].reshape(-1, width) for a in arrays)
                                     + tuple(a[:n].view(f"V{a.itemsize * width}") for a in arrays))
        return r


_ROW_VALUES: dict = {}


def _row_value(value: int, width: int, dtype) -> np.void:
    """``width`` copies of ``value`` as one void item (for Shadow.rows' 1-D views); cached
    (a dict per width and type, keyed by the value alone): a warp's epoch and an
    instruction's line repeat from access to access."""
    cache = _ROW_VALUES.get((width, dtype))
    if cache is None:
        cache = _ROW_VALUES[(width, dtype)] = {}
    v = cache.get(value)
    if v is None:
        if len(cache) > 4096:
            cache.clear()
        v = cache[value] = np.full(width, value, dtype=dtype).view(f"V{np.dtype(dtype).itemsize * width}")[0]
    return v


class RaceDetector:
    def __init__(self, sched):
        self.sched = sched
        self.agents: list = []          # agent id -> warp
        self.shadows: dict[int, Shadow] = {}
        self._known: dict[int, tuple] = {}   # agent -> (its clock array, limit[] built from it)
        self._fields = np.zeros(0, dtype=np.int64)   # (agent + 1) << AGENT_SHIFT, by agent + 1
        self.n = 0
        # hooks (reading warp, its line, byte offsets, the writer) -> bool: a write that races
        # with an earlier read the hook takes over is no race here (ops.wgmma: a completed
        # wgmma's operand read, whose accumulators then hold undefined values)
        self.read_excuses: list = []

    # ---- agents and clocks --------------------------------------------------------------------
    def add_warp(self, w) -> None:
        w.aid = len(self.agents)
        self.agents.append(w)

    def start(self) -> None:
        """Give every warp of the launch its clock (all warps are known by now)."""
        self.n = len(self.agents)
        for w in self.agents:
            w.vc = np.zeros(self.n, dtype=np.int64)
            w.vc[w.aid] = 1

    def grow(self) -> None:
        """Warps of clusters started later: widen every clock."""
        n = len(self.agents)
        for w in self.agents:
            vc = getattr(w, "vc", None)
            if vc is None:
                w.vc = np.zeros(n, dtype=np.int64)
                w.vc[w.aid] = 1
            elif vc.size < n:
                w.vc = np.concatenate([vc, np.zeros(n - vc.size, dtype=np.int64)])
        self.n = n

    def _fit(self, vc: np.ndarray) -> np.ndarray:
        return vc if vc.size == self.n else np.concatenate([vc, np.zeros(self.n - vc.size, dtype=np.int64)])

    def release(self, w, holder) -> None:
        """w's clock joins ``holder.vc_acc`` (a barrier phase being filled); w's epoch advances."""
        acc = getattr(holder, "vc_acc", None)
        holder.vc_acc = w.vc.copy() if acc is None else np.maximum(self._fit(acc), w.vc)
        w.vc[w.aid] += 1

    def release_clock(self, vc: np.ndarray, holder) -> None:
        acc = getattr(holder, "vc_acc", None)
        holder.vc_acc = vc.copy() if acc is None else np.maximum(self._fit(acc), self._fit(vc))

    @staticmethod
    def publish(holder, key) -> None:
        """The phase ``key`` of ``holder`` completed: what was released into it is published."""
        done = getattr(holder, "vc_done", None)
        if done is None:
            done = holder.vc_done = {}
        acc = getattr(holder, "vc_acc", None)
        if acc is not None:
            done[key] = acc
            holder.vc_acc = None
            if len(done) > 8:
                del done[min(done)]

    def acquire(self, w, holder, key=None) -> None:
        done = getattr(holder, "vc_done", None)
        if not done:
            return
        vc = done.get(key) if key is not None else None
        if vc is None:
            vc = done[max(done)]
        w.vc = np.maximum(w.vc, self._fit(vc))

    def learn(self, w, clocks: dict) -> None:
        """``w`` acquires ``{agent: clock}`` of agents that only publish this way (ops.wgmma's
        completion agents: a warp learns their clock by completing the operation), in place,
        with the limit cached for its clock: a wgmma completes every few instructions, and a
        new clock array would rebuild the limit and the shadows' bound tests each time. Only
        knowledge grows, so what was cached for the clock stays true (a bound test that
        failed may now pass: it is retested after its back-off)."""
        vc = w.vc
        if vc.size != self.n:
            vc = w.vc = self._fit(vc)
        cached = self._known.get(w.aid)
        limit = cached[1] if cached is not None and cached[0] is vc else None
        for aid, clock in clocks.items():
            if vc[aid] < clock:
                vc[aid] = clock
                if limit is not None:
                    limit[aid + 1] = ((aid + 1) << AGENT_SHIFT) | clock

    # ---- accesses ---------------------------------------------------------------------------
    def _quiet(self, s: Shadow, aid: int, limit: np.ndarray, write: bool) -> bool:
        """True when no epoch the shadow holds can race with this access: every agent's largest
        stored epoch (``Shadow.w_top``, and ``r_top`` for a write) is within ``limit``, so the
        element-wise test of any bytes would find nothing (the usual case once the accessing
        warp has acquired what the others stored). False says nothing: test the bytes. The
        outcome is kept per limit table (a new array whenever the agent's clock is) and shadow
        version, so a repeated access costs a dict look-up."""
        key = aid + aid + write
        q = s.quiet.get(key)
        if q is not None:
            if q[0] is limit and q[1] == s.version:
                return q[2]
            if q[3]:                  # the bound failed lately: test the bytes (a guess costs only time)
                s.quiet[key] = (q[0], q[1], q[2], q[3] - 1)
                return False
        n1 = limit.size
        if s.w_top.size < n1:
            s.w_top = _grown(s.w_top, n1)
        if s.r_top.size < n1:
            s.r_top = _grown(s.r_top, n1)
        ok = not np.count_nonzero(s.w_top > limit) and not (write and np.count_nonzero(s.r_top > limit))
        s.quiet[key] = (limit, s.version, ok, 0 if ok else _QUIET_BACKOFF)
        return ok

    def _stored(self, s: Shadow, aid: int, epoch: int, write: bool) -> None:
        """An access of ``aid`` stored ``epoch`` (in w_epoch for a write, else r_epoch): raise
        that agent's bound."""
        k = aid + 1
        top = s.w_top if write else s.r_top
        if k >= top.size:
            top = _grown(top, max(k + 1, self.n + 1))
            if write:
                s.w_top = top
            else:
                s.r_top = top
        if epoch > top[k]:
            top[k] = epoch
            s.version += 1

    def shadow(self, cta) -> Shadow:
        s = self.shadows.get(id(cta))
        if s is None:
            s = self.shadows[id(cta)] = Shadow(cta.smem.data.size)
        return s

    def access(self, w, cta, offs: np.ndarray, write: bool, line: int, what: str = "", same=None) -> None:
        self.check(cta, offs, w.aid, w.vc, write, line, w.name, what, same)

    def access_rows(self, w, cta, offs: np.ndarray, width: int, write: bool, line: int, what: str = "",
                    rows: np.ndarray | None = None, same=None) -> None:
        """``access`` of the bytes ``offs[lane] .. offs[lane] + width`` of each lane, ``offs``
        aligned to ``width``: the same bytes in the same order as ``access`` of their span,
        checked as rows of the shadow (one gather per lane, not per byte). A race found is
        reported by ``access`` itself, so its message is the same. ``rows``: ``offs // width``
        when the caller has it already; ``same``: as for ``check``."""
        self.check_rows(cta, offs, width, w.aid, w.vc, write, line, w.name, what, None, rows, same)

    def check_rows(self, cta, offs: np.ndarray, width: int, aid: int, vc: np.ndarray, write: bool, line: int,
                   who: str, what: str = "", report: np.ndarray | None = None,
                   rows: np.ndarray | None = None, same=None) -> None:
        """``check`` of the bytes ``offs[i] .. offs[i] + width`` for each i in order, ``offs``
        aligned to ``width`` (lanes' aligned accesses, cp.async landings, an operand's 16-byte
        chunks): one shadow row per offset. A race is re-reported by ``check`` on the bytes, so
        its message is the same; ``report``: the access's own byte offsets, in its order, when
        the rows only cover the same set of bytes (a wgmma operand's sorted chunks); ``rows``:
        ``offs // width`` when the caller has it already (ld/st.shared, ldmatrix)."""
        if rows is None:
            rows = offs // width
        s = self.shadows.get(id(cta)) or self.shadow(cta)      # looked up once for both halves
        if not self.rows_quiet(cta, rows, aid, vc, write, width, s):
            if report is None:
                report = (offs[:, None] + np.arange(width)).reshape(-1)
            if not self.check(cta, report, aid, vc, write, line, who, what, same):
                raise AssertionError("race detector: a race found by rows but not by bytes")   # (never)
            return                                  # excused (``read_excuses``, ``same``) and stored by check
        self.store_rows(cta, rows, width, aid, vc, write, line, s)

    def rows_quiet(self, cta, rows: np.ndarray, aid: int, vc: np.ndarray, write: bool, width: int = 16,
                   s: Shadow | None = None) -> bool:
        """Whether an access of ``aid`` to the shadow rows ``rows`` of ``width`` bytes finds no
        race (nothing stored; ``check_rows`` reports one when this says False). ``s``: the
        CTA's shadow when the caller has it."""
        if s is None:
            s = self.shadows.get(id(cta)) or self.shadow(cta)
        if vc.size != self.n:
            vc = self._fit(vc)
        cached = self._known.get(aid)           # (_limit_of's cache, tested here: one call fewer)
        limit = cached[1] if cached is not None and cached[0] is vc else self._limit_of(aid, vc)
        if self._quiet(s, aid, limit, write):
            return True
        views = s._rows.get(width) or s.rows(width)
        # take, not fancy indexing: a quarter of the cost for rows of a 2-D array
        e = views[0].take(rows, axis=0)
        if np.count_nonzero(e > limit.take(e >> AGENT_SHIFT)):
            return False
        if write:
            e = views[2].take(rows, axis=0)
            return not np.count_nonzero(e > limit.take(e >> AGENT_SHIFT))
        return True

    def store_rows(self, cta, rows: np.ndarray, width: int, aid: int, vc: np.ndarray, write: bool, line: int,
                   s: Shadow | None = None) -> None:
        """Record an access of ``aid`` at ``line`` to the shadow rows ``rows`` (checked already);
        ``s`` as for ``rows_quiet``."""
        if s is None:
            s = self.shadows.get(id(cta)) or self.shadow(cta)
        views = s._rows.get(width) or s.rows(width)
        _, _, _, _, w_epoch_v, w_line_v, r_epoch_v, r_line_v = views
        epoch = ((aid + 1) << AGENT_SHIFT) | int(vc[aid])
        epochs = _ROW_VALUES.get((width, np.int64))
        lines = _ROW_VALUES.get((width, np.int32))
        e_row = epochs.get(epoch) if epochs else None
        l_row = lines.get(line) if lines else None
        if e_row is None:
            e_row = _row_value(epoch, width, np.int64)
        if l_row is None:
            l_row = _row_value(line, width, np.int32)
        if write:
            w_epoch_v[rows] = e_row
            w_line_v[rows] = l_row
            r_epoch_v[rows] = epochs.get(0) if epochs and 0 in epochs else _row_value(0, width, np.int64)
        else:
            r_epoch_v[rows] = e_row
            r_line_v[rows] = l_row
        self._stored(s, aid, epoch, write)

    def access_span(self, w, cta, lo: int, hi: int, write: bool, line: int, what: str = "") -> None:
        """``access`` of the bytes lo .. hi - 1 (a bulk store's source)."""
        self.check_span(cta, lo, hi, w.aid, w.vc, write, line, w.name, what)

    def check_span(self, cta, lo: int, hi: int, aid: int, vc: np.ndarray, write: bool, line: int, who: str,
                   what: str = "") -> None:
        """``check`` of ``np.arange(lo, hi)`` (a TMA or bulk copy landing, a bulk store's
        source): the shadow's slices, no index arrays. A race is re-reported by ``check`` on
        the same bytes, so its message is the same."""
        if hi <= lo:
            return
        s = self.shadows.get(id(cta)) or self.shadow(cta)
        if vc.size != self.n:
            vc = self._fit(vc)
        limit = self._limit_of(aid, vc)
        racy = not self._quiet(s, aid, limit, write) and (
            _any_beyond(s.w_epoch[lo:hi], limit) or (write and _any_beyond(s.r_epoch[lo:hi], limit)))
        if racy:
            if not self.check(cta, np.arange(lo, hi), aid, vc, write, line, who, what):
                raise AssertionError("race detector: a race found by span but not by bytes")   # (never)
            return                                  # excused (``read_excuses``) and stored by check
        self._store(s, slice(lo, hi), ((aid + 1) << AGENT_SHIFT) | int(vc[aid]), aid, write, line)

    def forget_reads(self, cta, offs: np.ndarray, aid: int, line: int) -> None:
        """Drop the reads ``aid`` stored at ``line`` on the bytes ``offs``: a wgmma whose
        operand bytes an unordered write changes reads undefined values, which its warp's
        accumulators then carry as poison (ops.wgmma.Undefined) instead of a race here."""
        s = self.shadows.get(id(cta))
        if s is None:
            return
        offs = np.asarray(offs, dtype=np.int64).reshape(-1)
        e = s.r_epoch[offs]
        mine = ((e >> AGENT_SHIFT) == aid + 1) & (s.r_line[offs] == line)
        if mine.any():
            s.r_epoch[offs[mine]] = 0

    def _known_of(self, aid: int, vc: np.ndarray) -> np.ndarray:
        """known[agent + 1]: what an access of ``aid`` has acquired from that agent; index 0 (no
        access yet) and the own agent (program order) can never be exceeded."""
        known = np.empty(self.n + 1, dtype=np.int64)
        known[1:] = vc
        known[0] = known[aid + 1] = _NEVER
        return known

    def _limit_of(self, aid: int, vc: np.ndarray) -> np.ndarray:
        """limit[agent + 1] = ((agent + 1) << AGENT_SHIFT) | known[agent + 1], _NEVER where known
        is: an epoch e races exactly when ``e > limit[e >> AGENT_SHIFT]`` (the agent field of
        both sides is equal, so the comparison is the clocks': ``(e & CLOCK_MASK) >
        known[e >> AGENT_SHIFT]`` in one operation fewer; clocks stay below 2^AGENT_SHIFT).
        A clock only changes in place at its own agent's slot (release), which limit does not
        read, or through ``learn``, which raises limit with it, so it is rebuilt only when the
        agent's clock is another array (acquire, grow)."""
        cached = self._known.get(aid)
        if cached is not None and cached[0] is vc:
            return cached[1]
        field = self._fields
        if field.size != self.n + 1:
            field = self._fields = np.arange(self.n + 1, dtype=np.int64) << AGENT_SHIFT
        limit = np.empty(self.n + 1, dtype=np.int64)
        np.bitwise_or(field[1:], vc, out=limit[1:])
        limit[0] = limit[aid + 1] = _NEVER
        self._known[aid] = (vc, limit)
        return limit

    def check(self, cta, offs: np.ndarray, aid: int, vc: np.ndarray, write: bool, line: int, who: str,
              what: str = "", same=None) -> bool:
        """The access of ``aid`` to the bytes ``offs``: a race is a CheckFailed, unless a write
        races only with earlier reads that a ``read_excuses`` hook takes over (a wgmma's operand
        read, whose warp then holds undefined accumulators: ops.wgmma), or only with earlier
        writes of the bytes it stores (``same``: a store's ``ops.memory.SameBytes``, which says
        which bytes those are and reports them once). Returns whether either excused one."""
        s = self.shadows.get(id(cta)) or self.shadow(cta)
        offs = np.asarray(offs, dtype=np.int64).reshape(-1)
        if vc.size != self.n:
            vc = self._fit(vc)
        clock = int(vc[aid])
        limit = self._limit_of(aid, vc)
        excused = False
        for kind, epochs, lines in (("write", s.w_epoch, s.w_line), ("read", s.r_epoch, s.r_line)):
            if kind == "read" and not write:
                break
            e = epochs[offs]
            bad = e > limit[e >> AGENT_SHIFT]
            if kind == "write" and same is not None and np.count_nonzero(bad):
                # each read returns the value some write committed (PTX ISA 8): an unordered store of
                # the bytes the location holds from the earlier one leaves no value undefined
                idx = np.nonzero(bad)[0]
                ok = np.asarray(same(offs[idx]), dtype=bool)
                if ok.any():
                    k = int(idx[int(np.argmax(ok))])
                    prev = self.agents[int(e[k] >> AGENT_SHIFT) - 1]
                    same.report(int(offs[k]), prev.name, f"{prev.prog.file}:{int(lines[offs[k]])}")
                    bad[idx[ok]] = False
                    excused = True
            if kind == "read" and self.read_excuses and np.count_nonzero(bad):
                left = self._excuse_reads(offs, e, lines, bad, f"{what or 'write'} by {who} at "
                                          f"{self.agents[aid].prog.file}:{line}")
                excused = excused or bool(np.count_nonzero(bad & ~left))
                bad = left
            if np.count_nonzero(bad):          # (a quarter of any()'s cost)
                j = int(np.argmax(bad))
                prev = self.agents[int(e[j] >> AGENT_SHIFT) - 1]
                raise CheckFailed(
                    f"shared-memory race in {cta.name} at 0x{int(offs[j]):x}: "
                    f"{'write' if write else 'read'}{' (' + what + ')' if what else ''} by {who} at "
                    f"{prev.prog.file}:{line} and an earlier {kind} by {prev.name} at "
                    f"{prev.prog.file}:{int(lines[offs[j]])}, with no barrier, mbarrier phase or cluster "
                    "barrier ordering them")
        self._store(s, offs, ((aid + 1) << AGENT_SHIFT) | clock, aid, write, line)
        return excused

    def _store(self, s: Shadow, offs, epoch: int, aid: int, write: bool, line: int) -> None:
        """Record an access's ``epoch`` and ``line`` on the bytes ``offs`` (offsets, or a slice)."""
        if write:
            s.w_epoch[offs] = epoch
            s.w_line[offs] = line
            s.r_epoch[offs] = 0
        else:
            s.r_epoch[offs] = epoch
            s.r_line[offs] = line
        self._stored(s, aid, epoch, write)

    def record_read(self, cta, aid: int, vc: np.ndarray, line: int, offs, rows: np.ndarray | None = None) -> None:
        """Record a read of ``aid`` at ``line`` of the bytes ``offs`` (offsets, or a slice lo:hi;
        as 16-byte shadow rows ``rows`` when given: the same bytes), unchecked: the read was
        checked where it began, and this marks where it ends (a wgmma's operand read at the wait
        that completes it, ops.wgmma; a bulk store's source at its cp.async.bulk.wait_group,
        ops.tma.BulkGroups.complete)."""
        if rows is not None:
            self.store_rows(cta, rows, 16, aid, vc, False, line)
            return
        if not isinstance(offs, slice):
            offs = np.asarray(offs, dtype=np.int64).reshape(-1)
        s = self.shadows.get(id(cta)) or self.shadow(cta)
        self._store(s, offs, ((aid + 1) << AGENT_SHIFT) | int(vc[aid]), aid, False, line)

    def _excuse_reads(self, offs, e, lines, bad, writer: str) -> np.ndarray:
        """``bad`` less the bytes whose earlier read a ``read_excuses`` hook takes over: each
        (reading warp, line) pair is offered once, with the bytes' offsets and the writer."""
        left = bad.copy()
        idx = np.flatnonzero(bad)
        agents = (e[idx] >> AGENT_SHIFT) - 1
        at = lines[offs[idx]]
        for a, ln in {(int(x), int(y)) for x, y in zip(agents, at)}:
            mine = idx[(agents == a) & (at == ln)]
            if any(hook(self.agents[a], ln, offs[mine], writer) for hook in self.read_excuses):
                left[mine] = False
        return left
