"""Control flow and warp collectives: bra, ret/exit, trap, shfl.sync, vote.sync, elect.sync,
bar.warp.sync, activemask (PTX ISA 9.7.12, 9.7.13).

A branch whose lanes disagree splits the warp (per-lane pcs); the stepper runs the
lowest-pc lanes and the warp reconverges where the pcs meet. A ``.sync`` collective
waits for every lane of its member mask: reached by only some of them (a diverged
warp), it defers those lanes so the others can catch up (``DEFER``), as independent
thread scheduling would.
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.control import DEFER, HANDLED
from porter.emu.errors import CheckFailed, Unsupported

LANES = np.arange(32)
_NO_LANE = bytes(32)
_ALL_LANES = bytes([1]) * 32      # a 32-lane bool array with every lane true, as bytes


def build_bra(ins, d):
    target = d.label(ins.operands[0])
    g = d.rid(ptx.Reg(ins.guard)) if ins.guard is not None else None
    neg = ins.guard_neg
    uniform = "uni" in ins.parts
    where = d.where(ins)
    if g is None:
        def bra(w, m):
            return target
        return bra

    def cbra(w, m):
        p = w.r[g]
        if m is None and w.full:        # every lane: the predicate's own bytes decide (no mask op)
            t = p.tobytes()
            if t == _ALL_LANES:
                return None if neg else target
            if t == _NO_LANE:
                return target if neg else None
        if neg:
            p = ~p
        sel = w.live if m is None else m
        taken = p & sel
        t = taken.tobytes()             # bool masks as bytes: ~20x cheaper than any()/all()
        if t == _NO_LANE:
            return None
        if t == sel.tobytes():
            return target
        if uniform:
            raise CheckFailed(f"{where}: bra.uni with a predicate that differs across the warp's lanes")
        w.set_pcs(m, target, w.cur, taken)
        return HANDLED
    cbra.handles_guard = True
    return cbra


build_bra.n_dst = 0


def guarded_lanes(w, m, g, neg: bool):
    """(the executing lanes, those whose guard ``@[!]p`` holds) for an instruction that takes
    its own guard (``handles_guard``); the second is the first itself when there is no guard,
    and None when the guard holds on no lane (the instruction falls through)."""
    group = w.live if m is None else m
    if g is None:
        return group, group
    sel = group & (~w.r[g] if neg else w.r[g])
    return group, (None if sel.tobytes() == _NO_LANE else sel)


def build_brx(ins, d):
    """``@p brx.idx{.uni} index, tlist``: branch to ``tlist[index]`` (PTX ISA 9.7.12.4), the
    list a ``.branchtargets`` directive (parsed into ``Kernel.branch_tables``). Lanes whose
    indices differ split the warp: the lanes of the first target leave, the others stay at
    this brx.idx (``set_pcs`` from pc - 1) and take the next target when it runs again;
    lanes whose guard is false fall through. An index past the list's end is undefined
    behaviour in the ISA: an error naming the lane and index."""
    if "idx" not in ins.parts or len(ins.operands) != 2:
        raise d.unsupported()
    idx_op, tl = ins.operands
    if not isinstance(tl, ptx.Sym) or tl.name not in d.kernel.branch_tables:
        raise d.unsupported(f"(brx.idx target list {tl!r} is not a .branchtargets of {d.kernel.name})")
    table = np.array(d.kernel.branch_tables[tl.name], dtype=np.int64)
    n = table.size
    ri = d.src(idx_op, "u32")
    g = d.rid(ptx.Reg(ins.guard)) if ins.guard is not None else None
    neg = ins.guard_neg
    uniform = "uni" in ins.parts
    where = d.where(ins)

    def brx(w, m):
        sel, go = guarded_lanes(w, m, g, neg)
        if go is None:
            return None
        idx = np.broadcast_to(np.asarray(ri(w)), (32,)).astype(np.int64)
        bad = go & (idx >= n)
        if bad.any():
            lane = int(np.argmax(bad))
            raise CheckFailed(f"{where}: brx.idx index {int(idx[lane])} in lane {lane} is past the end of its "
                              f"{n}-entry .branchtargets list")
        tgt = np.where(go, table[np.minimum(idx, n - 1)], -1)
        first = int(tgt[go][0])
        taken = go & (tgt == first)
        if taken.tobytes() == sel.tobytes():
            return first
        if uniform:
            raise CheckFailed(f"{where}: brx.idx.uni with a guard or index that differs across the warp's lanes")
        rest = go & ~taken
        # lanes of other targets stay here to take theirs next; the guard's false lanes fall through
        w.set_pcs(m, first, w.cur - 1 if rest.any() else w.cur, taken)
        return HANDLED
    brx.handles_guard = True
    return brx


build_brx.n_dst = 0


def build_ret(ins, d):
    def ret(w, m):
        w.exit_lanes(m)
        if not w.done and not w.converged:
            w.reconverge()
        return HANDLED
    return ret


build_ret.n_dst = 0


def build_trap(ins, d):
    where = d.where(ins)

    def trap(w, m):
        raise CheckFailed(f"{where}: {w.name} executed trap (the kernel aborted itself: a failed check or "
                          "watchdog in the kernel)")
    return trap


build_trap.n_dst = 0


def build_brkpt(ins, d):
    """``brkpt`` (PTX ISA 9.7.19.1): a breakpoint. With no debugger attached the launch fails
    there (CUTLASS/CuTe put one on paths that must never run); the simulator stops the run,
    as ``trap`` does, when a warp reaches it. Decoding it is harmless."""
    where = d.where(ins)

    def brkpt(w, m):
        raise CheckFailed(f"{where}: {w.name} executed brkpt (a breakpoint: with no debugger the kernel stops here)")
    return brkpt


build_brkpt.n_dst = 0


def _members(w, m, membermask):
    """Lanes named by the member mask; DEFER unless all of them (live ones) are executing."""
    mm = ((np.asarray(membermask).astype(np.uint64) >> LANES.astype(np.uint64)) & 1).astype(bool)
    mm = mm & w.live
    sel = w.live if m is None else m
    if (mm & ~sel).any():
        return None, DEFER
    return mm, None


def build_shfl(ins, d):
    parts = ins.parts
    mode = parts[2]
    if mode not in ("idx", "up", "down", "bfly") or parts[1] != "sync":
        raise d.unsupported()
    dst, a, b, c, mask = ins.operands
    pdst = None
    if isinstance(dst, ptx.Pair):
        dst, pdst = dst.first, dst.second
    ra, rb, rc, rmask = d.src(a, "b32"), d.src(b, "b32"), d.src(c, "b32"), d.src(mask, "b32")
    wd = d.dst(dst, "b32")
    wp = d.dst(pdst, "pred") if pdst is not None and pdst is not ptx.SINK else None
    where = d.where(ins)
    if all(isinstance(x, ptx.Imm) for x in (b, c, mask)):
        return _shfl_fixed(mode, ra, int(rb(None)), int(rc(None)), int(rmask(None)), wd, wp, where)
    if isinstance(c, ptx.Imm) and isinstance(mask, ptx.Imm):
        return _shfl_fixed_clamp(mode, ra, rb, int(rc(None)), int(rmask(None)), wd, wp, where)

    # Source lanes and in-range flags are a pure function of the b and c operands' lanes;
    # compilers keep c and the member mask in registers, so they are looked up by value.
    lanes_for: dict = {}
    members_for: dict = {}

    def shfl(w, m):
        mv = np.asarray(rmask(w))
        if mv.ndim == 0:
            mval = int(mv)
        else:                                    # the first executing lane's (lane 0 of a full warp)
            mval = int(mv[0] if m is None and w.full else mv[int(np.argmax(w.lanes(m)))])
        members = members_for.get(mval)
        if members is None:
            members = members_for[mval] = ((np.uint64(mval & 0xFFFFFFFF) >> LANES.astype(np.uint64))
                                           & np.uint64(1)).astype(bool)
        # every live lane executing (m None): no member can be missing
        if m is not None and (members & w.live & ~m).tobytes() != _NO_LANE:
            return DEFER                         # a member lane is not here yet (diverged warp)
        bw, cw = np.asarray(rb(w)), np.asarray(rc(w))
        key = (bw.tobytes(), cw.tobytes())
        hit = lanes_for.get(key)
        if hit is None:
            if len(lanes_for) > 256:
                lanes_for.clear()
            hit = lanes_for[key] = _shfl_lanes(mode, bw, cw)
        src_lane, ok = hit
        if m is not None or not w.full:          # (full: every lane live, so every source executes)
            _check_sources(w, m, src_lane, where)
        src = np.asarray(ra(w))
        src = np.full(32, src) if src.ndim == 0 else src
        wd(w, src.take(src_lane), m)
        if wp is not None:
            wp(w, ok, m)
    return shfl


def _shfl_lanes(mode, bw, cw):
    """(source lane per lane, in range per lane) for shfl operands b and c (PTX ISA 9.7.8.6)."""
    lane = LANES
    bval = np.asarray(bw).astype(np.int64) & 0x1F
    cv = np.asarray(cw).astype(np.int64)
    cval = cv & 0x1F
    segmask = (cv >> 8) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask)
    min_lane = lane & segmask
    if mode == "idx":
        j = min_lane | (bval & ~segmask)
        ok = j <= max_lane
    elif mode == "up":
        j = lane - bval
        ok = j >= max_lane
    elif mode == "down":
        j = lane + bval
        ok = j <= max_lane
    else:
        j = lane ^ bval
        ok = j <= max_lane
    j = np.where(ok, j, lane)
    return np.clip(j, 0, 31), np.ascontiguousarray(np.broadcast_to(ok, (32,)))


def _check_sources(w, m, src_lane, where: str) -> None:
    """A lane that reads a lane not executing this shfl.sync (exited, or on another path)
    gets an undefined value: a warning naming the lanes (only on a diverged or partly exited
    warp, so a full warp's shuffle costs nothing)."""
    sel = w.live if m is None else m
    bad = sel & ~sel[src_lane]
    if bad.any():
        i = int(np.argmax(bad))
        w.cta.launch.warn(f"{where}: {w.name}: shfl.sync lane {i} reads lane {int(src_lane[i])}, which does not "
                          "execute it (exited, or on another path): the value it gets is undefined")


def _shfl_fixed(mode, ra, b, c, membermask, wd, wp, where=""):
    """shfl.sync with immediate lane, clamp and member mask (the usual butterfly and
    broadcast): source lanes, in-range flags and members are computed once, at decode, by
    the same rules as the general form."""
    lane = LANES.astype(np.int64)
    bval, cval, segmask = b & 0x1F, c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask)
    min_lane = lane & segmask
    j = {"idx": min_lane | (bval & ~segmask), "up": lane - bval, "down": lane + bval, "bfly": lane ^ bval}[mode]
    ok = (j >= max_lane) if mode == "up" else (j <= max_lane)
    src_lane = np.clip(np.where(ok, j, lane), 0, 31)
    members = ((np.uint64(membermask & 0xFFFFFFFF) >> LANES.astype(np.uint64)) & np.uint64(1)).astype(bool)

    def shfl(w, m):
        if m is not None and (members & w.live & ~m).tobytes() != _NO_LANE:
            return DEFER                 # a member lane is not here yet (diverged warp)
        if m is not None or not w.full:
            _check_sources(w, m, src_lane, where)
        src = np.asarray(ra(w))
        src = np.full(32, src) if src.ndim == 0 else src
        wd(w, src.take(src_lane), m)
        if wp is not None:
            wp(w, ok, m)
    return shfl


def _shfl_fixed_clamp(mode, ra, rb, c, membermask, wd, wp, where=""):
    """shfl.sync with the lane (or offset) in a register and an immediate clamp and member
    mask (a reduction loop): the lane-dependent bounds and the members come from decode."""
    lane = LANES.astype(np.int64)
    cval, segmask = c & 0x1F, (c >> 8) & 0x1F
    max_lane = (lane & segmask) | (cval & ~segmask)
    min_lane = lane & segmask
    members = ((np.uint64(membermask & 0xFFFFFFFF) >> LANES.astype(np.uint64)) & np.uint64(1)).astype(bool)

    def shfl(w, m):
        if m is not None and (members & w.live & ~m).tobytes() != _NO_LANE:
            return DEFER
        bval = np.asarray(rb(w)).astype(np.int64) & 0x1F
        if mode == "idx":
            j = min_lane | (bval & ~segmask)
        elif mode == "up":
            j = lane - bval
        elif mode == "down":
            j = lane + bval
        else:
            j = lane ^ bval
        ok = (j >= max_lane) if mode == "up" else (j <= max_lane)
        j = np.where(ok, j, lane)       # in 0..31 in every mode: no clip needed
        if m is not None or not w.full:
            _check_sources(w, m, j, where)
        src = np.asarray(ra(w))
        src = np.full(32, src) if src.ndim == 0 else src
        wd(w, src.take(j), m)
        if wp is not None:
            wp(w, np.broadcast_to(ok, (32,)), m)
    return shfl


_REDUX = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
          "xor": np.bitwise_xor}


def build_redux(ins, d):
    """``redux.sync.op.type d, a, membermask`` (sm_80+, PTX ISA "redux.sync"): the reduction of
    ``a`` over the member lanes, in every member lane (add wraps; .u32/.s32/.b32 only)."""
    parts = ins.parts
    op = parts[2] if len(parts) > 3 else None
    t = parts[-1]
    if parts[1] != "sync" or op not in _REDUX or t not in ("u32", "s32", "b32"):
        raise d.unsupported()
    dst, a, mask = ins.operands
    ra, rmask, wd = d.src(a, t), d.src(mask, "b32"), d.dst(dst, t)
    f = _REDUX[op]
    wide = np.int64 if t == "s32" else np.uint64

    def redux(w, m):
        mv = rmask(w)
        mm, r = _members(w, m, mv if np.ndim(mv) == 0 else mv[0])
        if r is not None:
            return r
        vals = np.broadcast_to(np.asarray(ra(w)), (32,))[mm].astype(wide)
        if not vals.size:
            return None
        total = f.reduce(vals)
        if op == "add":
            total = total & wide(0xFFFFFFFF) if t != "s32" else np.int64(np.int32(np.int64(total) & 0xFFFFFFFF))
        wd(w, np.full(32, total).astype(np.uint64 if t != "s32" else np.int64).astype(
            {"u32": np.uint32, "b32": np.uint32, "s32": np.int32}[t]), mm)
    return redux


def build_vote(ins, d):
    parts = ins.parts
    mode = parts[2]
    dst, a, mask = ins.operands
    t = "b32" if mode == "ballot" else "pred"
    ra, rmask, wd = d.src(a, "pred"), d.src(mask, "b32"), d.dst(dst, t)

    def vote(w, m):
        mm, r = _members(w, m, rmask(w) if np.ndim(rmask(w)) == 0 else rmask(w)[0])
        if r is not None:
            return r
        p = np.asarray(ra(w)) & mm          # (a negated source !%p arrives complemented: decode.src)
        if mode == "any":
            out = np.full(32, p.any())
        elif mode == "all":
            out = np.full(32, bool((p | ~mm).all()))
        elif mode == "uni":
            out = np.full(32, bool(p[mm].all() or not p[mm].any()))
        elif mode == "ballot":
            out = np.full(32, int(np.sum(p.astype(np.uint64) << LANES.astype(np.uint64))), dtype=np.uint32)
        else:
            raise Unsupported(f"vote mode {mode} is outside the simulator's subset")
        wd(w, out, m)
    return vote


def build_elect(ins, d):
    dst, mask = ins.operands
    first, pred = (dst.first, dst.second) if isinstance(dst, ptx.Pair) else (dst, None)
    wr = d.dst(first, "b32") if first is not ptx.SINK else None
    wp = d.dst(pred, "pred") if pred is not None and pred is not ptx.SINK else None
    rmask = d.src(mask, "b32")

    def elect(w, m):
        mv = rmask(w)
        mm, r = _members(w, m, mv if np.ndim(mv) == 0 else mv[0])
        if r is not None:
            return r
        cands = np.nonzero(mm)[0]
        if cands.size == 0:
            raise CheckFailed(f"elect.sync with no live lane in its member mask in {w.name}")
        rng = w.sched.rng
        if rng is None or not w.sched.random_elect:
            leader = int(cands[0])
        else:       # PTX ISA elect.sync: "the same leader thread is elected for the same membermask every time"
            key = int(np.sum(mm.astype(np.uint64) << LANES.astype(np.uint64)))
            chosen = w.sched.__dict__.setdefault("elect_leaders", {})
            leader = chosen.get(key)
            if leader is None:
                leader = chosen[key] = int(rng.choice(cands))
        if wp is not None:
            wp(w, LANES == leader, m)
        if wr is not None:
            wr(w, np.full(32, leader, dtype=np.uint32), m)
    return elect


def build_activemask(ins, d):
    wd = d.dst(ins.operands[0], "b32")

    def activemask(w, m):
        sel = w.live if m is None else m
        wd(w, np.full(32, int(np.sum(sel.astype(np.uint64) << LANES.astype(np.uint64))), dtype=np.uint32), m)
    return activemask


BUILDERS = {"redux": build_redux, "bra": build_bra, "brx": build_brx, "ret": build_ret, "exit": build_ret,
            "trap": build_trap, "brkpt": build_brkpt, "shfl": build_shfl, "vote": build_vote, "elect": build_elect,
            "activemask": build_activemask}
