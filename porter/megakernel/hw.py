"""The few hardware figures the megakernel planner reads from an arch.

Works with ``porter.descriptor.arch.Arch`` and with any object (or mapping) that has
``sm_count`` and ``hbm_bandwidth_bytes_per_s``; the shared-memory budget is read from
``smem_per_block_bytes`` when present (else the 227 KiB of sm_90a / sm_100a). An Arch
selected with ``for_product`` carries that product's SM count and bandwidth, so the
queues and the predicted step follow the product.
"""

from __future__ import annotations

from dataclasses import dataclass

from porter.errors import PorterError

DEFAULT_SMEM_PER_BLOCK = 227 * 1024
PAGE_BYTES = 16 * 1024          # one shared-memory page of the weight-streaming ring
RESERVED_SMEM = 32 * 1024       # input vector (fp32 [K<=8192]), reductions, instruction


@dataclass(frozen=True)
class HwFigures:
    sm_count: int
    hbm_bandwidth_bytes_per_s: float
    smem_per_block_bytes: int = DEFAULT_SMEM_PER_BLOCK
    product: str = ""               # the product whose figures these are (Arch.for_product), "" if unnamed

    @property
    def ring_pages(self) -> int:
        return max(1, (self.smem_per_block_bytes - RESERVED_SMEM) // PAGE_BYTES)

    @property
    def ring_bytes(self) -> int:
        """Bytes of weights one SM keeps in flight: the target size of one instruction."""
        return self.ring_pages * PAGE_BYTES

    @classmethod
    def of(cls, arch) -> "HwFigures":
        if isinstance(arch, HwFigures):
            return arch
        get = arch.get if isinstance(arch, dict) else (lambda k, d=None: getattr(arch, k, d))
        sm, bw = get("sm_count"), get("hbm_bandwidth_bytes_per_s")
        smem = get("smem_per_block_bytes", None) or DEFAULT_SMEM_PER_BLOCK
        if not isinstance(sm, int) or sm <= 0 or not bw or bw <= 0:
            raise PorterError(f"arch {get('name', '?')}: megakernel planning needs sm_count > 0 "
                              f"and hbm_bandwidth_bytes_per_s > 0 (got {sm!r}, {bw!r})")
        return cls(int(sm), float(bw), int(smem), str(get("product", "") or ""))
