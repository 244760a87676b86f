"""The 8-bit matrix loads and stores of sm_100 / sm_120 (PTX ISA 9.0: 9.7.14.5.15 "ldmatrix",
9.7.14.5.16 "stmatrix"): ``ldmatrix.sync.aligned.m16n16.x{1,2}.trans{.shared{::cta}}.b8`` and
``stmatrix.sync.aligned.m16n8.x{1,2,4}.trans{.shared{::cta}}.b8`` (the FP8 epilogues and
operand transposes of CUTLASS's and DeepGEMM's Blackwell kernels).

The fragment layouts (the ISA's Figures 105 and 108, published as images) are taken from
CUTLASS's CuTe copy traits for these instructions (``SM100_U8x{4,8,16}_STSM_T``,
``SM100_U8x{8,16}_LDSM_T``), which state them as bit maps:

* stmatrix m16n8 (.trans mandatory): matrix j is written at the 8 row addresses of threads
  8j..8j+7, 16 bytes each; byte k of register j of lane l (l%4 = t0, l/4 = t1) goes to row
  2*t0 + (k & 1) of matrix j, byte t1 + 8*(k >> 1) of that row. It is the transposed
  store of the m16n8 accumulator fragment: e0, e1 hold (row t1, columns 2*t0, 2*t0+1),
  e2, e3 the same columns of row t1 + 8.
* ldmatrix m16n16 (.trans mandatory): matrix i (x2: two) is read from 16 row addresses,
  of threads 16i..16i+15; the thread that supplies reference row R is
  (R%2) + 2*((R%16)//8) + 4*((R%8)//2) + 16*(R//16). Byte k of register j of lane l is
  byte t1 + 8*(k >> 1) of reference row 2*t0 + (k & 1) + 8*j.

The decompressing loads ``ldmatrix.sync.aligned.m8n16.x{1,2,4}{.shared{::cta}}.b8x16.{b6x16_p32,
b4x16_p64}`` and ``ldmatrix.sync.aligned.m16n16.x{1,2}.trans{.shared{::cta}}.b8x16.{...}`` (sm_100a /
sm_120a: the FP6 / FP4 operands of ``mma.sync .kind::f8f6f4`` from packed shared memory):
each 16-byte row holds 16 narrow elements packed from bit 0 (element i at bits 6i..6i+5 of the
row's first 12 bytes, or 4i..4i+3 of its first 8), the rest padding (``_p32`` / ``_p64``); the
load widens each element to one byte, zero-extended into the byte's low bits, and then
distributes the 16-byte rows as the plain ``.b8`` form does. That the element lands in the
low bits is the behaviour public sm_120 kernels rely on: they shift the 4-bit result left by
2 to reach the e2m1 container of ``mma.sync .kind::f8f6f4`` (bits 2..5), and use the 6-bit
result as loaded (e3m2 / e2m3 in the low 6 bits). m8n16 (no ``.trans``) gives lane l of
matrix j row l/4, bytes 4*(l%4)..+3, from the row addresses of threads 8j..8j+7, the m8n8
``.b16`` distribution read as bytes.

``.shared::cluster`` is refused for all of these, as for the ``.b16`` forms: the ISA's state
space for ldmatrix / stmatrix is ``.shared{::cta}`` (9.7.14.5.15 / 9.7.14.5.16), and ptxas
refuses the rest ("State space incorrect").
"""

from __future__ import annotations

import numpy as np

from porter.emu import ptx
from porter.emu.ops.mma_sync import _whole_warp, matrix_rows

_NUM = {"x1": 1, "x2": 2, "x4": 4}
_LANE = np.arange(32)
_T0, _T1 = _LANE % 4, _LANE // 4


def _stmatrix_map(num: int):
    """(address-thread, byte-in-row) per (lane, register, byte) for stmatrix m16n8."""
    rows = np.zeros((32, num, 4), np.int64)
    cols = np.zeros((32, num, 4), np.int64)
    for j in range(num):
        for k in range(4):
            rows[:, j, k] = 8 * j + 2 * _T0 + (k & 1)
            cols[:, j, k] = _T1 + 8 * (k >> 1)
    return rows, cols


def _ldmatrix_map(num: int):
    """(address-thread, byte-in-row) per (lane, register, byte) for ldmatrix m16n16."""
    nreg = 2 * num
    rows = np.zeros((32, nreg, 4), np.int64)
    cols = np.zeros((32, nreg, 4), np.int64)
    for j in range(nreg):
        for k in range(4):
            r = 2 * _T0 + (k & 1) + 8 * j
            rows[:, j, k] = (r % 2) + 2 * ((r % 16) // 8) + 4 * ((r % 8) // 2) + 16 * (r // 16)
            cols[:, j, k] = _T1 + 8 * (k >> 1)
    return rows, cols


def _m8n16_map(num: int):
    """(address-thread, byte-in-row) per (lane, register, byte) for ldmatrix m8n16."""
    rows = np.zeros((32, num, 4), np.int64)
    cols = np.zeros((32, num, 4), np.int64)
    for j in range(num):
        for k in range(4):
            rows[:, j, k] = 8 * j + _T1
            cols[:, j, k] = 4 * _T0 + k
    return rows, cols


_SRC_FMT = {"b6x16_p32": 6, "b4x16_p64": 4}


def _widen(rows: np.ndarray, nbits: int) -> np.ndarray:
    """(n, 16) source rows of 16 packed ``nbits``-bit elements -> (n, 16) bytes, one each."""
    r = rows.astype(np.uint32)
    if nbits == 4:
        lo, hi = r[:, :8] & 0xF, r[:, :8] >> 4
        return np.stack([lo, hi], axis=2).reshape(-1, 16).astype(np.uint8)
    g = r[:, :12].reshape(-1, 4, 3)                   # four 24-bit groups of four elements
    v = g[:, :, 0] | (g[:, :, 1] << 8) | (g[:, :, 2] << 16)
    out = np.stack([(v >> (6 * i)) & 0x3F for i in range(4)], axis=2)
    return out.reshape(-1, 16).astype(np.uint8)


def _form(ins, d, store: bool):
    parts = ins.parts
    name = parts[0]
    src_fmt = next((p for p in parts if p in _SRC_FMT), None)
    decomp = src_fmt is not None or "b8x16" in parts
    if store and decomp:
        raise d.unsupported("(stmatrix has no .b8x16 source formats)")
    if decomp and not (src_fmt is not None and "b8x16" in parts and parts[-1] == src_fmt):
        raise d.unsupported("(ldmatrix ....b8x16.{b6x16_p32,b4x16_p64}: the destination then the source format)")
    if any(p.startswith("shared::") and p != "shared::cta" for p in parts):
        raise d.unsupported(f"({name} reads and writes only the executing CTA's shared memory: the ISA's state "
                            f"space for {name} is .shared{{::cta}})")
    shape = "m16n8" if store else ("m8n16" if decomp and "m8n16" in parts else "m16n16")
    if parts[1:3] != ["sync", "aligned"] or shape not in parts or (parts[-1] != "b8" and not decomp):
        raise d.unsupported(f"(only {name}.sync.aligned.{shape}.x{{n}}.trans{{.shared}}.b8)")
    if shape == "m8n16":
        if "trans" in parts:
            raise d.unsupported("(.m8n16 takes no .trans: the ISA's rule for ldmatrix)")
    elif "trans" not in parts:
        raise d.unsupported(f"(.{shape} needs .trans: the ISA's rule for {name})")
    num = next((_NUM[p] for p in parts if p in _NUM), None)
    if num is None or (shape == "m16n16" and num == 4):
        raise d.unsupported(f"(.num: .x1, .x2{'' if shape == 'm16n16' else ', .x4'} with .{shape})")
    space = "shared" if any(p.split("::")[0] == "shared" for p in parts) else "generic"
    regs_op, addr_op = (ins.operands[1], ins.operands[0]) if store else (ins.operands[0], ins.operands[1])
    nreg = 2 * num if shape == "m16n16" else num
    if not isinstance(regs_op, ptx.Vec) or len(regs_op.items) != nreg:
        raise d.unsupported(f"(expected {nreg} registers)")
    addr_fn, sym_space = d.addr(addr_op, space)
    if sym_space is not None:
        space = "shared" if sym_space == "shared" else sym_space
    where = d.where(ins)
    what = f"{name}.{shape}.x{num}"
    n_addr = 16 * num if shape == "m16n16" else 8 * num
    rows, cols = {"m16n8": _stmatrix_map, "m16n16": _ldmatrix_map, "m8n16": _m8n16_map}[shape](num)
    nbits = _SRC_FMT.get(src_fmt)
    row_bytes = np.arange(16)
    if store:
        readers = [d.src(x, "b32") for x in regs_op.items]
    else:
        writers = [d.dst(x, "b32") for x in regs_op.items]

    def run(w, m):
        res = _whole_warp(w, m, where, what)
        if res is not None:
            return res
        offs = matrix_rows(w, addr_fn(w), n_addr, space, store, where, what)
        smem = w.cta.smem
        if store:
            addr = offs[rows] + cols                       # (32, nreg, 4) byte offsets
            regs = np.stack([np.broadcast_to(np.asarray(r(w)), (32,)).astype(np.uint32) for r in readers], axis=1)
            data = regs[:, :, None] >> (np.arange(4, dtype=np.uint32) * np.uint32(8))
            smem.data[addr.reshape(-1)] = (data & np.uint32(0xFF)).astype(np.uint8).reshape(-1)
            return None
        src = smem.data[offs[:, None] + row_bytes]         # (n_addr, 16) row bytes
        if nbits is not None:
            src = _widen(src, nbits)
        got = src[rows, cols].astype(np.uint32)            # (32, nreg, 4)
        words = got[:, :, 0] | (got[:, :, 1] << 8) | (got[:, :, 2] << 16) | (got[:, :, 3] << 24)
        for j, wr in enumerate(writers):
            wr(w, np.ascontiguousarray(words[:, j]), None)
        return None
    return run


def build_ldmatrix_b8(ins, d):
    return _form(ins, d, store=False)


def build_stmatrix_b8(ins, d):
    return _form(ins, d, store=True)


build_stmatrix_b8.n_dst = 0


def _b8(ins) -> bool:
    return ins.parts[-1] == "b8" or any(p.startswith("b8x16") for p in ins.parts)


BUILDERS: dict = {}
FORMS = [("ldmatrix", _b8, build_ldmatrix_b8), ("stmatrix", _b8, build_stmatrix_b8)]
