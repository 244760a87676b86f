"""Front end, part 1: parse PTX text into kernels, declarations and instructions.

Covers what NVRTC emits for porter's kernels: module-level ``.global``/``.const``
variables with initialisers, ``.extern .shared`` and ``.shared`` arrays, ``.entry``
kernels with their parameters (``.align``, ``.ptr``, ``.b8 name[128]`` tensor-map
blobs) and performance directives (``.maxntid``, ``.reqnctapercluster``), register
declarations (``%r<547>`` ranges and the single names that inline-asm ``{ }`` blocks
redeclare hundreds of times, renamed here per block so each block gets its own),
labels, ``.loc`` line info and ``.section`` debug blocks (skipped).

Nothing here executes; ``decode`` turns each ``Instr`` into something that runs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from porter.emu.errors import Unsupported

_TOKEN = re.compile(r"""
    (?P<ws>\s+)
  | (?P<comment>//[^\n]*|/\*.*?\*/)
  | (?P<fimm>0[fF][0-9a-fA-F]{8}|0[dD][0-9a-fA-F]{16})
  | (?P<dec>\d+\.\d+(?:[eE][+-]?\d+)?)
  | (?P<num>(?:0[xX][0-9a-fA-F]+|\d+)U?)
  | (?P<name>[%$.A-Za-z_](?:[\w$%.]|::)*)
  | (?P<str>"[^"\n]*")
  | (?P<punct>[{}()\[\],;:|@!+\-<>=])
""", re.VERBOSE | re.DOTALL)

# Storage width in bits for each PTX type.
TYPE_BITS = {"pred": 1, "b8": 8, "u8": 8, "s8": 8, "b16": 16, "u16": 16, "s16": 16, "f16": 16, "bf16": 16,
             "b32": 32, "u32": 32, "s32": 32, "f32": 32, "f16x2": 32, "bf16x2": 32, "tf32": 32,
             "b64": 64, "u64": 64, "s64": 64, "f64": 64, "b128": 128}


@dataclass(frozen=True)
class Reg:
    name: str


@dataclass(frozen=True)
class Imm:
    value: int | float
    is_float: bool = False
    text: str = ""


@dataclass(frozen=True)
class Sym:
    """A variable, parameter or label name used as an operand."""
    name: str


@dataclass(frozen=True)
class Addr:
    """``[base+offset]``: base a Reg, Sym or None (absolute), plus a byte offset."""
    base: Reg | Sym | None
    offset: int


@dataclass(frozen=True)
class Vec:
    items: tuple


@dataclass(frozen=True)
class TmaAddr:
    """``[tensormap, {c0, c1, ...}]`` of cp.async.bulk.tensor."""
    map: Reg | Sym
    coords: tuple


@dataclass(frozen=True)
class Not:
    """``!%p``: a negated predicate source operand. ptxas takes it wherever a .pred source
    is read (setp/set's combining c, selp's c, and/or/xor/not/mov.pred, vote, bar.red);
    it refuses it on any other register ("Illegal argument to predicate negation") and as
    a destination. ``decode.Decoder.src`` reads it as the complement of the register."""
    reg: Reg


@dataclass(frozen=True)
class Pair:
    """``d|p``: a destination with a predicate output (shfl, elect); ``_`` is None."""
    first: object
    second: object


SINK = Sym("_")


@dataclass
class Instr:
    opcode: str                  # the full dotted form, e.g. "ld.shared.v4.u32"
    operands: tuple
    guard: str | None = None     # guard predicate register (renamed), or None
    guard_neg: bool = False
    line: int = 0                # PTX line number (1-based)

    @property
    def parts(self) -> list[str]:
        return self.opcode.split(".")


@dataclass
class Param:
    name: str
    type: str          # "u64", "u32", "f32", "b8"
    size: int          # bytes
    align: int
    offset: int = 0    # within the parameter buffer


@dataclass
class Var:
    """A module- or kernel-level variable in .global, .const or .shared space."""
    name: str
    space: str
    type: str
    size: int          # bytes (0 for an .extern .shared array: dynamic shared memory)
    align: int
    init: bytes | None = None
    extern: bool = False


@dataclass
class Kernel:
    name: str
    params: list[Param]
    regs: dict[str, str]                 # register name -> type
    code: list[Instr]
    labels: dict[str, int]               # label -> instruction index
    shared: list[Var] = field(default_factory=list)
    local: list[Var] = field(default_factory=list)      # .local variables: each thread's own copy
    maxntid: tuple | None = None
    reqntid: tuple | None = None
    cluster: tuple | None = None
    # ``ts: .branchtargets L1, L2;`` lists for brx.idx: table name -> instruction indices
    branch_tables: dict[str, tuple[int, ...]] = field(default_factory=dict)

    @property
    def param_bytes(self) -> int:
        return max((p.offset + p.size for p in self.params), default=0)


@dataclass
class Func(Kernel):
    """A ``.func`` definition (PTX ISA 11.1 / 9.7.12.5 "call"): its formal parameters
    (``params``) and return parameters (``rets``) are registers of its own namespace
    (``ld.param``/``st.param`` on them are moves); ``porter.emu.link`` links it into the
    kernels that call it."""
    rets: list[Param] = field(default_factory=list)
    line: int = 0


@dataclass
class Module:
    target: str
    version: str
    kernels: dict[str, Kernel]
    globals: list[Var]
    file: str = "<ptx>"
    funcs: dict[str, Func] = field(default_factory=dict)       # .func definitions by name
    declared: set[str] = field(default_factory=set)            # .func names declared without a body here


class _Tokens:
    def __init__(self, text: str, file: str):
        self.toks: list[tuple[str, str, int]] = []
        self.file = file
        line = 1
        pos = 0
        n = len(text)
        while pos < n:
            m = _TOKEN.match(text, pos)
            if m is None:
                raise Unsupported(f"{file}:{line}: cannot read PTX text {text[pos:pos + 20]!r}")
            kind = m.lastgroup
            s = m.group()
            if kind not in ("ws", "comment"):
                self.toks.append((kind, s, line))
            line += s.count("\n")
            pos = m.end()
        self.i = 0

    def peek(self, k: int = 0):
        j = self.i + k
        return self.toks[j] if j < len(self.toks) else ("eof", "", self.toks[-1][2] if self.toks else 0)

    def next(self):
        t = self.peek()
        self.i += 1
        return t

    def expect(self, s: str):
        t = self.next()
        if t[1] != s:
            raise Unsupported(f"{self.file}:{t[2]}: expected {s!r} in PTX, found {t[1]!r}")
        return t

    def accept(self, s: str) -> bool:
        if self.peek()[1] == s:
            self.i += 1
            return True
        return False

    def until(self, s: str) -> list:
        out = []
        while self.peek()[1] != s:
            if self.peek()[0] == "eof":
                raise Unsupported(f"{self.file}: unexpected end of PTX, expected {s!r}")
            out.append(self.next())
        self.next()
        return out


def _int(s: str) -> int:
    s = s.rstrip("U")
    return int(s, 16) if s.lower().startswith("0x") else int(s)


def _fimm(s: str) -> float:
    import struct
    if s[1] in "fF":
        return struct.unpack("<f", int(s[2:], 16).to_bytes(4, "little"))[0]
    return struct.unpack("<d", int(s[2:], 16).to_bytes(8, "little"))[0]


def parse(text: str, file: str = "<ptx>") -> Module:
    """Parse a PTX module (as NVRTC writes it)."""
    t = _Tokens(text, file)
    target, version = "", ""
    kernels: dict[str, Kernel] = {}
    globals_: list[Var] = []
    funcs: dict[str, Func] = {}
    declared: set[str] = set()
    while t.peek()[0] != "eof":
        kind, s, line = t.peek()
        if s in (".version", ".target", ".address_size", ".file"):
            t.next()
            rest = []
            while t.peek()[2] == line and t.peek()[0] != "eof":
                rest.append(t.next()[1])
            if s == ".version":
                version = "".join(rest)
            elif s == ".target":
                target = rest[0] if rest else ""
        elif s == ".section":
            t.next()
            t.next()
            _skip_block(t)
        elif s in (".visible", ".weak", ".entry", ".extern", ".global", ".const", ".shared", ".func"):
            mods = []
            while t.peek()[1] in (".visible", ".weak", ".extern"):
                mods.append(t.next()[1])
            s = t.peek()[1]
            if s == ".entry":
                k = _parse_entry(t)
                kernels[k.name] = k
            elif s == ".func":                 # a definition, or a prototype (printf's vprintf, a forward one)
                f = _parse_func(t, declared)
                if f is None:
                    continue
                if f.name in funcs:
                    raise Unsupported(f"{file}:{f.line}: .func {f.name} is defined twice (first at "
                                      f"{file}:{funcs[f.name].line})")
                funcs[f.name] = f
            else:
                globals_.append(_parse_var(t, extern=".extern" in mods))
        else:
            raise Unsupported(f"{file}:{line}: unexpected PTX directive {s!r} at module level")
    for name in list(declared):
        if name in funcs:
            declared.discard(name)
    return Module(target, version, kernels, globals_, file, funcs, declared)


def _skip_block(t: _Tokens) -> None:
    t.expect("{")
    depth = 1
    while depth:
        s = t.next()[1]
        depth += (s == "{") - (s == "}")


def _parse_var(t: _Tokens, extern: bool = False) -> Var:
    space = t.next()[1][1:]
    align = 1
    typ = None
    line = t.peek()[2]
    while t.peek()[1].startswith("."):
        d = t.next()[1]
        if d == ".align":
            align = _int(t.next()[1])
        elif d[1:] in TYPE_BITS:
            typ = d[1:]
        elif d in (".ptr", ".v2", ".v4"):
            raise Unsupported(f"{t.file}:{line}: {d} variables are outside the simulator's subset")
    name = t.next()[1]
    elem = max(TYPE_BITS[typ] // 8, 1) if typ else 1
    count = 1
    is_array = False
    if t.accept("["):
        is_array = True
        if t.peek()[1] == "]":
            count = 0
        else:
            count = _int(t.next()[1])
        t.expect("]")
    init = None
    if t.accept("="):
        vals = []
        def value():
            neg = t.accept("-")
            kind, text, line = t.next()
            return (kind, ("-" + text) if neg else text, line)
        if t.accept("{"):
            while not t.accept("}"):
                vals.append(value())
                t.accept(",")
        else:
            vals.append(value())
        init = _pack_init(vals, typ, t.file)
        if not is_array:
            count = 1
    t.expect(";")
    size = elem * count
    if init is not None and len(init) < size:
        init = init + bytes(size - len(init))
    return Var(name, space, typ or "b8", size, align, init, extern or (is_array and count == 0))


def _pack_init(vals, typ: str, file: str) -> bytes:
    import struct
    out = bytearray()
    bits = TYPE_BITS[typ]
    for kind, s, line in vals:
        neg = s.startswith("-")
        s = s.lstrip("-")
        if kind in ("fimm", "dec"):
            v = _fimm(s) if kind == "fimm" else float(s)
            out += struct.pack("<f" if bits == 32 else "<d", -v if neg else v)
        elif kind == "num":
            v = -_int(s) if neg else _int(s)
            out += (v & ((1 << bits) - 1)).to_bytes(max(bits // 8, 1), "little")
        else:
            raise Unsupported(f"{file}:{line}: initialiser {s!r} is outside the simulator's subset")
    return bytes(out)


def _parse_formals(t: _Tokens, fname: str, refusals: list) -> list[Param]:
    """``( .param .b32 a, .reg .u64 b, ... )`` of a .func: scalar parameters (registers of the
    function). A by-value aggregate (``.param .align 8 .b8 s[16]``) is recorded in
    ``refusals`` (refused when a kernel calls the function, not when it is only defined)."""
    out: list[Param] = []
    t.expect("(")
    while not t.accept(")"):
        line = t.peek()[2]
        space = t.next()[1]
        if space not in (".param", ".reg"):
            raise Unsupported(f"{t.file}:{line}: .func {fname}: parameter starting {space!r} is outside the "
                              "simulator's subset")
        typ = None
        while t.peek()[1].startswith("."):
            d = t.next()[1]
            if d == ".align":
                t.next()
            elif d[1:] in TYPE_BITS:
                typ = d[1:]
            elif d == ".ptr" or d in (".global", ".shared", ".const", ".local"):
                pass
        pname = t.next()[1]
        if typ is None or typ == "b128":
            refusals.append(f"{t.file}:{line}: .func {fname}: parameter {pname} of type {typ or '?'}")
            typ = typ or "b32"
        size = max(TYPE_BITS[typ] // 8, 1)
        aggregate = False
        if t.accept("["):                # a by-value aggregate (a struct, float2): bytes (see _param_bytes)
            size *= _int(t.next()[1])
            t.expect("]")
            aggregate = True
        p = Param(pname, typ, size, 1)
        p.aggregate = aggregate
        out.append(p)
        t.accept(",")
    return out


def _parse_func(t: _Tokens, declared: set) -> Func | None:
    """``.func [(rets)] name [(params)] [directives] { body }``, or a prototype ending in
    ``;`` (recorded in ``declared``; returns None)."""
    line = t.peek()[2]
    t.expect(".func")
    refusals: list[str] = []
    rets = _parse_formals(t, "?", refusals) if t.peek()[1] == "(" else []
    name = t.next()[1]
    refusals = [r.replace(".func ?:", f".func {name}:") for r in refusals]
    params = _parse_formals(t, name, refusals) if t.peek()[1] == "(" else []
    while t.peek()[1] not in ("{", ";"):
        d = t.next()[1]
        if d in (".maxnreg", ".maxntid", ".reqntid"):
            t.next()
            while t.accept(","):
                t.next()
        elif d not in (".noreturn", ".abi_preserve", ".abi_preserve_control"):
            raise Unsupported(f"{t.file}:{t.peek()[2]}: .func {name}: directive {d!r} is outside the "
                              "simulator's subset")
    if t.accept(";"):
        declared.add(name)
        return None
    f = Func(name, params, {}, [], {}, rets=rets, line=line)
    f.refusals = refusals
    _parse_body(t, f, params + rets)
    return f


def _parse_entry(t: _Tokens) -> Kernel:
    t.expect(".entry")
    name = t.next()[1]
    params: list[Param] = []
    t.expect("(")
    offset = 0
    while not t.accept(")"):
        t.expect(".param")
        align, typ, ptr = None, None, False
        while t.peek()[1].startswith("."):
            d = t.next()[1]
            if d == ".align":
                a = _int(t.next()[1])
                if not ptr:            # after .ptr, .align states the pointee's alignment, not the param's
                    align = a
            elif d == ".ptr":
                ptr = True
            elif d[1:] in TYPE_BITS:
                typ = d[1:]
            elif d in (".global", ".shared", ".const", ".local"):
                pass
        pname = t.next()[1]
        size = max(TYPE_BITS[typ] // 8, 1)
        if t.accept("["):
            size *= _int(t.next()[1])
            t.expect("]")
        align = align or max(TYPE_BITS[typ] // 8, 1)
        offset = -(-offset // align) * align
        params.append(Param(pname, typ, size, align, offset))
        offset += size
        t.accept(",")
    k = Kernel(name, params, {}, [], {})
    while t.peek()[1] != "{":
        d = t.next()[1]
        if d in (".maxntid", ".reqntid", ".reqnctapercluster", ".minnctapersm", ".maxnreg", ".maxclusterrank"):
            vals = [_int(t.next()[1])]
            while t.accept(","):
                vals.append(_int(t.next()[1]))
            if d == ".maxntid":
                k.maxntid = tuple(vals)
            elif d == ".reqntid":
                k.reqntid = tuple(vals)
            elif d == ".reqnctapercluster":
                k.cluster = tuple(vals)
        elif d in (".explicitcluster", ".noreturn"):
            pass
        else:
            raise Unsupported(f"{t.file}:{t.peek()[2]}: kernel directive {d!r} is outside the simulator's subset")
    _parse_body(t, k)
    return k


def _parse_body(t: _Tokens, k: Kernel, formals: list | None = None) -> None:
    """A kernel's or function's ``{ }`` body; ``formals`` (a .func's parameters and return
    values) become registers of its outer scope that ld.param/st.param move."""
    t.expect("{")
    scopes: list[dict[str, str]] = [{}]       # name -> renamed, innermost last
    block_id = 0
    blocks: list[int] = [0]                   # ids of the open { } blocks, innermost last
    label_defs: dict[tuple[int, str], int] = {}   # (block id, label) -> instruction index
    tables: dict[tuple[int, str], tuple] = {}     # (block id, .branchtargets name) -> (labels, chain, line)
    chains: list[tuple[int, ...]] = []        # per instruction: its open blocks, innermost first
    call_params: set[str] = set()
    aggregates: dict[str, int] = k.__dict__.setdefault("aggregates", {})    # byte-array .param -> bytes
    for p in formals or ():
        scopes[0][p.name] = p.name
        _declare_param(k, p.name, p.type, p.size if getattr(p, "aggregate", False) else None, call_params)

    def resolve(name: str) -> str | None:
        """The (renamed) register a name means here, or None if it is no register."""
        for sc in reversed(scopes):
            if name in sc:
                return sc[name]
        return None

    while True:
        kind, s, line = t.peek()
        if s == "}":
            t.next()
            scopes.pop()
            blocks.pop()
            if not scopes:
                _scope_labels(k, label_defs, chains, tables, t.file)
                return
            continue
        if s == "{":
            t.next()
            block_id += 1
            scopes.append({})
            blocks.append(block_id)
            continue
        if kind == "eof":
            raise Unsupported(f"{t.file}: kernel {k.name} has no closing brace")
        if s == ".loc" or s == ".pragma":
            _skip_line(t, line)
            continue
        if s == ".reg":
            t.next()
            typ = t.next()[1][1:]
            while True:
                rname = t.next()[1]
                if t.accept("<"):
                    count = _int(t.next()[1])
                    t.expect(">")
                    for i in range(count):
                        full = f"{rname}{i}"
                        scopes[-1][full] = full if len(scopes) == 1 else f"{full}#{block_id}"
                        k.regs[scopes[-1][full]] = typ
                else:
                    renamed = rname if len(scopes) == 1 else f"{rname}#{block_id}"
                    scopes[-1][rname] = renamed
                    k.regs[renamed] = typ
                if not t.accept(","):
                    break
            t.expect(";")
            continue
        if s == ".shared":
            k.shared.append(_parse_var(t))
            continue
        if s == ".param":
            # a call sequence's argument / return slot: a scoped register (a byte-array aggregate:
            # one b8 register per byte); st.param / ld.param on it become moves (_call_param_moves)
            t.next()
            typ = None
            while t.peek()[1].startswith("."):
                d = t.next()[1]
                if d == ".align":
                    t.next()
                elif d[1:] in TYPE_BITS:
                    typ = d[1:]
            rname = t.next()[1]
            count = None
            if t.accept("["):
                count = _int(t.next()[1])
                t.expect("]")
            t.expect(";")
            if typ is None or typ == "b128":
                raise Unsupported(f"{t.file}:{line}: call slot .param {rname} of type {typ or '?'} is outside the "
                                  "simulator's subset")
            renamed = f"{rname}#{block_id}"
            scopes[-1][rname] = renamed
            _declare_param(k, renamed, typ, None if count is None else count * max(TYPE_BITS[typ] // 8, 1),
                           call_params)
            continue
        if s == ".local":                 # a thread's stack frame (__local_depot): ops/local.py
            k.local.append(_parse_var(t))
            continue
        if (s.startswith("call") and kind == "name") or (s == "@" and _is_call(t.peek(2)[1] if t.peek(1)[1] != "!"
                                                                              else t.peek(3)[1])):
            k.code.append(_parse_call(t, resolve))
            chains.append(tuple(reversed(blocks)))
            continue
        if kind == "name" and t.peek(1)[1] == ":" and not s.startswith("%"):
            t.next()
            t.next()
            if t.peek()[1] in (".callprototype", ".calltargets"):    # an indirect call's signature / list
                t.next()
                body = [x[1] for x in t.until(";")]
                k.__dict__.setdefault("call_decls", {})[s] = body
                continue
            if t.peek()[1] == ".branchtargets":       # ts: .branchtargets L1, L2, ...; (brx.idx's list)
                t.next()
                names = [t.next()[1]]
                while t.accept(","):
                    names.append(t.next()[1])
                t.expect(";")
                if (blocks[-1], s) in tables or (blocks[-1], s) in label_defs:
                    raise Unsupported(f"{t.file}:{line}: label {s!r} defined twice in one block")
                tables[(blocks[-1], s)] = (names, tuple(reversed(blocks)), line)
                continue
            if (blocks[-1], s) in label_defs or (blocks[-1], s) in tables:
                raise Unsupported(f"{t.file}:{line}: label {s!r} defined twice in one block")
            label_defs[(blocks[-1], s)] = len(k.code)
            continue
        k.code.append(_call_param_moves(_parse_instr(t, resolve), call_params, aggregates, t.file))
        chains.append(tuple(reversed(blocks)))


def _scope_labels(k: Kernel, label_defs: dict, chains: list, tables: dict | None = None,
                  file: str = "<ptx>") -> None:
    """Resolve each label operand in the innermost enclosing ``{ }`` block that defines it,
    as ptxas does (PTX ISA 4.4 "Labels" are local to their block, like variables; inline-asm
    blocks repeat ``LAB_WAIT:`` / ``DONE:`` in every copy). Labels outside the kernel's own
    block get unique names ``label#block``. A ``.branchtargets`` list (brx.idx, PTX ISA
    9.7.12.4) resolves its labels from the block it is declared in, and its own name as a
    label does."""
    tables = tables or {}

    def unique(bid: int, name: str) -> str:
        return name if bid == 0 else f"{name}#{bid}"

    for (bid, name), idx in label_defs.items():
        k.labels[unique(bid, name)] = idx
    for (bid, name), (targets, chain, line) in tables.items():
        idxs = []
        for lab in targets:
            bid2 = next((b for b in chain if (b, lab) in label_defs), None)
            if bid2 is None:
                raise Unsupported(f"{file}:{line}: .branchtargets {name}: {lab!r} is not a label of kernel {k.name} "
                                  "(PTX ISA 9.7.12.4 \"brx.idx\": the list must name labels of the current function)")
            idxs.append(label_defs[(bid2, lab)])
        k.branch_tables[unique(bid, name)] = tuple(idxs)
    names = {name for _, name in label_defs} | {name for _, name in tables}

    def rename(op, chain):
        if isinstance(op, Sym) and op.name in names:
            for bid in chain:
                if (bid, op.name) in label_defs or (bid, op.name) in tables:
                    return Sym(unique(bid, op.name))
            return op
        if isinstance(op, Vec):
            return Vec(tuple(rename(x, chain) for x in op.items))
        return op

    for ins, chain in zip(k.code, chains):
        ops = tuple(rename(op, chain) for op in ins.operands)
        if ops != ins.operands:
            ins.operands = ops


def byte_regs(name: str, n: int) -> list[str]:
    """The b8 registers that hold a byte-array .param ``name`` of ``n`` bytes."""
    return [f"{name}+{i}" for i in range(n)]


def _declare_param(k: Kernel, name: str, typ: str, nbytes: int | None, call_params: set) -> None:
    if nbytes is None:
        k.regs[name] = typ
        call_params.add(name)
        return
    k.aggregates[name] = nbytes
    for r in byte_regs(name, nbytes):
        k.regs[r] = "b8"


def _call_param_moves(ins: Instr, call_params: set, aggregates: dict | None = None, file: str = "<ptx>") -> Instr:
    """``st.param.T [p], v`` / ``ld.param.T d, [p]`` on a call-sequence slot: ``mov.T``. On a
    byte-array slot: the same opcode with the address replaced by the bytes it covers
    (``ins.param_bytes``; ops/func_call.py packs and unpacks them)."""
    if ins.opcode.startswith(("st.param.", "ld.param.")):
        i = 0 if ins.opcode.startswith("st") else 1
        a = ins.operands[i]
        if aggregates and isinstance(a, Addr) and isinstance(a.base, Reg) and a.base.name in aggregates:
            parts = ins.opcode.split(".")
            nvec = next((int(p[1]) for p in parts if p in ("v2", "v4")), 1)
            width = max(TYPE_BITS.get(parts[-1], 8) // 8, 1)
            n = aggregates[a.base.name]
            if a.offset < 0 or a.offset + nvec * width > n:
                raise Unsupported(f"{file}:{ins.line}: {ins.opcode} at byte {a.offset} of {nvec * width} B is "
                                  f"outside the {n}-byte .param {a.base.name.split('#')[0]}")
            regs = Vec(tuple(Reg(r) for r in byte_regs(a.base.name, n)[a.offset:a.offset + nvec * width]))
            ops = list(ins.operands)
            ops[i] = regs
            new = Instr(ins.opcode, tuple(ops), ins.guard, ins.guard_neg, ins.line)
            new.param_bytes = True
            return new
        if isinstance(a, Addr) and isinstance(a.base, Reg) and a.base.name in call_params and not a.offset:
            typ = ins.opcode.rsplit(".", 1)[1]
            ops = (a.base, ins.operands[1]) if i == 0 else (ins.operands[0], a.base)
            return Instr(f"mov.{typ}", ops, ins.guard, ins.guard_neg, ins.line)
    return ins


def _is_call(s: str) -> bool:
    return s == "call" or s.startswith("call.")


def _parse_call(t: _Tokens, resolve) -> Instr:
    """``[@p] call{.uni} (ret), fn, (args)[, proto];`` as Instr(opcode, (Vec(rets), fn, Vec(args)[,
    Sym(proto)])): fn a Sym (a direct call) or a Reg (an indirect call through a function address,
    PTX ISA 9.7.12.5 "call", with a ``.callprototype`` or a ``.calltargets`` list after the args)."""
    line = t.peek()[2]
    guard, neg = None, False
    if t.accept("@"):
        neg = t.accept("!")
        gname = t.next()[1]
        guard = resolve(gname)
        if guard is None:
            raise Unsupported(f"{t.file}:{line}: guard {gname!r} is not a declared predicate register")
    opcode = t.next()[1]

    def group():
        items = []
        t.expect("(")
        while not t.accept(")"):
            items.append(_parse_atom(t, resolve))
            t.accept(",")
        return Vec(tuple(items))
    rets = group() if t.peek()[1] == "(" else Vec(())
    t.accept(",")
    kind, fn, _ = t.next()
    if kind != "name":
        raise Unsupported(f"{t.file}:{line}: cannot read the call target {fn!r}")
    target = Reg(resolve(fn)) if resolve(fn) is not None else Sym(fn)
    args = Vec(())
    extra = ()
    if t.accept(","):
        if t.peek()[1] == "(":
            args = group()
            if t.accept(","):
                extra = (Sym(t.next()[1]),)
        else:
            extra = (Sym(t.next()[1]),)
    t.expect(";")
    return Instr(opcode, (rets, target, args) + extra, guard, neg, line)


def _skip_line(t: _Tokens, line: int) -> None:
    while t.peek()[2] == line and t.peek()[0] != "eof":
        t.next()


def _parse_instr(t: _Tokens, resolve) -> Instr:
    line = t.peek()[2]
    guard, neg = None, False
    if t.accept("@"):
        neg = t.accept("!")
        gname = t.next()[1]
        guard = resolve(gname)
        if guard is None:
            raise Unsupported(f"{t.file}:{line}: guard {gname!r} is not a declared predicate register")
    kind, opcode, _ = t.next()
    if kind != "name":
        raise Unsupported(f"{t.file}:{line}: cannot read PTX instruction starting {opcode!r}")
    ops = []
    while not t.accept(";"):
        ops.append(_parse_operand(t, resolve))
        if not t.accept(","):
            t.expect(";")
            break
    return Instr(opcode, tuple(ops), guard, neg, line)


def _parse_atom(t: _Tokens, resolve):
    kind, s, line = t.next()
    if kind == "fimm":
        return Imm(_fimm(s), True, s)
    if kind == "dec":
        return Imm(float(s), True, s)
    if s == "-":
        kind2, s2, _ = t.next()
        if kind2 == "num":
            return Imm(-_int(s2), False, "-" + s2)
        if kind2 == "fimm":
            return Imm(-_fimm(s2), True, "-" + s2)
        raise Unsupported(f"{t.file}:{line}: cannot read operand '-{s2}'")
    if kind == "num":
        return Imm(_int(s), False, s)
    if s == "!":
        kind2, s2, _ = t.next()
        reg = resolve(s2) if kind2 == "name" else None
        if reg is None:
            raise Unsupported(f"{t.file}:{line}: cannot read PTX operand '!{s2}' (a negated operand must be a "
                              "declared predicate register)")
        return Not(Reg(reg))
    if kind == "name":
        if s == "_":
            return SINK
        reg = resolve(s)
        if reg is not None:
            return Reg(reg)
        if s.startswith("%"):
            return Reg(s)              # a special register (%tid.x, %clock, ...)
        return Sym(s)
    raise Unsupported(f"{t.file}:{line}: cannot read PTX operand {s!r}")


def _parse_operand(t: _Tokens, resolve):
    if t.accept("["):
        if t.accept("]"):
            raise Unsupported(f"{t.file}:{t.peek()[2]}: empty address operand")
        base = _parse_atom(t, resolve)
        if t.accept(","):                      # [tensormap, {coords}]
            coords = _parse_operand(t, resolve)
            t.expect("]")
            return TmaAddr(base, coords.items if isinstance(coords, Vec) else (coords,))
        offset = 0
        if isinstance(base, Imm):
            offset, base = int(base.value), None
        while t.peek()[1] in ("+", "-"):
            sign = -1 if t.next()[1] == "-" else 1
            nxt = _parse_atom(t, resolve)
            offset += sign * int(nxt.value)
        t.expect("]")
        return Addr(base, offset)
    if t.accept("{"):
        items = []
        while not t.accept("}"):
            items.append(_parse_operand(t, resolve))
            t.accept(",")
        return Vec(tuple(items))
    a = _parse_atom(t, resolve)
    if t.accept("|"):
        b = _parse_atom(t, resolve)
        return Pair(a, b)
    return a
