"""Attention family: FlashAttention-style forward kernels (bf16 q/k/v/o, fp32 LSE).

One variant per (head dim, causal). The mainloop follows the descriptor's tensor-core
generation: ``tcgen05`` (S, P, O in Tensor Memory, single-thread MMAs) or ``wgmma``
(S, P, O in registers, warpgroup MMAs). Each mainloop module provides
``make_spec(arch, head_dim, causal)`` returning a KernelSpec, a list of them
(e.g. a CTA-pair configuration next to the single-CTA one) or an Unsupported; this
module owns the names, the kernel parameter list, rendering, numerics and the
host-side entry point ``attention(q, k, v, causal)``.
"""

from __future__ import annotations

import dataclasses
import importlib
import math

from porter.compile import render as renderlib
from porter.errors import PorterError
from porter.kernels.base import KernelSpec, Unsupported

from porter.kernels.attention_variants import (  # noqa: F401  (the family's public names)
    FAMILY,
    TEMPLATE,
    HEAD_DIMS,
    PARAMS,
    spec_name,
    variant_name,
    entry_name,
    base_config,
    TILE_ORDER,
    TILE_ORDERS,
    TILE_ORDER_WHY,
)

# Numerics cases run per variant on the CPU model: a masked KV tail, grouped-query
# heads, Sq < Sk and (causal) Sq > Sk, so every masking rule is exercised.
NUMERICS_CASES = (
    # (b, hq, hkv, sq, sk)
    (1, 2, 2, 128, 128),
    (2, 4, 1, 64, 200),
    (1, 4, 2, 96, 300),
    (1, 2, 1, 160, 100),
)


def _mainloop_module(arch):
    """The mainloop module for ``arch``'s tensor core, or None when it has neither."""
    # Features, not names: the tensor-core generation decides the mainloop.
    if arch.has("tcgen05"):
        name = "porter.kernels.attention_tcgen05"
    elif arch.has("wgmma"):
        name = "porter.kernels.attention_wgmma"
    elif arch.has("mma_sync"):
        name = "porter.kernels.attention_mma_sync"
    else:
        return None
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name != name:   # a real import error inside the module: let it show
            raise
        return name            # the mainloop is not written (yet): reported as Unsupported


def variants(arch) -> list[KernelSpec | Unsupported]:
    out: list[KernelSpec | Unsupported] = []
    mod = _mainloop_module(arch)
    for head_dim in HEAD_DIMS:
        for causal in (False, True):
            if mod is None:
                out.append(Unsupported(
                    FAMILY, spec_name(head_dim, causal), variant_name(head_dim, causal),
                    missing=("wgmma|tcgen05|mma_sync",),
                    reason="needs a warpgroup (wgmma), single-thread (tcgen05) or warp-level (mma_sync) tensor core"))
                continue
            if isinstance(mod, str):
                out.append(Unsupported(
                    FAMILY, spec_name(head_dim, causal), variant_name(head_dim, causal), missing=(),
                    reason=f"no attention mainloop module {mod} in this install"))
                continue
            made = mod.make_spec(arch, head_dim, causal)
            out.extend(made if isinstance(made, (list, tuple)) else [made])
    from porter.tuning.entries import tuned_variants   # a tuning/ entry replaces the hand-chosen knobs

    return tuned_variants(arch, out, render, spec_with_knobs)


# ---- knobs (porter.kernels.knobs): each mainloop has knob_space, knobs_of and make_spec(knobs=)

def _named(arch, name: str):
    """(head_dim, causal, pair, mainloop module) of ``name`` (attention.hd128.causal.pair)."""
    parts = name.split(".")
    pair = parts[-1] == "pair"
    causal = "causal" in parts
    ok = (len(parts) == 2 + causal + pair and parts[0] == FAMILY and parts[1].startswith("hd")
          and parts[1][2:].isdigit() and int(parts[1][2:]) in HEAD_DIMS)
    mod = _mainloop_module(arch)
    if not ok or mod is None or isinstance(mod, str):
        raise PorterError(f"kernel '{name}': not an attention kernel {arch.name} builds")
    return int(parts[1][2:]), causal, pair, mod


# ``tile_order`` (the persistent walk, decode_tile in attention.cu.j2) is the family's own
# knob: every mainloop visits tiles through decode_tile, so it is declared and checked here
# and the mainloop sees the other knobs only. Left at heads_inner the config has no key (the
# default sources stay byte-identical).

def knob_space(arch, name: str) -> dict[str, tuple]:
    head_dim, causal, pair, mod = _named(arch, name)
    return {**mod.knob_space(arch, head_dim, causal, pair), "tile_order": TILE_ORDERS}


def spec_with_knobs(arch, name: str, knobs) -> KernelSpec | Unsupported:
    from porter.kernels import knob_rules as kr

    head_dim, causal, pair, mod = _named(arch, name)
    knobs = dict(knobs or {})
    order = knobs.pop("tile_order", TILE_ORDER)
    kr.check_choice(name, "tile_order", order, TILE_ORDERS, TILE_ORDER_WHY)
    if hasattr(mod, "make_one"):
        spec = mod.make_one(arch, head_dim, causal, pair, knobs=knobs)
    else:
        spec = mod.make_spec(arch, head_dim, causal, knobs=knobs)
    if order == TILE_ORDER or not isinstance(spec, KernelSpec):
        return spec
    return dataclasses.replace(spec, config={**spec.config, "tile_order": order})


def knobs_of(arch, spec: KernelSpec) -> dict:
    return {**_named(arch, spec.name)[3].knobs_of(spec.config),
            "tile_order": spec.config.get("tile_order", TILE_ORDER)}


def render(spec: KernelSpec, arch) -> str:
    """Self-contained CUDA source of ``spec`` for ``arch``."""
    return renderlib.render(spec.template or TEMPLATE, spec=spec, cfg=dict(spec.config), arch=arch)


def numerics(spec: KernelSpec, arch) -> dict:
    """CPU model of the kernel's arithmetic at the spec's KV tile, over NUMERICS_CASES."""
    from porter.validation.attention_numerics import check_attention

    head_dim = spec.config["head_dim"]
    causal = bool(spec.config["causal"])
    block_n = spec.config["block_n"]
    # The tcgen05 mainloop's FA4 softmax (lazy rescale, polynomial exp2) where its config has it.
    fa4 = {"rescale_threshold": float(spec.config.get("rescale_threshold_log2", 0)),
           "poly_exp2_share": float(spec.config.get("poly_exp2_share", 0))}
    cases = [check_attention(head_dim, causal, b, hq, hkv, sq, sk, seed=0, block_n=block_n, **fa4)
             for (b, hq, hkv, sq, sk) in NUMERICS_CASES]
    return {"variant": spec.variant, "block_n": block_n, "cases": cases,
            "passed": all(c["passed"] for c in cases)}


def cluster_size(spec: KernelSpec) -> int:
    """CTAs per cluster: 2 for a CTA-pair spec, 1 otherwise."""
    return spec.cluster[0] * spec.cluster[1] * spec.cluster[2]


def _matching(arch, head_dim: int, causal: bool) -> list[KernelSpec | Unsupported]:
    return [s for s in variants(arch)
            if s.variant == variant_name(head_dim, causal)]


def find_spec(arch, head_dim: int, causal: bool, pair: bool = False) -> KernelSpec:
    """The single-CTA (or, with ``pair``, the CTA-pair) spec for (head_dim, causal) on
    ``arch``; PorterError naming why when there is none."""
    found = _matching(arch, head_dim, causal)
    for s in found:
        if isinstance(s, KernelSpec) and (cluster_size(s) > 1) == pair:
            return s
    if pair:
        why = next((u.reason for u in found if isinstance(u, Unsupported) and u.name.endswith(".pair")),
                   "the descriptor has no CTA pairs")
        raise PorterError(f"attention: no CTA-pair kernel for head_dim={head_dim} causal={causal} "
                          f"on {arch.name}: {why}; pass pair=False")
    raise PorterError(f"attention: head_dim={head_dim} causal={causal} is not supported on {arch.name} "
                      f"(supported head dims: {', '.join(map(str, HEAD_DIMS))})")


def _kv_tiles(q0: int, block_m: int, block_n: int, sq: int, sk: int, causal: bool) -> int:
    """K/V tiles a query tile visits (mirrors kv_tile_count in attention/mask.cuh)."""
    last = min(q0 + block_m - 1, sq - 1)
    lim = sk if not causal else max(0, min(sk, last + 1 + sk - sq))
    return -(-lim // block_n)


def estimated_steps(spec: KernelSpec, arch, b: int, hq: int, sq: int, sk: int) -> int:
    """A launch-time cost model (no GPU measurement behind it): waves of the persistent
    grid x K/V tiles of the longest query tile (the last one when causal). One K/V step
    costs a CTA about the same in both configurations - each CTA owns 128 query rows
    either way; a pair only splits the B operands (K rows, V columns) between its CTAs."""
    cfg = spec.config
    tiles = b * hq * -(-sq // cfg["block_m"])
    slots = max(1, cfg.get("grid_ctas", arch.sm_count) // cluster_size(spec))
    waves = -(-tiles // slots)
    last_q0 = (-(-sq // cfg["block_m"]) - 1) * cfg["block_m"]
    return waves * max(1, _kv_tiles(last_q0, cfg["block_m"], cfg["block_n"], sq, sk, bool(cfg["causal"])))


def choose_spec(arch, head_dim: int, causal: bool, b: int, hq: int, sq: int, sk: int,
                pair: bool | None = None) -> KernelSpec:
    """The spec ``attention()`` launches. ``pair`` True / False forces the CTA-pair /
    single-CTA kernel; None picks by :func:`estimated_steps`, preferring the pair on a tie
    (it streams half the K/V bytes per CTA through shared memory and issues M = 256 MMAs)."""
    if pair is not None:
        return find_spec(arch, head_dim, causal, pair)
    single = find_spec(arch, head_dim, causal, pair=False)
    pairs = [s for s in _matching(arch, head_dim, causal) if isinstance(s, KernelSpec) and cluster_size(s) > 1]
    if not pairs:
        return single
    cost = {id(s): estimated_steps(s, arch, b, hq, sq, sk) for s in (single, pairs[0])}
    return pairs[0] if cost[id(pairs[0])] <= cost[id(single)] else single


# ---- host entry point --------------------------------------------------------------

def _shape_and_dtype(name: str, x) -> tuple[tuple[int, ...], str]:
    """(shape, dtype name) of a numpy array or a DLPack-capable tensor, without a GPU."""
    shape = getattr(x, "shape", None)
    dtype = getattr(x, "dtype", None)
    if shape is None or dtype is None:
        raise PorterError(f"attention: {name} must be a numpy array or a DLPack tensor; got {type(x).__name__}")
    # numpy + ml_dtypes spells it 'bfloat16', torch 'torch.bfloat16', cupy/jax 'bfloat16'.
    return tuple(int(s) for s in shape), str(dtype).rsplit(".", 1)[-1]


def validate_inputs(q, k, v) -> tuple[int, int, int, int, int, int]:
    """Check layouts, dtypes and head dim; returns (B, Hq, Hkv, Sq, Sk, D)."""
    shapes = {}
    for name, x in (("q", q), ("k", k), ("v", v)):
        shape, dtype = _shape_and_dtype(name, x)
        if len(shape) != 4:
            raise PorterError(f"attention: {name} must be 4-D [B, H, S, D]; got shape {shape}")
        if dtype != "bfloat16":
            raise PorterError(f"attention: {name} has dtype {dtype}; the kernels take bfloat16 "
                              "(numpy: ml_dtypes.bfloat16, torch: torch.bfloat16)")
        shapes[name] = shape
    b, hq, sq, d = shapes["q"]
    if shapes["k"] != shapes["v"]:
        raise PorterError(f"attention: k {shapes['k']} and v {shapes['v']} must have the same shape")
    bk, hkv, sk, dk = shapes["k"]
    if bk != b:
        raise PorterError(f"attention: batch differs: q has {b}, k/v have {bk}")
    if dk != d:
        raise PorterError(f"attention: head dim differs: q has {d}, k/v have {dk}")
    if d not in HEAD_DIMS:
        raise PorterError(f"attention: head dim {d} is not supported; use one of {', '.join(map(str, HEAD_DIMS))}")
    if min(b, hq, hkv, sq, sk) <= 0:
        raise PorterError(f"attention: empty dimension in q {shapes['q']} or k {shapes['k']}")
    if hq % hkv != 0:
        raise PorterError(f"attention: grouped-query attention needs Hq % Hkv == 0; got Hq={hq}, Hkv={hkv}")
    return b, hq, hkv, sq, sk, d


LOG2E = 1.4426950408889634


def launch_plan(spec: KernelSpec, arch, b: int, hq: int, hkv: int, sq: int, sk: int,
                softmax_scale: float | None = None, max_ctas: int | None = None) -> dict:
    """Everything the host needs to launch ``spec`` (no GPU involved): the persistent
    grid, block, dynamic shared memory, the scalar arguments and the three TMA maps
    (2-D bf16 views (rows, cols) with their box and swizzle). ``max_ctas``: the device's
    SM count when it has fewer than the arch (the emulated device), as for the GEMMs."""
    cfg = spec.config
    d = cfg["head_dim"]
    tiles = b * hq * -(-sq // cfg["block_m"])
    # Persistent: one CTA (or one cluster, e.g. a CTA pair sharing a tile) per SM's
    # worth of tiles; a mainloop may cap the CTAs with grid_ctas.
    cluster = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    slots = cfg.get("grid_ctas", arch.sm_count)
    if max_ctas:
        slots = min(slots, int(max_ctas))
    clusters = max(1, min(tiles, slots // cluster))
    scale = d ** -0.5 if softmax_scale is None else float(softmax_scale)
    # The kernels keep the running max of the RAW scores and fold the scale in later
    # (softmax.cuh), which is only the max of the scaled scores for a positive scale.
    if not (scale > 0 and math.isfinite(scale)):
        raise PorterError(f"attention: softmax_scale must be a finite number > 0; got {softmax_scale!r}")
    boxes = cfg["tma_boxes"]

    def tmap(name: str, rows: int) -> dict:
        return {"rows": rows, "cols": d, "dtype": "bf16", "box": list(boxes[name]),
                "swizzle": cfg.get("tma_swizzles", {}).get(name, cfg["tma_swizzle"])}

    # A mainloop that takes q / k / v as plain pointers (no tma_boxes, e.g. cp.async
    # staging) gets their contiguous [B*H*S, D] bf16 extents instead of tensor maps.
    pointer_params = [name for name, ctype in cfg["params"] if name in ("q", "k", "v")]
    rows = {"q": b * hq * sq, "k": b * hkv * sk, "v": b * hkv * sk}
    maps = ({"tma_q": tmap("q", rows["q"]), "tma_k": tmap("k", rows["k"]), "tma_v": tmap("v", rows["v"])}
            if boxes else {})
    # o_store=tma: O's map, 3-D (D, Sq, B*Hq) so a box stops at seq_q within its head; its box
    # rows shrink to seq_q when a head has fewer (a box may not exceed the tensor). It maps the
    # output buffer ``o``, not an input (``output_maps``).
    output_maps = {}
    if cfg.get("o_map"):
        box_cols, box_rows = cfg["o_map"]["box"]
        maps["tma_o"] = {"dims": [d, sq, b * hq], "dtype": "bf16", "box": [box_cols, min(box_rows, sq), 1],
                         "swizzle": cfg["o_map"]["swizzle"]}
        output_maps["tma_o"] = "o"
    return {
        "entry": spec.entry,
        "grid": (clusters * cluster, 1, 1),
        "block": (spec.threads, 1, 1),
        "cluster": spec.cluster,
        "smem_bytes": spec.smem_bytes,
        "tiles": tiles,
        "tensor_maps": maps,
        "output_maps": output_maps,
        "pointers": {name: {"rows": rows[name], "cols": d, "dtype": "bf16"} for name in pointer_params},
        "scalars": {"batch": b, "heads_q": hq, "heads_kv": hkv, "seq_q": sq, "seq_k": sk,
                    "softmax_scale_log2": scale * LOG2E},
        "outputs": {"o": (b, hq, sq, d), "lse": (b, hq, sq)},
    }


def tensor_maps(spec: KernelSpec, plan: dict, row_bytes: int) -> dict:
    """The q/k/v tensor maps as porter.runtime TensorMapParams, checked (no GPU)."""
    from porter.runtime.tensormap import TensorMapParams, matrix_map

    maps = {}
    for param, m in plan["tensor_maps"].items():
        if "dims" in m:     # O's 3-D map (o_store=tma): rows of row_bytes, heads of seq_q rows
            dims = tuple(m["dims"])
            maps[param] = TensorMapParams(f"{spec.name} {param}", "BFLOAT16", dims,
                                          (row_bytes, row_bytes * dims[1]), tuple(m["box"]), m["swizzle"]).check()
            continue
        box_cols, box_rows = m["box"]
        maps[param] = matrix_map(f"{spec.name} {param}", "BFLOAT16", m["rows"], m["cols"], row_bytes,
                                 box_cols, box_rows, m["swizzle"])
    return maps


def _array_side(q, k, v) -> str:
    """"cpu" or "cuda": where q, k, v live (all on one side)."""
    from porter.runtime.arrays import tensor_info

    sides = {tensor_info(x, f"attention: {n}").device for n, x in (("q", q), ("k", k), ("v", v))}
    if len(sides) != 1:
        raise PorterError("attention: q, k and v must all be host arrays or all device arrays")
    return sides.pop()


def attention(q, k, v, causal: bool = False, arch=None, softmax_scale: float | None = None,
              pair: bool | None = None):
    """softmax(q k^T * scale) v on the GPU; returns (o bf16 [B,Hq,Sq,D], lse fp32 [B,Hq,Sq]).

    Shapes, dtypes, head dim and grouping are validated first, then the tensor maps and
    the launch are planned; only then is the device touched (PorterError "no CUDA
    device: ..." without one). Host (numpy) inputs are copied over and the results
    come back as numpy arrays. ``pair``: None lets :func:`choose_spec` pick between the
    single-CTA and the CTA-pair kernel (where the descriptor has CTA pairs); True / False
    forces one (PorterError if that one does not exist for this arch and head dim).
    """
    b, hq, hkv, sq, sk, d = validate_inputs(q, k, v)
    from porter.descriptor.arch import load_arch

    if isinstance(arch, str):
        arch = load_arch(arch)
    if _array_side(q, k, v) != "cpu":
        raise PorterError("attention: device arrays are not supported yet; pass numpy (host) arrays")
    from porter.runtime import driver

    # With the arch given, a kernel that does not exist (e.g. pair=True without CTA
    # pairs) is reported before the device is touched.
    spec = choose_spec(arch, d, bool(causal), b, hq, sq, sk, pair) if arch is not None else None
    dev = driver.device()                      # "no CUDA device: ..." without a GPU
    if arch is None:
        from porter.runtime.gemm import device_arch

        arch = device_arch(dev)
        spec = choose_spec(arch, d, bool(causal), b, hq, sq, sk, pair)
    plan = launch_plan(spec, arch, b, hq, hkv, sq, sk, softmax_scale)
    host = host_views(plan, q, k, v)
    maps = tensor_maps(spec, plan, d * 2)
    return _run(spec, arch, plan, maps, host)


def host_views(plan: dict, q, k, v) -> dict:
    """Host q, k, v as the 2-D (rows, D) bf16 arrays the kernel's parameters receive, keyed
    by parameter: tma_q / tma_k / tma_v (padded to a box, ``_pad_to_box``) for a TMA
    mainloop, q / k / v (contiguous, unpadded: the kernel clamps its rows) for one that
    takes pointers."""
    if plan["tensor_maps"]:
        return _pad_to_box(plan, {"tma_q": q, "tma_k": k, "tma_v": v})
    import numpy as np

    return {name: np.ascontiguousarray(x).reshape(plan["pointers"][name]["rows"], plan["pointers"][name]["cols"])
            for name, x in (("q", q), ("k", k), ("v", v))}


def _pad_to_box(plan: dict, arrays: dict) -> dict:
    """Host copies as 2-D (rows, D) bf16, zero-padded to at least one TMA box of rows.

    A tensor map's box may not be larger than the tensor, so a tiny problem (fewer
    rows than one tile) gets zero rows appended; the kernel masks keys >= seq_k and
    never stores rows >= seq_q, so the padding is never seen. Updates ``plan``.
    """
    import numpy as np

    out = {}
    for param, x in arrays.items():
        m = plan["tensor_maps"][param]
        flat = np.ascontiguousarray(x).reshape(m["rows"], m["cols"])
        need = max(m["rows"], m["box"][1])
        if need > m["rows"]:
            padded = np.zeros((need, m["cols"]), dtype=flat.dtype)
            padded[: m["rows"]] = flat
            flat, m["rows"] = padded, need
        out[param] = flat
    return out


def _run(spec: KernelSpec, arch, plan: dict, maps: dict, host: dict):
    import ml_dtypes
    import numpy as np

    from porter.kernels.build import build_kernel
    from porter.runtime import driver

    build = build_kernel(spec, arch)
    if not build.ok:
        failed = next((c for c in build.checks if not c.passed), None)
        raise PorterError(f"{spec.name}: kernel not usable on {arch.name}: "
                          + (f"{failed.name}: {failed.detail}" if failed else build.compile_error))
    function = driver.load_function(build.compiled.cubin, spec.entry)
    bufs = {param: driver.DeviceBuffer.from_host(x.ctypes.data, x.nbytes) for param, x in host.items()}
    o = np.empty(plan["outputs"]["o"], dtype=ml_dtypes.bfloat16)
    lse = np.empty(plan["outputs"]["lse"], dtype=np.float32)
    o_buf, lse_buf = driver.DeviceBuffer(o.nbytes), driver.DeviceBuffer(lse.nbytes)
    values = {"o": o_buf.ptr, "lse": lse_buf.ptr, **plan["scalars"]}
    for param in plan["tensor_maps"]:
        out = plan.get("output_maps", {}).get(param)
        values[param] = maps[param].encode(values[out] if out else bufs[param].ptr)
    for param in plan["pointers"]:
        values[param] = bufs[param].ptr
    args = [driver.pack_arg(ctype, values[param]) for param, ctype in spec.config["params"]]
    driver.launch(function, plan["grid"][0], plan["block"][0], plan["smem_bytes"], spec.cluster, args)
    o_buf.copy_to_host(o.ctypes.data, o.nbytes)
    lse_buf.copy_to_host(lse.ctypes.data, lse.nbytes)
    return o, lse
