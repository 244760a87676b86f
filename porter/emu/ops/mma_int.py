"""Integer ``mma.sync`` (PTX ISA 9.0, 9.7.14.5.14 "mma"): ``mma.sync.aligned.m16n8k32.row.col
{.satfinite}.s32.{s8,u8}.{s8,u8}.s32`` and ``m16n8k64 ... .s32.{s4,u4}.{s4,u4}.s32`` (int8 /
int4 GEMMs of Ampere and later). The fragments are the ISA's 8-bit (m16n8k32) and 4-bit
(m16n8k64) layouts, the same ``porter.emu.units.mma_sync.fragment_layout`` gives the FP8 and
FP4 kinds; C and D are one .s32 per register in the m16n8 accumulator layout. The products
and sums are exact; D wraps modulo 2^32, or with ``.satfinite`` clamps to the s32 range.
The other integer shapes (m8n8k16, m16n8k16 .s8, m8n8k32 .s4, m8n8k128 .b1) are Unsupported.
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.ops.mma_sync import _whole_warp
from porter.emu.units import mma_sync as unit

_SHAPES = {"m16n8k32": 8, "m16n8k64": 4}
_INT = {"s8": (8, True), "u8": (8, False), "s4": (4, True), "u4": (4, False)}


def _elements(regs: np.ndarray, shape: str, operand: str, ty: str) -> np.ndarray:
    """The whole A (16 x K) or B (K x 8) integer matrix from the lanes' registers."""
    width, signed = _INT[ty]
    rows, cols = unit.fragment_layout(shape, operand)
    per = 32 // width
    k = 32 if shape == "m16n8k32" else 64
    out = np.zeros((16, k) if operand == "a" else (k, 8), np.int64)
    for e in range(per):
        v = ((regs.astype(np.int64) >> (width * e)) & ((1 << width) - 1))        # (32, regs)
        if signed:
            v = np.where(v >= 1 << (width - 1), v - (1 << width), v)
        out[rows[:, :, e], cols[:, :, e]] = v
    return out


def build_mma_int(ins, d):
    parts = ins.parts
    shape = next((p for p in parts if p in _SHAPES), None)
    types = [p for p in parts if p in ("s32",) + tuple(_INT)]
    if shape is None or parts[1:3] != ["sync", "aligned"] or "row" not in parts or "col" not in parts \
            or len(types) != 4 or types[0] != "s32" or types[3] != "s32":
        raise d.unsupported("(integer mma.sync: m16n8k32 .s8/.u8 or m16n8k64 .s4/.u4, .row.col, s32 D and C)")
    atype, btype = types[1], types[2]
    if _INT[atype][0] != _SHAPES[shape] or _INT[btype][0] != _SHAPES[shape]:
        raise d.unsupported(f"(.{shape} takes {_SHAPES[shape]}-bit A and B: the ISA's shapes for integer mma)")
    sat = "satfinite" in parts
    dst, a, b, c = ins.operands
    if not all(isinstance(x, ptx.Vec) for x in (dst, a, b, c)) or (len(dst.items), len(a.items), len(b.items),
                                                                     len(c.items)) != (4, 4, 2, 4):
        raise d.unsupported("(expected {d0..d3}, {a0..a3}, {b0, b1}, {c0..c3})")
    ra = [d.src(x, "b32") for x in a.items]
    rb = [d.src(x, "b32") for x in b.items]
    rc = [d.src(x, "s32") for x in c.items]
    wd = [d.dst(x, "s32") for x in dst.items]
    where = d.where(ins)
    what = f"mma.sync.{shape}.s32.{atype}.{btype}"
    crow, ccol = unit.fragment_layout(shape, "c")

    def lanes(w, fs, dt):
        return np.stack([np.broadcast_to(np.asarray(f(w)), (32,)).astype(dt) for f in fs], axis=1)

    def mma(w, m):
        res = _whole_warp(w, m, where, what)
        if res is not None:
            return res
        A = _elements(lanes(w, ra, np.uint32), shape, "a", atype)
        B = _elements(lanes(w, rb, np.uint32), shape, "b", btype)
        C = np.zeros((16, 8), np.int64)
        C[crow[:, :, 0], ccol[:, :, 0]] = lanes(w, rc, np.int32).astype(np.int64)
        D = A @ B + C
        if sat:
            D = np.clip(D, -2 ** 31, 2 ** 31 - 1)
        D = ((D + 2 ** 31) % 2 ** 32 - 2 ** 31).astype(np.int32)
        out = D[crow[:, :, 0], ccol[:, :, 0]]                                      # (32, 4)
        for j, wr in enumerate(wd):
            wr(w, np.ascontiguousarray(out[:, j]), None)
        return None
    return mma


BUILDERS: dict = {}
FORMS = [("mma", lambda ins: "s32" in ins.parts and any(t in ins.parts for t in _INT), build_mma_int)]
