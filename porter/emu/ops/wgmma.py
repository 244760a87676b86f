"""Warpgroup MMA: wgmma.fence, wgmma.mma_async (SS and RS forms), commit_group and
wait_group (PTX ISA 9.7.15), on the decoders of ``porter.emu.units.wgmma``.

Each warp of the warpgroup computes its own 16 rows of D (the ISA's fragment layout
gives warp w rows 16w..16w+15, which depend only on A's same rows and all of B), but the
operation is the warpgroup's (PTX ISA 9.7.15: "executed by all the 128 threads of the
warpgroup collectively"; commit_group "creates a new wgmma-group per warpgroup"): a warp's
n-th mma_async starts once every warp of its warpgroup issued its n-th (the race detector
joins their clocks there), and the first wait_group that completes it completes its reads
for the whole warpgroup, so a thread that waited may refill the operands its sibling warps
read (fast.cu's kernels 2-3 reload A and B from thread 0 right after its own wait).

Asynchrony is modelled as the ISA allows: ``mma_async`` records its operands and joins
the warp's open group; ``commit_group`` closes the group; ``wait_group N`` completes all
but the N newest committed groups, in order. Until then the accumulator registers are
poisoned (any other instruction that reads or writes them is an error), and the shared
memory the operation reads is snapshotted at issue and compared at completion: if it
changed in between (a stage released before its wgmma finished), its accumulators hold
undefined values (``Undefined``). Where the reads end they are recorded again for the race
detector, as reads of the warp's ``CompletionAgent``, so a write that lands after completion
must still be ordered after a wait that completed the operation, not only after its issue.
"""

from __future__ import annotations

import functools
import re

import numpy as np

from porter.emu import ptx
from porter.emu.control import DEFER
from porter.emu.errors import CheckFailed
from porter.emu.ops.memory import async_read_clean, check_async_read_rows
from porter.emu.units import wgmma as unit

_SHAPE = re.compile(r"m64n(\d+)k(\d+)")
_ELEM_BITS = {"bf16": 16, "f16": 16, "tf32": 32, "e4m3": 8, "e5m2": 8, "s8": 8, "u8": 8}
_INT_TYPES = ("s8", "u8")
# PTX ISA 9.7.15.5.2 "wgmma.mma_async", its integer form: N of .m64nNk32 for .s32 D with .s8/.u8 inputs
_INT_N = (8, 16, 24) + tuple(range(32, 257, 16))


def _int_values(raw: np.ndarray, ty: str) -> np.ndarray:
    """8-bit integer operand bytes (rows, k) as int64 values (.s8 two's complement, .u8 as is)."""
    return (raw.view(np.int8) if ty == "s8" else raw).astype(np.int64)


@functools.lru_cache(maxsize=4096)
def _operand(desc: int, rows: int, k: int, elem_bits: int, mn_major: bool, smem_size: int, wq: int):
    """One operand's read, computed once per (descriptor, shape): its shared byte addresses
    (rows 16*wq.. of A for warp wq of the warpgroup; wq < 0: all of B), their [lo, hi) span
    the layout's warnings (rules the ISA does not state: see units.wgmma.operand_layout) and,
    when the bytes are whole 16-byte chunks (every canonical layout's are: the swizzle
    permutes chunks), the chunks' indices (``chunk_rows``), for the checkers' row paths."""
    addr, notes = unit.operand_layout(desc, rows, k, elem_bits, mn_major, "", smem_size)
    if wq >= 0:
        addr = addr[16 * wq:16 * (wq + 1)]
    addr = np.ascontiguousarray(addr)
    addr.flags.writeable = False
    distinct = not any(kind == "alias" for kind, _ in notes)
    return addr, int(addr.min()), int(addr.max()) + 1, notes, chunk_rows(addr, distinct)


_BOTH: dict = {}


def _both_rows(b_rows, a_rows):
    """B's and A's chunk rows as one array (None when either is not whole chunks), so an SS
    wgmma's two operand reads are checked in one pass: reads never race with reads and both
    store the same epoch and line, so one pass over both sets decides and stores as two do.
    Cached by the arrays' identity (``_operand``'s cached, read-only results; the entry holds
    them, so an id is not reused while its entry lives)."""
    if b_rows is None or a_rows is None:
        return None
    hit = _BOTH.get((id(b_rows), id(a_rows)))
    if hit is not None and hit[0] is b_rows and hit[1] is a_rows:
        return hit[2]
    rows = np.concatenate([b_rows, a_rows])
    rows.flags.writeable = False
    if len(_BOTH) > 4096:
        _BOTH.clear()
    _BOTH[(id(b_rows), id(a_rows))] = (b_rows, a_rows, rows)
    return rows


def chunk_rows(addr: np.ndarray, distinct: bool = False) -> np.ndarray | None:
    """The 16-byte chunks whose bytes are exactly the set of ``addr``'s (sorted chunk indices,
    read-only), or None when the bytes are not whole chunks. The checkers' decisions and their
    shadow updates depend only on that set (a finding is re-reported from ``addr`` itself, in
    its order), so the chunk rows can stand for it: a canonical K-major layout walks whole
    chunks, an MN-major one touches every byte of the chunks it reads. ``distinct``: no two
    elements of ``addr`` name one byte (then a count of bytes per chunk decides)."""
    flat = addr.reshape(-1)
    if distinct and flat.size:
        c0 = int(flat.min()) >> 4
        counts = np.bincount((flat >> 4) - c0)
        rows = np.flatnonzero(counts)
        if np.count_nonzero(counts[rows] != 16):
            return None
        rows += c0
    else:
        flat = np.unique(flat)
        rows = np.unique(flat // 16)
        if flat.size != 16 * rows.size:
            return None
    rows.flags.writeable = False
    return rows


def _checked_at_once(w, cta, rows: np.ndarray, race, line: int) -> bool:
    """Both operands' proxy and race checks in one pass over their chunk ``rows`` when neither
    finds anything (True: checked and stored); False, with nothing stored, when one would: the
    caller then checks operand by operand, so the first finding and its message are the same."""
    if not async_read_clean(cta, rows):
        return False
    if race is not None and not race.rows_quiet(cta, rows, w.aid, w.vc, False):
        return False
    if race is not None:
        race.store_rows(cta, rows, 16, w.aid, w.vc, False, line)
    return True


def _warn_layout(launch, where: str, which: str, notes) -> None:
    """The operand layout's findings that break no rule the PTX ISA states (isa_rules.WARNINGS),
    once per instruction, operand and kind (each stage's descriptor differs only in its start)."""
    for kind, what in notes:
        key = ("wgmma layout", where, which, kind)
        if kind == "alias":
            launch.warn_once(key, f"{where}: wgmma.mma_async {which}: {what} makes different operand elements read the "
                                  "same shared bytes")
        elif kind == "k-slice":
            launch.warn_once(key, f"{where}: wgmma.mma_async {which}: {what}: the K slice crosses its swizzle row; read "
                                  "where the layout's addresses continue, swizzled by their own address bits")
        else:
            launch.warn_once(key, f"{where}: wgmma.mma_async {which}: {what} starts inside its swizzle row; read where "
                                  "the layout's addresses continue, swizzled by their own address bits")


@functools.lru_cache(maxsize=64)
def _acc_index(n: int, wq: int) -> np.ndarray:
    """Flat index into warp wq's (16, n) D block of each accumulator register's lanes:
    int64 (n/2, 32), row j = register j (one gather/scatter moves every register)."""
    rows, cols = unit.accumulator_layout(n)
    idx = np.ascontiguousarray(((rows[32 * wq:32 * wq + 32] - 16 * wq) * n + cols[32 * wq:32 * wq + 32]).T)
    idx.flags.writeable = False
    return idx


@functools.lru_cache(maxsize=64)
def _a_lanes(k: int, elem_bits: int, wq: int):
    rows, cols = unit.a_fragment_layout(k, elem_bits)
    return rows[32 * wq:32 * wq + 32] - 16 * wq, cols[32 * wq:32 * wq + 32]


class Undefined(str):
    """The poison of accumulators computed from operand bytes that an unordered write changed
    while the wgmma read them. That is a data race, and the PTX memory model leaves the values
    such a read returns undefined (PTX ISA 8), so D holds undefined values; the ISA's wgmma rules
    (9.7.15 "wgmma.wait_group") restrict the accumulator and A-fragment registers, not these
    bytes. Reading such a register is an error naming the race (``Warp.poison_read``); writing
    it gives it a value (``Warp.poison_write``), and a wgmma that accumulates into it carries
    the poison on. DeepGEMM's BLOCK_M = 32 does this on purpose: its m64 wgmma reads A's rows
    32..63 from the next stage while the producer refills it, into accumulator rows (warps 2
    and 3) that it never reads."""
    cleared_by_write = True
    reason: str = ""


def _undefined_poison(reason: str) -> Undefined:
    mark = Undefined(f"which holds an undefined value: {reason}")
    mark.reason = reason
    return mark


class Watched(str):
    """The mark on a completed wgmma's accumulators until an instruction other than a wgmma
    reads them (``on_read``: the result was used) or writes them. ``lines``: the wgmma lines
    their values come from (an accumulation chain carries them on). A write that races with one
    of those wgmmas' operand reads after it completed (``_excuse``) makes them ``Undefined``
    while no instruction used them; once one did, the race is an error."""
    cleared_by_write = True
    lines: frozenset = frozenset()
    regs: tuple = ()

    def on_read(self, w, reg: int) -> None:
        """One read uses the result: every register of the operation loses the mark at once."""
        _state(w).consumed.update(self.lines)
        poisoned = w.poisoned
        for i in self.regs:
            if poisoned.get(i) is self:
                del poisoned[i]


def _watched(lines: frozenset, regs: tuple) -> Watched:
    mark = Watched("read by an instruction")
    mark.lines, mark.regs = lines, regs
    return mark


class CompletionAgent:
    """The completion of one warp's ``wgmma.mma_async`` operations, an agent of the race
    detector's own. The asynchronous operation may read its shared-memory operands at any time
    until it completes, and a thread learns that it completed only from a ``wgmma.wait_group``
    that covers it (PTX ISA 9.7.15 "wgmma.wait_group"); a write not ordered after such a wait
    can race with those reads (PTX ISA 8). So where the first wait of the warpgroup completes
    the operation, its reads are recorded again as reads of this agent, and every warp that
    completes the operation in its own wait acquires the agent's clock: a later write is
    ordered after the reads only through one of those waits, whatever order the run took."""

    def __init__(self, w):
        self.warp = w
        self.name = f"the wgmma.mma_async of {w.name} (its reads end at the wgmma.wait_group that completes it)"
        self.prog = w.prog
        self.vc = None
        self.b_spans: dict[int, tuple] = {}     # wgmma line -> [lo, hi) of the B it recorded last


def _completion_agent(w, race) -> CompletionAgent:
    a = w.units.get("wgmma_completion")
    if a is None:
        a = w.units["wgmma_completion"] = CompletionAgent(w)
        race.add_warp(a)
        race.grow()                       # every clock widens by the new agent; a.vc starts at 1
    return a


class WgmmaState:
    def __init__(self):
        self.open: list = []
        self.groups: list[list] = []
        self.refs: dict[int, int] = {}
        self.issued = 0
        # accumulator register -> why it holds undefined values, while a later operation on it
        # is still in flight (_write_back moves it into the warp's poison when the last ends)
        self.undefined: dict[int, str] = {}
        # accumulator registers (an operation's, as a tuple) -> the wgmma lines their in-flight
        # value comes from; the lines this warp's wgmmas were issued at; those whose results an
        # instruction used (Watched)
        self.provenance: dict[tuple, frozenset] = {}
        self.lines: set[int] = set()
        self.consumed: set[int] = set()


def _state(w) -> WgmmaState:
    st = w.units.get("wgmma")
    if st is None:
        st = w.units["wgmma"] = WgmmaState()
        w.units.setdefault("exit_checks", []).append(_exit_check)
        race = w.sched.race
        if race is not None and _excuse not in race.read_excuses:
            race.read_excuses.append(_excuse)
    return st


def _excuse(warp, line: int, offs: np.ndarray, writer: str) -> bool:
    """The race detector's hook: ``writer`` rewrote ``offs`` with nothing ordering it after the
    read ``warp`` made there at ``line``. When that read is a wgmma's operand read whose result
    no instruction has used, the race leaves that result undefined (PTX ISA 8): its
    accumulators, and those of the in-flight wgmmas accumulating onto them, become Undefined,
    and the race is no error here (True). A read recorded where it ended (``CompletionAgent``)
    speaks for its warp, and, for B's bytes, for every warp of the warpgroup: their D all
    depend on B, and B is recorded once for them."""
    if not isinstance(warp, CompletionAgent):
        return _excuse_warp(warp, line, offs, writer)
    lo, hi = warp.b_spans.get(line, (0, 0))
    if not ((offs >= lo) & (offs < hi)).any():
        return _excuse_warp(warp.warp, line, offs, writer)
    group = [x for x in _warpgroup(warp.warp) if line in _lines_of(x)]
    if any(line in x.units["wgmma"].consumed for x in group):
        return False
    for x in group:
        _excuse_warp(x, line, offs, writer)
    return bool(group)


def _warpgroup(w) -> list:
    """The four warps of ``w``'s warpgroup."""
    first = w.index - w.index % 4
    return w.cta.warps[first:first + 4]


def _lines_of(w) -> set:
    st = w.units.get("wgmma")
    return st.lines if st is not None else set()


def _excuse_warp(warp, line: int, offs: np.ndarray, writer: str) -> bool:
    st = warp.units.get("wgmma")
    if st is None or line not in st.lines or line in st.consumed:
        return False
    reason = (f"the wgmma.mma_async at line {line} ({warp.name}) read shared 0x{int(offs.min()):x}..0x"
              f"{int(offs.max()) + 1:x}, which {writer} rewrote with nothing ordering the two (its stage was "
              "released before the wait that covers it, or overwritten)")
    poison = _undefined_poison(reason)
    for i, mark in list(warp.poisoned.items()):
        if isinstance(mark, Watched) and line in mark.lines:
            warp.poisoned[i] = poison
    for key, lines in st.provenance.items():
        if line in lines:
            for i in key:
                st.undefined.setdefault(i, reason)
    warp.cta.launch.warn_once(("wgmma undefined", "race", line), lambda: (
        f"{warp.prog.where(_pc_of_line(warp.prog, line))}: {warp.name}: the accumulators of this wgmma.mma_async "
        f"hold undefined values: {reason}; the run goes on, and stops where an instruction reads them"))
    return True


def _pc_of_line(prog, line: int) -> int:
    return next((pc for pc, ins in enumerate(prog.kernel.code) if ins.line == line), -1)


def _exit_check(w) -> None:
    st = w.units.get("wgmma")
    if st and (st.open or st.groups):
        n = len(st.open) + sum(len(g) for g in st.groups)
        w.cta.launch.warn(f"{w.name} exits with {n} wgmma.mma_async operation(s) never waited for "
                          "(missing wgmma.commit_group / wgmma.wait_group)")


def _uniform(v, what: str, where: str, sel, full: bool = False) -> int:
    """The one value ``v`` holds across the lanes ``sel`` (an error if they differ). ``full``:
    every lane executes, so the 32 lanes' bytes are compared at once."""
    if full and type(v) is np.ndarray and v.shape == (32,):
        raw = v.tobytes()
        if raw == raw[:v.itemsize] * 32:
            return int(v[0])
    a = np.broadcast_to(np.asarray(v), (32,))[sel]
    if (a != a[0]).any():
        raise CheckFailed(f"{where}: {what} differs across the warp's lanes")
    return int(a[0])


def build_wgmma(ins, d):
    parts = ins.parts
    kind = parts[1]
    where = d.where(ins)
    if kind == "fence":
        def fence(w, m):
            if m is not None and not (m == w.live).all():
                return DEFER
        return fence
    if kind == "commit_group":
        def commit(w, m):
            if m is not None and not (m == w.live).all():
                return DEFER
            st = _state(w)
            st.groups.append(st.open)
            st.open = []
        return commit
    if kind == "wait_group":
        rn = d.src(ins.operands[0], "u32")

        def wait(w, m):
            if m is not None and not (m == w.live).all():
                return DEFER
            n = int(np.asarray(rn(w)).reshape(-1)[0])
            st = _state(w)
            ops = []
            while len(st.groups) > n:
                ops += st.groups.pop(0)
            carry = None
            for i, op in enumerate(ops):
                nxt = ops[i + 1].acc_key if i + 1 < len(ops) else None
                carry = op(w, carry, nxt)
        return wait
    if kind != "mma_async":
        raise d.unsupported()
    shape = next((p for p in parts if _SHAPE.fullmatch(p)), None)
    if shape is None:
        raise d.unsupported("(shape)")
    n, k = map(int, _SHAPE.fullmatch(shape).groups())
    # .satfinite: the integer form's qualifier, written before .s32 (the ISA's syntax) or after the types
    saturate = "satfinite" in parts
    types = [p for p in parts[parts.index(shape) + 1:] if p != "satfinite"]
    integer = len(types) == 3 and types[0] == "s32"
    if integer:
        if types[1] not in _INT_TYPES or types[2] not in _INT_TYPES:
            raise d.unsupported("(an .s32 accumulator takes .s8 or .u8 A and B; the .b1 form is not simulated)")
        if k != 32 or n not in _INT_N:
            raise d.unsupported(f"(shape {shape}: PTX ISA 9.7.15.5.2 \"wgmma.mma_async\" gives the integer form "
                                f"m64nNk32 with N in {', '.join(map(str, _INT_N))})")
    elif len(types) != 3 or types[0] not in ("f32", "f16") or types[1] not in _ELEM_BITS or types[2] not in _ELEM_BITS:
        raise d.unsupported("(only f32 or f16 accumulators with bf16/f16/tf32/e4m3/e5m2 inputs, or s32 with s8/u8)")
    elif saturate:
        raise d.unsupported("(.satfinite: PTX ISA 9.7.15.5.2 gives it to the integer form only)")
    elif types[1] in _INT_TYPES or types[2] in _INT_TYPES:
        raise d.unsupported("(.s8/.u8 inputs need an .s32 accumulator)")
    atype, btype = types[1], types[2]
    # PTX ISA 9.7.15 "wgmma.mma_async" (its type table): an .f16 D goes with .f16 or .e4m3/.e5m2 inputs only;
    # its D fragment holds the f32 layout's elements two to a register (low half first), N/4 registers
    half_d = types[0] == "f16"
    if half_d and atype not in ("f16", "e4m3", "e5m2"):
        raise d.unsupported(f"(an .f16 accumulator with .{atype} inputs: PTX ISA 9.7.15 \"wgmma.mma_async\" allows .f16 D only "
                            "with .f16 or .e4m3/.e5m2 A and B)")
    ea, eb = _ELEM_BITS[atype], _ELEM_BITS[btype]
    ops = ins.operands
    dvec = ops[0]
    n_regs = n // 4 if half_d else n // 2
    if not isinstance(dvec, ptx.Vec) or len(dvec.items) != n_regs:
        raise d.unsupported(f"(expected {n_regs} accumulator registers)")
    acc_ids = [d.rid(x) for x in dvec.items]
    acc_key = tuple(acc_ids)
    rs = isinstance(ops[1], ptx.Vec)
    if rs:
        a_ids = [d.rid(x) for x in ops[1].items]
        if len(a_ids) != 4:
            raise d.unsupported("(register A needs 4 registers)")
        ra = None
    else:
        ra = d.src(ops[1], "b64")
    rb = d.src(ops[2], "b64")
    rscale_d = d.src(ops[3], "pred")
    imm = [int(o.value) for o in ops[4:]]
    sixteen = ea == 16
    if integer:          # d, a, b-desc, scale-d: no scale or transpose immediates, both K-major
        if imm:
            raise d.unsupported("(immediate operands: the integer form takes none after scale-d)")
        scale_a = scale_b = 1
        tnsp_a = tnsp_b = 0
    elif rs:
        if len(imm) != (3 if sixteen else 2):
            raise d.unsupported("(immediate operands)")
        scale_a, scale_b = imm[0], imm[1]
        tnsp_a, tnsp_b = 0, (imm[2] if sixteen else 0)
    else:
        if len(imm) != (4 if sixteen else 2):
            raise d.unsupported("(immediate operands)")
        scale_a, scale_b = imm[0], imm[1]
        tnsp_a, tnsp_b = (imm[2], imm[3]) if sixteen else (0, 0)
    line = ins.line
    why = f"an accumulator of the wgmma.mma_async at line {line}, before the wgmma.wait_group that covers it"

    def mma_async(w, m):
        if m is not None and not (m == w.live).all():
            return DEFER
        sel = w.live
        wq = w.index % 4
        cta = w.cta
        smem = cta.smem.data
        size = smem.size
        launch = cta.launch
        full = w.full
        desc_b = _uniform(rb(w), "wgmma B descriptor", where, sel, full)
        b_addr, b_lo, b_hi, b_notes, b_rows = _operand(desc_b, n, k, eb, bool(tnsp_b), size, -1)
        b_raw = smem[b_addr]
        if b_notes:
            _warn_layout(launch, where, "B", b_notes)
        if rs:
            a_regs = np.array([w.r[i] for i in a_ids]).T               # (32, 4) uint32 snapshot
            a_addr = a_rows = None
            a_raw = None
        else:
            desc_a = _uniform(ra(w), "wgmma A descriptor", where, sel, full)
            a_addr, a_lo, a_hi, a_notes, a_rows = _operand(desc_a, 64, k, ea, bool(tnsp_a), size, wq)
            a_raw = smem[a_addr]
            if a_notes:
                _warn_layout(launch, where, "A", a_notes)
        scale_d = _uniform(rscale_d(w), "wgmma scale-d", where, sel, full)
        st = _state(w)
        race = w.sched.race
        what = f"the wgmma.mma_async at line {line} ({w.name})"
        taint: list = []                 # why this operation's D holds undefined values (Undefined)
        both = _both_rows(b_rows, a_rows) if a_addr is not None else None
        if both is None or not _checked_at_once(w, cta, both, race, line):
            for addr, chunks in ((b_addr, b_rows), (a_addr, a_rows)):
                if addr is not None:
                    check_async_read_rows(cta, addr, chunks, f"{where}: the wgmma.mma_async of {w.name}")
                    if race is None:
                        continue
                    try:
                        if chunks is not None:           # the same set of bytes, a row per chunk
                            race.check_rows(cta, chunks * 16, 16, w.aid, w.vc, False, line, w.name,
                                            "a wgmma operand", report=addr)
                        else:
                            race.access(w, cta, addr, False, line, "a wgmma operand")
                    except CheckFailed as race_found:     # the read races with a write: D is undefined
                        if not str(race_found).startswith("shared-memory race"):
                            raise
                        taint.append(f"{what} read shared memory as an unordered write changed it ({race_found})")
        # D = A.B + D reads D: an undefined D stays undefined, and the wgmma lines D's value comes
        # from (Watched, _excuse) carry on. An operation's accumulators are poisoned and written
        # together, so its first register speaks for them
        prior = w.poisoned.get(acc_ids[0]) if scale_d else None
        if isinstance(prior, Undefined) and not taint:
            taint.append(prior.reason)
        lines = None
        if scale_d:
            lines = prior.lines if isinstance(prior, Watched) else st.provenance.get(acc_key)
        if lines is None:
            lines = _one_line(line)
        elif line not in lines:
            lines = lines | {line}
        st.provenance[acc_key] = lines
        st.lines.add(line)
        seq = st.issued                  # this warp's n-th mma_async: the warpgroup's n-th operation
        token = object()
        agent = _completion_agent(w, race) if race is not None else None

        def taint_by(addr):
            """What an async write into [off, off + size) does to this read of ``addr``'s bytes."""
            def hit(off: int, size: int, writer: str) -> None:
                inside = (addr >= off) & (addr < off + size)
                if not inside.any():
                    return
                if not taint:
                    got = addr[inside]
                    taint.append(f"{what} read shared 0x{int(got.min()):x}..0x{int(got.max()) + 1:x} while "
                                 f"{writer} rewrote it, before the wgmma.wait_group that covers it (its stage was "
                                 "released before the wait that covers it, or overwritten)")
                if race is not None:             # the read is now this poison, not a race to report
                    race.forget_reads(cta, addr[inside], w.aid, line)
            return hit
        keys = [(id(token), 0)]
        cta.inflight_reads[keys[0]] = (b_lo, b_hi, what, taint_by(b_addr))
        if a_addr is not None:
            keys.append((id(token), 1))
            cta.inflight_reads[keys[1]] = (a_lo, a_hi, what, taint_by(a_addr))
        refs = st.refs
        for i in acc_ids:
            refs[i] = refs.get(i, 0) + 1
        w.poisoned.update(dict.fromkeys(acc_ids, why))
        w.sched.counters["wgmma"] += 1
        st.issued += 1

        def reads_done(who, now: dict):
            """The operation's reads end: its operands must still hold what it read at issue.
            ``now``: the operand bytes as they are, by address array, gathered once for the
            warpgroup's operations that end together (its warps read one B)."""
            for key in keys:
                cta.inflight_reads.pop(key, None)
            b_now = now.get(id(b_addr))
            if b_now is None or b_now[0] is not b_addr:
                b_now = now[id(b_addr)] = (b_addr, smem[b_addr])
            if taint:
                return
            if not np.array_equal(b_now[1], b_raw) or (a_addr is not None and not np.array_equal(smem[a_addr], a_raw)):
                taint.append(f"the shared memory {what} reads changed before the wgmma.wait_group that covers it "
                             "(its stage was released before the wait that covers it, or overwritten)")
                return
            if agent is not None:            # the reads end here: a later write must be ordered after this wait
                agent.vc = race._fit(agent.vc)
                agent.vc[agent.aid] += 1
                recorded = now.setdefault("B recorded", set())
                if id(b_addr) not in recorded:   # B once for the warpgroup (every warp that completes acquires all)
                    recorded.add(id(b_addr))
                    race.record_read(cta, agent.aid, agent.vc, line, b_addr, b_rows)
                    agent.b_spans[line] = (b_lo, b_hi)
                if a_addr is not None:
                    race.record_read(cta, agent.aid, agent.vc, line, a_addr, a_rows)
                group.setdefault("epochs", {})[agent.aid] = int(agent.vc[agent.aid])

        group = _collective(cta, w.index // 4, seq)
        group["reads"].append(reads_done)

        def _complete_int(w, avals, bvals, idx, accumulate: bool, saturate: bool) -> None:
            """The integer form: exact int64 products and sums, D = A.B^T (+ D), then wrapped
            modulo 2^32 or, with .satfinite, clamped to the .s32 range (as integer mma.sync)."""
            res = avals @ bvals.T                                        # (16, n) int64, exact
            if accumulate:
                cur = np.array([w.r[i] for i in acc_ids]).astype(np.uint32).view(np.int32)   # (regs, 32)
                dmat = np.zeros(16 * n, dtype=np.int64)
                dmat[idx] = cur
                res = res + dmat.reshape(16, n)
            if saturate:
                res = np.clip(res, -(1 << 31), (1 << 31) - 1)
            out = np.ascontiguousarray(res.reshape(-1)[idx].astype(np.uint32))   # wraps modulo 2^32
            _write_back(w, st, acc_ids, acc_key, out, _undefined(w, st, acc_ids, bool(scale_d), taint, where))

        def complete(w, carry=None, next_key=None):
            """Complete the operation. ``carry``: (accumulator key, D as float32 (16, n)) of the
            operation completed just before in the same wait_group, whose registers were left
            unwritten when they are this one's (its D is read from there: the same float32
            values); ``next_key``: the next one's key there (this one then leaves them so).
            Returns this one's carry."""
            now: dict = {}
            for done in group["reads"]:      # the first wait of the warpgroup ends every warp's reads
                done(w.name, now)
            group["reads"].clear()
            if "epochs" in group:            # completing the operation orders this warp after its reads
                race.learn(w, group["epochs"])
            # B's values, decoded once for the warpgroup's operation: its warps' snapshots of one
            # B are equal once the reads above passed (each was compared with the bytes as they are)
            decoded = group.setdefault("b_values", {})
            hit = decoded.get((id(b_addr), btype))
            if hit is None or hit[0] is not b_addr:
                b_mat = b_raw.reshape(n, -1)
                values = _int_values(b_mat, btype) if integer else unit.decode_values(b_mat, btype)
                hit = decoded[(id(b_addr), btype)] = (b_addr, values)
            bvals = hit[1]
            if rs:
                rows, cols = _a_lanes(k, ea, wq)
                per = 32 // ea
                lanes = a_regs.astype(np.uint32)
                if ea == 16:
                    pieces = np.stack([lanes & 0xFFFF, lanes >> 16], axis=2).astype(np.uint16)
                else:
                    pieces = np.stack([(lanes >> (8 * e)) & 0xFF for e in range(per)], axis=2).astype(np.uint8)
                amat_raw = np.zeros((16, k), dtype=pieces.dtype)
                amat_raw[rows, cols] = pieces
                a_mat = amat_raw.view(np.uint8).reshape(16, -1)
            else:
                a_mat = a_raw.reshape(16, -1)
            idx = _acc_index(n, wq)
            if integer:
                _complete_int(w, _int_values(a_mat, atype), bvals, idx, bool(scale_d), saturate)
                return None
            avals = unit.decode_values(a_mat, atype)
            dmat = None
            if scale_d and carry is not None and carry[0] == acc_key:
                dmat = carry[1]
            elif scale_d:
                cur = np.array([w.r[i] for i in acc_ids]).astype(np.uint32)     # (regs, 32)
                if half_d:       # register r: elements 2r (bits 0-15) and 2r+1 (bits 16-31)
                    cur = np.stack([cur & 0xFFFF, cur >> 16], axis=1).reshape(n // 2, 32)
                    cur = cur.astype(np.uint16).view(np.float16).astype(np.float32)
                else:
                    cur = cur.view(np.float32)
                dmat = np.zeros(16 * n, dtype=np.float32)
                dmat[idx] = cur
                dmat = dmat.reshape(16, n)
            res = unit.mma(avals, bvals, dmat, scale_a, scale_b)
            keep = not half_d and next_key == acc_key       # the next operation reads D from the carry
            if keep:
                out = None
            elif half_d:
                h = res.reshape(-1)[idx].astype(np.float16).view(np.uint16).astype(np.uint32)   # (n/2, 32)
                out = np.ascontiguousarray(h[0::2] | (h[1::2] << 16))
            else:
                out = res.reshape(-1)[idx].view(np.uint32)            # (n/2, 32): row j = register j, contiguous
            _write_back(w, st, acc_ids, acc_key, out, _undefined(w, st, acc_ids, bool(scale_d), taint, where))
            return None if half_d else (acc_key, res)

        complete.acc_key = None if integer else acc_key      # (integer D is never carried)
        st.open.append(complete)
        return _rendezvous(w, group, where)
    mma_async.n_dst = 0
    return mma_async


def _undefined(w, st, acc_ids, reads_d: bool, taint: list, where: str) -> str | None:
    """Why the completing operation's D holds undefined values (None: it does not): its own
    operand race (one warning per instruction), or an undefined D it accumulates into, left
    by an earlier operation of the same wait (``st.undefined``)."""
    if taint:
        w.cta.launch.warn_once(("wgmma undefined", where), lambda: (
            f"{where}: {w.name}: the accumulators of this wgmma.mma_async hold undefined values: {taint[0]}; the run "
            "goes on, and stops where an instruction reads them"))
        return taint[0]
    if reads_d and st.undefined:
        return next((st.undefined[i] for i in acc_ids if i in st.undefined), None)
    return None


@functools.lru_cache(maxsize=1024)
def _one_line(line: int) -> frozenset:
    return frozenset((line,))


def _write_back(w, st, acc_ids, acc_key, out, undefined: str | None = None) -> None:
    """The completed operation's accumulators: row j of ``out`` (None: left for the next
    operation's carry) into register j, and the registers released from its poison, or, when
    ``undefined`` says why D holds undefined values, poisoned with that (``Undefined``)."""
    regs, refs, poisoned = w.r, st.refs, w.poisoned
    mark = lines = None
    first = True
    for j, i in enumerate(acc_ids):
        if out is not None:
            regs[i] = out[j]            # a row: contiguous, never written in place
        left = refs[i] - 1
        if left:                        # a later operation on it is in flight: it decides at its end
            refs[i] = left
            if undefined is not None:
                st.undefined[i] = undefined
            elif st.undefined:
                st.undefined.pop(i, None)
        else:
            del refs[i]
            if st.undefined:
                st.undefined.pop(i, None)
            if first:                    # the operation's lines, unless a later one on it took the key
                first = False
                lines = st.provenance.pop(acc_key, None)
            if undefined is not None:
                if mark is None:
                    mark = _undefined_poison(undefined)
                poisoned[i] = mark
            elif lines is not None:      # until an instruction uses (or overwrites) it: _excuse
                if mark is None or mark.lines is not lines:
                    mark = _watched(lines, tuple(acc_ids))
                poisoned[i] = mark
            else:
                poisoned.pop(i, None)


def _collective(cta, wg: int, seq: int) -> dict:
    """The warpgroup ``wg``'s ``seq``-th wgmma.mma_async: its warps' arrivals and pending reads."""
    table = cta.__dict__.setdefault("wgmma_collective", {})
    group = table.get((wg, seq))
    if group is None:
        group = table[(wg, seq)] = {"arrived": 0, "reads": []}
        table.pop((wg, seq - 2), None)      # two behind: every warp has passed that rendezvous
    return group


def _rendezvous(w, group: dict, where: str):
    """Issue done; the warp waits until every warp of its warpgroup issued the same operation
    (the race detector joins their clocks, as at a barrier)."""
    from porter.emu.control import Park

    need = sum(1 for x in _warpgroup(w) if not x.done)
    race = w.sched.race
    group["arrived"] += 1
    if race is not None:
        race.release(w, group.setdefault("clock", _Holder()))
    if group["arrived"] >= need:
        if race is not None:
            race.publish(group["clock"], 0)
        group["passed"] = True
    acquired = []

    def ready() -> bool:
        if not group.get("passed"):
            return False
        if race is not None and not acquired:
            race.acquire(w, group["clock"], 0)
            acquired.append(True)
        return True
    if ready():
        return None
    return Park(ready, lambda: f"{where}: wgmma.mma_async waits for the other warps of warpgroup {w.index // 4} "
                               f"({group['arrived']} of {need} issued it)", advance=True)


class _Holder:
    """What the race detector's release / publish / acquire keep their clocks on."""


build_wgmma.n_dst = 99          # accumulators are read and written by the wgmma itself

BUILDERS = {"wgmma": build_wgmma}
