"""What every kernel family provides, and what the pipeline does with it.

A family (gemm, attention, megakernel) is a module with

    FAMILY: str
    def variants(arch) -> list[KernelSpec | Unsupported]
    def render(spec, arch) -> str              # self-contained CUDA source
    def numerics(spec, arch) -> dict | None    # CPU check of the variant's arithmetic

``KernelSpec`` is data: the chosen configuration and what its machine code must
show. ``Unsupported`` names the descriptor features a variant is missing, so the
report can say *why* (fp4 on Hopper: "needs fp4, block_scale_nvfp4, tcgen05").
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping


@dataclass(frozen=True)
class SassRule:
    """An opcode regex (matched at the start of the full opcode) and why it matters."""

    pattern: str
    why: str


@dataclass(frozen=True)
class KernelSpec:
    family: str                    # "gemm"
    name: str                      # unique per arch: "gemm.nvfp4.pair"
    variant: str                   # the user-facing variant: "gemm.nvfp4"
    entry: str                     # __global__ function name in the rendered source
    config: Mapping[str, Any]      # tile shape, stages, cluster, warp roles ...
    features: tuple[str, ...]      # descriptor features this variant relies on
    sass_required: tuple[SassRule, ...] = ()
    sass_forbidden: tuple[SassRule, ...] = ()
    threads: int = 128
    smem_bytes: int = 0            # dynamic shared memory per CTA
    tmem_columns: int = 0          # Tensor Memory columns allocated per CTA
    cluster: tuple[int, int, int] = (1, 1, 1)
    template: str = ""             # the template it renders from

    def __post_init__(self):
        if not isinstance(self.config, MappingProxyType):
            object.__setattr__(self, "config", MappingProxyType(dict(self.config)))

    def to_dict(self) -> dict:
        return {
            "family": self.family, "name": self.name, "variant": self.variant,
            "entry": self.entry, "config": dict(self.config),
            "features": list(self.features),
            "sass_required": [[r.pattern, r.why] for r in self.sass_required],
            "sass_forbidden": [[r.pattern, r.why] for r in self.sass_forbidden],
            "threads": self.threads, "smem_bytes": self.smem_bytes,
            "tmem_columns": self.tmem_columns, "cluster": list(self.cluster),
            "template": self.template,
        }


@dataclass(frozen=True)
class Unsupported:
    family: str
    name: str
    variant: str
    missing: tuple[str, ...]       # descriptor features the arch lacks
    reason: str = ""

    def to_dict(self) -> dict:
        return {"family": self.family, "name": self.name, "variant": self.variant,
                "missing": list(self.missing), "reason": self.reason}


def no_spills(arch) -> tuple[SassRule, ...]:
    """What no tuned tensor-core kernel may contain: local-memory traffic means spills,
    in the arch's own spelling (``sass_ops.local_memory``)."""
    return (SassRule(arch.sass_pattern("op:local_memory"),
                     "local-memory spill or stack traffic (sass_ops.local_memory)"),)

