"""Barriers and synchronisation: bar / barrier (named CTA barriers), barrier.cluster,
mbarrier, fences, mapa, setmaxnreg, nanosleep, and the no-op hints (prefetch,
createpolicy) (PTX ISA 9.7.13).

Named barriers count threads a warp at a time (the ``.aligned`` forms need the whole
warp, so a diverged warp defers until it has converged). A barrier with no thread
count expects every non-exited thread of the CTA; ``barrier.cluster`` every
non-exited thread of the cluster. mbarrier operations are per thread: each executing
lane arrives (or waits) on the barrier its own address names.
"""

from __future__ import annotations

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.control import DEFER, Park
from porter.emu.errors import CheckFailed
from porter.emu.ops.memory import clear_generic_written
from porter.emu.ops.mbarrier_query import PHASE_MASK, no_complete_completed, token, tokens
from porter.emu.units.mbarrier import TX_LIMIT, MBarrier

WARP = 32


def _whole_warp(w, m) -> bool:
    return m is None or bool((m == w.live).all())


# ---- bar / barrier (named CTA barriers) -------------------------------------------------------

class NamedBarrier:
    def __init__(self):
        self.expected = None
        self.arrived = 0
        self.generation = 0


def _cta_threads(cta) -> int:
    return sum(WARP for w in cta.warps if not w.done)


def named_barrier_arrival(w, where, rid, rcount):
    """Check warp ``w``'s arrival at the named barrier its ``rid`` operand names (bar / barrier
    and bar.red share these rules): the id in 0..15, a thread count (``rcount``, None: the
    whole CTA) a positive multiple of 32, and the same expected count as the threads already
    there. Returns (barrier id, its NamedBarrier, the expected thread count); arrives nothing."""
    bid = int(np.asarray(rid(w)).reshape(-1)[0])
    if not 0 <= bid < 16:
        raise CheckFailed(f"{where}: named barrier {bid} outside 0..15")
    count = None
    if rcount is not None:
        count = int(np.asarray(rcount(w)).reshape(-1)[0])
        if count % WARP or count <= 0:
            raise CheckFailed(f"{where}: barrier {bid} thread count {count} is not a positive multiple of 32")
    nb = w.cta.named_barriers.setdefault(bid, NamedBarrier())
    expected = count if count is not None else _cta_threads(w.cta)
    if nb.arrived and nb.expected != expected:
        raise CheckFailed(f"{where}: {w.name} arrives at barrier {bid} expecting {expected} threads while "
                          f"others expect {nb.expected}")
    return bid, nb, expected


def named_barrier_arrive(w, where, bid, nb, expected) -> int:
    """Warp ``w``'s 32 threads arrive at named barrier ``bid`` (checked by
    named_barrier_arrival), completing its phase when the expected count has arrived. Returns
    the generation arrived at: the phase is complete once ``nb.generation`` exceeds it."""
    nb.expected = expected
    nb.arrived += WARP
    gen = nb.generation
    race = w.sched.race
    if race is not None:
        race.release(w, nb)
    if nb.arrived >= expected:
        if nb.arrived > expected:
            raise CheckFailed(f"{where}: barrier {bid} got {nb.arrived} arrivals for {expected} threads")
        nb.arrived = 0
        nb.generation += 1
        nb.expected = None
        if race is not None:
            race.publish(nb, nb.generation)
    return gen


def named_barrier_passed(w, nb, gen: int) -> bool:
    """Whether the phase ``gen`` of ``nb`` that warp ``w`` arrived at is complete (the race
    checker then orders w after every arrival of it)."""
    if nb.generation > gen:
        race = w.sched.race
        if race is not None:
            race.acquire(w, nb, gen + 1)
        return True
    return False


def build_bar(ins, d):
    parts = ins.parts
    if parts[1] == "warp":                                   # bar.warp.sync membermask
        from porter.emu.ops.control import _members
        rmask = d.src(ins.operands[0], "b32")

        def warp_sync(w, m):
            mv = rmask(w)
            _, r = _members(w, m, mv if np.ndim(mv) == 0 else mv[0])
            return r
        return warp_sync
    kind = parts[1] if parts[0] == "bar" else parts[1]
    if parts[0] == "barrier" and parts[1] == "cluster":
        return _build_cluster_barrier(ins, d)
    if kind == "cta":
        kind = parts[2]
    if kind not in ("sync", "arrive", "red"):
        raise d.unsupported()
    if kind == "red":
        raise d.unsupported()
    ops = ins.operands
    rid = d.src(ops[0], "u32")
    rcount = d.src(ops[1], "u32") if len(ops) > 1 else None
    wait = kind == "sync"
    where = d.where(ins)

    def bar(w, m):
        if not _whole_warp(w, m):
            return DEFER
        bid, nb, expected = named_barrier_arrival(w, where, rid, rcount)
        gen = named_barrier_arrive(w, where, bid, nb, expected)
        if not wait:
            return None
        return Park(lambda: named_barrier_passed(w, nb, gen),
                    lambda: f"bar.sync {bid}: {nb.arrived} of {nb.expected} threads arrived", advance=True)
    return bar


build_bar.n_dst = 0


def _build_cluster_barrier(ins, d):
    parts = ins.parts
    kind = parts[2]
    where = d.where(ins)

    if kind == "arrive":
        releases = "relaxed" not in parts       # the default .release orders the CTA's mbarrier.init too

        def arrive(w, m):
            if not _whole_warp(w, m):
                return DEFER
            cl = w.cta.cluster
            if releases:                        # as fence.mbarrier_init would (PTX ISA 9.7.13.4 membar/fence)
                for bar in w.cta.mbarriers.values():
                    if bar.initialised and getattr(bar, "fence_gen", None) is None:
                        bar.fence_gen = cl.barrier_generation
            if id(w) in cl.warp_phase and cl.warp_phase[id(w)] == cl.barrier_generation:
                raise CheckFailed(f"{where}: {w.name} arrives twice at the cluster barrier in one phase")
            cl.warp_phase[id(w)] = cl.barrier_generation
            cl.barrier_arrived += 1
            if w.sched.race is not None:
                w.sched.race.release(w, cl)
            cluster_barrier_recheck(cl, w.sched.race)
            return None
        return arrive
    if kind == "wait":
        def wait(w, m):
            if not _whole_warp(w, m):
                return DEFER
            cl = w.cta.cluster
            gen = cl.warp_phase.get(id(w))
            if gen is None:
                raise CheckFailed(f"{where}: {w.name} waits on the cluster barrier without arriving first")

            def ready():
                return cl.barrier_generation > gen
            if ready():
                del cl.warp_phase[id(w)]
                if w.sched.race is not None:
                    w.sched.race.acquire(w, cl, gen + 1)
                return None
            return Park(ready, lambda: f"barrier.cluster.wait: {_arrived_live(cl)} of {cl.live_warps()} running warps "
                                       "of the cluster arrived", advance=False)
        return wait
    raise d.unsupported()


def _arrived_live(cl) -> int:
    """Running warps of the cluster that have arrived in the barrier's current phase."""
    gen, phase = cl.barrier_generation, cl.warp_phase
    return sum(1 for c in cl.ctas for w in c.warps if not w.done and phase.get(id(w)) == gen)


def cluster_barrier_recheck(cl, race=None) -> None:
    """Complete the cluster barrier's phase once every non-exited warp has arrived in it
    (PTX ISA "barrier.cluster": "When all non-exited threads in the cluster have
    executed barrier.cluster.arrive, the barrier completes"). A warp that arrived and then
    exited must not stand in for one that has not arrived yet: the test is per warp, not a
    count of arrivals against the warps still running (ThunderKittens' idle warps arrive
    and exit while the warp that initialises the barriers is still on its way)."""
    if not cl.barrier_arrived:
        return
    gen = cl.barrier_generation
    phase = cl.warp_phase
    for c in cl.ctas:
        for w in c.warps:
            if not w.done and phase.get(id(w)) != gen:
                return
    cl.barrier_arrived = 0
    cl.barrier_generation += 1
    if race is not None:
        race.publish(cl, cl.barrier_generation)


# ---- mbarrier -----------------------------------------------------------------------------------

def _barrier_at(w, addr: int, where: str, create: bool = False) -> MBarrier:
    rank, off = mem.split_cluster_address(addr, w.cta.rank)
    cta = w.cta if rank == w.cta.rank else w.cta.peer(rank, f"{where}: {w.name}")
    if off % 8:
        raise CheckFailed(f"{where}: mbarrier address 0x{off:x} is not 8-byte aligned")
    cta.smem.check_span(off, 8, "mbarrier access")
    bar = cta.mbarriers.get(off)
    if bar is None:
        bar = MBarrier(f"{cta.name} shared 0x{off:x}")
        bar.cta = cta
        sched = w.sched

        def phase_done(bar=bar):
            sched.yield_now = True          # let the waiters run at once
            if sched.race is not None:
                sched.race.publish(bar, bar.phase)
        bar.on_complete = phase_done
        cta.mbarriers[off] = bar
    if cta is not w.cta and not create:
        check_remote_ready(bar, cta, f"{where}: {w.name}")
    return bar


def check_remote_ready(bar: MBarrier, cta, who: str) -> None:
    """A barrier another CTA touches must be initialised and the init fenced and published
    by a cluster barrier (fence.mbarrier_init.release.cluster or a release barrier.cluster.arrive,
    then barrier.cluster.wait)."""
    if not bar.initialised:
        raise CheckFailed(f"{who}: remote use of the mbarrier at {bar.where} before its mbarrier.init")
    fenced = getattr(bar, "fence_gen", None)
    if fenced is None or cta.cluster.barrier_generation <= fenced:
        raise CheckFailed(f"{who}: remote use of the mbarrier at {bar.where} before its init was made visible "
                          "to the cluster (fence.mbarrier_init.release.cluster or a release barrier.cluster.arrive, "
                          "then the cluster barrier's wait)")


def _lane_addrs(w, m, addr_fn):
    sel = w.live if m is None else m
    a = addr_fn(w)
    return (a if m is None and w.full else a[sel]).tolist()      # (Python ints, as int(x) of each)


def _one_value(v, sel, full: bool):
    """The one value the lanes ``sel`` of ``v`` hold (a Python int), or None when they differ
    (``full``: every lane is selected, so the 32 lanes' bytes are compared at once)."""
    if type(v) is not np.ndarray or v.shape != (WARP,):
        v = np.broadcast_to(np.asarray(v), (WARP,))
    if full:
        raw = v.tobytes()
        return int(v[0]) if raw == raw[:v.itemsize] * WARP else None
    a = v[sel]
    if not a.size or np.count_nonzero(a != a[0]):
        return None
    return int(a[0])


def _arrive_once(w, sel, a: int, vals, expect: bool, remote: bool, wd, m, where: str) -> bool:
    """mbarrier.arrive of the lanes ``sel``, which all name the barrier at ``a``, as one update
    of it: the same barrier state, state tokens and errors as the lanes' arrives one by one
    (each token is the phase and pending count before that lane's arrive), when the lanes'
    arrivals stay within the current phase and complete it, if at all, at the last lane.
    False, with nothing changed, where they would not (the caller then takes them one by one)."""
    if not remote and mem.split_cluster_address(a)[0] != w.cta.rank:
        return False                         # (the per-lane path raises the ISA's error)
    bar = _barrier_at(w, a, where)
    if not bar.initialised:
        return False
    lanes = np.flatnonzero(sel)
    n = lanes.size
    if expect:
        counts = None
        total = n
        tx = int(vals.sum(dtype=np.int64))
        if bar.tx + tx > TX_LIMIT:
            return False
    else:
        counts = vals.astype(np.int64) if vals is not None else None
        total = int(counts.sum()) if counts is not None else n
    if total > bar.pending or (total == bar.pending and counts is not None and counts[-1] == 0):
        return False
    race = w.sched.race
    if race is not None:                     # one release stands for the lanes' (same clock joined)
        race.release(w, bar)
    if wd is not None:
        before = np.arange(n, dtype=np.int64) if counts is None else np.cumsum(counts) - counts
        state = np.zeros(WARP, dtype=np.uint64)
        state[lanes] = tokens(bar, bar.pending - before)
    if expect:
        bar.expect_tx(tx)
    bar.arrive(total, w.name)
    if wd is not None:
        wd(w, state, m)
    return True


def build_mbarrier(ins, d):
    parts = ins.parts
    kind = parts[1]
    ops = ins.operands
    where = d.where(ins)
    if kind == "init":
        addr_fn, _ = d.addr(ops[0], "shared")
        rc = d.src(ops[1], "u32")

        def init(w, m):
            sel = w.live if m is None else m
            counts = np.broadcast_to(np.asarray(rc(w)), (32,))[sel]
            for a, c in zip(_lane_addrs(w, m, addr_fn), counts):
                bar = _barrier_at(w, a, where, create=True)
                bar.init(int(c))
                bar.fence_gen = None
        return init
    if kind in ("arrive", "arrive_drop"):
        expect = "expect_tx" in parts
        remote = "shared::cluster" in parts
        no_complete = "noComplete" in parts
        dst, addr = ops[0], ops[1]
        addr_fn, _ = d.addr(addr, "shared")
        extra = d.src(ops[2], "u32") if len(ops) > 2 else None
        wd = d.dst(dst, "b64") if dst is not ptx.SINK and not (isinstance(dst, ptx.Sym) and dst.name == "_") else None

        def arrive(w, m):
            sel = w.live if m is None else m
            vals = np.broadcast_to(np.asarray(extra(w)), (32,))[sel] if extra is not None else None
            if kind == "arrive" and not no_complete:
                a = _one_value(addr_fn(w), sel, m is None and w.full)
                if a is not None and _arrive_once(w, sel, a, vals, expect, remote, wd, m, where):
                    return None
            state = np.zeros(32, dtype=np.uint64)
            for j, a in enumerate(_lane_addrs(w, m, addr_fn)):
                if not remote and mem.split_cluster_address(a)[0] != w.cta.rank:
                    raise CheckFailed(f"{where}: mbarrier.arrive.shared::cta on 0x{a:x}, an address of another CTA's "
                                      "shared memory (PTX ISA \"mbarrier.arrive\": a .shared::cta address must be in "
                                      "the executing CTA's window)")
                bar = _barrier_at(w, a, where)
                if w.sched.race is not None:
                    w.sched.race.release(w, bar)
                # the state token is the phase the arrive took part in, read before an arrive
                # that completes it advances the barrier (PTX ISA "mbarrier.arrive": state is the phase before the arrive);
                # bits 32.. carry what mbarrier.pending_count reads (ops/mbarrier_query.py)
                state[np.nonzero(sel)[0][j]] = token(bar, no_complete)
                if expect:
                    bar.expect_tx(int(vals[j]))
                    done = bar.arrive(1, w.name)
                else:
                    done = bar.arrive(int(vals[j]) if vals is not None else 1, w.name)
                if done and no_complete:
                    no_complete_completed(where, bar)
                if kind == "arrive_drop":
                    bar.expected -= 1
                    bar.pending = min(bar.pending, bar.expected)
            if wd is not None:
                wd(w, state, m)
        return arrive
    if kind in ("expect_tx", "complete_tx"):
        # mbarrier.expect_tx / mbarrier.complete_tx [addr], txCount: a tx-count change by the
        # executing thread, without an arrive (PTX ISA "mbarrier.expect_tx", "mbarrier.complete_tx")
        addr_fn, _ = d.addr(ops[0], "shared")
        rtx = d.src(ops[1], "u32")
        complete = kind == "complete_tx"

        def expect_tx(w, m):
            sel = w.live if m is None else m
            vals = np.broadcast_to(np.asarray(rtx(w)), (32,))[sel]
            for a, v in zip(_lane_addrs(w, m, addr_fn), vals):
                bar = _barrier_at(w, a, where)
                if complete:
                    if w.sched.race is not None:
                        w.sched.race.release(w, bar)
                    bar.complete_tx(int(v))
                else:
                    bar.expect_tx(int(v))
        return expect_tx
    if kind in ("try_wait", "test_wait"):
        parity = "parity" in parts
        dst, addr, phase = ops[0], ops[1], ops[2]
        addr_fn, _ = d.addr(addr, "shared")
        rphase = d.src(phase, "u32" if parity else "b64")
        wd = d.dst(dst, "pred")
        blocking = kind == "try_wait"

        def done(bar, p):
            if parity:
                return bar.phase_done(p)
            return bar.phase > (p & PHASE_MASK)   # the state token from arrive holds the phase number

        def lane_pairs(w, m, sel):
            """The lanes' (barrier, phase) pairs, each distinct pair once in the order of its first
            lane (the lanes of a warp usually wait on one: then one pair, ``which`` None), and
            per lane the index of its pair: the same barriers looked up, the same first failure,
            the same outcome per lane, the same acquires (idempotent) as lane by lane."""
            full = m is None and w.full
            phases = rphase(w)
            if not parity:        # a state token: only its phase field names the phase waited on
                phases = np.asarray(phases) & np.uint64(PHASE_MASK)
            a = _one_value(addr_fn(w), sel, full)
            p = _one_value(phases, sel, full) if a is not None else None
            if p is not None:
                return [(_barrier_at(w, a, where), p)], None
            ph = np.broadcast_to(np.asarray(phases), (32,))[sel].tolist()
            first_of: dict = {}
            bars, which = [], []
            for a, p in zip(_lane_addrs(w, m, addr_fn), ph):
                k = first_of.get((a, p))
                if k is None:
                    k = first_of[(a, p)] = len(bars)
                    bars.append((_barrier_at(w, a, where), p))
                which.append(k)
            return bars, which

        def try_wait(w, m):
            sel = w.live if m is None else m
            bars, which = lane_pairs(w, m, sel)
            ok = [done(b, p) for b, p in bars]
            if all(ok) or not blocking:
                if which is None:
                    out = sel.copy() if ok[0] else np.zeros(32, dtype=bool)
                else:
                    out = np.zeros(32, dtype=bool)
                    out[np.nonzero(sel)[0]] = [ok[k] for k in which]
                wd(w, out, m)
                if w.sched.race is not None:
                    for (b, _), o in zip(bars, ok):
                        if o:
                            w.sched.race.acquire(w, b)
                if blocking:      # lanes whose wait completed (read by the tcgen05 fence checker)
                    prev = w.units.get("mbarrier_waited")
                    w.units["mbarrier_waited"] = (sel.copy() if prev is None else prev[0] | sel, where)
                return None
            first = next(bp for bp, o in zip(bars, ok) if not o)
            bar, p = first
            # The first try at a phase not yet complete returns false at once: a try_wait may end
            # when its time limit expires with the phase still incomplete (PTX ISA "mbarrier.test_wait
            # / mbarrier.try_wait": the limit is the implementation's, and may be hinted), so a kernel
            # must loop on it; the retry parks until the phase completes. A kernel that goes on after
            # one try reads what its barrier does not yet guard, and the checkers see it.
            key = (id(bar), p, bar.phase)
            if w.units.get("try_wait_expired") != key:
                w.units["try_wait_expired"] = key
                out = np.zeros(32, dtype=bool)      # (lanes whose own phase completed: true, acquired)
                if which is not None:
                    out[np.nonzero(sel)[0]] = [ok[k] for k in which]
                    if w.sched.race is not None:
                        for (b, _), o in zip(bars, ok):
                            if o:
                                w.sched.race.acquire(w, b)
                wd(w, out, m)
                return None
            bar.waiters += 1

            def ready():
                r = all(done(b, pp) for b, pp in bars)
                if r:
                    bar.waiters -= 1
                return r
            return Park(ready, lambda: f"mbarrier.try_wait{'.parity' if parity else ''} on {bar.where} for "
                                       f"{'parity ' + str(p & 1) if parity else 'phase ' + str(p)}: {bar.state()}")
        return try_wait
    if kind == "inval":
        addr_fn, _ = d.addr(ops[0], "shared")

        def inval(w, m):
            for a in _lane_addrs(w, m, addr_fn):
                bar = _barrier_at(w, a, where, create=True)
                bar.initialised = False
        return inval
    raise d.unsupported()


build_mbarrier.n_dst = 0


# ---- fences, mapa, setmaxnreg, nanosleep, hints ------------------------------------------------

def build_fence(ins, d):
    if "mbarrier_init" in ins.opcode:
        def fence_init(w, m):
            gen = w.cta.cluster.barrier_generation
            for bar in w.cta.mbarriers.values():
                if bar.initialised and getattr(bar, "fence_gen", None) is None:
                    bar.fence_gen = gen
        return fence_init

    if "proxy" in ins.parts and "async" in ins.parts:
        def fence_proxy_async(w, m):
            # the executing thread's generic writes become visible to the async proxy; the
            # simulator clears the mark for the whole CTA (other threads order through a barrier)
            clear_generic_written(w.cta)
        return fence_proxy_async

    def fence(w, m):
        return None
    return fence


build_fence.n_dst = 0


def build_noop(ins, d):
    def noop(w, m):
        return None
    return noop


build_noop.n_dst = 0


def build_createpolicy(ins, d):
    wd = d.dst(ins.operands[0], "b64")

    def createpolicy(w, m):
        wd(w, np.zeros(32, dtype=np.uint64), m)     # an opaque cache policy: hints change nothing here
    return createpolicy


def build_mapa(ins, d):
    parts = ins.parts
    if "shared::cluster" not in parts:
        raise d.unsupported("(only mapa.shared::cluster)")
    t = "u64" if parts[-1] == "u64" else "u32"
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, t), d.src(b, "u32"), d.dst(dst, t)
    where = d.where(ins)

    def mapa(w, m):
        addr = np.broadcast_to(np.asarray(ra(w)).astype(np.int64), (32,))
        rank = np.broadcast_to(np.asarray(rb(w)).astype(np.int64), (32,))
        n = len(w.cta.cluster.ctas)
        sel = w.lanes(m)
        if (rank[sel] >= n).any():
            raise CheckFailed(f"{where}: mapa to CTA rank {int(rank[sel].max())} of a {n}-CTA cluster")
        wd(w, ((rank << mem.RANK_SHIFT) | (addr & mem.OFFSET_MASK)).astype(np.uint64 if t == "u64" else np.uint32), m)
    return mapa


def build_getctarank(ins, d):
    """``getctarank{.shared::cluster}.{u32,u64} d, a``: the rank of the CTA whose shared memory
    ``a`` names (the rank bits of the shared::cluster window, memory.py)."""
    if ins.parts[-1] not in ("u32", "u64"):
        raise d.unsupported()
    t = ins.parts[-1]
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, "u32")

    def getctarank(w, m):
        v = np.broadcast_to(np.asarray(ra(w)), (32,)).astype(np.int64)
        wd(w, ((v >> mem.RANK_SHIFT) & mem.RANK_MASK).astype(np.uint32), m)
    return getctarank


def build_setmaxnreg(ins, d):
    parts = ins.parts
    inc = parts[1] == "inc"
    rn = d.src(ins.operands[0], "u32")
    where = d.where(ins)

    def setmaxnreg(w, m):
        if not _whole_warp(w, m):
            return DEFER
        n = int(np.asarray(rn(w)).reshape(-1)[0])
        if n % 8 or not 24 <= n <= 256:
            raise CheckFailed(f"{where}: setmaxnreg {n}: must be a multiple of 8 in 24..256")
        cta = w.cta
        if cta.regs_per_thread is None:
            return None                     # the kernel's register count is unknown: rules only
        cur = cta.warp_regs.get(w.index, cta.regs_per_thread)
        wg = w.index // 4
        if inc and n < cur or (not inc and n > cur):
            raise CheckFailed(f"{where}: setmaxnreg.{parts[1]} {n} in {w.name}, which holds {cur} registers "
                              "per thread")
        if not inc:
            cta.reg_pool += (cur - n) * WARP
            cta.warp_regs[w.index] = n
            return None
        need = (n - cur) * WARP

        def ready():
            if cta.reg_pool >= need:
                cta.reg_pool -= need
                cta.warp_regs[w.index] = n
                return True
            return False
        if ready():
            return None
        return Park(ready, lambda: f"setmaxnreg.inc {n} (warpgroup {wg}) waits for {need} registers; the CTA's "
                                   f"pool has {cta.reg_pool} (is the dec/inc split unbalanced?)", advance=True)
    return setmaxnreg


build_setmaxnreg.n_dst = 0


def build_nanosleep(ins, d):
    rt = d.src(ins.operands[0], "u32")

    def nanosleep(w, m):
        t = int(np.asarray(rt(w)).reshape(-1).max())
        wake = w.sched.time_ns + max(t, 1)
        return Park(lambda: w.sched.time_ns >= wake, lambda: f"nanosleep until {wake} ns", advance=True,
                    wake_ns=wake)
    return nanosleep


build_nanosleep.n_dst = 0

BUILDERS = {"bar": build_bar, "barrier": build_bar, "mbarrier": build_mbarrier, "fence": build_fence,
            "membar": build_fence, "mapa": build_mapa, "getctarank": build_getctarank, "setmaxnreg": build_setmaxnreg,
            "nanosleep": build_nanosleep, "prefetch": build_noop, "prefetchu": build_noop,
            "createpolicy": build_createpolicy, "discard": build_noop, "applypriority": build_noop,
            "griddepcontrol": build_noop}
