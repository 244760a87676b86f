"""Bulk asynchronous copies: ``cp.async.bulk.tensor`` (TMA tile loads, multicast, CTA
pairs) and the non-tensor ``cp.async.bulk`` global -> shared copy (PTX ISA 9.7.9.25).

The copy is issued per executing thread: its source bytes are read at issue (inputs do
not change under a kernel), and it lands a seeded number of scheduler rounds later, in
the async engine: the bytes are written into the destination CTA(s)' shared memory and
then complete-tx is signalled on the mbarrier at the same CTA-relative offset in each
destination CTA (multicast), or on the named barrier, which with ``.cta_group::2`` may
be the peer CTA's. Until then the destination holds its old bytes, so a consumer that
reads before its barrier says so reads stale data.
"""

from __future__ import annotations

import bisect

import numpy as np

from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.errors import CheckFailed
from porter.emu.ops.memory import check_async_read_span
from porter.emu.units import tma as tma_unit


def _read_map(w, addr: int, where: str) -> tma_unit.TensorMap:
    launch = w.cta.launch
    if mem.PARAM_GENERIC <= addr < mem.PARAM_GENERIC + mem.WINDOW:
        off = addr - mem.PARAM_GENERIC
        if off + tma_unit.MAP_BYTES > launch.params.size:
            raise CheckFailed(f"{where}: tensor map at param offset {off} runs past the parameter buffer")
        raw = launch.params[off:off + tma_unit.MAP_BYTES].tobytes()
    else:
        raw = launch.gmem.read(addr, tma_unit.MAP_BYTES).tobytes()
    cache = w.cta.launch.__dict__.setdefault("_tmaps", {})
    tmap = cache.get(raw)
    if tmap is None:
        tmap = cache[raw] = tma_unit.decode(raw, where)
    return tmap


def _span_reader(gmem):
    """Every row span of a tensor box in one gather, when all of them lie inside one allocation
    (then each is inside it); None otherwise, and the unit reads row by row, whose bounds
    check names the first bad row."""
    heap, starts, ends = getattr(gmem, "heap", None), getattr(gmem, "starts", None), getattr(gmem, "ends", None)
    if heap is None or starts is None or ends is None:
        return None

    def read_spans(addrs: np.ndarray, nbytes: int):
        lo, hi = int(addrs.min()), int(addrs.max()) + nbytes
        i = bisect.bisect_right(starts, lo) - 1
        if i < 0 or hi > ends[i] or nbytes <= 0:
            return None
        return heap[(addrs - mem.GLOBAL_BASE)[:, None] + np.arange(nbytes)]
    return read_spans


def _destinations(w, dst: int, bar: int, mask: int | None, where: str, pair: bool = False):
    """[(cta, dst offset, barrier cta, barrier offset)] for each CTA the copy writes.
    ``pair`` (.cta_group::2 with .multicast::cluster): each destination CTA's signal goes to
    the barrier at mbar's offset in the CTA of its pair whose %cluster_ctarank parity is
    that of mbar's CTA (PTX ISA "cp.async.bulk.tensor": with .cta_group::2 the mbarrier
    may be in the destination CTA or its peer), so both CTAs of a pair can count their
    loads on the leader's barrier."""
    from porter.emu.ops.sync import _barrier_at

    rank, dst_off = mem.split_cluster_address(dst, w.cta.rank)
    bar_rank, bar_off = mem.split_cluster_address(bar, w.cta.rank)
    ctas = w.cta.cluster.ctas
    if mask is None:
        targets = [(rank, bar_rank)]
    else:
        ranks = [r for r in range(16) if mask >> r & 1]
        if not ranks:
            raise CheckFailed(f"{where}: multicast with an empty CTA mask")
        if max(ranks) >= len(ctas):
            raise CheckFailed(f"{where}: multicast mask 0x{mask:x} names CTA ranks beyond the {len(ctas)}-CTA cluster")
        targets = [(r, (r & ~1) | (bar_rank & 1) if pair else r) for r in ranks]
    out = []
    for r, br in targets:
        cta = w.cta if r == w.cta.rank else w.cta.peer(r, f"{where}: {w.name}")
        bcta = w.cta if br == w.cta.rank else w.cta.peer(br, f"{where}: {w.name}")
        bar_obj = _barrier_at(w, mem.cluster_address(bar_off, br), where)
        out.append((cta, dst_off, bcta, bar_obj))
    return out


def check_inflight(cta, off: int, size: int, what: str) -> None:
    """An async write into shared memory an in-flight tensor-core operation may still read.
    The reader's ``taint`` (a wgmma: ops.wgmma) is told of the bytes: if it reads any of them,
    its warp's accumulators hold undefined values (an error once an instruction reads them);
    a reader without one makes the write an error here."""
    for lo, hi, reader, taint in cta.inflight_reads.values():
        if off < hi and lo < off + size:
            if taint is not None:
                taint(off, size, what)
                continue
            raise CheckFailed(f"{what} writes {cta.name} shared 0x{off:x}..0x{off + size:x} while {reader} may still "
                              "read it (its stage was released before the wait that covers it)")


def _land(w, targets, data: np.ndarray, what: str):
    """The copy's completion: bytes into each destination, then complete-tx on its barrier.
    For the race detector the write is the issuing warp's, at its clock at issue."""
    race = w.sched.race
    issuer = (w.aid, w.vc.copy(), w.prog.line(w.cur), w.name) if race is not None else None

    def complete():
        for cta, off, bcta, bar in targets:
            if cta.done:
                raise CheckFailed(f"{what} lands in the shared memory of {cta.name}, which has already exited")
            check_inflight(cta, off, int(data.size), what)
            if race is not None:
                aid, vc, line, who = issuer
                race.check_span(cta, off, off + int(data.size), aid, vc, True, line, f"the TMA issued by {who}")
            cta.smem.data[off:off + data.size] = data
        for cta, off, bcta, bar in targets:
            if race is not None:
                race.release_clock(issuer[1], bar)
            bar.complete_tx(int(data.size))
    return complete


# ---- stores shared -> global in bulk async-groups -----------------------------------------------

class _BulkStore:
    """One lane's bulk store: its shared source, the bytes there at issue, and the global
    write it performs. ``group`` is None until the lane's next cp.async.bulk.commit_group."""
    __slots__ = ("lane", "cta", "lo", "size", "before", "write", "line", "group")

    def __init__(self, lane, cta, lo, size, before, write, line):
        self.lane, self.cta, self.lo, self.size, self.before = lane, cta, lo, size, before
        self.write, self.line, self.group = write, line, None


class BulkGroups:
    """A warp's bulk async-groups, per lane (PTX ISA "cp.async.bulk.commit_group",
    "cp.async.bulk.wait_group"): the stores each lane issued and the groups it committed."""

    def __init__(self):
        self.committed = np.zeros(32, dtype=np.int64)
        self.stores: list[_BulkStore] = []

    def commit(self, sel: np.ndarray) -> None:
        for st in self.stores:
            if st.group is None and sel[st.lane]:
                st.group = int(self.committed[st.lane])
        self.committed = self.committed + sel

    def complete(self, w, due, at_wait: bool = True) -> None:
        """Finish the stores ``due(store)`` names: the ISA lets the source be reused only after
        the wait_group(.read) that covers the store's group, so bytes that changed since issue
        were rewritten too early (the store may have read either value). At a wait
        (``at_wait``) the race detector records the source read again, at the waiting warp's
        clock: the read lasts until this wait, so another warp's later write must be ordered
        after the wait, not only after the issue (as a wgmma's operand read lasts until its
        wait_group: ops.wgmma)."""
        race = w.sched.race if at_wait else None
        keep = []
        for st in self.stores:
            if not due(st):
                keep.append(st)
                continue
            now = st.cta.smem.data[st.lo:st.lo + st.size]
            if not np.array_equal(now, st.before):
                off = st.lo + int(np.argmax(now != st.before))
                raise CheckFailed(f"{st.cta.name} shared 0x{off:x}, the source of the bulk store at "
                                  f"{w.prog.file}:{st.line} (lane {st.lane}), was rewritten before the "
                                  "cp.async.bulk.wait_group.read that covers the store (PTX ISA "
                                  "\"cp.async.bulk.wait_group\": the source may be reused only after it)")
            if race is not None:
                race.record_read(st.cta, w.aid, w.vc, st.line, slice(st.lo, st.lo + st.size))
            st.write(st.before)
        self.stores = keep


def _bulk_groups(w) -> BulkGroups:
    g = w.units.get("bulk_groups")
    if g is None:
        g = w.units["bulk_groups"] = BulkGroups()

        def at_exit(w, g=g):
            # a thread that exits with stores outstanding: they still complete (nothing can
            # wait for them), with the same check on their sources. The CTA's shared memory
            # is released when it exits, so a store not yet waited for may read memory the
            # next CTA already owns: a warning (the ISA states no rule for it)
            if g.stores:
                st = g.stores[0]
                w.cta.launch.warn(f"{w.name} exits with {len(g.stores)} bulk store(s) (the first at "
                                  f"{w.prog.file}:{st.line}) not covered by a cp.async.bulk.wait_group(.read)")
            g.complete(w, lambda st: True, at_wait=False)
        w.units.setdefault("exit_checks", []).append(at_exit)
    return g


def _issue_store(w, lane: int, src: int, size: int, write, where: str) -> None:
    rank, off = mem.split_cluster_address(src, w.cta.rank)
    if rank != w.cta.rank:
        raise CheckFailed(f"{where}: a bulk store's source must be the executing CTA's shared memory (.shared::cta)")
    cta = w.cta
    cta.smem.check_span(off, size, "bulk store source")
    check_async_read_span(cta, off, off + size, f"{where}: the bulk store of {w.name}")
    race = w.sched.race
    if race is not None:
        race.access_span(w, cta, off, off + size, False, w.prog.line(w.cur), "bulk store source")
    before = cta.smem.data[off:off + size].copy()
    _bulk_groups(w).stores.append(_BulkStore(lane, cta, off, size, before, write, w.prog.line(w.cur)))
    w.sched.counters["tma"] += 1


def bulk_store(dst_fn, src_fn, size_fn, where: str, combine=None):
    """The step of a non-tensor shared::cta -> global bulk store (cp.async.bulk and
    cp.reduce.async.bulk): each selected lane checks its copy, bounds-checks the destination at
    issue, and queues its bulk-group store; ``combine(old, new)`` gives the bytes a reduction
    writes (None: a plain write)."""
    def bstore(w, m):
        sel = w.live if m is None else m
        dsts, srcs = dst_fn(w), src_fn(w)
        sizes = np.broadcast_to(np.asarray(size_fn(w)), (32,))
        gmem = w.cta.launch.gmem
        for lane in np.nonzero(sel)[0]:
            dst, src, size = int(dsts[lane]), int(srcs[lane]), int(sizes[lane])
            tma_unit.check_bulk(dst, src, size, where)
            gmem.read(dst, size)                  # bounds of the destination, checked at issue

            def write(data, dst=dst):
                if combine is None:
                    gmem.write(dst, data)
                else:
                    gmem.write(dst, combine(gmem.read(dst, data.size), np.ascontiguousarray(data)))
            _issue_store(w, int(lane), src, size, write, where)
        return None
    return bstore


def _build_bulk_group_op(ins, d, op: str):
    where = d.where(ins)
    if op == "commit_group":
        if ins.operands:
            raise d.unsupported("(cp.async.bulk.commit_group takes no operands)")

        def commit(w, m):
            _bulk_groups(w).commit(w.live if m is None else m)
        return commit
    if len(ins.operands) != 1 or not isinstance(ins.operands[0], ptx.Imm) or int(ins.operands[0].value) < 0:
        raise d.unsupported("(cp.async.bulk.wait_group N: N a non-negative integer constant)")
    n = int(ins.operands[0].value)

    def wait(w, m):
        sel = w.live if m is None else m
        g = _bulk_groups(w)
        limit = g.committed - n
        g.complete(w, lambda st: st.group is not None and sel[st.lane] and st.group < limit[st.lane])
    del where
    return wait


def build_cp(ins, d):
    parts = ins.parts
    if parts[1] == "reduce" and "tensor" in parts and "bulk_group" in parts:
        return _build_store(ins, d, True, reduce=next((p for p in parts if p in _REDUCE), None))
    if parts[1] != "async" or len(parts) < 3 or parts[2] != "bulk":
        raise d.unsupported("(a cp.async form neither the bulk copies here nor ops.cp_async implement)")
    ops = ins.operands
    where = d.where(ins)
    multicast = "multicast::cluster" in parts
    if len(parts) >= 4 and parts[3] in ("commit_group", "wait_group"):
        return _build_bulk_group_op(ins, d, parts[3])
    if "bulk_group" in parts and "global" in parts and "shared::cta" in parts and \
            parts.index("global") < parts.index("shared::cta"):
        return _build_store(ins, d, "tensor" in parts)
    if "tensor" in parts:
        # the load mode defaults to .tile when none is named (PTX ISA "Data Movement: cp.async.bulk.tensor": .load_mode defaults to .tile)
        if any(p.startswith("im2col") or p in ("tile::gather4", "tile::scatter4") for p in parts) or \
                "global" not in parts or not any(p.startswith("shared") for p in parts[4:]):
            # (the destination space anywhere after .Nd: CUTLASS writes .cta_group::2 before it, as ptxas accepts)
            raise d.unsupported("(only tile-mode tensor loads from global into shared memory)")
        if parts.index("global") < parts.index(next(p for p in parts if p.startswith("shared"))):
            raise d.unsupported("(tensor stores to global memory)")
        dst_fn, _ = d.addr(ops[0], "shared")
        tm = ops[1]
        if not isinstance(tm, ptx.TmaAddr):
            raise d.unsupported("(expected [tensormap, {coordinates}])")
        map_fn, _ = d.addr(ptx.Addr(tm.map, 0), "generic")
        coord_fns = [d.src(c, "s32") for c in tm.coords]
        bar_fn, _ = d.addr(ops[2], "shared")
        mask_fn = d.src(ops[3], "u16") if multicast else None
        pair = "cta_group::2" in parts

        def tensor(w, m):
            sel = w.live if m is None else m
            lanes = np.nonzero(sel)[0]
            dsts, maps, bars = dst_fn(w), map_fn(w), bar_fn(w)
            coords = [np.broadcast_to(np.asarray(f(w)), (32,)) for f in coord_fns]
            masks = np.broadcast_to(np.asarray(mask_fn(w)), (32,)) if mask_fn is not None else None
            gmem = w.cta.launch.gmem
            for lane in lanes:
                tmap = _read_map(w, int(maps[lane]), where)
                dst = int(dsts[lane])
                c = tuple(int(x[lane]) for x in coords)
                targets = _destinations(w, dst, int(bars[lane]), int(masks[lane]) if masks is not None else None,
                                        where, pair)
                data = tma_unit.load_tile(tmap, c, gmem.read, dst & mem.OFFSET_MASK, where, _span_reader(gmem))
                for cta, off, _, _ in targets:
                    cta.smem.check_span(off, data.size, "TMA destination")
                    check_inflight(cta, off, int(data.size), f"{where}: TMA load")
                w.sched.counters["tma"] += 1
                w.sched.engine.submit(w.sched.round, _land(w, targets, data, f"{where}: TMA load"),
                                      f"TMA load {c} -> 0x{dst:x}")
        return tensor
    # cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [dst], [src], size, [mbar]
    if parts[3].startswith("shared") and "global" in parts:
        dst_fn, _ = d.addr(ops[0], "shared")
        src_fn, _ = d.addr(ops[1], "global")
        size_fn = d.src(ops[2], "u32")
        bar_fn, _ = d.addr(ops[3], "shared")
        mask_fn = d.src(ops[4], "u16") if multicast else None

        def bulk(w, m):
            sel = w.live if m is None else m
            lanes = np.nonzero(sel)[0]
            dsts, srcs, bars = dst_fn(w), src_fn(w), bar_fn(w)
            sizes = np.broadcast_to(np.asarray(size_fn(w)), (32,))
            masks = np.broadcast_to(np.asarray(mask_fn(w)), (32,)) if mask_fn is not None else None
            gmem = w.cta.launch.gmem
            for lane in lanes:
                dst, src, size = int(dsts[lane]), int(srcs[lane]), int(sizes[lane])
                data = tma_unit.bulk_copy(src, dst & mem.OFFSET_MASK, size, gmem.read, where)
                targets = _destinations(w, dst, int(bars[lane]), int(masks[lane]) if masks is not None else None,
                                        where)
                for cta, off, _, _ in targets:
                    cta.smem.check_span(off, size, "bulk copy destination")
                    check_inflight(cta, off, size, f"{where}: bulk copy")
                w.sched.counters["tma"] += 1
                w.sched.engine.submit(w.sched.round, _land(w, targets, data, f"{where}: bulk copy"),
                                      f"bulk copy {size} B -> 0x{dst:x}")
        return bulk
    raise d.unsupported()


_REDUCE = {"add": np.add, "min": np.minimum, "max": np.maximum, "and": np.bitwise_and, "or": np.bitwise_or,
           "xor": np.bitwise_xor}


def _reducer(op: str, data_type: str, where: str):
    """How ``cp.reduce.async.bulk.tensor`` combines each element with the tensor's (PTX ISA
    "cp.reduce.async.bulk.tensor": a read-modify-write per element; float adds round once)."""
    import ml_dtypes

    dt = {"FLOAT32": np.float32, "FLOAT32_FTZ": np.float32, "FLOAT16": np.float16, "BFLOAT16": ml_dtypes.bfloat16,
          "FLOAT64": np.float64, "INT32": np.int32, "UINT32": np.uint32, "INT64": np.int64,
          "UINT64": np.uint64}.get(data_type)
    if dt is None or (np.dtype(dt).kind == "f" and op not in ("add", "min", "max")):
        raise CheckFailed(f"{where}: cp.reduce .{op} on a {data_type} tensor is outside the ISA's (or the "
                          "simulator's) combinations")
    f = _REDUCE[op]
    wide = np.float64 if np.dtype(dt).kind == "f" else dt

    def combine(old: np.ndarray, new: np.ndarray) -> np.ndarray:
        a, b = old.view(dt).astype(wide), new.view(dt).astype(wide)
        return f(a, b).astype(dt).view(np.uint8)
    return combine


def _build_store(ins, d, tensor: bool, reduce: str | None = None):
    """``cp.async.bulk.tensor.Nd.global.shared::cta{.tile}.bulk_group [map, {c}], [src]`` and
    ``cp.async.bulk.global.shared::cta.bulk_group [dst], [src], size``: the source is read
    asynchronously, until the wait_group(.read) that covers the store's group."""
    parts = ins.parts
    ops = ins.operands
    where = d.where(ins)
    if any(p.startswith("im2col") or p.startswith("tile::") for p in parts):
        raise d.unsupported("(only tile-mode tensor stores)")
    if tensor:
        tm = ops[0]
        if not isinstance(tm, ptx.TmaAddr):
            raise d.unsupported("(expected [tensormap, {coordinates}])")
        map_fn, _ = d.addr(ptx.Addr(tm.map, 0), "generic")
        coord_fns = [d.src(c, "s32") for c in tm.coords]
        src_fn, _ = d.addr(ops[1], "shared")

        def tstore(w, m):
            sel = w.live if m is None else m
            maps, srcs = map_fn(w), src_fn(w)
            coords = [np.broadcast_to(np.asarray(f(w)), (32,)) for f in coord_fns]
            gmem = w.cta.launch.gmem
            for lane in np.nonzero(sel)[0]:
                tmap = _read_map(w, int(maps[lane]), where)
                c = tuple(int(x[lane]) for x in coords)
                src = int(srcs[lane])
                src_off = mem.split_cluster_address(src, w.cta.rank)[1]

                put = gmem.write
                if reduce is not None:
                    combine = _reducer(reduce, tmap.data_type, where)

                    def put(addr, data, combine=combine):
                        gmem.write(addr, combine(gmem.read(addr, data.size), np.ascontiguousarray(data)))

                def write(data, tmap=tmap, c=c, src_off=src_off, put=put):
                    tma_unit.store_tile(tmap, c, data, src_off, put, where)
                if len(c) != tmap.rank:
                    raise CheckFailed(f"{where}: {len(c)} coordinates for a rank-{tmap.rank} tensor map")
                _issue_store(w, int(lane), src, tmap.box_bytes, write, where)
        return tstore
    if reduce is not None:
        raise d.unsupported("(non-tensor cp.reduce.async.bulk)")
    dst_fn, _ = d.addr(ops[0], "global")
    src_fn, _ = d.addr(ops[1], "shared")
    size_fn = d.src(ops[2], "u32")

    return bulk_store(dst_fn, src_fn, size_fn, where)


build_cp.n_dst = 0

BUILDERS = {"cp": build_cp}
