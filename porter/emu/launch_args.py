"""The checks ``porter.emu.launch`` makes of its arguments before anything runs: each bad
value is one ``EmuError`` naming the parameter (never a raw TypeError/ValueError/
OverflowError/ZeroDivisionError from deep inside), and the grid is bounded so a library
caller cannot start a run that grows without limit.

Bounds: the CUDA launch limits (grid x < 2^31, y and z <= 65535; block x, y <= 1024, z <= 64,
at most 1024 threads; a cluster of at most 16 CTAs; 227 KB of dynamic shared memory,
sm_90/sm_100's opt-in maximum) and the simulator's own ``MAX_CTAS`` CTAs per launch (it
runs every CTA in one Python process; split a bigger grid into launches over slices), and
``MAX_RACE_WARPS`` warps while the race detector is on.
"""

from __future__ import annotations

import math
import numbers
import struct

import numpy as np

from porter.emu.errors import EmuError

MAX_CTAS = 1 << 16
# The race detector keeps a vector clock per warp over every warp of the launch, so its memory
# grows with the square of the grid's warps (4096 warps: 128 MB); beyond this it must be off.
MAX_RACE_WARPS = 4096
MAX_DYNAMIC_SMEM = 227 * 1024
_GRID_LIMITS = ((1 << 31) - 1, 65535, 65535)
_BLOCK_LIMITS = (1024, 1024, 64)
MAX_CLUSTER = 16

_PACK = {"u8": "<B", "s8": "<b", "b8": "<B", "u16": "<H", "s16": "<h", "b16": "<H", "u32": "<I", "s32": "<i",
         "b32": "<I", "u64": "<Q", "s64": "<q", "b64": "<Q", "f32": "<f", "f64": "<d"}


def _int(v, what: str, lo: int = 0, hi: int | None = None) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (numbers.Integral, np.integer)):
        raise EmuError(f"launch: {what} must be an integer, got {v!r} ({type(v).__name__})")
    v = int(v)
    if v < lo or (hi is not None and v > hi):
        raise EmuError(f"launch: {what} = {v} is outside {lo}..{hi if hi is not None else 'inf'}")
    return v


def dim3(v, what: str, limits=(None, None, None)) -> tuple[int, int, int]:
    """An int or a sequence of 1-3 positive ints as (x, y, z)."""
    if isinstance(v, (numbers.Integral, np.integer)) and not isinstance(v, (bool, np.bool_)):
        items = [v]
    else:
        try:
            items = list(v)
        except TypeError:
            raise EmuError(f"launch: {what} must be an int or 1-3 ints, got {v!r} ({type(v).__name__})") from None
        if not 1 <= len(items) <= 3:
            raise EmuError(f"launch: {what} must have 1 to 3 dimensions, got {len(items)}")
    out = [_int(x, f"{what}[{'xyz'[i]}]", 1, limits[i]) for i, x in enumerate(items)]
    return tuple(out + [1] * (3 - len(out)))


def grid_block_cluster(grid, block, cluster, races: bool = False) -> tuple:
    g = dim3(grid, "grid", _GRID_LIMITS)
    b = dim3(block, "block", _BLOCK_LIMITS)
    c = dim3(cluster, "cluster")
    if math.prod(b) > 1024:
        raise EmuError(f"launch: block {b} has {math.prod(b)} threads; at most 1024")
    if math.prod(c) > MAX_CLUSTER:
        raise EmuError(f"launch: cluster {c} has {math.prod(c)} CTAs; at most {MAX_CLUSTER}")
    if math.prod(g) > MAX_CTAS:
        raise EmuError(f"launch: grid {g} has {math.prod(g):,} CTAs; the simulator runs at most {MAX_CTAS:,} per "
                       "launch (porter.emu.launch_args.MAX_CTAS): launch slices of the grid")
    warps = math.prod(g) * -(-math.prod(b) // 32)
    if races and warps > MAX_RACE_WARPS:
        raise EmuError(f"launch: grid {g} x block {b} is {warps:,} warps; the race detector runs up to "
                       f"{MAX_RACE_WARPS:,} (its clocks grow with the square of the warps): pass races=False or "
                       "launch fewer CTAs")
    return g, b, c


# ISA rules a launch may ask to relax (``relax=``, ``porter emu run --relax``): each reported as a
# warning naming its section instead of stopping the run, for kernels whose authors rely on the
# hardware being more lenient than the ISA's text
RELAXABLE = {
    "tcgen05-fences": "tcgen05.fence::before_thread_sync / after_thread_sync around a TMEM hand-off between "
                      "threads (PTX ISA 9.7.16.6.4); CUTLASS 7107b05's sm100 kernels and Triton 3.9's sm_100a "
                      "tl.dot omit them",
    "tmem-lanes": "a warp's tcgen05.ld / st lane field outside its lane quarter (PTX ISA 9.7.16.8.1), run at the "
                  "same lane of the warp's own quarter as release hardware routes it; DeepGEMM's sm100 epilogues "
                  "address lane 0 from every warp (the hardware rejects it in debug builds)",
}


def unrelaxable(names) -> list:
    """Those of ``names`` that are not rules porter can relax (``RELAXABLE``)."""
    return [n for n in names if not isinstance(n, str) or n not in RELAXABLE]


def relax(value) -> frozenset:
    """The ISA rules to relax, checked against ``RELAXABLE`` (one EmuError naming the unknown)."""
    try:
        names = [value] if isinstance(value, str) else list(value or ())
    except TypeError:
        names = [value]
    unknown = unrelaxable(names)
    if unknown:
        raise EmuError(f"launch: relax {unknown[0]!r}: not a rule porter can relax (rules: {', '.join(RELAXABLE)})")
    return frozenset(names)


def options(smem, seed, budget, regs_per_thread) -> tuple:
    smem = _int(smem, "smem", 0, MAX_DYNAMIC_SMEM)
    if seed is not None:
        seed = _int(seed, "seed", 0, (1 << 63) - 1)
    if budget is not None:
        budget = _int(budget, "budget", 1)
    if regs_per_thread is not None:
        regs_per_thread = _int(regs_per_thread, "regs_per_thread", 1, 255)
    return smem, seed, budget, regs_per_thread


def scalar(p, a, i: int) -> bytes:
    """A number packed as parameter ``p``'s PTX type; integers out of the type's range refused."""
    what = f"argument {i} for {p.name} (.{p.type})"
    fmt = _PACK.get(p.type)
    if fmt is None or p.size != struct.calcsize(fmt):
        raise EmuError(f"launch: {what}[{p.size}] cannot take the scalar {a!r}")
    if p.type[0] == "f":
        v = float(a)
        if p.type == "f32" and math.isfinite(v) and abs(v) > float(np.finfo(np.float32).max):
            raise EmuError(f"launch: {what} = {a!r} does not fit in .f32")
        return struct.pack(fmt, v)
    if isinstance(a, (float, np.floating)):
        raise EmuError(f"launch: {what} is an integer parameter; got the float {a!r}")
    v, n = int(a), 8 * p.size
    lo, hi = (-(1 << (n - 1)), (1 << (n - 1)) - 1) if p.type[0] == "s" else \
        ((-(1 << (n - 1)), (1 << n) - 1) if p.type[0] == "b" else (0, (1 << n) - 1))
    if not lo <= v <= hi:
        raise EmuError(f"launch: {what} = {v} is outside the type's range {lo}..{hi}")
    return struct.pack(fmt, v if p.type[0] == "s" else v & ((1 << n) - 1))


def array(a: np.ndarray, i: int, name: str) -> None:
    if a.dtype.hasobject or a.dtype.kind not in "biufcV":
        raise EmuError(f"launch: argument {i} for {name} is a numpy array of {a.dtype}; device memory holds numbers")
