"""The device seam (porter.runtime.device): validation runs through any Device.

A host-memory device written against the documented interface only (as the emulated
device is) stands behind validate_gemm / validate_attention / validate_megakernel:
its own tensor-map encoding, arguments read as (ctype, value) pairs, its own kernels.
"""
from __future__ import annotations

import ctypes
import struct

import ml_dtypes
import numpy as np
import pytest

from porter.errors import PorterError
from porter.runtime.device import CudaDevice, Device, KernelFault, check_args, get_device
from porter.runtime import device_runs as dr


class HostBuffer:
    def __init__(self, nbytes):
        self.raw = np.zeros(max(nbytes, 1) + 256, dtype=np.uint8)
        self.ptr = (self.raw.ctypes.data + 255) // 256 * 256
        self.nbytes = max(nbytes, 1)


def view(ptr, shape, dtype):
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    return np.ctypeslib.as_array((ctypes.c_uint8 * n).from_address(ptr)).view(dtype).reshape(shape)


class HostDevice:
    """Device memory is host memory; a "kernel" is a Python function of the arguments."""

    kind, name, sm_count = "emu", "host test device", 132

    def __init__(self, kernels):
        self.kernels, self.keep, self.launches = kernels, [], []

    def alloc(self, nbytes):
        buf = HostBuffer(nbytes)
        self.keep.append(buf)
        return buf

    def upload(self, arr):
        host = np.ascontiguousarray(arr)
        buf = self.alloc(host.nbytes)
        ctypes.memmove(buf.ptr, host.ctypes.data, host.nbytes)
        return buf

    def download(self, buf, shape, dtype):
        return view(buf.ptr, shape, dtype).copy()

    def memset(self, buf, byte, nbytes=None, offset=0):
        ctypes.memset(buf.ptr + offset, byte, buf.nbytes - offset if nbytes is None else nbytes)

    def load(self, spec, arch):
        fn = self.kernels[spec.family]
        fn.name = spec.name
        return fn

    def encode_tensor_map(self, params, address):
        params.check(address)
        # this device's own 128 bytes: address, element bytes, then the dims
        return struct.pack("<QQ", address, params.element_bytes) + struct.pack(
            f"<{len(params.dims)}Q", *params.dims).ljust(112, b"\0")

    def launch(self, function, grid, block, smem_bytes, cluster, args, cooperative=False):
        check_args(function.name, args)
        self.launches.append((function.name, grid, block, tuple(cluster), cooperative))
        function(args)


def tma_address(desc):
    return struct.unpack_from("<Q", desc)[0]


def gemm_kernel(scale=1.0):
    def kernel(args):
        v = [value for _, value in args]
        names = ("tma_a", "tma_b", "c", "m", "n", "k", "scale_a", "scale_b")
        got = dict(zip(names, v))
        m, n, k = got["m"], got["n"], got["k"]
        elem = struct.unpack_from("<Q", got["tma_a"], 8)[0]
        dt = ml_dtypes.bfloat16 if elem == 2 else ml_dtypes.float8_e4m3fn
        a = view(tma_address(got["tma_a"]), (m, k), dt).astype(np.float64)
        b = view(tma_address(got["tma_b"]), (n, k), dt).astype(np.float64)
        c = (a @ b.T) * got["scale_a"] * got["scale_b"] * scale
        view(got["c"], (m, n), ml_dtypes.bfloat16)[:] = c.astype(np.float32).astype(ml_dtypes.bfloat16)
    return kernel


def test_both_devices_satisfy_the_interface():
    assert isinstance(HostDevice({}), Device)
    CudaDevice()                                        # constructing it touches no driver
    methods = ("alloc", "upload", "download", "memset", "load", "encode_tensor_map", "launch")
    assert all(callable(getattr(CudaDevice, m)) for m in methods) and CudaDevice.kind == "cuda"
    assert {"name", "sm_count"} <= set(vars(CudaDevice))     # properties: asked of the driver when read


@pytest.mark.parametrize("name", ["gemm.bf16", "gemm.fp8"])
def test_validate_gemm_through_another_device(hopper, name):
    from porter.commands.kernel import find_kernel

    spec = find_kernel(name, hopper)[0]
    assert [p for p, _ in spec.config["params"]] == ["tma_a", "tma_b", "c", "m", "n", "k", "scale_a", "scale_b"]
    dev = HostDevice({"gemm": gemm_kernel()})
    events = []
    checks = dr.validate_gemm(spec, hopper, shapes=[(256, 256, 256)], seeds=1, device=dev, log=events.append)
    assert checks[0]["passed"], checks
    assert [e["event"] for e in events] == ["launch", "check"] and events[0]["kernel"] == name
    assert dev.launches[0][3] == tuple(spec.cluster)
    bad = dr.validate_gemm(spec, hopper, shapes=[(256, 256, 256)], seeds=1, device=HostDevice({"gemm": gemm_kernel(1.05)}))
    assert not bad[0]["passed"]


def test_harness_validate_on_an_emulated_device_reports_emulated(hopper, tmp_path):
    import json

    from porter.commands.kernel import find_kernel
    from porter.runtime import harness

    spec = find_kernel("gemm.bf16", hopper)[0]
    result = harness.validate(spec, hopper, tmp_path, shapes=[(256, 256, 64)], seeds=1,
                         device=HostDevice({"gemm": gemm_kernel()}))
    assert result["passed"] and result["level"] == "emulated" and result["device"]["kind"] == "emu"
    assert json.loads((tmp_path / "device_validation.json").read_text())["level"] == "emulated"


def test_an_unwritten_output_fails_on_any_device(hopper):
    from porter.commands.kernel import find_kernel

    spec = find_kernel("gemm.bf16", hopper)[0]
    checks = dr.validate_gemm(spec, hopper, shapes=[(256, 256, 64)], seeds=1, device=HostDevice({"gemm": lambda a: None}))
    assert not checks[0]["passed"] and checks[0]["written"]["unwritten"] == 256 * 256


def test_megakernel_through_another_device_is_cooperative(hopper):
    from porter.kernels import megakernel

    spec = megakernel.variants(hopper)[0]
    dev = HostDevice({"megakernel": lambda args: None})
    checks = dr.validate_megakernel(spec, hopper, shapes=["tiny"], seeds=1, device=dev)
    assert not checks[0]["passed"] and not checks[0]["counters_ok"]
    assert dev.launches[0][4] is True


def test_gemm_shapes_start_small_and_cover_one_k_block(hopper):
    from porter.commands.kernel import find_kernel

    bf16 = dr.gemm_shapes(find_kernel("gemm.bf16", hopper)[0])
    fp8 = dr.gemm_shapes(find_kernel("gemm.fp8", hopper)[0])
    assert bf16[0][2] == 64 and fp8[0][2] == 128                     # the smoke launch: one k-block
    assert bf16[0] == min(bf16, key=lambda s: s[0] * s[1] * s[2])
    assert (256, 256, 16384) in fp8 and all(s[2] < 16384 for s in bf16)


def test_attention_shapes_cover_causal_with_long_queries(hopper):
    from porter.commands.kernel import find_kernel

    causal = dr.attention_shapes(find_kernel("attention.hd64.causal", hopper)[0])
    plain = dr.attention_shapes(find_kernel("attention.hd64", hopper)[0])
    assert any(s[3] >= 8 * s[4] for s in causal) and not any(s[3] >= 8 * s[4] for s in plain)
    assert causal[0] == (1, 1, 1, 64, 64)


def test_check_args_names_the_kernel_and_argument():
    with pytest.raises(PorterError, match=r"gemm.x: argument 0 \(TmaDescriptor\) must be the 128 bytes"):
        check_args("gemm.x", [("TmaDescriptor", b"x")])
    with pytest.raises(PorterError, match=r"argument 1 \(int\) must be an int, got float"):
        check_args("k", [("float*", 16), ("int", 1.5)])
    with pytest.raises(PorterError, match="'half2' is not one porter launches"):
        check_args("k", [("half2", 1)])
    check_args("k", [("TmaDescriptor", bytes(128)), ("bf16*", 256), ("int", 3), ("float", 0.5)])


def test_get_device_kinds(monkeypatch):
    from porter.runtime import device

    monkeypatch.setattr(device, "_DEFAULT", {})
    assert get_device("cuda").kind == "cuda" and get_device() is get_device("cuda")
    made = get_device(f"{__name__}:_factory")
    assert made.kind == "emu" and get_device(f"{__name__}:_factory") is made
    with pytest.raises(PorterError, match="a device is cuda, emu or module:callable"):
        get_device("tpu")
    with pytest.raises(PorterError, match="cannot import the device factory"):
        get_device("no_such_module_xyz:make")
    assert issubclass(KernelFault, PorterError)


def _factory():
    return HostDevice({})
