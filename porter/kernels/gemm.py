"""The GEMM family: C[M, N] (bf16, row-major) = A[M, K] x B[N, K]^T, f32 accumulation.

Both operands are K-major. The variants are data (``VARIANTS``): which operand
format, which scales, which descriptor features they need. ``variants(arch)``
returns a ``KernelSpec`` for every variant the arch supports and an
``Unsupported`` naming the missing features for the rest; the configuration
itself comes from the path module chosen by the arch's tensor-core feature
(``gemm_wgmma`` for wgmma, ``gemm_tcgen05`` for tcgen05, ``gemm_mma_sync`` for
warp-level mma.sync). Every spec renders through ``templates/gemm.cu.j2``, which
holds what the paths share and includes ``gemm/<cfg.mainloop>.cu.j2``.

Kernel parameters are the same on the TMA-staged paths (see ``kernel_params``); the
mma_sync path takes plain pointers where it stages with cp.async (a, b) and for its
block scales (sfa, sfb) - ``gemm_mma_sync.kernel_params``. The host side builds
arguments from ``spec.config["params"]`` alone.

Contract of a path module: ``make_spec(arch, variant: GemmVariant, pair: bool) ->
KernelSpec`` whose config holds at least ``SHARED_CONFIG_KEYS`` (``render``
checks): ``mainloop`` (= arch.tensor_core.generation, names the included
template), ``a_format``/``b_format``, ``params`` (the kernel's parameter list),
``tma_maps`` (one prose line per tensor map, printed in the kernel header; the
wgmma path also gives them as data in ``tensor_maps``), ``tile_m/n/k``,
``stages``, ``group_m`` (rows of tiles per L2 group in gemm::TileScheduler),
``grid_ctas`` and ``mma_k`` (the instruction K the numerics model uses).
"""

from __future__ import annotations

from porter.errors import PorterError
from porter.kernels.base import KernelSpec, Unsupported

from porter.kernels.gemm_variants import (  # noqa: F401  (the family's public names)
    FAMILY,
    TEMPLATE,
    PATHS,
    PATH_FEATURES,
    PAIR_PATHS,
    GemmVariant,
    VARIANTS,
    PAIR_FEATURES,
    kernel_params,
    spec_name,
    entry_name,
    variant_paths,
)


def _usable_path(arch, paths: tuple[str, ...]) -> str:
    """The first of ``paths`` whose features the arch has ("" when none)."""
    return next((p for p in paths if all(arch.has(f) for f in PATH_FEATURES[p])), "")


def _path_module(arch, paths: tuple[str, ...] = PATHS):
    """The path module for the first of ``paths`` the arch can run, or None."""
    path = _usable_path(arch, paths)
    if path == "tcgen05":
        from porter.kernels import gemm_tcgen05
        return gemm_tcgen05
    if path == "wgmma":
        from porter.kernels import gemm_wgmma
        return gemm_wgmma
    if path == "mma_sync":
        from porter.kernels import gemm_mma_sync
        return gemm_mma_sync
    return None


def missing_features(arch, variant: GemmVariant, pair: bool) -> tuple[str, ...]:
    """The descriptor features ``variant`` lacks on ``arch``: its own, then its path's.

    Where several generations' paths would do, the path is one alternative "tcgen05|wgmma|mma_sync"
    (as attention says; block scales: "tcgen05|mma_sync"); where only one path can build it
    (CTA pairs: tcgen05), that path's features are named one by one.
    """
    needed = variant.features + (PAIR_FEATURES if pair else ())
    missing = tuple(f for f in needed if not arch.has(f))
    paths = variant_paths(variant, pair)
    if _usable_path(arch, paths):
        return missing
    if len(paths) > 1:
        return ("|".join(paths),) + missing
    return missing + tuple(f for f in PATH_FEATURES[paths[0]] if not arch.has(f) and f not in missing)


def make_spec(arch, variant_name: str, pair: bool = False, knobs=None) -> KernelSpec | Unsupported:
    """The spec (or Unsupported) of one variant, e.g. ``make_spec(arch, "nvfp4", pair=True)``;
    ``knobs`` override its path's choices (porter.kernels.knobs)."""
    if variant_name not in VARIANTS:
        raise PorterError(f"gemm: unknown variant {variant_name!r}; known: {', '.join(VARIANTS)}")
    variant = VARIANTS[variant_name]
    name = spec_name(variant, pair)
    missing = missing_features(arch, variant, pair)
    paths = variant_paths(variant, pair)
    if missing:
        if missing[0] == "|".join(paths) and len(paths) > 1:
            reason = f"{arch.name} has no tensor-core generation porter has a GEMM path for ({'|'.join(paths)})"
            if missing[1:]:
                reason = f"{arch.name} lacks {', '.join(missing[1:])} and has no tensor-core generation " \
                         f"porter has a GEMM path for ({'|'.join(paths)})"
        elif len(paths) == 1:
            reason = f"{arch.name} lacks {', '.join(missing)} (only the {paths[0]} GEMM path builds {name})"
        else:
            reason = f"{arch.name} lacks {', '.join(missing)}"
        return Unsupported(FAMILY, name, variant.variant, missing, reason)
    if knobs:
        return _path_module(arch, paths).make_spec(arch, variant, pair, knobs=knobs)
    return _path_module(arch, paths).make_spec(arch, variant, pair)


# ---- knobs (porter.kernels.knobs): each path module has knob_space, knobs_of and make_spec(knobs=)

def _named(arch, name: str):
    """(variant name, pair, path module) of the kernel ``name`` (gemm.bf16, gemm.nvfp4.pair)."""
    parts = name.split(".")
    pair = parts[-1] == "pair"
    variant = parts[1] if len(parts) >= 2 else ""
    if parts[0] != FAMILY or variant not in VARIANTS or len(parts) != 2 + pair:
        raise PorterError(f"kernel '{name}': not a GEMM kernel name (gemm.<{'|'.join(VARIANTS)}>[.pair])")
    return variant, pair, _path_module(arch, variant_paths(VARIANTS[variant], pair))


def knob_space(arch, name: str) -> dict[str, tuple]:
    variant, pair, module = _named(arch, name)
    return module.knob_space(arch, VARIANTS[variant], pair) if module else {}


def spec_with_knobs(arch, name: str, knobs) -> KernelSpec | Unsupported:
    variant, pair, _ = _named(arch, name)
    return make_spec(arch, variant, pair, knobs=knobs or None)


def knobs_of(arch, spec: KernelSpec) -> dict:
    _, _, module = _named(arch, spec.name)
    return module.knobs_of(spec.config)


def variants(arch) -> list[KernelSpec | Unsupported]:
    """Every variant and its CTA-pair form, single-CTA first."""
    from porter.tuning.entries import tuned_variants   # a tuning/ entry replaces the hand-chosen knobs

    return tuned_variants(arch, [make_spec(arch, v, pair) for pair in (False, True) for v in VARIANTS],
                          render, spec_with_knobs)


# What gemm.cu.j2 itself reads from spec.config (each path adds its own keys).
SHARED_CONFIG_KEYS = ("mainloop", "a_format", "b_format", "params", "tma_maps", "tile_m", "tile_n",
                      "tile_k", "stages", "group_m", "grid_ctas", "mma_k")


def render(spec: KernelSpec, arch) -> str:
    from porter.compile.render import render as render_template

    missing = [key for key in SHARED_CONFIG_KEYS if key not in spec.config]
    if missing:
        raise PorterError(f"{spec.name}: spec.config lacks {', '.join(missing)} "
                          f"(gemm.cu.j2 needs {', '.join(SHARED_CONFIG_KEYS)})")
    return render_template(spec.template or TEMPLATE, arch=arch, cfg=spec.config, spec=spec)


def tile_order(num_m: int, num_n: int, group_m: int, first: int = 0, stride: int = 1,
               order_by: str = "m") -> list[tuple[int, int]]:
    """The (tile_m, tile_n) sequence gemm::TileScheduler gives the CTA starting at
    ``first`` with ``stride`` CTAs (or clusters) in the grid: a Python model of the
    template's grouped raster, so its coverage can be checked without a GPU.
    ``order_by`` "n" (config ``tile_order``) groups tile-columns instead of tile-rows."""
    if order_by == "n":
        return [(m, n) for n, m in tile_order(num_n, num_m, group_m, first, stride)]
    order = []
    for unit in range(first, num_m * num_n, stride):
        per_group = group_m * num_n
        group, in_group = divmod(unit, per_group)
        first_m = group * group_m
        rows = min(num_m - first_m, group_m)
        order.append((first_m + in_group % rows, in_group // rows))
    return order


def check_problem_shape(spec: KernelSpec, m: int, n: int, k: int) -> None:
    """Raise PorterError unless M, N are multiples of the CTA tile (of the cluster's
    tiles where config["shape_multiple"] says so) and K of the K tile.

    The kernels have no bounds checks (TMA boxes and stores cover whole tiles), so
    the host side must pad: this is the one place that says how.
    """
    cfg = spec.config
    tile_m, tile_n, tile_k = cfg["tile_m"], cfg["tile_n"], cfg["tile_k"]
    for axis, value, multiple in zip("MNK", (m, n, k), shape_multiples(spec)):
        if value <= 0 or value % multiple:
            raise PorterError(
                f"{spec.name}: {axis}={value} must be a positive multiple of {multiple} "
                f"(tile {tile_m}x{tile_n}x{tile_k}, cluster {'x'.join(map(str, spec.cluster))}); "
                f"pad {axis} to {max(1, -(-value // multiple)) * multiple}")


def shape_multiples(spec: KernelSpec) -> tuple[int, int, int]:
    """The (M, N, K) every problem shape must be a multiple of: the CTA tile, or whole
    cluster units where the config says so ("shape_multiple": a cluster that walks
    several tiles as one unit)."""
    cfg = spec.config
    return tuple(cfg.get("shape_multiple") or (cfg["tile_m"], cfg["tile_n"], cfg["tile_k"]))


# Seeds per numerics shape: fresh inputs, so one lucky draw cannot pass a variant.
NUMERICS_SEEDS = (0, 1)


def numerics_shapes(spec: KernelSpec) -> list[tuple[int, int, int]]:
    """Problem shapes the CPU model runs for ``spec``: ones the kernel itself takes
    (whole multiples of its tiles / cluster units, so each passes check_problem_shape),
    kept to a few cluster units so each check stays well under a second on a CPU.

    - K over ``stages + 2`` K tiles: the shared-memory ring wraps and, where the path
      promotes the accumulator (config ``promote_every_k``), several intervals restart;
    - a non-square shape (twice the N unit) with K over 3 K tiles (not a power of two);
    - twice the M unit with K over 2 K tiles (more than one M unit: the tile raster).
    """
    um, un, uk = shape_multiples(spec)
    ring = spec.config["stages"] + 2
    return [(um, un, uk * ring), (um, 2 * un, 3 * uk), (2 * um, un, 2 * uk)]


def numerics(spec: KernelSpec, arch) -> dict | None:
    """CPU model of the variant's arithmetic at the config's MMA K (and promotion interval,
    config ``promote_every_k`` where a path has one), at shapes the kernel takes
    (``numerics_shapes``)."""
    from porter.validation import gemm_numerics

    dtype = spec.variant.split(".", 1)[1]
    mma_k = spec.config["mma_k"]
    promote_k = spec.config.get("promote_every_k") or None
    shapes = numerics_shapes(spec)
    for m, n, k in shapes:      # the model must never judge a shape the kernel would refuse
        check_problem_shape(spec, m, n, k)
    results = [gemm_numerics.check_gemm(dtype, m, n, k, seed=seed, mma_k=mma_k, promote_k=promote_k)
               for (m, n, k) in shapes for seed in NUMERICS_SEEDS]
    return {"variant": spec.variant, "mma_k": mma_k, "promote_k": promote_k, "shapes": [list(s) for s in shapes],
            "passed": all(r["passed"] for r in results), "results": results}
