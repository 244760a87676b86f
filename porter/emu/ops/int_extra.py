"""Integer and test instructions NVRTC emits for ordinary CUDA that porter's own kernels do
not use (PTX ISA 9.0: 9.7.1 "Integer Arithmetic Instructions" (9.7.1.5 mul24, 9.7.1.6 mad24,
9.7.1.7 sad, 9.7.1.16 bfind, 9.7.1.17 fns, and szext, bmsk, dp4a, dp2a), 9.7.2
"Extended-Precision Integer Arithmetic Instructions", 9.7.3 "testp", 9.7.6 "Comparison and
Selection": slct, 9.7.9 "Data Movement and Conversion": isspacep, ldu, prmt):

* carry chains: ``add.cc``, ``addc{.cc}``, ``sub.cc``, ``subc{.cc}``, ``mad{.lo,.hi}.cc``,
  ``madc{.lo,.hi}{.cc}`` (.u32/.s32/.u64/.s64), the carry flag kept per lane (the ISA's
  CC.CF; for subtraction it is the borrow);
* ``mul24`` / ``mad24`` ``.lo/.hi`` (24-bit operands; .hi: bits 16..47 of the 48-bit product),
  ``sad``, ``dp4a``, ``dp2a.{lo,hi}``, ``bfind{.shiftamt}``, ``fns.b32``, ``bmsk.{clamp,wrap}``,
  ``szext.{clamp,wrap}``;
* ``testp.{finite,infinite,number,notanumber,normal,subnormal}``, ``slct``, ``isspacep``;
* ``ldu`` (a load; uniform-ness is a performance hint) and the ``prmt`` modes
  ``.f4e .b4e .rc8 .ecl .ecr .rc16``.
"""

from __future__ import annotations

import numpy as np

from porter.emu import memory as mem
from porter.emu.decode import NP, bits, is_signed, type_of

_LANES = 32


def _lanes(v, dt):
    return np.broadcast_to(np.asarray(v), (_LANES,)).astype(dt)


def _carry(w) -> np.ndarray:
    c = w.units.get("carry_flag")
    return np.zeros(_LANES, np.uint64) if c is None else c


def _set_carry(w, c, m):
    old = _carry(w)
    w.units["carry_flag"] = c if m is None else np.where(m, c, old)


def build_carry(ins, d):
    """add.cc / addc / sub.cc / subc / mad.cc / madc: the sum (difference) with the carry
    (borrow) in and, with .cc, out."""
    parts = ins.parts
    head = parts[0]
    t = type_of(parts)
    n = bits(t)
    if n not in (32, 64):
        raise d.unsupported()
    use_in = head in ("addc", "subc", "madc")
    set_out = "cc" in parts
    sub = head in ("sub", "subc")
    mad = head in ("mad", "madc")
    hi = "hi" in parts
    ops = ins.operands
    dst, *srcs = ops
    u = np.uint32 if n == 32 else np.uint64
    readers = [d.src(s, "u32" if n == 32 else "u64") for s in srcs]
    wd = d.dst(dst, "u32" if n == 32 else "u64")
    mask = (1 << n) - 1
    signed = is_signed(t)

    def run(w, m):
        vals = [[int(x) for x in _lanes(r(w), u)] for r in readers]
        cin = [int(x) for x in _carry(w)] if use_in else [0] * _LANES
        out = np.zeros(_LANES, np.uint64)
        cout = np.zeros(_LANES, np.uint64)
        for lane in range(_LANES):
            if mad:
                a, b, c = (v[lane] for v in vals)
                if signed:
                    a = a - (1 << n) if a >> (n - 1) else a
                    b = b - (1 << n) if b >> (n - 1) else b
                p = (a * b) & ((1 << 2 * n) - 1)
                x = (p >> n) if hi else (p & mask)
                total = x + c + cin[lane]
            elif sub:
                a, b = vals[0][lane], vals[1][lane]
                total = a - b - cin[lane]
            else:
                a, b = vals[0][lane], vals[1][lane]
                total = a + b + cin[lane]
            out[lane] = total & mask
            cout[lane] = 1 if (total < 0 or total > mask) else 0
        wd(w, out.astype(u), m)
        if set_out:
            _set_carry(w, cout, m)
    return run


def _mul24(a, b, signed):
    if signed:
        a = ((a & 0xFFFFFF) ^ 0x800000) - 0x800000
        b = ((b & 0xFFFFFF) ^ 0x800000) - 0x800000
    else:
        a, b = a & 0xFFFFFF, b & 0xFFFFFF
    return a * b


def build_mul24(ins, d):
    parts = ins.parts
    t = type_of(parts)
    if t not in ("u32", "s32"):
        raise d.unsupported()
    hi = "hi" in parts
    mad = parts[0] == "mad24"
    ops = ins.operands
    readers = [d.src(s, t) for s in ops[1:]]
    wd = d.dst(ops[0], "u32")
    signed = t == "s32"

    def run(w, m):
        vals = [_lanes(r(w), np.int64) for r in readers]
        p = _mul24(vals[0], vals[1], signed)
        r = (p >> 16) if hi else p
        if mad:
            r = r + vals[2]
        wd(w, (r & 0xFFFFFFFF).astype(np.uint32), m)
    return run


def build_sad(ins, d):
    t = type_of(ins.parts)
    dst, a, b, c = ins.operands
    ra, rb, rc = d.src(a, t), d.src(b, t), d.src(c, t)
    wd = d.dst(dst, t)
    n = bits(t)

    def run(w, m):
        x, y, z = (_lanes(f(w), np.int64) if is_signed(t) else _lanes(f(w), np.uint64).astype(object)
                   for f in (ra, rb, rc))
        r = np.array([int(z[i]) + abs(int(x[i]) - int(y[i])) for i in range(_LANES)], dtype=object)
        wd(w, np.array([v & ((1 << n) - 1) for v in r], dtype=np.uint64).astype(NP["u" + str(n)]).view(NP[t]), m)
    return run


def build_dp(ins, d):
    """dp4a.atype.btype d, a, b, c: c + the dot product of a's and b's four bytes;
    dp2a.{lo,hi}.atype.btype: a's two 16-bit halves with b's low (lo) or high (hi) two bytes."""
    parts = ins.parts
    two = parts[0] == "dp2a"
    types = [p for p in parts[1:] if p in ("u32", "s32")]
    if len(types) != 2:
        raise d.unsupported()
    sa, sb = (t == "s32" for t in types)
    hi = "hi" in parts
    dst, a, b, c = ins.operands
    ra, rb, rc = d.src(a, "u32"), d.src(b, "u32"), d.src(c, "u32")
    wd = d.dst(dst, "u32")

    def field(v, k, width, signed):
        x = (v >> np.int64(width * k)) & np.int64((1 << width) - 1)
        return np.where(x >> (width - 1), x - (1 << width), x) if signed else x

    def run(w, m):
        x, y = _lanes(ra(w), np.int64), _lanes(rb(w), np.int64)
        z = _lanes(rc(w), np.uint32).view(np.int32).astype(np.int64) if (sa or sb) else _lanes(rc(w), np.int64)
        if two:
            base = 2 if hi else 0
            acc = sum(field(x, k, 16, sa) * field(y, base + k, 8, sb) for k in range(2))
        else:
            acc = sum(field(x, k, 8, sa) * field(y, k, 8, sb) for k in range(4))
        wd(w, ((acc + z) & 0xFFFFFFFF).astype(np.uint32), m)
    return run


def build_bfind(ins, d):
    t = type_of(ins.parts)
    n = bits(t)
    shiftamt = "shiftamt" in ins.parts
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, "u32")

    def run(w, m):
        out = np.zeros(_LANES, np.uint32)
        v = _lanes(ra(w), np.int64 if is_signed(t) else np.uint64)
        for lane in range(_LANES):
            x = int(v[lane])
            if is_signed(t) and x < 0:
                x = ~x                              # the most significant non-sign bit
            pos = x.bit_length() - 1 if x else -1
            if pos < 0:
                out[lane] = 0xFFFFFFFF
            else:
                out[lane] = (n - 1 - pos) if shiftamt else pos
        wd(w, out, m)
    return run


def build_fns(ins, d):
    """fns.b32 d, mask, base, offset: the n-th set bit of mask from base (offset > 0 up,
    offset < 0 down, 0: base itself if set); 0xffffffff when there is none."""
    dst, mask, base, off = ins.operands
    rm, rb, ro = d.src(mask, "b32"), d.src(base, "u32"), d.src(off, "s32")
    wd = d.dst(dst, "u32")

    def run(w, m):
        mv, bv, ov = _lanes(rm(w), np.int64), _lanes(rb(w), np.int64), _lanes(ro(w), np.int64)
        out = np.full(_LANES, 0xFFFFFFFF, np.uint32)
        for lane in range(_LANES):
            mk, b, o = int(mv[lane]), int(bv[lane]) & 31, int(ov[lane])
            if o == 0:
                if mk >> b & 1:
                    out[lane] = b
                continue
            step = 1 if o > 0 else -1
            left = abs(o)
            pos = b
            while 0 <= pos < 32:
                if mk >> pos & 1:
                    left -= 1
                    if left == 0:
                        out[lane] = pos
                        break
                pos += step
        wd(w, out, m)
    return run


def build_bmsk(ins, d):
    """bmsk.{clamp,wrap}.b32 d, a, b: b ones from bit a."""
    wrap = "wrap" in ins.parts
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, "u32"), d.src(b, "u32"), d.dst(dst, "b32")

    def run(w, m):
        pos, width = _lanes(ra(w), np.int64), _lanes(rb(w), np.int64)
        if wrap:
            pos, width = pos & 31, width & 31
        else:
            pos, width = np.minimum(pos, 32), np.minimum(width, 32)
        ones = np.where(pos + width >= 32, (1 << 32) - 1, (1 << (pos + width)) - 1)
        mask = ones & ~((1 << pos) - 1)
        wd(w, (mask & 0xFFFFFFFF).astype(np.uint32), m)
    return run


def build_szext(ins, d):
    """szext.{clamp,wrap}.{u32,s32} d, a, b: a's low b bits, zero- or sign-extended."""
    t = type_of(ins.parts)
    wrap = "wrap" in ins.parts
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, "u32"), d.src(b, "u32"), d.dst(dst, "u32")

    def run(w, m):
        x, n = _lanes(ra(w), np.int64), _lanes(rb(w), np.int64)
        n = (n & 31) if wrap else np.minimum(n, 32)
        low = np.where(n >= 32, x, x & ((1 << n) - 1))
        if t == "s32":
            sign = np.where(n > 0, (low >> np.maximum(n - 1, 0)) & 1, 0)
            low = np.where((n < 32) & (sign == 1), low - (1 << n), low)
        wd(w, (low & 0xFFFFFFFF).astype(np.uint32), m)
    return run


_TESTP = {"finite": np.isfinite, "infinite": np.isinf, "number": lambda x: ~np.isnan(x), "notanumber": np.isnan}


def build_testp(ins, d):
    parts = ins.parts
    t = parts[-1]
    test = parts[1]
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, "pred")
    tiny = np.finfo(NP[t]).tiny

    def run(w, m):
        x = _lanes(ra(w), NP[t])
        with np.errstate(all="ignore"):
            if test in _TESTP:
                r = _TESTP[test](x)
            elif test == "normal":
                r = np.isfinite(x) & (np.abs(x) >= tiny)
            elif test == "subnormal":
                r = (x != 0) & (np.abs(x) < tiny)
            else:
                raise d.unsupported()
        wd(w, r, m)
    return run


def build_slct(ins, d):
    """slct{.ftz}.dtype.{s32,f32} d, a, b, c: a if c >= 0 else b."""
    parts = ins.parts
    types = [p for p in parts[1:] if p in NP]
    if len(types) != 2:
        raise d.unsupported()
    dtype, ctype = types
    dst, a, b, c = ins.operands
    ra, rb, rc, wd = d.src(a, dtype), d.src(b, dtype), d.src(c, ctype), d.dst(dst, dtype)

    def run(w, m):
        cv = _lanes(rc(w), NP[ctype])
        wd(w, np.where(cv >= 0, _lanes(ra(w), NP[dtype]), _lanes(rb(w), NP[dtype])), m)
    return run


def build_isspacep(ins, d):
    space = ins.parts[1]
    dst, a = ins.operands
    ra, wd = d.src(a, "u64"), d.dst(dst, "pred")
    windows = {"shared": (mem.SHARED_GENERIC, mem.SHARED_GENERIC + mem.WINDOW),
               "param": (mem.PARAM_GENERIC, mem.PARAM_GENERIC + mem.WINDOW)}
    if space not in ("global", "shared", "param", "const", "local") and not space.startswith("shared::"):
        raise d.unsupported()

    def run(w, m):
        x = _lanes(ra(w), np.uint64)
        if space == "global":
            r = x >= np.uint64(mem.GLOBAL_BASE)
            for lo, hi in windows.values():
                r &= ~((x >= np.uint64(lo)) & (x < np.uint64(hi)))
        elif space.startswith("shared") or space == "param":
            lo, hi = windows["param" if space == "param" else "shared"]
            r = (x >= np.uint64(lo)) & (x < np.uint64(hi))
        else:                                   # no generic const or local window in the simulator
            r = np.zeros(_LANES, bool)
        wd(w, r, m)
    return run


def build_ldu(ins, d):
    from porter.emu.ops.memory import build_ld

    return build_ld(ins, d)


def build_prmt_mode(ins, d):
    """prmt.b32.mode d, a, b, c with .f4e .b4e .rc8 .ecl .ecr .rc16: c's low two bits pick the
    pattern (PTX ISA "prmt": the table of modes over the bytes b7..b0 of {b, a})."""
    mode = ins.parts[-1]
    dst, a, b, c = ins.operands
    ra, rb, rc, wd = d.src(a, "b32"), d.src(b, "b32"), d.src(c, "b32"), d.dst(dst, "b32")
    table = {
        "f4e": [(0, 1, 2, 3), (1, 2, 3, 4), (2, 3, 4, 5), (3, 4, 5, 6)],     # d.b0..b3, by c[1:0]
        "b4e": [(0, 7, 6, 5), (1, 0, 7, 6), (2, 1, 0, 7), (3, 2, 1, 0)],
        "rc8": [(0, 0, 0, 0), (1, 1, 1, 1), (2, 2, 2, 2), (3, 3, 3, 3)],
        "ecl": [(0, 1, 2, 3), (1, 1, 2, 3), (2, 2, 2, 3), (3, 3, 3, 3)],
        "ecr": [(0, 0, 0, 0), (0, 1, 1, 1), (0, 1, 2, 2), (0, 1, 2, 3)],
        "rc16": [(0, 1, 0, 1), (2, 3, 2, 3), (0, 1, 0, 1), (2, 3, 2, 3)],
    }.get(mode)
    if table is None:
        raise d.unsupported()
    sel = np.array(table, dtype=np.uint64)

    def run(w, m):
        pool = (_lanes(rb(w), np.uint64) << np.uint64(32)) | _lanes(ra(w), np.uint64)
        idx = sel[(_lanes(rc(w), np.uint64) & np.uint64(3)).astype(np.int64)]        # (32, 4)
        out = np.zeros(_LANES, np.uint64)
        for k in range(4):
            out |= ((pool >> (idx[:, k] * np.uint64(8))) & np.uint64(0xFF)) << np.uint64(8 * k)
        wd(w, out.astype(np.uint32), m)
    return run


def build_simd16(ins, d):
    """add / sub / min / max on ``.u16x2`` / ``.s16x2`` (two 16-bit lanes of a .b32, sm_90;
    add/sub wrap; min/max ``.relu`` clamps at 0; PTX ISA 9.7.1 "add", "sub", "min", "max")."""
    parts = ins.parts
    op, t = parts[0], parts[-1]
    signed = t == "s16x2"
    relu = "relu" in parts
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, "b32"), d.src(b, "b32"), d.dst(dst, "b32")

    def halves(v):
        v = _lanes(v, np.int64)
        lo, hi = v & 0xFFFF, (v >> 16) & 0xFFFF
        if signed:
            lo, hi = np.where(lo >= 0x8000, lo - 0x10000, lo), np.where(hi >= 0x8000, hi - 0x10000, hi)
        return lo, hi

    def run(w, m):
        out = []
        for x, y in zip(halves(ra(w)), halves(rb(w))):
            r = {"add": x + y, "sub": x - y, "min": np.minimum(x, y), "max": np.maximum(x, y)}[op]
            if relu:
                r = np.maximum(r, 0)
            out.append(r & 0xFFFF)
        wd(w, (out[0] | (out[1] << 16)).astype(np.uint32), m)
    return run


def build_mad_hi(ins, d):
    """mad.hi.{u,s}{16,32,64} d, a, b, c: the high half of the 2n-bit product a * b, plus c
    (wrapping; PTX ISA 9.7.1.4 "mad")."""
    t = type_of(ins.parts)
    n = bits(t)
    dst, a, b, c = ins.operands
    ra, rb, rc, wd = d.src(a, t), d.src(b, t), d.src(c, t), d.dst(dst, t)
    u = NP["u" + str(n)]

    def run(w, m):
        xs, ys, zs = (_lanes(f(w), NP[t]) for f in (ra, rb, rc))
        out = np.array([(((int(x) * int(y)) >> n) + int(z)) & ((1 << n) - 1) for x, y, z in zip(xs, ys, zs)],
                       dtype=np.uint64).astype(u)
        wd(w, out.view(NP[t]), m)
    return run


def build_cnot(ins, d):
    """cnot.b{16,32,64} d, a: 1 if a is 0, else 0 (PTX ISA 9.7.8 "cnot")."""
    t = type_of(ins.parts)
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, t)

    def run(w, m):
        wd(w, (_lanes(ra(w), NP[t]) == 0).astype(NP[t]), m)
    return run


def build_pmevent(ins, d):
    """pmevent: a performance-monitor event (no effect on any value)."""
    def pmevent(w, m):
        return None
    return pmevent


build_pmevent.n_dst = 0


def _simd16(ins) -> bool:
    return ins.parts[-1] in ("u16x2", "s16x2")


def build_add_sat(ins, d):
    """add.sat.s32 / sub.sat.s32: the sum (difference) clamped to the s32 range (PTX ISA 9.7.1.1
    "add", 9.7.1.2 "sub"; the plain builders wrapped)."""
    sub_ = ins.parts[0] == "sub"
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, "s32"), d.src(b, "s32"), d.dst(dst, "s32")

    def run(w, m):
        x, y = _lanes(ra(w), np.int64), _lanes(rb(w), np.int64)
        wd(w, np.clip(x - y if sub_ else x + y, -2 ** 31, 2 ** 31 - 1).astype(np.int32), m)
    return run


def _sat_s32(ins) -> bool:
    return "sat" in ins.parts and ins.parts[-1] == "s32"


def _cc(ins) -> bool:
    return "cc" in ins.parts


BUILDERS = {"addc": build_carry, "subc": build_carry, "madc": build_carry, "mul24": build_mul24,
            "mad24": build_mul24, "sad": build_sad, "dp4a": build_dp, "dp2a": build_dp, "bfind": build_bfind,
            "fns": build_fns, "bmsk": build_bmsk, "szext": build_szext, "testp": build_testp, "slct": build_slct,
            "isspacep": build_isspacep, "ldu": build_ldu, "pmevent": build_pmevent, "cnot": build_cnot}
FORMS = [("add", _cc, build_carry), ("sub", _cc, build_carry), ("mad", _cc, build_carry),
         *[(op, _simd16, build_simd16) for op in ("add", "sub", "min", "max")],
         ("add", _sat_s32, build_add_sat), ("sub", _sat_s32, build_add_sat),
         ("mad", lambda ins: len(ins.parts) > 1 and ins.parts[1] == "hi" and not _cc(ins), build_mad_hi),
         ("prmt", lambda ins: len(ins.parts) == 3 and ins.parts[1] == "b32", build_prmt_mode)]
