"""Warp collectives public kernels use beyond porter's own: ``match.{any,all}.sync``,
``redux.sync.{min,max}{.abs}{.NaN}.f32`` (sm_100a), ``movmatrix.sync.aligned.m8n8.trans.b16``
and the CTA barrier with a reduction, ``bar.red`` / ``barrier.red`` (``__syncthreads_count``,
``_and``, ``_or``) (PTX ISA 9.0: 9.7.13.1 "bar, barrier", 9.7.13 "match.sync" and "redux.sync",
9.7.14.5.17 "movmatrix"; numbering as in porter.emu.isa_rules).

Like the other ``.sync`` collectives, each waits for every lane of its member mask: reached
by only some (a diverged warp), those lanes defer until the rest arrive.
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.control import DEFER, Park
from porter.emu.errors import CheckFailed
from porter.emu.ops.control import _members
from porter.emu.ops.packed_float import encode

LANES = np.arange(32)


def _mask_value(v, w, m) -> int:
    v = np.asarray(v)
    return int(v if v.ndim == 0 else v[int(np.argmax(w.live if m is None else m))])


def build_match(ins, d):
    """``match.any.sync.b32/b64 d, a, membermask``: each member lane gets the mask of the
    members whose ``a`` equals its own; ``match.all.sync.b32/b64 d{|p}, a, membermask``: the
    member mask if all members agree, else 0 (p: whether they agree)."""
    parts = ins.parts
    mode, t = parts[1], parts[-1]
    if parts[2:3] != ["sync"] or mode not in ("any", "all") or t not in ("b32", "b64"):
        raise d.unsupported()
    dst, a, mask = ins.operands
    pred = None
    if isinstance(dst, ptx.Pair):
        dst, pred = dst.first, dst.second
    if mode == "any" and pred is not None:
        raise d.unsupported("(match.any has no predicate destination)")
    ra, rmask, wd = d.src(a, t), d.src(mask, "b32"), d.dst(dst, "b32")
    wp = d.dst(pred, "pred") if pred is not None and pred is not ptx.SINK else None

    def match(w, m):
        mm, r = _members(w, m, _mask_value(rmask(w), w, m))
        if r is not None:
            return r
        vals = np.broadcast_to(np.asarray(ra(w)), (32,))
        bits = (mm.astype(np.uint64) << LANES.astype(np.uint64))
        if mode == "any":
            same = (vals[:, None] == vals[None, :]) & mm[None, :]
            out = (same.astype(np.uint64) << LANES.astype(np.uint64)[None, :]).sum(axis=1)
            wd(w, out.astype(np.uint32), mm)
            return None
        agree = bool((vals[mm] == vals[mm][0]).all()) if mm.any() else True
        wd(w, np.full(32, int(bits.sum()) if agree else 0, dtype=np.uint32), mm)
        if wp is not None:
            wp(w, np.full(32, agree), mm)
        return None
    return match


def build_redux_f32(ins, d):
    """``redux.sync.{min,max}{.abs}{.NaN}.f32 d, a, membermask``: the minimum / maximum of
    ``a`` (of |a| with .abs) over the member lanes, in each; a NaN input is ignored unless
    .NaN (then the result is the canonical NaN); -0 orders below +0."""
    parts = ins.parts
    op = parts[2]
    if op not in ("min", "max"):
        raise d.unsupported("(redux.sync on .f32 takes .min or .max)")
    absval, propagate = "abs" in parts, "NaN" in parts
    dst, a, mask = ins.operands
    ra, rmask, wd = d.src(a, "f32"), d.src(mask, "b32"), d.dst(dst, "b32")

    def redux(w, m):
        mm, r = _members(w, m, _mask_value(rmask(w), w, m))
        if r is not None:
            return r
        x = np.broadcast_to(np.asarray(ra(w), np.float32), (32,))[mm].astype(np.float64)
        if not x.size:
            return None
        if absval:
            x = np.abs(x)
        nan = np.isnan(x)
        if nan.all() or (propagate and nan.any()):
            y = np.nan
        else:
            x = x[~nan]
            y = x.max() if op == "max" else x.min()
            if y == 0:                                  # -0 orders below +0
                zeros = x[x == 0]
                y = -0.0 if (op == "min" and np.signbit(zeros).any()) or (op == "max" and np.signbit(zeros).all()) \
                    else 0.0
        bits = encode(np.full(32, y), "f32")
        wd(w, bits.astype(np.uint32), mm)
        return None
    return redux


def build_movmatrix(ins, d):
    """``movmatrix.sync.aligned.m8n8.trans.b16 d, a``: the 8x8 b16 matrix the warp holds in
    ldmatrix's fragment (lane l: row l/4, columns 2(l%4), 2(l%4)+1), transposed in place."""
    if ins.opcode != "movmatrix.sync.aligned.m8n8.trans.b16":
        raise d.unsupported("(only movmatrix.sync.aligned.m8n8.trans.b16)")
    dst, a = ins.operands
    ra, wd = d.src(a, "b32"), d.dst(dst, "b32")
    where = d.where(ins)
    lane = LANES
    # d[l] element e = M[2(l%4)+e][l/4], held by lane 4(2(l%4)+e) + (l/4)/2, half (l/4)%2
    src_lane = [4 * (2 * (lane % 4) + e) + (lane // 4) // 2 for e in (0, 1)]
    src_half = ((lane // 4) % 2).astype(np.uint32) * np.uint32(16)

    def movmatrix(w, m):
        if m is not None and not bool((m == w.live).all()):
            return DEFER
        if not w.live.all():
            raise CheckFailed(f"{where}: movmatrix is a warp collective (.sync.aligned): every lane must execute it")
        v = np.broadcast_to(np.asarray(ra(w)), (32,)).astype(np.uint32)
        lo = (v[src_lane[0]] >> src_half) & np.uint32(0xFFFF)
        hi = (v[src_lane[1]] >> src_half) & np.uint32(0xFFFF)
        wd(w, lo | (hi << np.uint32(16)), None)
        return None
    return movmatrix


def build_bar_red(ins, d):
    """``bar.red.popc.u32 d, a{, b}, {!}c`` and ``bar.red.{and,or}.pred p, a{, b}, {!}c``
    (``barrier.red`` alike): a CTA barrier (barrier ``a``, ``b`` threads or the whole CTA)
    whose threads also reduce ``c``: the count of threads with c true, or its and / or; every
    thread gets the result when the barrier completes."""
    from porter.emu.ops.sync import named_barrier_arrival, named_barrier_arrive, named_barrier_passed

    parts = ins.parts
    op = next((p for p in parts if p in ("popc", "and", "or")), None)
    if op is None:
        raise d.unsupported()
    ops = ins.operands
    if len(ops) not in (3, 4):
        raise d.unsupported("(bar.red d, a{, b}, c)")
    dst, rid = ops[0], d.src(ops[1], "u32")
    rcount = d.src(ops[2], "u32") if len(ops) == 4 else None
    cop = ops[-1]
    neg = False
    if isinstance(cop, ptx.Reg) and cop.name.startswith("!"):
        cop, neg = ptx.Reg(cop.name[1:]), True
    rc = d.src(cop, "pred")
    wd = d.dst(dst, "u32" if op == "popc" else "pred")
    where = d.where(ins)

    def bar_red(w, m):
        if m is not None and not bool((m == w.live).all()):
            return DEFER
        bid, nb, expected = named_barrier_arrival(w, where, rid, rcount)
        c = np.broadcast_to(np.asarray(rc(w)), (32,)).astype(bool)
        c = (~c if neg else c)[w.live]
        gen = nb.generation
        acc = getattr(nb, "reductions", None)
        if acc is None:
            acc = nb.reductions = {}
        part = int(c.sum()) if op == "popc" else (bool(c.all()) if op == "and" else bool(c.any()))
        if gen not in acc:
            acc[gen] = part
        elif op == "popc":
            acc[gen] += part
        else:
            acc[gen] = (acc[gen] and part) if op == "and" else (acc[gen] or part)
        named_barrier_arrive(w, where, bid, nb, expected)
        if nb.generation > gen:                   # this arrival completed the phase
            acc.pop(gen - 1, None)

        def ready():
            if named_barrier_passed(w, nb, gen):
                value = acc[gen]
                wd(w, np.full(32, value, dtype=np.uint32 if op == "popc" else bool), None)
                return True
            return False
        return Park(ready, lambda: f"bar.red {bid}: {nb.arrived} of {nb.expected} threads arrived", advance=True)
    return bar_red


build_bar_red.n_dst = 1


def _is_bar_red(ins) -> bool:
    return len(ins.parts) > 1 and ins.parts[1] == "red"


def _is_redux_f32(ins) -> bool:
    return ins.parts[-1] == "f32"


BUILDERS = {"match": build_match, "movmatrix": build_movmatrix}
FORMS = [("bar", _is_bar_red, build_bar_red), ("barrier", _is_bar_red, build_bar_red),
         ("redux", _is_redux_f32, build_redux_f32)]
