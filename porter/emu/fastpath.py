"""Fast paths for the commonest ALU forms: register (or immediate) operands of the
instruction's own width, written to a register of that width.

The general operand readers and register writer of ``porter.emu.decode`` convert any
source to the instruction's type and normalise whatever a computation returns (scalars,
other dtypes, widths). For ``add.s32 %r1, %r2, 4``-like forms none of that can apply, and
the general writer is most of the instruction's cost, so these builders read ``w.r``
directly and store the result as the general writer would have stored it: the same bits,
the same masked merge. Anything unexpected at run time (a poisoned register, a result of
another dtype) goes through the general writer, so the outcome is always the general
path's. Each builder returns None for a form it does not cover.
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.decode import NP, STORE, bits


def plain(d, op, t: str):
    """(register id, the dtype its stored bits are viewed as for type ``t``, or None when the
    storage already is ``t``'s dtype) for a declared register of ``t``'s width; else None."""
    if not d.is_reg(op):
        return None
    i = d.reg_index[op.name]
    sb = d.reg_bits[i]
    if t == "pred":
        return (i, None) if sb == 1 else None
    if sb != bits(t):
        return None
    dt = np.dtype(NP[t])
    return i, (None if dt == np.dtype(STORE[sb]) else dt)


def _types(t: str):
    dt = np.dtype(np.bool_ if t == "pred" else NP[t])
    return dt, np.dtype(STORE[1 if t == "pred" else bits(t)])


def binary(d, t: str, dst, a, b, f, raw=None):
    """``dst = f(a, b)``: a a register, b a register or an immediate, all of type ``t``.
    ``raw``: a ufunc giving the same bits on the registers' unsigned storage as ``f`` on
    type ``t`` (two's-complement add, sub, mul.lo and the logic ops), so no view is needed."""
    po, pa = plain(d, dst, t), plain(d, a, t)
    if po is None or pa is None:
        return None
    if isinstance(b, ptx.Imm):
        ib, kb = None, d.src(b, t)(None)
    else:
        pb = plain(d, b, t)
        if pb is None:
            return None
        ib, kb = pb[0], None
    (io, view), ia = po, pa[0]
    dt, store = _types(t)
    slow = d.dst(dst, t)
    if raw is not None and view is not None and dt.kind in "iu" and store.kind == "u":
        kraw = None if kb is None else kb.view(store)

        def general(w, m):
            v = f(w.r[ia].view(view), kb if ib is None else w.r[ib].view(view))
            return slow(w, v, m)

        def run_raw(w, m):
            r = w.r
            v = raw(r[ia], kraw if ib is None else r[ib])
            if w.poisoned or v.dtype is not store:
                return general(w, m)
            r[io] = v if m is None else np.where(m, v, r[io])
        return run_raw

    if view is None:
        g = raw if raw is not None and dt.kind in "iu" else f     # (the ufunc itself: no wrapper call)

        def run(w, m):
            r = w.r
            v = g(r[ia], kb if ib is None else r[ib])
            if w.poisoned or v.dtype is not dt:
                return slow(w, v, m)
            r[io] = v if m is None else np.where(m, v, r[io])
        return run

    def run_view(w, m):
        r = w.r
        v = f(r[ia].view(view), kb if ib is None else r[ib].view(view))
        if w.poisoned or v.dtype is not dt:
            return slow(w, v, m)
        v = v.view(store)
        r[io] = v if m is None else np.where(m, v, r[io])
    return run_view


def move(d, t: str, dst, a):
    """``mov`` of a same-width register or of an immediate into a register."""
    po = plain(d, dst, t)
    if po is None:
        return None
    io = po[0]
    slow = d.dst(dst, t)
    ra = d.src(a, t)
    if isinstance(a, ptx.Imm):
        dt, store = _types(t)
        const = np.empty(32, dtype=dt)
        const.fill(ra(None))
        const = const.view(store)        # never written in place, so every warp may share it

        def mov_imm(w, m):
            if w.poisoned:
                return slow(w, ra(w), m)
            r = w.r
            r[io] = const if m is None else np.where(m, const, r[io])
        return mov_imm
    pa = plain(d, a, t)
    if pa is None:
        return None
    ia = pa[0]

    def mov_reg(w, m):
        if w.poisoned:
            return slow(w, ra(w), m)
        r = w.r
        r[io] = r[ia] if m is None else np.where(m, r[ia], r[io])
    return mov_reg


def _operand(d, op, t: str):
    """(register id or None, immediate value or None) for a fast-path source, or None."""
    if isinstance(op, ptx.Imm):
        return None, d.src(op, t)(None)
    p = plain(d, op, t)
    return None if p is None else (p[0], None)


_BOOL = np.dtype(np.bool_)


def compare(d, t: str, dst, a, b, f):
    """``setp`` with one predicate out and no combining: ``dst = f(a, b)``."""
    po, pa, ob = plain(d, dst, "pred"), plain(d, a, t), _operand(d, b, t)
    if po is None or pa is None or ob is None:
        return None
    io, (ia, view), (ib, kb) = po[0], pa, ob
    slow = d.dst(dst, "pred")

    def setp(w, m):
        r = w.r
        if view is None:
            v = f(r[ia], kb if ib is None else r[ib])
        else:
            v = f(r[ia].view(view), kb if ib is None else r[ib].view(view))
        if w.poisoned or v.dtype is not _BOOL:
            return slow(w, np.broadcast_to(v, (32,)), m)
        r[io] = v if m is None else np.where(m, v, r[io])
    return setp


def select(d, t: str, dst, a, b, p):
    """``selp``: ``dst = p ? a : b``, a and b registers or immediates of type ``t``. A select
    moves bits, so it runs on the registers' storage itself (no views); an immediate is
    turned into its storage bits once, at decode."""
    po, oa, ob, pp = plain(d, dst, t), _operand(d, a, t), _operand(d, b, t), plain(d, p, "pred")
    if po is None or oa is None or ob is None or pp is None:
        return None
    (io, view), (ia, ka), (ib, kb), ip = po, oa, ob, pp[0]
    dt, store = _types(t)
    if view is not None:
        ka = None if ka is None else np.array(ka, dtype=dt).view(store)[()]
        kb = None if kb is None else np.array(kb, dtype=dt).view(store)[()]
    slow = d.dst(dst, t)

    def selp(w, m):
        r = w.r
        v = np.where(r[ip], ka if ia is None else r[ia], kb if ib is None else r[ib])
        if w.poisoned or v.dtype is not store:
            return slow(w, v if view is None else v.view(dt), m)
        r[io] = v if m is None else np.where(m, v, r[io])
    return selp


_F32, _F64 = np.dtype(np.float32), np.dtype(np.float64)


def fma32(d, dst, a, b, c, general):
    """``fma.rn.f32`` on f32 registers (b and c may be immediates): the product in f64
    (exact), one f64 add, one rounding to f32, as ``general`` computes it, read from and
    stored to the registers directly."""
    po, pa, ob, oc = plain(d, dst, "f32"), plain(d, a, "f32"), _operand(d, b, "f32"), _operand(d, c, "f32")
    if po is None or pa is None or ob is None or oc is None:
        return None
    io, ia, (ib, kb), (ic, kc) = po[0], pa[0], ob, oc

    def fma(w, m):
        if w.poisoned:
            return general(w, m)
        r = w.r
        p = r[ia].view(_F32).astype(_F64)           # (two plain calls: cheaper than multiply(dtype=))
        p *= kb if ib is None else r[ib].view(_F32)
        p += kc if ic is None else r[ic].view(_F32)
        v = p.astype(_F32).view(np.uint32)
        r[io] = v if m is None else np.where(m, v, r[io])
    return fma


def shift_imm(d, t: str, dst, a, b, shift):
    """A register of ``t``'s width shifted by an immediate below the width, into a register
    of that width: for ``shl`` (any signedness) and the logical ``shr`` the result's bits are
    the shift of the unsigned storage itself. Returns fn(general) -> the instruction (or
    None for another form); ``general`` runs when a register is poisoned."""
    po, pa = plain(d, dst, t), plain(d, a, t)
    if po is None or pa is None or not isinstance(b, ptx.Imm) or (shift is np.right_shift and t[0] == "s"):
        return None
    k = int(d.src(b, "u32")(None))
    store = np.dtype(STORE[bits(t)])
    if k >= bits(t) or store.kind != "u":
        return None
    io, ia, ku = po[0], pa[0], store.type(k)

    def make(general):
        def shift_imm(w, m):
            if w.poisoned:
                return general(w, m)
            r = w.r
            v = shift(r[ia], ku)
            r[io] = v if m is None else np.where(m, v, r[io])
        return shift_imm
    return make


def unary(d, t: str, dst, a, f):
    """``dst = f(a)``: a and dst registers of ``t``'s width; the result stored as the general
    writer would (any other result, or a poisoned register, goes through it)."""
    po, pa = plain(d, dst, t), plain(d, a, t)
    if po is None or pa is None:
        return None
    (io, view), ia = po, pa[0]
    dt, store = _types(t)
    slow = d.dst(dst, t)

    def run(w, m):
        r = w.r
        x = r[ia] if view is None else r[ia].view(view)
        v = f(x)
        if w.poisoned or type(v) is not np.ndarray or v.dtype is not dt or v.shape != x.shape:
            return slow(w, v, m)
        if view is not None:
            v = v.view(store)
        r[io] = v if m is None else np.where(m, v, r[io])
    return run
