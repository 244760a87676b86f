"""The CUDA driver through cuda.bindings.driver: device, context, memory, modules, launches.

Everything that needs a GPU goes through here, and every failure becomes one
PorterError line: a machine without the NVIDIA driver or without a GPU ends in
"no CUDA device: ...", a failing call names the call and the CUDA error.
"""

from __future__ import annotations

import ctypes
import functools
from dataclasses import dataclass

from porter.errors import PorterError

NO_DEVICE = "no CUDA device"
# Dynamic shared memory above this needs cudaFuncAttributeMaxDynamicSharedMemorySize.
DEFAULT_DYNAMIC_SMEM = 48 * 1024
PORTABLE_CLUSTER = 8


def bindings():
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # pragma: no cover - cuda-python is a dependency
        raise PorterError("cuda-python is not installed: pip install cuda-python") from exc
    return driver


def check(result, what: str):
    """Unwrap a cuda.bindings (err, *values) tuple; a CUDA error becomes a PorterError."""
    drv = bindings()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
        name = name.decode() if isinstance(name, bytes) else str(name)
        text = text.decode() if isinstance(text, bytes) else str(text)
        prefix = f"{NO_DEVICE}: " if err in (drv.CUresult.CUDA_ERROR_NO_DEVICE,
                                             drv.CUresult.CUDA_ERROR_INVALID_DEVICE) else ""
        raise PorterError(f"{prefix}{what} failed: {name} ({text})")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


@dataclass(frozen=True)
class DeviceInfo:
    ordinal: int
    name: str
    compute_capability: tuple[int, int]
    sm_count: int
    smem_per_block_optin: int


@functools.lru_cache(maxsize=1)
def _init() -> None:
    drv = bindings()
    try:
        result = drv.cuInit(0)
    except Exception as exc:  # the driver library itself is missing (cuda.pathfinder raises)
        raise PorterError(f"{NO_DEVICE}: the NVIDIA driver library could not be loaded "
                          f"({type(exc).__name__}); porter compiles and checks kernels without a GPU, "
                          "running them needs one") from None
    check(result, "cuInit")
    if check(drv.cuDeviceGetCount(), "cuDeviceGetCount") == 0:
        raise PorterError(f"{NO_DEVICE}: the driver sees no GPU")


def device(ordinal: int = 0) -> DeviceInfo:
    """The GPU ``ordinal`` (raises PorterError "no CUDA device: ..." without one)."""
    _init()
    drv = bindings()
    count = check(drv.cuDeviceGetCount(), "cuDeviceGetCount")
    if not 0 <= ordinal < count:
        raise PorterError(f"{NO_DEVICE}: device {ordinal} requested, {count} present")
    dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    attr = drv.CUdevice_attribute

    def get(a):
        return check(drv.cuDeviceGetAttribute(a, dev), f"cuDeviceGetAttribute({a.name})")

    name = check(drv.cuDeviceGetName(256, dev), "cuDeviceGetName")
    name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
    return DeviceInfo(ordinal, name,
                      (get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
                       get(attr.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR)),
                      get(attr.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
                      get(attr.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN))


@functools.lru_cache(maxsize=None)
def context(ordinal: int = 0):
    """The device's primary context, made current (kept for the process)."""
    drv = bindings()
    device(ordinal)
    dev = check(drv.cuDeviceGet(ordinal), "cuDeviceGet")
    ctx = check(drv.cuDevicePrimaryCtxRetain(dev), "cuDevicePrimaryCtxRetain")
    check(drv.cuCtxSetCurrent(ctx), "cuCtxSetCurrent")
    return ctx


class DeviceBuffer:
    """Device memory that frees itself; ``ptr`` is the device address."""

    def __init__(self, nbytes: int):
        context()
        self.nbytes = max(int(nbytes), 1)
        self.ptr = int(check(bindings().cuMemAlloc(self.nbytes), f"cuMemAlloc({self.nbytes} B)"))

    @classmethod
    def from_host(cls, host_ptr: int, nbytes: int) -> "DeviceBuffer":
        """A device copy of ``nbytes`` contiguous bytes at host address ``host_ptr``."""
        buf = cls(nbytes)
        buf.copy_from_host(host_ptr, nbytes)
        return buf

    def copy_from_host(self, host_ptr: int, nbytes: int) -> None:
        check(bindings().cuMemcpyHtoD(self.ptr, host_ptr, nbytes), "cuMemcpyHtoD")

    def copy_to_host(self, host_ptr: int, nbytes: int) -> None:
        check(bindings().cuMemcpyDtoH(host_ptr, self.ptr, nbytes), "cuMemcpyDtoH")

    def free(self) -> None:
        if self.ptr:
            bindings().cuMemFree(self.ptr)
            self.ptr = 0

    def __del__(self):
        try:
            self.free()
        except Exception:
            pass


def load_function(cubin: bytes, entry: str):
    """Load ``cubin`` into the current context and return its ``entry`` kernel."""
    drv = bindings()
    context()
    module = check(drv.cuModuleLoadData(cubin), "cuModuleLoadData")
    return check(drv.cuModuleGetFunction(module, entry.encode()), f"cuModuleGetFunction({entry})")


def tensor_map_bytes(tensor_map) -> bytes:
    """The 128 bytes of a cuda.bindings CUtensorMap."""
    return bytes((ctypes.c_char * 128).from_address(tensor_map.getPtr()))


def pack_arg(ctype: str, value):
    """A ctypes object holding one kernel argument of C type ``ctype``."""
    if ctype == "TmaDescriptor":
        if not isinstance(value, (bytes, bytearray)) or len(value) != 128:
            raise PorterError("a TmaDescriptor argument must be the 128 bytes of a CUtensorMap")
        arg = (ctypes.c_uint64 * 16).from_buffer_copy(bytes(value))
    elif ctype.endswith("*"):
        arg = ctypes.c_uint64(int(value))
    elif ctype == "int":
        arg = ctypes.c_int32(int(value))
    elif ctype == "float":
        arg = ctypes.c_float(float(value))
    else:
        raise PorterError(f"kernel parameter type {ctype!r} is not one porter's launcher packs")
    return arg


def launch(function, grid: int, block: int, smem_bytes: int, cluster: tuple[int, int, int],
           args: list, cooperative: bool = False) -> None:
    """Launch ``function`` with ``args`` (ctypes objects) and wait for it to finish.

    ``cooperative``: all CTAs must be resident at once (persistent kernels whose CTAs
    wait on each other); the driver then rejects a grid that cannot be co-resident
    instead of letting it hang.
    """
    drv = bindings()
    fattr = drv.CUfunction_attribute
    if smem_bytes > DEFAULT_DYNAMIC_SMEM:
        check(drv.cuFuncSetAttribute(function, fattr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     smem_bytes), "cuFuncSetAttribute(max dynamic shared memory)")
    cluster_size = cluster[0] * cluster[1] * cluster[2]
    if cluster_size > PORTABLE_CLUSTER:
        check(drv.cuFuncSetAttribute(function, fattr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1),
              "cuFuncSetAttribute(non-portable cluster size)")
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = smem_bytes
    config.hStream = drv.CUstream(0)
    attrs = []
    if cluster_size > 1:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
        attrs.append(attr)
    if cooperative:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)
    if attrs:
        config.attrs = attrs
    config.numAttrs = len(attrs)
    # kernelParams is a void** whose entries point at each argument's bytes.
    pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
    check(drv.cuLaunchKernelEx(config, function, ctypes.addressof(pointers), 0), "cuLaunchKernelEx")
    check(drv.cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)")
