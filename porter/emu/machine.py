"""The machine: warps, CTAs, clusters, the scheduler and the async engine.

Execution is warp-vectorised: each warp steps one instruction at a time for the lanes
at its lowest pc (per-lane pcs; lanes reconverge when their pcs meet again). The
scheduler runs every resident warp of every resident CTA and cluster in turn (round
robin, or a seeded random order per round), a quantum of instructions each, so
producer and consumer warps interleave. Waits park a warp with a wake condition instead
of spinning; asynchronous work (TMA copies) completes a seeded number of rounds after
it was issued, before the warp that waits for it can proceed. When every live warp is
parked and nothing asynchronous is pending, the run stops with a deadlock report naming
each waiter; an instruction budget stops runaway loops the same way.

The machine is functional and untimed: memory is sequentially consistent, there are no
weak-memory reorderings, and virtual time (``%globaltimer``) advances one nanosecond per
warp-instruction, jumping ahead when every warp sleeps.
"""

from __future__ import annotations

import os
import time
from collections import deque
from dataclasses import dataclass, field

import numpy as np

from porter.emu import link
from porter.emu import memory as mem
from porter.emu import ptx
from porter.emu.control import DEFER, HANDLED, Park
from porter.emu.decode import STORE, Decoder
from porter.emu.errors import CheckFailed, Deadlock, EmuError, Unsupported

WARP = 32
QUANTUM = 64
DEFAULT_BUDGET = 200_000_000
# Instructions that can change what another warp observes (memory, barriers, async
# copies): while none runs, warps that only poll and sleep cannot make progress.
SHARED_EFFECTS = {"st", "red", "atom", "mbarrier", "bar", "barrier", "cp", "tcgen05", "stmatrix", "wgmma"}
# Virtual time the machine may fast-forward while every warp only polls and sleeps
# before it calls the run a livelock (a kernel watchdog on %globaltimer fires well before).
LIVELOCK_NS = 1 << 40
# A timed mode (porter.emu.timed) sets this to a factory ``f(scheduler) -> model`` for the
# launches it times; the model's ``ops_for(prog)`` gives the program's decoded functions
# wrapped with its per-issued-instruction hook. None (the default): untimed, no cost.
TIMING_FACTORY = None


# ---- the program: one kernel decoded ------------------------------------------------------------

class KernelLayout:
    """Where a kernel's variables live: module globals in global memory, ``.shared``
    variables at fixed offsets of every CTA's shared memory, parameters in the param buffer."""

    def __init__(self, module: ptx.Module, kernel: ptx.Kernel, gmem: mem.GlobalMemory):
        self.globals: dict[str, tuple[str, int]] = {}
        for v in module.globals:
            if v.space in ("global", "const"):
                addr = gmem.alloc(max(v.size, 1), f"{v.space} {v.name}")
                if v.init:
                    gmem.write(addr, v.init)
                self.globals[v.name] = (v.space, addr)
        off = mem.SHARED_RESERVED
        self.shared: dict[str, int] = {}
        dynamic = []
        for v in [g for g in module.globals if g.space == "shared"] + kernel.shared:
            if v.extern or v.size == 0:
                dynamic.append(v)
                continue
            off = -(-off // v.align) * v.align
            self.shared[v.name] = off
            off += v.size
        align = max([v.align for v in dynamic], default=16)
        self.dynamic_base = -(-off // align) * align
        for v in dynamic:
            self.shared[v.name] = self.dynamic_base
        self.static_end = off
        self.params = {p.name: p for p in kernel.params}

    def symbol_address(self, name: str, d: Decoder) -> tuple[str, int]:
        if name in self.params:
            return "param", self.params[name].offset
        if name in self.shared:
            return "shared", self.shared[name]
        if name in self.globals:
            return self.globals[name]
        raise d.unsupported(f"(symbol {name!r} is not a variable or parameter)")

    def symbol_value(self, name: str, d: Decoder) -> int:
        return self.symbol_address(name, d)[1]

    def shared_size(self, dynamic: int) -> int:
        return self.dynamic_base + dynamic


@dataclass
class Program:
    """A kernel decoded once per module load."""
    module: ptx.Module
    kernel: ptx.Kernel
    layout: KernelLayout
    ops: list
    srcs: list                      # per instruction: frozenset of register ids it reads
    reg_names: list[str]
    reg_dtypes: list
    file: str
    writes: list = field(default_factory=list)   # per instruction: can it change what another warp sees
    # per instruction: None, or the decoded functions of the straight run of register-only
    # instructions starting there (see ``_straight_runs``), for a converged warp to run in one go
    runs: list = field(default_factory=list)
    # per instruction: is it register-only (``_register_only_builders``), the register ids it
    # writes (register-only ones), its guard (register id, negated) or None: a register-only
    # instruction that reads an undefined value (ops.wgmma.Undefined) passes it on to them
    pure: list = field(default_factory=list)
    dsts: list = field(default_factory=list)
    guards: list = field(default_factory=list)

    def zero_registers(self) -> list:
        """The register file of a new warp: per register a zero array of its storage type,
        shared by every warp (register arrays are replaced on write, never written in place)."""
        regs = getattr(self, "_zero_regs", None)
        if regs is None:
            zeros = {dt: np.zeros(WARP, dtype=dt) for dt in set(self.reg_dtypes)}
            regs = self._zero_regs = [zeros[dt] for dt in self.reg_dtypes]
        return regs

    def reg_index_of(self, op) -> int | None:
        """The register id of a register operand (``!%p`` too), None for anything else."""
        if isinstance(op, ptx.Not):
            op = op.reg
        if not isinstance(op, ptx.Reg):
            return None
        ids = self.__dict__.get("_reg_ids")
        if ids is None:
            ids = self._reg_ids = {name: i for i, name in enumerate(self.reg_names)}
        return ids.get(op.name)

    def line(self, pc: int) -> int:
        lines = self.__dict__.get("_lines")
        if lines is None:
            lines = self._lines = [ins.line for ins in self.kernel.code]
        return lines[pc] if 0 <= pc < len(lines) else 0

    def where(self, pc: int) -> str:
        code = self.kernel.code
        if 0 <= pc < len(code):
            return f"{self.file}:{code[pc].line} `{code[pc].opcode}`"
        return f"{self.file}: pc {pc}"


def build_program(module: ptx.Module, kernel_name: str, gmem: mem.GlobalMemory) -> Program:
    from porter.emu.ops import builder_for

    if kernel_name not in module.kernels:
        raise Unsupported(f"{module.file}: no .entry {kernel_name!r} (entries: {', '.join(module.kernels) or 'none'})")
    kernel = link.link(module, module.kernels[kernel_name])    # .func callees appended (link.py)
    layout = KernelLayout(module, kernel, gmem)
    d = Decoder(kernel, layout, module.file)
    ops, srcs, pure, dsts, guards = [], [], [], [], []
    for ins in kernel.code:
        d.ins = ins
        build = builder_for(ins, d)
        fn = build(ins, d)
        pure.append(build in _register_only_builders())
        if ins.guard is not None and not getattr(fn, "handles_guard", False):
            fn = _guarded(fn, d.rid(ptx.Reg(ins.guard)), ins.guard_neg)
        ops.append(fn)
        regs = set()
        for op in ins.operands[getattr(build, "n_dst", 1):]:
            regs.update(d.regs_of(op))
        if ins.guard is not None:
            regs.add(d.rid(ptx.Reg(ins.guard)))
        srcs.append(frozenset(regs))
        dsts.append(frozenset(r for op in ins.operands[:getattr(build, "n_dst", 1)] for r in d.regs_of(op))
                    if pure[-1] else frozenset())
        guards.append(None if ins.guard is None else (d.rid(ptx.Reg(ins.guard)), bool(ins.guard_neg)))
    names = list(kernel.regs)
    dtypes = [STORE[b] for b in d.reg_bits]
    writes = [ins.opcode.split(".", 1)[0] in SHARED_EFFECTS for ins in kernel.code]
    return Program(module, kernel, layout, ops, srcs, names, dtypes, module.file, writes,
                   _straight_runs(ops, pure), pure, dsts, guards)


def _register_only_builders() -> frozenset:
    """The builders whose functions only read and write the warp's registers and fall
    through (integer, float, compare, select, convert and bit instructions): no memory, no
    barrier, no pc, no park, nothing another warp can see. A run of them needs none of the
    stepper's per-instruction tests."""
    global _REGISTER_ONLY
    if _REGISTER_ONLY is None:
        from porter.emu.ops import alu, bits, cvt_packed, cvt_round, int_extra, packed_float

        # and the forms of other heads that are register-only too: packed and scalar-f16
        # float arithmetic, min/max, ex2/tanh and compares (not packed red/atom), the cvt
        # forms, the carry chain (its flag is the warp's own), the SIMD, saturating and
        # other extra integer instructions (not ldu, a load)
        _REGISTER_ONLY = (frozenset(alu.BUILDERS.values()) | frozenset(bits.BUILDERS.values()) | {
            packed_float._arith, packed_float._sign_op, packed_float._minmax, packed_float._approx,
            packed_float._setp, packed_float.build_set, cvt_packed.build_cvt_form, cvt_round.build_cvt_round,
            *(int_extra.BUILDERS[k] for k in ("addc", "subc", "madc", "mul24", "mad24", "sad", "dp4a", "dp2a",
                                              "bfind", "fns", "bmsk", "szext", "testp", "slct", "cnot")),
            int_extra.build_prmt_mode, int_extra.build_simd16, int_extra.build_mad_hi, int_extra.build_add_sat})
    return _REGISTER_ONLY


_REGISTER_ONLY = None


def _straight_runs(ops: list, pure: list) -> list:
    """Per pc: the functions of the register-only instructions from there to the next other
    one (at most QUANTUM), when there are at least two; else None. Labels inside a run do
    not matter: a run is only ever entered at its first pc and left at its end."""
    runs = [None] * len(ops)
    end = len(ops)
    for pc in range(len(ops) - 1, -1, -1):
        if not pure[pc]:
            end = pc
            continue
        if end - pc >= 2:
            runs[pc] = tuple(ops[pc:min(end, pc + QUANTUM)])
    return runs


# A 32-lane bool mask's bytes: testing them is ~20x cheaper than ndarray.any()/all().
_NO_LANE = bytes(WARP)


def _guarded(fn, g: int, neg: bool):
    def run(w, m):
        p = w.r[g]
        if neg:
            p = ~p
        gm = p if m is None else (p & m)
        b = gm.tobytes()
        if b == _NO_LANE:
            return None
        if m is None and 0 not in b:
            return fn(w, None)
        return fn(w, gm)
    return run


def _move_group(w: "Warp", g: list, pc: int) -> None:
    """Lane group ``g`` of diverged warp ``w`` goes on at ``pc``. Groups never share a pc
    between steps (``Warp.merge`` keeps it so), so only a group already at ``pc`` can merge
    with it: the full merge runs only then."""
    g[0] = pc
    for h in w.groups:
        if h[0] == pc and h is not g:
            w.merge()
            return


# ---- warps, CTAs, clusters ---------------------------------------------------------------------

class Warp:
    def __init__(self, cta: "CTA", index: int, nthreads: int, prog: Program, sched: "Scheduler"):
        self.cta = cta
        self.index = index
        self.name = f"{cta.name} warp {index}"      # (read by every shared access: built once)
        self.prog = prog
        self.sched = sched
        self.r = list(prog.zero_registers())   # shared zero arrays: never written in place
        lanes = np.arange(WARP)
        self.live = lanes < nthreads
        self.full = bool(self.live.all())
        self.pc = 0
        self.cur = 0
        # Converged: every live lane at ``pc``. Diverged: ``groups`` of lanes that share a pc,
        # each [pc, lane mask, deferred]; the stepper runs the lowest-pc group that is not
        # deferred (waiting at a collective for the others), and groups whose pcs meet merge.
        self.converged = True
        self.groups: list[list] = []
        self.gi: list | None = None     # the group being executed
        self.done = not self.live.any()
        self.park: Park | None = None
        self.poisoned: dict[int, str] = {}
        self.executed = 0
        tid = index * WARP + lanes
        self.tid = tid
        self.special = cta.special_regs(tid, lanes, index)
        self.units: dict = {}        # per-warp unit state (wgmma groups, ...)

    def where(self) -> str:
        pc = self.pc if self.converged else min(g[0] for g in self.groups)
        return self.prog.where(pc)

    def current_pc(self) -> int:
        """The pc of the instruction being executed (or, between steps, the next one)."""
        return self.cur

    def lanes(self, m) -> np.ndarray:
        return self.live if m is None else m

    # -- pcs ------------------------------------------------------------------------------------
    def set_pcs(self, m, target: int, pc: int, taken) -> None:
        """The executing lanes at ``pc``: those in ``taken`` go to ``target``, the rest fall through."""
        sel = self.live if m is None else m
        go, stay = sel & taken, sel & ~taken
        new = [[target, go, False]] if go.tobytes() != _NO_LANE else []
        if stay.tobytes() != _NO_LANE:
            new.append([pc + 1, stay, False])
        if self.converged:
            self.groups = new
            self.converged = False
        else:
            i = next(k for k, g in enumerate(self.groups) if g is self.gi)
            self.groups[i:i + 1] = new
        self.merge()

    def merge(self) -> None:
        """Groups at the same pc become one; one group left is a converged warp."""
        gs = self.groups
        if len(gs) > 1:
            by_pc: dict[int, list] = {}
            for g in gs:
                h = by_pc.get(g[0])
                if h is None:
                    by_pc[g[0]] = g
                else:
                    h[1] = h[1] | g[1]
                    h[2] = False
            if len(by_pc) < len(gs):
                gs = self.groups = list(by_pc.values())
        if len(gs) == 1:
            self.converged = True
            self.pc = gs[0][0]
            self.groups = []

    def reconverge(self) -> None:
        if not self.converged:
            self.merge()

    def exit_lanes(self, m) -> None:
        sel = self.live if m is None else m
        self.live = self.live & ~sel
        self.full = False
        if self.live.tobytes() == _NO_LANE:
            self.done = True
            self.groups = []
            self.sched.warp_exited(self)
        elif not self.converged:
            self.groups = [[g[0], g[1] & self.live, g[2]] for g in self.groups if (g[1] & self.live).any()]
            self.merge()

    # -- checkers ---------------------------------------------------------------------------------
    def poison_read(self, regs, pc: int | None = None, m=None):
        """The instruction at ``pc`` (lanes ``m``) reads poisoned registers: an error, or a
        warning for a ``warn_only`` poison. A register holding an undefined value (its poison
        ``cleared_by_write``: ops.wgmma.Undefined) is an error only where the value is used:
        no lane executes the instruction (its guard), or a register-only instruction passes it
        on (returned: the poison its destinations take after it runs; None when its lanes
        select no undefined operand)."""
        poisoned = self.poisoned
        hit = sorted(regs & poisoned.keys())
        marks = [j for j in hit if hasattr(poisoned[j], "on_read")]
        if marks:               # marks that only note the read (ops.wgmma.Watched): no rule broken
            if pc is None or self._executing(pc, m).any():
                for j in marks:
                    mark = poisoned.get(j)          # (one mark's on_read may drop its siblings')
                    if mark is not None:
                        mark.on_read(self, j)
            hit = [j for j in hit if j not in marks]
            if not hit:
                return None
        hard = [j for j in hit if not getattr(poisoned[j], "warn_only", False)]
        undefined = [j for j in hard if getattr(poisoned[j], "cleared_by_write", False)]
        i = next((j for j in hard if j not in undefined), None)
        if i is None and undefined and pc is not None:
            lanes = self._executing(pc, m)
            if not lanes.any():
                return None
            if self.prog.pure[pc]:
                return self._passed_on(pc, undefined, lanes)
        if i is None and undefined:
            i = undefined[0]
        if i is None:           # only registers whose poison the ISA states no rule for: warn, read on
            for j in hit:
                self._poison_warning("reads", j)
            return None
        raise CheckFailed(f"{self.prog.where(self.current_pc())}: {self.name} reads {self.prog.reg_names[i]}, "
                          f"{self.poisoned[i]}")

    def _executing(self, pc: int, m) -> np.ndarray:
        """The lanes that execute the instruction at ``pc``: the group's, under its guard."""
        lanes = self.live if m is None else m
        guard = self.prog.guards[pc]
        if guard is not None and guard[0] not in self.poisoned:
            p = np.asarray(self.r[guard[0]]).astype(bool)
            lanes = lanes & (~p if guard[1] else p)
        return lanes

    def _passed_on(self, pc: int, undefined: list, lanes: np.ndarray):
        """The undefined value a register-only instruction's result holds: every operand's, but
        for ``selp``, whose lanes may select only defined ones (a compiler's ``if (c) d = 0``)."""
        ins = self.prog.kernel.code[pc]
        poison = self.poisoned[undefined[0]]
        if ins.opcode.split(".", 1)[0] == "selp" and len(ins.operands) == 4:
            ids = self.prog.reg_index_of
            a, b, p = (ids(op) for op in ins.operands[1:4])
            if p is not None and p not in self.poisoned:
                pick = np.asarray(self.r[p]).astype(bool)
                if isinstance(ins.operands[3], ptx.Not):
                    pick = ~pick
                uses_a = a in undefined and (lanes & pick).any()
                uses_b = b in undefined and (lanes & ~pick).any()
                if not (uses_a or uses_b):
                    return None
                poison = self.poisoned[a if uses_a else b]
        return poison

    def poison_write(self, i: int) -> None:
        if getattr(self.poisoned[i], "cleared_by_write", False):
            # a register holding an undefined value (ops.wgmma.Undefined): a write gives it a value
            del self.poisoned[i]
            return
        if getattr(self.poisoned[i], "warn_only", False):
            self._poison_warning("writes", i)
            return
        raise CheckFailed(f"{self.prog.where(self.current_pc())}: {self.name} writes {self.prog.reg_names[i]}, "
                          f"{self.poisoned[i]}")

    def _poison_warning(self, how: str, i: int) -> None:
        """A register poisoned with a ``warn_only`` reason (the ISA states no rule against the
        access, e.g. a tcgen05.ld destination before tcgen05.wait::ld): the register is released
        so the run goes on with the value it holds, and one warning per instruction and reason
        (it names the first warp and register seen there; every warp of every CTA reading each
        destination register would otherwise be a line of its own)."""
        reason, pc = self.poisoned.pop(i), self.current_pc()
        self.cta.launch.warn_once(("poison", how, pc, str(reason)),
                                  lambda: f"{self.prog.where(pc)}: {self.name} {how} {self.prog.reg_names[i]}, {reason}")


class CTA:
    def __init__(self, launch: "LaunchState", ctaid: tuple, cluster: "Cluster", rank: int):
        self.launch = launch
        self.ctaid = ctaid
        self.cluster = cluster
        self.rank = rank
        self.block = launch.block
        self.name = f"CTA {ctaid[0]}" if launch.grid[1] * launch.grid[2] == 1 else f"CTA {ctaid}"
        self.smem = mem.SharedMemory(launch.prog.layout.shared_size(launch.smem_dynamic), self.name, rank)
        self.mbarriers: dict = {}
        self.named_barriers: dict = {}
        self.units: dict = {}
        self.regs_per_thread = launch.regs_per_thread
        nthreads = launch.block[0] * launch.block[1] * launch.block[2]
        self.nthreads = nthreads
        self.reg_pool = 0            # registers released by setmaxnreg.dec, available to .inc
        self.warp_regs: dict[int, int] = {}
        self.warps: list[Warp] = []
        self.done = False
        self.remote_seen: dict[int, tuple] = {}     # peer rank -> (cluster barrier generation, where)
        self.remote_clock: dict[int, dict] = {}     # peer rank -> {its warp's race-detector agent: last epoch}
        self.remote_where: dict[int, dict] = {}     # peer rank -> {that agent: where its last access was}
        # bytes of shared memory generic stores wrote since the last fence.proxy.async
        self.generic_written = np.zeros(self.smem.data.size, dtype=bool)
        self.generic_dirty = False                  # any of them set (ops/memory.py keeps it)
        self.inflight_reads: dict = {}              # async reads of this shared memory: key -> (lo, hi, what)

    def special_regs(self, tid, lanes, warp_index) -> dict:
        bx, by, bz = self.block
        g = self.launch.grid
        cl = self.launch.cluster_dims
        cid = self.cluster.cluster_id
        ncl = tuple(g[i] // cl[i] for i in range(3))
        lm = np.uint32(1) << lanes.astype(np.uint32)

        def full(v):
            return np.full(WARP, v, dtype=np.uint32)
        rank_xyz = tuple(self.ctaid[i] % cl[i] for i in range(3))
        return {
            "tid.x": (tid % bx).astype(np.uint32), "tid.y": ((tid // bx) % by).astype(np.uint32),
            "tid.z": (tid // (bx * by)).astype(np.uint32),
            "ntid.x": full(bx), "ntid.y": full(by), "ntid.z": full(bz),
            "ctaid.x": full(self.ctaid[0]), "ctaid.y": full(self.ctaid[1]), "ctaid.z": full(self.ctaid[2]),
            "nctaid.x": full(g[0]), "nctaid.y": full(g[1]), "nctaid.z": full(g[2]),
            "laneid": lanes.astype(np.uint32), "warpid": full(warp_index),
            "nwarpid": full(-(-self.nthreads // WARP)),
            "cluster_ctarank": full(self.rank), "cluster_nctarank": full(cl[0] * cl[1] * cl[2]),
            "cluster_ctaid.x": full(rank_xyz[0]), "cluster_ctaid.y": full(rank_xyz[1]),
            "cluster_ctaid.z": full(rank_xyz[2]),
            "cluster_nctaid.x": full(cl[0]), "cluster_nctaid.y": full(cl[1]), "cluster_nctaid.z": full(cl[2]),
            "clusterid.x": full(cid[0]), "clusterid.y": full(cid[1]), "clusterid.z": full(cid[2]),
            "nclusterid.x": full(ncl[0]), "nclusterid.y": full(ncl[1]), "nclusterid.z": full(ncl[2]),
            "is_explicit_cluster": full(1 if self.launch.explicit_cluster else 0),
            "smid": full(self.launch.cta_index(self.ctaid)), "nsmid": full(self.launch.n_ctas),
            "lanemask_eq": lm, "lanemask_lt": lm - np.uint32(1), "lanemask_le": (lm - np.uint32(1)) | lm,
            "lanemask_gt": ~((lm - np.uint32(1)) | lm), "lanemask_ge": ~(lm - np.uint32(1)),
            "dynamic_smem_size": full(self.launch.smem_dynamic),
            "total_smem_size": full(self.smem.size - mem.SHARED_RESERVED),
        }

    def release(self) -> None:
        """Drop a finished CTA's memory, barriers and register files (a grid of many CTAs must
        not keep ~17 KB per finished CTA); its name, warps and their counts stay for the summary.
        Anything that would still touch it checks ``done`` first and reports the exit."""
        self.smem.data = np.zeros(0, dtype=np.uint8)
        self.generic_written = np.zeros(0, dtype=bool)
        self.mbarriers, self.named_barriers, self.inflight_reads = {}, {}, {}
        for w in self.warps:
            w.r, w.special = [], {}

    def peer(self, rank: int, who: str) -> "CTA":
        """CTA ``rank`` of this cluster, checked to be there and not exited."""
        ctas = self.cluster.ctas
        if not 0 <= rank < len(ctas):
            raise CheckFailed(f"{who}: shared::cluster address names CTA rank {rank}, but the cluster has "
                              f"{len(ctas)} CTA(s)")
        peer = ctas[rank]
        if peer.done:
            raise CheckFailed(f"{who}: {self.name} accesses the shared memory of {peer.name}, which has "
                              "already exited (missing cluster barrier before exit?)")
        if peer is not self:
            peer.remote_seen[self.rank] = (self.cluster.barrier_generation, who)
            w = getattr(self.launch, "current_warp", None)      # the accessing warp's epoch (race detector on)
            if getattr(w, "vc", None) is not None:
                seen = peer.remote_clock.setdefault(self.rank, {})
                epoch = int(w.vc[w.aid])
                if epoch >= seen.get(w.aid, 0):     # each warp's latest access and where it was
                    seen[w.aid] = epoch
                    peer.remote_where.setdefault(self.rank, {})[w.aid] = who
        return peer

    def check_warpgroups(self) -> None:
        """Warpgroup-wide instructions (wgmma.mma_async, setmaxnreg) must be executed by all
        four warps of the warpgroup alike: compare the warps once the CTA has finished."""
        for first in range(0, len(self.warps) - 3, 4):
            group = self.warps[first:first + 4]
            issued = [w.units["wgmma"].issued if "wgmma" in w.units else 0 for w in group]
            if len(set(issued)) > 1:
                raise CheckFailed(f"{self.name}: the warps of warpgroup {first // 4} issued {issued} "
                                  "wgmma.mma_async: every warp of a warpgroup must execute each one")
            regs = [self.warp_regs.get(w.index) for w in group]
            if any(r is not None for r in regs) and len(set(regs)) > 1:
                raise CheckFailed(f"{self.name}: the warps of warpgroup {first // 4} end with setmaxnreg "
                                  f"counts {regs}: the whole warpgroup must execute each setmaxnreg")

    def check_exit_safe(self) -> None:
        """A CTA must not exit while a peer that used its shared memory (remote arrives, DSMEM,
        multicast) can still do so: a cluster barrier must separate the peer's last remote
        access from the exit."""
        gen = self.cluster.barrier_generation
        for rank, (seen, who) in self.remote_seen.items():
            peer = self.cluster.ctas[rank]
            if not peer.done and seen >= gen:
                unordered = self._unordered_peer_access(rank)
                if unordered is None:
                    continue
                what = f"({unordered}, which nothing orders before this exit)" if unordered else f"({who})"
                raise CheckFailed(f"{self.name} exits while {peer.name}, which accessed its shared memory "
                                  f"{what} with no cluster barrier since, is still running: a missing "
                                  "cluster barrier before exit")

    def _unordered_peer_access(self, rank: int) -> str | None:
        """None when every access the peer made to this CTA's shared memory happened before this
        CTA's warps ended (their race-detector clocks cover it: e.g. a remote mbarrier arrive or a
        tcgen05.commit multicast that this CTA waited on), so none is still in flight at the
        exit (CUDA C++ Programming Guide, Distributed Shared Memory: such operations must
        complete before the block exits). Else where the first access no clock covers was (the
        peer's warp and instruction, not merely its last access), or "" without the race
        detector (not known which)."""
        clocks = self.remote_clock.get(rank)
        vcs = [w.vc for w in self.warps if getattr(w, "vc", None) is not None]
        if not clocks or not vcs:
            return ""
        where = self.remote_where.get(rank, {})
        for aid, epoch in clocks.items():
            if not any(aid < vc.size and vc[aid] >= epoch for vc in vcs):
                return where.get(aid, "")
        return None


class Cluster:
    def __init__(self, cluster_id: tuple):
        self.cluster_id = cluster_id
        self.ctas: list[CTA] = []
        self.barrier_arrived = 0
        self.barrier_generation = 0
        self.warp_phase: dict[int, int] = {}   # id(warp) -> generation it arrived in

    def live_warps(self) -> int:
        return sum(1 for c in self.ctas for w in c.warps if not w.done)

    def live_warps_arrived_needed(self) -> int:
        """Arrivals that complete a cluster-barrier phase: every non-exited warp of the cluster."""
        return self.live_warps()


# ---- the async engine ----------------------------------------------------------------------------

class AsyncEngine:
    """Asynchronous work (TMA copies, bulk copies): each completes a few rounds after issue."""

    def __init__(self, rng, max_delay: int):
        self.pending: list = []      # (due_round, seq, fn, describe)
        self.seq = 0
        self.rng = rng
        self.max_delay = max_delay

    def submit(self, round_now: int, fn, describe: str, delay: int | None = None) -> None:
        """``delay``: rounds until ``fn`` runs (default: seeded 1..max_delay); when every warp
        is parked, the earliest pending work completes at once whatever its delay."""
        if delay is None:
            delay = 1 if self.rng is None else int(self.rng.integers(1, self.max_delay + 1))
        self.seq += 1
        self.pending.append((round_now + delay, self.seq, fn, describe))

    def tick(self, round_now: int) -> bool:
        if not self.pending:
            return False
        due = [p for p in self.pending if p[0] <= round_now]
        if not due:
            return False
        self.pending = [p for p in self.pending if p[0] > round_now]
        for p in sorted(due, key=lambda p: (p[0], p[1])):
            p[2]()
        return True

    def complete_next(self) -> None:
        first = min(self.pending, key=lambda p: (p[0], p[1]))
        self.pending.remove(first)
        first[2]()


# ---- one launch --------------------------------------------------------------------------------

@dataclass
class RunSummary:
    warp_instructions: int
    thread_instructions: int
    warps: int
    ctas: int
    seconds: float
    rounds: int
    virtual_ns: int
    wgmma: int = 0
    tma: int = 0
    cpu_seconds: float = 0.0     # this process's CPU time over the run (steadier than wall time under load)
    warnings: tuple = ()         # findings of rules the PTX ISA does not state (LaunchState.warn)

    @property
    def warp_instr_per_s(self) -> float:
        return self.warp_instructions / self.seconds if self.seconds else 0.0

    def to_dict(self) -> dict:
        return {"warp_instructions": self.warp_instructions, "thread_instructions": self.thread_instructions,
                "warps": self.warps, "ctas": self.ctas, "seconds": round(self.seconds, 4), "rounds": self.rounds,
                "virtual_ns": self.virtual_ns, "warp_instr_per_s": round(self.warp_instr_per_s),
                "wgmma": self.wgmma, "tma": self.tma, "cpu_seconds": round(self.cpu_seconds, 4),
                "warnings": list(self.warnings)}


class LaunchState:
    def __init__(self, prog: Program, grid, block, cluster, smem_dynamic: int, params: bytes,
                 gmem: mem.GlobalMemory, regs_per_thread: int | None, cooperative: bool):
        self.prog = prog
        self.grid = grid
        self.block = block
        self.cluster_dims = cluster
        self.explicit_cluster = prog.kernel.cluster is not None or cluster != (1, 1, 1)
        self.smem_dynamic = smem_dynamic
        self.params = np.frombuffer(bytes(params), dtype=np.uint8).copy()
        self.gmem = gmem
        self.regs_per_thread = regs_per_thread
        self.cooperative = cooperative
        self.n_ctas = grid[0] * grid[1] * grid[2]
        self.warnings: list[str] = []       # checks of rules the PTX ISA does not state (isa_rules.WARNINGS)
        self.relaxed: frozenset = frozenset()   # ISA rules reported as warnings (launch_args.RELAXABLE)

    def warn(self, message: str) -> None:
        """Record (once) a finding that breaks no rule the PTX ISA states, with the reason."""
        from porter.emu.isa_rules import warning_reason

        text = f"{message} (a warning: {warning_reason(message) or 'no rule of the PTX ISA'})"
        if text not in self.warnings:
            self.warnings.append(text)

    def warn_once(self, key, message) -> None:
        """``warn`` the first time ``key`` (e.g. an instruction and a finding) is seen in the launch,
        for findings whose text differs from warp to warp or step to step; ``message`` may be a
        callable, built only then."""
        seen = self.__dict__.setdefault("_warned_keys", set())
        if key not in seen:
            seen.add(key)
            self.warn(message() if callable(message) else message)

    def relaxed_error(self, rule: str, message: str, site: str) -> bool:
        """An error of the ISA rule ``rule`` at ``site`` (an instruction): True (reported once per
        site as a warning naming its section) when the launch relaxes the rule, else False (the
        caller raises)."""
        if rule not in self.relaxed:
            return False
        from porter.emu.isa_rules import cite

        def text():
            section = f"[{cite(message) or 'PTX ISA'}]"
            # (a CheckFailed's text carries its section already: cited once)
            return f"{message}{'' if section in message else ' ' + section} (relaxed by --relax {rule})"

        self.warn_once(("relaxed", rule, site), text)
        return True

    def cta_index(self, ctaid) -> int:
        return ctaid[0] + self.grid[0] * (ctaid[1] + self.grid[1] * ctaid[2])


class Scheduler:
    def __init__(self, launch: LaunchState, seed: int | None = None, budget: int = DEFAULT_BUDGET,
                 max_resident_clusters: int = 16, max_async_delay: int = 3, check_races: bool = False,
                 wall_limit_s: float | None = None):
        from porter.emu.race import RaceDetector

        self.launch = launch
        # Seconds of wall-clock time a launch may take (None: no limit): an endless loop is
        # stopped in that time, naming where the warps were, not only by the budget.
        self.wall_limit_s = wall_limit_s
        self.timing = TIMING_FACTORY(self) if TIMING_FACTORY is not None else None
        self.race = RaceDetector(self) if check_races else None
        self.rng = np.random.default_rng(seed) if seed is not None else None
        self.budget = budget
        self.engine = AsyncEngine(self.rng, max_async_delay)
        self.round = 0
        self.executed = 0
        self.thread_executed = 0
        self.time_ns = 0
        self.effects = 0                 # instructions run that another warp could observe
        self._quiet, self._quiet_effects = 0, -1
        self.counters = {"wgmma": 0, "tma": 0}
        self.warps: list[Warp] = []
        self.clusters_waiting: deque = deque()
        self.resident: list[Cluster] = []
        self.all_ctas: list[CTA] = []
        self.max_resident = max_resident_clusters
        # elect.sync elects the lowest member lane, whatever the warp order: the ISA promises only
        # the same leader for the same membermask, and CUTLASS's sm90 pipelines rely on lane 0 (the
        # elected lane issues the TMA while thread 0 of the warpgroup arms the barrier), so a random
        # leader would stop kernels that run on GPUs. PORTER_EMU_ELECT=random (with a seeded order)
        # elects a random leader per member mask, to find the kernels that depend on which.
        self.random_elect = self.rng is not None and os.environ.get("PORTER_EMU_ELECT", "") == "random"
        # Set when a barrier phase completes: the running warp yields so its waiters run
        # before it goes on (as hardware wakes them at once), exposing early releases.
        self.yield_now = False
        g, cl = launch.grid, launch.cluster_dims
        for cz in range(g[2] // cl[2]):
            for cy in range(g[1] // cl[1]):
                for cx in range(g[0] // cl[0]):
                    self.clusters_waiting.append((cx, cy, cz))

    def now_ns(self) -> int:
        return self.time_ns

    # -- residency --------------------------------------------------------------------------------
    def _start_clusters(self) -> None:
        limit = len(self.clusters_waiting) + len(self.resident) if self.launch.cooperative else self.max_resident
        while self.clusters_waiting and len(self.resident) < limit:
            cid = self.clusters_waiting.popleft()
            cl = Cluster(cid)
            dims = self.launch.cluster_dims
            rank = 0
            for z in range(dims[2]):
                for y in range(dims[1]):
                    for x in range(dims[0]):
                        ctaid = (cid[0] * dims[0] + x, cid[1] * dims[1] + y, cid[2] * dims[2] + z)
                        cta = CTA(self.launch, ctaid, cl, rank)
                        cl.ctas.append(cta)
                        rank += 1
            for cta in cl.ctas:
                n = cta.nthreads
                for wi in range(-(-n // WARP)):
                    w = Warp(cta, wi, min(WARP, n - wi * WARP), self.launch.prog, self)
                    cta.warps.append(w)
                    self.warps.append(w)
                    if self.race is not None:
                        self.race.add_warp(w)
                self.all_ctas.append(cta)
            self.resident.append(cl)
        if self.race is not None:
            self.race.grow()

    def warp_exited(self, w: Warp) -> None:
        from porter.emu.ops.sync import cluster_barrier_recheck

        for hook in w.units.get("exit_checks", ()):
            hook(w)
        cta = w.cta
        cluster_barrier_recheck(cta.cluster, self.race)
        if all(x.done for x in cta.warps):
            cta.check_exit_safe()
            cta.check_warpgroups()
            for hook in cta.units.get("exit_checks", []):
                hook(cta)
            cta.done = True
            cta.smem.exited = True
            cta.release()

    # -- running ----------------------------------------------------------------------------------
    def run(self) -> RunSummary:
        # The ISA's integer arithmetic wraps and its float arithmetic makes inf and NaN
        # without a trap: numpy's warnings for those are off for the whole run, once, so
        # no instruction has to pay for an errstate of its own.
        with np.errstate(all="ignore"):
            return self._run()

    def _run(self) -> RunSummary:
        t0, c0 = time.perf_counter(), time.process_time()
        self._start_clusters()
        while True:
            progressed = False
            order = self.warps
            if self.rng is not None and len(order) > 1:
                order = [order[i] for i in self.rng.permutation(len(order))]
            for w in order:
                if w.done:
                    continue
                if w.park is not None:
                    if not w.park.ready():
                        continue
                    w.park = None
                n = self.run_warp(w, QUANTUM)
                if n:
                    progressed = True
                    self.executed += n
                    self.time_ns += n
            self.round += 1
            if self.engine.tick(self.round):
                progressed = True
            if any(w.done for w in self.warps):
                self.warps = [w for w in self.warps if not w.done]
                finished = [c for c in self.resident if all(cta.done for cta in c.ctas)]
                if finished:
                    self.resident = [c for c in self.resident if c not in finished]
                    self._start_clusters()
            if not self.warps and not self.clusters_waiting:
                if self.engine.pending:
                    self.engine.complete_next()
                    continue
                break
            if self.executed > self.budget:
                raise Deadlock(self.report(f"instruction budget of {self.budget:,} warp-instructions exhausted "
                                           "(a runaway loop?)"))
            if self.wall_limit_s is not None and time.perf_counter() - t0 > self.wall_limit_s:
                at = sorted({w.where() for w in self.warps if not w.done})
                raise Deadlock(self.report(f"wall-clock limit of {self.wall_limit_s:g} s reached with the warps at "
                                           f"{'; '.join(at[:3])}{' and more' if len(at) > 3 else ''} "
                                           "(an endless loop?)"))
            if not progressed:
                if self.engine.pending:
                    self.engine.complete_next()
                    continue
                timed = [w.park.wake_ns for w in self.warps if w.park is not None and w.park.wake_ns is not None]
                if timed:
                    self._advance_time(min(timed))
                    continue
                raise Deadlock(self.report("deadlock: every live warp is parked and nothing asynchronous is pending"))
        return RunSummary(self.executed, self.thread_executed, sum(len(c.warps) for c in self.all_ctas),
                          len(self.all_ctas), time.perf_counter() - t0, self.round, self.time_ns,
                          self.counters["wgmma"], self.counters["tma"], time.process_time() - c0,
                          tuple(self.launch.warnings))

    def _advance_time(self, wake: int) -> None:
        """Every warp sleeps: jump to the first wake-up. If nothing that another warp could
        observe happened since the last such jump (the sleepers woke, polled, slept again),
        no wait can ever be met but by time itself: jump exponentially further, so a
        kernel's own %globaltimer watchdog fires in a few rounds, and past LIVELOCK_NS
        report a livelock (virtual time only: waking late is what a descheduled warp does)."""
        if self.effects == self._quiet_effects:
            self._quiet += 1
        else:
            self._quiet, self._quiet_effects = 0, self.effects
        jump = max(wake - self.time_ns, 0)
        if self._quiet >= 2:
            jump = max(jump, 1024 << min(self._quiet, 48))
        self.time_ns += jump
        if self.time_ns > LIVELOCK_NS:
            raise Deadlock(self.report("livelock: every live warp only polls memory and sleeps, and nothing "
                                       "they wait for is written"))

    def run_warp(self, w: Warp, quantum: int) -> int:
        """Step ``w`` up to ``quantum`` instructions (fewer when it parks, exits or a barrier
        phase completes). The hottest loop of the simulator: per instruction, one call of the
        decoded function and a few attribute tests. The timed mode's per-issued-instruction
        hook wraps the decoded functions (``self.timing.ops_for``), chosen once per call, so
        that it costs nothing per instruction when off."""
        prog = w.prog
        self.launch.current_warp = w         # (CTA.peer records the accessing warp's clock)
        ops, srcs, writes, runs = prog.ops, prog.srcs, prog.writes, prog.runs
        if self.timing is not None:          # timed mode: the same functions, each behind its hook
            ops = self.timing.ops_for(prog)
            runs = ()                        # (and no straight runs: each instruction is hooked)
        n = threads = effects = 0
        pc = w.pc
        # the lane count of the last mask seen (masks are never changed in place: a new
        # group or live mask is a new array), so a diverged group counts its lanes once
        cm, cn = None, WARP
        self.yield_now = False
        try:
            while n < quantum:
                if w.converged:
                    pc = w.pc
                    m = None if w.full else w.live
                    g = None
                    run = runs[pc] if pc < len(runs) else None
                    if run is not None and not w.poisoned:
                        # a straight run of register-only instructions: the same functions in
                        # the same order as one by one, without the per-instruction tests none
                        # of them can change the outcome of (they never park, branch, exit,
                        # yield, poison or touch memory); cut at the quantum as one by one
                        if len(run) > quantum - n:
                            run = run[:quantum - n]
                        for fn in run:
                            w.cur = pc
                            fn(w, m)
                            pc += 1
                        k = len(run)
                        n += k
                        if m is not cm:
                            cm, cn = m, (WARP if m is None else np.count_nonzero(m))
                        threads += k * cn
                        w.pc = pc
                        continue
                else:
                    g = None
                    for h in w.groups:
                        if not h[2] and (g is None or h[0] < g[0]):
                            g = h
                    if g is None:
                        raise CheckFailed(self._diverged_collective(w))
                    pc, m = g[0], g[1]
                    w.gi = g
                    run = runs[pc] if pc < len(runs) else None
                    if run is not None and not w.poisoned:
                        # the lowest group's straight run, as one by one: stepped alone it
                        # stays the lowest group with the same lanes until it reaches the pc
                        # of another group (deferred or not) and merges there, so the run is
                        # cut at that pc (and at the quantum) and the group moved once
                        limit = quantum - n
                        for h in w.groups:
                            if h[0] > pc and h[0] - pc < limit:
                                limit = h[0] - pc
                        if len(run) > limit:
                            run = run[:limit]
                        for fn in run:
                            w.cur = pc
                            fn(w, m)
                            pc += 1
                        k = len(run)
                        n += k
                        if m is not cm:
                            cm, cn = m, np.count_nonzero(m)
                        threads += k * cn
                        _move_group(w, g, pc)
                        continue
                w.cur = pc
                carried = None
                if w.poisoned and srcs[pc] & w.poisoned.keys():
                    carried = w.poison_read(srcs[pc], pc, m)
                res = ops[pc](w, m)
                if carried is not None:          # a register-only instruction passed an undefined value on
                    for i in prog.dsts[pc]:
                        w.poisoned[i] = carried
                n += 1
                if m is not cm:
                    cm, cn = m, (WARP if m is None else np.count_nonzero(m))
                threads += cn
                if writes[pc]:
                    effects += 1
                if res is None:
                    if g is None:
                        w.pc = pc + 1
                    else:
                        _move_group(w, g, pc + 1)
                elif type(res) is int:
                    if g is None:
                        w.pc = res
                    else:
                        _move_group(w, g, res)
                elif res is HANDLED:
                    pass
                elif res is DEFER:
                    if g is None:
                        raise CheckFailed(self._diverged_collective(w))
                    g[2] = True
                elif isinstance(res, Park):
                    if res.advance:
                        if g is None:
                            w.pc = pc + 1
                        else:
                            _move_group(w, g, pc + 1)
                    if not res.ready():
                        w.park = res
                        break
                else:
                    raise TypeError(f"instruction at {w.prog.where(pc)} returned {res!r}")
                if w.done or self.yield_now:
                    break
        except EmuError as exc:         # a checker, an unsupported form or a unit's own error: name where
            if not getattr(exc, "located", False):
                exc.args = (f"{w.prog.where(pc)}: {w.name}: {exc.args[0]}" if not str(exc.args[0]).startswith(w.prog.file)
                            else exc.args[0],)
                exc.located = True
            raise
        except IndexError:
            if pc >= len(ops):
                raise Unsupported(f"{w.prog.file}: {w.name} ran past the end of {w.prog.kernel.name} "
                                  "(no ret/exit: the simulator needs one)") from None
            raise
        w.executed += n
        self.thread_executed += threads
        self.effects += effects
        return n

    def _diverged_collective(self, w: Warp) -> str:
        lines = sorted({w.prog.line(g[0]) for g in w.groups} or {w.prog.line(w.pc)})
        return (f"{w.prog.file}: {w.name}: a warp-collective (.sync/.aligned) instruction was reached by a diverged "
                f"warp: its lanes wait at {', '.join(f'{w.prog.file}:{n}' for n in lines)}")

    # -- reports ----------------------------------------------------------------------------------
    def report(self, headline: str) -> str:
        lines = [f"{self.launch.prog.file}: {headline}; {self.executed:,} warp-instructions run"]
        shown = 0
        # Waiters on a CTA or cluster barrier are usually the consequence; the others
        # (mbarrier, setmaxnreg, a runnable warp) the cause: list those first.
        def consequence(w):
            return w.park is not None and w.park.describe().startswith(("barrier.cluster", "bar.sync"))
        for w in sorted((w for w in self.warps if not w.done), key=consequence):
            what = w.park.describe() if w.park is not None else "runnable"
            # a park that completed its instruction (bar.sync, nanosleep) has moved the pc past it
            done_at = w.park is not None and w.park.advance and w.converged and w.pc > 0
            lines.append(f"  {w.name} at {w.prog.where(w.pc - 1) if done_at else w.where()}: {what}")
            shown += 1
            if shown >= 24:
                rest = sum(1 for x in self.warps if not x.done) - shown
                if rest > 0:
                    lines.append(f"  ... and {rest} more warps")
                break
        if self.clusters_waiting:
            lines.append(f"  {len(self.clusters_waiting)} cluster(s) not yet started")
        return "\n".join(lines)
