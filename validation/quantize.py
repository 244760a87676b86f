"""Quantizers that produce what the kernels read: raw codes (uint8) plus scales.

Four schemes, one per GEMM variant (``quantize_for``):

* ``per_tensor``  plain fp8 GEMM: one fp32 scale per tensor, ``scale = amax / max``
  (448 for e4m3), elements ``encode(x / scale)``; the kernel multiplies the fp32
  accumulator by ``scale_a * scale_b`` in the epilogue.
* ``mx``          OCP MX: blocks of 32 along K share a ue8m0 scale (e4m3 elements =
  MXFP8; e5m2, e2m3, e3m2, e2m1 also allowed).  The scale rule is a parameter:
  ``"rceil"`` (default) = 2^ceil(log2(amax / max_elem)), the rule NVIDIA's
  hardware and cuBLAS use (ARCH_FACTS "Low-precision formats"); on the device it
  is one ``cvt.rp.satfinite.ue8m0x2.f32`` of amax / max_elem (PTX ``cvt``:
  ue8m0 conversions round ``.rz`` or ``.rp`` only); ``"floor"`` = the OCP v1.0
  rule 2^(floor(log2 amax) - emax_elem).
  Why RCEIL by default: it is what the kernels we validate will be fed in practice,
  and it never lets a block's amax exceed the element range, so no element is
  clipped; the OCP floor rule can put amax up to ~2x past max_elem (e.g. 480 in an
  e4m3 block, clipped to 448), trading clipping for one extra bit of resolution.
  Measured here (check_gemm, 128x128x256, normal inputs): MXFP8 with the floor
  rule has a DeepGEMM diff of ~0.9-1.1e-3 against the unquantized product,
  RCEIL ~0.7e-3 -- the floor rule can miss DeepGEMM's 1e-3 fp8 threshold.
* ``nvfp4``       two-level: blocks of 16 along K share an e4m3 scale (ue4m3: always
  positive) = block_amax / 6, expressed relative to a per-tensor fp32 scale
  ``amax / (448 * 6)`` so that the block scales use e4m3's whole range.
  value = e2m1(code) * e4m3(block scale) * tensor_scale.

Each returns a ``Quantized`` record: ``codes`` (uint8, one element per byte, same
shape as the input; ``pack_fp4`` makes the two-per-byte layout), ``block_scales``
(uint8 codes, shape [..., K / block]) or None, ``tensor_scale`` (fp32) or None.
``dequantize`` maps it back to exact float64 values.

The block axis is the last axis (K for K-major A[M, K] and B[N, K]).
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from porter.errors import PorterError
from porter.validation import formats
from porter.validation.formats import E4M3, E2M1, FloatFormat, get_format

MX_BLOCK = 32
NVFP4_BLOCK = 16
SCALE_RULES = ("rceil", "floor")


@dataclass(frozen=True)
class Quantized:
    """Codes and scales as a kernel reads them."""

    scheme: str                          # "per_tensor" | "mx" | "nvfp4" | "none"
    elem: str                            # element format name
    codes: np.ndarray                    # uint8, shape of the input
    block: int | None = None             # elements per block scale along the last axis
    block_scales: np.ndarray | None = None   # uint8 codes (ue8m0 for mx, e4m3 for nvfp4)
    scale_format: str | None = None      # "ue8m0" | "e4m3"
    tensor_scale: np.float32 | None = None   # per-tensor fp32 decode scale

    @property
    def shape(self) -> tuple[int, ...]:
        return tuple(self.codes.shape)


# ------------------------------------------------------------------- helpers

def _check_blocks(x: np.ndarray, block: int, what: str) -> None:
    if x.ndim < 1 or x.shape[-1] % block != 0:
        raise PorterError(
            f"quantize: {what} needs the last axis (K) to be a multiple of {block}; "
            f"got shape {tuple(x.shape)}; pad K to a multiple of {block}")


def _blocks_amax(x32: np.ndarray, block: int) -> np.ndarray:
    """Max |x| per block of ``block`` along the last axis (fp32, exact)."""
    xb = x32.reshape(*x32.shape[:-1], x32.shape[-1] // block, block)
    return np.max(np.abs(xb), axis=-1)


def _expand(s: np.ndarray, block: int) -> np.ndarray:
    """Per-block values repeated over their elements along the last axis."""
    return np.repeat(s, block, axis=-1)


def _nan_check(x32: np.ndarray, what: str) -> None:
    if np.isnan(x32).any():
        raise PorterError(f"quantize: {what}: input has NaN; quantizers need finite inputs")


# ------------------------------------------------------------------- per-tensor

def quantize_per_tensor(x, elem: str = "e4m3") -> Quantized:
    """Per-tensor scaled fp8 (the plain fp8 GEMM): scale = amax / max_elem (fp32).

    Elements are ``encode(fp32(x / scale))``; an all-zero tensor gets scale 1.
    """
    f = get_format(elem)
    x32 = np.asarray(x, dtype=np.float32)
    _nan_check(x32, "per_tensor")
    amax = np.float32(np.max(np.abs(x32))) if x32.size else np.float32(0)
    scale = np.float32(amax / np.float32(f.max_finite)) if amax > 0 else np.float32(1.0)
    if not np.isfinite(scale) or scale == 0:
        raise PorterError(f"quantize: per_tensor scale {scale} is not usable (amax={amax})")
    codes = formats.encode(x32 / scale, f)    # fp32 division, as the cast kernel does
    return Quantized("per_tensor", f.name, codes, tensor_scale=scale)


# ------------------------------------------------------------------- MX

def mx_scale_codes(amax, elem: str | FloatFormat = "e4m3", rule: str = "rceil") -> np.ndarray:
    """ue8m0 scale codes for blocks with max magnitude ``amax``.

    ``rule="rceil"``: smallest power of two 2^e with amax <= max_elem * 2^e, i.e.
    2^ceil(log2(amax / max_elem)), found exactly (frexp, then exact float64 comparisons),
    not through a rounded fp32 division.  (A kernel computing amax * (1/max_elem)
    in fp32 first can land one exponent lower when amax / max_elem lies within an
    fp32 ulp above a power of two; the element is then clipped by at most that ulp.)
    ``rule="floor"``: OCP v1.0, 2^(floor(log2 amax) - emax_elem).
    amax = 0 gives 0x00 (2^-127; ue8m0 has no zero); NaN or inf amax gives 0xFF
    (NaN: the block cannot be represented); exponents clamp to [-127, 127].
    """
    if rule not in SCALE_RULES:
        raise PorterError(f"quantize: MX scale rule {rule!r}; use one of {SCALE_RULES}")
    f = get_format(elem)
    a = np.asarray(amax, dtype=np.float64)
    bad = ~np.isfinite(a)
    zero = a == 0
    safe = np.where(bad | zero, 1.0, a)
    _, e2 = np.frexp(safe)
    floor_log2 = e2.astype(np.int64) - 1
    if rule == "floor":
        e = floor_log2 - f.emax
    else:
        # start from a guess within one of the answer, then fix with exact compares
        e = floor_log2 - f.emax
        for _ in range(2):
            e = np.where(safe > np.ldexp(f.max_finite, e), e + 1, e)
        for _ in range(2):
            e = np.where(safe <= np.ldexp(f.max_finite, e - 1), e - 1, e)
    e = np.where(zero, -127, e)
    code = np.clip(e, -127, 127) + 127
    code = np.where(bad, formats.UE8M0_NAN, code)
    return code.astype(np.uint8)


def quantize_mx(x, elem: str = "e4m3", block: int = MX_BLOCK, rule: str = "rceil") -> Quantized:
    """MX block quantization along the last axis: ue8m0 scale per ``block`` elements.

    Elements are ``encode(x / 2^e)`` (a power-of-two division: exact in fp32 for
    every value the element format can resolve), saturating to +-max_elem.
    """
    f = get_format(elem)
    x32 = np.asarray(x, dtype=np.float32)
    _check_blocks(x32, block, f"MX ({f.name}, block {block})")
    _nan_check(x32, "mx")
    scodes = mx_scale_codes(_blocks_amax(x32, block), f, rule)
    if (scodes == formats.UE8M0_NAN).any():
        raise PorterError("quantize: mx: a block has an infinite amax; inputs must be finite")
    e = _expand(scodes.astype(np.int64) - 127, block)
    scaled = np.ldexp(x32.astype(np.float64), -e).astype(np.float32)
    codes = formats.encode(scaled, f)
    return Quantized("mx", f.name, codes, block=block, block_scales=scodes, scale_format="ue8m0")


# ------------------------------------------------------------------- NVFP4

NVFP4_TENSOR_DENOM = np.float32(E4M3.max_finite * E2M1.max_finite)   # 448 * 6 = 2688


def quantize_nvfp4(x, block: int = NVFP4_BLOCK, tensor_scale: bool = True,
                   global_amax: float | None = None) -> Quantized:
    """NVFP4: e2m1 elements, an e4m3 scale per ``block`` (16) along K, an fp32 tensor scale.

    Steps, all in fp32 as a quantization kernel does them:
      ts  = amax / (448 * 6)                (1.0 when tensor_scale=False or amax == 0)
      sb  = e4m3_satfinite((block_amax / 6) / ts)   -- stored block scale (ue4m3, >= 0)
      q   = e2m1_satfinite(x / (e4m3(sb) * ts))    -- 0 when the block scale is 0
    so value = e2m1(q) * e4m3(sb) * ts.  ``global_amax`` overrides the tensor amax
    (a calibrated amax); the default is this tensor's.
    """
    x32 = np.asarray(x, dtype=np.float32)
    _check_blocks(x32, block, f"NVFP4 (block {block})")
    _nan_check(x32, "nvfp4")
    if not np.isfinite(x32).all():
        raise PorterError("quantize: nvfp4: input has inf; inputs must be finite")
    amax = np.float32(global_amax) if global_amax is not None else (
        np.float32(np.max(np.abs(x32))) if x32.size else np.float32(0))
    if tensor_scale and amax > 0:
        ts = np.float32(amax / NVFP4_TENSOR_DENOM)
        if not (np.isfinite(ts) and ts > 0):
            raise PorterError(
                f"quantize: nvfp4 tensor scale amax/2688 = {ts} is not a usable fp32 "
                f"(amax={amax}); rescale the input or pass tensor_scale=False")
    else:
        ts = np.float32(1.0)
    bamax = _blocks_amax(x32, block)
    sb_f32 = (bamax / np.float32(E2M1.max_finite)) / ts         # fp32 ops
    sb_codes = formats.encode(sb_f32, E4M3)                       # satfinite, RNE
    sb_val = formats.decode(sb_codes, E4M3)                       # exact
    denom = _expand(sb_val, block) * np.float64(ts)               # exact in f64
    with np.errstate(divide="ignore", invalid="ignore"):
        scaled = np.where(denom > 0, x32.astype(np.float64) / np.where(denom > 0, denom, 1.0), 0.0)
    codes = formats.encode(scaled.astype(np.float32), E2M1)
    return Quantized("nvfp4", "e2m1", codes, block=block, block_scales=sb_codes,
                     scale_format="e4m3", tensor_scale=ts)


# ------------------------------------------------------------------- plain casts

def quantize_cast(x, elem: str) -> Quantized:
    """Unscaled saturating cast (no scale): e.g. bf16-like references or raw fp8 codes."""
    f = get_format(elem)
    return Quantized("none", f.name, formats.encode(x, f))


# ------------------------------------------------------------------- dequantize

def dequantize(q: Quantized) -> np.ndarray:
    """Exact float64 values the kernel's operand stands for (all scales applied)."""
    vals = formats.decode(q.codes, q.elem)
    if q.block_scales is not None:
        s = formats.decode(q.block_scales, q.scale_format)
        vals = vals * _expand(s, q.block)
    if q.tensor_scale is not None:
        vals = vals * np.float64(q.tensor_scale)
    return vals


def block_scale_values(q: Quantized) -> np.ndarray | None:
    """Decoded block scales (float64), shape [..., K / block], or None."""
    if q.block_scales is None:
        return None
    return formats.decode(q.block_scales, q.scale_format)


# ------------------------------------------------------------------- fp4 packing

def pack_fp4(codes) -> np.ndarray:
    """Two e2m1 codes per byte along the last axis: element 2i in bits 3:0, 2i+1 in 7:4.

    This is the byte layout the kernel reads.  PTX ISA 9.1, section 5.2.4.1 "Packed
    Floating Point Data Types" (Table 9) defines ``.e2m1x2`` as two e2m1 elements in
    one ``.b8``; the ``cvt`` instruction ("Data Movement and Conversion Instructions:
    cvt", Semantics) fixes the nibbles: ``cvt.rn.satfinite.e2m1x2.f32 d, a, b`` writes
    ``d[7:4] = convert(a); d[3:0] = convert(b)``, and ``cvt.rn.f16x2.e2m1x2`` unpacks
    bits 3:0 into the low half of the f16x2 (element .x, the lower index of a
    little-endian pair) and bits 7:4 into the high half (.y).  CUDA's
    ``__nv_fp4x2_e2m1`` likewise keeps its first element in the low nibble.  So the
    lower-index element sits in the low nibble -- little-endian within the byte, like
    every wider packed type -- and a kernel packing with ``cvt`` passes the
    higher-index element as ``a`` and the lower-index one as ``b``.
    """
    c = np.asarray(codes)
    if c.dtype != np.uint8:
        raise PorterError(f"quantize: pack_fp4 takes uint8 codes; got {c.dtype}")
    if c.shape[-1] % 2 != 0:
        raise PorterError(f"quantize: pack_fp4 needs an even last axis; got shape {tuple(c.shape)}")
    if (c > 0x0F).any():
        raise PorterError("quantize: pack_fp4 got a code above 0x0F; e2m1 codes are 4 bits")
    lo = c[..., 0::2]
    hi = c[..., 1::2]
    return (lo | (hi << 4)).astype(np.uint8)


def unpack_fp4(packed) -> np.ndarray:
    """Inverse of ``pack_fp4``: [..., K/2] bytes -> [..., K] uint8 codes."""
    p = np.asarray(packed, dtype=np.uint8)
    out = np.empty((*p.shape[:-1], p.shape[-1] * 2), dtype=np.uint8)
    out[..., 0::2] = p & 0x0F
    out[..., 1::2] = p >> 4
    return out


# ------------------------------------------------------------------- by variant

GEMM_VARIANTS = ("bf16", "fp8", "mxfp8", "nvfp4")


def block_size(variant: str) -> int:
    """Elements per scale block along K for a GEMM variant (1 = no block constraint)."""
    return {"bf16": 1, "fp8": 1, "mxfp8": MX_BLOCK, "nvfp4": NVFP4_BLOCK}[_variant(variant)]


def _variant(variant: str) -> str:
    if variant not in GEMM_VARIANTS:
        raise PorterError(
            f"quantize: unknown GEMM variant {variant!r}; use one of {', '.join(GEMM_VARIANTS)}")
    return variant


def to_bf16(x) -> np.ndarray:
    """Round to bfloat16 (RNE, via ml_dtypes) and return the exact float64 values."""
    import ml_dtypes
    return np.asarray(x, dtype=np.float32).astype(ml_dtypes.bfloat16).astype(np.float64)


def quantize_for(variant: str, x, *, mx_rule: str = "rceil") -> Quantized | np.ndarray:
    """Quantize a K-major operand for a GEMM variant.

    bf16 returns the bf16-rounded values (float64 array); the others a Quantized.
    """
    v = _variant(variant)
    if v == "bf16":
        return to_bf16(x)
    if v == "fp8":
        return quantize_per_tensor(x, "e4m3")
    if v == "mxfp8":
        return quantize_mx(x, "e4m3", MX_BLOCK, mx_rule)
    return quantize_nvfp4(x)
