"""Packed and 16-bit floating point: ``.f16x2`` / ``.bf16x2`` (two halves of a .b32),
``.f32x2`` (two floats of a .b64, sm_100), scalar ``.bf16``, the mixed-precision
``add/sub/fma.f32.{f16,bf16}`` (sm_100), and the min/max forms the plain builders lack
(``.NaN``, three inputs), ``fma .relu`` (PTX ISA 9.7.4 "Half Precision Floating-Point
Instructions", 9.7.3 "Floating-Point Instructions", 9.7.5 "Mixed Precision Floating-Point
Instructions"; numbering of PTX ISA 9.0).

Before these forms had builders of their own, the integer builders took them by their
last type suffix and added the raw bits (``add.f16x2`` of 1.0 and 1.0 gave 0x7800...):
a silent wrong number. Every element here is decoded, computed in float64 (exact for one
add or multiply of 16-bit inputs; an fma's double rounding is the one approximation) and
rounded to nearest even once into its format. A NaN result is the ISA's canonical NaN
(0x7fff for f16/bf16, 0x7fffffff for f32). ``.ftz`` flushes f16 / f32 subnormal inputs and
results to a zero of their sign; ``.sat`` clamps to [0, 1] (NaN to +0); ``.relu`` clamps
below at +0 (NaN stays canonical NaN).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.emu import ptx
from porter.emu.decode import NP

_PACKED = {"f16x2": ("f16", 2), "bf16x2": ("bf16", 2), "f32x2": ("f32", 2), "f16": ("f16", 1), "bf16": ("bf16", 1),
           "f32": ("f32", 1)}
_REG = {("f16", 2): "b32", ("bf16", 2): "b32", ("f32", 2): "b64", ("f16", 1): "b16", ("bf16", 1): "b16",
        ("f32", 1): "b32"}
_NAN = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF}
_TINY = {"f16": float(np.finfo(np.float16).tiny), "f32": float(np.finfo(np.float32).tiny), "bf16": 0.0}
_LANES = 32


def _lanes(v, dt):
    return np.broadcast_to(np.asarray(v), (_LANES,)).astype(dt)


def unpack(raw, kind: str, n: int) -> list[np.ndarray]:
    """The ``n`` float64 elements of a register's raw bits, element 0 in the low bits."""
    width = 32 if kind == "f32" else 16
    raw = _lanes(raw, np.uint64)
    out = []
    for k in range(n):
        bits = (raw >> np.uint64(width * k)) & np.uint64((1 << width) - 1)
        if kind == "f32":
            out.append(bits.astype(np.uint32).view(np.float32).astype(np.float64))
        elif kind == "f16":
            out.append(bits.astype(np.uint16).view(np.float16).astype(np.float64))
        else:
            out.append(bits.astype(np.uint16).view(ml_dtypes.bfloat16).astype(np.float32).astype(np.float64))
    return out


def encode(x: np.ndarray, kind: str, mode: str = "rn") -> np.ndarray:
    """float64 values -> raw bits of ``kind`` (uint64), rounded by ``mode``; NaN canonical."""
    x = np.asarray(x, np.float64)
    with np.errstate(all="ignore"):
        if kind == "f32":
            r = x.astype(np.float32)
            if mode != "rn":                     # directed rounding: step the nearest value back
                rd = r.astype(np.float64)
                if mode == "rz":
                    fix = np.abs(rd) > np.abs(x)
                    r = np.where(fix, np.nextafter(r, np.float32(0)), r)
                elif mode == "rm":
                    r = np.where(rd > x, np.nextafter(r, np.float32(-np.inf)), r)
                elif mode == "rp":
                    r = np.where(rd < x, np.nextafter(r, np.float32(np.inf)), r)
            bits = r.view(np.uint32).astype(np.uint64)
        elif kind == "f16":
            bits = x.astype(np.float16).view(np.uint16).astype(np.uint64)
        else:
            bits = x.astype(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16).astype(np.uint64)
    return np.where(np.isnan(x), np.uint64(_NAN[kind]), bits)


def pack(elems: list[np.ndarray], kind: str) -> np.ndarray:
    width = 32 if kind == "f32" else 16
    out = np.zeros(_LANES, np.uint64)
    for k, e in enumerate(elems):
        out |= e << np.uint64(width * k)
    return out


def _flush(x, kind):
    tiny = _TINY[kind]
    if not tiny:
        return x
    return np.where(np.abs(x) < tiny, np.copysign(0.0, x), x)


def _float_kind(ins) -> tuple[str, int, str | None]:
    """(element kind, elements, the mixed form's 16-bit input kind or None)."""
    parts = ins.parts
    types = [p for p in parts[1:] if p in _PACKED]
    if len(types) == 2 and types[0] == "f32" and types[1] in ("f16", "bf16"):
        return "f32", 1, types[1]
    kind, n = _PACKED[types[-1]]
    return kind, n, None


def _mode(parts) -> str:
    return next((p for p in parts if p in ("rn", "rz", "rm", "rp")), "rn")


def _arith(ins, d):
    """add / sub / mul / fma in a packed, 16-bit or mixed type."""
    parts = ins.parts
    op = parts[0]
    kind, n, mixed = _float_kind(ins)
    mode, ftz, sat, relu = _mode(parts), "ftz" in parts, "sat" in parts, "relu" in parts
    if mode != "rn" and kind != "f32":
        raise d.unsupported("(16-bit packed arithmetic rounds .rn only)")
    if "oob" in parts:        # OOB-NaN inputs (TMA's fill) give 0: which NaN bits those are is unstated
        raise d.unsupported("(.oob)")
    nin = 3 if op == "fma" else 2
    dst, *srcs = ins.operands
    if len(srcs) != nin:
        raise d.unsupported(f"(expected {nin} source operands)")
    reg = _REG[(kind, n)]
    # the mixed forms' 16-bit inputs: add/sub a (c is f32); fma a and b (c is f32)
    in_kinds = [kind] * nin if mixed is None else ([mixed, "f32"] if nin == 2 else [mixed, mixed, "f32"])
    readers = [d.src(s, _REG[(k, n)]) for s, k in zip(srcs, in_kinds)]
    wd = d.dst(dst, reg)
    out_dt = NP[reg]

    def run(w, m):
        vals = [unpack(r(w), k, n) for r, k in zip(readers, in_kinds)]
        res = []
        for e in range(n):
            xs = [v[e] for v in vals]
            if ftz:
                xs = [_flush(x, kind) for x in xs]
            with np.errstate(all="ignore"):
                if op == "add":
                    y = xs[0] + xs[1]
                elif op == "sub":
                    y = xs[0] - xs[1]
                elif op == "mul":
                    y = xs[0] * xs[1]
                else:
                    y = xs[0] * xs[1] + xs[2]
            if ftz:
                y = _flush(y, kind)
            if sat:
                y = np.where(np.isnan(y), 0.0, np.clip(y, 0.0, 1.0))
            if relu:
                y = np.where(np.isnan(y), y, np.maximum(y, 0.0))
            res.append(encode(y, kind, mode))
        wd(w, pack(res, kind).astype(out_dt), m)
    return run


def _sign_op(ins, d):
    """neg / abs of 16-bit or packed values: the sign bit of each element."""
    kind, n, _ = _float_kind(ins)
    width = 32 if kind == "f32" else 16
    reg = _REG[(kind, n)]
    dst, a = ins.operands
    ra, wd = d.src(a, reg), d.dst(dst, reg)
    sign = 0
    for k in range(n):
        sign |= 1 << (width * k + width - 1)
    sign = np.uint64(sign)
    neg = ins.parts[0] == "neg"
    dt = NP[reg]

    def run(w, m):
        v = _lanes(ra(w), np.uint64)
        wd(w, ((v ^ sign) if neg else (v & ~sign)).astype(dt), m)
    return run


def _minmax(ins, d):
    """min / max (two or three inputs; ``.NaN``: any NaN input gives the canonical NaN, else
    a NaN input is ignored; -0 is less than +0)."""
    parts = ins.parts
    if "xorsign" in parts:
        raise d.unsupported("(.xorsign.abs)")
    kind, n, _ = _float_kind(ins)
    reg = _REG[(kind, n)]
    propagate, ftz, is_max = "NaN" in parts, "ftz" in parts, parts[0] == "max"
    dst, *srcs = ins.operands
    readers = [d.src(s, reg) for s in srcs]
    wd = d.dst(dst, reg)
    dt = NP[reg]

    def pick(x, y):
        with np.errstate(all="ignore"):
            both_zero = (x == 0) & (y == 0)
            r = np.fmax(x, y) if is_max else np.fmin(x, y)
            if both_zero.any():
                neg = np.signbit(x) & np.signbit(y) if is_max else np.signbit(x) | np.signbit(y)
                r = np.where(both_zero, np.where(neg, -0.0, 0.0), r)
        if propagate:
            r = np.where(np.isnan(x) | np.isnan(y), np.nan, r)
        return r

    def run(w, m):
        vals = [unpack(r(w), kind, n) for r in readers]
        res = []
        for e in range(n):
            xs = [_flush(v[e], kind) if ftz else v[e] for v in vals]
            y = xs[0]
            for x in xs[1:]:
                y = pick(y, x)
            res.append(encode(y, kind))
        wd(w, pack(res, kind).astype(dt), m)
    return run


_APPROX = {"ex2": np.exp2, "tanh": np.tanh}


def _approx(ins, d):
    """ex2.approx / tanh.approx of 16-bit and packed values: the function in float32, rounded
    to the element's format (the hardware's approximation error is not modelled)."""
    kind, n, _ = _float_kind(ins)
    reg = _REG[(kind, n)]
    f = _APPROX[ins.parts[0]]
    ftz = "ftz" in ins.parts
    dst, a = ins.operands
    ra, wd = d.src(a, reg), d.dst(dst, reg)
    dt = NP[reg]

    def run(w, m):
        res = []
        for x in unpack(ra(w), kind, n):
            with np.errstate(all="ignore"):
                y = f(x.astype(np.float32)).astype(np.float64)
            res.append(encode(_flush(y, kind) if ftz else y, kind))
        wd(w, pack(res, kind).astype(dt), m)
    return run


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal}


def _compare(cmp: str, x, y):
    nan = np.isnan(x) | np.isnan(y)
    if cmp == "num":
        return ~nan
    if cmp == "nan":
        return nan
    unordered = cmp.endswith("u") and cmp[:-1] in _CMP
    with np.errstate(all="ignore"):
        r = _CMP[cmp[:-1] if unordered else cmp](x, y)
    return (r | nan) if unordered else (r & ~nan)


def _setp(ins, d):
    """setp of bf16 or packed halves: ``setp.op.f16x2 p|q, a, b`` sets p from the low halves'
    compare and q from the high halves' (PTX ISA 9.7.7 "Half Precision Comparison Instructions")."""
    parts = ins.parts
    cmp = parts[1]
    kind, n, _ = _float_kind(ins)
    reg = _REG[(kind, n)]
    combine = next((p for p in parts[2:] if p in ("and", "or", "xor")), None)
    ops = ins.operands
    dst = ops[0]
    first, second = (dst.first, dst.second) if isinstance(dst, ptx.Pair) else (dst, None)
    ra, rb = d.src(ops[1], reg), d.src(ops[2], reg)
    rc = d.src(ops[3], "pred") if combine else None
    w1 = d.dst(first, "pred")
    w2 = d.dst(second, "pred") if second is not None and second is not ptx.SINK else None
    comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(combine)

    def run(w, m):
        xs, ys = unpack(ra(w), kind, n), unpack(rb(w), kind, n)
        rs = [_compare(cmp, x, y) for x, y in zip(xs, ys)]
        c = _lanes(rc(w), bool) if comb is not None else None
        if n == 1:
            r = rs[0]
            w1(w, comb(r, c) if comb else r, m)
            if w2 is not None:
                w2(w, comb(~r, c) if comb else ~r, m)
            return
        w1(w, comb(rs[0], c) if comb else rs[0], m)
        if w2 is not None:
            w2(w, comb(rs[1], c) if comb else rs[1], m)
    return run


def build_set(ins, d):
    """``set.CmpOp{.BoolOp}.dtype.stype d, a, b{, c}`` (PTX ISA 9.7.6 "set"; 9.7.7 "Half Precision
    Comparison Instructions" for the f16x2/bf16x2 sources): each compare as all ones (u32/s32 destination) or 1.0 (f32), else 0;
    with a packed source, one result per half."""
    parts = ins.parts
    cmp = parts[1]
    combine = next((p for p in parts[2:] if p in ("and", "or", "xor")), None)
    types = [p for p in parts[2:] if p in NP]
    if len(types) != 2:
        raise d.unsupported()
    dtype, stype = types
    ops = ins.operands
    comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(combine)
    rc = d.src(ops[3], "pred") if combine else None
    if stype in ("f16x2", "bf16x2"):
        kind, n = _PACKED[stype]
        ra, rb = d.src(ops[1], "b32"), d.src(ops[2], "b32")
        one = {"u32": 0xFFFF, "s32": 0xFFFF, "f16x2": 0x3C00, "bf16x2": 0x3F80}.get(dtype)
        if one is None:
            raise d.unsupported()
    else:
        kind, n = ("f" if stype[0] == "f" else "i"), 1
        ra, rb = d.src(ops[1], stype), d.src(ops[2], stype)
        one = {"u32": 0xFFFFFFFF, "s32": 0xFFFFFFFF, "f32": 0x3F800000}.get(dtype)
        if one is None:
            raise d.unsupported()
    wd = d.dst(ops[0], "b32")

    def run(w, m):
        if n == 2:
            rs = [_compare(cmp, x, y) for x, y in zip(unpack(ra(w), kind, 2), unpack(rb(w), kind, 2))]
        elif kind == "f":
            rs = [_compare(cmp, _lanes(ra(w), np.float64), _lanes(rb(w), np.float64))]
        else:
            if cmp not in _CMP:
                raise d.unsupported()
            rs = [_CMP[cmp](_lanes(ra(w), np.asarray(ra(w)).dtype), _lanes(rb(w), np.asarray(rb(w)).dtype))]
        if comb is not None:
            c = _lanes(rc(w), bool)
            rs = [comb(r, c) for r in rs]
        out = np.zeros(_LANES, np.uint64)
        for k, r in enumerate(rs):
            out |= np.where(r, np.uint64(one), np.uint64(0)) << np.uint64(16 * k)
        wd(w, out.astype(np.uint32), m)
    return run


_PACKED_TYPES = ("f16x2", "bf16x2", "f32x2", "bf16")


def _has_packed(ins) -> bool:
    return any(p in _PACKED_TYPES for p in ins.parts[1:])


def _mixed(ins) -> bool:
    t = [p for p in ins.parts[1:] if p in _PACKED]
    return len(t) == 2 and t[0] == "f32" and t[1] in ("f16", "bf16")


def _float_minmax(ins) -> bool:
    floats = any(p in ("f16", "f32", "f16x2", "bf16", "bf16x2") for p in ins.parts[1:])
    return floats and (_has_packed(ins) or "NaN" in ins.parts or len(ins.operands) == 4 or "xorsign" in ins.parts)


def _relu_or_sat16(ins) -> bool:
    return "relu" in ins.parts or ("sat" in ins.parts and "f16" in ins.parts)


def _f32_modifiers(ins) -> bool:
    """f32 arithmetic with .sat or a directed rounding (.rz/.rm/.rp), which the plain f32
    builders round to nearest and do not clamp (fma.rm.f32 is in CUTLASS's epilogues)."""
    p = ins.parts
    return p[-1] == "f32" and ("sat" in p or any(r in p for r in ("rz", "rm", "rp")))


def _arith_form(ins) -> bool:
    return _has_packed(ins) or _mixed(ins) or _f32_modifiers(ins)


FORMS = [
    *[(op, _arith_form, _arith) for op in ("add", "sub", "mul")],
    # (scalar .f16 fma too: the plain fma builder takes .f32 and .f64 only)
    ("fma", lambda ins: _arith_form(ins) or _relu_or_sat16(ins) or ins.parts[-1] == "f16", _arith),
    *[(op, _has_packed, _sign_op) for op in ("neg", "abs")],
    *[(op, _float_minmax, _minmax) for op in ("min", "max")],
    *[(op, _has_packed, _approx) for op in ("ex2", "tanh")],
    ("setp", _has_packed, _setp),
]


def build_packed_atomic(ins, d):
    """``red`` / ``atom`` ``.add/.min/.max{.noftz}`` on ``.f16x2``, ``.bf16x2`` or ``.bf16`` in global or
    shared memory (PTX ISA 9.7.13 "atom" and "red"): each half rounds to nearest once;
    ``atom`` returns the old value. The lanes apply in lane order."""
    from porter.emu import memory as mem
    from porter.emu.ops.memory import _resolve, _space

    parts = ins.parts
    returns = parts[0] == "atom"
    op = next((p for p in parts if p in ("add", "min", "max")), None)
    kind, n, _ = _float_kind(ins)
    space = _space(parts)
    if op is None or kind == "f32" or space not in ("global", "shared", "generic", "shared_cluster"):
        raise d.unsupported()
    reg = _REG[(kind, n)]
    nbytes = 2 * n
    ops = ins.operands
    k = 1 if returns else 0
    wd = d.dst(ops[0], reg) if returns else None
    addr_fn, _ = d.addr(ops[k], space)
    rb = d.src(ops[k + 1], reg)
    what = f"atomic ({ins.opcode})"
    u = np.uint32 if n == 2 else np.uint16

    def atom(w, m):
        sel = w.live if m is None else m
        lanes = np.nonzero(sel)[0]
        a = addr_fn(w)[sel]
        mem.check_aligned(a, nbytes, what)
        buf, offs = _resolve(w, space, a, nbytes, what, write=True)
        b = _lanes(rb(w), np.uint64)
        old = np.zeros(_LANES, np.uint64)
        for j, lane in enumerate(lanes):
            off = int(offs[j])
            cur = np.uint64(int(buf[off:off + nbytes].view(u)[0]))
            old[lane] = cur
            xs, ys = unpack(cur, kind, n), unpack(b[lane], kind, n)
            res = []
            for x, y in zip(xs, ys):
                with np.errstate(all="ignore"):
                    r = x + y if op == "add" else (np.fmin(x, y) if op == "min" else np.fmax(x, y))
                res.append(encode(r, kind))
            buf[off:off + nbytes] = np.array([int(pack(res, kind)[0])], dtype=u).view(np.uint8)
        if wd is not None:
            wd(w, old.astype(NP[reg]), m)
    return atom


def build_packed_red(ins, d):
    return build_packed_atomic(ins, d)


build_packed_red.n_dst = 0

BUILDERS = {"set": build_set}
FORMS += [("red", lambda ins: _has_packed(ins) and "async" not in ins.parts, build_packed_red),
          ("atom", _has_packed, build_packed_atomic)]


def build_vector_atomic(ins, d):
    """``red`` / ``atom`` ``.add/.min/.max`` on vectors (sm_90: ``.v2/.v4.f32``, ``.v2/.v4/.v8`` of
    ``.f16/.bf16`` and ``.v2/.v4`` of ``.f16x2/.bf16x2``, global memory; PTX ISA 9.7.13 "red",
    "atom"): each element as its own atomic; ``atom`` returns the old vector."""
    from porter.emu import memory as mem
    from porter.emu.ops.memory import _resolve, _space

    parts = ins.parts
    returns = parts[0] == "atom"
    op = next((p for p in parts if p in ("add", "min", "max")), None)
    nvec = next((int(p[1]) for p in parts if p in ("v2", "v4", "v8")), None)
    elem = next((p for p in reversed(parts) if p in _PACKED), None)
    space = _space(parts)
    if op is None or nvec is None or elem is None or space not in ("global", "generic"):
        raise d.unsupported("(vector red/atom: .add/.min/.max on .f32, .f16, .bf16, .f16x2, .bf16x2 in global memory)")
    kind, n = _PACKED[elem]
    reg = _REG[(kind, n)]
    ebytes = (32 if kind == "f32" else 16) * n // 8
    ops = ins.operands
    k = 1 if returns else 0
    vals = ops[k + 1].items if isinstance(ops[k + 1], ptx.Vec) else ()
    if len(vals) != nvec or (returns and not (isinstance(ops[0], ptx.Vec) and len(ops[0].items) == nvec)):
        raise d.unsupported(f"(expected {nvec}-element vectors)")
    readers = [d.src(x, reg) for x in vals]
    writers = [d.dst(x, reg) for x in ops[0].items] if returns else []
    addr_fn, _ = d.addr(ops[k], space)
    total = ebytes * nvec
    what = f"atomic ({ins.opcode})"
    u = {2: np.uint16, 4: np.uint32, 8: np.uint64}[ebytes]

    def atom(w, m):
        sel = w.live if m is None else m
        lanes = np.nonzero(sel)[0]
        a = addr_fn(w)[sel]
        mem.check_aligned(a, total, what)
        buf, offs = _resolve(w, space, a, total, what, write=True)
        new = [_lanes(r(w), np.uint64) for r in readers]
        old = [np.zeros(_LANES, np.uint64) for _ in readers]
        for j, lane in enumerate(lanes):
            for e in range(nvec):
                off = int(offs[j]) + e * ebytes
                cur = np.uint64(int(buf[off:off + ebytes].view(u)[0]))
                old[e][lane] = cur
                res = []
                for x, y in zip(unpack(cur, kind, n), unpack(new[e][lane], kind, n)):
                    with np.errstate(all="ignore"):
                        r = x + y if op == "add" else (np.fmin(x, y) if op == "min" else np.fmax(x, y))
                    res.append(encode(r, kind))
                buf[off:off + ebytes] = np.array([int(pack(res, kind)[0])], dtype=u).view(np.uint8)
        for wr, o in zip(writers, old):
            wr(w, o.astype(NP[reg]), m)
    return atom


def build_vector_red(ins, d):
    return build_vector_atomic(ins, d)


build_vector_red.n_dst = 0


def _vector_float_atomic(ins) -> bool:
    p = ins.parts
    return any(v in p for v in ("v2", "v4", "v8")) and p[-1] in _PACKED and "async" not in p


FORMS = [("red", _vector_float_atomic, build_vector_red), ("atom", _vector_float_atomic, build_vector_atomic)] + FORMS
