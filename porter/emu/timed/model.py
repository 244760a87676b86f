"""The timed mode's model: per issued instruction, when it issues and when its result is
ready, on one SM per CTA (L1 runs a CTA per SM: one SM, two for a CTA pair or cluster).

- Warps are pinned to the SM's schedulers (warp i to scheduler i mod schedulers); each
  scheduler issues one SASS instruction per cycle; a PTX instruction takes the SASS
  instructions its expansion factor says (porter.emu.timed.expansion) and issues once its
  source registers are ready (a per-warp scoreboard) and after the warp's previous one.
- Result latencies per class: ALU, MUFU (and the MUFU pipe's rate), shared memory (its
  wavefronts from the exact bank conflicts of the lane addresses), global memory (the SM's
  share of the L2 bandwidth), tensor-core MMAs, TMEM loads and stores.
- One shared-memory port per SM (bytes per clock) carries loads and stores, TMA writes and
  the MMA operand reads (wgmma SS reads A and B, RS only B; tcgen05 SS reads A and this
  CTA's part of B, TS only B); one tensor-core calendar per SM (wgmma, mma.sync, tcgen05,
  a cta_group::2 MMA booked half on each SM of the pair).
- The TMA engine: at most ``tma_inflight_bytes`` in flight per SM; each copy takes the
  copy latency after its bytes passed the SM's share of the L2 bandwidth, then its writes
  into shared memory on the destination SM's port.
- Synchronisation: an mbarrier phase completes at the latest of its arrivals, its
  transaction bytes and its tcgen05.commit; a waiter leaves at that time; bar.sync and
  barrier.cluster at their last arrival plus their latency; fences stall the warp.

The functional machine runs unchanged (the same functions, the same order, the same
checks): the model only reads registers, addresses and unit state the simulator computed.
Parameters are plain numbers (porter.timing.l1 reads them from the descriptor's perf:).
"""

from __future__ import annotations

import numpy as np

from porter.emu import memory as mem
from porter.emu.control import Park
from porter.emu.decode import Decoder
from porter.emu.errors import EmuError

from .banks import wavefronts
from .calendar import Calendar
from .classes import NO_DST, classify
from .expansion import ptx_class

REQUIRED = ("schedulers", "alu_latency_cycles", "smem_bytes_per_clk_per_sm", "smem_banks", "smem_latency_cycles",
            "mma_flop_per_clk_per_sm", "mma_latency_base_cycles", "mma_latency_per_n_cycles",
            "mufu_ex2_per_clk_per_sm", "mufu_latency_cycles", "l2_bytes_per_clk_per_sm", "l2_latency_cycles",
            "tma_inflight_bytes", "tma_latency_cycles", "mbarrier_cycles", "named_barrier_cycles", "fence_cycles",
            "cluster_barrier_cycles")
# classes ptxas reorders within a basic block (the rest end one)
REORDERABLE = frozenset({"alu", "mufu", "smem", "gmem", "mma_sync"})
# only a kernel that uses Tensor Memory needs these (its descriptor then gives them)
TMEM = ("tmem_latency_cycles", "tmem_bytes_per_clk_per_sm")
# tcgen05 kinds and wgmma operand classes -> the perf: rate table's key, where it names them otherwise
KIND_ALIASES = {"f8f6f4": "f8", "mxf8f6f4": "f8", "f8": "f8f6f4", "i8": "i8", "f16": "f16", "tf32": "tf32",
                "mxf4": "f4", "mxf4nvf4": "f4"}


class SM:
    """One SM's calendars."""

    def __init__(self, p: dict):
        self.issue = [Calendar(1.0, 16, "issue") for _ in range(int(p["schedulers"]))]
        self.smem = Calendar(p["smem_bytes_per_clk_per_sm"], 16, "smem")
        self.tensor = Calendar(1.0, 16, "tensor")          # booked in cycles of the kind's own rate
        self.mufu = Calendar(p["mufu_ex2_per_clk_per_sm"], 16, "mufu")
        self.l2 = Calendar(p["l2_bytes_per_clk_per_sm"], 16, "l2")
        self.tmem = Calendar(p.get("tmem_bytes_per_clk_per_sm") or 1.0, 16, "tmem")
        self.tma: list = []                                 # (done, bytes) of copies in flight
        self.mma_done = 0.0
        self.wgmma: dict = {}                               # (warpgroup, sequence) -> [done, warps seen]
        self.end = 0.0


class WarpTime:
    __slots__ = ("t", "ready", "sched", "sm", "retry", "barw", "clw", "wg_open", "wg_groups", "tc_ld", "tc_st",
                 "issued", "wg_seq", "fin")

    def __init__(self, nregs: int, sched: int, sm: SM):
        self.t = 0.0
        self.ready = [0.0] * nregs
        self.sched = sched
        self.sm = sm
        self.retry = -1
        self.barw = None
        self.clw = None
        self.wg_open = 0.0
        self.wg_groups: list = []
        self.tc_ld = 0.0
        self.tc_st = 0.0
        self.issued = 0
        self.wg_seq = 0
        self.fin = 0.0             # the latest issue of the current basic block


class TimedModel:
    def __init__(self, scheduler, params: dict, expansion: dict | None = None, marks: tuple = ()):
        missing = [k for k in REQUIRED if k not in params]
        if missing:
            raise EmuError(f"timed mode: missing parameter(s) {', '.join(missing)}")
        self.p = params
        self.expansion = dict(expansion or {})
        self.sched = scheduler
        self.sms: dict = {}
        self._ops: dict = {}
        self.submitted: list = []
        self.events = 0.0                                   # the latest event time seen
        self.instructions = 0
        self._engine = None
        # PTX opcodes (e.g. "red.release.gpu.global.add.s32") whose issue times are recorded per
        # CTA: a caller that knows the program (porter.timing.megakernel_l1) reads the
        # boundaries of its own units of work from them
        self.mark_opcodes = frozenset(marks)
        self.marks: list = []

    def _watch_engine(self) -> None:
        """Note the asynchronous work each instruction submits (a TMA copy's bytes and
        barriers); the scheduler makes its engine after the model, so on first use."""
        engine = self.sched.engine
        orig = engine.submit

        def submit(round_now, fn, describe, delay=None):
            self.submitted.append(fn)
            return orig(round_now, fn, describe, delay)
        engine.submit = submit
        self._engine = engine

    # -- the hook ---------------------------------------------------------------------------
    def ops_for(self, prog):
        if self._engine is None:
            self._watch_engine()
        ops = self._ops.get(id(prog))
        if ops is None:
            d = Decoder(prog.kernel, prog.layout, prog.file)
            ops = self._ops[id(prog)] = [self._wrap(prog, d, pc, fn) for pc, fn in enumerate(prog.ops)]
        return ops

    def sm_of(self, cta) -> SM:
        sm = self.sms.get(id(cta))
        if sm is None:
            sm = self.sms[id(cta)] = SM(self.p)
            sm.cta = cta
        return sm

    def _warp(self, w) -> WarpTime:
        wt = WarpTime(len(w.prog.reg_names), w.index % int(self.p["schedulers"]), self.sm_of(w.cta))
        w._timed = wt
        return wt

    def _wrap(self, prog, d, pc: int, fn):
        ins = prog.kernel.code[pc]
        d.ins = ins
        try:
            cls, info = classify(ins)
        except (IndexError, AttributeError, ValueError):
            cls, info = "alu", {}
        srcs = tuple(prog.srcs[pc])
        head = ins.parts[0]
        dsts: tuple = ()
        if head not in NO_DST and ins.operands and cls not in ("wgmma",):
            try:
                dsts = tuple(d.regs_of(ins.operands[0]))
            except Exception:
                dsts = ()
        n_sass = float(self.expansion.get(ptx_class(ins.parts), 2.0 if info.get("wide") else 1.0))
        try:
            cost = self._handler(cls, info, ins, d)
        except EmuError as exc:
            if "Tensor Memory" in str(exc):
                raise
            cost = None                  # an operand form the class's costing does not read: an ALU slot
        pre_fn = getattr(cost, "pre", None)
        model = self
        p = self.p
        # SASS that fuses PTX (two dependent max.f32 into one three-input max) also halves
        # the dependent chain: each PTX instruction's share of the fused one's latency
        alu_lat = float(p["alu_latency_cycles"]) * min(1.0, n_sass)
        # ptxas schedules the SASS of a basic block by its dependences, not in PTX order:
        # arithmetic and memory instructions issue once their sources are ready, filling the
        # scheduler's free cycles (a list schedule); a branch, wait, barrier, fence or
        # asynchronous-unit instruction closes the block: it issues after all before it
        reorder = cls in REORDERABLE
        mark = ins.opcode in self.mark_opcodes

        def op(w, m):
            wt = w.__dict__.get("_timed") or model._warp(w)
            if wt.retry == pc:                       # a parked try_wait runs again: no new issue
                res = fn(w, m)
                if type(res) is not Park:
                    wt.retry = -1
                    if cost is not None:
                        cost(w, m, wt, wt.t, res, True)
                return res
            t = wt.t
            if wt.barw is not None:
                st, gen = wt.barw
                done = st[3].get(gen)
                if done is not None:
                    t = max(t, done)
                    wt.barw = None
            if wt.clw is not None:
                t = max(t, wt.clw[0] + p["cluster_barrier_cycles"])
                wt.clw = None
            ready = wt.ready
            for r in srcs:
                if ready[r] > t:
                    t = ready[r]
            if reorder:
                t = wt.sm.issue[wt.sched].reserve(t, n_sass)
                if t > wt.fin:
                    wt.fin = t
            else:
                t = wt.sm.issue[wt.sched].reserve(max(t, wt.fin), n_sass)
                wt.t = wt.fin = t
            wt.issued += 1
            if mark:
                model.marks.append((id(w.cta), w.index, t, ins.opcode))
            if cost is None:
                res = fn(w, m)
                done = t + alu_lat
            else:
                pre = pre_fn(w, m, wt, t) if pre_fn is not None else None
                res = fn(w, m)
                if type(res) is Park and not res.advance:
                    wt.retry = pc
                    return res
                done = cost(w, m, wt, t, res, pre)
                if wt.t > wt.fin:
                    wt.fin = wt.t
            for r in dsts:
                ready[r] = done
            return res
        return op

    # -- per class ----------------------------------------------------------------------------
    def _handler(self, cls: str, info: dict, ins, d):
        p = self.p
        if cls.startswith("tc_") and any(k not in p for k in TMEM):
            raise EmuError(f"timed mode: {ins.opcode} uses Tensor Memory but the parameters have no "
                           f"{' / '.join(k for k in TMEM if k not in p)}")
        h = getattr(self, "_h_" + cls, None)
        return h(info, ins, d, p) if h is not None else None

    def _h_mufu(self, info, ins, d, p):
        lat = p["mufu_latency_cycles"]

        def cost(w, m, wt, t, res, pre):
            lanes = 32 if m is None else int(np.count_nonzero(m))
            return wt.sm.mufu.reserve(t, lanes) + lat
        return cost

    def _h_smem(self, info, ins, d, p):
        addr_fn, _ = d.addr(info["addr"], "shared")
        width, rows = info["width"], info.get("rows")
        port, banks, lat = p["smem_bytes_per_clk_per_sm"], int(p["smem_banks"]), p["smem_latency_cycles"]

        class Cost:
            def pre(self, w, m, wt, t):
                sel = w.live if m is None else m
                a = np.asarray(addr_fn(w))
                a = np.broadcast_to(a, (32,))[: rows] if rows else np.broadcast_to(a, (32,))[sel]
                return wavefronts(a & mem.OFFSET_MASK, width, banks)

            def __call__(self, w, m, wt, t, res, wf):
                return wt.sm.smem.reserve(t, wf * port) + lat
        return Cost()

    def _h_gmem(self, info, ins, d, p):
        width, lat = info["width"], p["l2_latency_cycles"]

        def cost(w, m, wt, t, res, pre):
            lanes = 32 if m is None else int(np.count_nonzero(m))
            return wt.sm.l2.reserve(t, lanes * width) + lat
        return cost

    def _h_fence(self, info, ins, d, p):
        lat = p["fence_cycles"]

        def cost(w, m, wt, t, res, pre):
            wt.t = t + lat
            return wt.t
        return cost

    def _h_branch(self, info, ins, d, p):
        return None

    def _h_mma_sync(self, info, ins, d, p):
        rate = self._rate(info["kind"])
        amount = info["flops"] / rate
        lat = p["mma_latency_base_cycles"]

        def cost(w, m, wt, t, res, pre):
            return wt.sm.tensor.reserve(t, amount) + lat
        return cost

    def _h_wgmma(self, info, ins, d, p):
        mm, nn, kk = info["m"], info["n"], info["k"]
        rate = self._rate(info["kind"])
        bits = info["in_bits"]
        a_bytes = 0 if info["rs"] else mm * kk * bits / 8
        b_bytes = nn * kk * bits / 8
        tensor = 2.0 * mm * nn * kk / rate
        smem = a_bytes + b_bytes
        lat = p["mma_latency_base_cycles"] + p["mma_latency_per_n_cycles"] * nn
        model = self

        def cost(w, m, wt, t, res, pre):
            # a wgmma is one warpgroup-wide operation: booked whole when the warpgroup's first
            # warp issues it; its other warps take the same completion
            sm = wt.sm
            key = (w.index // 4, wt.wg_seq)
            wt.wg_seq += 1
            shared = sm.wgmma.get(key)
            if shared is None:
                done = max(sm.tensor.reserve(t, tensor), sm.smem.reserve(t, smem)) + lat
                shared = sm.wgmma[key] = [done, 1]
                model._event(done)
            else:
                shared[1] += 1
                if shared[1] >= 4:
                    del sm.wgmma[key]
            wt.wg_open = max(wt.wg_open, shared[0])
            return t
        return cost

    def _h_wgmma_commit_group(self, info, ins, d, p):
        def cost(w, m, wt, t, res, pre):
            wt.wg_groups.append(wt.wg_open)
            wt.wg_open = 0.0
            return t
        return cost

    def _h_wgmma_wait_group(self, info, ins, d, p):
        keep = info["n"]

        def cost(w, m, wt, t, res, pre):
            g = wt.wg_groups
            if len(g) > keep:
                wt.t = max(t, max(g[:len(g) - keep]))
                del g[:len(g) - keep]
            return wt.t
        return cost

    def _h_tc_mma(self, info, ins, d, p):
        from porter.emu.units.tcgen05 import decode_idesc

        i_fn = d.src(ins.operands[3], "u32")
        kind, group, ts = info["kind"], info["group"], info["ts"]
        rate = self._rate(kind)
        base, per_n = p["mma_latency_base_cycles"], p["mma_latency_per_n_cycles"]
        model = self
        cache: dict = {}

        def cost(w, m, wt, t, res, pre):
            sel = w.live if m is None else m
            lane = int(np.flatnonzero(sel)[0]) if sel is not None else 0
            raw = int(np.broadcast_to(np.asarray(i_fn(w)), (32,))[lane])
            geo = cache.get(raw)
            if geo is None:
                try:
                    desc = decode_idesc(kind, raw, group)
                    bits = {"e2m1": 4, "e3m2": 6, "e2m3": 6, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8,
                            "tf32": 32}.get(desc.a_format, 16)
                    geo = (desc.m, desc.n, desc.k, bits)
                except EmuError:
                    geo = (128 * group, 128, 256 // 16, 16)
                cache[raw] = geo
            mm, nn, kk, bits = geo
            sms = [wt.sm]
            if group == 2:
                peer = w.cta.cluster.ctas[w.cta.rank ^ 1] if len(w.cta.cluster.ctas) > 1 else None
                if peer is not None:
                    sms.append(model.sm_of(peer))
            share = len(sms)
            tensor = 2.0 * mm * nn * kk / rate / share
            smem = ((0 if ts else mm / share * kk * bits / 8) + nn / share * kk * bits / 8)
            done = 0.0
            for sm in sms:
                done = max(done, sm.tensor.reserve(t, tensor), sm.smem.reserve(t, smem))
            done += base + per_n * nn
            for sm in sms:
                sm.mma_done = max(sm.mma_done, done)
            model._event(done)
            return t
        return cost

    def _h_tc_commit(self, info, ins, d, p):
        addr_fn, _ = d.addr(ins.operands[0], "shared")
        model, lat = self, p["mbarrier_cycles"]

        def cost(w, m, wt, t, res, pre):
            sel = w.live if m is None else m
            addrs = np.broadcast_to(np.asarray(addr_fn(w)), (32,))[sel]
            done = wt.sm.mma_done
            for a in set(int(x) for x in addrs):
                bar = model._bar(w, a)
                if bar is not None:
                    # a pair's leader commits for both SMs' MMAs
                    for other in model.sms.values():
                        if other is not wt.sm and other.cta.cluster is w.cta.cluster:
                            done = max(done, other.mma_done)
                    model._bar_event(bar, max(t, done) + lat)
                    for rank, peer in enumerate(w.cta.cluster.ctas):
                        pb = peer.mbarriers.get(a & mem.OFFSET_MASK)
                        if pb is not None and pb is not bar and len(ins.operands) > 1:
                            model._bar_event(pb, max(t, done) + lat)   # multicast commit
            return t
        return cost

    def _h_tc_ld(self, info, ins, d, p):
        nbytes, lat = info["bytes"], p["tmem_latency_cycles"]

        def cost(w, m, wt, t, res, pre):
            done = wt.sm.tmem.reserve(t, nbytes) + lat
            wt.tc_ld = max(wt.tc_ld, done)
            return done
        return cost

    def _h_tc_st(self, info, ins, d, p):
        nbytes, lat = info["bytes"], p["tmem_latency_cycles"]

        def cost(w, m, wt, t, res, pre):
            wt.tc_st = max(wt.tc_st, wt.sm.tmem.reserve(t, nbytes) + lat)
            return t
        return cost

    def _h_tc_wait(self, info, ins, d, p):
        is_ld = info["ld"]

        def cost(w, m, wt, t, res, pre):
            wt.t = max(t, wt.tc_ld if is_ld else wt.tc_st)
            return wt.t
        return cost

    def _h_tc_cp(self, info, ins, d, p):
        nbytes = info["bytes"]

        def cost(w, m, wt, t, res, pre):
            sm = wt.sm
            done = sm.tmem.reserve(sm.smem.reserve(t, nbytes), nbytes)
            sm.mma_done = max(sm.mma_done, done)
            return t
        return cost

    def _h_tma(self, info, ins, d, p):
        window, lat = p["tma_inflight_bytes"], p["tma_latency_cycles"]
        model = self

        class Cost:
            def pre(self, w, m, wt, t):
                model.submitted = []
                return None

            def __call__(self, w, m, wt, t, res, pre):
                sm = wt.sm
                for fn in model.submitted:
                    cells = _closure(fn)
                    data, targets = cells.get("data"), cells.get("targets")
                    if data is None or targets is None:
                        continue
                    nbytes = float(data.size)
                    start = t
                    live = sorted((dn, b) for dn, b in sm.tma if dn > start)
                    inflight = sum(b for _, b in live)
                    while live and inflight + nbytes > window:
                        dn, b = live.pop(0)
                        start, inflight = dn, inflight - b
                    xfer = sm.l2.reserve(start, nbytes) + lat
                    sm.tma = [(dn, b) for dn, b in sm.tma if dn > start] + [(xfer, nbytes)]
                    for cta, off, bcta, bar in targets:
                        landed = model.sm_of(cta).smem.reserve(xfer, nbytes)
                        model._bar_event(bar, landed)
                model.submitted = []
                return t
        return Cost()

    def _h_mbar_arrive(self, info, ins, d, p):
        addr_fn, _ = d.addr(info["addr"], "shared")
        model, lat = self, p["mbarrier_cycles"]

        class Cost:
            def pre(self, w, m, wt, t):
                sel = w.live if m is None else m
                addrs = np.broadcast_to(np.asarray(addr_fn(w)), (32,))[sel]
                for a in set(int(x) for x in addrs):
                    bar = model._bar(w, a)
                    if bar is not None:
                        model._bar_event(bar, t + lat)

            def __call__(self, w, m, wt, t, res, pre):
                return t + lat
        return Cost()

    def _h_mbar_wait(self, info, ins, d, p):
        addr_fn, _ = d.addr(info["addr"], "shared")
        ph_fn = d.src(ins.operands[2], "u32" if info["parity"] else "b64")
        parity = info["parity"]
        model = self

        def cost(w, m, wt, t, res, pre):
            sel = w.live if m is None else m
            addrs = np.broadcast_to(np.asarray(addr_fn(w)), (32,))
            phs = np.broadcast_to(np.asarray(ph_fn(w)), (32,))
            lane = int(np.flatnonzero(sel)[0]) if sel is not None else 0
            bar = model._bar(w, int(addrs[lane]))
            if bar is None:
                return t
            ph = int(phs[lane])
            model._sync(bar)
            if parity:
                last = bar.phase - 1
                if last >= 0 and last % 2 != ph % 2:
                    last -= 1
            else:
                last = ph if bar.phase > ph else -1
            if last >= 0 and (bar.phase > last):
                done = bar._t_done.get(last)
                if done is not None and done > t:
                    wt.t = done
            return wt.t
        return cost

    def _h_bar(self, info, ins, d, p):
        ops = ins.operands
        # the barrier and its thread count may be registers as well as immediates (PTX ISA
        # "bar, barrier": a is "an immediate constant or register with value 0 through 15",
        # b the number of participating threads): read them per warp, as the functional run
        # does; timed as barrier 0 with every warp, a named barrier in a register shared
        # barrier 0's generations with every other such barrier (a kernel's ping-pong turns
        # and its O-store barriers) and completed them on the wrong arrivals
        bid_fn = d.src(ops[0], "u32") if ops else None
        count_fn = d.src(ops[1], "u32") if len(ops) > 1 else None
        lat, sync = p["named_barrier_cycles"], info["sync"]

        def lane_value(fn, w, m):
            sel = w.live if m is None else m
            vals = np.broadcast_to(np.asarray(fn(w)), (32,))
            lanes = np.flatnonzero(sel) if sel is not None else ()
            return int(vals[lanes[0]] if len(lanes) else vals[0])

        class Cost:
            def pre(self, w, m, wt, t):
                bid = lane_value(bid_fn, w, m) if bid_fn is not None else 0
                count = lane_value(count_fn, w, m) // 32 if count_fn is not None else None
                tb = w.cta.__dict__.setdefault("_timed_bars", {})
                st = tb.get(bid)
                if st is None:
                    st = tb[bid] = [0, 0.0, 0, {}]           # arrived, latest arrival, generation, done by gen
                need = count or sum(1 for x in w.cta.warps if not x.done)
                st[0] += 1
                st[1] = max(st[1], t)
                gen = st[2]
                if st[0] >= need:
                    st[3][gen] = st[1] + lat
                    st[0], st[1], st[2] = 0, 0.0, gen + 1
                if sync:
                    wt.barw = (st, gen)

            def __call__(self, w, m, wt, t, res, pre):
                return t
        return Cost()

    def _h_cluster_bar(self, info, ins, d, p):
        is_wait = info["wait"]

        def cost(w, m, wt, t, res, pre):
            cl = w.cta.cluster
            if is_wait:
                wt.clw = (getattr(cl, "_timed_arrive", 0.0),)
            else:
                cl._timed_arrive = max(getattr(cl, "_timed_arrive", 0.0), t)
            return t
        return cost

    # -- mbarrier timelines ------------------------------------------------------------------------
    def _bar(self, w, addr: int):
        rank, off = mem.split_cluster_address(addr, w.cta.rank)
        ctas = w.cta.cluster.ctas
        cta = w.cta if rank == w.cta.rank or not 0 <= rank < len(ctas) else ctas[rank]
        return cta.mbarriers.get(off)

    @staticmethod
    def _sync(bar) -> None:
        """Close the phases the barrier completed since it was last looked at: they completed
        at the latest event recorded for them."""
        seen = getattr(bar, "_t_seen", None)
        if seen is None:
            bar._t_seen, bar._t_acc, bar._t_done = bar.phase, 0.0, {}
            return
        if bar.phase > seen:
            for ph in range(seen, bar.phase):
                bar._t_done[ph] = bar._t_acc
            bar._t_seen, bar._t_acc = bar.phase, 0.0

    def _bar_event(self, bar, t: float) -> None:
        self._sync(bar)
        if t > bar._t_acc:
            bar._t_acc = t
        self._event(t)

    def _event(self, t: float) -> None:
        if t > self.events:
            self.events = t

    @staticmethod
    def _rate_of(rates: dict, kind: str) -> float:
        for k in (kind, KIND_ALIASES.get(kind, kind)):
            if k in rates:
                return float(rates[k])
        raise EmuError(f"timed mode: no tensor-core rate for MMA kind '{kind}' (rates for {', '.join(rates)})")

    def _rate(self, kind: str) -> float:
        return self._rate_of(self.p["mma_flop_per_clk_per_sm"], kind)

    # -- results ------------------------------------------------------------------------------------
    def result(self) -> dict:
        """Cycles of the launch (its last warp's last issue or the last event), per SM the
        cycles each unit was busy, and the instructions issued."""
        warps = [w for c in self.sched.all_ctas for w in c.warps]
        ends = [max(w._timed.t, w._timed.fin) for w in warps if "_timed" in w.__dict__]
        cycles = max(ends + [self.events, 0.0])
        busy = []
        for sm in self.sms.values():
            busy.append({"issue": max(c.busy for c in sm.issue), "smem": sm.smem.busy / sm.smem.rate,
                         "tensor": sm.tensor.busy, "mufu": sm.mufu.busy / sm.mufu.rate,
                         "l2": sm.l2.busy / sm.l2.rate, "tmem": sm.tmem.busy / sm.tmem.rate})
        issued = sum(w._timed.issued for w in warps if "_timed" in w.__dict__)
        order = {id(c): i for i, c in enumerate(self.sched.all_ctas)}
        marks = [(order.get(c, -1), wi, t, op) for c, wi, t, op in self.marks]
        return {"cycles": cycles, "busy": busy, "issued": issued, "ctas": len(self.sched.all_ctas), "marks": marks}


def _closure(fn) -> dict:
    code = getattr(fn, "__code__", None)
    if code is None or not fn.__closure__:
        return {}
    out = {}
    for name, cell in zip(code.co_freevars, fn.__closure__):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out
