"""Arch descriptors as typed, immutable objects.

``load_arch("hopper")`` reads ``arch/hopper.yaml`` (``load_arch("some/file.yaml")`` reads
that file), checks it with ``porter.descriptor.arch_schema`` and returns an ``Arch``: frozen
dataclasses, tuples and read-only mappings, plus derived figures in bytes and FLOP/s.
Code asks ``arch.has("tmem")`` or reads ``arch.tensor_core.mma_shapes``; it never
compares arch names.
"""

from __future__ import annotations

import functools
import hashlib
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any, Iterable, Mapping

from porter import paths
from porter.descriptor.arch_schema import (FEATURES, PEAK_DTYPES, check_descriptor, derive_features, load_descriptor,
                                one_line, parse_yaml)
from porter.errors import PorterError

__all__ = [
    "FEATURES", "Arch", "TensorCore", "MmaShape", "Tmem", "Cluster", "BlockScale",
    "load_arch", "list_archs", "arch_from_text", "resolve_arch_path",
]

def _err(message: str) -> PorterError:
    """A PorterError whose message is kept to one line whatever text it quotes."""
    return PorterError(one_line(message))


KIB = 1024
MIB = 1024 * 1024
GB = 10**9
TB = 10**12


def _frozen_map(data: Mapping) -> Mapping:
    return MappingProxyType(dict(data))


class _Immutable:
    """Copying an immutable value returns it; pickling rebuilds its read-only maps."""

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __reduce__(self):
        state = {f.name: (dict(v) if isinstance(v := getattr(self, f.name), MappingProxyType) else v)
                 for f in fields(self)}
        return (_restore, (type(self), state))


def _restore(cls, state: dict):
    return cls(**{k: (MappingProxyType(v) if isinstance(v, dict) else v) for k, v in state.items()})


@dataclass(frozen=True)
class MmaShape(_Immutable):
    """One family of MMA shapes: M rows, N from n_min to n_max by n_step, K elements."""

    m: int
    n_min: int
    n_max: int
    n_step: int
    k: int
    cta_group: int = 1

    def contains(self, m: int, n: int, cta_group: int = 1) -> bool:
        return (m == self.m and cta_group == self.cta_group and self.n_min <= n <= self.n_max
                and (n - self.n_min) % self.n_step == 0)

    @property
    def n_values(self) -> tuple[int, ...]:
        return tuple(range(self.n_min, self.n_max + 1, self.n_step))

    def __str__(self) -> str:
        n = f"{self.n_min}" if self.n_min == self.n_max else f"{self.n_min}..{self.n_max}/{self.n_step}"
        return f"m{self.m} n{n} k{self.k} cta_group {self.cta_group}"

    def to_dict(self) -> dict:
        return {"m": self.m, "n_min": self.n_min, "n_max": self.n_max, "n_step": self.n_step,
                "k": self.k, "cta_group": self.cta_group}


@dataclass(frozen=True)
class TensorCore(_Immutable):
    generation: str  # none | mma_sync | wgmma | tcgen05
    instruction: str  # e.g. "wgmma.mma_async", "tcgen05.mma"
    issue: str  # warp | warpgroup | thread
    accumulator: str  # registers | tmem
    mma_shapes: Mapping[str, tuple[MmaShape, ...]]
    kind_formats: Mapping[str, tuple[str, ...]]
    kind_sass: Mapping[str, tuple[str, ...]]  # SASS opcode patterns per MMA kind
    block_scaled_kinds: frozenset = frozenset()
    notes: str = ""
    source: Any = ""

    def __hash__(self) -> int:
        return hash((self.generation, self.instruction, self.issue, self.accumulator,
                     tuple(self.mma_shapes.items())))

    @property
    def kinds(self) -> tuple[str, ...]:
        return tuple(self.mma_shapes)

    def valid_shape(self, kind: str, m: int, n: int, cta_group: int = 1) -> bool:
        """True if ``kind`` has an M x N shape for ``cta_group`` (False for unknown kinds)."""
        return any(s.contains(m, n, cta_group) for s in self.mma_shapes.get(kind, ()))

    def k_of(self, kind: str) -> int:
        """Elements of K one instruction of ``kind`` consumes."""
        shapes = self.mma_shapes.get(kind)
        if not shapes:
            raise _err(f"MMA kind '{kind}' is not on this arch; known kinds: "
                              f"{', '.join(self.kinds) or 'none'}")
        return shapes[0].k

    def kinds_for_format(self, fmt: str) -> tuple[str, ...]:
        return tuple(k for k, fs in self.kind_formats.items() if fmt in fs)


@dataclass(frozen=True)
class Tmem(_Immutable):
    lanes: int = 0
    columns: int = 0
    cell_bits: int = 0
    bytes: int = 0
    alloc_min_columns: int = 0

    @property
    def present(self) -> bool:
        return self.bytes > 0


@dataclass(frozen=True)
class Cluster(_Immutable):
    max_portable: int
    max_nonportable: int
    distributed_smem: bool
    cta_pair: bool


@dataclass(frozen=True)
class BlockScale(_Immutable):
    name: str  # "mx" | "nvfp4"
    scale_format: str  # "ue8m0" | "ue4m3"
    block_size: int  # elements sharing one scale, along K
    kinds: tuple[str, ...]  # MMA kinds that consume this scaling


@dataclass(frozen=True)
class Arch(_Immutable):
    name: str
    path: Path
    summary: str
    target: str
    min_ptx: str
    min_cuda: str
    products: tuple[str, ...]
    sm_count: int
    smem_per_sm_bytes: int
    smem_per_block_bytes: int
    regs_per_sm: int
    max_regs_per_thread: int
    max_threads_per_block: int
    max_threads_per_sm: int
    max_blocks_per_sm: int
    l2_bytes: int
    hbm_bytes: int
    hbm_bandwidth_bytes_per_s: float
    tensor_core: TensorCore
    tmem: Tmem
    cluster: Cluster
    tma: bool
    tma_multicast: bool
    mbarrier: bool
    setmaxnreg: bool
    formats: tuple[str, ...]
    block_scales: Mapping[str, BlockScale]
    peak_tflops: Mapping[str, float]
    sass_signatures: Mapping[str, tuple[str, ...]]
    features: frozenset
    sources: Mapping[str, str]
    section_sources: Mapping[str, Any]
    uncertain: frozenset
    digest: str  # sha256 of the descriptor text: a cache key for everything built from it
    text: str = field(repr=False, compare=False, default="")
    previous: str = ""   # identity.previous: the generation this one follows ("" if not named)
    # How this target's disassembly spells instructions and modifiers that prove no
    # feature by themselves (``sass_ops``: name -> opcode regexes; ``sass_modifiers``:
    # name -> a regex fragment that follows an opcode): see ``sass_patterns``.
    sass_ops: Mapping[str, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))
    sass_modifiers: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    # Products of this architecture with their own figures (``products`` in the YAML), and
    # the one these figures describe ("" when the descriptor lists no product figures).
    products_figures: Mapping[str, Mapping[str, Any]] = field(default_factory=lambda: MappingProxyType({}))
    product: str = ""
    default_product: str = ""

    def __hash__(self) -> int:
        return hash((self.digest, str(self.path)))

    def __reduce__(self):
        return (_arch_for_product, (self.text, str(self.path), self.product))

    # -- identity -----------------------------------------------------------------

    @property
    def compute_capability(self) -> tuple[int, int]:
        digits = re.match(r"sm_(\d+)", self.target).group(1)
        return int(digits[:-1]), int(digits[-1])

    @property
    def cta_pair(self) -> bool:
        return self.cluster.cta_pair

    # -- features -----------------------------------------------------------------

    def has(self, feature: str) -> bool:
        if feature not in FEATURES:
            import difflib

            close = difflib.get_close_matches(str(feature), FEATURES, n=1)
            hint = f"did you mean '{close[0]}'?" if close else "known: " + ", ".join(FEATURES)
            raise _err(f"arch feature {feature!r} is not one porter knows; {hint}")
        return feature in self.features

    def sass_matches(self, feature: str, instructions: Iterable[str]) -> tuple[str, ...]:
        """The SASS instructions that prove ``feature`` by this arch's signatures.

        Each signature is a Python regex applied with ``re.match`` to an instruction's
        text, opcode first ("UTCHMMA.2CTA gdesc[UR4], ..."; a predicate guard such as
        "@P0 " is skipped), so a plain opcode like "HGMMA" works as a prefix. A feature
        is proven when any pattern matches any instruction; one without signatures is
        never proven by SASS.
        """
        self.has(feature)  # rejects names outside FEATURES
        patterns = [re.compile(p) for p in self.sass_signatures.get(feature, ())]
        found = []
        for ins in instructions:
            text = re.sub(r"^@!?\w+\s+", "", ins.strip())
            if any(p.match(text) for p in patterns):
                found.append(ins)
        return tuple(found)

    # -- SASS evidence ------------------------------------------------------------------

    def sass_patterns(self, ref: str, **fill: Any) -> tuple[str, ...]:
        """The descriptor's SASS spelling of ``ref``: opcode regexes, any one of which proves it.

        ``ref`` is ``FEATURE`` (``sass_signatures``), ``kind:KIND`` (``tensor_core.kinds.KIND.sass``)
        or ``op:NAME`` (``sass_ops``), optionally followed by ``/MODIFIER`` parts (``sass_modifiers``):
        each modifier's fragment must follow the opcode and any modifiers before it
        (``kind:f16/pair`` -> ``(?:UTCHMMA)\\S*\\.2CTA``); ``/!MODIFIER`` requires its absence.
        ``{name}`` placeholders in a fragment are filled from ``fill``. Python code builds its
        SASS checks from these, so a target that spells a feature differently is a YAML edit.
        """
        base, *mods = ref.split("/")
        if base.startswith("kind:"):
            kind = base[5:]
            if kind not in self.tensor_core.kind_sass:
                raise _err(f"{self.path}: tensor_core.kinds: no MMA kind '{kind}' to spell in SASS; "
                           f"known: {', '.join(self.tensor_core.kinds) or 'none'}")
            pats, key = self.tensor_core.kind_sass[kind], f"tensor_core.kinds.{kind}.sass"
        elif base.startswith("op:"):
            pats, key = self.sass_ops.get(base[3:], ()), f"sass_ops.{base[3:]}"
        else:
            self.has(base)
            pats, key = self.sass_signatures.get(base, ()), f"sass_signatures.{base}"
        if not pats:
            raise _err(f"{self.path}: {key}: no SASS spelling for '{base}', which a check of {ref!r} needs; "
                       "add the opcode regexes nvdisasm shows for it on this target")
        suffix = ""
        for mod in mods:
            negate = mod.startswith("!")
            name = mod.lstrip("!")
            frag = self.sass_modifiers.get(name)
            if frag is None:
                raise _err(f"{self.path}: sass_modifiers.{name}: no SASS spelling for modifier '{name}', "
                           f"which a check of {ref!r} needs; add how nvdisasm prints it after the opcode")
            missing = [p for p in re.findall(r"\{([a-z_]+)\}", frag) if p not in fill]
            if missing:
                raise _err(f"sass_modifiers.{name}: the fragment needs {', '.join(missing)} filled in "
                           f"(checking {ref!r})")
            frag = re.sub(r"\{([a-z_]+)\}", lambda m: re.escape(str(fill[m.group(1)])), frag)
            suffix += f"(?!\\S*{frag})" if negate else f"\\S*{frag}"
        return tuple(f"(?:{p}){suffix}" for p in pats) if suffix else tuple(pats)

    def sass_pattern(self, ref: str, **fill: Any) -> str:
        """``sass_patterns(ref)`` as one regex (an alternation) for a kernel's SassRule."""
        pats = self.sass_patterns(ref, **fill)
        return pats[0] if len(pats) == 1 else "|".join(f"(?:{p})" for p in pats)

    # -- products -------------------------------------------------------------------

    @property
    def product_names(self) -> tuple[str, ...]:
        return tuple(self.products_figures) or self.products

    def for_product(self, name: str) -> "Arch":
        """This arch with ``name``'s own figures (SM count, memory, peaks where they differ)."""
        known = self.product_names
        if name not in known:
            import difflib

            close = difflib.get_close_matches(name, list(known), n=1)
            hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known) or 'none'}"
            raise _err(f"{self.path}: products: no product {name!r}; {hint}")
        if name == self.product:
            return self
        if not self.products_figures:
            # The products identity.products lists share the descriptor's one set of figures:
            # only the name (report title, build folder) and the cache key follow the product.
            return replace(self, product=name, digest=hashlib.sha256(
                f"{hashlib.sha256(self.text.encode('utf-8')).hexdigest()}\0product={name}".encode("utf-8")).hexdigest())
        fig = self.products_figures[name]
        peaks = dict(self.peak_tflops)
        peaks.update(fig.get("dense_tflops", {}))
        base_digest = hashlib.sha256(self.text.encode("utf-8")).hexdigest()
        digest = base_digest if name == self.default_product else hashlib.sha256(
            f"{base_digest}\0product={name}".encode("utf-8")).hexdigest()
        return replace(
            self, product=name, sm_count=fig["sm_count"],
            l2_bytes=round(fig["l2_mib"] * MIB) if "l2_mib" in fig else self.l2_bytes,
            hbm_bytes=round(fig["hbm_gb"] * GB),
            hbm_bandwidth_bytes_per_s=float(fig["hbm_bandwidth_tb_s"]) * TB,
            peak_tflops=_frozen_map(peaks), digest=digest)

    # -- derived figures ------------------------------------------------------------

    def peak_flop_per_s(self, dtype: str) -> float:
        return self.peak_tflops[self._peak_key(dtype)] * TB

    def ridge_flop_per_byte(self, dtype: str) -> float:
        """Arithmetic intensity at which ``dtype`` MMA stops being HBM-bound (FLOP/byte)."""
        return self.peak_flop_per_s(dtype) / self.hbm_bandwidth_bytes_per_s

    def _peak_key(self, dtype: str) -> str:
        if dtype in self.peak_tflops:
            return dtype
        for key, fmts in PEAK_DTYPES.items():  # accept an element format: e4m3 -> fp8
            if dtype in fmts and key in self.peak_tflops:
                return key
        raise _err(f"{self.path}: peak.dense_tflops: no peak rate for '{dtype}'; "
                          f"known: {', '.join(self.peak_tflops) or 'none'}")

    @property
    def tmem_bytes(self) -> int:
        return self.tmem.bytes

    # -- output -------------------------------------------------------------------

    def to_dict(self) -> dict:
        tc = self.tensor_core
        return {
            "name": self.name,
            "path": str(self.path),
            "summary": self.summary,
            "digest": self.digest,
            "target": self.target,
            "compute_capability": ".".join(map(str, self.compute_capability)),
            "min_ptx": self.min_ptx,
            "min_cuda": self.min_cuda,
            "previous": self.previous or None,
            "products": list(self.products),
            "product": self.product,
            "product_figures": {n: {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in f.items()}
                                for n, f in self.products_figures.items()},
            "product": self.product,
            "product_figures": {n: {k: (dict(v) if isinstance(v, Mapping) else v) for k, v in f.items()}
                                for n, f in self.products_figures.items()},
            "features": [f for f in FEATURES if f in self.features],
            "limits": {
                "sm_count": self.sm_count,
                "smem_per_sm_bytes": self.smem_per_sm_bytes,
                "smem_per_block_bytes": self.smem_per_block_bytes,
                "regs_per_sm": self.regs_per_sm,
                "max_regs_per_thread": self.max_regs_per_thread,
                "max_threads_per_block": self.max_threads_per_block,
                "max_threads_per_sm": self.max_threads_per_sm,
                "max_blocks_per_sm": self.max_blocks_per_sm,
            },
            "memory": {
                "l2_bytes": self.l2_bytes,
                "hbm_bytes": self.hbm_bytes,
                "hbm_bandwidth_bytes_per_s": self.hbm_bandwidth_bytes_per_s,
            },
            "tensor_core": {
                "generation": tc.generation,
                "instruction": tc.instruction,
                "issue": tc.issue,
                "accumulator": tc.accumulator,
                "kinds": {
                    kind: {
                        "formats": list(tc.kind_formats[kind]),
                        "block_scaled": kind in tc.block_scaled_kinds,
                        "sass": list(tc.kind_sass[kind]),
                        "shapes": [s.to_dict() for s in shapes],
                    }
                    for kind, shapes in tc.mma_shapes.items()
                },
            },
            "tmem": {"lanes": self.tmem.lanes, "columns": self.tmem.columns,
                     "cell_bits": self.tmem.cell_bits, "bytes": self.tmem.bytes,
                     "alloc_min_columns": self.tmem.alloc_min_columns},
            "cluster": {"max_portable": self.cluster.max_portable,
                        "max_nonportable": self.cluster.max_nonportable,
                        "distributed_smem": self.cluster.distributed_smem,
                        "cta_pair": self.cluster.cta_pair},
            "async_copy": {"tma": self.tma, "tma_multicast": self.tma_multicast, "mbarrier": self.mbarrier},
            "formats": list(self.formats),
            "block_scales": {n: {"scale_format": b.scale_format, "block_size": b.block_size,
                                 "kinds": list(b.kinds)} for n, b in self.block_scales.items()},
            "peak_tflops": dict(self.peak_tflops),
            "ridge_flop_per_byte": {d: round(self.ridge_flop_per_byte(d), 3) for d in self.peak_tflops},
            "sass_signatures": {f: list(p) for f, p in self.sass_signatures.items()},
            "sass_ops": {n: list(p) for n, p in self.sass_ops.items()},
            "sass_modifiers": dict(self.sass_modifiers),
            "sass_ops": {n: list(p) for n, p in self.sass_ops.items()},
            "sass_modifiers": dict(self.sass_modifiers),
            "sources": dict(self.sources),
            "section_sources": {k: (dict(v) if isinstance(v, Mapping) else v)
                                for k, v in self.section_sources.items()},
            "uncertain": sorted(self.uncertain),
        }


# -- building ---------------------------------------------------------------------------


def _build(d: dict, path: Path, text: str) -> Arch:
    ident, lim, mem, tcd, tm, cl, ac = (d["identity"], d["limits"], d["memory"], d["tensor_core"],
                                        d["tmem"], d["cluster"], d["async_copy"])
    tensor_core = TensorCore(
        generation=tcd["generation"],
        instruction=tcd["instruction"],
        issue=tcd["issue"],
        accumulator=tcd["accumulator"],
        mma_shapes=_frozen_map({
            kind: tuple(MmaShape(s["m"], s["n_min"], s["n_max"], s["n_step"], spec["k"], s["cta_group"])
                        for s in spec["shapes"])
            for kind, spec in tcd["kinds"].items()}),
        kind_formats=_frozen_map({k: tuple(s["formats"]) for k, s in tcd["kinds"].items()}),
        kind_sass=_frozen_map({k: tuple(s["sass"]) for k, s in tcd["kinds"].items()}),
        block_scaled_kinds=frozenset(k for k, s in tcd["kinds"].items() if s["block_scaled"]),
        notes=tcd.get("notes", ""),
        source=tcd["source"],
    )
    tmem_bytes = tm["lanes"] * tm["columns"] * tm["cell_bits"] // 8
    tmem = Tmem(tm["lanes"], tm["columns"], tm["cell_bits"] if tmem_bytes else 0, tmem_bytes,
                tm["alloc_min_columns"]) if tmem_bytes else Tmem()
    section_sources = {name: d[name]["source"] for name in
                       ("identity", "limits", "memory", "tensor_core", "tmem", "cluster", "async_copy",
                        "formats", "peak", "sass_signatures")}
    section_sources.update({f"block_scales.{n}": b["source"] for n, b in d["block_scales"].items()})
    for section in ("sass_ops", "sass_modifiers"):
        if d.get(section):
            section_sources[section] = d[section]["source"]
    arch = Arch(
        name=d["name"],
        path=path,
        summary=d["summary"],
        target=ident["target"],
        min_ptx=ident["min_ptx"],
        min_cuda=ident["min_cuda"],
        products=tuple(ident["products"]),
        sm_count=lim["sm_count"],
        smem_per_sm_bytes=lim["smem_per_sm_kib"] * KIB,
        smem_per_block_bytes=lim["smem_per_block_kib"] * KIB,
        regs_per_sm=lim["regs_per_sm"],
        max_regs_per_thread=lim["max_regs_per_thread"],
        max_threads_per_block=lim["max_threads_per_block"],
        max_threads_per_sm=lim["max_threads_per_sm"],
        max_blocks_per_sm=lim["max_blocks_per_sm"],
        l2_bytes=round(mem["l2_mib"] * MIB),
        hbm_bytes=round(mem["hbm_gb"] * GB),
        hbm_bandwidth_bytes_per_s=float(mem["hbm_bandwidth_tb_s"]) * TB,
        tensor_core=tensor_core,
        tmem=tmem,
        cluster=Cluster(cl["max_portable"], cl["max_nonportable"], cl["distributed_smem"], cl["cta_pair"]),
        tma=ac["tma"],
        tma_multicast=ac["tma_multicast"],
        mbarrier=ac["mbarrier"],
        setmaxnreg=lim["setmaxnreg"],
        formats=tuple(d["formats"]["elements"]),
        block_scales=_frozen_map({n: BlockScale(n, b["scale_format"], b["block_size"], tuple(b["kinds"]))
                                  for n, b in d["block_scales"].items()}),
        peak_tflops=_frozen_map(d["peak"]["dense_tflops"]),
        sass_signatures=_frozen_map({f: tuple(p) for f, p in d["sass_signatures"].items() if f != "source"}),
        features=derive_features(d),
        sources=_frozen_map(d["sources"]),
        section_sources=_frozen_map(section_sources),
        uncertain=frozenset(d["uncertain"]),
        digest=hashlib.sha256(text.encode("utf-8")).hexdigest(),
        text=text,
        previous=ident.get("previous") or "",
        sass_ops=_frozen_map({n: tuple(p) for n, p in d.get("sass_ops", {}).items() if n != "source"}),
        sass_modifiers=_frozen_map({n: f for n, f in d.get("sass_modifiers", {}).items() if n != "source"}),
        products_figures=_frozen_map({n: _frozen_map(f) for n, f in
                                      d.get("products", {}).get("items", {}).items()}),
        product=d.get("products", {}).get("default", ""),
        default_product=d.get("products", {}).get("default", ""),
    )
    return arch


def _arch_for_product(text: str, path: str, product: str) -> Arch:
    """Unpickle an Arch: rebuild it from its text, then select the product it was for."""
    arch = arch_from_text(text, path)
    return arch.for_product(product) if product and product != arch.product else arch


# Per-SM and per-block limits by compute capability, from NVIDIA/cccl
# libcudacxx/include/cuda/__device/arch_traits.h (shared/ARCH_FACTS.md, "Per-SM limits"):
# the most a descriptor may claim for its target. Only a few of these figures can be
# proved by a compile (ptxas rejects static shared memory past the per-block limit, see
# porter arch check); the rest are checked here against the known figure, and a compute
# capability not in this table is said to be unchecked (``limits_check``).
KNOWN_LIMITS: dict[tuple[int, int], dict[str, int]] = {
    (8, 0): {"smem_per_sm_kib": 164, "smem_per_block_kib": 163, "max_threads_per_sm": 2048,
             "max_blocks_per_sm": 32, "regs_per_sm": 65536},
    (9, 0): {"smem_per_sm_kib": 228, "smem_per_block_kib": 227, "max_threads_per_sm": 2048,
             "max_blocks_per_sm": 32, "regs_per_sm": 65536},
    (10, 0): {"smem_per_sm_kib": 228, "smem_per_block_kib": 227, "max_threads_per_sm": 2048,
              "max_blocks_per_sm": 32, "regs_per_sm": 65536},
    (10, 3): {"smem_per_sm_kib": 228, "smem_per_block_kib": 227, "max_threads_per_sm": 2048,
              "max_blocks_per_sm": 32, "regs_per_sm": 65536},
    (12, 0): {"smem_per_sm_kib": 100, "smem_per_block_kib": 99, "max_threads_per_sm": 1536,
              "max_blocks_per_sm": 24, "regs_per_sm": 65536},
}
# The same on every compute capability porter targets (7.0 and later); clusters exist
# from 9.0, 8 CTAs portable and 16 non-portable.
UNIVERSAL_LIMITS = {"max_regs_per_thread": 255, "max_threads_per_block": 1024}
CLUSTER_LIMITS = {"max_portable": 8, "max_nonportable": 16}
_LIMITS_SOURCE = "NVIDIA/cccl arch_traits.h"


def _compute_capability(target: str) -> tuple[int, int]:
    digits = re.match(r"sm_(\d+)", target).group(1)
    return int(digits[:-1]), int(digits[-1])


@functools.lru_cache(maxsize=1)
def nvrtc_targets() -> tuple[int, ...] | None:
    """Compute capabilities (as 90, 100, 120) the installed NVRTC compiles for; None when
    NVRTC cannot be loaded (then the compile itself reports the missing toolchain)."""
    try:
        from cuda.bindings import nvrtc

        err, archs = nvrtc.nvrtcGetSupportedArchs()
        return tuple(sorted(int(a) for a in archs)) if int(err) == 0 else None
    except Exception:  # no cuda-python, no NVRTC library: not this check's to report
        return None


def _check_target(d: dict, lines: dict[str, int], file: str) -> None:
    """``identity.target`` must be a target the installed NVRTC compiles for: an unknown
    one (sm_999a) would otherwise fail every probe and kernel a quarter-minute later."""
    target = d["identity"]["target"]
    supported = nvrtc_targets()
    if supported is None:
        return
    number = int(re.match(r"sm_(\d+)", target).group(1))
    line = lines.get("identity.target")
    where = f"{file}:{line}" if line else file
    if number not in supported:
        names = ", ".join(f"sm_{n}" for n in supported)
        raise _err(f"{where}: identity.target: {target} is not a target the installed NVRTC "
                   f"compiles for (supported: {names}, each with an a/f suffix where it has one); "
                   "fix the target, or install a newer nvidia-cuda-nvrtc")
    # Arch-specific targets (a) start at sm_90, family targets (f) at sm_100; NVRTC rejects
    # e.g. sm_80a or sm_90f with "invalid --nv_arch", a quarter-minute into a run.
    suffix = target[len(f"sm_{number}"):]
    first = {"a": 90, "f": 100}.get(suffix)
    if first is not None and number < first:
        raise _err(f"{where}: identity.target: {target}: the '{suffix}' suffix exists from sm_{first}"
                   f"{suffix} on; write sm_{number} (or a newer target with the suffix)")


def _check_previous(d: dict, lines: dict[str, int], file: str) -> None:
    """``identity.previous`` names a descriptor (like ``name``), and not this one."""
    previous = d["identity"].get("previous") or ""
    if not previous:
        return
    line = lines.get("identity.previous")
    where = f"{file}:{line}" if line else file
    if not re.fullmatch(r"[a-z][a-z0-9_-]{0,63}", previous):
        raise _err(f"{where}: identity.previous: expected a descriptor name like 'hopper', got {previous!r}; "
                   "name the generation this one follows")
    if previous == d["name"]:
        raise _err(f"{where}: identity.previous: '{previous}' is this descriptor's own name; "
                   "name the generation this one follows, or drop the key")


def _limit_problems(d: dict) -> list[tuple[str, str]]:
    """(key, problem) for each figure above the known limit of its compute capability."""
    cc = _compute_capability(d["identity"]["target"])
    lim, cl = d["limits"], d["cluster"]
    where = f"compute capability {cc[0]}.{cc[1]} ({_LIMITS_SOURCE})"
    out = []
    for key, most in UNIVERSAL_LIMITS.items():
        if lim[key] > most:
            out.append((f"limits.{key}", f"{lim[key]} is above {most}, the limit on every target ({_LIMITS_SOURCE})"))
    for key, most in KNOWN_LIMITS.get(cc, {}).items():
        if lim[key] > most:
            out.append((f"limits.{key}", f"{lim[key]} is above {most}, the known figure for {where}"))
    if cc < (9, 0) and cl["max_portable"] > 1:
        out.append(("cluster.max_portable", f"clusters of {cl['max_portable']} CTAs, but thread-block "
                    f"clusters start at compute capability 9.0 ({_LIMITS_SOURCE})"))
    for key, most in CLUSTER_LIMITS.items():
        if cl[key] > most:
            out.append((f"cluster.{key}", f"{cl[key]} CTAs is above {most}, the cluster limit on every "
                        f"target that has clusters ({_LIMITS_SOURCE})"))
    return out


def _check_limits(d: dict, lines: dict[str, int], file: str) -> None:
    problems = _limit_problems(d)
    if problems:
        key, problem = problems[0]
        line = lines.get(key)
        where = f"{file}:{line}" if line else file
        raise _err(f"{where}: {key}: {problem}; a figure above the hardware's would size "
                   "kernels that cannot launch: check the figure and its unit")


def limits_check(arch: "Arch") -> str:
    """How far porter checked ``arch``'s limits, in words (for ``arch show`` and reports)."""
    cc = arch.compute_capability
    if cc in KNOWN_LIMITS:
        return (f"within the known figures for compute capability {cc[0]}.{cc[1]} ({_LIMITS_SOURCE}); "
                "porter arch check proves shared memory per block with a compile")
    return (f"compute capability {cc[0]}.{cc[1]} has no known figures in porter: only the "
            f"universal limits were checked (threads/block, registers/thread, clusters); "
            "porter arch check proves shared memory per block with a compile")


def arch_from_text(text: str, path: str | Path = "<text>") -> Arch:
    """Build an Arch from descriptor text (``path`` only names it in messages)."""
    data, lines = parse_yaml(text, str(path))
    d = check_descriptor(data, lines, str(path))
    _check_target(d, lines, str(path))
    _check_limits(d, lines, str(path))
    _check_previous(d, lines, str(path))
    return _build(d, Path(path), text)


def resolve_arch_path(name_or_path: str | Path) -> Path:
    """A bare name is looked up in the arch data folder; anything with '/' or '.yaml' is a path."""
    text = str(name_or_path)
    if isinstance(name_or_path, Path) or "/" in text or "\\" in text or text.endswith((".yaml", ".yml")):
        path = Path(text).expanduser()
        if path.is_dir():
            raise _err(f"{path}: is a folder; give the descriptor's .yaml file inside it "
                       f"(or a bare name: {', '.join(list_archs()) or 'none installed'})")
        if path.exists() and not path.is_file():
            # /dev/null, a FIFO, a socket: reading one would return nothing or block.
            raise _err(f"{path}: not a regular file (a device, pipe or socket); "
                       "give the descriptor's .yaml file")
        if not path.is_file():
            raise _err(f"{path}: arch descriptor file not found; check the path "
                              f"(or give a bare name: {', '.join(list_archs()) or 'none installed'})")
        return path
    if not re.fullmatch(r"[A-Za-z0-9_-]+", text):
        raise _err(f"arch '{text}': not a descriptor name; use one of "
                          f"{', '.join(list_archs()) or 'none'} or a path to a .yaml file")
    path = paths.data_dir("arch") / f"{text}.yaml"
    if not path.is_file():
        import difflib

        known = list_archs()
        close = difflib.get_close_matches(text, known, n=1, cutoff=0.7)
        hint = f"did you mean '{close[0]}'?" if close else f"known: {', '.join(known) or 'none'}"
        # Name the installed ones, not the package's data path: for new silicon the fix is a file.
        raise _err(f"arch '{text}': no descriptor of that name is installed; {hint} "
                   "(for a new GPU, give the path to its .yaml)")
    return path


# Arch objects are immutable, so the same path with the same bytes gives back the same
# object (the pipeline asks for its arch many times). Keyed on content, not mtime:
# coarse file timestamps would hide an edit made within a few milliseconds.
_CACHE: dict[tuple, Arch] = {}
_CACHE_MAX = 64


def load_arch(name_or_path: str | Path) -> Arch:
    """Load and check a descriptor by bare name (``hopper``) or by path."""
    path = resolve_arch_path(name_or_path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise _err(f"{path}: cannot read descriptor ({exc.strerror}); check permissions") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _err(f"{path}: not UTF-8 text (byte {exc.start}); save the descriptor as UTF-8") from None
    key = (str(path), hashlib.sha256(raw).hexdigest())
    if key in _CACHE:
        return _CACHE[key]
    arch = arch_from_text(text, path)
    if len(_CACHE) >= _CACHE_MAX:
        _CACHE.clear()
    _CACHE[key] = arch
    return arch


def list_archs() -> list[str]:
    """Bare names of the descriptors shipped in the arch data folder, sorted."""
    try:
        folder = paths.data_dir("arch")
    except FileNotFoundError:
        return []
    return sorted(p.stem for p in folder.glob("*.yaml") if p.is_file())
