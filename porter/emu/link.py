"""Linking ``.func`` device functions into the kernel that calls them (PTX ISA 9.7.12.5 "call",
9.7.12.6 "ret"; 11.1 "Function declarations and definitions").

A kernel's program is its own code followed by the code of every ``.func`` it can reach through
direct calls, each function once. PTX gives every function its own register namespace, so the
linker renames a function's registers (``%r1`` of ``f`` becomes ``%r1@f``: ``@`` cannot occur in
a PTX name), and its labels, ``.local`` and ``.shared`` variables the same way; a callee never
clobbers its caller. A function's formal and return parameters are registers of its namespace
(the parser turns ``ld.param``/``st.param`` on them into moves).

At run time (``porter.emu.ops.call``) a call copies the actual arguments into the callee's
parameter registers, pushes the call site's return pc on a per-lane call stack of the warp and
jumps to the callee's entry; ``ret`` in a function pops each lane's return pc, copies the return
values into the registers the call site names, and sends the lanes back (lanes of one group that
came from different call sites split there). A function that can reach itself (recursion) saves
its registers per lane and call depth on entry and restores them on return, as each activation
of a PTX function has its own registers.

After the kernel and after each function the linker places an end marker, so a body that falls
off its end stops with one line instead of running into the next function.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

from porter.emu import ptx
from porter.emu.errors import Unsupported

# Nested calls a lane may have open at once: the device's stack (cudaLimitStackSize, 1 KiB per
# thread by default) holds far fewer frames of any real function; past this it is runaway recursion.
CALL_DEPTH_LIMIT = 1024
END = "end#"          # the end marker's opcode (no PTX opcode contains '#')
RUNTIME = {"vprintf", "__assertfail"}     # device-runtime functions ops/call.py runs natively


@dataclass
class FuncInfo:
    name: str
    entry: int                                 # pc of its first instruction in the linked code
    # (register, type, bytes) of each formal / return parameter; bytes is None for a scalar, the
    # size of a byte-array aggregate (held in b8 registers ``ptx.byte_regs(register, bytes)``)
    params: list[tuple[str, str, int | None]]
    rets: list[tuple[str, str, int | None]]
    regs: list[str]                            # every register of its namespace (renamed)
    recursive: bool = False
    line: int = 0
    local: tuple = ()                          # its .local variables (renamed): one frame per activation


@dataclass
class Site:
    """A call instruction: its return pc (the pc after it), callee and the caller's return operands."""
    ret_pc: int
    callee: str
    rets: tuple
    line: int


@dataclass
class Linked:
    funcs: dict[str, FuncInfo] = field(default_factory=dict)
    sites: dict[int, Site] = field(default_factory=dict)
    limit: int = CALL_DEPTH_LIMIT
    indirect: dict[int, list[Site]] = field(default_factory=dict)   # return pc -> a site per candidate
    addresses: dict[int, str] = field(default_factory=dict)         # function address -> name

    def address_of(self, name: str) -> int:
        return FUNC_BASE + FUNC_STEP * list(self.funcs).index(name)


def _callee(ins: ptx.Instr) -> str | None:
    if ins.opcode.split(".", 1)[0] != "call":
        return None
    fn = ins.operands[1]
    return fn.name if isinstance(fn, ptx.Sym) else None


def _syms(op):
    if isinstance(op, ptx.Sym):
        yield op.name
    elif isinstance(op, ptx.Vec):
        for x in op.items:
            yield from _syms(x)


def _reachable(module: ptx.Module, kernel: ptx.Kernel) -> list[str]:
    """The module's functions the kernel can call, directly, through others or through an
    address it takes (``mov.u64 %rd, f``: an indirect call's target), in first-use order."""
    order, seen, todo = [], set(), [kernel]
    while todo:
        k = todo.pop(0)
        for ins in k.code:
            for name in (n for op in ins.operands for n in _syms(op)):
                if name in module.funcs and name not in seen:
                    seen.add(name)
                    order.append(name)
                    todo.append(module.funcs[name])
    return order


# Function addresses (``mov.u64 %rd, f``): a window no memory allocation reaches, FUNC_STEP
# apart in the order the functions are linked.
FUNC_BASE = 0x7E00_0000_0000
FUNC_STEP = 0x100


def _recursive(module: ptx.Module, names: list[str]) -> set[str]:
    """The functions that can reach themselves through calls."""
    calls = {n: {c for c in map(_callee, module.funcs[n].code) if c in module.funcs} for n in names}
    out = set()
    for n in names:
        seen, todo = set(), list(calls[n])
        while todo:
            c = todo.pop()
            if c == n:
                out.add(n)
                break
            if c not in seen:
                seen.add(c)
                todo.extend(calls.get(c, ()))
    return out


_ADDRESS_OPS = ("mov", "cvta", "add", "sub", "cvt", "mad", "and", "or", "xor", "selp", "mul")


def _local_escape(f: ptx.Func) -> int | None:
    """The line of the first place where ``f`` lets the address of one of its own ``.local``
    variables out of the activation (stores it anywhere, st.param of a call argument or a
    return value included), or None. Flow-insensitive: a register that ever holds such an
    address (the symbol, or arithmetic on a register that does) counts everywhere."""
    names = {v.name for v in f.local}

    def refs(op, tainted) -> bool:
        if isinstance(op, ptx.Sym):
            return op.name in names
        if isinstance(op, ptx.Reg):
            return op.name in tainted
        if isinstance(op, ptx.Addr):
            return refs(op.base, tainted) if op.base is not None else False
        if isinstance(op, ptx.Vec):
            return any(refs(x, tainted) for x in op.items)
        return False

    tainted: set[str] = set()
    changed = True
    while changed:
        changed = False
        for ins in f.code:
            head = ins.opcode.split(".", 1)[0]
            if head not in _ADDRESS_OPS or not ins.operands or not isinstance(ins.operands[0], ptx.Reg):
                continue
            # mov.u64 %rd, __local_depot (a symbol), or arithmetic on a register holding such an address
            srcs = [op for op in ins.operands[1:] if not isinstance(op, ptx.Addr)]
            if ins.operands[0].name not in tainted and any(refs(op, tainted) for op in srcs):
                tainted.add(ins.operands[0].name)
                changed = True
    rets = {p.name for p in f.rets}
    for ins in f.code:
        head = ins.opcode.split(".", 1)[0]
        if head == "st" and len(ins.operands) > 1 and refs(ins.operands[1], tainted) and \
                not isinstance(ins.operands[1], ptx.Addr):
            return ins.line
        # a call argument (the parser turns the .param slots into registers) or a return value
        if head == "call" and any(refs(op, tainted) for op in ins.operands[2:]):
            return ins.line
        if head in _ADDRESS_OPS and ins.operands and isinstance(ins.operands[0], ptx.Reg) and \
                ins.operands[0].name in rets and ins.operands[0].name in tainted:
            return ins.line
        if head in ("atom", "red", "st.async") and any(refs(op, tainted) for op in ins.operands[1:]
                                                        if not isinstance(op, ptx.Addr)):
            return ins.line
    return None


def _renamer(f: ptx.Func):
    suffix = "@" + f.name
    aggs = getattr(f, "aggregates", {})
    regs = set(f.regs) | set(aggs)
    syms = set(f.labels) | set(f.branch_tables) | {v.name for v in f.local} | {v.name for v in f.shared}

    def reg(name: str) -> str:
        """f's register ``name`` renamed (an aggregate's byte ``A+k`` becomes ``A@f+k``, so that
        ``ptx.byte_regs`` of the renamed aggregate names it)."""
        head, plus, k = name.rpartition("+")
        if plus and head in aggs:
            return f"{head}{suffix}+{k}"
        return name + suffix

    def ren(op):
        if isinstance(op, ptx.Reg):
            return ptx.Reg(reg(op.name)) if op.name in regs else op
        if isinstance(op, ptx.Sym):
            return ptx.Sym(op.name + suffix) if op.name in syms else op
        if isinstance(op, ptx.Not):
            return ptx.Not(ren(op.reg))
        if isinstance(op, ptx.Addr):
            return ptx.Addr(ren(op.base) if op.base is not None else None, op.offset)
        if isinstance(op, ptx.Vec):
            return ptx.Vec(tuple(ren(x) for x in op.items))
        if isinstance(op, ptx.TmaAddr):
            return ptx.TmaAddr(ren(op.map), tuple(ren(x) for x in op.coords))
        if isinstance(op, ptx.Pair):
            return ptx.Pair(ren(op.first), ren(op.second))
        return op
    ren.reg = reg
    return ren, suffix


def _end_marker(what: str, line: int) -> ptx.Instr:
    ins = ptx.Instr(END, (), None, False, line)
    ins.end_of = what
    return ins


def link(module: ptx.Module, kernel: ptx.Kernel) -> ptx.Kernel:
    """The kernel with every function it can call linked in (``kernel.link``: a ``Linked``), or
    the kernel itself when it calls none. A call of a function the module neither defines nor
    (for the runtime's vprintf/__assertfail) declares is one line naming the call."""
    reach = _reachable(module, kernel) if module.funcs else []
    for k in [kernel] + [module.funcs[n] for n in reach]:
        for ins in k.code:
            name = _callee(ins)
            if name is None or name in module.funcs or name in RUNTIME:
                continue
            how = ("is declared here but not defined (an external function: the simulator runs only functions "
                   "defined in the module)" if name in module.declared else
                   "is neither defined nor declared in the module (ptxas refuses it as an undefined function)")
            raise Unsupported(f"{module.file}:{ins.line}: call of {name}: the function {how}")
    names = reach
    if not names:
        return kernel
    recursive = _recursive(module, names)
    code = list(kernel.code) + [_end_marker(f"kernel {kernel.name}", kernel.code[-1].line if kernel.code else 0)]
    regs = dict(kernel.regs)
    labels = dict(kernel.labels)
    tables = dict(kernel.branch_tables)
    local, shared = list(kernel.local), list(kernel.shared)
    aggregates = dict(getattr(kernel, "aggregates", {}))
    info = Linked()
    for name in names:
        f = module.funcs[name]
        refusals = getattr(f, "refusals", [])
        if refusals:
            raise Unsupported(f"{refusals[0]} is outside the simulator's subset (called from kernel {kernel.name})")
        if name in recursive and f.local:
            escape = _local_escape(f)
            if escape is not None:
                raise Unsupported(f"{module.file}:{escape}: .func {name} is recursive and passes or stores the "
                                  "address of its own .local variables: outside the simulator's subset (each "
                                  "activation's frame is kept by saving it across the recursive call, which a "
                                  "pointer into the caller's frame would bypass)")
        ren, suffix = _renamer(f)
        base = len(code)
        for r, typ in f.regs.items():
            regs[ren.reg(r)] = typ
        for a, n in getattr(f, "aggregates", {}).items():
            aggregates[a + suffix] = n
        for lab, idx in f.labels.items():
            labels[lab + suffix] = idx + base
        for tab, idxs in f.branch_tables.items():
            tables[tab + suffix] = tuple(i + base for i in idxs)
        local += [replace(v, name=v.name + suffix) for v in f.local]
        shared += [replace(v, name=v.name + suffix) for v in f.shared]
        for ins in f.code:
            new = ptx.Instr(ins.opcode, tuple(ren(op) for op in ins.operands),
                            ins.guard + suffix if ins.guard is not None else None, ins.guard_neg, ins.line)
            new.func = name
            if getattr(ins, "param_bytes", False):
                new.param_bytes = True
            code.append(new)
        code.append(_end_marker(f".func {name}", f.code[-1].line if f.code else f.line))
        def formal(p):
            return (p.name + suffix, p.type, p.size if getattr(p, "aggregate", False) else None)
        info.funcs[name] = FuncInfo(name, base, [formal(p) for p in f.params], [formal(p) for p in f.rets],
                                    [ren.reg(r) for r in f.regs], name in recursive, f.line,
                                    tuple(v.name + suffix for v in f.local) if name in recursive else ())
    for pc, ins in enumerate(code):
        name = _callee(ins)
        if name in info.funcs:
            info.sites[pc + 1] = Site(pc + 1, name, ins.operands[0].items, ins.line)
        elif ins.opcode.split(".", 1)[0] == "call" and isinstance(ins.operands[1], ptx.Reg):
            # an indirect call: a site of every function of its arity (the lanes' addresses decide)
            for f in info.funcs.values():
                if len(f.params) == len(ins.operands[2].items) and len(f.rets) == len(ins.operands[0].items):
                    info.indirect.setdefault(pc + 1, []).append(Site(pc + 1, f.name, ins.operands[0].items, ins.line))
    info.addresses = {FUNC_BASE + FUNC_STEP * i: n for i, n in enumerate(info.funcs)}
    linked = replace(kernel, regs=regs, code=code, labels=labels, branch_tables=tables, local=local, shared=shared)
    linked.link = info
    linked.aggregates = aggregates
    return linked
