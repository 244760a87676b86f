"""The packed and narrow ``cvt`` forms of block-scaled and quantizing kernels (PTX ISA 9.0,
9.7.9 "cvt" and "cvt.pack"), which the plain ``cvt`` builder lacks or took
without their modifiers:

* ``cvt.rn{.relu}{.satfinite}.{f16x2,bf16x2}.f32 d, a, b`` and the scalar ``.f16/.bf16``:
  ``.relu`` clamps below at +0 (NaN stays NaN), ``.satfinite`` clamps to +-MAX_NORM
  (NaN stays NaN); a goes to the upper half;
* ``cvt.rn.satfinite{.relu}.{e2m1x2,e2m3x2,e3m2x2,e4m3x2,e5m2x2}.f32 d, a, b`` (a to the
  upper element) and ``...{e4m3x2,e5m2x2}.f16x2 d, a`` (the upper half to the upper byte);
  the FP4/FP6 formats have no NaN or infinity: .satfinite takes NaN to +MAX_NORM;
* ``cvt.rn{.relu}.f16x2.{e2m1x2,e2m3x2,e3m2x2} d, a``: the low element to the low half;
* ``cvt.{rz,rp}{.satfinite}.ue8m0x2.f32 d, a, b`` (power-of-two scale exponents, rounded
  toward zero or up; .satfinite keeps them finite, 0xfe at most; NaN gives 0xff) and
  ``cvt.rn.bf16x2.ue8m0x2 d, a`` (2^(e-127) in each half; 0xff is NaN);
* ``cvt.{rn,rna,rz}{.satfinite}.tf32.f32`` (10 mantissa bits, the low 13 bits zero);
* ``cvt{.rni,...}.sat`` between float types (clamp to [0, 1], NaN to 0);
* ``cvt.pack.sat.{u8,s8,u4,s4,u16,s16}.s32.b32 d, a, b, c``: a and b saturated to the
  type and packed as (c << 2n) | (a << n) | b (u16/s16: no c).
"""

from __future__ import annotations

import ml_dtypes
import numpy as np

from porter.emu.decode import NP
from porter.emu.ops.packed_float import encode, unpack

_NARROW = {  # format: (ml_dtypes type, bits, MAX_NORM, has NaN)
    "e2m1x2": (ml_dtypes.float4_e2m1fn, 4, 6.0, False),
    "e2m3x2": (ml_dtypes.float6_e2m3fn, 6, 7.5, False),
    "e3m2x2": (ml_dtypes.float6_e3m2fn, 6, 28.0, False),
    "e4m3x2": (ml_dtypes.float8_e4m3fn, 8, 448.0, True),
    "e5m2x2": (ml_dtypes.float8_e5m2, 8, 57344.0, True),
}
_HALF_MAX = {"f16": 65504.0, "bf16": float(ml_dtypes.finfo(ml_dtypes.bfloat16).max)}
_LANES = 32


def _lanes(v, dt):
    return np.broadcast_to(np.asarray(v), (_LANES,)).astype(dt)


def _narrow_code(x: np.ndarray, fmt: str, relu: bool) -> np.ndarray:
    """float64 -> the narrow format's code (uint64, its low ``bits`` bits), .rn.satfinite."""
    dt, nbits, big, has_nan = _NARROW[fmt]
    nan = np.isnan(x)
    if relu:
        x = np.where(nan, x, np.maximum(x, 0.0))
    x = np.where(nan, x if has_nan else big, np.clip(x, -big, big))
    with np.errstate(all="ignore"):
        code = x.astype(np.float32).astype(dt).view(np.uint8).astype(np.uint64)
    return code & np.uint64((1 << nbits) - 1)


def _narrow_value(code: np.ndarray, fmt: str) -> np.ndarray:
    dt, nbits, _, _ = _NARROW[fmt]
    c = (np.asarray(code).astype(np.uint64) & np.uint64((1 << nbits) - 1)).astype(np.uint8)
    return c.view(dt).astype(np.float32).astype(np.float64)


def _half_round(x, kind, relu, satfinite):
    nan = np.isnan(x)
    if relu:
        x = np.where(nan, x, np.maximum(x, 0.0))
    if satfinite:
        big = _HALF_MAX[kind]
        x = np.where(nan, x, np.clip(x, -big, big))
    return encode(x, kind)


def _build_half_pack(ins, d, dst_t, srcs):
    kind = dst_t.rstrip("x2")
    relu, satfinite = "relu" in ins.parts, "satfinite" in ins.parts
    readers = [d.src(s, "f32") for s in srcs]
    wd = d.dst(ins.operands[0], "b32" if dst_t.endswith("x2") else "b16")
    out_dt = np.uint32 if dst_t.endswith("x2") else np.uint16

    def run(w, m):
        vals = [_half_round(_lanes(r(w), np.float64), kind, relu, satfinite) for r in readers]
        out = vals[0] if len(vals) == 1 else (vals[0] << np.uint64(16)) | vals[1]
        wd(w, out.astype(out_dt), m)
    return run


def _build_narrow_pack(ins, d, fmt, src_t):
    parts = ins.parts
    if "rn" not in parts or "satfinite" not in parts:
        raise d.unsupported("(the ISA requires .rn.satfinite for conversions to FP8/FP6/FP4 pairs)")
    relu = "relu" in parts
    nbits = _NARROW[fmt][1]
    out_t = "b8" if fmt == "e2m1x2" else "b16"
    wd = d.dst(ins.operands[0], out_t)
    width = 4 if nbits == 4 else 8                      # FP6 codes sit in the low 6 bits of each byte
    if src_t == "f32":
        rhi, rlo = d.src(ins.operands[1], "f32"), d.src(ins.operands[2], "f32")

        def values(w):
            return _lanes(rhi(w), np.float64), _lanes(rlo(w), np.float64)
    else:                                               # one f16x2 register: its upper half is a
        ra = d.src(ins.operands[1], "b32")

        def values(w):
            lo, hi = unpack(ra(w), "f16", 2)
            return hi, lo

    def run(w, m):
        hi, lo = values(w)
        code = (_narrow_code(hi, fmt, relu) << np.uint64(width)) | _narrow_code(lo, fmt, relu)
        wd(w, code.astype(NP[out_t]), m)
    return run


def _build_narrow_unpack(ins, d, dst_t, fmt):
    kind = dst_t[:-2]
    relu = "relu" in ins.parts
    width = 4 if fmt == "e2m1x2" else 8
    ra = d.src(ins.operands[1], "b8" if fmt == "e2m1x2" else "b16")
    wd = d.dst(ins.operands[0], "b32")

    def run(w, m):
        v = _lanes(ra(w), np.uint64)
        halves = []
        for k in (0, 1):
            x = _narrow_value(v >> np.uint64(width * k), fmt)
            halves.append(_half_round(x, kind, relu, False))
        wd(w, (halves[0] | (halves[1] << np.uint64(16))).astype(np.uint32), m)
    return run


def _ue8m0(x: np.ndarray, up: bool, satfinite: bool) -> np.ndarray:
    """float64 -> the ue8m0 exponent byte: 2^(e-127) rounded toward zero (rz) or up (rp)."""
    nan = np.isnan(x)
    ax = np.abs(np.where(nan, 1.0, x))
    inf = np.isinf(ax)
    mant, exp = np.frexp(np.where(inf | (ax == 0), 1.0, ax))       # ax = mant * 2^exp, mant in [0.5, 1)
    k = exp.astype(np.int64) - 1                                    # floor(log2 ax)
    if up:
        k = k + (mant != 0.5)
    code = k + 127
    code = np.where(ax == 0, 0, code)
    hi = 254 if satfinite else 255
    code = np.where(inf, hi, np.clip(code, 0, hi))
    return np.where(nan, 255, code).astype(np.uint64)


def _build_ue8m0_pack(ins, d):
    parts = ins.parts
    up = "rp" in parts
    if not up and "rz" not in parts:
        raise d.unsupported("(ue8m0x2 conversions round .rz or .rp)")
    satfinite = "satfinite" in parts
    rhi, rlo = d.src(ins.operands[1], "f32"), d.src(ins.operands[2], "f32")
    wd = d.dst(ins.operands[0], "b16")

    def run(w, m):
        hi = _ue8m0(_lanes(rhi(w), np.float64), up, satfinite)
        lo = _ue8m0(_lanes(rlo(w), np.float64), up, satfinite)
        wd(w, ((hi << np.uint64(8)) | lo).astype(np.uint16), m)
    return run


def _build_ue8m0_unpack(ins, d):
    ra, wd = d.src(ins.operands[1], "b16"), d.dst(ins.operands[0], "b32")

    def bf16(code):
        # bf16 has f32's 8-bit exponent: 2^(e-127) is exponent field e (e=0: the subnormal 2^-127)
        return np.where(code == 255, np.uint64(0x7FFF), np.where(code == 0, np.uint64(0x0040), code << np.uint64(7)))

    def run(w, m):
        v = _lanes(ra(w), np.uint64)
        lo, hi = v & np.uint64(0xFF), (v >> np.uint64(8)) & np.uint64(0xFF)
        wd(w, (bf16(lo) | (bf16(hi) << np.uint64(16))).astype(np.uint32), m)
    return run


def _build_tf32(ins, d):
    parts = ins.parts
    mode = next((p for p in parts if p in ("rn", "rna", "rz")), None)
    if mode is None:
        raise d.unsupported("(tf32 rounds .rn, .rna or .rz)")
    satfinite = "satfinite" in parts
    ra, wd = d.src(ins.operands[1], "f32"), d.dst(ins.operands[0], "b32")
    big = np.uint64(0x7F7FE000)                          # the largest finite tf32

    def run(w, m):
        x = _lanes(ra(w), np.float32)
        b = x.view(np.uint32).astype(np.uint64)
        sign, mag = b & np.uint64(0x80000000), b & np.uint64(0x7FFFFFFF)
        low = mag & np.uint64(0x1FFF)
        base = mag & ~np.uint64(0x1FFF)
        if mode == "rz":
            r = base
        elif mode == "rna":
            r = base + np.where(low >= np.uint64(0x1000), np.uint64(0x2000), np.uint64(0))
        else:
            odd = (base >> np.uint64(13)) & np.uint64(1)
            up = (low > np.uint64(0x1000)) | ((low == np.uint64(0x1000)) & (odd == 1))
            r = base + np.where(up, np.uint64(0x2000), np.uint64(0))
        special = mag >= np.uint64(0x7F800000)           # inf / NaN keep their bits (NaN canonical)
        r = np.where(special, np.where(mag > np.uint64(0x7F800000), np.uint64(0x7FFFFFFF), mag), r)
        if satfinite:
            r = np.where(~special & (r > big), big, r)
            r = np.where(mag == np.uint64(0x7F800000), big, r)
        r = np.where(mag > np.uint64(0x7F800000), r, r | sign)
        wd(w, r.astype(np.uint32), m)
    return run


def _build_float_sat(ins, d, dt, st):
    mode = next((p for p in ins.parts if p in ("rn", "rz", "rm", "rp", "rni", "rzi", "rmi", "rpi")), "")
    ra, wd = d.src(ins.operands[1], st), d.dst(ins.operands[0], dt)
    out = NP[dt]
    ftz = "ftz" in ins.parts and st == "f32"     # (cvt.ftz.sat.f32.f32: __saturatef under -ftz)

    def run(w, m):
        x = _lanes(ra(w), np.float64)
        if ftz:                                  # a subnormal f32 input is a zero of its sign (PTX ISA 9.7.3)
            x = np.where(np.abs(x) < np.finfo(np.float32).tiny, np.copysign(0.0, x), x)
        with np.errstate(all="ignore"):
            if mode in ("rni", "rzi", "rmi", "rpi"):
                x = {"rni": np.rint, "rzi": np.trunc, "rmi": np.floor, "rpi": np.ceil}[mode](x)
            x = np.where(np.isnan(x), 0.0, np.clip(x, 0.0, 1.0))
        wd(w, x.astype(out), m)
    return run


_PACK_TYPES = {"u8": (8, 0, 255), "s8": (8, -128, 127), "u4": (4, 0, 15), "s4": (4, -8, 7),
               "u16": (16, 0, 65535), "s16": (16, -32768, 32767)}


def _build_cvt_pack(ins, d):
    parts = ins.parts
    conv = next((p for p in parts if p in _PACK_TYPES), None)
    if conv is None or "sat" not in parts or parts[-2:] != ["s32", "b32"]:
        raise d.unsupported("(cvt.pack.sat.{u8,s8,u4,s4,u16,s16}.s32.b32)")
    n, lo, hi = _PACK_TYPES[conv]
    ops = ins.operands
    ra, rb = d.src(ops[1], "s32"), d.src(ops[2], "s32")
    rc = d.src(ops[3], "b32") if len(ops) > 3 else None
    wd = d.dst(ops[0], "b32")
    mask = np.int64((1 << n) - 1)

    def run(w, m):
        ta = np.clip(_lanes(ra(w), np.int64), lo, hi) & mask
        tb = np.clip(_lanes(rb(w), np.int64), lo, hi) & mask
        out = (ta << n) | tb
        if n != 16 and rc is not None:
            out = out | (_lanes(rc(w), np.int64) << (2 * n))
        wd(w, (out & 0xFFFFFFFF).astype(np.uint32), m)
    return run


def build_cvt_form(ins, d):
    parts = ins.parts
    if parts[1] == "pack":
        return _build_cvt_pack(ins, d)
    types = [p for p in parts[1:] if p in NP or p in _NARROW or p in ("ue8m0x2", "tf32")]
    dst_t, src_t = types[0], types[-1]
    if dst_t in _NARROW and src_t in ("f32", "f16x2"):
        return _build_narrow_pack(ins, d, dst_t, src_t)
    if src_t in _NARROW and dst_t in ("f16x2", "bf16x2"):
        if src_t in ("e4m3x2", "e5m2x2") and "relu" not in parts:
            raise d.unsupported()                        # (the plain builder's form; not reached)
        return _build_narrow_unpack(ins, d, dst_t, src_t)
    if dst_t == "ue8m0x2" and src_t == "f32":
        return _build_ue8m0_pack(ins, d)
    if dst_t == "bf16x2" and src_t == "ue8m0x2":
        return _build_ue8m0_unpack(ins, d)
    if dst_t == "tf32" and src_t == "f32":
        return _build_tf32(ins, d)
    if dst_t in ("f16x2", "bf16x2", "f16", "bf16") and src_t == "f32":
        srcs = ins.operands[1:3] if dst_t.endswith("x2") else ins.operands[1:2]
        return _build_half_pack(ins, d, dst_t, srcs)
    if dst_t[0] == "f" and src_t[0] == "f" and "sat" in parts:
        return _build_float_sat(ins, d, dst_t, src_t)
    raise d.unsupported()


def _matches(ins) -> bool:
    parts = ins.parts
    if parts[1] == "pack":
        return True
    if any(p in ("e2m1x2", "e2m3x2", "e3m2x2", "ue8m0x2", "tf32") for p in parts):
        return True
    if any(p in ("e4m3x2", "e5m2x2") for p in parts) and ("f16x2" in parts[-1:] or "relu" in parts):
        return True
    types = [p for p in parts[1:] if p in NP]
    if len(types) == 2 and types[1] == "f32" and types[0] in ("f16x2", "bf16x2", "f16", "bf16"):
        return "relu" in parts or "satfinite" in parts
    return len(types) == 2 and types[0][0] == "f" and types[1][0] == "f" and "sat" in parts


FORMS = [("cvt", _matches, build_cvt_form)]
