"""``cvt`` between floating-point formats and from integers with the rounding the ISA states
(PTX ISA 9.0, 9.7.9 "cvt": .rn/.rz/.rm/.rp for a narrowing float conversion and for an
integer source; .rni/.rzi/.rmi/.rpi round a float to an integral float (``rintf``,
``truncf``, ``floorf``, ``ceilf``); .ftz flushes f32 subnormals; .sat clamps to [0, 1]),
and every conversion that has ``.bf16`` on one side and not ``.f32`` on the other.

The plain ``cvt`` builder converts floats with numpy casts: it rounded every narrowing to
nearest whatever the modifier said, returned ``cvt.rmi.f32.f32`` (``floorf``) unrounded, and
read or wrote ``.bf16`` as a 16-bit integer outside the f32 <-> bf16 pair: silent wrong
numbers. Here the source is decoded to its exact value (float64 holds every f16, bf16 and f32
value; an integer source is compared exactly as a Python int), rounded to nearest even into
the destination, and then stepped one unit toward the value the directed mode asks for when
the nearest value lies on the wrong side. NaN results are the canonical NaN; a float to
integer conversion saturates and takes NaN to 0, as the ISA states.
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.emu.decode import NP, bits

_LANES = 32
_FLOATS = ("f16", "bf16", "f32", "f64")
_DIRECTED = ("rz", "rm", "rp")
_INTEGRAL = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}
_BITS_DT = {"f16": np.uint16, "bf16": np.uint16, "f32": np.uint32, "f64": np.uint64}
_NAN = {"f16": 0x7FFF, "bf16": 0x7FFF, "f32": 0x7FFFFFFF, "f64": 0x7FFFFFFFFFFFFFFF}
_TINY32 = float(np.finfo(np.float32).tiny)


def _lanes(v, dt):
    return np.broadcast_to(np.asarray(v), (_LANES,)).astype(dt)


def _decode(raw, t: str) -> np.ndarray:
    """A register's raw bits of float type ``t`` -> exact float64 values."""
    b = _lanes(raw, _BITS_DT[t])
    if t == "bf16":
        return b.view(ml_dtypes.bfloat16).astype(np.float32).astype(np.float64)
    return b.view({"f16": np.float16, "f32": np.float32, "f64": np.float64}[t]).astype(np.float64)


def _to_value(bits_: np.ndarray, t: str) -> np.ndarray:
    return _decode(bits_, t)


def _nearest(x: np.ndarray, t: str) -> np.ndarray:
    """float64 -> the nearest value of ``t`` (ties to even), as raw bits."""
    with np.errstate(all="ignore"):
        if t == "f64":
            return x.view(np.uint64).copy()
        if t == "f16":
            return x.astype(np.float16).view(np.uint16)
        if t == "f32":
            return x.astype(np.float32).view(np.uint32)
        # bf16: round to odd into f32 first, so the f32 -> bf16 rounding to nearest is exact
        r = x.astype(np.float32)
        back = r.astype(np.float64)
        over = np.abs(back) > np.abs(x)
        r = np.where(over & np.isfinite(x), np.nextafter(r, np.float32(0)), r)
        inexact = (r.astype(np.float64) != x) & np.isfinite(x)
        rb = r.view(np.uint32) | np.where(inexact, np.uint32(1), np.uint32(0))
        return rb.view(np.float32).astype(ml_dtypes.bfloat16).view(np.uint16)


def _step(b: np.ndarray, t: str, up: bool) -> np.ndarray:
    """The next representable value of ``t`` above (up) or below the raw bits ``b``."""
    dt = _BITS_DT[t]
    b = b.astype(np.uint64)
    sign = np.uint64(1) << np.uint64(8 * np.dtype(dt).itemsize - 1)
    neg = (b & sign) != 0
    mag = b & ~sign
    zero = mag == 0
    # away from zero on the side the step goes to, toward zero on the other
    grow = np.where(up, ~neg, neg)
    out = np.where(grow, b + np.uint64(1), b - np.uint64(1))
    out = np.where(zero, np.where(up, np.uint64(1), sign | np.uint64(1)), out)
    return out.astype(dt)


def _round(x, t: str, mode: str, exact_cmp=None) -> np.ndarray:
    """Exact values ``x`` (float64; ``exact_cmp`` compares them exactly when float64 is not
    exact, e.g. 64-bit integers) -> raw bits of ``t`` rounded by ``mode``."""
    x = np.asarray(x, np.float64)
    r = _nearest(x, t)
    if mode in _DIRECTED:
        val = _to_value(r, t)
        if exact_cmp is None:
            above, below = val > x, val < x
        else:
            above, below = exact_cmp(val)
        with np.errstate(invalid="ignore"):
            if mode == "rz":
                fix_down = above & (x >= 0)
                fix_up = below & (x < 0)
            elif mode == "rm":
                fix_down, fix_up = above, np.zeros_like(above)
            else:
                fix_down, fix_up = np.zeros_like(below), below
        r = np.where(fix_down, _step(r, t, up=False), r)
        r = np.where(fix_up, _step(r, t, up=True), r)
    return np.where(np.isnan(x), np.asarray(_NAN[t], dtype=np.uint64).astype(_BITS_DT[t]), r).astype(_BITS_DT[t])


def build_cvt_round(ins, d):
    parts = ins.parts
    types = [p for p in parts[1:] if p in NP]
    if len(types) != 2:
        raise d.unsupported()
    dt, st = types
    mode = next((p for p in parts if p in ("rn", "rna") + _DIRECTED + tuple(_INTEGRAL)), "rn")
    if mode == "rna":
        raise d.unsupported("(.rna is for .tf32 only)")
    ftz, sat = "ftz" in parts, "sat" in parts
    dst, a = ins.operands
    src_reg = {"f16": "b16", "bf16": "b16", "f32": "f32", "f64": "f64"}.get(st, st)
    ra = d.src(a, src_reg)
    wd = d.dst(dst, {"f16": "b16", "bf16": "b16"}.get(dt, dt))

    if st in _FLOATS:
        def value(w):
            v = np.asarray(ra(w))
            v = _lanes(v, v.dtype)
            x = _decode(v.view(_BITS_DT[st]) if v.dtype.kind == "f" else v, st)
            if ftz and st == "f32":
                x = np.where(np.abs(x) < _TINY32, np.copysign(0.0, x), x)
            return x, None
    else:
        def value(w):
            v = _lanes(ra(w), NP[st])
            ints = [int(z) for z in v]

            def exact_cmp(val):               # Python compares int and float exactly
                above = np.array([float(q) > i for q, i in zip(val, ints)])
                below = np.array([float(q) < i for q, i in zip(val, ints)])
                return above, below
            return v.astype(np.float64), exact_cmp

    if dt in _FLOATS:
        def run(w, m):
            x, cmp = value(w)
            if mode in _INTEGRAL:
                with np.errstate(all="ignore"):
                    x = _INTEGRAL[mode](x)
            if sat:
                x = np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 1.0))
                cmp = None
            r = _round(x, dt, mode if mode in _DIRECTED else "rn", cmp)
            if ftz and dt == "f32":
                v = r.view(np.float32)
                r = np.where(np.abs(v) < np.float32(_TINY32), (r & np.uint32(0x80000000)), r).astype(np.uint32)
            wd(w, r.view({"f16": np.uint16, "bf16": np.uint16, "f32": np.float32, "f64": np.float64}[dt]), m)
        return run

    # float (bf16 here) -> integer: round by the integral mode, NaN to 0, saturate
    info = np.iinfo(NP[dt])

    def f2i(w, m):
        x, _ = value(w)
        with np.errstate(all="ignore"):
            x = _INTEGRAL.get(mode, np.rint)(x)
            x = np.where(np.isnan(x), 0, np.clip(x, info.min, info.max))
        wd(w, x.astype(NP[dt]), m)
    return f2i


def _matches(ins) -> bool:
    parts = ins.parts
    types = [p for p in parts[1:] if p in NP]
    if len(types) != 2 or parts[1] == "pack":
        return False
    dt, st = types
    if "bf16" in (dt, st) and {dt, st} != {"bf16", "f32"}:
        return not (dt.endswith("x2") or st.endswith("x2"))
    if "bf16" in (dt, st) and any(r in parts for r in _DIRECTED):
        return True
    if dt in _FLOATS and st in _FLOATS:
        if any(r in parts for r in _INTEGRAL):
            return True
        if "ftz" in parts and "f32" in (dt, st):
            return True                 # cvt.ftz.f64.f32, cvt.rn.ftz.f32.f64, cvt.ftz{.sat}.f32.f32: the plain cvt does not flush
        narrowing = bits(dt) < bits(st)
        return narrowing and any(r in parts for r in _DIRECTED)
    if dt in _FLOATS and st not in _FLOATS:
        return any(r in parts for r in _DIRECTED)
    return False


FORMS = [("cvt", _matches, build_cvt_round)]
BUILDERS: dict = {}
