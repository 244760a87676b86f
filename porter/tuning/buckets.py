"""Shape buckets: the result of a sweep is a table over shapes, not one point.

GEMM shapes bucket by M, N and K each rounded up to a power of two; attention by head
dimension and causality (the kernel's own) and the key length rounded up to a power of
two; the megakernel by decode position, likewise. Each bucket is swept at one shape (its
representative: the first shape given that falls into it).
"""

from __future__ import annotations

from porter.errors import PorterError

# The shapes a sweep covers when --shapes is not given: the standard (benchmark) shapes
# of porter.timing plus smaller ones, so the table says where a configuration stops paying.
EXTRA_SHAPES = {
    "gemm": ("2048x2048x2048", "4096x4096x4096"),
    "attention": ("4x16x16x1024x1024",),
    "megakernel": ("128",),
}


def _pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


def bucket_of(spec, shape: str) -> str:
    """The bucket ``shape`` falls into for ``spec`` (PorterError for a malformed shape)."""
    if spec.family == "gemm":
        from porter.timing.gemm_model import parse_shape

        m, n, k = parse_shape(shape)
        return f"m{_pow2(m)}.n{_pow2(n)}.k{_pow2(k)}"
    if spec.family == "attention":
        from porter.timing.attention_model import parse_shape

        _b, _hq, _hkv, _sq, sk = parse_shape(shape)
        cfg = spec.config
        causal = ".causal" if cfg.get("causal") else ""
        return f"hd{cfg.get('head_dim', '?')}{causal}.s{_pow2(sk)}"
    if spec.family == "megakernel":
        from porter.timing.megakernel_model import parse_shape

        return f"pos{_pow2(max(1, parse_shape(shape)))}"
    raise PorterError(f"kernel '{spec.name}': no shape buckets for family '{spec.family}'")


def sweep_shapes(spec, shapes=None) -> dict[str, str]:
    """bucket -> representative shape, for ``shapes`` (as --shapes takes them) or the
    family's standard shapes plus EXTRA_SHAPES, in the order given."""
    from porter.timing import standard_shapes

    given = list(shapes) if shapes else list(standard_shapes(spec)) + list(EXTRA_SHAPES.get(spec.family, ()))
    out: dict[str, str] = {}
    for shape in given:
        out.setdefault(bucket_of(spec, str(shape)), str(shape))
    return out


def default_bucket(spec) -> str:
    """The bucket a kernel variant uses when no shape is named: its first standard shape's."""
    from porter.timing import standard_shapes

    return bucket_of(spec, standard_shapes(spec)[0])
