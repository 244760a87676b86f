"""Asynchronous cluster stores and the bulk forms beside TMA that public kernels use
(PTX ISA 9.0: 9.7.9.12 "st.async", 9.7.13 "red.async", 9.7.9.25.4.1 "cp.async.bulk",
9.7.9.25.4.2 "cp.reduce.async.bulk", 9.7.9.25.4.3 "cp.async.bulk.prefetch", 9.7.9.27
"cp.async.bulk.prefetch.tensor"; numbering as in porter.emu.isa_rules):

* ``st.async{.sem}{.scope}.shared::cluster.mbarrier::complete_tx::bytes{.v2,.v4}.type
  [a], b, [mbar]``: a store into a cluster peer's (or the CTA's own) shared memory that
  lands later and then signals complete-tx of its size on the mbarrier ``mbar`` (which is
  in the destination CTA);
* ``red.async.relaxed.cluster.shared::cluster.mbarrier::complete_tx::bytes.op.type
  [a], b, [mbar]``: the same for a read-modify-write (``.add``, ``.min``, ``.max``,
  ``.inc``, ``.dec``, ``.and``, ``.or``, ``.xor``);
* ``cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src],
  size, [mbar]``: a bulk copy from the CTA's shared memory into a peer's;
* ``cp.reduce.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint}.op{.noftz}.type
  [dst], [src], size``: a bulk reduction into global memory in a bulk async-group (the
  non-tensor form FlashAttention-3's backward pass accumulates dQ with);
* ``cp.async.bulk.prefetch{.tensor}...L2...``: prefetch hints, no effect on values.

Before ``st.async`` and ``red.async`` had builders of their own, the plain ``st`` / ``red``
builders took them as synchronous stores and never signalled the mbarrier: the consumer's
wait deadlocked.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.decode import NP, type_of
from porter.emu.errors import CheckFailed
from porter.emu.ops.memory import check_async_read_span
from porter.emu.ops.sync import build_noop

_RED_OPS = ("add", "min", "max", "inc", "dec", "and", "or", "xor")
_TYPES = ("b32", "b64", "u32", "s32", "u64", "s64", "f32", "f64", "f16", "bf16", "f16x2", "bf16x2")


def _vector(parts) -> int:
    return next((int(p[1]) for p in parts if p in ("v2", "v4", "v8")), 1)


def _async_target(w, addr: int, bar: int, nbytes: int, where: str):
    """(destination CTA, offset, mbarrier) of an async cluster store, checked."""
    from porter.emu.ops.tma import _destinations, check_inflight

    if addr % nbytes:
        raise CheckFailed(f"{where}: misaligned async store: address 0x{addr:x} is not {nbytes}-byte aligned")
    (cta, off, bcta, bar_obj), = _destinations(w, addr, bar, None, where)
    if bcta is not cta:
        raise CheckFailed(f"{where}: the mbarrier of an st.async / red.async must be in the destination CTA "
                          f"({cta.name}), not {bcta.name}")
    cta.smem.check_span(off, nbytes, "st.async destination")
    check_inflight(cta, off, nbytes, f"{where}: st.async")
    return cta, off, bar_obj


def _land(w, cta, off: int, bar_obj, nbytes: int, what: str, apply):
    """The store's completion: ``apply(old bytes) -> new bytes`` at the destination, then
    complete-tx on its mbarrier; for the race detector the write is the issuer's, at issue."""
    race = w.sched.race
    issuer = (w.aid, w.vc.copy(), w.prog.line(w.cur), w.name) if race is not None else None

    def complete():
        if cta.done:
            raise CheckFailed(f"{what} lands in the shared memory of {cta.name}, which has already exited")
        if race is not None:
            aid, vc, line, who = issuer
            race.check_span(cta, off, off + nbytes, aid, vc, True, line, f"the async store issued by {who}")
        cta.smem.data[off:off + nbytes] = apply(cta.smem.data[off:off + nbytes].copy())
        if race is not None:
            race.release_clock(issuer[1], bar_obj)
        bar_obj.complete_tx(nbytes)
    return complete


def _combine(op: str, t: str):
    """bytes, bytes -> bytes for one element of a reduction of type ``t``."""
    if t in ("f16x2", "bf16x2"):
        half = np.float16 if t == "f16x2" else ml_dtypes.bfloat16
        if op not in ("add", "min", "max"):
            raise KeyError(op)

        def packed(old, new):
            a = old.view(half).astype(np.float64)
            b = new.view(half).astype(np.float64)
            r = a + b if op == "add" else (np.fmin(a, b) if op == "min" else np.fmax(a, b))
            return r.astype(np.float32).astype(half).view(np.uint8)
        return packed
    dt = {"bf16": ml_dtypes.bfloat16}.get(t, NP.get(t))
    if t.startswith("b"):
        dt = {"b32": np.uint32, "b64": np.uint64}[t]
    kind = np.dtype(dt).kind

    def one(old, new):
        a, b = old.view(dt)[0], new.view(dt)[0]
        with np.errstate(all="ignore"):
            if op == "add":
                r = dt(np.float64(a) + np.float64(b)) if kind == "f" or dt is ml_dtypes.bfloat16 else dt(a + b)
            elif op == "min":
                r = min(a, b)
            elif op == "max":
                r = max(a, b)
            elif op == "inc":
                r = dt(0) if a >= b else dt(a + dt(1))
            elif op == "dec":
                r = b if (a == 0 or a > b) else dt(a - dt(1))
            elif op == "and":
                r = a & b
            elif op == "or":
                r = a | b
            else:
                r = a ^ b
        return np.array([r], dtype=dt).view(np.uint8)
    return one


def build_async_store(ins, d):
    """st.async / red.async into shared::cluster, completing on an mbarrier."""
    parts = ins.parts
    red = parts[0] == "red"
    where = d.where(ins)
    if "shared::cluster" not in parts or "mbarrier::complete_tx::bytes" not in parts:
        raise d.unsupported("(st.async / red.async to .shared::cluster with .mbarrier::complete_tx::bytes)")
    t = type_of(parts)
    nvec = _vector(parts)
    op = next((p for p in parts if p in _RED_OPS), None) if red else None
    if red and (op is None or nvec != 1):
        raise d.unsupported("(red.async .op.type [a], b, [mbar])")
    ops = ins.operands
    if len(ops) != 3:
        raise d.unsupported("([a], b, [mbar])")
    addr_fn, _ = d.addr(ops[0], "shared")
    bar_fn, _ = d.addr(ops[2], "shared")
    items = ops[1].items if isinstance(ops[1], ptx.Vec) else (ops[1],)
    if len(items) != nvec:
        raise d.unsupported("(vector width and register count differ)")
    ebytes = max(np.dtype(NP[t]).itemsize, 1)
    readers = [d.src(x, t) for x in items]
    nbytes = ebytes * nvec
    combine = _combine(op, t) if red else None
    what = f"{where}: {parts[0]}.async"

    def run(w, m):
        sel = w.live if m is None else m
        addrs, bars = addr_fn(w), bar_fn(w)
        cols = [np.broadcast_to(np.asarray(r(w)), (32,)).astype(NP[t]) for r in readers]
        for lane in np.nonzero(sel)[0]:
            cta, off, bar_obj = _async_target(w, int(addrs[lane]), int(bars[lane]), nbytes, where)
            data = np.concatenate([c[lane:lane + 1].view(np.uint8) for c in cols])
            if combine is None:
                apply = (lambda old, data=data: data)
            else:
                apply = (lambda old, data=data: combine(old, data))
            w.sched.engine.submit(w.sched.round, _land(w, cta, off, bar_obj, nbytes, what, apply),
                                  f"{parts[0]}.async {nbytes} B -> 0x{int(addrs[lane]):x}")
        return None
    return run


build_async_store.n_dst = 0


def build_bulk_s2s(ins, d):
    """cp.async.bulk.shared::cluster.shared::cta.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]."""
    from porter.emu.ops.tma import _destinations, check_inflight
    from porter.emu.units import tma as tma_unit

    ops = ins.operands
    if len(ops) != 4:
        raise d.unsupported("([dst], [src], size, [mbar])")
    where = d.where(ins)
    dst_fn, _ = d.addr(ops[0], "shared")
    src_fn, _ = d.addr(ops[1], "shared")
    size_fn = d.src(ops[2], "u32")
    bar_fn, _ = d.addr(ops[3], "shared")

    def run(w, m):
        sel = w.live if m is None else m
        dsts, srcs, bars = dst_fn(w), src_fn(w), bar_fn(w)
        sizes = np.broadcast_to(np.asarray(size_fn(w)), (32,))
        for lane in np.nonzero(sel)[0]:
            dst, src, size = int(dsts[lane]), int(srcs[lane]), int(sizes[lane])
            rank, src_off = mem.split_cluster_address(src, w.cta.rank)
            if rank != w.cta.rank:
                raise CheckFailed(f"{where}: the source of a shared::cta -> shared::cluster bulk copy must be the "
                                  "executing CTA's shared memory")
            tma_unit.check_bulk(dst & mem.OFFSET_MASK, src_off, size, where)
            w.cta.smem.check_span(src_off, size, "bulk copy source")
            check_async_read_span(w.cta, src_off, src_off + size, f"{where}: the bulk copy of {w.name}")
            race = w.sched.race
            if race is not None:
                race.access_span(w, w.cta, src_off, src_off + size, False, w.prog.line(w.cur), "bulk copy source")
            data = w.cta.smem.data[src_off:src_off + size].copy()
            (cta, off, bcta, bar_obj), = _destinations(w, dst, int(bars[lane]), None, where)
            cta.smem.check_span(off, size, "bulk copy destination")
            check_inflight(cta, off, size, f"{where}: bulk copy")
            w.sched.counters["tma"] += 1
            w.sched.engine.submit(w.sched.round, _land(w, cta, off, bar_obj, size, f"{where}: bulk copy",
                                                       lambda old, data=data: data),
                                  f"bulk copy {size} B -> 0x{dst:x}")
        return None
    return run


build_bulk_s2s.n_dst = 0


def build_bulk_reduce(ins, d):
    """cp.reduce.async.bulk.global.shared::cta.bulk_group{.L2::cache_hint}.op{.noftz}.type [dst], [src], size."""
    from porter.emu.ops.tma import bulk_store

    parts = ins.parts
    op = next((p for p in parts if p in _RED_OPS), None)
    t = next((p for p in reversed(parts) if p in _TYPES), None)
    if op is None or t is None or not ("global" in parts and "shared::cta" in parts and "bulk_group" in parts):
        raise d.unsupported("(cp.reduce.async.bulk.global.shared::cta.bulk_group.op.type)")
    if parts.index("global") > parts.index("shared::cta"):
        raise d.unsupported("(only the shared::cta -> global bulk reduction)")
    try:
        combine = _combine(op, t)
    except KeyError:
        raise d.unsupported(f"(.{op} on .{t})") from None
    ebytes = 4 if t in ("f16x2", "bf16x2") else np.dtype(NP[t]).itemsize
    ops = ins.operands
    where = d.where(ins)
    dst_fn, _ = d.addr(ops[0], "global")
    src_fn, _ = d.addr(ops[1], "shared")
    size_fn = d.src(ops[2], "u32")

    def elementwise(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        if t in ("f16x2", "bf16x2"):
            return combine(old, new)
        out = np.empty_like(old)
        for k in range(0, old.size, ebytes):
            out[k:k + ebytes] = combine(old[k:k + ebytes], new[k:k + ebytes])
        return out

    return bulk_store(dst_fn, src_fn, size_fn, where, elementwise)


build_bulk_reduce.n_dst = 0


def _is_async_store(ins) -> bool:
    return len(ins.parts) > 1 and ins.parts[1] == "async"


def _is_bulk_s2s(ins) -> bool:
    p = ins.parts
    return p[1:4] == ["async", "bulk", "shared::cluster"] and len(p) > 4 and p[4] == "shared::cta"


def _is_bulk_reduce(ins) -> bool:
    p = ins.parts
    return p[1:4] == ["reduce", "async", "bulk"] and "tensor" not in p


def _is_bulk_prefetch(ins) -> bool:
    return ins.parts[1:4] == ["async", "bulk", "prefetch"]


FORMS = [("st", _is_async_store, build_async_store), ("red", _is_async_store, build_async_store),
         ("cp", _is_bulk_s2s, build_bulk_s2s), ("cp", _is_bulk_reduce, build_bulk_reduce),
         ("cp", _is_bulk_prefetch, build_noop)]     # a prefetch hint: nothing to simulate
