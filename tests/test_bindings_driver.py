"""Every cuda.bindings.driver call on the device run path, through the REAL binding.

Without the NVIDIA driver a binding function converts its arguments first and then
raises DynamicLibNotFoundError (ARCH_FACTS "Host side"), so calling it with porter's
actual argument types and values shows a type the binding refuses as a TypeError,
here, on a CPU. No fake stands in for the conversion: the calls below are the real
binding's, either directly or through porter.runtime.fakedriver.CheckedDriver (which
calls the real function with the same arguments before its model answers).
On a machine with a driver these tests skip: there the real calls would run.
"""
from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

from porter.errors import PorterError
from porter.runtime import driver
from porter.runtime.tensormap import TensorMapParams


def _driver_missing() -> bool:
    from cuda.bindings import driver as real

    try:
        real.cuInit(0)
    except Exception as exc:  # noqa: BLE001
        return driver.missing_driver(exc)         # 13.0: RuntimeError; 13.1+: DynamicLibNotFoundError
    return False


pytestmark = pytest.mark.skipif(not _driver_missing(), reason="the NVIDIA driver is installed: real calls would run")


def real():
    from cuda.bindings import driver as real_driver

    return real_driver


def converted(fn, *args):
    """Call the real binding; True when it got past argument conversion (a TypeError propagates)."""
    with pytest.raises(RuntimeError) as info:
        fn(*args)
    assert driver.missing_driver(info.value), info.value
    return True


def every_tensor_map():
    """(name, TensorMapParams) for every map porter builds for the shipped GEMM and attention kernels."""
    from porter import kernels
    from porter.descriptor.arch import load_arch
    from porter.kernels import gemm
    from porter.kernels.base import Unsupported
    from porter.runtime.gemm import FORMAT_BITS, operand_maps
    from porter.runtime import device_runs as dr

    out = []
    for arch_name in ("hopper", "blackwell"):          # the TMA kernels porter launches
        arch = load_arch(arch_name)
        for family in ("gemm", "attention"):
            if family not in kernels.FAMILIES:
                continue
            for spec in kernels.family_module(family).variants(arch):
                if isinstance(spec, Unsupported):
                    continue
                if family == "gemm":
                    m, n, k = gemm.shape_multiples(spec)
                    row = k * FORMAT_BITS[spec.config["a_format"]] // 8
                    maps = operand_maps(spec, m, n, k, row, row)
                else:
                    d = spec.config["head_dim"]
                    q = np.zeros((1, 2, 128, d), dtype=ml_dtypes.bfloat16)
                    kv = np.zeros((1, 1, 128, d), dtype=ml_dtypes.bfloat16)
                    _, _, maps = dr.attention_plan(spec, arch, q, kv, kv)
                out += [(f"{arch_name} {spec.name} {p}", t) for p, t in maps.items()]
    return out


MAPS = every_tensor_map()


def test_there_are_maps_of_every_kind():
    kinds = {(t.data_type, t.swizzle, t.rank) for _, t in MAPS}
    assert {"BFLOAT16", "UINT8"} <= {k[0] for k in kinds} and len(MAPS) >= 20


@pytest.mark.parametrize("name,params", MAPS, ids=[n for n, _ in MAPS])
def test_tensor_map_arguments_convert(name, params):
    assert converted(real().cuTensorMapEncodeTiled, *params.encode_args(1 << 20))


def test_encode_reaches_the_driver_and_says_none_is_here():
    """TensorMapParams.encode itself, on the real binding: the one-line no-device error,
    not the binding's TypeError (what plain Python ints used to give)."""
    params = TensorMapParams("t", "BFLOAT16", (64, 128), (128,), (64, 128), "128B")
    with pytest.raises(PorterError, match="no CUDA device: cuTensorMapEncodeTiled for t needs the NVIDIA driver"):
        params.encode(1 << 20)


def test_plain_ints_are_refused_by_the_real_binding():
    """The test has teeth: the argument types porter used before are a TypeError here."""
    d = real()
    params = TensorMapParams("t", "BFLOAT16", (64, 128), (128,), (64, 128), "128B")
    args = list(params.encode_args(1 << 20))
    args[3:7] = [list(params.dims), list(params.strides), list(params.box), [1, 1]]
    # 13.1+: "Cannot convert int to ...cuuint32_t"; 13.0: "Argument 'elementStrides' is not instance of type"
    with pytest.raises(TypeError, match="Cannot convert int to cuda.bindings.driver.cuuint|is not instance of type"):
        d.cuTensorMapEncodeTiled(*args)


def test_launch_config_and_params_convert():
    """cuLaunchKernelEx with porter's config (cluster and cooperative attributes) and
    kernelParams packed from every argument type porter passes."""
    d = real()
    args = [driver.pack_arg("TmaDescriptor", bytes(128)), driver.pack_arg("__nv_bfloat16*", 1 << 20),
            driver.pack_arg("int", 3), driver.pack_arg("float", 0.5)]
    params = driver.KernelParams(args)
    for cluster, cooperative in (((2, 1, 1), False), ((1, 1, 1), True), ((1, 1, 1), False)):
        config = driver.launch_config(132, 384, 214080, cluster, cooperative)
        assert config.numAttrs == (cluster != (1, 1, 1)) + cooperative
        assert converted(d.cuLaunchKernelEx, config, d.CUfunction(1), params.address, 0)
    with pytest.raises(TypeError):
        d.cuLaunchKernelEx(config, "a kernel name", params.address, 0)


def test_function_attribute_module_memory_and_event_calls_convert():
    d = real()
    fn, fattr = d.CUfunction(1), d.CUfunction_attribute
    assert converted(d.cuFuncSetAttribute, fn, fattr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, 214080)
    assert converted(d.cuFuncSetAttribute, fn, fattr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1)
    assert converted(d.cuFuncGetAttribute, fattr.CU_FUNC_ATTRIBUTE_NUM_REGS, fn)
    assert converted(d.cuFuncLoad, fn)
    assert converted(d.cuModuleLoadData, b"\x7fELF" + bytes(60))
    assert converted(d.cuModuleGetFunction, d.CUmodule(1), b"porter_gemm_bf16_wgmma")
    host = np.zeros(64, dtype=np.uint8)
    assert converted(d.cuMemAlloc, 64)
    assert converted(d.cuMemcpyHtoD, 1 << 20, host.ctypes.data, host.nbytes)
    assert converted(d.cuMemcpyDtoH, host.ctypes.data, 1 << 20, host.nbytes)
    assert converted(d.cuMemsetD8, 1 << 20, 0xFF, 64)
    assert converted(d.cuMemsetD32Async, 1 << 20, 0, 16, d.CUstream(0))
    assert converted(d.cuMemsetD8Async, 1 << 20, 0x25, 64, d.CUstream(0))
    assert converted(d.cuMemcpyDtoDAsync, 1 << 21, 1 << 20, 64, d.CUstream(0))
    assert converted(d.cuMemFree, 1 << 20)
    ev = d.CUevent(1)
    assert converted(d.cuEventCreate, d.CUevent_flags.CU_EVENT_DEFAULT)
    assert converted(d.cuEventRecord, ev, d.CUstream(0))
    assert converted(d.cuEventSynchronize, ev)
    assert converted(d.cuEventElapsedTime, ev, ev)
    assert converted(d.cuStreamQuery, d.CUstream(0))
    assert converted(d.cuEventQuery, ev)
    assert converted(d.cuStreamSynchronize, d.CUstream(0))
    assert converted(d.cuDriverGetVersion)


def test_porters_own_calls_turn_a_missing_driver_into_one_line():
    """porter's wrappers on the real binding: argument conversion passes, then the one-line error."""
    with pytest.raises(PorterError, match="no CUDA device: cuFuncSetAttribute needs the NVIDIA driver"):
        driver.set_function_attributes(real().CUfunction(1), 214080, (2, 1, 1))
    with pytest.raises(PorterError, match="no CUDA device: cuLaunchKernelEx"):
        driver.enqueue(real().CUfunction(1), driver.launch_config(1, 128, 0), driver.KernelParams(
            [driver.pack_arg("int", 1)]))
    with pytest.raises(PorterError, match="no CUDA device: cuStreamQuery"):
        driver.wait("k", timeout_s=1.0)
    with pytest.raises(PorterError, match="no CUDA device"):
        driver.device()


# ---- the whole device run path, every call through the real conversion -----------------------

# Binding functions a validate + bench run of the Hopper kernels must reach.
RUN_PATH = {"cuInit", "cuDeviceGet", "cuDeviceGetAttribute", "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
            "cuMemAlloc", "cuMemcpyHtoD", "cuMemcpyDtoH", "cuMemsetD8", "cuTensorMapEncodeTiled",
            "cuModuleLoadData", "cuModuleGetFunction", "cuFuncSetAttribute", "cuFuncGetAttribute",
            "cuLaunchKernelEx", "cuStreamQuery", "cuEventCreate", "cuEventRecord", "cuEventQuery",
            "cuEventElapsedTime", "cuEventDestroy", "cuMemsetD32Async", "cuMemsetD8Async", "cuMemcpyDtoDAsync",
            "cuMemFree", "cuFuncLoad"}


def test_the_run_path_goes_through_the_real_conversion(monkeypatch, hopper):
    from porter.commands.kernel import find_kernel
    from porter.kernels import megakernel
    from porter.runtime import cubins, device, fakedriver
    from porter.runtime import timing
    from porter.validation import device_harness as dh
    from porter.runtime import device_runs as dr

    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.delenv(fakedriver.REHEARSAL_ENV, raising=False)
    monkeypatch.setattr(device, "_DEFAULT", {})
    monkeypatch.setattr(cubins, "candidates", lambda spec, arch: iter([("test", b"\x7fELF test")]))
    monkeypatch.setattr(timing, "MAX_ROTATION_SETS", 2)
    monkeypatch.setenv(timing.WARMUP_ENV, "10")
    monkeypatch.setattr("porter.runtime.baselines.torch_cuda", lambda: (None, "no torch here"))
    checked = fakedriver.install(fakedriver.FakeGPU("hopper"))
    try:
        gemm = find_kernel("gemm.bf16", hopper)[0]
        assert all(c["passed"] for c in dr.validate_gemm(gemm, hopper, shapes=[(256, 256, 64)], seeds=1))
        dr.bench_gemm(gemm, hopper, shapes=[(256, 256, 64)])
        att = find_kernel("attention.hd128", hopper)[0]
        assert all(c["passed"] for c in dr.validate_attention(att, hopper, shapes=[(1, 1, 1, 64, 64)], seeds=1))
        mk = megakernel.variants(hopper)[0]
        dr.validate_megakernel(mk, hopper, shapes=["tiny"], seeds=1)
        rows = dr.bench_megakernel(mk, hopper, shapes=[{"model": "tiny", "pos": 8}])   # the bench path, small model
        assert rows[0]["spot_check"]["passed"] is True              # the rehearsal runs the step in porter's VM
        assert rows[0]["baseline"]["bytes_per_s"] > 0
        fn = device.get_device().load(gemm, hopper)
        attrs = driver.function_attributes(fn.handle)
        assert attrs["max_dynamic_smem_bytes"] == gemm.smem_bytes and attrs["registers"] > 0
    finally:
        driver._init.cache_clear()
        driver.context.cache_clear()
    missing = RUN_PATH - set(checked.calls)
    assert not missing, f"not exercised through the real binding: {sorted(missing)}"


def test_the_checked_driver_lets_a_type_error_through():
    from porter.runtime import fakedriver

    checked = fakedriver.CheckedDriver(fakedriver.FakeGPU("hopper"))
    with pytest.raises(TypeError):
        checked.cuMemAlloc("sixty-four bytes")
    with pytest.raises(TypeError, match="cuuint32_t"):
        checked.cuTensorMapEncodeTiled(checked.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, 1 << 20,
                                       [64, 128], [128], [64, 128], [1, 1],
                                       checked.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
                                       checked.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
                                       checked.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                                       checked.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)


# ---- the GPU machine's cuda-bindings ------------------------------------------------------------

def test_a_missing_driver_is_recognised_in_every_bindings_version():
    """cuda-bindings 13.0 (the GPU machine's) says a missing libcuda with a plain RuntimeError,
    13.1 and later with cuda.pathfinder's DynamicLibNotFoundError: both are "no driver here",
    any other RuntimeError is not."""
    class DynamicLibNotFoundError(RuntimeError):
        pass

    assert driver.missing_driver(RuntimeError("Failed to dlopen libcuda.so.1"))
    assert driver.missing_driver(DynamicLibNotFoundError('"cuda" is an NVIDIA driver library'))
    assert not driver.missing_driver(RuntimeError("CUDA error: an illegal memory access"))
    assert not driver.missing_driver(TypeError("Failed to dlopen libcuda.so.1"))
    with pytest.raises(PorterError, match="no CUDA device: cuMemAlloc needs the NVIDIA driver"):
        driver.call(lambda n: (_ for _ in ()).throw(RuntimeError("Failed to dlopen libcuda.so.1")), 64,
                    what="cuMemAlloc")


GPU_BINDINGS_ENV = "PORTER_GPU_BINDINGS"


@pytest.mark.slow
def test_this_file_passes_on_the_gpu_machines_cuda_bindings():
    """Every conversion test above, again on the cuda-bindings the GPU machine has (13.0):
    a folder holding it (``pip install --target DIR cuda-bindings==13.0.3``) named by
    PORTER_GPU_BINDINGS, first on the path."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    folder = os.environ.get(GPU_BINDINGS_ENV)
    if not folder or not (Path(folder) / "cuda" / "bindings").is_dir():
        pytest.skip(f"{GPU_BINDINGS_ENV} names no folder with cuda-bindings 13.0 "
                    "(pip install --target DIR cuda-bindings==13.0.3)")
    env = dict(os.environ, PYTHONPATH=folder)
    env.pop(GPU_BINDINGS_ENV)
    done = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", __file__, "-k",
                           "not gpu_machines"], capture_output=True, text=True, timeout=600, env=env)
    assert done.returncode == 0, done.stdout[-3000:]
    assert " skipped" not in done.stdout.splitlines()[-1], done.stdout[-2000:]
    version = subprocess.run([sys.executable, "-c", "import cuda.bindings; print(cuda.bindings.__version__)"],
                             capture_output=True, text=True, env=env).stdout.strip()
    assert version.startswith("13.0"), version
