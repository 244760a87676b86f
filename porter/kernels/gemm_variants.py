"""What the GEMM family and its path modules share: the variants as data and the naming.

``porter.kernels.gemm`` (the family: variant selection, render, numerics) and the path
modules (``gemm_wgmma``, ``gemm_tcgen05``, ``gemm_mma_sync``) all import this module and
nothing imports them back from here, so the family's data flows one way.
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.errors import PorterError

FAMILY = "gemm"
TEMPLATE = "gemm.cu.j2"

# Tensor-core generations with a GEMM path, in order of preference.
PATHS = ("tcgen05", "wgmma", "mma_sync")
# The descriptor features each path's make_spec needs (gemm_tcgen05 refuses an arch
# without TMEM; gemm_wgmma is the wgmma path; gemm_mma_sync - tensor_core.generation
# mma_sync - stages with TMA where the descriptor has it and with cp.async otherwise).
PATH_FEATURES = {"tcgen05": ("tcgen05", "tmem"), "wgmma": ("wgmma",), "mma_sync": ("mma_sync",)}
# CTA-pair MMA (cta_group::2) exists only on the tcgen05 path: wgmma has no pair form.
PAIR_PATHS = ("tcgen05",)


@dataclass(frozen=True)
class GemmVariant:
    """One GEMM variant as data."""

    name: str                      # "bf16": the dtype part of "gemm.bf16"
    a_format: str                  # element format of A and B
    b_format: str
    features: tuple[str, ...]      # descriptor features needed beyond a GEMM tensor-core path
    per_tensor_scales: bool        # scale_a * scale_b applied in the epilogue (else 1.0)
    block_scale: str = ""          # "" | "mx" (ue8m0 / 32 along K) | "nvfp4" (ue4m3 / 16 along K)
    scale_block_k: int = 0         # K elements per block scale
    scale_format: str = ""         # "ue8m0" | "ue4m3"
    extra_params: tuple[tuple[str, str], ...] = ()  # kernel params between tma_b and c
    paths: tuple[str, ...] = PATHS  # generations with a path that can run it (block scales: tcgen05 and mma_sync)

    @property
    def variant(self) -> str:
        return f"{FAMILY}.{self.name}"


# Block-scaled kinds read their scale factors through two more tensor maps
# (one per operand), so every path takes the same argument list.
_SCALE_MAPS = (("tma_sfa", "TmaDescriptor"), ("tma_sfb", "TmaDescriptor"))

VARIANTS: dict[str, GemmVariant] = {v.name: v for v in (
    GemmVariant("bf16", "bf16", "bf16", (), per_tensor_scales=False),
    GemmVariant("fp8", "e4m3", "e4m3", ("fp8",), per_tensor_scales=True),
    GemmVariant("mxfp8", "e4m3", "e4m3", ("fp8", "block_scale_mx"), per_tensor_scales=False,
                block_scale="mx", scale_block_k=32, scale_format="ue8m0", extra_params=_SCALE_MAPS,
                paths=("tcgen05", "mma_sync")),
    GemmVariant("nvfp4", "e2m1", "e2m1", ("fp4", "block_scale_nvfp4"), per_tensor_scales=True,
                block_scale="nvfp4", scale_block_k=16, scale_format="ue4m3", extra_params=_SCALE_MAPS,
                paths=("tcgen05", "mma_sync")),
)}

# The CTA-pair configuration of every variant: one MMA spans a 2-CTA cluster.
PAIR_FEATURES = ("cta_pair",)


def kernel_params(variant: GemmVariant) -> list[tuple[str, str]]:
    """(name, C type) of every kernel parameter, in order.

    ``TmaDescriptor`` is a CUtensorMap (128 bytes) passed by value as
    ``const __grid_constant__``; scale_a / scale_b are the per-tensor fp32 scales
    (1.0 for variants without them, still passed so the host side is uniform).
    """
    return ([("tma_a", "TmaDescriptor"), ("tma_b", "TmaDescriptor")]
            + list(variant.extra_params)
            + [("c", "__nv_bfloat16*"), ("m", "int"), ("n", "int"), ("k", "int"),
               ("scale_a", "float"), ("scale_b", "float")])


def spec_name(variant: GemmVariant, pair: bool) -> str:
    return variant.variant + (".pair" if pair else "")


def entry_name(variant: GemmVariant, pair: bool, generation: str) -> str:
    """The __global__ function name, e.g. porter_gemm_bf16_wgmma."""
    return f"porter_gemm_{variant.name}{'_pair' if pair else ''}_{generation}"


def variant_paths(variant: GemmVariant, pair: bool) -> tuple[str, ...]:
    """The generations whose path can build ``variant`` (in its CTA-pair form with ``pair``)."""
    return tuple(p for p in variant.paths if not pair or p in PAIR_PATHS)


def pick_kind(arch, variant: GemmVariant, issuable, instruction: str, note: str = "") -> str:
    """The first MMA kind of the descriptor's tensor core that takes ``variant``'s operand
    format (with its block-scale scheme, or else among the unscaled kinds) and that
    ``issuable(kind)`` says the path has a primitive for; one error line otherwise."""
    tc = arch.tensor_core
    candidates = tc.kinds_for_format(variant.a_format)
    if variant.block_scale:
        scheme = arch.block_scales.get(variant.block_scale)
        if scheme is None:
            raise PorterError(f"arch {arch.name}: block_scales has no {variant.block_scale!r} scheme")
        candidates = [k for k in candidates if k in scheme.kinds]
    else:
        candidates = [k for k in candidates if k not in tc.block_scaled_kinds]
    candidates = [k for k in candidates if issuable(k)]
    if not candidates:
        raise PorterError(f"arch {arch.name}: no {instruction} kind porter can issue takes {variant.a_format} "
                          f"operands{' with ' + variant.block_scale + ' block scales' if variant.block_scale else ''}"
                          f"{note}")
    return candidates[0]
