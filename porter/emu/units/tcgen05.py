"""tcgen05.mma on sm_100a: descriptors, operand layouts, element formats and the arithmetic.

Pure numpy. Written from the PTX ISA text (9.0, chapter 9.7.16) alone; it never imports
porter's generator encoders, so a misreading shared by both cannot pass.

API
---
Formats (ISA 5.2.3 "Alternate floating-point data formats"):
  ``decode(codes, fmt) -> float64``: exact values of e4m3, e5m2, e2m3, e3m2, e2m1, ue8m0, ue4m3
  (one code per array element, e.g. a 4-bit code 0..15), bf16 / f16 (16-bit codes), tf32
  (32-bit; the 13 low mantissa bits are dropped), s8 / u8.
  ``unpack_fp4(bytes) -> codes``: two e2m1 per byte, the lower K index in the low nibble.
  ``operand_values(raw, fmt) -> float64 (rows, K)``: an operand's raw rows as numbers.
Descriptors (9.7.16.4):
  ``decode_idesc(kind, idesc, cta_group=1, scale_vec=None) -> InstrDesc`` (Tables 42-44, with
  the M/N/K rules of Table 39, transpose/negate support of Table 49, Table 50, Tables 54-55).
  ``decode_smem_desc(desc) -> SmemDesc`` (Table 40; bad fixed "version" bits 46-48, reserved
  bits, swizzle 3/5/7 are ``EmuError``).
Shared-memory operands (9.7.16.3 canonical layouts, 9.7.16.10.6 swizzling):
  ``operand_addresses(desc, rows, row_bytes, major, elem_bits) -> int64 (rows, row_bytes)``:
  the smem byte each operand byte comes from (rows = M index of A or N index of B, K in order).
  ``read_matrix(smem, desc, rows, row_bytes, major, elem_bits) -> uint8 (rows, row_bytes)``.
Tensor Memory sides of the MMA (9.7.16.10.5 data-path layouts, 9.7.16.10.7 block scaling):
  ``d_layout(m, n, cta_group, lane_base=0) -> DLayout`` (cta, lane, column of every D[m, n]).
  ``read_d / write_d``: D from / to the TMEMs of the CTA (pair) through a ``DLayout``.
  ``a_from_tmem(tmems, address, m, cta_group, k_bytes=32, lane_base=0) -> uint8 (M, k_bytes)``.
  ``read_scales(tmem, address, count, scale_vec, sf_id, fmt) -> float64 (count, blocks)``.
  ``scale_layout(count, scale_vec, sf_id) -> (lane_in_quarter, column_offset, byte)`` per row.
Arithmetic:
  ``mma(instr, a_vals, b_vals, d=None, scale_a=None, scale_b=None, scale_input_d=0)``
  ``-> float32 (M, N)`` (``int32`` for kind::i8): ``D = (A*sA) (B*sB)^T + D``.
  ``run_mma(...)``: the whole instruction for the lead's machine (operands, scales, D).
  ``mma_smem_addresses(instr, b_desc, a_desc=None)``: the smem bytes it reads (in-flight checks).

Emulation choices: products and sums in float64, rounded once to float32 (or float16 when the
D type is F16); the hardware's internal accumulation order and precision are not modelled.

The ISA gives several of these only as figures (data-path Layouts A-F, Figures 205-216;
scale-factor sub-columns, Figures 231-242; packing, Figures 199-204). Their content here was
checked, as facts and not code, against CUTLASS's TMEM fragment layouts (``tmem_frg``,
``tmem_sf_frg`` in ``mma_traits_sm100.hpp``): Layout F puts rows 16q..16q+15 in lanes
32q..32q+15 (+16 for the second tile), Layout B puts the two N halves in lane quarters {0,1}
and {2,3}, scale factors of row r sit in lane r%32 of every quarter, column r//32, byte = id +
block. Remaining doubts: the K order of e2m1 nibbles (low nibble = lower K, the usual packing);
``.ws`` is the plain form (D layouts for M=32 / 64 from CUTLASS's ``tmem_frg_ws`` atoms, as
facts), A in TMEM for M=128 (Layout D); collector buffers and the disable-output-lane mask are
applied by the caller (``a_raw`` / ``b_raw``, ``disabled_lanes``: ops/tcgen05.py); A in TMEM for
.ws M=32/64, a non-zero zero-column mask, sparsity, fp4/fp6
in 8-bit containers (kind::f8f6f4), the 32B-atomic 128B swizzle and a non-zero base offset are
``Unsupported``.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import numpy as np

from porter.emu.errors import CheckFailed, EmuError, Unsupported
from porter.emu.units.products import abt

# ----------------------------------------------------------------------------- formats

# (exponent bits, mantissa bits, bias, signed, nan codes, inf rule) per ISA 5.2.3.
_MINIFLOATS = {
    "e4m3": (4, 3, 7, True),     # no infinity; NaN = 0x7f and 0xff
    "e5m2": (5, 2, 15, True),    # IEEE-like: exponent 31 is inf / NaN
    "e2m3": (2, 3, 1, True),     # no inf, no NaN
    "e3m2": (3, 2, 3, True),     # no inf, no NaN
    "e2m1": (2, 1, 1, True),     # no inf, no NaN
    "ue4m3": (4, 3, 7, False),   # 7 bits, MSB of the byte zero; NaN = 0x7f
}
FORMAT_BITS = {"e4m3": 8, "e5m2": 8, "e2m3": 6, "e3m2": 6, "e2m1": 4, "ue8m0": 8,
               "ue4m3": 8, "bf16": 16, "f16": 16, "tf32": 32, "s8": 8, "u8": 8}


def _table(fmt: str) -> np.ndarray:
    e, m, bias, signed = _MINIFLOATS[fmt]
    n = 1 << (e + m + (1 if signed else 0))
    out = np.empty(n, dtype=np.float64)
    for code in range(n):
        sign = -1.0 if signed and code >> (e + m) & 1 else 1.0
        exp = code >> m & ((1 << e) - 1)
        man = code & ((1 << m) - 1)
        if exp == 0:
            v = man / (1 << m) * 2.0 ** (1 - bias)
        else:
            v = (1 + man / (1 << m)) * 2.0 ** (exp - bias)
        out[code] = sign * v
    if fmt == "e4m3":
        out[0x7F] = out[0xFF] = np.nan
    elif fmt == "e5m2":
        for code in range(n):
            if code >> 2 & 0x1F == 0x1F:
                out[code] = (np.nan if code & 3 else (-np.inf if code & 0x80 else np.inf))
    elif fmt == "ue4m3":
        out[0x7F] = np.nan
    return out


_TABLES = {f: _table(f) for f in _MINIFLOATS}


def decode(codes, fmt: str) -> np.ndarray:
    """Exact float64 values of raw codes (one code per element) in format ``fmt``."""
    with np.errstate(invalid="ignore"):   # NaN codes are values too
        return _decode(np.asarray(codes), fmt)


def _decode(codes: np.ndarray, fmt: str) -> np.ndarray:
    if fmt in _TABLES:
        width = FORMAT_BITS[fmt] if fmt != "ue4m3" else 8
        c = codes.astype(np.int64)
        if (c < 0).any() or (c >= (1 << width)).any():
            raise EmuError(f"decode {fmt}: codes must fit in {width} bits")
        if fmt == "ue4m3" and (c & 0x80).any():
            raise CheckFailed("decode ue4m3: a scale factor has its MSB set (ue4m3 is 7-bit, "
                              "the byte's MSB must be zero)")
        return _TABLES[fmt][c]
    if fmt == "ue8m0":
        c = codes.astype(np.int64)
        out = np.ldexp(1.0, c - 127)
        return np.where(c == 0xFF, np.nan, out)
    if fmt == "bf16":
        return (codes.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if fmt == "f16":
        return codes.astype(np.uint16).view(np.float16).astype(np.float64)
    if fmt == "tf32":
        return (codes.astype(np.uint32) & np.uint32(0xFFFFE000)).view(np.float32).astype(np.float64)
    if fmt == "s8":
        return codes.astype(np.uint8).view(np.int8).astype(np.float64)
    if fmt == "u8":
        return codes.astype(np.uint8).astype(np.float64)
    raise Unsupported(f"decode: format {fmt!r} is not implemented")


def unpack_fp4(raw: np.ndarray) -> np.ndarray:
    """Bytes holding two e2m1 each -> codes, twice as many along the last axis, low nibble first."""
    raw = np.asarray(raw, dtype=np.uint8)
    out = np.empty(raw.shape[:-1] + (raw.shape[-1] * 2,), dtype=np.uint8)
    out[..., 0::2] = raw & 0x0F
    out[..., 1::2] = raw >> 4
    return out


def operand_values(raw: np.ndarray, fmt: str) -> np.ndarray:
    """An operand's raw rows (rows, bytes, K contiguous and little-endian) as float64 (rows, K)."""
    raw = np.ascontiguousarray(raw, dtype=np.uint8)
    bits = FORMAT_BITS.get(fmt)
    if bits is None:
        raise Unsupported(f"operand format {fmt!r} is not implemented")
    if bits == 16:
        return decode(raw.view("<u2"), fmt)
    if bits == 32:
        return decode(raw.view("<u4"), fmt)
    if bits == 8:
        return decode(raw, fmt)
    if bits == 4:
        return decode(unpack_fp4(raw), fmt)
    raise Unsupported(f"operand format {fmt}: 6-bit operands in shared memory (ISA Figure 203 "
                      "packing) are not implemented")


# ------------------------------------------------------------------------ idesc

KINDS = ("f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4")
_BLOCK_SCALED = ("mxf8f6f4", "mxf4", "mxf4nvf4")
_F8F6F4_TYPES = {0: "e4m3", 1: "e5m2", 3: "e2m3", 4: "e3m2", 5: "e2m1"}
_AB_TYPES = {
    "f16": {0: "f16", 1: "bf16"},
    "tf32": {2: "tf32"},
    "f8f6f4": _F8F6F4_TYPES,
    "i8": {0: "u8", 1: "s8"},
    "mxf8f6f4": _F8F6F4_TYPES,
    "mxf4": {1: "e2m1"},
    "mxf4nvf4": {1: "e2m1"},
}
_D_TYPES = {"f16": {0: "f16", 1: "f32"}, "tf32": {1: "f32"}, "f8f6f4": {0: "f16", 1: "f32"},
            "i8": {2: "s32"}}
_K = {"f16": 16, "tf32": 8, "f8f6f4": 32, "i8": 32, "mxf8f6f4": 32, "mxf4": 64, "mxf4nvf4": 64}
_SCALE_VECS = {"mxf8f6f4": ("1X",), "mxf4": ("2X",), "mxf4nvf4": ("2X", "4X")}
SCALE_BLOCKS = {"1X": 1, "2X": 2, "4X": 4}


@dataclass(frozen=True)
class InstrDesc:
    kind: str
    raw: int
    cta_group: int
    m: int
    n: int
    k: int
    d_format: str            # "f32", "f16", "s32"
    a_format: str
    b_format: str
    a_major: str             # "K" (transpose bit 0) or "MN"
    b_major: str
    negate_a: bool
    negate_b: bool
    sparse: bool
    sparsity_selector: int
    saturate: bool
    max_shift: int           # bits 30-31 of the dense kinds (.ws B reuse)
    scale_vec: str | None    # "1X", "2X", "4X" for block-scaled kinds
    scale_format: str | None  # "ue8m0" / "ue4m3"
    sfa_id: int | None
    sfb_id: int | None
    ws: bool = False         # tcgen05.mma.ws (weight stationary)

    @property
    def block_size(self) -> int | None:
        """K elements per scale factor (K / scale_vec)."""
        return None if self.scale_vec is None else self.k // SCALE_BLOCKS[self.scale_vec]


def _bits(x: int, lo: int, n: int) -> int:
    return (x >> lo) & ((1 << n) - 1)


def decode_idesc(kind: str, idesc: int, cta_group: int = 1, scale_vec: str | None = None,
                 ws: bool = False) -> InstrDesc:
    """Decode and check a 32-bit instruction descriptor (ISA 9.7.16.4.2, Tables 42-44);
    ``ws``: for ``tcgen05.mma.ws`` (Table 39's .ws rows: .cta_group::1, M 32 / 64 / 128,
    N 64 / 128 / 256, the dense kinds f16, tf32, f8f6f4, i8)."""
    kind = kind.removeprefix("kind::")
    idesc = int(idesc) & 0xFFFFFFFF
    where = f"tcgen05.mma{'.ws' if ws else ''}.cta_group::{cta_group}.kind::{kind} idesc {idesc:#010x}"

    def bad(field: str, why: str) -> EmuError:
        return EmuError(f"{where}: {field}: {why}")

    if kind not in KINDS:
        raise Unsupported(f"{where}: kind::{kind} is not implemented")
    if cta_group not in (1, 2):
        raise bad(".cta_group", f"{cta_group} is not 1 or 2")
    scaled = kind in _BLOCK_SCALED
    if ws and (scaled or cta_group != 1):
        raise bad(".ws", f"kind::{kind} with .cta_group::{cta_group}: tcgen05.mma.ws takes .cta_group::1 and "
                         "kind::f16 / tf32 / f8f6f4 / i8 only (Table 39)")
    sparse = bool(_bits(idesc, 2, 1))
    types = _AB_TYPES[kind]
    if scaled:
        reserved = [(0, 2), (3, 1), (6, 1), (24, 3), (31, 1)] + ([(12, 1)] if kind != "mxf8f6f4" else [])
        if kind != "mxf8f6f4" and _bits(idesc, 31, 1):
            raise Unsupported(f"{where}: bit 31 (K dimension = 96) is sm_103a only")
    else:
        reserved = [(6, 1), (23, 1), (29, 1)]
    for lo, n in reserved:
        if _bits(idesc, lo, n):
            raise bad(f"bits {lo}-{lo + n - 1}" if n > 1 else f"bit {lo}", "reserved, must be 0")
    tbits = 2 if kind in ("mxf4", "mxf4nvf4") else 3
    a_code, b_code = _bits(idesc, 7, 3), _bits(idesc, 10, tbits)
    if a_code not in types:
        raise bad("atype (bits 7-9)", f"{a_code} is not a kind::{kind} type {sorted(types)}")
    if b_code not in types:
        raise bad(f"btype (bits 10-{9 + tbits})", f"{b_code} is not a kind::{kind} type {sorted(types)}")
    negate_a, negate_b = bool(_bits(idesc, 13, 1)), bool(_bits(idesc, 14, 1))
    if kind == "i8" and (negate_a or negate_b):
        raise bad("negate (bits 13-14)", "kind::i8 does not support negate (Table 49)")
    trans_a, trans_b = bool(_bits(idesc, 15, 1)), bool(_bits(idesc, 16, 1))
    if kind in ("mxf4", "mxf4nvf4") and (trans_a or trans_b):
        raise bad("transpose (bits 15-16)", f"kind::{kind} does not support transpose (Table 49)")
    n = _bits(idesc, 17, 6) << 3

    if scaled:
        m = _bits(idesc, 27, 2) << 7
        d_format = "f32"
        sat = False
        selector = 0
        max_shift = 0
        scale_format = "ue8m0" if _bits(idesc, 23, 1) else "ue4m3"
        sfb_id, sfa_id = _bits(idesc, 4, 2), _bits(idesc, 29, 2)
        if scale_vec is None:
            if kind == "mxf4nvf4":
                raise bad(".scale_vec", "kind::mxf4nvf4 needs an explicit .scale_vec::2X|4X")
            scale_vec = _SCALE_VECS[kind][0]
        scale_vec = scale_vec.removeprefix("scale_vec::")
        if scale_vec not in _SCALE_VECS[kind]:
            raise bad(".scale_vec", f"::{scale_vec} is not valid with kind::{kind} (Table 54)")
        if kind != "mxf4nvf4" and scale_format != "ue8m0":
            raise bad("scale type (bit 23)", f"kind::{kind} scales are UE8M0 = 1")
        if scale_format == "ue4m3" and scale_vec != "4X":
            raise bad("scale type (bit 23)", "UE4M3 scales need .scale_vec::4X (Table 55)")
        legal_ids = {"1X": (0, 1, 2, 3), "2X": (0, 2), "4X": (0,)}[scale_vec]
        if sfa_id not in legal_ids:
            raise bad("scale factor A id (bits 29-30)", f"{sfa_id} with ::{scale_vec}, legal {legal_ids}")
        if sfb_id not in legal_ids:
            raise bad("scale factor B id (bits 4-5)", f"{sfb_id} with ::{scale_vec}, legal {legal_ids}")
        legal_m = (128,) if cta_group == 1 else (128, 256)
    else:
        if scale_vec is not None:
            raise bad(".scale_vec", f"kind::{kind} is not block-scaled")
        m = _bits(idesc, 24, 5) << 4
        d_code = _bits(idesc, 4, 2)
        if d_code not in _D_TYPES[kind]:
            raise bad("dtype (bits 4-5)", f"{d_code} is not a kind::{kind} D type {sorted(_D_TYPES[kind])}")
        d_format = _D_TYPES[kind][d_code]
        sat = bool(_bits(idesc, 3, 1))
        if sat and kind != "i8":
            raise bad("saturate (bit 3)", "only for kind::i8")
        selector = _bits(idesc, 0, 2)
        max_shift = _bits(idesc, 30, 2)
        scale_format = sfa_id = sfb_id = None
        legal_m = (32, 64, 128) if ws else (64, 128) if cta_group == 1 else (128, 256)
    if m not in legal_m:
        field = "M (bits 27-28, M >> 7)" if scaled else "M (bits 24-28, M >> 4)"
        raise bad(field, f"M = {m} is not valid with .cta_group::{cta_group} (legal {legal_m}, Table 39)")
    step = 8 if cta_group == 1 else 16
    lo_n = step
    a_fmt, b_fmt = types[a_code], types[b_code]
    if kind == "i8":
        if cta_group == 2:
            lo_n, step = 32, 32
        elif n > 32:
            step = 16
    if trans_b and FORMAT_BITS[b_fmt] == 8:   # Table 50: 8-bit transpose B
        lo_n, step = (16, 16) if cta_group == 1 else (32, 32)
    if ws and n not in (64, 128, 256):
        raise bad("N (bits 17-22, N >> 3)", f"N = {n} is not valid with .ws (64, 128 or 256, Table 39)")
    if not (lo_n <= n <= 256 and n % step == 0):
        raise bad("N (bits 17-22, N >> 3)",
                  f"N = {n} is not valid with .cta_group::{cta_group} ({lo_n}..256 step {step}, Table 39)")
    k = _K[kind] * (2 if sparse else 1)
    return InstrDesc(kind=kind, raw=idesc, cta_group=cta_group, m=m, n=n, k=k,
                     d_format=d_format, a_format=a_fmt, b_format=b_fmt,
                     a_major="MN" if trans_a else "K", b_major="MN" if trans_b else "K",
                     negate_a=negate_a, negate_b=negate_b, sparse=sparse,
                     sparsity_selector=selector, saturate=sat, max_shift=max_shift,
                     scale_vec=scale_vec if scaled else None, scale_format=scale_format,
                     sfa_id=sfa_id, sfb_id=sfb_id, ws=ws)


# ------------------------------------------------------------------ smem descriptor

_SWIZZLES = {0: ("none", 0), 1: ("128B_atom32B", 128), 2: ("128B", 128), 4: ("64B", 64), 6: ("32B", 32)}


@dataclass(frozen=True)
class SmemDesc:
    raw: int
    start: int          # bytes, in the CTA's shared window
    lbo: int            # bytes (relative mode) or absolute byte address
    sbo: int            # bytes
    version: int        # bits 46-48, fixed 0b001
    base_offset: int    # bits 49-51
    lbo_mode: int       # bit 52: 0 relative, 1 absolute (sm_103a)
    swizzle: int        # bits 61-63 as encoded
    swizzle_name: str
    swizzle_bytes: int  # 0 (none), 32, 64, 128


def decode_smem_desc(desc: int) -> SmemDesc:
    """Decode and check a 64-bit tcgen05 shared-memory descriptor (ISA 9.7.16.4.1, Table 40)."""
    desc = int(desc) & 0xFFFFFFFFFFFFFFFF
    where = f"tcgen05 shared memory descriptor {desc:#018x}"
    version = _bits(desc, 46, 3)
    if version != 0b001:
        raise CheckFailed(f"{where}: bits 46-48 (fixed constant 0b001) are {version:#05b}; "
                       "a Hopper (wgmma) descriptor?")
    for lo, n in ((14, 2), (30, 2), (53, 8)):
        if _bits(desc, lo, n):
            raise CheckFailed(f"{where}: bits {lo}-{lo + n - 1} must be 0")
    sw = _bits(desc, 61, 3)
    if sw not in _SWIZZLES:
        raise CheckFailed(f"{where}: swizzling mode (bits 61-63) {sw} is invalid (3, 5 and 7 are)")
    name, width = _SWIZZLES[sw]
    return SmemDesc(raw=desc, start=_bits(desc, 0, 14) << 4, lbo=_bits(desc, 16, 14) << 4,
                    sbo=_bits(desc, 32, 14) << 4, version=version,
                    base_offset=_bits(desc, 49, 3), lbo_mode=_bits(desc, 52, 1),
                    swizzle=sw, swizzle_name=name, swizzle_bytes=width)


def _swizzle(addr: np.ndarray, width: int, base_offset: int = 0) -> np.ndarray:
    """Swizzle<B,4,3> of the canonical layouts: XOR address bits [4, 4+B) with bits [7, 7+B)
    less the descriptor's matrix base offset, which the ISA sets to (pattern start address >> 7)
    & 7 for a pattern off its 1024/512/256-byte boundary: a row's phase counts from where its
    pattern starts (0: the absolute address bits, as TMA writes them)."""
    if width == 0:
        return addr
    mask = {32: 1, 64: 3, 128: 7}[width]
    return addr ^ ((((addr >> 7) - base_offset) & mask) << 4)


def operand_addresses(desc: int | SmemDesc, rows: int, row_bytes: int, major: str = "K",
                      elem_bits: int = 8) -> np.ndarray:
    """(Read-only, computed once per descriptor and shape: see ``_operand_addresses``.)"""
    return _operand_plan(desc if isinstance(desc, SmemDesc) else int(desc), rows, row_bytes, major, elem_bits)[0]


@functools.lru_cache(maxsize=4096)
def _operand_plan(desc, rows: int, row_bytes: int, major: str, elem_bits: int):
    """The operand's addresses (read-only) and their largest, once per (descriptor, shape):
    a kernel issues the same few descriptors over and over."""
    addr = _operand_addresses(desc, rows, row_bytes, major, elem_bits)
    addr.flags.writeable = False
    return addr, int(addr.max())


def _operand_addresses(desc: int | SmemDesc, rows: int, row_bytes: int, major: str = "K",
                       elem_bits: int = 8) -> np.ndarray:
    """Shared-memory byte address of every operand byte: int64 (rows, row_bytes).

    ``rows`` index M (A) or N (B); bytes run along K in order (element ``k`` of a row occupies
    bytes ``k*elem_bits/8 ..``). Canonical layouts of ISA 9.7.16.3.3 with T = 128/elem_bits:

    * K-major, no swizzle: ((8,m),(T,2k)):((1T,SBO),(1,LBO)): 8-row x 16-byte core matrices,
      rows 16 B apart, the next 8 rows at SBO, the next 16 bytes of K at LBO.
    * K-major, W-byte swizzle: ((8,m),(T,2k)):((W/16*T,SBO),(1,T)): rows W bytes apart, the
      next 8 rows at SBO, K contiguous inside the W-byte row.
    * MN-major, no swizzle: ((T,1,m),(8,k)):((1,T,SBO),(1T,LBO)): 16 bytes of MN contiguous,
      the next 16 bytes of MN at SBO, K rows 16 B apart, the next 8 K at LBO.
    * MN-major, W-byte swizzle: ((T,W/16,m),(8,k)):((1,T,LBO),(W/16*T,SBO)): W bytes of MN
      contiguous, the next W bytes of MN at LBO, K rows W bytes apart, the next 8 K at SBO.

    then Swizzle<log2(W/16),4,3> on the address (XOR bits 4.. with bits 7..).
    """
    d = desc if isinstance(desc, SmemDesc) else decode_smem_desc(desc)
    where = f"tcgen05 operand ({major}-major, {d.swizzle_name} swizzle, descriptor {d.raw:#018x})"
    if d.lbo_mode:
        raise Unsupported(f"{where}: leading-dimension absolute address mode (bit 52) is sm_103a only")
    if d.swizzle == 1:
        raise Unsupported(f"{where}: 128B swizzling with 32B atomicity is not implemented")
    W = d.swizzle_bytes
    r = np.arange(rows, dtype=np.int64)[:, None]
    kb = np.arange(row_bytes, dtype=np.int64)[None, :]
    if major == "K":
        if W and row_bytes > W:
            raise EmuError(f"{where}: {row_bytes} bytes of K do not fit the {W}-byte swizzle atom")
        if W == 0:
            lin = (r % 8) * 16 + (r // 8) * d.sbo + (kb // 16) * d.lbo + kb % 16
        else:
            lin = (r % 8) * W + (r // 8) * d.sbo + kb
    elif major == "MN":
        if elem_bits not in (8, 16, 32):
            raise Unsupported(f"{where}: MN-major {elem_bits}-bit elements")
        eb = elem_bits // 8
        if row_bytes % eb:
            raise EmuError(f"{where}: {row_bytes} bytes is not a whole number of {elem_bits}-bit elements")
        kk, byte = kb // eb, kb % eb      # K index and byte within the element
        mn = r * eb                       # byte offset of the row's element along MN
        if W == 0:
            lin = (mn % 16) + (mn // 16) * d.sbo + (kk % 8) * 16 + (kk // 8) * d.lbo + byte
        else:
            lin = (mn % W) + (mn // W) * d.lbo + (kk % 8) * W + (kk // 8) * d.sbo + byte
    else:
        raise EmuError(f"{where}: major must be 'K' or 'MN'")
    return _swizzle(d.start + lin, W, d.base_offset if W else 0)


def read_matrix(smem: np.ndarray, desc: int | SmemDesc, rows: int, row_bytes: int,
                major: str = "K", elem_bits: int = 8) -> np.ndarray:
    """The operand's raw bytes (rows, row_bytes) read from ``smem`` (uint8) by the descriptor."""
    addr, hi = _operand_plan(desc if isinstance(desc, SmemDesc) else int(desc), rows, row_bytes, major, elem_bits)
    smem = np.asarray(smem)
    if hi >= smem.size:
        d = desc if isinstance(desc, SmemDesc) else decode_smem_desc(desc)
        raise CheckFailed(f"tcgen05 operand (descriptor {d.raw:#018x}) reads shared memory byte "
                          f"{hi:#x}, beyond the CTA's {smem.size} bytes")
    return smem.reshape(-1)[addr].astype(np.uint8, copy=False)


# ------------------------------------------------------------- TMEM data paths

@dataclass(frozen=True)
class DLayout:
    """Where D[m, n] lives: ``cta`` (0 even / 1 odd of the pair), ``lane``, ``column`` (offset
    from D's column), each int64 (M, N). ``name`` is the ISA's layout letter."""
    name: str
    m: int
    n: int
    cta: np.ndarray
    lane: np.ndarray
    column: np.ndarray


def d_layout(m: int, n: int, cta_group: int = 1, lane_base: int = 0, ws: bool = False) -> DLayout:
    """The data-path layout of ISA 9.7.16.10.5 for a dense MMA.

    * Layout D (M=128, cta_group::1): row r in lane r, column n.
    * Layout F (M=64, cta_group::1, half the data path): rows 16q..16q+15 in lanes
      32q + lane_base .. +15 of lane quarter q (lane_base 0 or 16 = the D address's lane), column n.
    * Layout A (M=256, cta_group::2): rows 0-127 in the even CTA, 128-255 in the odd one, row r
      in lane r % 128, column n.
    * Layout B (M=128, cta_group::2, 2x2): rows 0-63 in the even CTA, 64-127 in the odd one; in
      each, row r (of 64) and column n sit in lane r + 64*(n // (N/2)), column n % (N/2).

    ``ws`` (``tcgen05.mma.ws``, cta_group::1, M 32 / 64 / 128; the ISA gives these as figures
    only: checked, as facts, against CUTLASS's ``tmem_frg_ws`` atoms): M=128 is Layout D; M=64
    ("ws-64", 2x2 data path): row r, column n in lane r + 64*(n // (N/2)), column n % (N/2);
    M=32 ("ws-32", 1x4): row r, column n in lane r + 32*(n // (N/4)), column n % (N/4).
    """
    r = np.arange(m, dtype=np.int64)[:, None] + np.zeros((1, n), dtype=np.int64)
    c = np.arange(n, dtype=np.int64)[None, :] + np.zeros((m, 1), dtype=np.int64)
    zero = np.zeros((m, n), dtype=np.int64)
    if ws and m in (32, 64) and cta_group == 1:
        if lane_base:
            raise EmuError(f"Layout ws-{m} (tcgen05.mma.ws M={m}): D's lane must be 0, not {lane_base}")
        parts = 128 // m
        width = n // parts
        return DLayout(f"ws-{m}", m, n, zero, r + m * (c // width), c % width)
    if cta_group == 1 and m == 128:
        if lane_base:
            raise EmuError(f"Layout D (M=128): D's lane must be 0, not {lane_base}")
        return DLayout("D", m, n, zero, r, c)
    if cta_group == 1 and m == 64:
        if lane_base not in (0, 16):
            raise EmuError(f"Layout F (M=64): D's lane must be 0 or 16, not {lane_base}")
        return DLayout("F", m, n, zero, 32 * (r // 16) + lane_base + r % 16, c)
    if cta_group == 2 and m == 256:
        if lane_base:
            raise EmuError(f"Layout A (M=256): D's lane must be 0, not {lane_base}")
        return DLayout("A", m, n, r // 128, r % 128, c)
    if cta_group == 2 and m == 128:
        if lane_base:
            raise EmuError(f"Layout B (M=128, cta_group::2): D's lane must be 0, not {lane_base}")
        half = n // 2
        rr = r % 64
        return DLayout("B", m, n, r // 64, rr + 64 * (c // half), c % half)
    raise Unsupported(f"no data-path layout for M={m} with .cta_group::{cta_group}")


@functools.lru_cache(maxsize=256)
def _d_layout_cached(m: int, n: int, cta_group: int, lane_base: int, ws: bool = False) -> DLayout:
    lay = d_layout(m, n, cta_group, lane_base, ws)
    for a in (lay.cta, lay.lane, lay.column):
        a.flags.writeable = False
    return lay


class _Block:
    """One CTA's part of a D layout, planned once: D rows ``rows`` (a slice: every layout gives
    each CTA a run of whole rows) and where they live in that CTA's TMEM, as a rectangle of
    cells (``rect``: lanes, column offsets; Layouts D and A) or flat cell indices ``flat``
    (lane * columns + column offset; Layouts B and F); the lane and column bounds they reach."""
    __slots__ = ("cta", "rows", "rect", "flat", "lane_max", "col_min", "col_max", "lanes", "cols")

    def __init__(self, cta, rows, lanes, cols, ncolumns):
        self.cta, self.rows, self.lanes, self.cols = cta, rows, lanes, cols
        self.lane_max, self.col_min, self.col_max = int(lanes.max()), int(cols.min()), int(cols.max())
        l0, c0 = int(lanes[0, 0]), int(cols[0, 0])
        h, w = lanes.shape
        if (lanes == l0 + np.arange(h)[:, None]).all() and (cols == c0 + np.arange(w)[None, :]).all():
            self.rect, self.flat = (l0, l0 + h, c0, c0 + w), None
        else:
            self.rect, self.flat = None, lanes * ncolumns + cols


@functools.lru_cache(maxsize=256)
def _d_blocks(layout_key, ncolumns: int):
    lay = _d_layout_cached(*layout_key)
    out = []
    for cta in range(int(lay.cta.max()) + 1):
        sel = lay.cta == cta
        rows = np.flatnonzero(sel.any(axis=1))
        if not (sel[rows].all() and rows.size == rows[-1] - rows[0] + 1):
            raise EmuError(f"Layout {lay.name}: CTA {cta} does not hold whole consecutive rows of D")
        r = slice(int(rows[0]), int(rows[-1]) + 1)
        out.append(_Block(cta, r, lay.lane[r], lay.column[r], ncolumns))
    return out


def _blocks(layout: DLayout, t) -> list:
    return _d_blocks((layout.m, layout.n, 2 if layout.name in ("A", "B") else 1,
                      _lane_base(layout), layout.name.startswith("ws")), t.cells.shape[1])


def _lane_base(layout: DLayout) -> int:
    return int(layout.lane[0, 0]) if layout.name == "F" else 0


def _check_block(t, b: _Block, col: int, what: str) -> None:
    if b.lane_max >= 128:
        raise CheckFailed(t._at(f"{what}: TMEM lane {b.lane_max} is beyond lane 127"))
    t.check_columns(col + b.col_min, b.col_max - b.col_min + 1, what)


def read_d(tmems, address: int, layout: DLayout, what: str = "tcgen05.mma D") -> np.ndarray:
    """D (M, N) as uint32 words from the TMEM(s) of the CTA (pair) at ``address``."""
    col = int(address) & 0xFFFF
    out = np.empty((layout.m, layout.n), dtype=np.uint32)
    for b in _blocks(layout, tmems[0]):
        t = tmems[b.cta]
        _check_block(t, b, col, what)
        if b.rect is not None:
            l0, l1, c0, c1 = b.rect
            cells, defined = t.cells[l0:l1, col + c0:col + c1], t.defined[l0:l1, col + c0:col + c1]
        else:
            idx = b.flat + col
            cells, defined = t.cells.reshape(-1)[idx], t.defined.reshape(-1)[idx]
        if t.check_undefined and not defined.all():
            i = int(np.flatnonzero(~defined)[0])
            raise CheckFailed(t._at(f"{what}: reads TMEM lane {int(b.lanes.reshape(-1)[i])} column "
                                    f"{col + int(b.cols.reshape(-1)[i])}, never written since its allocation"))
        out[b.rows] = cells
    return out


def write_d(tmems, address: int, layout: DLayout, words: np.ndarray, what: str = "tcgen05.mma D",
            disabled_lanes=None) -> None:
    """``disabled_lanes``: per CTA a bool (128,) of TMEM lanes left as they are (tcgen05.mma's
    disable-output-lane mask), or None."""
    col = int(address) & 0xFFFF
    words = np.asarray(words)
    for b in _blocks(layout, tmems[0]):
        t = tmems[b.cta]
        _check_block(t, b, col, what)
        part = words[b.rows].astype(np.uint32, copy=False)
        off = None if disabled_lanes is None else disabled_lanes[b.cta]
        if b.rect is not None:
            l0, l1, c0, c1 = b.rect
            if off is not None and off[l0:l1].any():
                on = ~off[l0:l1]
                t.cells[l0:l1, col + c0:col + c1][on] = part[on]
                t.defined[l0:l1, col + c0:col + c1][on] = True
                continue
            t.cells[l0:l1, col + c0:col + c1] = part
            t.defined[l0:l1, col + c0:col + c1] = True
        else:
            idx = b.flat + col
            if off is not None:
                on = ~off[idx // t.cells.shape[1]]
                idx, part = idx[on], part[on]
            t.cells.reshape(-1)[idx] = part
            t.defined.reshape(-1)[idx] = True


def _check_cells(t, lanes: np.ndarray, cols: np.ndarray, what: str) -> None:
    if int(lanes.max()) >= 128:
        raise CheckFailed(t._at(f"{what}: TMEM lane {int(lanes.max())} is beyond lane 127"))
    c0, c1 = int(cols.min()), int(cols.max())
    t.check_columns(c0, c1 - c0 + 1, what)


def a_from_tmem(tmems, address: int, m: int, cta_group: int = 1, k_bytes: int = 32,
                what: str = "tcgen05.mma [a-tmem]") -> np.ndarray:
    """A (M, k_bytes) raw bytes from TMEM: row r in the lane its D row uses (Layouts D, F, A),
    K packed little-endian in consecutive 32-bit columns (ISA 9.7.16.10.4: elements contiguous
    in a word, lower K index in lower bits), starting at the address's column."""
    lane0, col = int(address) >> 16 & 0xFFFF, int(address) & 0xFFFF
    if k_bytes % 4:
        raise EmuError(f"{what}: {k_bytes} bytes of K are not whole 32-bit columns")
    ncols = k_bytes // 4
    lay = _d_layout_cached(m, ncols, cta_group, lane0)
    if lay.name == "B":
        raise Unsupported(f"{what}: A from TMEM with M=128 .cta_group::2 (Layout B)")
    words = read_d(tmems, address & 0xFFFF0000 | col, lay, what)
    return np.ascontiguousarray(words.astype("<u4")).view(np.uint8).reshape(m, k_bytes)


def scale_layout(count: int, scale_vec: str, sf_id: int):
    """Where the scale factors of rows 0..count-1 sit, relative to [scale-tmem]:
    (lane within each 32-lane quarter, column offset, first byte) per row, and the number of
    consecutive bytes (scale factors) each row has. Rows of 32 consecutive indices share a
    column; every lane quarter holds the same copy (ISA 9.7.16.10.7: "duplicated to all 32
    lane partitions"); the byte is the scale-factor id (1X: byte, 2X: half-word offset, 4X: 0)."""
    r = np.arange(count)
    return r % 32, r // 32, np.full(count, sf_id), SCALE_BLOCKS[scale_vec]


def read_scales(tmem, address: int, count: int, scale_vec: str, sf_id: int, fmt: str,
                what: str = "tcgen05.mma scale factors") -> np.ndarray:
    """Scale factors (count, blocks) as float64 from one CTA's TMEM."""
    lane0, col = int(address) >> 16 & 0xFFFF, int(address) & 0xFFFF
    if lane0:
        raise Unsupported(f"{what}: scale-factor address with lane {lane0}")
    lane, coff, byte0, nb = scale_layout(count, scale_vec, sf_id)
    ncols = int(coff.max()) + 1
    words = tmem.read(0, 128, col, ncols, what)                   # (128, ncols)
    quarters = words.reshape(4, 32, ncols)
    if not (quarters == quarters[0]).all():
        q, ln, cl = np.argwhere(quarters != quarters[0])[0]
        raise CheckFailed(tmem._at(
            f"{what}: column {col + cl} differs between lane {ln} and lane {32 * q + ln}; scale "
            "factors must be duplicated to all four 32-lane partitions"))
    b = quarters[0].astype("<u4").view(np.uint8).reshape(32, ncols, 4)
    codes = np.stack([b[lane, coff, byte0 + i] for i in range(nb)], axis=1)
    return decode(codes, fmt)


# ------------------------------------------------------------------- arithmetic

def mma(instr: InstrDesc, a_vals: np.ndarray, b_vals: np.ndarray, d: np.ndarray | None = None,
        scale_a: np.ndarray | None = None, scale_b: np.ndarray | None = None,
        scale_input_d: int = 0) -> np.ndarray:
    """``D = (A*scale_A)(B*scale_B)^T + D * 2^-scale_input_d`` for one instruction.

    ``a_vals`` (M, K) and ``b_vals`` (N, K) float64 element values (B given N-major rows, K in
    order); ``d`` (M, N) or ``None`` when enable-input-d is false. Block-scaled kinds multiply
    K-block j (``instr.block_size`` elements) of row m of A by ``scale_a[m, j]`` and of row n of
    B by ``scale_b[n, j]`` (ISA 9.7.16.10.7). Returns float32 (float16-rounded for an F16 D),
    int32 for kind::i8 (wrapping, or saturating when the idesc asks)."""
    where = f"tcgen05.mma.kind::{instr.kind} M={instr.m} N={instr.n} K={instr.k}"
    if instr.sparse:
        raise Unsupported(f"{where}: sparse A (tcgen05.mma.sp) is not implemented")
    a = np.asarray(a_vals, dtype=np.float64)
    b = np.asarray(b_vals, dtype=np.float64)
    if a.shape != (instr.m, instr.k) or b.shape != (instr.n, instr.k):
        raise EmuError(f"{where}: A must be {(instr.m, instr.k)} and B {(instr.n, instr.k)}, "
                       f"got {a.shape} and {b.shape}")
    if instr.negate_a:
        a = -a
    if instr.negate_b:
        b = -b
    if instr.scale_vec is not None:
        bs = instr.block_size
        nb = instr.k // bs
        if scale_a is None or scale_b is None:
            raise EmuError(f"{where}: block-scaled kinds need scale_A and scale_B")
        sa, sb = np.asarray(scale_a, np.float64), np.asarray(scale_b, np.float64)
        if sa.shape != (instr.m, nb) or sb.shape != (instr.n, nb):
            raise EmuError(f"{where}: scales must be {(instr.m, nb)} and {(instr.n, nb)}, "
                           f"got {sa.shape} and {sb.shape}")
        a = a * np.repeat(sa, bs, axis=1)
        b = b * np.repeat(sb, bs, axis=1)
    if instr.kind == "i8":
        acc = a.astype(np.int64) @ b.astype(np.int64).T
        if d is not None:
            acc = acc + np.asarray(d).astype(np.int64)
        if instr.saturate:
            return np.clip(acc, -2**31, 2**31 - 1).astype(np.int32)
        return ((acc + 2**31) % 2**32 - 2**31).astype(np.int32)
    with np.errstate(invalid="ignore", over="ignore"):   # inf / NaN inputs are values too
        # BLAS in blocks that stay on one thread (units/products.py): OpenBLAS's thread pool
        # made whole-product calls 20-100x slower on a loaded 2-core machine
        acc = abt(a, b)
        if d is not None:
            if int(scale_input_d) == 0:   # (D * 2^0 is D: added as it is, in place; the same sums)
                np.add(acc, np.asarray(d), out=acc, dtype=np.float64)
            else:
                acc = acc + np.asarray(d, dtype=np.float64) * 2.0 ** (-int(scale_input_d))
        if instr.d_format == "f16":
            return acc.astype(np.float16).astype(np.float32)
        return acc.astype(np.float32)


def _words_to_d(words: np.ndarray, fmt: str) -> np.ndarray:
    """(A view of ``words`` where no conversion is needed: run_mma's are its own fresh arrays.)"""
    if fmt == "f32":
        return np.asarray(words, dtype=np.uint32).view(np.float32)
    if fmt == "f16":   # ISA 9.7.16.10.4.1: one 16-bit element in the low half of a word
        return (words.astype(np.uint32) & 0xFFFF).astype(np.uint16).view(np.float16).astype(np.float32)
    return np.asarray(words, dtype=np.uint32).view(np.int32)


def _d_to_words(vals: np.ndarray, fmt: str) -> np.ndarray:
    """(A view of ``vals`` where no conversion is needed: write_d copies them into TMEM.)"""
    if fmt == "f32":
        return np.asarray(vals, dtype=np.float32).view(np.uint32)
    if fmt == "f16":
        return vals.astype(np.float16).view(np.uint16).astype(np.uint32)
    return np.asarray(vals, dtype=np.int32).view(np.uint32)


def mma_smem_addresses(instr: InstrDesc, b_desc: int, a_desc: int | None = None) -> dict:
    """The shared-memory bytes one ``tcgen05.mma`` reads, per CTA of the group (for the
    in-flight checker): ``{"A": int64 (M/g, K bytes) | None, "B": int64 (N/g, K bytes)}``;
    every CTA of a ``cta_group::2`` pair reads the same offsets in its own shared memory."""
    g = instr.cta_group
    k_bytes = instr.k * FORMAT_BITS[instr.a_format] // 8
    a = None if a_desc is None else operand_addresses(
        a_desc, instr.m // g, k_bytes, instr.a_major, FORMAT_BITS[instr.a_format])
    b = operand_addresses(b_desc, instr.n // g, instr.k * FORMAT_BITS[instr.b_format] // 8,
                          instr.b_major, FORMAT_BITS[instr.b_format])
    return {"A": a, "B": b}


def run_mma(instr: InstrDesc, tmems, smems, d_address: int, b_desc: int,
            a_desc: int | None = None, a_tmem: int | None = None, enable_input_d: bool = True,
            sfa_address: int | None = None, sfb_address: int | None = None,
            scale_input_d: int = 0, a_raw: np.ndarray | None = None, b_raw: np.ndarray | None = None,
            keep: dict | None = None, disabled_lanes=None, d_in: np.ndarray | None = None) -> np.ndarray:
    """One ``tcgen05.mma``: reads the operands, scales and D, writes D; returns D (M, N).

    ``tmems`` / ``smems``: the TMEM and shared memory (uint8) of each CTA taking part, even CTA
    first (one each for cta_group::1, two for ::2). With ``cta_group::2`` the even CTA supplies
    rows 0..M/2-1 of A and rows 0..N/2-1 of B, the odd CTA the rest, each from its own shared
    memory at the same descriptor (porter's emulator notes; the ISA says the MMA "is performed
    on the Tensor Memory of the executing thread's CTA and its peer CTA"); each CTA scales its
    D rows with the scale factors in its own TMEM.

    ``d_in``: D's values (M, N) as the previous MMA of this commit group returned them, given
    when it wrote the same D (every lane) right before: what reading them back would give."""
    g = instr.cta_group
    if len(tmems) != g or len(smems) != g:
        raise EmuError(f"tcgen05.mma.cta_group::{g}: needs {g} TMEM(s) and shared memories")
    if (a_desc is None) == (a_tmem is None):
        raise EmuError("tcgen05.mma: exactly one of a_desc and a_tmem")
    k_bytes = instr.k * FORMAT_BITS[instr.a_format] // 8
    if instr.kind in ("f8f6f4", "mxf8f6f4") and FORMAT_BITS[instr.a_format] < 8:
        raise Unsupported(f"tcgen05.mma.kind::{instr.kind}: {instr.a_format} A in 8-bit containers "
                          "(ISA Figures 199-203) is not implemented")
    if instr.kind in ("f8f6f4", "mxf8f6f4") and FORMAT_BITS[instr.b_format] < 8:
        raise Unsupported(f"tcgen05.mma.kind::{instr.kind}: {instr.b_format} B in 8-bit containers "
                          "(ISA Figures 199-203) is not implemented")
    mh, nh = instr.m // g, instr.n // g
    lane0 = (int(d_address) >> 16) & 0xFFFF
    layout = _d_layout_cached(instr.m, instr.n, g, lane0, instr.ws)
    # a_raw / b_raw given: the operand's bytes from a collector buffer (ops/tcgen05.py), not memory
    if a_raw is not None:
        pass
    elif a_tmem is not None:
        a_raw = a_from_tmem(tmems, a_tmem, instr.m, g, k_bytes)
    else:
        a_raw = np.concatenate([read_matrix(smems[c], a_desc, mh, k_bytes, instr.a_major,
                                            FORMAT_BITS[instr.a_format]) for c in range(g)])
    if b_raw is None:
        b_raw = np.concatenate([read_matrix(smems[c], b_desc, nh, k_bytes, instr.b_major,
                                            FORMAT_BITS[instr.b_format]) for c in range(g)])
    if keep is not None:
        keep["a"], keep["b"] = a_raw, b_raw
    a_vals = operand_values(a_raw, instr.a_format)
    b_vals = operand_values(b_raw, instr.b_format)
    if not enable_input_d:
        d = None
    elif d_in is not None:
        d = d_in
    else:
        d = _words_to_d(read_d(tmems, d_address, layout), instr.d_format)
    if instr.scale_vec is None:
        out = mma(instr, a_vals, b_vals, d, scale_input_d=scale_input_d)
    else:
        if sfa_address is None or sfb_address is None:
            raise EmuError(f"tcgen05.mma.kind::{instr.kind}: needs [scale-A-tmem] and [scale-B-tmem]")
        if layout.name == "B":
            raise Unsupported(f"tcgen05.mma.kind::{instr.kind}: M=128 with .cta_group::2 (scale "
                              "factors of B split over lane-quarter pairs) is not implemented")
        out = np.empty((instr.m, instr.n), dtype=np.float32)
        for c in range(g):
            rows = slice(c * mh, (c + 1) * mh)
            sa = read_scales(tmems[c], sfa_address, mh, instr.scale_vec, instr.sfa_id, instr.scale_format)
            sb = read_scales(tmems[c], sfb_address, instr.n, instr.scale_vec, instr.sfb_id, instr.scale_format)
            sub = InstrDesc(**{**instr.__dict__, "m": mh})
            out[rows] = mma(sub, a_vals[rows], b_vals, None if d is None else d[rows], sa, sb)
    write_d(tmems, d_address, layout, _d_to_words(out, instr.d_format), disabled_lanes=disabled_lanes)
    return out
