"""The timing model's figures for one arch and product: the descriptor's ``perf:`` section.

``Figures`` is a flat, read-only view: ``f.clock_hz``, ``f["smem_bytes_per_clk_per_sm"]``,
``f.mma_rate(kind)``, plus the product's memory figures (SM count, L2, HBM) that the Arch
already selected. ``f.with_value(key, v)`` is the same figures with one uncertain figure
moved to an end of its range: porter.timing.predict makes every prediction again at each
end of every range, so a prediction carries the range its unsourced figures allow.

The section is read back from the descriptor's own text (``Arch.text``), checked by
porter.descriptor.perf_schema like the rest of the schema; the Arch object itself is left
as the loader builds it.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, Mapping

from porter.errors import PorterError


@functools.lru_cache(maxsize=32)
def _perf_section(text: str, path: str) -> Mapping:
    from porter.descriptor.arch_schema import check_descriptor, parse_yaml

    data, lines = parse_yaml(text, path)
    return check_descriptor(data, lines, path).get("perf") or {}


@dataclass(frozen=True)
class Figures:
    values: Mapping[str, Any]
    uncertain: Mapping[str, tuple[float, float]]
    sources: Mapping[str, Any]
    sm_count: int
    l2_bytes: int
    hbm_bytes_per_s: float
    peak_tflops: Mapping[str, float]
    product: str
    arch_name: str
    notes: tuple = field(default=())

    @classmethod
    def of(cls, arch) -> "Figures":
        perf = _perf_section(arch.text, str(arch.path))
        if not perf:
            raise PorterError(f"{arch.path}: perf: the descriptor has no perf section, so porter's timing "
                              "model has no figures for it; add one (see arch/hopper.yaml: clocks, MMA rates "
                              "per kind, shared-memory, exp2-unit, L2 and HBM figures, each with a source)")
        values = {k: v for k, v in perf.items() if k not in ("source", "uncertain", "products", "notes")}
        uncertain = dict(perf["uncertain"])
        own = perf.get("products", {}).get(arch.product) if arch.product else None
        if own:
            for k, v in own.items():
                if k in ("source", "uncertain"):
                    continue
                values[k] = {**values[k], **v} if isinstance(v, dict) else v
            uncertain.update(own.get("uncertain", {}))
        return cls(MappingProxyType(values), MappingProxyType(uncertain), MappingProxyType(dict(perf["source"])),
                   arch.sm_count, arch.l2_bytes, arch.hbm_bandwidth_bytes_per_s,
                   MappingProxyType(dict(arch.peak_tflops)), arch.product or (arch.products[0] if arch.products else ""),
                   arch.name)

    def __getitem__(self, key: str) -> float:
        return self.values[key]

    @property
    def clock_hz(self) -> float:
        """The clock cycles are converted at: the sustained clock under load where the
        descriptor gives one, else the clock the datasheet peaks imply."""
        return self.values.get("sustained_clock_mhz", self.values["clock_mhz"]) * 1e6

    def mma_rate(self, kind: str) -> float:
        """Dense FLOP per clock per SM of MMA kind ``kind``."""
        rates = self.values["mma_flop_per_clk_per_sm"]
        if kind not in rates:
            raise PorterError(f"perf.mma_flop_per_clk_per_sm: no rate for MMA kind '{kind}'; "
                              f"known: {', '.join(rates)}")
        return rates[kind]

    def ns_to_cycles(self, ns: float) -> float:
        return ns * 1e-9 * self.clock_hz

    @property
    def l2_bytes_per_clk_per_sm(self) -> float:
        """Each SM's share of the L2's bandwidth when every SM streams."""
        return self.values["l2_bandwidth_tb_s"] * 1e12 / self.sm_count / self.clock_hz

    @property
    def hbm_bytes_per_s_sustained(self) -> float:
        return self.hbm_bytes_per_s * self.values["hbm_efficiency"]

    def with_value(self, key: str, value: float) -> "Figures":
        head, _, sub = key.partition(".")
        values = dict(self.values)
        if sub:
            values[head] = {**values[head], sub: value}
        else:
            values[head] = value
        return Figures(MappingProxyType(values), self.uncertain, self.sources, self.sm_count, self.l2_bytes,
                       self.hbm_bytes_per_s, self.peak_tflops, self.product, self.arch_name, self.notes)
