"""Tensor Memory and the 5th-generation tensor core on sm_100a: tcgen05.alloc / dealloc /
relinquish_alloc_permit, tcgen05.mma (every kind porter emits, A from shared memory or
TMEM, cta_group::1 and ::2), tcgen05.commit (plain and .multicast::cluster),
tcgen05.ld / st / wait, tcgen05.cp, tcgen05.shift and tcgen05.fence (PTX ISA 9.7.16), on the pure units
``porter.emu.units.tmem`` and ``porter.emu.units.tcgen05``.

Asynchrony, as the ISA allows it:

* ``tcgen05.mma``, ``tcgen05.cp`` and ``tcgen05.shift`` are issued by single threads into
  that thread's pipeline; they execute in issue order. ``tcgen05.commit`` closes the thread's open
  operations into a group that completes a seeded number of scheduler rounds later; then
  each operation runs (the MMA reads its operands and scale factors and writes D) and the
  commit arrives on its mbarrier(s). Groups of one thread complete in order.
* The shared memory an operation reads is snapshotted at issue and compared at
  completion: a stage released (or overwritten) before the MMA finished is an error.
* While an operation is in flight, the TMEM it writes (D) or reads (A, scale factors)
  is fenced off: a tcgen05.ld / st / cp touching it is an error naming the operation.
* ``tcgen05.ld`` destinations accessed before ``tcgen05.wait::ld`` are a warning (the ISA
  states no rule against it; the registers hold the loaded values); ``tcgen05.st``
  data counts as written only after the warp's ``tcgen05.wait::st`` (an MMA or another
  warp reading it before then is an error).
* Fence checker (9.7.16.6.4): TMEM cells remember the warp that last wrote / read them.
  A warp that accesses cells another warp last wrote (or, writing, last read) must have
  executed ``tcgen05.fence::after_thread_sync`` after its latest mbarrier wait, and the
  other warp must have executed ``tcgen05.fence::before_thread_sync`` after its access
  (the asynchronous MMA / cp count as fenced by their commit).
* Exit checks: TMEM still allocated when a CTA exits; operations never committed when a
  warp exits; a dealloc of columns an operation still uses.

cta_group::2 (a CTA pair, ranks 2i and 2i+1 of the cluster): alloc and dealloc are
collective (one warp of each CTA; both get the same columns; the first warp waits for the
other), the MMA reads both CTAs' shared memory at the same offsets and writes both TMEMs
(``units.tcgen05.run_mma``), cp fills both TMEMs, each from its own shared memory (an
emulation choice: the ISA text at hand does not say whether the peer's copy comes from the
peer's shared memory or the issuer's), commit arrives on the named barrier or, with
.multicast::cluster, on the barrier at the same offset in each CTA of the mask.
relinquish_alloc_permit acts on the executing CTA's TMEM.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx, tmem_hb
from porter.emu.control import DEFER, Park
from porter.emu.errors import CheckFailed, EmuError, Unsupported
from porter.emu.ops.memory import check_async_read
from porter.emu.units import tcgen05 as tc
from porter.emu.units import tmem as tmem_unit

_LD_SHAPE = re.compile(r"(\d+x\d+b(?:x2)?)")        # .16x32bx2: two blocks
_NUM = re.compile(r"x(\d+)")
NO_AGENT = -1
LATE_ROUNDS = 2000       # a "late" commit group: when every warp is parked, at the latest this many rounds on


class _UnwaitedLd(str):
    """The poison of a tcgen05.ld destination until tcgen05.wait::ld. The PTX ISA
    ("tcgen05.ld", "tcgen05.wait") says the load is asynchronous and that wait::ld blocks until
    the warp's prior loads complete, but, unlike wgmma.wait_group, states no rule that the
    registers not be accessed before it: an access is a warning (``Warp.poison_read``) and the
    run reads on with the loaded values."""
    warn_only = True


# ---- per-CTA state ------------------------------------------------------------------------------

_WHO_FIELDS = ((np.int16, NO_AGENT), (np.int32, -1))     # (agent, its fence::before count then)


class CtaTc:
    """One CTA's TMEM and the bookkeeping of the checkers."""

    def __init__(self, cta):
        self.cta = cta
        self.tmem = tmem_unit.TensorMemory(cta.name)
        self.inflight: list = []          # async operations touching this TMEM, not yet complete
        self.pending_st: list = []        # (warp index, region, where): tcgen05.st before wait::st
        # per TMEM cell, column-major (column, lane): the agent that last wrote / read it and that
        # agent's fence::before count then (tmem_hb.Cells: rectangles of one record, arrays
        # only when a region of several records must be scanned); every write goes through fill
        self.writer = tmem_hb.Cells(512, 128, _WHO_FIELDS)
        self.reader = tmem_hb.Cells(512, 128, _WHO_FIELDS)
        self.access_where: dict[int, str] = {}
        # collector buffers (tcgen05.mma .collector::a::*, .ws .collector::bN::*): at issue, whether
        # a ::fill / ::use left the buffer holding an operand; at completion, that operand's bytes
        self.collector_filled: dict[str, str] = {}      # buffer -> where the filling MMA was issued
        self.collector: dict = {}                        # buffer -> the A (or B) raw bytes it holds


def _ctatc(cta) -> CtaTc:
    st = cta.units.get("tcgen05")
    if st is None:
        st = cta.units["tcgen05"] = CtaTc(cta)
        cta.units.setdefault("exit_checks", []).append(_cta_exit_check)
    return st


def _cta_exit_check(cta) -> None:
    st = cta.units.get("tcgen05")
    if st is not None:
        try:
            st.tmem.check_exit()
        except CheckFailed as exc:
            raise CheckFailed(f"{cta.launch.prog.file}: {exc} (missing tcgen05.dealloc?)") from None


def _agent(w) -> int:
    return w.cta.rank * 64 + w.index


def _agent_name(w, agent: int) -> str:
    rank, idx = divmod(int(agent), 64)
    ctas = w.cta.cluster.ctas
    name = ctas[rank].name if rank < len(ctas) else f"rank {rank}"
    return f"{name} warp {idx}"


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1] and a[2] < b[3] and b[2] < a[3]


def _region_text(r) -> str:
    return f"lanes {r[0]}..{r[1] - 1}, columns {r[2]}..{r[3] - 1}"


# ---- the fence checker ---------------------------------------------------------------------------

def _epochs(cluster) -> dict:
    """agent -> how many tcgen05.fence::before_thread_sync it executed (cluster-wide)."""
    return cluster.__dict__.setdefault("tcgen05_before", {})


def _check_handoff(w, lanes, st: CtaTc, region, writes: bool, what: str, where: str) -> None:
    """``lanes`` of warp ``w`` access ``region`` of ``st``'s TMEM. If another warp last wrote it
    (or, for a write, last read it), that warp must have executed fence::before_thread_sync
    after its access (the asynchronous MMA / cp count as fenced by their tcgen05.commit), and
    when these lanes waited on an mbarrier since their last fence::after_thread_sync, the
    access must follow such a fence (PTX ISA 9.7.16.6.4)."""
    me = _agent(w)
    l0, l1, c0, c1 = region
    waited = w.units.get("mbarrier_waited")
    after_missing = waited is not None and bool((waited[0] & lanes).any())
    epochs = None
    for cells, how in (((st.writer, "wrote"),) + (((st.reader, "read"),) if writes else ())):
        # the (agent, fence::before count) records the region holds, without the arrays while
        # the rectangles tell (the usual case: one record); else a scan of the arrays
        recs = cells.records(c0, c1, l0, l1)
        if recs is not None:
            if len(recs) == 1:
                if recs[0][0] == NO_AGENT or recs[0][0] == me:
                    continue
                agents = (recs[0][0],)
            else:
                agents = sorted({a for a, _ in recs if a != NO_AGENT and a != me})
                if not agents:
                    continue
            other = None
        else:
            arr, eps = cells.arrays()
            block = arr[c0:c1, l0:l1]
            lo, hi = int(block.min()), int(block.max())
            if lo == hi:                    # one agent (or none) holds the whole region
                if lo == NO_AGENT or lo == me:
                    continue
                other, agents = None, (lo,)
            else:
                other = (block != NO_AGENT) & (block != me)
                if not other.any():
                    continue
                agents = np.unique(block[other])
        if after_missing:
            err = CheckFailed(
                f"{where}: {w.name}: {what} accesses TMEM ({st.cta.name} {_region_text(region)}) that "
                f"{_agent_name(w, agents[0])} last {how}, after the mbarrier wait at {waited[1]} without "
                "tcgen05.fence::after_thread_sync in between (a TMEM hand-off across threads needs "
                "fence::before_thread_sync, the sync, then fence::after_thread_sync)")
            if not w.cta.launch.relaxed_error("tcgen05-fences", str(err), where):
                raise err
            after_missing = False
        epochs = epochs if epochs is not None else _epochs(w.cta.cluster)
        for a in agents:
            if recs is not None:
                last = max(ep for x, ep in recs if x == a)
            elif other is None:
                last = int(eps[c0:c1, l0:l1].max())
            else:
                last = int(eps[c0:c1, l0:l1][other & (block == a)].max())
            if last >= 0 and epochs.get(int(a), 0) <= last:
                err = CheckFailed(
                    f"{where}: {w.name}: {what} accesses TMEM ({st.cta.name} {_region_text(region)}) that "
                    f"{_agent_name(w, a)} last {how} at {st.access_where.get(int(a), '?')}, without "
                    "tcgen05.fence::before_thread_sync by that warp since (an ordered hand-off is that fence, a "
                    "thread sync, then tcgen05.fence::after_thread_sync here)")
                if not w.cta.launch.relaxed_error("tcgen05-fences", str(err), where):
                    raise err


def _note_access(st: CtaTc, region, agent: int, writes: bool, w=None, where: str = "") -> None:
    """Record ``agent``'s access; ``w`` given: a warp's own (ld/st), which a later
    fence::before_thread_sync of that warp covers; None: an asynchronous MMA / cp (its
    commit fences it)."""
    l0, l1, c0, c1 = region
    ep = -1 if w is None else _epochs(w.cta.cluster).get(agent, 0)
    (st.writer if writes else st.reader).fill(c0, c1, l0, l1, (agent, ep))
    if w is not None:
        st.access_where[agent] = where


def _check_inflight(st: CtaTc, region, writes: bool, what: str, where: str, w, ordered=()) -> None:
    """``ordered``: in-flight operations this access is pipelined after (PTX ISA 9.7.16.6.2:
    they execute in issue order), so no conflict."""
    for op in st.inflight:
        if op in ordered:
            continue
        for cta, r, op_writes in op.regions:
            if cta is st.cta and (writes or op_writes) and _overlap(r, region):
                raise CheckFailed(
                    f"{where}: {w.name}: {what} {'writes' if writes else 'reads'} TMEM ({st.cta.name} "
                    f"{_region_text(region)}) that the {op.name} issued at {op.where} still "
                    f"{'writes' if op_writes else 'reads'} (it has not completed: wait for the mbarrier of the "
                    "tcgen05.commit that covers it first)")
    if not writes:
        for widx, r, st_where in st.pending_st:
            if widx != w.index and _overlap(r, region):
                raise CheckFailed(
                    f"{where}: {w.name}: {what} reads TMEM ({st.cta.name} {_region_text(region)}) written by the "
                    f"tcgen05.st at {st_where} of warp {widx} before that warp's tcgen05.wait::st")


# ---- the async pipeline of one thread ------------------------------------------------------------

class AsyncOp:
    """An issued tcgen05.mma / tcgen05.cp: ``regions`` [(cta, (l0, l1, c0, c1), writes)]
    fenced off until ``complete()``; ``snapshots`` [(cta, addresses, bytes) or _SpanSnapshot].

    ``chained``: ``run(chain)`` takes the dict its commit group's operations pass on, one to
    the next as they complete back to back (an MMA's D values, for the next MMA on the same
    D); any other operation's completion empties it."""

    def __init__(self, name: str, where: str, issuer: str, regions, snapshots, run, tcs, chained: bool = False):
        self.name, self.where, self.issuer = name, where, issuer
        self.regions, self.snapshots, self.run, self.tcs = regions, snapshots, run, tcs
        self.chained = chained

    def complete(self, chain: dict | None = None) -> None:
        for snap in self.snapshots:
            if type(snap) is _SpanSnapshot:
                cta, changed = snap.cta, snap.changed()
            else:
                cta, addr, raw = snap
                changed = not np.array_equal(cta.smem.data[addr], raw)
            if changed:
                raise CheckFailed(
                    f"{self.where}: {self.issuer}: the shared memory of {cta.name} this {self.name} reads changed "
                    "before the operation completed (a stage released or overwritten before the mbarrier of "
                    "the tcgen05.commit that covers it)")
        for st in self.tcs:
            if self in st.inflight:
                st.inflight.remove(self)
        if self.chained:
            self.run({} if chain is None else chain)
        else:
            if chain:
                chain.clear()
            self.run()


class _SpanSnapshot:
    """The shared bytes an MMA reads (``addrs``, ``rel`` = addrs - lo), kept as a copy of the
    span lo..hi that holds them: one copy at issue and one comparison at completion instead of
    gathers; when some byte of the span changed, whether one it reads did decides (exact)."""
    __slots__ = ("cta", "addrs", "rel", "lo", "span", "raw")

    def __init__(self, cta, addrs, rel, lo: int, hi: int):
        self.cta, self.addrs, self.rel, self.lo = cta, addrs, rel, lo
        self.span = cta.smem.data[lo:hi + 1].tobytes()
        self.raw = None

    def bytes(self) -> np.ndarray:
        """The bytes at ``addrs`` when the snapshot was taken (uint8, read-only)."""
        if self.raw is None:
            self.raw = np.frombuffer(self.span, dtype=np.uint8).take(self.rel)
            self.raw.flags.writeable = False     # (shared by the MMA's readers: never written in place)
        return self.raw

    def changed(self) -> bool:
        data = self.cta.smem.data
        if data[self.lo:self.lo + len(self.span)].tobytes() == self.span:
            return False
        return not np.array_equal(data[self.addrs], self.bytes())


class Group:
    def __init__(self, ops, bars, where, issuer):
        self.ops, self.bars, self.where, self.issuer = ops, bars, where, issuer
        self.done = False


class Pipe:
    def __init__(self):
        self.open: list[AsyncOp] = []
        self.fifo: list[Group] = []

    def complete_through(self, group: Group) -> None:
        while not group.done:
            g = self.fifo.pop(0)
            g.done = True
            chain: dict = {}
            for op in g.ops:
                op.complete(chain)
            for bar in g.bars:
                tmem_hb.complete(getattr(g, "hb", None), bar)
                bar.arrive(1, f"the tcgen05.commit at {g.where}")


def _pipe(w, lane: int) -> Pipe:
    pipes = w.units.get("tcgen05_pipes")
    if pipes is None:
        pipes = w.units["tcgen05_pipes"] = {}
        w.units.setdefault("exit_checks", []).append(_warp_exit_check)
    p = pipes.get(lane)
    if p is None:
        p = pipes[lane] = Pipe()
    return p


def _warp_exit_check(w) -> None:
    for lane, p in w.units.get("tcgen05_pipes", {}).items():
        if p.open:
            op = p.open[0]
            w.cta.launch.warn(f"{op.where}: {w.name} (lane {lane}) exits with {len(p.open)} tcgen05 "
                              f"operation(s) (first: the {op.name} issued here) never committed (missing "
                              "tcgen05.commit)")
            return


# ---- helpers -------------------------------------------------------------------------------------

def _whole_warp(w, m) -> bool:
    return m is None or bool((m == w.live).all())


def _lanes32(v) -> np.ndarray:
    """An operand's 32 lane values (a register's (32,) array as it is; one value for all
    lanes broadcast)."""
    if type(v) is np.ndarray and v.shape == (32,):
        return v
    return np.broadcast_to(np.asarray(v), (32,))


def _uniform(v, sel, what: str, where: str) -> int:
    v = np.asarray(v)
    a = (v if v.ndim else np.broadcast_to(v, (32,)))[sel]
    if (a != a[0]).any():
        raise CheckFailed(f"{where}: {what} differs across the warp's lanes")
    return int(a[0])


def _cta_group(parts, d) -> int:
    for p in parts:
        if p.startswith("cta_group::"):
            g = int(p.split("::")[1])
            if g not in (1, 2):
                raise d.unsupported(f"(.cta_group::{g})")
            return g
    return 1


def _group_ctas(w, g: int, where: str, smem: bool = True) -> list:
    """The CTA(s) of the executing CTA's group, even CTA first; ``smem``: the operation uses
    the peer's shared memory (an MMA, a cp; recorded for the lead's exit-without-cluster-
    barrier check), not just its TMEM allocator (alloc / dealloc, collective)."""
    if g == 1:
        return [w.cta]
    ctas = w.cta.cluster.ctas
    even = w.cta.rank & ~1
    if even + 1 >= len(ctas):
        raise CheckFailed(f"{where}: {w.name}: .cta_group::2 needs a CTA pair, but the cluster has {len(ctas)} CTA(s)")
    who = f"{where}: {w.name}"
    pair = (ctas[even], ctas[even + 1])
    if smem:
        return [c if c is w.cta else w.cta.peer(c.rank, who) for c in pair]
    for c in pair:
        if c.done:
            raise CheckFailed(f"{who}: the peer {c.name} of the .cta_group::2 operation has already exited")
    return list(pair)


def _wrap(where: str, who: str, fn):
    """Run ``fn``; a unit error becomes one line naming the PTX line and warp."""
    try:
        return fn()
    except EmuError as exc:
        msg = str(exc)
        if msg.startswith(where.split(":")[0]):
            raise
        # the units name the CTA (and warp) themselves ("CTA 0: warp 5: ..."): say it once
        own = who.split(" warp")[0] + ": "
        if msg.startswith(own):
            msg = re.sub(r"^warp \d+: ", "", msg[len(own):])
        loc = f"{where}: {who}: {msg}"
        raise (Unsupported if isinstance(exc, Unsupported) else CheckFailed)(loc) from None


@functools.lru_cache(maxsize=4096)
def _idesc(kind: str, idesc: int, g: int, scale_vec, ws: bool = False):
    return tc.decode_idesc(kind, idesc, g, scale_vec, ws)


@functools.lru_cache(maxsize=4096)
def _smem_addrs(instr, b_desc: int, a_desc, with_a: bool = True, with_b: bool = True):
    """The shared bytes the MMA reads (A read from a collector buffer reads none of its own)."""
    a = tc.mma_smem_addresses(instr, b_desc, a_desc)
    parts = ([a["B"].reshape(-1)] if with_b else []) + ([a["A"].reshape(-1)] if a["A"] is not None and with_a
                                                        else [])
    if not parts:
        out = np.zeros(0, np.int64)
        return out, mem.SHARED_RESERVED, mem.SHARED_RESERVED, None
    out = np.concatenate(parts)
    out.flags.writeable = False
    lo, hi = int(out.min()), int(out.max())
    # (the bytes as one span to copy, their offsets in it, where it is at most 8x as many bytes)
    rel = None
    if hi - lo + 1 <= 8 * out.size:
        rel = out - lo
        rel.flags.writeable = False
    return out, lo, hi, rel


@functools.lru_cache(maxsize=256)
def _d_regions(m: int, n: int, g: int, lane0: int, ws: bool = False):
    """Per CTA of the group: the (lane, column-offset) bounding box of D."""
    lay = tc.d_layout(m, n, g, lane_base=lane0, ws=ws)
    out = []
    for c in range(g):
        sel = lay.cta == c
        ln, cl = lay.lane[sel], lay.column[sel]
        out.append((int(ln.min()), int(ln.max()) + 1, int(cl.min()), int(cl.max()) + 1))
    return out


# ---- alloc / dealloc / relinquish ----------------------------------------------------------------

def _build_alloc(ins, d, g: int):
    where = d.where(ins)
    dst_fn, _ = d.addr(ins.operands[0], "shared")
    rn = d.src(ins.operands[1], "u32")
    if "shared::cta" not in ins.parts:
        raise d.unsupported("(only the .shared::cta destination)")

    def write_addr(cta, dst: int, value: int, who: str):
        rank, dst = mem.split_cluster_address(dst)
        if rank != cta.rank:
            raise CheckFailed(f"{where}: {who}: tcgen05.alloc destination 0x{(rank << mem.RANK_SHIFT) | dst:x} is not "
                              "in the executing CTA's shared::cta window")
        if dst % 4:
            raise CheckFailed(f"{where}: {who}: tcgen05.alloc destination 0x{dst:x} is not 4-byte aligned")
        cta.smem.check_span(dst, 4, "tcgen05.alloc destination")
        cta.smem.data[dst:dst + 4] = np.frombuffer(np.uint32(value).tobytes(), dtype=np.uint8)

    def alloc(w, m):
        if not _whole_warp(w, m):
            return DEFER
        sel = w.live
        dst = _uniform(dst_fn(w), sel, "tcgen05.alloc destination", where)
        ncols = _uniform(rn(w), sel, "tcgen05.alloc nCols", where)
        st = _ctatc(w.cta)
        if g == 1:
            def attempt():
                addr = _wrap(where, w.name, lambda: st.tmem.alloc(w.index, ncols, 1))
                if addr is None:
                    return False
                write_addr(w.cta, dst, addr, w.name)
                return True
            if attempt():
                return None
            return Park(attempt, lambda: f"tcgen05.alloc of {ncols} columns blocks: {st.cta.name}'s TMEM has no "
                                         f"free aligned run (allocations: {sorted(st.tmem.allocations)})", advance=True)
        ctas = _group_ctas(w, 2, where, smem=False)
        cl = w.cta.cluster
        rendezvous = cl.__dict__.setdefault("tcgen05_alloc", {})
        key = ctas[0].rank
        rec = rendezvous.get(key)
        if rec is None or rec["done"]:
            rec = rendezvous[key] = {"done": False, "arrived": {}}
        if w.cta.rank in rec["arrived"]:
            raise CheckFailed(f"{where}: {w.name}: a second warp of {w.cta.name} joins the pair's "
                              "tcgen05.alloc.cta_group::2 before the peer's warp arrived")
        rec["arrived"][w.cta.rank] = (w, dst, ncols)

        def attempt():
            if rec["done"]:
                return True
            if len(rec["arrived"]) < 2:
                return False
            (w0, d0, n0), (w1, d1, n1) = rec["arrived"][ctas[0].rank], rec["arrived"][ctas[1].rank]
            if n0 != n1:
                raise CheckFailed(f"{where}: tcgen05.alloc.cta_group::2: {w0.name} asks for {n0} columns, "
                                  f"{w1.name} for {n1}")
            t0, t1 = _ctatc(ctas[0]).tmem, _ctatc(ctas[1]).tmem
            addr = _wrap(where, w.name, lambda: tmem_unit.alloc_pair(t0, t1, w0.index, w1.index, n0))
            if addr is None:
                return False
            write_addr(ctas[0], d0, addr, w0.name)
            write_addr(ctas[1], d1, addr, w1.name)
            rec["done"] = True
            return True
        if attempt():
            return None
        return Park(attempt, lambda: f"tcgen05.alloc.cta_group::2 of {ncols} columns: waits for the peer CTA's "
                                     "warp (alloc is collective across the pair) or for free columns", advance=True)
    alloc.n_dst = 0
    return alloc


def _build_dealloc(ins, d, g: int):
    where = d.where(ins)
    ra = d.src(ins.operands[0], "u32")
    rn = d.src(ins.operands[1], "u32")

    def free(w, addr: int, ncols: int) -> None:
        st = _ctatc(w.cta)
        col = addr & 0xFFFF
        region = (0, 128, col, col + ncols)
        for op in st.inflight:
            for cta, r, _ in op.regions:
                if cta is w.cta and _overlap(r, region):
                    raise CheckFailed(f"{where}: {w.name}: tcgen05.dealloc of TMEM columns {col}..{col + ncols - 1} "
                                      f"while the {op.name} issued at {op.where} still uses them (not complete)")
        _wrap(where, w.name, lambda: st.tmem.dealloc(w.index, addr, ncols, g))

    def dealloc(w, m):
        if not _whole_warp(w, m):
            return DEFER
        sel = w.live
        addr = _uniform(ra(w), sel, "tcgen05.dealloc address", where)
        ncols = _uniform(rn(w), sel, "tcgen05.dealloc nCols", where)
        if g == 1:
            free(w, addr, ncols)
            return None
        # cta_group::2: one warp of each CTA of the pair deallocates collectively (PTX ISA
        # tcgen05.alloc/dealloc: "one warp from each of the peer CTAs must collectively
        # perform the allocation and de-allocation"); the first to arrive waits for the other
        ctas = _group_ctas(w, 2, where, smem=False)
        rendezvous = w.cta.cluster.__dict__.setdefault("tcgen05_dealloc", {})
        rec = rendezvous.get(ctas[0].rank)
        if rec is None or rec["done"]:
            rec = rendezvous[ctas[0].rank] = {"done": False, "arrived": {}}
        if w.cta.rank in rec["arrived"]:
            raise CheckFailed(f"{where}: {w.name}: a second warp of {w.cta.name} joins the pair's "
                              "tcgen05.dealloc.cta_group::2 before the peer's warp arrived")
        rec["arrived"][w.cta.rank] = (w, addr, ncols)
        if len(rec["arrived"]) < 2:
            return Park(lambda: rec["done"], lambda: "tcgen05.dealloc.cta_group::2 waits for the peer CTA's warp "
                                                     "(dealloc is collective across the pair)", advance=True)
        (w0, a0, n0), (w1, a1, n1) = rec["arrived"][ctas[0].rank], rec["arrived"][ctas[1].rank]
        if (a0, n0) != (a1, n1):
            raise CheckFailed(f"{where}: tcgen05.dealloc.cta_group::2: {w0.name} frees {n0} columns at {a0:#x}, "
                              f"{w1.name} {n1} columns at {a1:#x}")
        free(w0, a0, n0)
        free(w1, a1, n1)
        rec["done"] = True
        return None
    return dealloc


def _build_relinquish(ins, d, g: int):
    where = d.where(ins)

    def relinquish(w, m):
        if not _whole_warp(w, m):
            return DEFER
        st = _ctatc(w.cta)
        _wrap(where, w.name, lambda: st.tmem.relinquish(w.index, g))
    return relinquish


# ---- mma ----------------------------------------------------------------------------------------

# Collector buffers (PTX ISA 9.7.16.10.9 "tcgen05.mma", the .collector_usage qualifier): the tensor
# core keeps an operand (A; for .ws, B in one of buffers b0..b3) so later MMAs can reuse it
# without reading memory. ::fill reads the operand from memory and keeps it; ::use reads the
# kept one and keeps it; ::lastuse reads the kept one and releases the buffer; ::discard (the
# default) reads memory and keeps nothing. The simulator does the same: a ::fill / ::use MMA
# leaves the bytes it multiplied in the issuing CTA's buffer when it runs (MMAs of one issuer
# run in order), and a ::use / ::lastuse multiplies those bytes, not the operand's memory, and
# reads no shared memory or TMEM for that operand (so a stage reused after its ::fill is no
# race and no stale read). The numbers are the hardware's: the operand the buffer holds is the
# one the filling MMA read. A ::use / ::lastuse with no filled buffer is a warning (the ISA
# states no rule for it) and reads the operand's memory.
_USAGES = ("fill", "use", "lastuse", "discard")


def _collector(parts, ws: bool, d):
    """(buffer, usage) of the instruction's collector qualifier, or None (no qualifier)."""
    q = [p for p in parts if p.startswith("collector::")]
    if not q:
        return None
    if len(q) > 1:
        raise d.unsupported("(more than one .collector qualifier)")
    bits = q[0].split("::")
    buf, usage = (bits[1], bits[2]) if len(bits) == 3 else (None, None)
    ok = buf in (("b0", "b1", "b2", "b3") if ws else ("a",)) and usage in _USAGES
    if not ok:
        raise d.unsupported(f"(.{q[0]}: {'.ws takes .collector::b0..b3' if ws else 'takes .collector::a'}"
                            f"::{{fill,use,lastuse,discard}})")
    return buf, usage


def _collector_issue(w, st: CtaTc, coll, where: str, who: str) -> bool:
    """At issue: does this MMA read its operand from the collector buffer? Updates the
    issue-order state of the buffer."""
    buf, usage = coll
    filled = st.collector_filled.get(buf)
    if usage in ("fill", "discard"):
        if usage == "fill":
            st.collector_filled[buf] = where
        else:
            st.collector_filled.pop(buf, None)
        return False
    if filled is None:
        w.cta.launch.warn(f"{where}: {who}: tcgen05.mma .collector::{buf}::{usage} with no collector buffer filled "
                          "by an earlier ::fill / ::use: the operand is read from memory")
        if usage == "use":
            st.collector_filled[buf] = where
        return False
    if usage == "lastuse":
        st.collector_filled.pop(buf, None)
    return True


def _collector_complete(st: CtaTc, coll, keep) -> None:
    buf, usage = coll
    if usage in ("fill", "use"):
        st.collector[buf] = keep["a" if buf == "a" else "b"]
    else:
        st.collector.pop(buf, None)


def _disabled_lanes(mv, lane: int, g: int, where: str, who: str):
    """The disable-output-lane mask of ``lane``'s operands as per-CTA bool (128,) TMEM lanes:
    bit i of element j (the leftmost element first) is TMEM lane 32j + i (PTX ISA 9.7.16.10.9);
    None when nothing is disabled."""
    words = [int(v[lane]) & 0xFFFFFFFF for v in mv]
    if not any(words):
        return None
    if g != 1:
        raise Unsupported(f"{where}: {who}: a non-zero disable-output-lane mask with .cta_group::2 (which CTA's "
                          "lanes its upper four elements name) is not implemented")
    bits = np.array([(wd >> i) & 1 for wd in words for i in range(32)], dtype=bool)
    return [bits]


def scale_vec_of(parts, kind: str | None) -> str | None:
    """The scale-vector size of a block-scaled tcgen05.mma: ``.scale_vec::{1X,2X,4X}``, or the
    PTX ISA 8.8 spellings by block size, ``.block16`` (one scale per 16 K elements: 4X of the
    mxf4nvf4 K of 64) and ``.block32`` (per 32: 1X of mxf8f6f4's K of 32, 2X of the 4-bit kinds'
    K of 64); None when neither is written (the unit applies the kind's default)."""
    for p in parts:
        if p.startswith("scale_vec::"):
            return p.split("::")[1]
        if p == "block16":
            return "4X"
        if p == "block32":
            return "1X" if kind == "mxf8f6f4" else "2X"
    return None


def _build_mma(ins, d, g: int):
    parts = ins.parts
    where = d.where(ins)
    kind = next((p.split("::")[1] for p in parts if p.startswith("kind::")), None)
    if kind is None:
        raise d.unsupported("(no .kind)")
    if "sp" in parts:
        raise d.unsupported("(.sp forms)")
    # tcgen05.mma.ws (weight stationary, PTX ISA 9.7.16.10.9): .cta_group::1, M 32/64/128
    ws = "ws" in parts
    scale_vec = scale_vec_of(parts, kind)
    block_scale = "block_scale" in parts
    if block_scale != (kind in ("mxf8f6f4", "mxf4", "mxf4nvf4")):
        raise d.unsupported("(.block_scale with this kind)")
    ops = ins.operands
    coll = _collector(parts, ws, d)
    mask_op, scale_in = None, 0
    if ws:
        if g != 1:
            raise d.unsupported(f"(.ws with .cta_group::{g}: tcgen05.mma.ws is defined for .cta_group::1 only)")
        if len(ops) not in (5, 6):
            raise d.unsupported("(.ws expects [d], a, b, idesc, enable-input-d{, zero-column-mask-desc})")
        p_index = 4
    elif block_scale:
        if len(ops) != 7:
            raise d.unsupported("(expected 7 operands: [d], a, b, idesc, [sfa], [sfb], enable-input-d)")
        p_index = 6
    else:
        # [d], a, b, idesc, {disable-output-lane}?, enable-input-d, scale-input-d?  (PTX ISA 9.7.16.10.9)
        rest = list(ops[4:])
        if rest and isinstance(rest[0], ptx.Vec) and len(rest[0].items) > 1:
            mask_op = rest.pop(0)
            if len(mask_op.items) != 4 * g:
                raise d.unsupported(f"(disable-output-lane has {len(mask_op.items)} elements: the ISA's vector is "
                                    f"{4 * g} x .b32 for .cta_group::{g})")
        if len(rest) == 2:
            if not isinstance(rest[1], ptx.Imm) or not 0 <= int(rest[1].value) <= 15:
                raise d.unsupported("(scale-input-d must be an immediate in 0..15: the ISA's range)")
            if kind not in ("f16", "tf32"):
                raise d.unsupported(f"(scale-input-d with .kind::{kind}: the ISA allows it with .kind::f16 and "
                                    ".kind::tf32 only)")
            scale_in = int(rest[1].value)
        elif len(rest) != 1:
            raise d.unsupported("(expected [d], a, b, idesc, {disable-output-lane}?, enable-input-d, "
                                "scale-input-d?)")
        p_index = len(ops) - len(rest)
    mask_fns = [d.src(x, "b32") for x in mask_op.items] if mask_op is not None else None
    zmask_fn = d.src(ops[5], "b64") if ws and len(ops) == 6 else None
    d_fn, _ = d.addr(ops[0], "tmem")
    a_tmem = isinstance(ops[1], ptx.Addr)
    a_fn = d.addr(ops[1], "tmem")[0] if a_tmem else d.src(ops[1], "b64")
    b_fn = d.src(ops[2], "b64")
    i_fn = d.src(ops[3], "u32")
    if block_scale:
        sfa_fn, _ = d.addr(ops[4], "tmem")
        sfb_fn, _ = d.addr(ops[5], "tmem")
    p_fn = d.src(ops[p_index], "pred")
    name = "tcgen05.mma.ws" if ws else "tcgen05.mma"
    line = ins.line

    def mma(w, m):
        sel = w.live if m is None else m
        lanes = np.nonzero(sel)[0]
        dv = _lanes32(d_fn(w))
        av = _lanes32(a_fn(w))
        bv = _lanes32(b_fn(w))
        iv = _lanes32(i_fn(w))
        pv = _lanes32(p_fn(w))
        zv = _lanes32(zmask_fn(w)) if zmask_fn is not None else None
        mv = [_lanes32(f(w)) for f in mask_fns] if mask_fns is not None else None
        if block_scale:
            sav = _lanes32(sfa_fn(w))
            sbv = _lanes32(sfb_fn(w))
        ctas = _group_ctas(w, g, where)
        tcs = [_ctatc(c) for c in ctas]
        me = _agent(w)
        for lane in lanes:
            lane = int(lane)
            who = f"{w.name} lane {lane}"
            instr = _wrap(where, who, lambda: _idesc(kind, int(iv[lane]) & 0xFFFFFFFF, g, scale_vec, ws))
            if zv is not None and int(zv[lane]) & 0xFFFFFFFFFFFFFFFF:
                raise Unsupported(f"{where}: {who}: tcgen05.mma.ws with a non-zero zero-column-mask-desc "
                                  f"({int(zv[lane]) & 0xFFFFFFFFFFFFFFFF:#x}): column masking is not implemented")
            disabled = _disabled_lanes(mv, lane, g, where, who) if mv is not None else None
            if a_tmem and ws and instr.m != 128:
                raise Unsupported(f"{where}: {who}: tcgen05.mma.ws M={instr.m} with A in TMEM: where the .ws data "
                                  "path puts A's rows for M=32/64 is not implemented (M=128 is Layout D)")
            d_addr = int(dv[lane]) & 0xFFFFFFFF
            b_desc = int(bv[lane]) & 0xFFFFFFFFFFFFFFFF
            a_desc = None if a_tmem else int(av[lane]) & 0xFFFFFFFFFFFFFFFF
            a_addr = int(av[lane]) & 0xFFFFFFFF if a_tmem else None
            sfa = int(sav[lane]) & 0xFFFFFFFF if block_scale else None
            sfb = int(sbv[lane]) & 0xFFFFFFFF if block_scale else None
            enable_d = bool(pv[lane])
            for t in tcs:
                _wrap(where, who, lambda: t.tmem._note_cta_group(g, "tcgen05.mma"))
            lane0, dcol = d_addr >> 16, d_addr & 0xFFFF
            regions = []
            for c, (l0, l1, c0, c1) in enumerate(_wrap(where, who, lambda: _d_regions(instr.m, instr.n, g, lane0,
                                                                                      instr.ws))):
                regions.append((ctas[c], (l0, l1, dcol + c0, dcol + c1), True))
            from_buf = _collector_issue(w, tcs[0], coll, where, who) if coll is not None else False
            a_from_buf = from_buf and coll[0] == "a"
            b_from_buf = from_buf and coll[0] != "a"
            reads = []
            if a_tmem and not a_from_buf:
                k_cols = instr.k * tc.FORMAT_BITS[instr.a_format] // 32
                al0, acol = a_addr >> 16, a_addr & 0xFFFF
                for c, (l0, l1, _, _) in enumerate(_d_regions(instr.m, k_cols, g, al0)):
                    reads.append((ctas[c], (l0, l1, acol, acol + k_cols)))
            if block_scale:
                sa_cols = -(-(instr.m // g) // 32)
                sb_cols = -(-instr.n // 32)
                for c in range(g):
                    reads.append((ctas[c], (0, 128, sfa & 0xFFFF, (sfa & 0xFFFF) + sa_cols)))
                    reads.append((ctas[c], (0, 128, sfb & 0xFFFF, (sfb & 0xFFFF) + sb_cols)))
            if a_tmem and instr.a_major != "K":
                raise CheckFailed(f"{where}: {who}: tcgen05.mma with A in TMEM needs a K-major A (the idesc's "
                                  "transpose-A bit 15 must be 0)")
            for cta, r, what in [(c, r, "D") for c, r, _ in regions] + [(c, r, "A / scale factors") for c, r in reads]:
                # at issue, not only when the MMA runs: columns outside every allocation
                _wrap(where, who, lambda: tcs[ctas.index(cta)].tmem.check_columns(r[2], r[3] - r[2],
                                                                                  f"tcgen05.mma {what}"))
            for cta, r in reads:
                st = tcs[ctas.index(cta)]
                _check_inflight_mma(st, r, where, w, name)
                _check_handoff(w, sel, st, r, False, "tcgen05.mma", where)
            for cta, r, _ in regions:
                st = tcs[ctas.index(cta)]
                _check_handoff(w, sel, st, r, True, "tcgen05.mma", where)
                for widx, pr, st_where in st.pending_st:
                    if _overlap(pr, r):
                        raise CheckFailed(f"{where}: {who}: tcgen05.mma writes TMEM ({cta.name} {_region_text(r)}) "
                                          f"written by the tcgen05.st at {st_where} of warp {widx} before that "
                                          "warp's tcgen05.wait::st")
            addrs, a_lo, a_hi, rel = _wrap(where, who, lambda: _smem_addrs(instr, b_desc, a_desc, not a_from_buf,
                                                                           not b_from_buf))
            snapshots = []
            for cta in ctas:
                if a_hi >= cta.smem.data.size or a_lo < mem.SHARED_RESERVED:
                    raise CheckFailed(f"{where}: {who}: tcgen05.mma operand bytes 0x{a_lo:x}.."
                                      f"0x{a_hi:x} fall outside {cta.name}'s shared memory")
                # the MMA reads its shared operands through the async proxy (PTX ISA "Memory
                # Consistency Model: Proxies"): generic stores to them need a fence.proxy.async
                check_async_read(cta, addrs, f"{where}: the tcgen05.mma of {who}")
                if rel is not None:
                    snapshots.append(_SpanSnapshot(cta, addrs, rel, a_lo, a_hi))
                else:
                    snapshots.append((cta, addrs, cta.smem.data[addrs]))    # a gather: already a copy
            for cta, r in reads:
                _note_access(tcs[ctas.index(cta)], r, me, False)
            for cta, r, _ in regions:
                _note_access(tcs[ctas.index(cta)], r, me, True)
            for cta, r in reads:                    # happens-before, whatever order this run took
                tmem_hb.issue(w, cta, r, False, line, "tcgen05.mma")
            for cta, r, _ in regions:
                tmem_hb.issue(w, cta, r, True, line, "tcgen05.mma")
            all_regions = regions + [(c, r, False) for c, r in reads]
            tmems = [t.tmem for t in tcs]
            smems = [c.smem.data for c in ctas]

            # the operands' bytes as the snapshots hold them (B's rows, then A's, per CTA): at
            # completion they equal shared memory (compared first), so the MMA reads them there
            split = _snapshot_split(instr, a_desc is not None and not a_from_buf, not b_from_buf)
            d_key = (d_addr, instr.m, instr.n, instr.cta_group, instr.ws, instr.d_format)

            def run(chain, instr=instr, d_addr=d_addr, b_desc=b_desc, a_desc=a_desc, a_addr=a_addr,
                    enable_d=enable_d, sfa=sfa, sfb=sfb, who=who, disabled=disabled, from_buf=from_buf, st0=tcs[0],
                    snapshots=snapshots, split=split, d_key=d_key):
                keep = {} if coll is not None else None
                raw = st0.collector.get(coll[0]) if from_buf else None
                a_raw = raw if raw is not None and coll[0] == "a" else None
                b_raw = raw if raw is not None and coll[0] != "a" else None
                if split is not None:
                    a_snap, b_snap = _snapshot_operands(snapshots, split)
                    a_raw = a_snap if a_snap is not None else a_raw
                    b_raw = b_snap if b_snap is not None else b_raw
                prev = chain.get("d")
                d_in = prev[1] if prev is not None and prev[0] == d_key and prev[2] is tmems[0] else None
                chain.clear()
                out = _wrap(where, who, lambda: tc.run_mma(instr, tmems, smems, d_addr, b_desc, a_desc=a_desc,
                                                           a_tmem=a_addr, enable_input_d=enable_d,
                                                           sfa_address=sfa, sfb_address=sfb, scale_input_d=scale_in,
                                                           a_raw=a_raw, b_raw=b_raw, keep=keep,
                                                           disabled_lanes=disabled, d_in=d_in))
                if coll is not None:
                    _collector_complete(st0, coll, keep)
                if disabled is None and instr.d_format in ("f32", "s32"):
                    chain["d"] = (d_key, out, tmems[0])
            op = AsyncOp(name, where, who, all_regions, snapshots, run, tcs, chained=True)
            for t in tcs:
                t.inflight.append(op)
            _pipe(w, lane).open.append(op)
            w.sched.counters["tcgen05.mma"] = w.sched.counters.get("tcgen05.mma", 0) + 1
        return None
    mma.n_dst = 0
    return mma


def _snapshot_split(instr, a_in_snapshot: bool, b_in_snapshot: bool):
    """How an MMA's snapshot (``_smem_addrs``: B's bytes, then A's) splits into the operands
    ``units.tcgen05.run_mma`` reads from each CTA's shared memory: (B rows, A rows, row
    bytes, which are present), or None where the shapes differ from what run_mma reads (it
    reads B with A's row bytes)."""
    g = instr.cta_group
    kb = instr.k * tc.FORMAT_BITS[instr.a_format] // 8
    if instr.k * tc.FORMAT_BITS[instr.b_format] // 8 != kb:
        return None
    return instr.n // g, instr.m // g, kb, a_in_snapshot, b_in_snapshot


def _snapshot_operands(snapshots, split):
    """(A raw, B raw) from the snapshots: each (rows, row bytes) uint8 of every CTA, even
    first, as run_mma would read them; None for an operand not in them."""
    nb, na, kb, with_a, with_b = split
    a_parts, b_parts = [], []
    for snap in snapshots:
        raw = snap.bytes() if type(snap) is _SpanSnapshot else snap[2]
        off = 0
        if with_b:
            b_parts.append(raw[:nb * kb].reshape(nb, kb))
            off = nb * kb
        if with_a:
            a_parts.append(raw[off:off + na * kb].reshape(na, kb))
    a = (a_parts[0] if len(a_parts) == 1 else np.concatenate(a_parts)) if with_a else None
    b = (b_parts[0] if len(b_parts) == 1 else np.concatenate(b_parts)) if with_b else None
    return a, b


def _check_inflight_mma(st: CtaTc, region, where: str, w, name: str) -> None:
    for widx, r, st_where in st.pending_st:
        if _overlap(r, region):
            raise CheckFailed(f"{where}: {w.name}: {name} reads TMEM ({st.cta.name} {_region_text(region)}) written "
                              f"by the tcgen05.st at {st_where} of warp {widx} before that warp's tcgen05.wait::st")


# ---- commit --------------------------------------------------------------------------------------

def _build_commit(ins, d, g: int):
    from porter.emu.ops.sync import _barrier_at

    parts = ins.parts
    where = d.where(ins)
    if "mbarrier::arrive::one" not in parts:
        raise d.unsupported("(only .mbarrier::arrive::one)")
    multicast = "multicast::cluster" in parts
    bar_fn, _ = d.addr(ins.operands[0], "shared")
    mask_fn = d.src(ins.operands[1], "u16") if multicast else None

    def commit(w, m):
        sel = w.live if m is None else m
        lanes = np.nonzero(sel)[0]
        bars_v = _lanes32(bar_fn(w))
        masks = _lanes32(mask_fn(w)) if multicast else None
        for lane in lanes:
            lane = int(lane)
            addr = int(bars_v[lane])
            if multicast:
                mask = int(masks[lane]) & 0xFFFF
                ranks = [r for r in range(16) if mask >> r & 1]
                n = len(w.cta.cluster.ctas)
                if not ranks:
                    raise CheckFailed(f"{where}: {w.name}: tcgen05.commit multicast with an empty CTA mask")
                if max(ranks) >= n:
                    raise CheckFailed(f"{where}: {w.name}: tcgen05.commit multicast mask 0x{mask:x} names CTA ranks "
                                      f"beyond the {n}-CTA cluster")
                _, off = mem.split_cluster_address(addr, w.cta.rank)
                bars = [_barrier_at(w, mem.cluster_address(off, r), where)
                        for r in ranks]
            else:
                bars = [_barrier_at(w, addr, where)]
            p = _pipe(w, lane)
            grp = Group(p.open, bars, where, f"{w.name} lane {lane}")
            grp.hb = tmem_hb.commit(w)
            p.open = []
            p.fifo.append(grp)
            # seeded: half the groups complete a few rounds after the commit, half only once every
            # warp is parked (the latest the ISA allows: the widest window for early readers), or
            # after LATE_ROUNDS rounds should some warp poll without parking (test_wait loops)
            rng = w.sched.rng
            late = rng is not None and rng.random() < 0.5
            w.sched.engine.submit(w.sched.round, functools.partial(p.complete_through, grp),
                                  f"tcgen05.commit at {where} ({len(grp.ops)} operation(s))",
                                  delay=LATE_ROUNDS if late else None)
        return None
    commit.n_dst = 0
    return commit


# ---- ld / st / wait ------------------------------------------------------------------------------

def _shape_num(parts, d):
    shape = next((p for p in parts if _LD_SHAPE.fullmatch(p)), None)
    num = next((int(_NUM.fullmatch(p).group(1)) for p in parts if _NUM.fullmatch(p)), None)
    if shape is None or num is None:
        raise d.unsupported("(shape / .num)")
    if any(p.startswith("pack::") or p.startswith("unpack::") for p in parts):
        raise d.unsupported("(.pack::16b / .unpack::16b)")
    return shape, num


def _ld_region(w, addr: int, shape: str, num: int):
    lane0, col = (addr >> 16) % 128, addr & 0xFFFF     # the lane field modulo 128, as units.tmem reads it
    nl = 32 if shape == "32x32b" else 16
    regs = tmem_unit._REGS_X1.get(shape, 1) * num
    ncols = {"32x32b": num, "16x64b": 2 * num, "16x128b": 4 * num, "16x256b": 8 * num}.get(shape, regs)
    return (lane0, lane0 + nl, col, col + ncols)


def _ld_regions(w, addr: int, shape: str, num: int, split: int) -> tuple:
    """The rectangles a tcgen05.ld / st touches: one, or .16x32bx2's two blocks (16 lanes x
    num columns at the address and ``split`` columns after it)."""
    first = _ld_region(w, addr, shape, num)
    if shape != "16x32bx2":
        return (first,)
    lo, hi, col, end = first
    return (first, (lo, hi, col + split, end + split))


def _split_offset(ins, d, shape: str, at: int) -> int:
    """.16x32bx2's immHalfSplitoff, the operand at ``at`` (PTX ISA 9.7.16.8.3 / 9.7.16.8.4:
    an immediate); 0 for the other shapes, which take none."""
    ops = ins.operands
    if shape != "16x32bx2":
        return 0
    if len(ops) != 3 or not isinstance(ops[at], ptx.Imm):
        raise d.unsupported("(.16x32bx2 takes the immHalfSplitoff immediate after the address, PTX ISA 9.7.16.8.3)")
    split = int(ops[at].value)
    if split < 0:
        raise d.unsupported(f"(.16x32bx2 immHalfSplitoff {split}: a column offset, not negative)")
    return split


def _lane_routed(w, addr: int, shape: str, what: str, where: str) -> int:
    """``addr`` as the access runs: itself, or, when the launch relaxes "tmem-lanes" and the lane
    field only slips out of the warp's lane quarter (PTX ISA 9.7.16.8.1), the same lane of the
    warp's own quarter, as release hardware routes it (a warning once per instruction; any other
    lane error stays the unit's)."""
    launch = w.cta.launch
    if "tmem-lanes" not in launch.relaxed:
        return addr
    slip = tmem_unit.quarter_slip(w.index, addr, shape)
    if slip is None:
        return addr
    routed, finding = slip
    launch.relaxed_error("tmem-lanes", f"{where}: {w.name}: {what} [{addr:#x}]: {finding}", where)
    return routed


def _build_ld(ins, d):
    where = d.where(ins)
    shape, num = _shape_num(ins.parts, d)
    dvec, aop = ins.operands[0], ins.operands[1]
    split = _split_offset(ins, d, shape, 2)
    if not isinstance(dvec, ptx.Vec):
        raise d.unsupported("(destination must be a vector)")
    ids = [d.rid(x) for x in dvec.items]
    regs = tmem_unit._REGS_X1.get(shape, 1) * num
    if len(ids) != regs:
        raise d.unsupported(f"(.{shape}.x{num} needs {regs} destination registers, got {len(ids)})")
    a_fn, _ = d.addr(aop, "tmem")
    line = ins.line

    def ld(w, m):
        if not _whole_warp(w, m):
            return DEFER
        sel = w.live
        addr = _lane_routed(w, _uniform(a_fn(w), sel, "tcgen05.ld address", where) & 0xFFFFFFFF, shape,
                            f"tcgen05.ld.{shape}.x{num}", where)
        st = _ctatc(w.cta)
        regions = _ld_regions(w, addr, shape, num, split)
        for region in regions:
            _check_inflight(st, region, False, "tcgen05.ld", where, w)
            _check_handoff(w, sel, st, region, False, "tcgen05.ld", where)
        vals = _wrap(where, w.name, lambda: st.tmem.ld(w.index, addr, shape, num, split))
        for region in regions:
            _note_access(st, region, _agent(w), False, w, where)
            tmem_hb.access(w, w.cta, region, False, line, "tcgen05.ld")
        # the ISA states no rule against reading it before the wait (a warning, not an error)
        pending = _UnwaitedLd(f"the destination of the tcgen05.ld at line {line}, before the tcgen05.wait::ld "
                              "that covers it")
        pend = w.units.setdefault("tcgen05_ld_regs", set())
        rows = np.ascontiguousarray(vals.T)       # each row a register's lanes, never written in place
        regs = w.r
        for j, i in enumerate(ids):
            regs[i] = rows[j]
        w.poisoned.update(dict.fromkeys(ids, pending))
        pend.update(ids)
        return None
    ld.n_dst = 1
    return ld


def _build_st(ins, d):
    where = d.where(ins)
    shape, num = _shape_num(ins.parts, d)
    split = _split_offset(ins, d, shape, 1)
    aop, vec = ins.operands[0], ins.operands[-1]
    if not isinstance(vec, ptx.Vec):
        raise d.unsupported("(source must be a vector)")
    srcs = [d.src(x, "b32") for x in vec.items]
    regs = tmem_unit._REGS_X1.get(shape, 1) * num
    if len(srcs) != regs:
        raise d.unsupported(f"(.{shape}.x{num} needs {regs} source registers, got {len(srcs)})")
    a_fn, _ = d.addr(aop, "tmem")
    line = ins.line

    def st_(w, m):
        if not _whole_warp(w, m):
            return DEFER
        sel = w.live
        addr = _lane_routed(w, _uniform(a_fn(w), sel, "tcgen05.st address", where) & 0xFFFFFFFF, shape,
                            f"tcgen05.st.{shape}.x{num}", where)
        st = _ctatc(w.cta)
        regions = _ld_regions(w, addr, shape, num, split)
        for region in regions:
            _check_inflight(st, region, True, "tcgen05.st", where, w)
            _check_handoff(w, sel, st, region, True, "tcgen05.st", where)
        # one row per register, each assigned (an unsafe cast, as astype: the same bits), then
        # seen as (lanes, registers): a third of the cost of broadcasting and stacking copies
        rows = np.empty((len(srcs), 32), dtype=np.uint32)
        for j, f in enumerate(srcs):
            rows[j] = np.asarray(f(w))
        vals = rows.T
        _wrap(where, w.name, lambda: st.tmem.st(w.index, addr, shape, num, vals, split))
        for region in regions:
            _note_access(st, region, _agent(w), True, w, where)
            tmem_hb.access(w, w.cta, region, True, line, "tcgen05.st")
            st.pending_st.append((w.index, region, where))
        return None
    st_.n_dst = 0
    return st_


def _build_wait(ins, d):
    kind = ins.parts[1]

    if kind == "wait::ld":
        def wait_ld(w, m):
            if not _whole_warp(w, m):
                return DEFER
            for i in w.units.pop("tcgen05_ld_regs", ()):
                w.poisoned.pop(i, None)
        return wait_ld
    if kind == "wait::st":
        def wait_st(w, m):
            if not _whole_warp(w, m):
                return DEFER
            st = w.cta.units.get("tcgen05")
            if st is not None and st.pending_st:
                st.pending_st = [p for p in st.pending_st if p[0] != w.index]
        return wait_st
    raise d.unsupported()


# ---- cp -----------------------------------------------------------------------------------------

def _build_cp(ins, d, g: int):
    where = d.where(ins)
    parts = ins.parts
    shape = next((p for p in parts if re.fullmatch(r"\d+x\d+b", p)), None)
    if shape is None:
        raise d.unsupported("(shape)")
    multicast = next((p for p in parts if p.startswith("warpx")), None)
    if any(p.startswith("b8x16") or p.startswith("b6x16") or p.startswith("b4x16") for p in parts):
        raise d.unsupported("(decompression .b8x16 forms)")
    a_fn, _ = d.addr(ins.operands[0], "tmem")
    s_fn = d.src(ins.operands[1], "b64")
    rows, row_bytes, _ = tmem_unit._CP_SHAPES.get(shape, (0, 0, None))
    if not rows:
        raise d.unsupported(f"(shape .{shape})")
    name = "tcgen05.cp"
    line = ins.line

    def cp(w, m):
        sel = w.live if m is None else m
        av = _lanes32(a_fn(w))
        sv = _lanes32(s_fn(w))
        ctas = _group_ctas(w, g, where)
        tcs = [_ctatc(c) for c in ctas]
        for lane in np.nonzero(sel)[0]:
            lane = int(lane)
            who = f"{w.name} lane {lane}"
            addr = int(av[lane]) & 0xFFFFFFFF
            sdesc = int(sv[lane]) & 0xFFFFFFFFFFFFFFFF
            col = addr & 0xFFFF
            ncols = row_bytes // 4
            lanes = (0, 128) if multicast == "warpx4" or rows == 128 else ((addr >> 16), (addr >> 16) + rows)
            region = (lanes[0], lanes[1], col, col + ncols)
            src = _wrap(where, who, lambda: tc.operand_addresses(sdesc, rows, row_bytes, "K", 8).reshape(-1))
            snapshots, later = [], []
            own = _own_inflight(w, lane, _CP_IN_ORDER)
            for cta, st in zip(ctas, tcs):
                behind = _overlapping(st, region, own)
                _check_inflight(st, region, True, "tcgen05.cp", where, w, own)
                _check_handoff(w, sel, st, region, True, "tcgen05.cp", where)
                if src.max() >= cta.smem.data.size or src.min() < mem.SHARED_RESERVED:
                    raise CheckFailed(f"{where}: {who}: tcgen05.cp source bytes fall outside {cta.name}'s "
                                      "shared memory")
                check_async_read(cta, src, f"{where}: the tcgen05.cp of {who}")
                if behind:                   # lands after them, in the thread's issue order
                    _warn_cp_behind(w, where, who, behind[0], st, region)
                    later.append((st, cta))
                else:
                    _wrap(where, who, lambda: st.tmem.cp(addr, cta.smem.data, sdesc, shape, multicast, g))
                _note_access(st, region, _agent(w), True)
                tmem_hb.issue(w, cta, region, True, line, name)
                snapshots.append((cta, src, cta.smem.data[src].copy()))
            if later:
                def run(later=tuple(later), addr=addr, sdesc=sdesc, who=who):
                    for st_, cta_ in later:
                        _wrap(where, who, lambda: st_.tmem.cp(addr, cta_.smem.data, sdesc, shape, multicast, g))
                op = AsyncOp(name, where, who, [(cta_, region, True) for _, cta_ in later], snapshots, run, tcs)
                for st_, _ in later:
                    st_.inflight.append(op)
            else:
                op = AsyncOp(name, where, who, [], snapshots, lambda: None, tcs)
            _pipe(w, lane).open.append(op)
        return None
    cp.n_dst = 0
    return cp


# a thread's in-flight operations a tcgen05.cp over their TMEM is run after, in issue order
_CP_IN_ORDER = ("tcgen05.mma", "tcgen05.mma.ws", "tcgen05.cp")


def _overlapping(st: CtaTc, region, ops) -> list:
    """Those of ``ops`` (in flight) that read or write ``region`` of ``st``'s TMEM."""
    return [op for op in ops if any(cta is st.cta and _overlap(r, region) for cta, r, _ in op.regions)]


def _warn_cp_behind(w, where: str, who: str, op, st: CtaTc, region) -> None:
    """A tcgen05.cp into TMEM the same thread's in-flight MMA (or copy) still uses: the PTX ISA
    pipelines cp -> mma but lists no mma -> cp pair (9.7.16.6.2), so it states no order between
    the two. CUTLASS's sm100 block-scaled mainloop and DeepGEMM's sm100 FP8 GEMM copy each K
    block's scale factors into the same columns while the previous block's MMAs may run, relying
    on one thread's tcgen05 operations executing in issue order; the simulator runs the copy
    after them (a warning, once per instruction)."""
    w.cta.launch.warn_once(("tcgen05.cp behind", where), lambda: (
        f"{where}: {who}: tcgen05.cp writes TMEM ({st.cta.name} {_region_text(region)}) that the {op.name} issued "
        f"at {op.where} by the same thread still uses; no tcgen05 pipeline orders the two, and the simulator runs "
        "the copy after it, in issue order"))


# ---- shift ----------------------------------------------------------------------------------------

def _own_inflight(w, lane: int, names) -> set:
    """This thread's issued, not yet complete operations named in ``names``."""
    p = _pipe(w, lane)
    ops = list(p.open) + [op for g in p.fifo if not g.done for op in g.ops]
    return {op for op in ops if op.name in names}


def _build_shift(ins, d, g: int):
    """``tcgen05.shift.cta_group::N.down [taddr]`` (PTX ISA 9.7.16.9.3): asynchronous, issued
    by one thread, in that thread's pipeline like tcgen05.mma: it executes when its
    tcgen05.commit group completes, in issue order with the thread's MMAs (9.7.16.6.2 pairs
    mma -> shift and shift -> mma). Its 32 lanes x 8 columns are fenced off until then; an
    in-flight operation of another kind, or another thread's, writing or reading them is an
    error (no pipeline orders the two)."""
    where = d.where(ins)
    parts = ins.parts
    if "down" not in parts:
        raise d.unsupported("(only .down)")
    op0 = ins.operands[0]
    a_fn = d.addr(op0, "tmem")[0] if isinstance(op0, ptx.Addr) else d.src(op0, "u32")
    name = "tcgen05.shift"
    line = ins.line

    def shift(w, m):
        sel = w.live if m is None else m
        av = _lanes32(a_fn(w))
        ctas = _group_ctas(w, g, where)
        tcs = [_ctatc(c) for c in ctas]
        me = _agent(w)
        for lane in np.nonzero(sel)[0]:
            lane = int(lane)
            who = f"{w.name} lane {lane}"
            addr = int(av[lane]) & 0xFFFFFFFF
            lane0, col, ncols = _wrap(where, who, lambda: tmem_unit.shift_region(addr))
            region = (lane0, lane0 + tmem_unit.SHIFT_LANES, col, col + ncols)
            ordered = _own_inflight(w, lane, ("tcgen05.mma", "tcgen05.mma.ws"))
            for t in tcs:
                _wrap(where, who, lambda: t.tmem._note_cta_group(g, name))
                _wrap(where, who, lambda: t.tmem.check_columns(col, ncols, name))
                _check_inflight(t, region, True, name, where, w, ordered)
                for widx, pr, st_where in t.pending_st:
                    if _overlap(pr, region):
                        raise CheckFailed(f"{where}: {who}: {name} reads TMEM ({t.cta.name} {_region_text(region)}) "
                                          f"written by the tcgen05.st at {st_where} of warp {widx} before that "
                                          "warp's tcgen05.wait::st")
                _check_handoff(w, sel, t, region, True, name, where)
            for cta, t in zip(ctas, tcs):
                _note_access(t, region, me, False)
                _note_access(t, region, me, True)
                tmem_hb.issue(w, cta, region, False, line, name)
                tmem_hb.issue(w, cta, region, True, line, name)
            tmems = [t.tmem for t in tcs]

            def run(addr=addr, tmems=tmems, who=who):
                for t in tmems:
                    _wrap(where, who, lambda: t.shift_down(addr, g))
            op = AsyncOp(name, where, who, [(c, region, True) for c in ctas], [], run, tcs)
            for t in tcs:
                t.inflight.append(op)
            _pipe(w, lane).open.append(op)
        return None
    shift.n_dst = 0
    return shift


# ---- fences --------------------------------------------------------------------------------------

def _build_fence(ins, d):
    kind = ins.parts[1]
    if kind == "fence::after_thread_sync":
        def after(w, m):
            waited = w.units.get("mbarrier_waited")
            if waited is not None:
                rest = waited[0] & ~(w.live if m is None else m)
                if rest.any():
                    w.units["mbarrier_waited"] = (rest, waited[1])
                else:
                    del w.units["mbarrier_waited"]
        return after
    if kind == "fence::before_thread_sync":
        def before(w, m):
            ep = _epochs(w.cta.cluster)
            a = _agent(w)
            ep[a] = ep.get(a, 0) + 1
        return before
    raise d.unsupported()


# ---- dispatch ------------------------------------------------------------------------------------

def build_tcgen05(ins, d):
    parts = ins.parts
    op = parts[1]
    g = _cta_group(parts, d)
    # The machine reads the builder's ``n_dst`` after calling it (operands before it are
    # destinations, the rest sources for the poison checker): only tcgen05.ld has one.
    build_tcgen05.n_dst = 1 if op == "ld" else 0
    if op == "alloc":
        return _build_alloc(ins, d, g)
    if op == "dealloc":
        return _build_dealloc(ins, d, g)
    if op == "relinquish_alloc_permit":
        return _build_relinquish(ins, d, g)
    if op == "mma":
        return _build_mma(ins, d, g)
    if op == "commit":
        return _build_commit(ins, d, g)
    if op == "ld":
        return _build_ld(ins, d)
    if op == "st":
        return _build_st(ins, d)
    if op.startswith("wait::"):
        return _build_wait(ins, d)
    if op == "cp":
        return _build_cp(ins, d, g)
    if op == "shift":
        return _build_shift(ins, d, g)
    if op.startswith("fence::"):
        return _build_fence(ins, d)
    raise d.unsupported()


build_tcgen05.n_dst = 0

BUILDERS = {"tcgen05": build_tcgen05}
