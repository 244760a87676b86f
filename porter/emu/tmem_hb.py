"""Tensor Memory hand-offs judged by happens-before, as shared-memory races are
(``porter.emu.race``), not only on the interleaving that ran.

The in-flight checker (``ops.tcgen05``) catches a ``tcgen05.ld`` of accumulator columns an
MMA is still writing *in this run*; when the MMA happened to finish first (the seeded
schedule completed its commit group early) a missing wait passes unseen. Here every TMEM
cell keeps its last write and last read as (agent, clock, PTX line), with the race
detector's vector clocks, and an access must be ordered after the conflicting one by
synchronisation (mbarrier phases, named barriers, cluster barriers), whatever the order
this run took.

Agents: each warp for its own ``tcgen05.ld`` / ``tcgen05.st``; and, for the asynchronous
``tcgen05.mma`` / ``tcgen05.cp`` it issues, the warp's **tcgen05 pipeline**, an agent of its
own. An operation is ordered after everything its issuer did before issuing it (the
pipeline's clock joins the issuer's at issue); it is visible to other warps only through the
mbarrier of the ``tcgen05.commit`` that covers it (the commit publishes the pipeline's clock
into each barrier it arrives on when its group completes). A warp's own barrier arrivals do
not publish its pipeline's clock: an MMA is not complete because its issuer reached a
barrier (PTX ISA 9.7.16.6, the tcgen05 memory consistency model: completion is tracked by
``tcgen05.commit``'s mbarrier).

It runs when the race detector does (the default; ``PORTER_EMU_RACES=0`` / ``races=False``
turn both off). Limits as for shared memory: one last reader per cell.
"""

from __future__ import annotations

import numpy as np

from porter.emu.errors import CheckFailed
from porter.emu.race import AGENT_SHIFT, _any_beyond

LANES, COLUMNS = 128, 512
_NEVER = np.iinfo(np.int64).max
_CLEAR = (0, 0, 0)
_KINDS = ("tcgen05.ld", "tcgen05.st", "tcgen05.mma", "tcgen05.cp", "tcgen05.shift")
_KIND_CODE = {k: i for i, k in enumerate(_KINDS)}


class PipelineAgent:
    """The asynchronous tensor-core pipeline of one warp (its issued MMAs and copies)."""

    def __init__(self, w):
        self.warp = w
        self.name = f"the tcgen05 pipeline of {w.name}"
        self.prog = w.prog
        self.vc = None


class Cells:
    """A 2-D grid (``a`` x ``b``) of cells each holding one record (a value per field, e.g.
    the epoch, PTX line and kind of a cell's last write), written by rectangular fills.

    Kept as disjoint rectangles of one record each over a background record while that
    describes the grid exactly (TMEM is accessed by rectangles: an MMA's accumulator, a
    warp's lane quarter), and as arrays, one per field, only once something needs the cells
    themselves (``arrays()``: a scan of a region of several records) or the rectangles grow
    past ``LAZY_KEEP``. A CTA's shadow of the usual kernel never needs them: no allocation
    of the grid, no pages touched. Then the rectangles of the latest fills answer ``value``
    (a region one of them covers) without a scan.

    ``value`` is exact: the record every cell of the region holds, or None. Regions are
    numpy slices of the grid (starts >= 0; ends past the grid are clipped, as numpy
    does); a negative start makes the arrays and writes them as numpy would."""

    __slots__ = ("a", "b", "dtypes", "bg", "rects", "arrs")
    KEEP = 16          # rectangles kept beside the arrays (older ones dropped: only a cache then)
    LAZY_KEEP = 32     # rectangles before the arrays are made (exact: none may be dropped)

    def __init__(self, a: int, b: int, fields):
        """``fields``: ((dtype, background value), ...)."""
        self.a, self.b = a, b
        self.dtypes = tuple(np.dtype(dt) for dt, _ in fields)
        self.bg = tuple(v for _, v in fields)
        self.rects: list = []             # (a0, a1, b0, b1, record); disjoint while arrs is None
        self.arrs = None

    def value(self, a0: int, a1: int, b0: int, b1: int):
        """The one record of the region, or None (several, an empty or wrapped region, or
        none of the rectangles kept beside the arrays covers it)."""
        recs = self.records(a0, a1, b0, b1)
        return recs[0] if recs is not None and len(recs) == 1 else None

    def records(self, a0: int, a1: int, b0: int, b1: int):
        """The distinct records the region's cells hold (a list, in no particular order), or
        None when that is not known without the arrays (they exist, and no rectangle kept
        covers the region) or the region is empty or wrapped."""
        if a0 < 0 or b0 < 0:
            return None
        if a1 > self.a:
            a1 = self.a
        if b1 > self.b:
            b1 = self.b
        if a0 >= a1 or b0 >= b1:
            return None
        rects = self.rects
        for r in rects:
            if r[0] <= a0 and a1 <= r[1] and r[2] <= b0 and b1 <= r[3]:
                return [r[4]]
        if self.arrs is not None:
            return None
        out, covered = [], 0
        for r in rects:
            if r[0] < a1 and a0 < r[1] and r[2] < b1 and b0 < r[3]:
                if r[4] not in out:
                    out.append(r[4])
                covered += (min(a1, r[1]) - max(a0, r[0])) * (min(b1, r[3]) - max(b0, r[2]))
        if covered < (a1 - a0) * (b1 - b0) and self.bg not in out:
            out.append(self.bg)
        return out

    def arrays(self) -> tuple:
        """The grid as one array per field (made, from the rectangles, on first use)."""
        if self.arrs is None:
            arrs = tuple(np.full((self.a, self.b), v, dtype=dt) for dt, v in zip(self.dtypes, self.bg))
            for a0, a1, b0, b1, rec in self.rects:
                for arr, v in zip(arrs, rec):
                    arr[a0:a1, b0:b1] = v
            self.arrs = arrs
            del self.rects[:-self.KEEP]
        return self.arrs

    def fill(self, a0: int, a1: int, b0: int, b1: int, rec: tuple) -> None:
        """Every cell of the region holds ``rec`` (a tuple, one value per field)."""
        if a0 < 0 or b0 < 0:              # (a slice from a negative start wraps: not a rectangle)
            for arr, v in zip(self.arrays(), rec):
                arr[a0:a1, b0:b1] = v
            self.rects = []
            return
        if a1 > self.a:
            a1 = self.a
        if b1 > self.b:
            b1 = self.b
        if a0 >= a1 or b0 >= b1:
            return
        if self.value(a0, a1, b0, b1) == rec:
            return
        rects = self.rects
        if self.arrs is not None:
            for arr, v in zip(self.arrs, rec):
                arr[a0:a1, b0:b1] = v
            keep = [r for r in rects if r[1] <= a0 or a1 <= r[0] or r[3] <= b0 or b1 <= r[2]]
            keep.append((a0, a1, b0, b1, rec))
            if len(keep) > self.KEEP:
                del keep[0]
            self.rects = keep
            return
        bg = self.bg
        keep = []
        for r in rects:
            if r[1] <= a0 or a1 <= r[0] or r[3] <= b0 or b1 <= r[2]:
                keep.append(r)
                continue
            r0, r1, r2, r3, v = r             # the parts of r outside the fill keep v
            if r0 < a0:
                keep.append((r0, a0, r2, r3, v))
            if a1 < r1:
                keep.append((a1, r1, r2, r3, v))
            m0, m1 = max(r0, a0), min(r1, a1)
            if r2 < b0:
                keep.append((m0, m1, r2, b0, v))
            if b1 < r3:
                keep.append((m0, m1, b1, r3, v))
        if rec != bg:                         # (cells in no rectangle hold the background)
            keep.append((a0, a1, b0, b1, rec))
        self.rects = keep
        if len(keep) > self.LAZY_KEEP:
            self.arrays()


class Shadow:
    """Per TMEM cell (lane, column) of one CTA: the last write and the last read, each a
    record (epoch, PTX line, kind code) of ``Cells``. A write clears the read record to
    (0, 0, 0): epoch 0 is no access (never a race), whose line and kind are never read."""

    FIELDS = ((np.int64, 0), (np.int32, 0), (np.int8, 0))

    def __init__(self):
        self.w = Cells(LANES, COLUMNS, self.FIELDS)
        self.r = Cells(LANES, COLUMNS, self.FIELDS)


def _shadow(cta) -> Shadow:
    s = cta.units.get("tmem_hb")
    if s is None:
        s = cta.units["tmem_hb"] = Shadow()
    return s


def _pipeline(w) -> PipelineAgent:
    a = w.units.get("tmem_hb_pipeline")
    if a is None:
        race = w.sched.race
        a = w.units["tmem_hb_pipeline"] = PipelineAgent(w)
        race.add_warp(a)
        race.grow()                       # every clock widens by the new agent; a.vc starts at 1
    return a


def access(w, cta, region, write: bool, line: int, kind: str) -> None:
    """Warp ``w``'s own ``tcgen05.ld`` (read) or ``tcgen05.st`` (write) of ``region``
    (l0, l1, c0, c1) of ``cta``'s TMEM."""
    race = w.sched.race
    if race is None:
        return
    _check(race, cta, region, w.aid, w.vc, write, line, kind, w.name)


def issue(w, cta, region, write: bool, line: int, kind: str) -> None:
    """An asynchronous ``tcgen05.mma`` / ``tcgen05.cp`` issued by ``w`` writes or reads
    ``region`` of ``cta``'s TMEM: checked as an access of ``w``'s pipeline, ordered after
    what ``w`` has done and acquired so far."""
    race = w.sched.race
    if race is None:
        return
    p = _pipeline(w)
    p.vc = _joined(race, p.vc, w.vc)
    _check(race, cta, region, p.aid, p.vc, write, line, kind, ("the {} issued by {}", kind, w.name))


def _joined(race, pv, wv):
    """max(pv, wv): ``pv`` itself (fitted) when ``wv`` adds nothing (the issuer acquired nothing
    since the last issue), so the detector's limit cached for that clock array still serves."""
    pv, wv = race._fit(pv), race._fit(wv)
    return pv if (wv <= pv).all() else np.maximum(pv, wv)


def commit(w):
    """A ``tcgen05.commit`` by ``w``: the pipeline clock its mbarrier(s) will publish when
    the group completes (None without the race detector)."""
    race = w.sched.race
    if race is None:
        return None
    p = _pipeline(w)
    p.vc = _joined(race, p.vc, w.vc)
    clock = p.vc.copy()
    p.vc[p.aid] += 1                      # operations issued after this commit are not covered by it
    return race, clock


def complete(token, bar) -> None:
    """The committed group completed and is about to arrive on ``bar``: publish its clock
    into the barrier's current phase."""
    if token is not None:
        race, clock = token
        race.release_clock(clock, bar)


def _check(race, cta, region, aid: int, vc, write: bool, line: int, kind: str, who) -> None:
    """``who``: the accessor as the message names it (a str, or (format, *args) to build it)."""
    l0, l1, c0, c1 = (max(0, int(region[0])), min(LANES, int(region[1])),
                      max(0, int(region[2])), min(COLUMNS, int(region[3])))
    if l0 >= l1 or c0 >= c1:
        return
    s = _shadow(cta)
    vc = race._fit(vc)
    limit = race._limit_of(aid, vc)
    for prior, cells in (("write", s.w), ("read", s.r)):
        if prior == "read" and not write:
            break
        recs = cells.records(l0, l1, c0, c1)
        if recs is not None:                  # (the usual region: a few records, no scan)
            if len(recs) == 1:
                e0 = recs[0][0]
                if e0 <= limit[e0 >> AGENT_SHIFT]:
                    continue
            elif all(u[0] <= limit[u[0] >> AGENT_SHIFT] for u in recs):
                continue
            epochs, lines, kinds = cells.arrays()
            e = epochs[l0:l1, c0:c1]
        else:
            epochs, lines, kinds = cells.arrays()
            e = epochs[l0:l1, c0:c1]
            if not _any_beyond(e, limit):     # (one agent's region: two reductions)
                continue
        bad = e > limit[e >> AGENT_SHIFT]
        if np.count_nonzero(bad):
            i, j = (int(x) for x in np.argwhere(bad)[0])
            lane, col = l0 + i, c0 + j
            prev = race.agents[int(e[i, j] >> AGENT_SHIFT) - 1]
            pkind = _KINDS[int(kinds[lane, col])]
            if isinstance(who, tuple):        # (a format and its arguments: built only for the message)
                who = who[0].format(*who[1:])
            by = (f"the {pkind} issued by {prev.warp.name}" if isinstance(prev, PipelineAgent)
                  else f"{prev.name}'s {pkind}")
            hint = (" (wait on the mbarrier of the tcgen05.commit that covers it)" if isinstance(prev, PipelineAgent)
                    else " (the hand-off is fence::before_thread_sync, an mbarrier arrive / wait or barrier, then "
                         "fence::after_thread_sync)")
            raise CheckFailed(
                f"TMEM hand-off race in {cta.name} at lane {lane}, column {col}: "
                f"{'write' if write else 'read'} by {who} at {prev.prog.file}:{line} and an earlier {prior} by {by} "
                f"at {prev.prog.file}:{int(lines[lane, col])}, with no mbarrier phase, barrier or cluster barrier "
                f"ordering them{hint} (PTX ISA 9.7.16.6)")
    rec = (((aid + 1) << AGENT_SHIFT) | int(vc[aid]), line, _KIND_CODE[kind])
    if write:
        s.w.fill(l0, l1, c0, c1, rec)
        s.r.fill(l0, l1, c0, c1, _CLEAR)
    else:
        s.r.fill(l0, l1, c0, c1, rec)
