"""Run a porter GEMM: ``gemm(a, b, arch=..., variant=...)`` -> C = scale_a * scale_b * A @ B^T (bf16).

Two halves. ``plan_gemm`` needs no GPU: it picks the kernel spec for the arch and
variant, checks shapes, dtypes, layout and alignment (one PorterError line each, e.g.
"gemm.bf16: K=100 must be a positive multiple of 64 ..."), and computes every TMA map
(data type, dims, strides, box, swizzle) from the spec's config, the grid and the
kernel arguments in the template's order (``spec.config["params"]``). ``gemm`` then
needs a device: it builds the kernel (NVRTC + SASS checks), copies host operands over,
encodes the maps, launches and copies C back.

Operand formats: bf16 -> bfloat16 arrays; e4m3 -> float8_e4m3fn (or its raw uint8 bits);
e2m1 -> uint8 with two values per byte (even k in the low nibble), so A is [M, K/2].
Block scales (mxfp8: ue8m0 per 32 of K; nvfp4: ue4m3 per 16) are [rows, K/block] arrays of
raw bytes (uint8, float8_e8m0fnu or float8_e4m3fn); porter reorders them into the
kernel's chunk layout (porter.kernels.block_scale_layout) on the host for the tcgen05
kernels (tma_sfa / tma_sfb), and passes them as they are for the mma_sync kernels, which
take sfa / sfb pointers to the row-major bytes. Kernels that take a / b pointers instead of
tensor maps (mma_sync with cp.async staging) need packed rows (row pitch K * bits / 8).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from porter.errors import PorterError
from porter.runtime.arrays import TensorInfo, tensor_info
from porter.runtime.tensormap import TensorMapParams, matrix_map

FORMAT_BITS = {"bf16": 16, "f16": 16, "e4m3": 8, "e5m2": 8, "e2m1": 4}
# dtype names accepted for each operand format (raw-byte uint8 for the 8-bit and packed ones).
FORMAT_DTYPES = {"bf16": ("bfloat16",), "f16": ("float16",), "e4m3": ("float8_e4m3fn", "uint8"),
                 "e5m2": ("float8_e5m2", "uint8"), "e2m1": ("uint8",)}
SCALE_DTYPES = {"ue8m0": ("float8_e8m0fnu", "uint8"), "ue4m3": ("float8_e4m3fn", "uint8")}
# TMA element type for each operand width: the 8- and 4-bit operands travel as bytes.
TMA_TYPE = {("bf16", 16): "BFLOAT16", ("f16", 16): "FLOAT16"}
SCALE_ROW_BYTES = 128       # the scale tensor as rows of 128 bytes (block_scale_layout.TMA_ROW_BYTES)


@dataclass
class GemmPlan:
    """Everything a launch needs except device addresses."""

    spec: object                     # porter.kernels.base.KernelSpec
    arch: object                     # porter.descriptor.arch.Arch
    m: int
    n: int
    k: int
    operands: dict[str, TensorInfo]  # "a", "b" (and "sfa", "sfb" laid out for the kernel)
    maps: dict[str, TensorMapParams]  # kernel parameter name -> its tensor map
    grid: int
    block: int
    smem_bytes: int
    cluster: tuple[int, int, int]
    scale_a: float = 1.0
    scale_b: float = 1.0
    out: TensorInfo | None = None
    out_obj: object = None
    host_scales: dict[str, np.ndarray] = field(default_factory=dict)

    @property
    def params(self) -> list[tuple[str, str]]:
        return list(self.spec.config["params"])

    def to_dict(self) -> dict:
        return {"kernel": self.spec.name, "entry": self.spec.entry, "arch": self.arch.name,
                "m": self.m, "n": self.n, "k": self.k, "grid": self.grid, "block": self.block,
                "cluster": list(self.cluster), "smem_bytes": self.smem_bytes,
                "maps": {k: v.to_dict() for k, v in self.maps.items()},
                "params": [list(p) for p in self.params]}


def _spec(arch, variant: str, pair: bool):
    from porter.kernels import gemm as gemm_family
    from porter.kernels.base import Unsupported

    name = variant.split(".", 1)[1] if variant.startswith("gemm.") else variant
    spec = gemm_family.make_spec(arch, name, pair)
    if isinstance(spec, Unsupported):
        raise PorterError(f"{spec.name}: not available on {arch.name} ({arch.target}): {spec.reason}")
    return spec, gemm_family.VARIANTS[name]


def _operand(obj, what: str, spec_name: str, fmt: str) -> TensorInfo:
    info = tensor_info(obj, f"{spec_name}: {what}")
    if len(info.shape) != 2:
        raise PorterError(f"{spec_name}: {what} must be 2-D, got shape {info.shape}")
    if info.dtype not in FORMAT_DTYPES[fmt]:
        packing = " (two e2m1 values per byte, even k in the low nibble)" if fmt == "e2m1" else ""
        raise PorterError(f"{spec_name}: {what} has dtype {info.dtype}; {fmt} operands must be "
                          f"{' or '.join(FORMAT_DTYPES[fmt])}{packing}")
    if info.shape[1] > 1 and info.strides[1] != info.itemsize:
        raise PorterError(f"{spec_name}: {what} must be K-major (unit stride along K, i.e. row-major "
                          f"[rows, K]); its strides are {info.strides} bytes: pass a contiguous copy")
    if info.ptr % 16:
        raise PorterError(f"{spec_name}: {what} starts at 0x{info.ptr:x}, not 16-byte aligned "
                          "as TMA requires: pass an aligned (e.g. freshly allocated) array")
    return info


def _logical_k(info: TensorInfo, fmt: str) -> int:
    return info.shape[1] * 8 * info.itemsize // FORMAT_BITS[fmt]


def _scales(obj, what: str, spec_name: str, rows: int, k: int, variant, row_major: bool = False) -> np.ndarray:
    from porter.kernels import block_scale_layout as bsl

    if obj is None:
        raise PorterError(f"{spec_name}: {what} is missing: block-scaled GEMMs need scales=(sfa, sfb) "
                          f"with one {variant.scale_format} per {variant.scale_block_k} elements of K")
    info = tensor_info(obj, f"{spec_name}: {what}")
    if info.device != "cpu":
        raise PorterError(f"{spec_name}: {what} must be a host array: porter reorders scale factors "
                          "into the kernel's chunk layout on the host")
    if info.dtype not in SCALE_DTYPES[variant.scale_format]:
        raise PorterError(f"{spec_name}: {what} has dtype {info.dtype}; {variant.scale_format} scales must be "
                          f"{' or '.join(SCALE_DTYPES[variant.scale_format])}")
    expected = (rows, k // variant.scale_block_k)
    if tuple(info.shape) != expected:
        raise PorterError(f"{spec_name}: {what} has shape {tuple(info.shape)}, expected {expected} "
                          f"(rows x K/{variant.scale_block_k})")
    raw = np.ascontiguousarray(np.asarray(obj)).view(np.uint8).reshape(expected)
    if row_major:        # the mma_sync path reads [rows, K/block] bytes as they are
        return raw
    scheme = bsl.MX_1X if variant.block_scale == "mx" else bsl.NVFP4_4X
    scheme.check_shape(rows, k, what)
    return bsl.to_kernel_layout(raw)


def _grid(spec, m: int, n: int, max_ctas: int | None = None) -> int:
    """The template's launch contract: csize x min(#cluster units, grid_ctas // csize) CTAs,
    where a unit is what one cluster computes together (``shape_multiple`` rows x cols of C,
    else one tile); csize x #units under schedule=clc. ``max_ctas`` caps the persistent grid below the descriptor's SM count
    (a device with fewer SMs, such as the emulated one); the kernel walks the rest."""
    cfg = spec.config
    csize = spec.cluster[0] * spec.cluster[1] * spec.cluster[2]
    unit_m, unit_n = (cfg.get("shape_multiple") or (cfg["tile_m"], cfg["tile_n"]))[:2]
    units = (m // unit_m) * (n // unit_n)
    if cfg.get("schedule") == "clc":
        # Dynamic scheduling: one cluster per unit; the hardware starts as many as fit and
        # the running ones cancel the rest and take their units over (cluster launch control).
        return csize * units
    ctas = cfg["grid_ctas"] if max_ctas is None else min(cfg["grid_ctas"], max_ctas)
    return csize * max(1, min(units, ctas // csize))


def operand_maps(spec, m: int, n: int, k: int, a_row_bytes: int, b_row_bytes: int) -> dict[str, TensorMapParams]:
    """The A and B (and scale) tensor maps the spec's kernel reads, from its config alone.

    Box rows are what one CTA loads: the per-CTA share in a CTA pair (``cta_rows``,
    ``b_rows_per_cta``) or the whole tile; the box's K is one 128-byte swizzle row.
    """
    cfg = spec.config
    fmt = cfg["a_format"]
    bits = FORMAT_BITS[fmt]
    data_type = TMA_TYPE.get((fmt, bits), "UINT8")
    elem_bytes = 2 if data_type in ("BFLOAT16", "FLOAT16") else 1
    k_elems = k * bits // 8 // elem_bytes            # K as TMA elements (bytes for fp8 / packed fp4)
    # Both paths stage A and B with the 128-byte swizzle (wgmma names it in its config).
    swizzle = str(cfg.get("swizzle", "128B"))
    # A path that lists its maps as data (config "tensor_maps": param, box, swizzle) is
    # taken at its word, e.g. B boxes split across a multicast cluster.
    declared = {t["param"]: t for t in cfg.get("tensor_maps", ()) if isinstance(t, Mapping) and "param" in t}

    def box(param: str, rows: int) -> tuple[int, int, str]:
        t = declared.get(param)
        if t is not None:
            return int(t["box"][0]), int(t["box"][1]), str(t.get("swizzle", swizzle))
        return cfg.get("tma_k_per_stage", cfg["tile_k"]), rows, swizzle

    name = spec.name
    a_k, a_rows, a_swizzle = box("tma_a", cfg.get("cta_rows", cfg["tile_m"]))
    b_k, b_rows, b_swizzle = box("tma_b", cfg.get("b_rows_per_cta", cfg["tile_n"]))
    maps = {
        "tma_a": matrix_map(f"{name} tma_a", data_type, m, k_elems, a_row_bytes, a_k, a_rows, a_swizzle),
        "tma_b": matrix_map(f"{name} tma_b", data_type, n, k_elems, b_row_bytes, b_k, b_rows, b_swizzle),
    } if any(p == "tma_a" for p, _ in cfg["params"]) else {}   # else a and b are plain pointers
    if any(p == "tma_c" for p, _ in cfg["params"]):
        # epilogue=tma: C's map (bf16 [M, N] row-major, packed rows), encoded over the output
        # buffer at launch (``output_maps``): each consumer's 64-column chunk is one box
        c_cols, c_rows, c_swizzle = box("tma_c", cfg["tile_m"])
        maps["tma_c"] = matrix_map(f"{name} tma_c", "BFLOAT16", m, n, n * 2, c_cols, c_rows, c_swizzle)
    if cfg.get("block_scale") and any(p == "tma_sfa" for p, _ in cfg["params"]):
        block = cfg["scale_block_k"]
        for param, rows in (("tma_sfa", m), ("tma_sfb", n)):
            maps[param] = matrix_map(f"{name} {param}", "UINT8", rows * (k // block) // SCALE_ROW_BYTES,
                                     SCALE_ROW_BYTES, SCALE_ROW_BYTES, SCALE_ROW_BYTES,
                                     4 * cfg["sf_k_chunks"], "NONE")
    return maps


def plan_gemm(a, b, arch, variant: str = "bf16", pair: bool = False, scales=None,
              scale_a: float = 1.0, scale_b: float = 1.0, out=None, max_ctas: int | None = None,
              spec=None) -> GemmPlan:
    """Validate a GEMM call and compute its launch (no GPU needed); ``max_ctas``: the
    device's SM count when it has fewer than the descriptor's; ``spec``: the kernel to
    launch when it is not the variant's default (a spec with --set knobs)."""
    from porter.descriptor.arch import load_arch
    from porter.kernels import gemm as gemm_family

    arch = load_arch(arch) if isinstance(arch, (str, os.PathLike)) else arch
    if spec is None:
        spec, v = _spec(arch, variant, pair)
    else:
        v = gemm_family.VARIANTS[spec.variant.split(".", 1)[1]]
    a_info = _operand(a, "A", spec.name, v.a_format)
    b_info = _operand(b, "B", spec.name, v.b_format)
    if a_info.device != b_info.device:
        raise PorterError(f"{spec.name}: A is on {a_info.device} and B on {b_info.device}; put both on one side")
    m, k = a_info.shape[0], _logical_k(a_info, v.a_format)
    n, k_b = b_info.shape[0], _logical_k(b_info, v.b_format)
    if k != k_b:
        raise PorterError(f"{spec.name}: A is [M={m}, K={k}] but B is [N={n}, K={k_b}]; "
                          "B is passed as [N, K] (K-major), i.e. C = A @ B^T")
    gemm_family.check_problem_shape(spec, m, n, k)
    if not v.per_tensor_scales and (scale_a != 1.0 or scale_b != 1.0):
        raise PorterError(f"{spec.name}: this variant has no per-tensor scales; leave scale_a and scale_b at 1.0")
    operands = {"a": a_info, "b": b_info}
    host_scales = {}
    if v.block_scale:
        sfa, sfb = scales if scales is not None else (None, None)
        # Keyed by the kernel parameter that receives them: tensor maps over the chunk
        # layout (tma_sfa / tma_sfb), or pointers to the row-major bytes (sfa / sfb).
        by_map = any(p == "tma_sfa" for p, _ in spec.config["params"])
        host_scales["tma_sfa" if by_map else "sfa"] = _scales(sfa, "sfa (scales of A)", spec.name, m, k, v, not by_map)
        host_scales["tma_sfb" if by_map else "sfb"] = _scales(sfb, "sfb (scales of B)", spec.name, n, k, v, not by_map)
    elif scales is not None:
        raise PorterError(f"{spec.name}: this variant takes no block scales")
    out_info = None
    if out is not None:
        out_info = tensor_info(out, f"{spec.name}: out")
        if tuple(out_info.shape) != (m, n) or out_info.dtype != "bfloat16" or not out_info.c_contiguous:
            raise PorterError(f"{spec.name}: out must be a contiguous bfloat16 [{m}, {n}] array, got "
                              f"{out_info.dtype} {tuple(out_info.shape)}")
        if out_info.device != a_info.device:
            raise PorterError(f"{spec.name}: out is on {out_info.device} but A and B are on {a_info.device}")
        # The epilogue stores C 16 bytes (8 bf16) at a time, from the start of every row.
        if out_info.ptr % 16:
            raise PorterError(f"{spec.name}: out starts at 0x{out_info.ptr:x}, not 16-byte aligned as the "
                              "epilogue's 16-byte stores require: pass an aligned (e.g. freshly allocated) array")
    elif a_info.device == "cuda":
        raise PorterError(f"{spec.name}: with device operands pass out= (a bfloat16 [{m}, {n}] device array)")
    maps = operand_maps(spec, m, n, k, a_info.strides[0], b_info.strides[0])
    if "tma_a" not in maps:
        # Pointer-staged kernels (cp.async) compute each row's address as K x bits / 8 bytes
        # from the start: the rows must be packed.
        for what, info, rows in (("A", a_info, m), ("B", b_info, n)):
            pitch = k * FORMAT_BITS[v.a_format] // 8
            if rows > 1 and info.strides[0] != pitch:
                raise PorterError(f"{spec.name}: {what} rows are {info.strides[0]} bytes apart; this kernel reads "
                                  f"packed rows of {pitch} bytes: pass a contiguous copy")
    for param, ctype in spec.config["params"]:
        if ctype == "TmaDescriptor" and param not in maps:
            raise PorterError(f"{spec.name}: kernel parameter {param} needs a tensor map porter does not build")
    return GemmPlan(spec=spec, arch=arch, m=m, n=n, k=k, operands=operands, maps=maps,
                    grid=_grid(spec, m, n, max_ctas), block=spec.threads, smem_bytes=spec.smem_bytes,
                    cluster=tuple(spec.cluster), scale_a=float(scale_a), scale_b=float(scale_b),
                    out=out_info, out_obj=out, host_scales=host_scales)


def device_arch(device_info):
    """The shipped descriptor whose compute capability is the device's."""
    from porter.descriptor.arch import list_archs, load_arch

    for name in list_archs():
        arch = load_arch(name)
        if arch.compute_capability == tuple(device_info.compute_capability):
            return arch
    cc = ".".join(map(str, device_info.compute_capability))
    raise PorterError(f"{device_info.name} (compute capability {cc}): no arch descriptor has this "
                      f"target; known: {', '.join(list_archs())}")


def run_plan(plan: GemmPlan):
    """Build, launch and wait; returns ``out`` (a new numpy bf16 array for host operands)."""
    import ml_dtypes

    from porter.kernels.build import build_kernel
    from porter.runtime import driver

    info = driver.device()
    if tuple(info.compute_capability) != plan.arch.compute_capability:
        cc = ".".join(map(str, info.compute_capability))
        raise PorterError(f"{plan.spec.name}: built for {plan.arch.name} ({plan.arch.target}) but device 0 is "
                          f"{info.name} (compute capability {cc}); pass arch= for this device")
    build = build_kernel(plan.spec, plan.arch)
    if not build.ok:
        failed = next((c for c in build.checks if not c.passed), None)
        raise PorterError(f"{plan.spec.name}: kernel not usable on {plan.arch.name}: "
                          f"{failed.name}: {failed.detail}" if failed else build.compile_error)
    function = driver.load_function(build.compiled.cubin, plan.spec.entry)

    keep = []  # device buffers must outlive the launch

    def device_ptr(tensor: TensorInfo) -> int:
        if tensor.device == "cuda":
            return tensor.ptr
        if not tensor.c_contiguous:
            raise PorterError(f"{plan.spec.name}: host operands must be contiguous to copy to the device")
        buf = driver.DeviceBuffer.from_host(tensor.ptr, tensor.nbytes)
        keep.append(buf)
        return buf.ptr

    # Device addresses by kernel parameter: under a tensor map's name they are encoded into
    # it, otherwise (a, b, sfa, sfb of a pointer-staged kernel) they are passed as they are.
    pointer_params = {p for p, ctype in plan.params if ctype.endswith("*")}
    addresses = {("tma_a" if "tma_a" in plan.maps else "a"): device_ptr(plan.operands["a"]),
                 ("tma_b" if "tma_b" in plan.maps else "b"): device_ptr(plan.operands["b"])}
    for param, flat in plan.host_scales.items():
        addresses[param] = device_ptr(tensor_info(flat))
    if plan.out is not None and plan.out.device == "cuda":
        c_buf, c_ptr = None, plan.out.ptr
    else:
        c_buf = driver.DeviceBuffer(plan.m * plan.n * 2)   # bf16 C
        keep.append(c_buf)
        c_ptr = c_buf.ptr
    values = {"c": c_ptr, "m": plan.m, "n": plan.n, "k": plan.k,
              "scale_a": plan.scale_a, "scale_b": plan.scale_b}
    values.update({p: ptr for p, ptr in addresses.items() if p in pointer_params})
    if "tma_c" in plan.maps:
        addresses["tma_c"] = c_ptr     # epilogue=tma: C's map over the output buffer
    for param, tmap in plan.maps.items():
        values[param] = tmap.encode(addresses[param])
    args = []
    for param, ctype in plan.params:
        if param not in values:
            raise PorterError(f"{plan.spec.name}: kernel parameter {param} ({ctype}) has no value")
        args.append(driver.pack_arg(ctype, values[param]))
    driver.launch(function, plan.grid, plan.block, plan.smem_bytes, plan.cluster, args)
    if c_buf is None:
        return plan.out_obj
    if plan.out is None:
        result = np.empty((plan.m, plan.n), dtype=ml_dtypes.bfloat16)
        c_buf.copy_to_host(result.ctypes.data, result.nbytes)
        return result
    c_buf.copy_to_host(plan.out.ptr, plan.m * plan.n * 2)
    return plan.out_obj


def gemm(a, b, arch=None, variant: str = "bf16", pair: bool = False, scales=None,
         scale_a: float = 1.0, scale_b: float = 1.0, out=None):
    """C[M, N] (bf16) = scale_a * scale_b * (A[M, K] @ B[N, K]^T) on the GPU.

    ``arch`` is a descriptor name, path or Arch; None means the descriptor of device 0.
    Everything is validated before the device is touched; without a GPU this raises
    PorterError("no CUDA device: ...").
    """
    if arch is None:
        from porter.runtime import driver

        arch = device_arch(driver.device())
    plan = plan_gemm(a, b, arch=arch, variant=variant, pair=pair, scales=scales,
                     scale_a=scale_a, scale_b=scale_b, out=out)
    return run_plan(plan)
