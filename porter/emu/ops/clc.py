"""Cluster launch control (sm_100+, PTX ISA "clusterlaunchcontrol.try_cancel" and
"clusterlaunchcontrol.query_cancel"): a running CTA asks to cancel the launch of a cluster
that has not started yet and takes over its work (dynamic persistent scheduling).

``clusterlaunchcontrol.try_cancel.async.shared::cta.mbarrier::complete_tx::bytes{.multicast::cluster::all}.b128 [addr], [mbar]``
    Asynchronously: removes the next not-yet-started cluster of the grid from the launch
    queue if there is one, writes a 16-byte response at ``addr`` (in every CTA of the
    cluster with ``.multicast::cluster::all``) and completes 16 bytes of tx on ``mbar``
    (the barrier at the same offset in each of those CTAs).
``clusterlaunchcontrol.query_cancel.is_canceled.pred.b128 p, resp``
    Whether ``resp`` (a .b128 register, usually ``ld.shared.b128`` of the response) says a
    cluster was canceled.
``clusterlaunchcontrol.query_cancel.get_first_ctaid{.v4}.b32.b128 {x, y, z, _}, resp`` and
``...get_first_ctaid::{x,y,z}.b32.b128 r, resp``
    The first CTA id of the canceled cluster; the ISA leaves it undefined for a response
    that canceled nothing, so that is an error here.

The response is opaque in the ISA; the simulator's 16 bytes are a tag word (with the
canceled bit) and the canceled cluster's first ctaid x, y, z.
"""

from __future__ import annotations

import numpy as np

from porter.emu import memory as mem
from porter.emu.errors import CheckFailed

_TAG = 0x434C4300              # "CLC\0"; bit 0: canceled


def _response(canceled, ctaid=(0, 0, 0)) -> np.ndarray:
    return np.array([_TAG | int(canceled), *ctaid], dtype="<u4").view(np.uint8)


def build_clusterlaunchcontrol(ins, d):
    parts = ins.parts
    where = d.where(ins)
    if parts[1] == "try_cancel":
        if "async" not in parts or "mbarrier::complete_tx::bytes" not in parts or "b128" not in parts:
            raise d.unsupported("(try_cancel.async with .mbarrier::complete_tx::bytes and .b128)")
        multicast = "multicast::cluster::all" in parts
        addr_fn, _ = d.addr(ins.operands[0], "shared")
        bar_fn, _ = d.addr(ins.operands[1], "shared")

        def try_cancel(w, m):
            from porter.emu.ops.sync import _barrier_at

            sel = w.live if m is None else m
            addrs, bars = addr_fn(w), bar_fn(w)
            sched = w.sched
            for lane in np.nonzero(sel)[0]:
                a_rank, a_off = mem.split_cluster_address(int(addrs[lane]))
                b_rank, b_off = mem.split_cluster_address(int(bars[lane]))
                if a_rank != w.cta.rank or b_rank != w.cta.rank:
                    raise CheckFailed(f"{where}: try_cancel's response and mbarrier must be .shared::cta addresses "
                                      "of the executing CTA")
                if a_off % 16:
                    raise CheckFailed(f"{where}: try_cancel response address 0x{a_off:x} is not 16-byte aligned "
                                      "(PTX ISA clusterlaunchcontrol.try_cancel)")
                ranks = range(len(w.cta.cluster.ctas)) if multicast else [w.cta.rank]
                targets = []
                for r in ranks:
                    cta = w.cta if r == w.cta.rank else w.cta.peer(r, f"{where}: {w.name}")
                    cta.smem.check_span(a_off, 16, "try_cancel response")
                    targets.append((cta, _barrier_at(w, mem.cluster_address(b_off, r), where)))
                dims = sched.launch.cluster_dims
                if sched.clusters_waiting:
                    cid = sched.clusters_waiting.popleft()      # it never starts: this CTA does its work
                    data = _response(True, tuple(cid[i] * dims[i] for i in range(3)))
                else:
                    data = _response(False)

                race = sched.race       # the response is the issuing warp's write, at its clock at issue
                issuer = (w.aid, w.vc.copy(), w.prog.line(w.cur), w.name) if race is not None else None

                def land(targets=targets, data=data, issuer=issuer, race=race):
                    for cta, bar in targets:
                        if cta.done:
                            raise CheckFailed(f"{where}: try_cancel's response lands in {cta.name}, which has exited")
                        if race is not None:
                            aid, vc, line, who = issuer
                            race.check_span(cta, a_off, a_off + 16, aid, vc, True, line,
                                            f"the clusterlaunchcontrol.try_cancel issued by {who}")
                        cta.smem.data[a_off:a_off + 16] = data
                        if race is not None:    # a waiter on the barrier is ordered after the issue
                            race.release_clock(issuer[1], bar)
                        bar.complete_tx(16)
                sched.engine.submit(sched.round, land, f"clusterlaunchcontrol.try_cancel -> 0x{a_off:x}")
        return try_cancel
    if parts[1] == "query_cancel":
        dst, src = ins.operands
        rs = d.src(src, "b128")
        if "is_canceled" in parts:
            wd = d.dst(dst, "pred")

            def is_canceled(w, m):
                words = _words(rs(w), w.live if m is None else m, where)
                wd(w, (words[:, 0] & 1).astype(bool), m)
            return is_canceled
        query = next((p for p in parts if p.startswith("get_first_ctaid")), None)
        if query is None:
            raise d.unsupported()
        if query == "get_first_ctaid":
            items = dst.items if hasattr(dst, "items") else ()
            if len(items) != 4:
                raise d.unsupported("(get_first_ctaid.v4 takes {x, y, z, _})")
            writers, cols = [d.dst(x, "b32") for x in items[:3]], [1, 2, 3]
        else:
            axis = query.split("::", 1)[1]
            if axis not in ("x", "y", "z"):
                raise d.unsupported()
            writers, cols = [d.dst(dst, "b32")], ["xyz".index(axis) + 1]

        def first_ctaid(w, m):
            sel = w.live if m is None else m
            words = _words(rs(w), sel, where)
            if not (words[sel, 0] & 1).all():
                raise CheckFailed(f"{where}: get_first_ctaid of a try_cancel response that canceled nothing (PTX "
                                  "ISA clusterlaunchcontrol.query_cancel: the result is undefined; test is_canceled "
                                  "first)")
            for wr, c in zip(writers, cols):
                wr(w, words[:, c].astype(np.uint32), m)
        return first_ctaid
    raise d.unsupported()


def _words(v, sel, where: str) -> np.ndarray:
    words = np.broadcast_to(np.asarray(v), (32,)).view("<u4").reshape(32, 4)
    live = words[sel, 0] & ~np.uint32(1)
    if (live != _TAG).any():
        raise CheckFailed(f"{where}: query_cancel of a value that is not a try_cancel response (its response "
                          "not yet landed: wait on the try_cancel's mbarrier first)")
    return words


build_clusterlaunchcontrol.n_dst = 0

BUILDERS = {"clusterlaunchcontrol": build_clusterlaunchcontrol}
