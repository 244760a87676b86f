"""Bit-manipulation instructions NVRTC emits for ordinary C++ that porter's own kernels
happen not to use (PTX ISA "Integer Arithmetic" and "Logic and Shift" instructions):
``prmt.b32`` (byte permute, default mode: NVRTC's byte packing), ``lop3.b32`` (any
three-input logic function by its truth table), ``bfe.{u32,s32,u64,s64}`` (bit-field
extract), ``shf.{l,r}.{wrap,clamp}.b32`` (funnel shift: NVRTC's 64-bit shifts and
rotates), ``brev.{b32,b64}``."""

from __future__ import annotations

import numpy as np

from porter.emu.decode import NP, bits, type_of


def _lanes(v, dt):
    return np.broadcast_to(np.asarray(v), (32,)).astype(dt)


def build_prmt(ins, d):
    if ins.opcode != "prmt.b32":
        raise d.unsupported("(only the default prmt.b32 mode)")
    dst, a, b, c = ins.operands
    ra, rb, rc, wd = d.src(a, "b32"), d.src(b, "b32"), d.src(c, "b32"), d.dst(dst, "b32")

    def prmt(w, m):
        # bytes 0-3 from a, 4-7 from b; each selector nibble picks a byte, bit 3 replicates its sign
        pool = (_lanes(rb(w), np.uint64) << np.uint64(32)) | _lanes(ra(w), np.uint64)
        sel = _lanes(rc(w), np.uint64)
        out = np.zeros(32, np.uint64)
        for k in range(4):
            s = (sel >> np.uint64(4 * k)) & np.uint64(0xF)
            byte = (pool >> ((s & np.uint64(7)) * np.uint64(8))) & np.uint64(0xFF)
            byte = np.where(s & np.uint64(8), np.where(byte & np.uint64(0x80), np.uint64(0xFF), np.uint64(0)), byte)
            out |= byte << np.uint64(8 * k)
        wd(w, out.astype(np.uint32), m)
    return prmt


def build_lop3(ins, d):
    dst, a, b, c, lut = ins.operands
    if not hasattr(lut, "value"):
        raise d.unsupported("(the lop3 truth table must be an immediate)")
    table = int(lut.value) & 0xFF
    ra, rb, rc, wd = d.src(a, "b32"), d.src(b, "b32"), d.src(c, "b32"), d.dst(dst, "b32")

    def lop3(w, m):
        x, y, z = _lanes(ra(w), np.uint32), _lanes(rb(w), np.uint32), _lanes(rc(w), np.uint32)
        out = np.zeros(32, np.uint32)
        for i in range(8):          # minterm i: a = bit 2, b = bit 1, c = bit 0 of i (0xF0, 0xCC, 0xAA)
            if table >> i & 1:
                out |= (x if i & 4 else ~x) & (y if i & 2 else ~y) & (z if i & 1 else ~z)
        wd(w, out, m)
    return lop3


def build_bfe(ins, d):
    t = type_of(ins.parts)
    dst, a, b, c = ins.operands
    n = bits(t)
    ra, rb, rc, wd = d.src(a, t), d.src(b, "u32"), d.src(c, "u32"), d.dst(dst, t)
    u = np.uint64 if n == 64 else np.uint32
    signed = t[0] == "s"

    def bfe(w, m):
        x = _lanes(ra(w), NP[t]).view(u).astype(object)
        pos = np.minimum(_lanes(rb(w), np.uint32) & 0xFF, 255).astype(int)
        ln = np.minimum(_lanes(rc(w), np.uint32) & 0xFF, 255).astype(int)
        out = np.zeros(32, dtype=object)
        for i in range(32):
            p, L, v = int(pos[i]), int(ln[i]), int(x[i])
            if L == 0:
                out[i] = 0
                continue
            sbit = (v >> min(p + L - 1, n - 1)) & 1 if signed else 0
            field = 0
            for j in range(n):
                if j < L and p + j < n:
                    bit = (v >> (p + j)) & 1
                else:
                    bit = sbit
                field |= bit << j
            out[i] = field
        wd(w, np.array([int(v) for v in out], dtype=u).view(NP[t]), m)
    return bfe


def build_shf(ins, d):
    parts = ins.parts
    if parts[-1] != "b32" or parts[1] not in ("l", "r") or parts[2] not in ("wrap", "clamp"):
        raise d.unsupported()
    left, wrap = parts[1] == "l", parts[2] == "wrap"
    dst, a, b, c = ins.operands
    ra, rb, rc, wd = d.src(a, "b32"), d.src(b, "b32"), d.src(c, "u32"), d.dst(dst, "b32")

    def shf(w, m):
        pair = (_lanes(rb(w), np.uint64) << np.uint64(32)) | _lanes(ra(w), np.uint64)     # b:a
        n = _lanes(rc(w), np.uint64)
        n = n & np.uint64(31) if wrap else np.minimum(n, np.uint64(32))
        if left:
            out = ((pair << n) >> np.uint64(32)) & np.uint64(0xFFFFFFFF)
        else:
            out = (pair >> n) & np.uint64(0xFFFFFFFF)
        wd(w, out.astype(np.uint32), m)
    return shf


def build_brev(ins, d):
    t = type_of(ins.parts)
    n = bits(t)
    dst, a = ins.operands
    ra, wd = d.src(a, t), d.dst(dst, t)
    u = np.uint64 if n == 64 else np.uint32

    def brev(w, m):
        x = _lanes(ra(w), NP[t]).view(u)
        out = np.zeros(32, u)
        for j in range(n):
            out |= ((x >> u(j)) & u(1)) << u(n - 1 - j)
        wd(w, out.view(NP[t]), m)
    return brev


BUILDERS = {"prmt": build_prmt, "lop3": build_lop3, "bfe": build_bfe, "shf": build_shf, "brev": build_brev}
