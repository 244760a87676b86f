"""What every family's chooser shares to take ``--set`` overrides (knobs).

The choosers (``gemm_wgmma.make_spec`` and the rest) take ``knobs``: a mapping of knob
name to a typed value (``porter.kernels.knobs.parse_sets``). A knob left out is chosen
as before, so the defaults stay byte-identical; a knob given is checked against the
same budgets the chooser applies to its own choice, and an impossible value is one
``PorterError`` line naming the kernel, the knob and the limit it breaks.

This module sits below the families (they import it; it imports none of them), so
``porter.kernels.knobs`` can import the families without a cycle.
"""

from __future__ import annotations

from typing import Any, Mapping

from porter.errors import PorterError

# CUDA's largest grid x extent: the "grid" of a non-persistent launch (one CTA per tile;
# the launch takes min(#tiles, grid_ctas), so the kernel's own walk does one tile each).
MAX_GRID_X = 2 ** 31 - 1


def show(value: Any) -> str:
    """A knob value as ``--set`` spells it: shapes as 128x256, booleans as true/false."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (tuple, list)):
        return "x".join(str(v) for v in value)
    return str(value)


def fail(kernel: str, knob: str, value: Any, why: str) -> PorterError:
    """The one line an illegal knob ends in: ``KERNEL: --set KNOB=VALUE: WHY``. The error
    carries ``knob`` too, so a sweep can count its prunes by the knob that caused them."""
    exc = PorterError(f"{kernel}: --set {knob}={show(value)}: {why}")
    exc.knob = knob
    return exc


def has_knob(space: Mapping[str, tuple], name: str) -> bool:
    """``name`` is one of the kernel's knobs, or ``tile`` (MxN) where it has tile_n."""
    return name in space or (name == "tile" and "tile_n" in space)


def check_names(kernel: str, knobs: Mapping[str, Any], space: Mapping[str, tuple]) -> None:
    """Every knob named must be one of this kernel's (``space``); the first one that is not
    is an error listing the kernel's knobs."""
    for name in knobs:
        if not has_knob(space, name):
            raise PorterError(f"{kernel}: --set {name}: no such knob for this kernel; "
                              f"its knobs: {', '.join(space) or 'none'}")


def check_choice(kernel: str, knob: str, value: Any, legal, why: str = "") -> None:
    """``value`` must be one of ``legal`` (a typo, a wrong type or an MMA shape the
    descriptor lacks); the error lists the legal values and why they are what they are."""
    if type(value) is bool and not all(type(v) is bool for v in legal):   # True == 1 in Python
        raise fail(kernel, knob, value, f"legal values: {', '.join(show(v) for v in legal)}"
                   + (f" ({why})" if why else ""))
    if value not in tuple(legal):
        raise fail(kernel, knob, value, f"legal values: {', '.join(show(v) for v in legal)}"
                   + (f" ({why})" if why else ""))


def check_int(kernel: str, knob: str, value: Any, lo: int, hi: int, why: str, multiple: int = 1) -> int:
    """An integer knob within [lo, hi] and a multiple of ``multiple``."""
    if type(value) is not int:
        raise fail(kernel, knob, value, f"must be an integer in {lo}..{hi} ({why})")
    if not lo <= value <= hi:
        raise fail(kernel, knob, value, f"must be in {lo}..{hi} ({why})")
    if value % multiple:
        raise fail(kernel, knob, value, f"must be a multiple of {multiple} ({why})")
    return value


def ladder(lo: int, hi: int, *always: int) -> tuple[int, ...]:
    """Powers of two in [lo, hi] plus ``always`` (the default, the maximum): the values of
    an integer range worth searching (``knob_space``); any integer in range is legal."""
    out = {v for v in always if lo <= v <= hi}
    p = 1
    while p <= hi:
        if p >= lo:
            out.add(p)
        p *= 2
    return tuple(sorted(out))


def expand_tile(kernel: str, knobs: Mapping[str, Any], m_knob: str, n_knob: str) -> dict:
    """``tile=MxN`` is a spelling of the path's own M and N knobs (``m_knob``, ``n_knob``);
    giving both spellings with different values is an error."""
    out = dict(knobs)
    if "tile" not in out:
        return out
    tile = out.pop("tile")
    if not (isinstance(tile, tuple) and len(tile) == 2 and all(type(v) is int for v in tile)):
        raise fail(kernel, "tile", tile, "a tile is MxN, e.g. tile=128x256")
    for knob, value in ((m_knob, tile[0]), (n_knob, tile[1])):
        if knob in out and out[knob] != value:
            raise fail(kernel, "tile", tile, f"disagrees with --set {knob}={show(out[knob])}")
        out[knob] = value
    return out


def schedule(kernel: str, knobs: Mapping[str, Any], arch, cluster_size: int, group_default: int,
             group_unit: str = "tile-rows") -> tuple[int, int, bool]:
    """(group_m, grid_ctas, persistent) of a persistent tile walk: ``group_m`` (the raster
    swizzle width: rows of tiles per L2 group, 1..64), ``grid_ctas`` (1..sm_count, a whole
    number of clusters) and ``persistent`` (false: one CTA per tile, grid = #tiles)."""
    group_m = knobs.get("group_m", group_default)
    check_int(kernel, "group_m", group_m, 1, 64, f"{group_unit} per L2 group of the tile walk")
    persistent = knobs.get("persistent", True)
    check_choice(kernel, "persistent", persistent, (True, False))
    full = arch.sm_count // cluster_size * cluster_size
    if "grid_ctas" in knobs:
        if not persistent:
            raise fail(kernel, "grid_ctas", knobs["grid_ctas"],
                       "a non-persistent launch runs one CTA per tile; drop persistent=false or grid_ctas")
        grid = check_int(kernel, "grid_ctas", knobs["grid_ctas"], cluster_size, full,
                         f"at most one CTA per SM: sm_count {arch.sm_count}, clusters of {cluster_size}",
                         multiple=cluster_size)
    else:
        grid = full if persistent else MAX_GRID_X // cluster_size * cluster_size
    return group_m, grid, persistent


def schedule_space(arch, cluster_size: int, group_default: int) -> dict[str, tuple]:
    """The search values of the schedule knobs (``schedule``)."""
    full = arch.sm_count // cluster_size * cluster_size
    grids = tuple(g for g in ladder(cluster_size, full, full, full // 2 // cluster_size * cluster_size)
                  if g % cluster_size == 0)
    return {"group_m": ladder(1, 16, group_default), "grid_ctas": grids, "persistent": (True, False)}


TILE_ORDERS = ("m", "n")


def tile_order(kernel: str, knobs: Mapping[str, Any]) -> str | None:
    """The GEMM tile walk's raster (``tile_order``): "m" (the default: groups of group_m
    tile-rows, consecutive units down a column) or "n" (groups of tile-columns, along a
    row); None when not set, so default configs keep no such key."""
    if "tile_order" not in knobs:
        return None
    check_choice(kernel, "tile_order", knobs["tile_order"], TILE_ORDERS,
                 "m: group tile-rows (walk down columns), n: group tile-columns (walk along rows)")
    return knobs["tile_order"]


def promote_every_k(kernel: str, knobs: Mapping[str, Any], accumulation: str, tile_k: int) -> int | None:
    """The ``promote_every_k`` knob checked against the accumulation mode (None when it is
    not set): only a promoted accumulation promotes, and its chain spans whole stages."""
    promote = knobs.get("promote_every_k")
    if promote is None:
        return None
    if accumulation != "promoted":
        if promote:
            raise fail(kernel, "promote_every_k", promote, f"{accumulation} accumulation never promotes; "
                       "set accumulation=promoted (or promote_every_k=0)")
    elif type(promote) is not int or promote <= 0 or promote % tile_k:
        raise fail(kernel, "promote_every_k", promote, f"a promoted chain spans whole stages: a positive "
                   f"multiple of TILE_K {tile_k}")
    return promote


def record_knobs(config: dict, kernel: str, knobs: Mapping[str, Any], persistent: bool) -> None:
    """Write what was overridden into a spec's config, so show and the reports say so
    (absent from default specs, whose sources stay byte-identical)."""
    if not knobs:
        return
    config["knobs"] = {k: show(v) for k, v in sorted(knobs.items())}
    if not persistent:
        config["persistent"] = False
    if tile_order(kernel, knobs):
        config["tile_order"] = knobs["tile_order"]


def record_grid_knobs(config: dict, kernel: str, knobs: Mapping[str, Any], arch) -> None:
    """For a kernel whose launch takes the grid from ``sm_count`` by default: with knobs,
    the grid they chose and what was overridden go into its config (absent by default)."""
    if not knobs:
        return
    _, grid, persistent = schedule(kernel, knobs, arch, 1, 1)
    config["grid_ctas"] = grid
    if not persistent:
        config["persistent"] = False
    config["knobs"] = {k: show(v) for k, v in sorted(knobs.items())}
