"""Integer, bit, floating-point, compare, select and convert instructions (PTX ISA 9.7.1-9.7.9).

Each builder takes the parsed instruction and the kernel's ``Decoder`` and returns
``fn(warp, mask)``. Values are computed over the warp's 32 lanes with numpy in the
instruction's type; ``Decoder.dst`` stores them back as raw bits.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.emu import fastpath, ptx
from porter.emu.decode import NP, UINT, bits, is_float, is_signed, type_of


def _binary(ins, d, f, raw=None):
    t = type_of(ins.parts)
    dst, a, b = ins.operands
    fast = fastpath.binary(d, t, dst, a, b, f, raw)  # same-width registers / an immediate
    if fast is not None:
        return fast
    ra, rb, wd = d.src(a, t), d.src(b, t), d.dst(dst, t)

    def run(w, m):
        wd(w, f(ra(w), rb(w)), m)
    return run


def _binary_masked(ins, d, f):
    """Like _binary, but ``f(a, b, sel)`` sees which lanes execute (for checks that must
    ignore the stale values of lanes that do not)."""
    t = type_of(ins.parts)
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, t), d.src(b, t), d.dst(dst, t)

    def run(w, m):
        wd(w, f(ra(w), rb(w), w.live if m is None else m), m)
    return run


def _unary(ins, d, f, t=None):
    t = t or type_of(ins.parts)
    dst, a = ins.operands
    fast = fastpath.unary(d, t, dst, a, f)          # same-width registers
    if fast is not None:
        return fast
    ra, wd = d.src(a, t), d.dst(dst, t)

    def run(w, m):
        wd(w, f(ra(w)), m)
    return run


_F32_TINY = np.float32(np.finfo(np.float32).tiny)      # 2^-126, the least normal f32


def _flush(x, tiny=_F32_TINY):
    """``.ftz``: values below ``tiny`` in magnitude (subnormals) to a zero of their sign; zeros,
    normals, inf and NaN unchanged (PTX ISA 9.7.3 "Floating-Point Instructions": .ftz flushes
    subnormal inputs and results to sign-preserving zero; a -0.0 stays -0.0). The usual case
    (no zero or subnormal lane) is two ufuncs and a byte scan (a bool array's bytes hold a 1
    where it is true: ~8x cheaper than count_nonzero)."""
    small = np.abs(x) < tiny
    if 1 in small.tobytes():
        return np.where(small, np.copysign(np.float32(0), x), x)
    return x


def _ftz32(ins) -> bool:
    """An f32 instruction with .ftz (the plain builders compute without flushing)."""
    return "ftz" in ins.parts and type_of(ins.parts) == "f32"


_ABS_BITS, _SUB_MAX, _ONE32 = np.uint32(0x7FFFFFFF), np.uint32(0x7FFFFF), np.uint32(1)


def _no_subnormal(*xs) -> bool:
    """No lane of these f32 values is a nonzero subnormal (then .ftz changes nothing): the
    arrays' bits under the sign, less one, below 0x7FFFFF, in one pass over all of them
    (zeros wrap to the top, so they do not count); an immediate (a numpy scalar) by value."""
    arrays = []
    for x in xs:
        if type(x) is np.ndarray and x.ndim == 1:
            arrays.append(x)
        elif x != 0 and abs(float(x)) < _F32_TINY:
            return False
    if not arrays:
        return True
    u = (np.concatenate(arrays) if len(arrays) > 1 else arrays[0]).view(np.uint32)
    return 1 not in (((u & _ABS_BITS) - _ONE32) < _SUB_MAX).tobytes()


def _ftz_binary(f):
    """f with its two inputs and its result flushed (add, sub, mul, div, min, max .ftz.f32):
    f itself where no input or result lane is subnormal (the flushes change nothing there)."""
    def g(a, b):
        r = f(a, b)
        if type(r) is np.ndarray and _no_subnormal(a, b, r):
            return r
        return _flush(f(_flush(a), _flush(b)))
    return g


def _ftz_unary(f):
    def g(a):
        if _no_subnormal(a):
            return f(a)                 # (neg and abs of a normal, zero, inf or NaN: no subnormal out)
        return _flush(f(_flush(a)))
    return g


def _shift_amount(x, width):
    return np.minimum(np.asarray(x).astype(np.uint32), np.uint32(width))


def build_mov(ins, d):
    t = type_of(ins.parts)
    dst, a = ins.operands
    if isinstance(a, ptx.Vec):                       # mov.b64 d, {lo, hi}: pack
        n = len(a.items)
        part = bits(t) // n                     # (mov.b16 d, {a, b}: two .b8 halves)
        srcs = [d.src(x, f"b{part}") for x in a.items]
        wd = d.dst(dst, t)
        wide = UINT[bits(t)]

        def pack(w, m):
            v = np.zeros(32, dtype=wide)
            for k, s in enumerate(srcs):
                v = v | (np.asarray(s(w)).astype(wide) << wide(k * part))
            wd(w, v.view(NP[t]), m)
        return pack
    if isinstance(dst, ptx.Vec):                     # mov.b64 {lo, hi}, d: unpack
        n = len(dst.items)
        part = bits(t) // n
        ra = d.src(a, t)
        outs = [d.dst(x, f"b{part}") for x in dst.items]
        wide, narrow = UINT[bits(t)], UINT[part]

        def unpack(w, m):
            v = np.asarray(ra(w)).view(wide) if np.ndim(ra(w)) else np.full(32, ra(w)).view(wide)
            for k, o in enumerate(outs):
                o(w, (v >> wide(k * part)).astype(narrow), m)
        return unpack
    fast = fastpath.move(d, t, dst, a)               # a same-width register or an immediate
    if fast is not None:
        return fast
    ra, wd = d.src(a, t), d.dst(dst, t)

    def mov(w, m):
        wd(w, ra(w), m)
    return mov


def _wrap_int(f):
    # numpy warns on integer overflow only when both operands are scalars (two
    # immediates): arrays wrap silently, and the scheduler runs with warnings off anyway.
    def g(a, b):
        if type(a) is np.ndarray or type(b) is np.ndarray:
            return f(a, b)
        with np.errstate(over="ignore"):
            return f(a, b)
    return g


def mul_hi_u64(a: np.ndarray, b: np.ndarray, signed: bool = False) -> np.ndarray:
    """Bits 64..127 of the 128-bit product of uint64 lanes (two's complement when signed:
    subtract b where a < 0 and a where b < 0, mod 2^64)."""
    m32 = np.uint64(0xFFFFFFFF)
    s32 = np.uint64(32)
    a_lo, a_hi, b_lo, b_hi = a & m32, a >> s32, b & m32, b >> s32
    with np.errstate(over="ignore"):
        ll = a_lo * b_lo
        lh = a_lo * b_hi
        hl = a_hi * b_lo
        mid = (ll >> s32) + (lh & m32) + (hl & m32)
        hi = a_hi * b_hi + (lh >> s32) + (hl >> s32) + (mid >> s32)
        if signed:
            hi = hi - np.where(a >> np.uint64(63), b, np.uint64(0)) - np.where(b >> np.uint64(63), a, np.uint64(0))
    return hi


def build_mul(ins, d):
    t = type_of(ins.parts)
    mode = ins.parts[1] if len(ins.parts) > 2 else ""
    if is_float(t):
        if _ftz32(ins):
            return _binary(ins, d, _ftz_binary(np.multiply))
        return _binary(ins, d, np.multiply if t in ("f16", "f32", "f64") else (lambda a, b: a * b))
    if mode == "wide":
        dst, a, b = ins.operands
        wt = ("s" if is_signed(t) else "u") + str(2 * bits(t))
        ra, rb, wd = d.src(a, t), d.src(b, t), d.dst(dst, wt)
        wdt = NP[wt]

        def wide(w, m):
            wd(w, np.asarray(ra(w)).astype(wdt) * np.asarray(rb(w)).astype(wdt), m)
        return wide
    if mode == "hi":
        dst, a, b = ins.operands
        ra, rb, wd = d.src(a, t), d.src(b, t), d.dst(dst, t)
        nb = bits(t)
        if nb == 64:                  # NVRTC's 64-bit division by a constant: the 128-bit product's top half
            signed = is_signed(t)

            def hi64(w, m):
                a = np.broadcast_to(np.asarray(ra(w)), (32,)).view(np.uint64)
                b = np.broadcast_to(np.asarray(rb(w)), (32,)).view(np.uint64)
                wd(w, mul_hi_u64(a, b, signed).view(NP[t]), m)
            return hi64
        wdt = np.int64 if is_signed(t) else np.uint64

        def hi(w, m):
            p = np.asarray(ra(w)).astype(wdt) * np.asarray(rb(w)).astype(wdt)
            wd(w, (p >> nb).astype(NP[t]), m)
        return hi
    return _binary(ins, d, _wrap_int(lambda a, b: a * b), np.multiply)   # .lo: the low bits, any signedness


def build_mad(ins, d):
    t = type_of(ins.parts)
    dst, a, b, c = ins.operands
    mode = ins.parts[1]
    if mode == "wide":
        wt = ("s" if is_signed(t) else "u") + str(2 * bits(t))
        ra, rb, rc, wd = d.src(a, t), d.src(b, t), d.src(c, wt), d.dst(dst, wt)
        wdt = NP[wt]

        def madw(w, m):
            with np.errstate(over="ignore"):
                wd(w, np.asarray(ra(w)).astype(wdt) * np.asarray(rb(w)).astype(wdt) + rc(w), m)
        return madw
    if mode != "lo":
        raise d.unsupported()
    ra, rb, rc, wd = d.src(a, t), d.src(b, t), d.src(c, t), d.dst(dst, t)

    def mad(w, m):                      # integer arrays wrap without a warning
        wd(w, ra(w) * rb(w) + rc(w), m)
    return mad


def build_fma(ins, d):
    t = type_of(ins.parts)
    if t != "f32" and t != "f64":
        raise d.unsupported()
    dst, a, b, c = ins.operands
    ra, rb, rc, wd = d.src(a, t), d.src(b, t), d.src(c, t), d.dst(dst, t)
    if t == "f64":
        def fma64(w, m):
            wd(w, fma_f64(ra(w), rb(w), rc(w)), m)
        return fma64
    if "ftz" in ins.parts:
        def fma_ftz(w, m):              # inputs and result flushed; the same double rounding as fma
            a, b, c = ra(w), rb(w), rc(w)
            p = np.multiply(a, b, dtype=np.float64)
            p += c
            r = p.astype(np.float32)
            if not _no_subnormal(a, b, c, r):
                p = np.multiply(_flush(a), _flush(b), dtype=np.float64)
                p += _flush(c)
                r = _flush(p.astype(np.float32))
            wd(w, r, m)
        return fma_ftz

    # the f32 product is exact in f64; one f64 add then one rounding to f32 (a double
    # rounding that can differ from a fused f32 FMA in the last ulp in rare ties)
    # (inf and NaN without warnings: the scheduler runs every instruction with them off)
    def fma(w, m):
        p = np.multiply(ra(w), rb(w), dtype=np.float64)
        p += rc(w)
        wd(w, p.astype(np.float32), m)
    fast = fastpath.fma32(d, dst, a, b, c, fma)
    return fast if fast is not None else fma


_SPLIT = np.float64(134217729.0)              # 2^27 + 1: Veltkamp's splitter for 53-bit significands


def _two_sum(x, y):
    """(s, e): s = x + y rounded, e its exact error (Knuth)."""
    s = x + y
    bb = s - x
    return s, (x - (s - bb)) + (y - bb)


def fma_f64(a, b, c):
    """``fma.rn.f64``: a * b + c rounded once (PTX ISA 9.7.3 "fma": "computes the product of a and b
    to infinite precision and then adds c to this product, again in infinite precision"); the
    product rounded first, as ``a * b + c`` in numpy, loses what the fused form keeps (the
    residual of a Newton step, fma(-x, r, 1)). With error-free transformations: a * b = p + e
    exactly (Dekker), p + c = s + t, t + e = u + v, s + u = r + w, all exact; r is the fused
    result unless r + w + v lies within |v| of a rounding boundary of r, and those lanes (and
    any where a split or the product's error could overflow or underflow) are computed with
    exact rationals. inf and NaN operands: numpy's unfused result (the same specials)."""
    a, b, c = (np.broadcast_to(np.asarray(x, np.float64), (32,)) for x in (a, b, c))
    with np.errstate(all="ignore"):
        naive = a * b + c
        p = a * b
        ta, tb = _SPLIT * a, _SPLIT * b
        ah, bh = ta - (ta - a), tb - (tb - b)
        al, bl = a - ah, b - bh
        e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
        s, t = _two_sum(p, c)
        u, v = _two_sum(t, e)
        r, wres = _two_sum(s, u)
        half = np.spacing(np.abs(r)) * 0.5
        aw, av = np.abs(wres), 2 * np.abs(v)
        risky = (v != 0) & ((np.abs(aw - half) <= av) | (np.abs(aw - half * 0.5) <= av))
        finite = np.isfinite(a) & np.isfinite(b) & np.isfinite(c)
        ap = np.abs(p)
        risky |= finite & ~(np.isfinite(r) & np.isfinite(e) & (np.abs(a) < 2.0 ** 995) & (np.abs(b) < 2.0 ** 995)
                            & ((a == 0) | (b == 0) | (ap > 2.0 ** -968)))   # (a product that underflows to 0 is not exact)
        out = np.where(finite & np.isfinite(r), r, naive)
    lanes = np.flatnonzero(risky & finite)
    if lanes.size:
        from fractions import Fraction
        out = out.copy()
        for i in lanes:
            x = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
            if x == 0:
                out[i] = naive[i]          # an exact zero: the IEEE sign rules, as the unfused sum has them
                continue
            try:
                out[i] = float(x)          # int / int: correctly rounded, subnormals too
            except OverflowError:
                out[i] = np.inf if x > 0 else -np.inf
    return out


def _lane_pair(a, b):
    """Both operands as 32-lane arrays (broadcast_arrays only when one is a scalar)."""
    a, b = np.asarray(a), np.asarray(b)
    if a.shape != (32,) or b.shape != (32,):
        a, b = np.broadcast_arrays(a, b)
    return a, b


def _nonzero_divisor(b, sel, where: str, what: str, opcode: str):
    """``b`` with 1 for its zero lanes that do not execute; a zero in an executing lane is an error."""
    zero = b == 0
    if zero.tobytes() == bytes(zero.size):
        return b
    if np.count_nonzero(zero & sel):
        from porter.emu.errors import CheckFailed
        raise CheckFailed(f"{where}: integer {what} by zero ({opcode})")
    return np.where(zero, b.dtype.type(1), b)


def build_div(ins, d):
    t = type_of(ins.parts)
    if is_float(t):
        approx = "approx" in ins.parts or "full" in ins.parts

        def fdiv(a, b):
            with np.errstate(all="ignore"):
                return (a * (np.float32(1) / b)) if approx else a / b
        return _binary(ins, d, _ftz_binary(fdiv) if _ftz32(ins) else fdiv)
    where = d.where(ins)

    def idiv(a, b, sel):
        a, b = _lane_pair(a, b)
        b = _nonzero_divisor(b, sel, where, "division", ins.opcode)
        if is_signed(t):
            # |a| // |b| with the sign of a * b: negated where exactly one is negative (a zero
            # quotient stays zero); int64, so INT_MIN / -1 wraps in the cast as on the GPU
            a64, b64 = a.astype(np.int64), b.astype(np.int64)
            q = np.abs(a64) // np.abs(b64)
            return np.where((a64 < 0) != (b64 < 0), -q, q).astype(NP[t])
        return a // b
    return _binary_masked(ins, d, idiv)


def build_rem(ins, d):
    t = type_of(ins.parts)
    where = d.where(ins)

    def irem(a, b, sel):
        a, b = _lane_pair(a, b)
        b = _nonzero_divisor(b, sel, where, "remainder", ins.opcode)
        if is_signed(t):
            a64, b64 = a.astype(np.int64), b.astype(np.int64)
            q = np.abs(a64) // np.abs(b64)
            q = np.where((a64 < 0) != (b64 < 0), -q, q)
            return (a64 - q * b64).astype(NP[t])
        return a % b
    return _binary_masked(ins, d, irem)


def build_min(ins, d):
    t = type_of(ins.parts)
    if _ftz32(ins):
        return _binary(ins, d, _ftz_binary(np.fmin))
    return _binary(ins, d, np.fmin if is_float(t) else np.minimum)


def build_max(ins, d):
    t = type_of(ins.parts)
    if _ftz32(ins):
        return _binary(ins, d, _ftz_binary(np.fmax))
    return _binary(ins, d, np.fmax if is_float(t) else np.maximum)


def build_not(ins, d):
    t = type_of(ins.parts)
    return _unary(ins, d, np.logical_not if t == "pred" else np.invert)


def _fixed_shift(a, b, rb, d, u, dt, nb, shift):
    """A register shifted by an immediate (the usual case): the clamp is decided once, at
    decode; fn(values) -> the shifted values, or None for another form."""
    if not (isinstance(b, ptx.Imm) and d.is_reg(a)):
        return None
    k = int(rb(None))
    if k >= nb:                               # shifted out entirely
        zero = np.zeros(32, dtype=dt)
        return lambda v: zero
    ku = u(k)
    return lambda v: shift(v.view(u), ku).view(dt)


def _shift_by(fixed, ra, wd, fast=None):
    def shift_imm(w, m):
        wd(w, fixed(ra(w)), m)
    return shift_imm if fast is None else fast(shift_imm)


def build_shl(ins, d):
    t = type_of(ins.parts)
    nb = bits(t)
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, t), d.src(b, "u32"), d.dst(dst, t)
    u = UINT[nb]
    fixed = _fixed_shift(a, b, rb, d, u, NP[t], nb, np.left_shift)
    if fixed is not None:
        return _shift_by(fixed, ra, wd, fastpath.shift_imm(d, t, dst, a, b, np.left_shift))

    def shl(w, m):
        s = _shift_amount(rb(w), nb)
        v = np.asarray(ra(w)).view(u) if np.ndim(ra(w)) else np.full(32, ra(w)).view(u)
        out = np.where(s >= nb, u(0), v << np.minimum(s, nb - 1).astype(u))
        wd(w, out.view(NP[t]), m)
    return shl


def build_shr(ins, d):
    t = type_of(ins.parts)
    nb = bits(t)
    dst, a, b = ins.operands
    ra, rb, wd = d.src(a, t), d.src(b, "u32"), d.dst(dst, t)
    if is_signed(t):
        def sar(w, m):
            s = np.minimum(np.asarray(rb(w)).astype(np.uint32), nb - 1).astype(NP[t])
            wd(w, np.asarray(ra(w)) >> s, m)
        return sar
    u = UINT[nb]
    fixed = _fixed_shift(a, b, rb, d, u, NP[t], nb, np.right_shift)
    if fixed is not None:
        return _shift_by(fixed, ra, wd, fastpath.shift_imm(d, t, dst, a, b, np.right_shift))

    def shr(w, m):
        s = _shift_amount(rb(w), nb)
        v = np.asarray(ra(w)).view(u) if np.ndim(ra(w)) else np.full(32, ra(w)).view(u)
        out = np.where(s >= nb, u(0), v >> np.minimum(s, nb - 1).astype(u))
        wd(w, out.view(NP[t]), m)
    return shr


def build_clz(ins, d):
    t = type_of(ins.parts)
    nb = bits(t)

    def clz(a):
        # binary search on the leading zero run: exact for any width
        v = np.asarray(a).astype(np.uint64) << np.uint64(64 - nb)
        n = np.zeros(v.shape, dtype=np.uint32)
        s = nb // 2
        while s:
            top_zero = (v >> np.uint64(64 - s)) == 0
            n += np.where(top_zero, np.uint32(s), np.uint32(0))
            v = np.where(top_zero, v << np.uint64(s), v)
            s //= 2
        return np.where(np.asarray(a).astype(np.uint64) == 0, np.uint32(nb), n)
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, "u32")

    def run(w, m):
        wd(w, clz(ra(w)), m)
    return run


def build_popc(ins, d):
    t = type_of(ins.parts)
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, "u32")

    def popc(w, m):
        v = np.asarray(ra(w)).astype(np.uint64)
        c = np.zeros(v.shape, dtype=np.uint32)
        for k in range(bits(t)):
            c += ((v >> np.uint64(k)) & np.uint64(1)).astype(np.uint32)
        wd(w, c, m)
    return popc


def build_bfi(ins, d):
    """bfi.b32/b64 f, a, b, pos, len: b with bits pos..pos+len-1 replaced by a's low len bits
    (pos and len: the low 8 bits of each; len 0 or pos >= width leave b)."""
    t = type_of(ins.parts)
    nb = bits(t)
    dst, a, b, c, e = ins.operands
    ra, rb, rc, re_, wd = d.src(a, t), d.src(b, t), d.src(c, "u32"), d.src(e, "u32"), d.dst(dst, t)

    def bfi(w, m):
        av = np.asarray(ra(w)).astype(np.uint64)
        bv = np.asarray(rb(w)).astype(np.uint64)
        pos = np.asarray(rc(w)).astype(np.int64) & 0xFF
        ln = np.minimum(np.asarray(re_(w)).astype(np.int64) & 0xFF, np.maximum(nb - pos, 0))
        low = np.where(ln >= 64, np.uint64(2**64 - 1),
                       (np.uint64(1) << np.minimum(ln, 63).astype(np.uint64)) - np.uint64(1))
        sh = np.minimum(pos, 63).astype(np.uint64)
        field = (low << sh) & np.uint64((1 << nb) - 1)
        out = np.where(ln > 0, (bv & ~field) | ((av << sh) & field), bv)
        wd(w, out.astype(NP[t]), m)
    return bfi


def build_selp(ins, d):
    t = type_of(ins.parts)
    dst, a, b, p = ins.operands
    fast = fastpath.select(d, t, dst, a, b, p)
    if fast is not None:
        return fast
    ra, rb, rp, wd = d.src(a, t), d.src(b, t), d.src(p, "pred"), d.dst(dst, t)

    def selp(w, m):
        wd(w, np.where(rp(w), ra(w), rb(w)), m)
    return selp


_CMP = {"eq": np.equal, "ne": np.not_equal, "lt": np.less, "le": np.less_equal, "gt": np.greater,
        "ge": np.greater_equal, "lo": np.less, "ls": np.less_equal, "hi": np.greater, "hs": np.greater_equal}


# Float compares in fewer ufuncs than "compare, then NaN test": an IEEE compare is already
# false when either side is NaN, which is what the ordered forms want; an unordered form is
# the negation of the opposite ordered one (true for NaN); ne / equ are the < and > pair.
_FLOAT_CMP = {"eq": np.equal, "lt": np.less, "le": np.less_equal, "gt": np.greater, "ge": np.greater_equal,
              "ne": lambda x, y: np.less(x, y) | np.greater(x, y), "neu": np.not_equal,
              "equ": lambda x, y: ~(np.less(x, y) | np.greater(x, y)),
              "ltu": lambda x, y: ~np.greater_equal(x, y), "leu": lambda x, y: ~np.greater(x, y),
              "gtu": lambda x, y: ~np.less_equal(x, y), "geu": lambda x, y: ~np.less(x, y)}


def build_setp(ins, d):
    parts = ins.parts
    cmp, t = parts[1], type_of(parts)
    combine = parts[2] if len(parts) > 3 and parts[2] in ("and", "or", "xor") else None
    ops = ins.operands
    dst = ops[0]
    second = None
    if isinstance(dst, ptx.Pair):
        dst, second = dst.first, dst.second
    a, b = ops[1], ops[2]
    ra, rb, wd = d.src(a, t), d.src(b, t), d.dst(dst, "pred")
    wd2 = d.dst(second, "pred") if second is not None and second is not ptx.SINK else None
    rc = d.src(ops[3], "pred") if combine else None
    if is_float(t):
        unordered = cmp in ("equ", "neu", "ltu", "leu", "gtu", "geu", "nan")
        base = {"equ": "eq", "neu": "ne", "ltu": "lt", "leu": "le", "gtu": "gt", "geu": "ge"}.get(cmp, cmp)
        if cmp == "num":
            def f(x, y):
                return ~(np.isnan(x) | np.isnan(y))
        elif cmp == "nan":
            def f(x, y):
                return np.isnan(x) | np.isnan(y)
        elif cmp in _FLOAT_CMP:
            f = _FLOAT_CMP[cmp]          # one or two ufuncs (NaN compares: warnings off in the scheduler)
        else:
            fn = _CMP[base]

            def f(x, y):
                nan = np.isnan(x) | np.isnan(y)
                r = fn(x, y)
                return (r | nan) if unordered else (r & ~nan)
    else:
        if cmp not in _CMP:
            raise d.unsupported()
        f = _CMP[cmp]
    if _ftz32(ins):                      # setp.ftz.f32: subnormal inputs compare as zeros of their sign
        cmp_f = f

        def f(x, y):
            if _no_subnormal(x, y):
                return cmp_f(x, y)
            return cmp_f(_flush(x), _flush(y))
    comb = {"and": np.logical_and, "or": np.logical_or, "xor": np.logical_xor}.get(combine)
    if comb is None and wd2 is None:
        fast = fastpath.compare(d, t, dst, a, b, f)
        if fast is not None:
            return fast

    def setp(w, m):
        r = f(ra(w), rb(w))
        if r.shape != (32,):                 # two scalars
            r = np.broadcast_to(r, (32,))
        if comb is not None:
            c = rc(w)
            wd(w, comb(r, c), m)
            if wd2 is not None:
                wd2(w, comb(~r, c), m)
        else:
            wd(w, r, m)
            if wd2 is not None:
                wd2(w, ~r, m)
    return setp


def _float_unary(ins, d, f):
    t = type_of(ins.parts)
    ftz = "ftz" in ins.parts
    out_t = NP[t]

    # the least normal of the instruction's type: rcp/rsqrt.approx.ftz.f64 flush f64 subnormals
    # (below 2^-1022), not everything below f32's 2^-126 (1/1e300 was 0, 1/1e-300 inf)
    tiny = np.float64(np.finfo(np.float64).tiny) if t == "f64" else _F32_TINY

    def flush(x):                       # (a -0.0 input stays -0.0: rcp/rsqrt.approx.ftz of -0.0 is -inf)
        return _flush(x, tiny)

    def g(a):                           # (inf/NaN without warnings: off in the scheduler)
        a = np.asarray(a)
        if ftz:
            a = flush(a)
        r = f(a)
        if type(r) is not np.ndarray or r.dtype is not out_dt:
            r = r.astype(out_t)
        if ftz:
            r = flush(r)
        return r
    out_dt = np.dtype(out_t)
    if ftz and f is np.exp2 and t == "f32":
        return _unary(ins, d, _ex2_ftz(g), t)
    return _unary(ins, d, g, t)


def _ex2_ftz(general):
    """``ex2.approx.ftz.f32`` on a register: the same values as flush, exp2, flush, in fewer
    numpy calls. A flushed input changes nothing (2^x of a subnormal or a zero is 1.0, as
    2^0), and 2^x is never negative, so the only lanes the output flush changes are the
    positive subnormal results (bits 1 .. 0x7FFFFF), which become +0."""
    def g(a):
        if type(a) is not np.ndarray or a.dtype is not _F32 or a.ndim != 1:
            return general(a)
        r = np.exp2(a)
        # below the least normal: a positive subnormal or +0 (2^x is never negative; NaN
        # compares false), and +0 for +0 changes nothing: one compare for the flush
        sub = r < _F32_TINY
        return np.where(sub, np.float32(0), r) if 1 in sub.tobytes() else r
    return g


_F32 = np.dtype(np.float32)


# ---- cvt ---------------------------------------------------------------------------------------

def _round_float_to_int(x, mode):
    with np.errstate(all="ignore"):
        if mode in ("rzi", "rz"):
            return np.trunc(x)
        if mode in ("rmi", "rm"):
            return np.floor(x)
        if mode in ("rpi", "rp"):
            return np.ceil(x)
        return np.rint(x)


_FP8 = {"e4m3x2": (ml_dtypes.float8_e4m3fn, 448.0), "e5m2x2": (ml_dtypes.float8_e5m2, 57344.0)}


def _build_cvt_fp8(ins, d):
    """``cvt.rn.satfinite.{e4m3x2,e5m2x2}.f32 d, a, b`` (a to the upper byte, as bf16x2 packs;
    .satfinite clamps to the largest finite value, NaN stays NaN) and
    ``cvt.rn.{f16x2,bf16x2}.{e4m3x2,e5m2x2} d, a`` (the lower byte to the lower half)
    (PTX ISA "cvt": the packed FP8 conversions)."""
    parts = ins.parts
    if parts[-1] == "f32" and parts[-2] in _FP8:
        if "satfinite" not in parts or "rn" not in parts:
            raise d.unsupported("(the ISA requires .rn.satfinite for f32 -> FP8 pairs)")
        fp8, big = _FP8[parts[-2]]
        dst, hi, lo = ins.operands
        rhi, rlo, wd = d.src(hi, "f32"), d.src(lo, "f32"), d.dst(dst, "b16")

        def code(v):
            v = np.broadcast_to(np.asarray(v, np.float32), (32,))
            v = np.where(np.isnan(v), v, np.clip(v, -big, big))
            return v.astype(fp8).view(np.uint8).astype(np.uint16)

        def pack8(w, m):
            wd(w, (code(rhi(w)) << np.uint16(8)) | code(rlo(w)), m)
        return pack8
    if parts[-1] in _FP8 and parts[-2] in ("f16x2", "bf16x2"):
        fp8, _ = _FP8[parts[-1]]
        out_t = np.float16 if parts[-2] == "f16x2" else ml_dtypes.bfloat16
        dst, a = ins.operands
        ra, wd = d.src(a, "b16"), d.dst(dst, "b32")

        def unpack8(w, m):
            v = np.broadcast_to(np.asarray(ra(w)), (32,)).astype(np.uint16)
            halves = [(v >> np.uint16(8 * k)).astype(np.uint8).view(fp8).astype(np.float32).astype(out_t)
                      .view(np.uint16).astype(np.uint32) for k in (0, 1)]
            wd(w, halves[0] | (halves[1] << np.uint32(16)), m)
        return unpack8
    raise d.unsupported()


_STICKY_LOW = np.uint64((1 << 29) - 1)


def _int64_to_f32(x):
    """``cvt.rn.f32.{s64,u64}``: rounded to nearest even once. Through f64 alone a magnitude of
    2^53 or more is rounded twice (2^60 + 2^36 + 1 became 2^60, not 2^60 + 2^37). There the f32
    guard bit is at 2^29 or above, so the bits below 2^29 matter only as a sticky bit: they
    are replaced by one bit at 2^28, which leaves at most 36 significant bits (exact in f64)
    and the f64 -> f32 rounding the same as the direct one."""
    x = np.asarray(x)
    signed = x.dtype.kind == "i"
    u = x.astype(np.int64 if signed else np.uint64).view(np.uint64)
    neg = (x < 0) if signed else None
    mag = np.where(neg, ~u + np.uint64(1), u) if signed else u      # |-2^63| is 2^63 as a uint64
    big = mag >= np.uint64(1 << 53)
    if 1 in np.asarray(big).tobytes():
        sticky = np.where((mag & _STICKY_LOW) != 0, np.uint64(1 << 28), np.uint64(0))
        mag = np.where(big, (mag & ~_STICKY_LOW) | sticky, mag)
    f = mag.astype(np.float64).astype(np.float32)
    return np.where(neg, -f, f) if signed else f


def build_cvt(ins, d):
    parts = ins.parts
    if any(p in _FP8 for p in parts):
        return _build_cvt_fp8(ins, d)
    types = [p for p in parts[1:] if p in NP]
    mods = [p for p in parts[1:] if p not in NP]
    if len(types) != 2:
        raise d.unsupported()
    dt, st = types
    mode = next((m for m in mods if m in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), "")
    sat = "satfinite" in mods or "sat" in mods
    if dt == "bf16x2" and st == "f32":            # cvt.rn.bf16x2.f32 d, hi, lo
        dst, hi, lo = ins.operands
        rhi, rlo, wd = d.src(hi, "f32"), d.src(lo, "f32"), d.dst(dst, "b32")

        def pack(w, m):
            # both halves rounded by one conversion: lane-major (lo, hi) pairs of bf16 are,
            # little-endian, the lanes' 32-bit words with hi in the upper half
            x = np.empty((32, 2), np.float32)
            x[:, 0] = rlo(w)
            x[:, 1] = rhi(w)
            wd(w, x.astype(ml_dtypes.bfloat16).view(np.uint32).reshape(32), m)
        plo, phi, pd = fastpath.plain(d, lo, "f32"), fastpath.plain(d, hi, "f32"), fastpath.plain(d, dst, "b32")
        if plo is None or phi is None or pd is None or pd[1] is not None:
            return pack
        ilo, ihi, io = plo[0], phi[0], pd[0]

        def pack_regs(w, m):
            """f32 registers into a b32 register: their stored bits copied into the pairs
            (no operand views) and the word stored as ``wd`` would (poisoned: ``pack``)."""
            if w.poisoned:
                return pack(w, m)
            r = w.r
            x = np.empty((32, 2), np.uint32)
            x[:, 0] = r[ilo]
            x[:, 1] = r[ihi]
            v = x.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint32).reshape(32)
            r[io] = v if m is None else np.where(m, v, r[io])
        return pack_regs
    if dt == "f16x2" and st == "f32":
        dst, hi, lo = ins.operands
        rhi, rlo, wd = d.src(hi, "f32"), d.src(lo, "f32"), d.dst(dst, "b32")

        def pack16(w, m):
            h = np.asarray(rhi(w), np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
            lw = np.asarray(rlo(w), np.float32).astype(np.float16).view(np.uint16).astype(np.uint32)
            wd(w, (h << np.uint32(16)) | lw, m)
        return pack16
    dst, a = ins.operands
    if dt == "bf16" and st == "f32":
        ra, wd = d.src(a, "f32"), d.dst(dst, "b16")
        return lambda w, m: wd(w, np.asarray(ra(w), np.float32).astype(ml_dtypes.bfloat16).view(np.uint16), m)
    if dt == "f32" and st == "bf16":
        ra, wd = d.src(a, "b16"), d.dst(dst, "f32")
        return lambda w, m: wd(w, np.asarray(ra(w)).view(ml_dtypes.bfloat16).astype(np.float32), m)
    if dt == "f32" and st == "f16":
        ra, wd = d.src(a, "f16"), d.dst(dst, "f32")
        return lambda w, m: wd(w, np.asarray(ra(w)).astype(np.float32), m)
    if dt == "f16" and st == "f32":
        ra, wd = d.src(a, "f32"), d.dst(dst, "f16")
        return lambda w, m: wd(w, np.asarray(ra(w)).astype(np.float16), m)
    ra, wd = d.src(a, st), d.dst(dst, dt)
    ndt = NP[dt]
    if is_float(dt) and is_float(st):
        return lambda w, m: wd(w, np.asarray(ra(w)).astype(ndt), m)
    if is_float(dt) and dt == "f32" and bits(st) == 64:     # 64-bit int -> f32: one rounding, not two
        return lambda w, m: wd(w, _int64_to_f32(np.asarray(ra(w))), m)
    if is_float(dt):                                # int -> float (round to nearest)
        return lambda w, m: wd(w, np.asarray(ra(w)).astype(np.float64).astype(ndt), m)
    if is_float(st):                                # float -> int: round, saturate, NaN -> 0
        info = np.iinfo(ndt)

        def f2i(w, m):
            x = _round_float_to_int(np.asarray(ra(w), np.float64), mode)
            x = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
            wd(w, x.astype(ndt), m)
        return f2i
    # integer -> integer: sign/zero extension by the source type, truncation by the
    # destination's width, saturation with .sat
    src_dt = NP[st]
    if sat:
        info = np.iinfo(ndt)

        def sat_cvt(w, m):
            x = np.asarray(ra(w)).astype(np.int64 if is_signed(st) else np.uint64)
            wd(w, np.clip(x, info.min, info.max).astype(ndt), m)
        return sat_cvt
    wide = np.int64 if is_signed(st) else np.uint64

    def icvt(w, m):
        wd(w, np.asarray(ra(w), src_dt).astype(wide).astype(ndt), m)
    return icvt


def build_cvta(ins, d):
    """cvta.{param,shared,global} (to generic) and cvta.to.{...} (from generic)."""
    from porter.emu import memory as mem

    parts = ins.parts
    t = type_of(parts)
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, t)
    to = parts[1] == "to"
    space = parts[2] if to else parts[1]
    base = {"global": 0, "param": mem.PARAM_GENERIC, "shared": mem.SHARED_GENERIC, "const": 0}.get(space)
    if base is None or (space == "shared" and "cluster" in parts):
        raise d.unsupported()
    b = np.uint64(base) if t.endswith("64") else np.uint32(base & 0xFFFFFFFF)
    where = d.where(ins)

    def cvta(w, m):
        v = np.asarray(ra(w)).astype(np.uint64)
        if to:
            if base and ((v < np.uint64(base)) | (v >= np.uint64(base + mem.WINDOW)))[m if m is not None else slice(None)].any():
                from porter.emu.errors import CheckFailed
                raise CheckFailed(f"{where}: {ins.opcode} of an address outside the generic {space} window")
            r = v - np.uint64(base)
        else:
            r = v + np.uint64(base)
        wd(w, r.astype(NP[t]), m)
    del b
    return cvta


# The instructions that are one numpy function of their operands, by opcode.
_ELEMENTWISE_BINARY = {"add": _wrap_int(lambda a, b: a + b), "sub": _wrap_int(lambda a, b: a - b),
                       "and": np.bitwise_and, "or": np.bitwise_or, "xor": np.bitwise_xor,
                       "copysign": lambda a, b: np.copysign(b, a)}
_ELEMENTWISE_UNARY = {"neg": lambda a: -a, "abs": np.abs}
_FLOAT_UNARY = {"ex2": np.exp2, "lg2": np.log2, "rsqrt": lambda a: np.float32(1) / np.sqrt(a), "sqrt": np.sqrt,
                "rcp": lambda a: np.float32(1) / a, "sin": np.sin, "cos": np.cos, "tanh": np.tanh}


# The integer ones whose result bits do not depend on signedness (two's complement): run
# on the registers' unsigned storage with no view (fastpath.binary's ``raw``).
_RAW_INT = {"add": np.add, "sub": np.subtract, "and": np.bitwise_and, "or": np.bitwise_or,
            "xor": np.bitwise_xor}


# The float ones as their ufunc: the same values as the operator wrappers above (which only
# add an overflow guard for two integer scalars), one Python call fewer per instruction.
_FLOAT_UFUNC = {"add": np.add, "sub": np.subtract}


def _table_builder(make, f, raw=None, ufunc=None):
    def build(ins, d):
        t = type_of(ins.parts)
        if raw is not None and not is_float(t):
            return make(ins, d, f, raw)
        if make is not _float_unary and _ftz32(ins):     # add/sub/neg/abs.ftz.f32 (_float_unary flushes itself)
            g = ufunc or f
            return make(ins, d, _ftz_binary(g) if make is _binary else _ftz_unary(g))
        if ufunc is not None and t in ("f16", "f32", "f64"):
            return make(ins, d, ufunc)
        return make(ins, d, f)
    return build


BUILDERS = {
    **{op: _table_builder(_binary, f, _RAW_INT.get(op), _FLOAT_UFUNC.get(op)) for op, f in _ELEMENTWISE_BINARY.items()},
    **{op: _table_builder(_unary, f) for op, f in _ELEMENTWISE_UNARY.items()},
    **{op: _table_builder(_float_unary, f) for op, f in _FLOAT_UNARY.items()},
    "mov": build_mov, "mul": build_mul, "mad": build_mad, "fma": build_fma, "div": build_div, "rem": build_rem,
    "min": build_min, "max": build_max, "not": build_not, "shl": build_shl, "shr": build_shr, "clz": build_clz,
    "popc": build_popc, "bfi": build_bfi, "selp": build_selp, "setp": build_setp, "cvt": build_cvt,
    "cvta": build_cvta,
}
