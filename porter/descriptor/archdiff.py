"""What changes when a kernel moves from one arch to another, as data.

``diff_archs(a, b)`` compares two ``Arch`` objects and returns an ``ArchDiff``: features
gained and lost, tensor-core changes (generation, issue, accumulator), MMA kinds and
shapes, formats, block scales, limits and peak rates with their ratios. The CLI renders
it (``porter arch diff``); planners and reports read the same object or ``to_dict()``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from porter.descriptor.arch import FEATURES, Arch, MmaShape
from porter.descriptor.arch_schema import PEAK_DTYPES

# (label, unit, getter) for the scalar figures compared; units are those of the Arch.
_FIGURES = (
    ("target", "", lambda a: a.target),
    ("min_ptx", "", lambda a: a.min_ptx),
    ("min_cuda", "", lambda a: a.min_cuda),
    ("sm_count", "SMs", lambda a: a.sm_count),
    ("smem_per_sm_bytes", "bytes", lambda a: a.smem_per_sm_bytes),
    ("smem_per_block_bytes", "bytes", lambda a: a.smem_per_block_bytes),
    ("regs_per_sm", "registers", lambda a: a.regs_per_sm),
    ("max_regs_per_thread", "registers", lambda a: a.max_regs_per_thread),
    ("max_threads_per_block", "threads", lambda a: a.max_threads_per_block),
    ("max_threads_per_sm", "threads", lambda a: a.max_threads_per_sm),
    ("max_blocks_per_sm", "blocks", lambda a: a.max_blocks_per_sm),
    ("l2_bytes", "bytes", lambda a: a.l2_bytes),
    ("hbm_bytes", "bytes", lambda a: a.hbm_bytes),   # device memory (HBM or GDDR); key kept from the YAML
    ("hbm_bandwidth_bytes_per_s", "bytes/s", lambda a: a.hbm_bandwidth_bytes_per_s),
    ("tmem_bytes", "bytes", lambda a: a.tmem.bytes),
    ("cluster_max_portable", "CTAs", lambda a: a.cluster.max_portable),
    ("cluster_max_nonportable", "CTAs", lambda a: a.cluster.max_nonportable),
)


def _ratio(before: Any, after: Any) -> float | None:
    if isinstance(before, (int, float)) and isinstance(after, (int, float)) and not isinstance(before, bool):
        return after / before if before else None
    return None


@dataclass(frozen=True)
class Change:
    """One figure or property that differs (before/after None when one side lacks it)."""

    key: str
    before: Any
    after: Any
    unit: str = ""

    @property
    def ratio(self) -> float | None:
        return _ratio(self.before, self.after)

    def to_dict(self) -> dict:
        return {"key": self.key, "before": self.before, "after": self.after, "unit": self.unit,
                "ratio": self.ratio}


@dataclass(frozen=True)
class KindChange:
    """An MMA kind present on both archs whose shapes, K or formats differ."""

    kind: str
    shapes_before: tuple[MmaShape, ...]
    shapes_after: tuple[MmaShape, ...]
    formats_before: tuple[str, ...]
    formats_after: tuple[str, ...]

    @property
    def shapes_gained(self) -> tuple[MmaShape, ...]:
        return tuple(s for s in self.shapes_after if s not in self.shapes_before)

    @property
    def shapes_lost(self) -> tuple[MmaShape, ...]:
        return tuple(s for s in self.shapes_before if s not in self.shapes_after)

    def to_dict(self) -> dict:
        return {"kind": self.kind,
                "shapes_before": [s.to_dict() for s in self.shapes_before],
                "shapes_after": [s.to_dict() for s in self.shapes_after],
                "shapes_gained": [s.to_dict() for s in self.shapes_gained],
                "shapes_lost": [s.to_dict() for s in self.shapes_lost],
                "formats_before": list(self.formats_before), "formats_after": list(self.formats_after)}


@dataclass(frozen=True)
class KindRename:
    """A kind lost and a kind gained that consume overlapping element formats: the same MMA
    under a new name (Hopper's wgmma f8 becomes tcgen05 f8f6f4), not a loss and a gain."""

    before: str
    after: str
    formats_before: tuple[str, ...]
    formats_after: tuple[str, ...]
    shapes_before: tuple[MmaShape, ...]
    shapes_after: tuple[MmaShape, ...]

    @property
    def formats_kept(self) -> tuple[str, ...]:
        return tuple(f for f in self.formats_before if f in self.formats_after)

    @property
    def formats_gained(self) -> tuple[str, ...]:
        return tuple(f for f in self.formats_after if f not in self.formats_before)

    @property
    def formats_lost(self) -> tuple[str, ...]:
        return tuple(f for f in self.formats_before if f not in self.formats_after)

    @property
    def formats_summary(self) -> str:
        """"e4m3, e5m2 kept; gains e2m3, e3m2, e2m1"."""
        parts = [f"{', '.join(self.formats_kept)} kept"]
        if self.formats_gained:
            parts.append(f"gains {', '.join(self.formats_gained)}")
        if self.formats_lost:
            parts.append(f"loses {', '.join(self.formats_lost)}")
        return "; ".join(parts)

    def __str__(self) -> str:
        return f"{self.before} -> {self.after} ({self.formats_summary})"

    def to_dict(self) -> dict:
        return {"before": self.before, "after": self.after,
                "formats_kept": list(self.formats_kept), "formats_gained": list(self.formats_gained),
                "formats_lost": list(self.formats_lost),
                "shapes_before": [s.to_dict() for s in self.shapes_before],
                "shapes_after": [s.to_dict() for s in self.shapes_after],
                "text": str(self)}


def pair_renamed_kinds(tca, tcb, lost, gained) -> tuple[KindRename, ...]:
    """Pair each lost kind with the gained kind sharing most of its formats (ties: the same
    block scaling, then fewest new formats, then descriptor order); each kind pairs once."""
    renames, taken = [], set()
    for old in lost:
        fa = tca.kind_formats[old]
        scaled = old in tca.block_scaled_kinds
        candidates = [(len(set(fa) & set(tcb.kind_formats[new])),
                       (new in tcb.block_scaled_kinds) == scaled,
                       -len(set(tcb.kind_formats[new]) - set(fa)),
                       -i, new)
                      for i, new in enumerate(gained) if new not in taken]
        candidates = [c for c in candidates if c[0] > 0]
        if not candidates:
            continue
        new = max(candidates)[-1]
        taken.add(new)
        renames.append(KindRename(old, new, fa, tcb.kind_formats[new], tca.mma_shapes[old], tcb.mma_shapes[new]))
    return tuple(renames)


def kinds_without_probe(arch) -> tuple[str, ...] | None:
    """MMA kinds of ``arch`` that no probe in kernels_src/probes issues for its tensor-core
    generation (read from the probe headers, nothing compiled); None when the probes
    cannot be read. Same rule as ``porter arch check``'s kinds_without_probe."""
    try:
        from porter.descriptor.probes import discover

        probes = discover()
    except Exception:   # no probes folder in this install: say nothing rather than "unprobed"
        return None
    probed = {p.kind for p in probes if p.kind and p.generation == arch.tensor_core.generation}
    return tuple(k for k in arch.tensor_core.mma_shapes if k not in probed)


@dataclass(frozen=True)
class PeakChange:
    """Dense peak rate of one dtype on both archs (None where an arch has no peak).

    A missing figure means one of two things: the arch has no such format (the rate is
    new or gone with it), or the descriptor has the format but gives no figure (no source
    for it): ``format_before`` / ``format_after`` tell them apart.
    """

    dtype: str
    before_tflops: float | None
    after_tflops: float | None
    ridge_before: float | None  # FLOP per device-memory byte
    ridge_after: float | None
    format_before: bool = True  # the arch's formats include one of the dtype's element formats
    format_after: bool = True

    @property
    def ratio(self) -> float | None:
        return _ratio(self.before_tflops, self.after_tflops)

    @property
    def change(self) -> str:
        """"x2.28"; "new" / "gone" when the format itself is gained / lost; "not given" when
        a descriptor whose formats include the dtype has no figure for it."""
        if self.ratio is not None:
            return f"x{self.ratio:.2f}"
        if self.before_tflops is None and self.after_tflops is None:
            return "not given"
        if self.after_tflops is None:
            return "not given" if self.format_after else "gone"
        if self.before_tflops is None:
            return "not given" if self.format_before else "new"
        return "-"   # a zero figure before: no ratio to give

    def to_dict(self) -> dict:
        return {"dtype": self.dtype, "before_tflops": self.before_tflops,
                "after_tflops": self.after_tflops, "ratio": self.ratio, "change": self.change,
                "format_before": self.format_before, "format_after": self.format_after,
                "ridge_flop_per_byte_before": self.ridge_before,
                "ridge_flop_per_byte_after": self.ridge_after}


def has_peak_format(arch: Arch, dtype: str) -> bool:
    """Whether ``arch``'s formats include an element format ``dtype``'s peak rates."""
    return bool(set(PEAK_DTYPES.get(dtype, (dtype,))) & set(arch.formats))


@dataclass(frozen=True)
class ArchDiff:
    before: str  # arch names
    after: str
    features_gained: tuple[str, ...]
    features_lost: tuple[str, ...]
    features_kept: tuple[str, ...]
    tensor_core: tuple[Change, ...]  # generation / instruction / issue / accumulator
    kinds_gained: tuple[str, ...]   # without the kinds in kinds_renamed
    kinds_lost: tuple[str, ...]
    kinds_changed: tuple[KindChange, ...]
    formats_gained: tuple[str, ...]
    formats_lost: tuple[str, ...]
    block_scales_gained: tuple[str, ...]
    block_scales_lost: tuple[str, ...]
    block_scales_changed: tuple[Change, ...]
    figures: tuple[Change, ...]  # only figures that differ
    peaks: tuple[PeakChange, ...]  # every dtype either arch rates
    sass_signatures: tuple[Change, ...]  # features whose signature patterns differ
    kinds_renamed: tuple[KindRename, ...] = ()
    kinds_unprobed_before: tuple[str, ...] | None = None  # kinds no probe issues (None: unknown)
    kinds_unprobed_after: tuple[str, ...] | None = None

    @property
    def mma_shapes_changed(self) -> bool:
        return bool(self.kinds_gained or self.kinds_lost or self.kinds_changed or self.kinds_renamed)

    @property
    def empty(self) -> bool:
        return not (self.features_gained or self.features_lost or self.tensor_core
                    or self.mma_shapes_changed or self.formats_gained or self.formats_lost
                    or self.block_scales_gained or self.block_scales_lost or self.block_scales_changed
                    or self.figures or self.sass_signatures
                    or any(p.before_tflops != p.after_tflops for p in self.peaks))

    def to_dict(self) -> dict:
        return {
            "before": self.before, "after": self.after,
            "features": {"gained": list(self.features_gained), "lost": list(self.features_lost),
                         "kept": list(self.features_kept)},
            "tensor_core": [c.to_dict() for c in self.tensor_core],
            "mma": {"kinds_gained": list(self.kinds_gained), "kinds_lost": list(self.kinds_lost),
                    "kinds_changed": [k.to_dict() for k in self.kinds_changed],
                    "kinds_renamed": [k.to_dict() for k in self.kinds_renamed],
                    "kinds_without_probe": {"before": _opt_list(self.kinds_unprobed_before),
                                            "after": _opt_list(self.kinds_unprobed_after)},
                    "shapes_changed": self.mma_shapes_changed},
            "formats": {"gained": list(self.formats_gained), "lost": list(self.formats_lost)},
            "block_scales": {"gained": list(self.block_scales_gained),
                             "lost": list(self.block_scales_lost),
                             "changed": [c.to_dict() for c in self.block_scales_changed]},
            "figures": [c.to_dict() for c in self.figures],
            "peaks": [p.to_dict() for p in self.peaks],
            "sass_signatures": [c.to_dict() for c in self.sass_signatures],
            "empty": self.empty,
        }


def _opt_list(x):
    return None if x is None else list(x)


def _gained_lost(before, after) -> tuple[tuple, tuple]:
    return tuple(x for x in after if x not in before), tuple(x for x in before if x not in after)


def diff_archs(a: Arch, b: Arch) -> ArchDiff:
    """What changes going from ``a`` (before) to ``b`` (after)."""
    fa, fb = a.features, b.features
    tca, tcb = a.tensor_core, b.tensor_core
    tc_changes = tuple(Change(attr, getattr(tca, attr), getattr(tcb, attr))
                       for attr in ("generation", "instruction", "issue", "accumulator")
                       if getattr(tca, attr) != getattr(tcb, attr))
    kinds_gained, kinds_lost = _gained_lost(tca.kinds, tcb.kinds)
    renamed = pair_renamed_kinds(tca, tcb, kinds_lost, kinds_gained)
    kinds_lost = tuple(k for k in kinds_lost if k not in {r.before for r in renamed})
    kinds_gained = tuple(k for k in kinds_gained if k not in {r.after for r in renamed})
    kinds_changed = tuple(
        KindChange(k, tca.mma_shapes[k], tcb.mma_shapes[k], tca.kind_formats[k], tcb.kind_formats[k])
        for k in tca.kinds if k in tcb.mma_shapes
        and (tca.mma_shapes[k] != tcb.mma_shapes[k] or tca.kind_formats[k] != tcb.kind_formats[k]))
    formats_gained, formats_lost = _gained_lost(a.formats, b.formats)
    bs_gained, bs_lost = _gained_lost(tuple(a.block_scales), tuple(b.block_scales))
    bs_changed = tuple(
        Change(f"{n}.{attr}", getattr(a.block_scales[n], attr), getattr(b.block_scales[n], attr))
        for n in a.block_scales if n in b.block_scales
        for attr in ("scale_format", "block_size", "kinds")
        if getattr(a.block_scales[n], attr) != getattr(b.block_scales[n], attr))
    figures = tuple(Change(key, get(a), get(b), unit) for key, unit, get in _FIGURES if get(a) != get(b))
    dtypes = tuple(dict.fromkeys((*a.peak_tflops, *b.peak_tflops)))
    peaks = tuple(
        PeakChange(d, a.peak_tflops.get(d), b.peak_tflops.get(d),
                   a.ridge_flop_per_byte(d) if d in a.peak_tflops else None,
                   b.ridge_flop_per_byte(d) if d in b.peak_tflops else None,
                   has_peak_format(a, d), has_peak_format(b, d))
        for d in dtypes)
    sigs = tuple(Change(f, a.sass_signatures.get(f), b.sass_signatures.get(f))
                 for f in FEATURES
                 if a.sass_signatures.get(f) != b.sass_signatures.get(f))
    return ArchDiff(
        before=a.name, after=b.name,
        features_gained=tuple(f for f in FEATURES if f in fb and f not in fa),
        features_lost=tuple(f for f in FEATURES if f in fa and f not in fb),
        features_kept=tuple(f for f in FEATURES if f in fa and f in fb),
        tensor_core=tc_changes,
        kinds_gained=kinds_gained, kinds_lost=kinds_lost, kinds_changed=kinds_changed,
        formats_gained=formats_gained, formats_lost=formats_lost,
        block_scales_gained=bs_gained, block_scales_lost=bs_lost, block_scales_changed=bs_changed,
        figures=figures, peaks=peaks, sass_signatures=sigs, kinds_renamed=renamed,
        kinds_unprobed_before=kinds_without_probe(a), kinds_unprobed_after=kinds_without_probe(b),
    )
