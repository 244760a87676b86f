"""Front end, part 2: decode each parsed instruction once into a function that runs it.

A decoded instruction is ``fn(warp, mask)``: ``mask`` is None when every lane of the
warp is live and converged, else a boolean array of the 32 lanes that execute it. It
returns None to fall through to the next instruction, or one of the control results
in ``porter.emu.control`` (a branch target, a park with a wake condition, a deferral
until the warp converges, an exit). Operand readers and register writers are built
here, once, so the hot loop does no string work.

Registers are stored as raw bits, one numpy array of 32 lanes each: ``.pred`` as bool,
16/32/64-bit registers as uint16/uint32/uint64. An instruction reads a register as its
own type (a free ``view`` when the widths agree; truncation or zero/sign extension as the
ISA's operand-size rules say when they do not).

A form the simulator does not implement raises ``Unsupported`` naming the PTX file,
line and form: never a silent skip.
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.errors import Unsupported
from porter.emu.memory import SHARED_RESERVED

NP = {"pred": np.bool_, "b8": np.uint8, "u8": np.uint8, "s8": np.int8,
      "b16": np.uint16, "u16": np.uint16, "s16": np.int16, "f16": np.float16,
      "b32": np.uint32, "u32": np.uint32, "s32": np.int32, "f32": np.float32,
      "b64": np.uint64, "u64": np.uint64, "s64": np.int64, "f64": np.float64,
      "bf16": np.uint16, "bf16x2": np.uint32, "f16x2": np.uint32, "tf32": np.uint32,
      "b128": np.dtype("V16")}
# .b128 registers (PTX ISA 8.3+: clusterlaunchcontrol responses, ld/st.b128) are 16 raw bytes a lane
STORE = {1: np.bool_, 8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64, 128: np.dtype("V16")}
UINT = {8: np.uint8, 16: np.uint16, 32: np.uint32, 64: np.uint64, 128: np.dtype("V16")}
SINT = {8: np.int8, 16: np.int16, 32: np.int32, 64: np.int64}

TYPES = set(NP)


def bits(t: str) -> int:
    return ptx.TYPE_BITS[t]


def is_signed(t: str) -> bool:
    return t[0] == "s"


def is_float(t: str) -> bool:
    return t[0] == "f"


def type_of(parts: list[str]) -> str:
    """The last type suffix of an opcode (``add.s32`` -> s32)."""
    for p in reversed(parts):
        if p in TYPES:
            return p
    raise KeyError


def scalar(op):
    """A one-element vector ``{%r}`` where a scalar operand belongs is that scalar (ptxas
    accepts it; inline asm with one output in braces gives it)."""
    if isinstance(op, ptx.Vec) and len(op.items) == 1:
        return op.items[0]
    return op


class Decoder:
    """Builds operand accessors for one kernel; ``build(instr)`` returns its function."""

    def __init__(self, kernel: ptx.Kernel, layout, file: str):
        self.kernel = kernel
        self.layout = layout           # porter.emu.machine.KernelLayout: symbols -> addresses
        self.file = file
        self.reg_index = {name: i for i, name in enumerate(kernel.regs)}
        self.reg_bits = [max(bits(t), 1) if t != "pred" else 1 for t in kernel.regs.values()]
        self.ins: ptx.Instr | None = None

    # ---- errors ------------------------------------------------------------------------------
    def where(self, ins: ptx.Instr | None = None) -> str:
        ins = ins or self.ins
        return f"{self.file}:{ins.line}" if ins else self.file

    def unsupported(self, what: str = "") -> Unsupported:
        ins = self.ins
        form = ins.opcode if ins else "?"
        return Unsupported(f"{self.where()}: PTX form `{form}`{' ' + what if what else ''} is outside the "
                           "simulator's subset (see the README's 'Emulation' section)")

    # ---- registers -----------------------------------------------------------------------------
    def rid(self, op) -> int:
        op = scalar(op)
        if not isinstance(op, ptx.Reg):
            raise self.unsupported(f"(operand {op!r} must be a register)")
        if op.name not in self.reg_index:
            raise self.unsupported(f"(register {op.name} is not declared)")
        return self.reg_index[op.name]

    def is_reg(self, op) -> bool:
        return isinstance(op, ptx.Reg) and op.name in self.reg_index

    def src(self, op, t: str):
        """fn(warp) -> the operand's 32 lane values as numpy type ``t`` (or a numpy scalar)."""
        dt = NP[t]
        op = scalar(op)
        if isinstance(op, ptx.Not):
            return self._negated(op, t)
        if isinstance(op, ptx.Reg):
            if op.name in self.reg_index:
                i = self.reg_index[op.name]
                sb = self.reg_bits[i]
                tb = 1 if t == "pred" else bits(t)
                if sb == tb:
                    if t == "pred" or dt == STORE[sb]:
                        return lambda w: w.r[i]
                    return lambda w: w.r[i].view(dt)
                if t == "pred" or sb == 1:
                    raise self.unsupported(f"(register {op.name} used as {t})")
                if sb > tb:                                  # truncate
                    u = UINT[tb]
                    return lambda w: w.r[i].astype(u).view(dt)
                ext = SINT[sb] if is_signed(t) else UINT[sb]  # zero/sign extend
                wide = SINT[tb] if is_signed(t) else UINT[tb]
                return lambda w: w.r[i].view(ext).astype(wide).view(dt)
            return self.special(op.name, t)
        if isinstance(op, ptx.Imm):
            return self._imm(op, t)
        if isinstance(op, ptx.Sym) and op.name == "WARP_SZ":     # PTX ISA 4.4 predefined identifier: 32
            return self._imm(ptx.Imm(32), t)
        if isinstance(op, ptx.Sym) and self.kernel.local:
            from porter.emu.ops.local import symbol_reader     # (a thread's .local variable: its own address)
            read = symbol_reader(self.kernel, op.name, t)
            if read is not None:
                return read
        linked = getattr(self.kernel, "link", None)
        if isinstance(op, ptx.Sym) and linked is not None and op.name in linked.funcs:
            val = np.array(linked.address_of(op.name)).astype(dt)     # a function's address (link.py)
            return lambda w: val
        if isinstance(op, ptx.Sym):
            space, addr = self.layout.symbol_address(op.name, self)
            val = np.array(addr).astype(dt)
            if space == "shared":       # a CTA's shared addresses carry its cluster rank (memory.py)
                return lambda w: (val + w.cta.smem.base).astype(dt) if w.cta.smem.base else val
            return lambda w: val
        raise self.unsupported(f"(operand {op!r} as a {t} source)")

    def _negated(self, op: ptx.Not, t: str):
        """``!%p`` read as a .pred source: the register's complement (built once; the plain
        register read is the fast case, so this costs only the instructions that use it)."""
        name = op.reg.name
        i = self.reg_index.get(name)
        if t != "pred":
            raise self.unsupported(f"(!{name} read as a .{t} operand: ptxas takes a negated predicate only where "
                                   "a .pred source is read)")
        if i is None or self.reg_bits[i] != 1:
            raise self.unsupported(f"(a negated operand !{name} must be a .pred register: ptxas refuses "
                                   "'Illegal argument to predicate negation')")
        return lambda w: ~w.r[i]

    def _imm(self, op: ptx.Imm, t: str):
        dt = NP[t]
        v = op.value
        raw = _hex_float_bits(op.text)
        if raw is not None and raw[0] == bits(t) and t != "pred":
            # a hex float immediate (0fXXXXXXXX / 0dXXXXXXXXXXXXXXXX) of the operand's width is
            # its bit pattern exactly: through a Python float an sNaN would come back quieted
            val = np.array(raw[1], dtype=UINT[raw[0]]).view(dt)[()]
            return lambda w: val
        if t == "pred":
            val = np.bool_(bool(v))
        elif op.is_float and not is_float(t):
            # a hex float immediate in an integer/bit instruction is that float's bit pattern
            val = (np.array(v, dtype=np.float32).view(np.uint32) if bits(t) == 32
                   else np.array(v, dtype=np.float64).view(np.uint64)).astype(dt)
        elif is_float(t):
            val = dt(v)
        else:
            val = np.array(int(v) & ((1 << bits(t)) - 1), dtype=UINT[bits(t)]).view(dt)[()]
        val = dt(val) if t != "pred" else val
        return lambda w: val

    def special(self, name: str, t: str):
        dt = NP[t]
        key = name.lstrip("%")
        if key in ("globaltimer", "globaltimer_lo", "clock", "clock64"):
            shift = 0
            return lambda w: np.full(32, w.sched.now_ns() >> shift, dtype=np.uint64).astype(dt)
        if key in SMEM_SIZE_REGS:
            return _smem_size_reader(key, dt)
        if key == "current_graph_exec":       # 0: a kernel not launched from a CUDA graph (PTX ISA 10.33)
            zero = np.zeros(32, dtype=dt)
            return lambda w: zero
        if key not in SPECIAL_REGS:
            raise self.unsupported(f"(special register %{key})")
        return lambda w: w.special[key].astype(dt, copy=False)

    def dst(self, op, t: str):
        """fn(warp, values (array or scalar of type t), mask) storing into the register."""
        op = scalar(op)
        if op is ptx.SINK or (isinstance(op, ptx.Sym) and op.name == "_"):
            return lambda w, v, m: None
        if isinstance(op, ptx.Not):
            raise self.unsupported(f"(!{op.reg.name} as a destination: a negated predicate is a source operand "
                                   "only; ptxas refuses it)")
        i = self.rid(op)
        sb = self.reg_bits[i]
        tb = 1 if t == "pred" else bits(t)
        store = STORE[sb]
        if (t == "pred") != (sb == 1):
            raise self.unsupported(f"(register {op.name} written as {t})")
        dt = np.dtype(np.bool_ if t == "pred" else NP[t])
        store = np.dtype(store)
        if t == "pred" or sb == tb:
            if dt == store:
                def conv(v):
                    return v
            else:
                def conv(v):
                    return v.view(store)
        else:
            src_int = SINT[tb] if is_signed(t) else UINT[tb]

            def conv(v):
                return v.view(src_int).astype(store)
        same = dt == store and (t == "pred" or sb == tb)

        # Register arrays are never changed in place (every write stores a new array), so a
        # register may share an array with another without aliasing trouble. A 32-lane array
        # of the instruction's type (the usual result) skips the normalisation: asarray of
        # it is itself, and conv(v) is v itself when the storage type is the same.
        def write(w, v, m):
            if w.poisoned and i in w.poisoned:
                w.poison_write(i)
            if type(v) is not np.ndarray or v.dtype is not dt or v.ndim == 0:
                v = np.asarray(v, dtype=dt)
                if v.ndim == 0:                     # empty + fill: a sixth of np.full's cost
                    x = np.empty(32, dtype=dt)
                    x.fill(v)
                    v = x
            if not same:
                v = conv(v)
            w.r[i] = v if m is None else np.where(m, v, w.r[i])
        return write

    def addr(self, op, default_space: str):
        """fn(warp) -> per-lane int64 addresses of an ``[base+offset]`` operand, and the space
        a symbol base implies (None for a register base)."""
        if not isinstance(op, ptx.Addr):
            raise self.unsupported(f"(expected an address operand, got {op!r})")
        off = op.offset
        if op.base is None:
            return (lambda w: np.full(32, off, dtype=np.int64)), None
        if isinstance(op.base, ptx.Sym) and self.kernel.local:
            from porter.emu.ops.local import symbol_reader
            read = symbol_reader(self.kernel, op.base.name, "s64")
            if read is not None:
                o = np.int64(off)
                return (lambda w: read(w) + o), "local"
        if isinstance(op.base, ptx.Sym):
            space, base = self.layout.symbol_address(op.base.name, self)
            val = np.full(32, base + off, dtype=np.int64)
            if space == "shared":
                return (lambda w: val + w.cta.smem.base if w.cta.smem.base else val), space
            return (lambda w: val), space
        i = self.rid(op.base)
        sb = self.reg_bits[i]
        if sb == 64:
            if off:
                o = np.int64(off)
                return (lambda w: w.r[i].view(np.int64) + o), None
            return (lambda w: w.r[i].view(np.int64)), None
        if sb == 32:
            o = np.int64(off)
            return (lambda w: w.r[i].astype(np.int64) + o), None
        raise self.unsupported(f"(address register {op.base.name} of {sb} bits)")

    def label(self, op) -> int:
        if not isinstance(op, ptx.Sym) or op.name not in self.kernel.labels:
            raise self.unsupported(f"(branch target {op!r} is not a label of {self.kernel.name})")
        return self.kernel.labels[op.name]

    def regs_of(self, op) -> list[int]:
        """Register ids an operand reads (for the poison checker)."""
        if isinstance(op, ptx.Reg) and op.name in self.reg_index:
            return [self.reg_index[op.name]]
        if isinstance(op, ptx.Not):
            return self.regs_of(op.reg)
        if isinstance(op, ptx.Vec):
            return [r for x in op.items for r in self.regs_of(x)]
        if isinstance(op, ptx.Addr) and isinstance(op.base, ptx.Reg):
            return self.regs_of(op.base)
        if isinstance(op, ptx.TmaAddr):
            return self.regs_of(op.map) + [r for c in op.coords for r in self.regs_of(c)]
        if isinstance(op, ptx.Pair):
            return self.regs_of(op.first) + self.regs_of(op.second)
        return []


# PTX ISA 10.30 %total_smem_size: the CTA's static + dynamic shared memory, excluding the
# reserved region, "in multiples of the shared memory allocation unit" (128 bytes on sm_8x,
# sm_9x, sm_10x, sm_12x); 10.31 %aggr_smem_size (sm_90+): that plus the reserved region.
SMEM_UNIT = 128
SMEM_SIZE_REGS = {"total_smem_size", "aggr_smem_size"}


def _smem_size_reader(key: str, dt):
    extra = np.uint32(SHARED_RESERVED if key == "aggr_smem_size" else 0)
    unit = np.uint32(SMEM_UNIT)

    def read(w):                  # the machine's %total_smem_size is the exact byte count: round it up
        user = w.special["total_smem_size"]
        return ((user + (unit - 1)) // unit * unit + extra).astype(dt, copy=False)
    return read


SPECIAL_REGS = {"tid.x", "tid.y", "tid.z", "ntid.x", "ntid.y", "ntid.z", "ctaid.x", "ctaid.y", "ctaid.z",
                "nctaid.x", "nctaid.y", "nctaid.z", "laneid", "warpid", "nwarpid", "cluster_ctarank",
                "cluster_nctarank", "cluster_ctaid.x", "cluster_ctaid.y", "cluster_ctaid.z",
                "cluster_nctaid.x", "cluster_nctaid.y", "cluster_nctaid.z", "clusterid.x", "clusterid.y",
                "clusterid.z", "nclusterid.x", "nclusterid.y", "nclusterid.z", "is_explicit_cluster",
                "smid", "nsmid", "lanemask_eq", "lanemask_lt", "lanemask_le", "lanemask_gt", "lanemask_ge",
                "dynamic_smem_size", "total_smem_size"}


def _hex_float_bits(text: str):
    """(width, bit pattern) of a PTX hex float immediate's text (``0f``: 32 bits, ``0d``: 64;
    a leading '-' flips the sign bit), or None for any other immediate."""
    neg = text.startswith("-")
    body = text[1:] if neg else text
    if len(body) < 3 or body[0] != "0" or body[1] not in "fFdD":
        return None
    width = 32 if body[1] in "fF" else 64
    try:
        value = int(body[2:], 16)
    except ValueError:
        return None
    return width, value ^ ((1 << (width - 1)) if neg else 0)
