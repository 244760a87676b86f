"""Host side without a GPU: array reading, TMA map parameters, GEMM argument checks and plans."""

from __future__ import annotations

import re

import ml_dtypes
import numpy as np
import pytest

from porter.errors import PorterError
from porter.runtime import driver, gemm, plan_gemm, tensor_info
from porter.runtime.tensormap import TensorMapParams

BF16 = ml_dtypes.bfloat16
E4M3 = ml_dtypes.float8_e4m3fn


def bf16(rows: int, cols: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((rows, cols)).astype(BF16)


def has_device() -> tuple[bool, str]:
    try:
        driver.device()
        return True, ""
    except PorterError as exc:
        return False, str(exc)


# -- reading arrays ---------------------------------------------------------------------


class DLPackOnly:
    """Exposes an array only through the DLPack protocol, like a foreign framework would."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, stream=None):
        return self._arr.__dlpack__()

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_numpy_bf16_info():
    a = bf16(4, 8)
    info = tensor_info(a)
    assert (info.ptr, info.shape, info.strides) == (a.ctypes.data, (4, 8), (16, 2))
    assert (info.dtype, info.itemsize, info.device, info.c_contiguous) == ("bfloat16", 2, "cpu", True)


def test_dlpack_reads_pointer_shape_and_strides():
    base = np.arange(6 * 32, dtype=np.uint8).reshape(6, 32)
    view = base[1:, ::2]          # offset start and a non-unit inner stride
    info = tensor_info(DLPackOnly(view))
    assert info.ptr == view.ctypes.data
    assert info.shape == (5, 16) and info.strides == (32, 2)
    assert info.dtype == "uint8" and info.device == "cpu" and not info.c_contiguous
    f32 = np.zeros((3, 4), dtype=np.float32)
    assert tensor_info(DLPackOnly(f32)).strides == (16, 4)


def test_cuda_array_interface_is_a_device_array():
    class Fake:
        __cuda_array_interface__ = {"shape": (4, 64), "typestr": "|u1", "data": (0x7F0000000000, False),
                                    "strides": None, "version": 3}

    info = tensor_info(Fake())
    assert info.device == "cuda" and info.ptr == 0x7F0000000000 and info.strides == (64, 1)


def test_unreadable_object_is_a_porter_error():
    with pytest.raises(PorterError, match="A: object is not an array porter can read"):
        tensor_info(object(), "A")


# -- tensor map rules ---------------------------------------------------------------------


def tmap(**kw) -> TensorMapParams:
    base = dict(name="t", data_type="BFLOAT16", dims=(128, 256), strides=(256,), box=(64, 128), swizzle="128B")
    base.update(kw)
    return TensorMapParams(**base)


@pytest.mark.parametrize("kw, message", [
    (dict(strides=(250,)), "stride of dim 1 = 250 B must be a positive multiple of 16 B"),
    (dict(box=(64, 512), dims=(128, 1024)), "box size 512 in dim 1 must be in 1..256"),
    (dict(box=(128, 128)), "inner box row is 256 B but 128B swizzle covers at most 128 B; shrink box[0] to 64"),
    (dict(box=(4, 128), swizzle="NONE"), "inner box row is 8 B; it must be a multiple of 16 B"),
    (dict(box=(64, 300 % 256), dims=(128, 16)), "box size 44 in dim 1 exceeds the tensor's 16"),
    (dict(data_type="FLOAT8"), "data type 'FLOAT8' unknown"),
    (dict(strides=(128,)), "smaller than a row of dim 0 (256 B)"),
])
def test_tensor_map_rules(kw, message):
    with pytest.raises(PorterError, match=re.escape(message)) as info:
        tmap(**kw).check()
    assert str(info.value).startswith("tensor map t: ")


def test_tensor_map_address_alignment():
    assert tmap().check(0x1000).box_bytes == 64 * 128 * 2
    with pytest.raises(PorterError, match="global address 0x1008 is not 16-byte aligned"):
        tmap().check(0x1008)


# -- GEMM plans ----------------------------------------------------------------------------


@pytest.mark.parametrize("arch", ["hopper", "blackwell"])
def test_bf16_plan_matches_the_kernel_interface(arch):
    m, n, k = 512, 512, 256
    plan = plan_gemm(bf16(m, k), bf16(n, k, 1), arch=arch, variant="bf16")
    cfg = plan.spec.config
    assert plan.params == list(cfg["params"])
    assert [p for p, t in plan.params if t == "TmaDescriptor"] == list(plan.maps)
    a, b = plan.maps["tma_a"], plan.maps["tma_b"]
    assert (a.data_type, a.dims, a.strides, a.swizzle) == ("BFLOAT16", (k, m), (k * 2,), "128B")
    assert b.dims == (k, n) and a.box[0] * 2 == 128, "one 128-byte swizzle row of K per box row"
    csize = plan.cluster[0] * plan.cluster[1] * plan.cluster[2]
    declared = {t["param"]: t["box"] for t in cfg.get("tensor_maps", ())}
    assert list(a.box) == list(declared.get("tma_a", (a.box[0], cfg.get("cta_rows", cfg["tile_m"]))))
    assert list(b.box) == list(declared.get("tma_b", (b.box[0], cfg.get("b_rows_per_cta", cfg["tile_n"]) )))
    # The template's launch contract: csize x min(#cluster units, grid_ctas // csize).
    unit_m, unit_n = (cfg.get("shape_multiple") or (cfg["tile_m"], cfg["tile_n"]))[:2]
    assert plan.grid == csize * min((m // unit_m) * (n // unit_n), cfg["grid_ctas"] // csize)
    assert plan.grid % csize == 0
    assert (plan.block, plan.smem_bytes) == (plan.spec.threads, plan.spec.smem_bytes)


def test_pair_plan_uses_clusters_of_two():
    plan = plan_gemm(bf16(512, 256), bf16(512, 256, 1), arch="blackwell", variant="bf16", pair=True)
    assert plan.cluster == (2, 1, 1) and plan.grid % 2 == 0
    assert plan.maps["tma_a"].box[1] == plan.spec.config["tile_m"] // 2   # each CTA loads its half of M


def test_nvfp4_plan_packs_k_and_scales():
    m = n = 256
    k = 512
    a = np.zeros((m, k // 2), np.uint8)
    b = np.zeros((n, k // 2), np.uint8)
    sfa = np.full((m, k // 16), 0x38, np.uint8)          # ue4m3 1.0
    sfb = np.full((n, k // 16), 0x38, np.uint8)
    plan = plan_gemm(a, b, arch="blackwell", variant="nvfp4", scales=(sfa, sfb), scale_a=0.5, scale_b=2.0)
    assert plan.maps["tma_a"].dims == (k // 2, m)          # two e2m1 per byte
    sf = plan.maps["tma_sfa"]
    assert (sf.data_type, sf.swizzle, sf.dims) == ("UINT8", "NONE", (128, m * (k // 16) // 128))
    assert plan.host_scales["tma_sfa"].size == m * k // 16
    assert (plan.scale_a, plan.scale_b) == (0.5, 2.0)


@pytest.mark.parametrize("args, message", [
    (dict(a=bf16(256, 100), b=bf16(256, 100)), "gemm.bf16: K=100 must be a positive multiple of 64"),
    (dict(a=np.zeros((256, 128), np.float32), b=bf16(256, 128)), "gemm.bf16: A has dtype float32; bf16 operands must be bfloat16"),
    (dict(a=bf16(128, 256).T, b=bf16(256, 128)), "gemm.bf16: A must be K-major"),
    (dict(a=bf16(256, 128), b=bf16(256, 192)), r"gemm.bf16: A is \[M=256, K=128\] but B is \[N=256, K=192\]"),
    (dict(a=bf16(256, 128, 0)[None], b=bf16(256, 128)), r"gemm.bf16: A must be 2-D, got shape \(1, 256, 128\)"),
    (dict(a=bf16(256, 128), b=bf16(256, 128), scale_a=2.0), "gemm.bf16: this variant has no per-tensor scales"),
])
def test_bad_arguments_are_one_clear_line(args, message):
    with pytest.raises(PorterError, match=message) as info:
        plan_gemm(arch="hopper", variant="bf16", **args)
    assert "\n" not in str(info.value)


def test_misaligned_operand():
    raw = np.zeros(256 * 128 * 2 + 64, np.uint8)
    start = (-raw.ctypes.data) % 16 + 2              # deliberately 2 bytes past a 16-byte boundary
    a = raw[start:start + 256 * 128 * 2].view(BF16).reshape(256, 128)
    with pytest.raises(PorterError, match="not 16-byte aligned as TMA requires"):
        plan_gemm(a, bf16(256, 128), arch="hopper")


def test_variant_the_arch_lacks():
    with pytest.raises(PorterError, match=r"gemm.nvfp4: not available on hopper \(sm_90a\): hopper lacks fp4"):
        plan_gemm(np.zeros((256, 256), np.uint8), np.zeros((256, 256), np.uint8), arch="hopper", variant="nvfp4")


def test_block_scaled_needs_scales_of_the_right_shape():
    a = np.zeros((256, 512), E4M3)
    b = np.zeros((256, 512), E4M3)
    with pytest.raises(PorterError, match="gemm.mxfp8: sfa .scales of A. is missing"):
        plan_gemm(a, b, arch="blackwell", variant="mxfp8")
    bad = np.zeros((256, 8), np.uint8)
    with pytest.raises(PorterError, match=r"sfa \(scales of A\) has shape \(256, 8\), expected \(256, 16\)"):
        plan_gemm(a, b, arch="blackwell", variant="mxfp8", scales=(bad, bad))


def test_gemm_without_a_device_says_so():
    present, _ = has_device()
    if present:
        pytest.skip("a CUDA device is present")
    a, b = bf16(256, 128), bf16(256, 128, 1)
    for arch in ("hopper", None):
        with pytest.raises(PorterError, match="^no CUDA device: ") as info:
            gemm(a, b, arch=arch, variant="bf16")
        assert "\n" not in str(info.value)
    # Argument errors come first, device or not.
    with pytest.raises(PorterError, match="K=100"):
        gemm(bf16(256, 100), bf16(256, 100), arch="hopper")


@pytest.mark.gpu
def test_bf16_gemm_on_the_device():
    present, why = has_device()
    if not present:
        pytest.skip(why)
    from porter.runtime.gemm import device_arch

    arch = device_arch(driver.device())
    m, n, k = 256, 256, 512
    a, b = bf16(m, k), bf16(n, k, 1)
    c = gemm(a, b, arch=arch, variant="bf16")
    ref = a.astype(np.float64) @ b.astype(np.float64).T
    err = np.abs(c.astype(np.float64) - ref).max() / np.abs(ref).max()
    assert err < 1e-2, f"relative error {err}"


# -- the driver layer, checked against cuda.bindings without calling the driver --------------


def test_every_enum_name_porter_builds_exists_in_cuda_bindings():
    from porter.runtime.tensormap import DATA_TYPES, SWIZZLE_SPAN

    drv = driver.bindings()
    for name in DATA_TYPES:
        assert hasattr(drv.CUtensorMapDataType, f"CU_TENSOR_MAP_DATA_TYPE_{name}"), name
    for name in SWIZZLE_SPAN:
        assert hasattr(drv.CUtensorMapSwizzle, f"CU_TENSOR_MAP_SWIZZLE_{name}"), name
    assert hasattr(drv.CUtensorMapL2promotion, "CU_TENSOR_MAP_L2_PROMOTION_L2_256B")
    assert hasattr(drv.CUtensorMapFloatOOBfill, "CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE")
    assert hasattr(drv.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES")
    assert hasattr(drv.CUfunction_attribute, "CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED")
    assert hasattr(drv.CUlaunchAttributeID, "CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION")


def test_pack_arg():
    import ctypes

    desc = bytes(range(128))
    packed = driver.pack_arg("TmaDescriptor", desc)
    assert ctypes.sizeof(packed) == 128 and bytes(packed) == desc
    assert driver.pack_arg("__nv_bfloat16*", 0xDEAD0000).value == 0xDEAD0000
    assert driver.pack_arg("int", 7).value == 7 and ctypes.sizeof(driver.pack_arg("int", 7)) == 4
    assert driver.pack_arg("float", 0.5).value == 0.5
    with pytest.raises(PorterError, match="128 bytes of a CUtensorMap"):
        driver.pack_arg("TmaDescriptor", b"short")
    with pytest.raises(PorterError, match="kernel parameter type 'half2' is not one porter's launcher packs"):
        driver.pack_arg("half2", 1)


def test_launch_sets_smem_cluster_and_kernel_params(monkeypatch, hopper):
    """driver.launch on the rehearsal GPU: every call through the real binding's argument
    conversion, then a model that checks the opt-in, the cluster and the kernelParams."""
    from porter.commands.kernel import find_kernel
    from porter.runtime import fakedriver

    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.delenv(fakedriver.REHEARSAL_ENV, raising=False)
    gpu = fakedriver.FakeGPU("hopper")
    checked = fakedriver.install(gpu)
    try:
        spec = find_kernel("gemm.bf16", hopper)[0]
        drv = driver.bindings()
        module = driver.check(drv.cuModuleLoadData(b"\x7fELF"), "load")
        fn = driver.check(drv.cuModuleGetFunction(module, spec.entry.encode()), "function")
        values = [("TmaDescriptor", bytes(range(128))), ("TmaDescriptor", bytes(128)), ("__nv_bfloat16*", 1 << 20),
                  ("int", 256), ("int", 256), ("int", 64), ("float", 1.0), ("float", 0.5)]
        args = [driver.pack_arg(t, v) for t, v in values]
        monkeypatch.setitem(fakedriver._KERNELS, "gemm", lambda spec, v, factor: 0.0)    # launch only
        driver.launch(fn, grid=132, block=384, smem_bytes=spec.smem_bytes, cluster=(2, 1, 1), args=args,
                      timeout_s=5)
        last = gpu.last
        assert last["grid"] == (132, 1, 1) and last["cluster"] == (2, 1, 1) and last["smem_bytes"] == spec.smem_bytes
        assert last["values"]["tma_a"] == tuple(int.from_bytes(bytes(range(128))[i:i + 8], "little")
                                                for i in range(0, 128, 8))
        assert (last["values"]["k"], last["values"]["scale_b"]) == (64, 0.5)
        assert checked.calls["cuFuncSetAttribute"] == 1 and checked.calls["cuStreamQuery"] >= 1
        gpu.smem_optin.clear()                          # without the opt-in the driver refuses the launch
        with pytest.raises(PorterError, match=r"cuLaunchKernelEx\(kernel\) failed: CUDA_ERROR_INVALID_VALUE"):
            driver.enqueue_launch(fn, 132, 384, spec.smem_bytes, (1, 1, 1), False, driver.KernelParams(args))
        with pytest.raises(PorterError, match=r"grid \(131, 1, 1\) is not a whole number of \(2, 1, 1\) clusters"):
            driver.launch(fn, 131, 384, spec.smem_bytes, (2, 1, 1), args)
    finally:
        driver._init.cache_clear()
        driver.context.cache_clear()
