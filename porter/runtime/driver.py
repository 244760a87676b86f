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
MODULE_LOADING_ENV = "CUDA_MODULE_LOADING"


# Set once a kernel faulted (sticky error) or hung in this process: the context is lost,
# and cuMemFree may synchronise on the hung kernel and never return, so buffers are no
# longer freed (the memory goes with the process; the device check's child os._exits).
LOST = {"why": ""}


def context_lost() -> str:
    """Why this process's context is lost ("" while it is usable)."""
    return LOST["why"]


def mark_lost(why: str) -> None:
    if not LOST["why"]:
        LOST["why"] = why


def missing_driver(exc: BaseException) -> bool:
    """Whether ``exc`` is cuda.bindings saying libcuda is not installed (after it converted
    the call's arguments). cuda-bindings >= 13.1 raises cuda.pathfinder's
    DynamicLibNotFoundError; 13.0 (the GPU machine's) a plain RuntimeError
    "Failed to dlopen libcuda.so.1"."""
    if type(exc).__name__ == "DynamicLibNotFoundError":
        return True
    return type(exc) is RuntimeError and "dlopen libcuda" in str(exc)


def bindings():
    try:
        from cuda.bindings import driver
    except ImportError as exc:  # pragma: no cover - cuda-python is a dependency
        raise PorterError("cuda-python is not installed: pip install cuda-python") from exc
    return driver


def check(result, what: str):
    """Unwrap a cuda.bindings (err, *values) tuple; a CUDA error becomes a PorterError
    (KernelFault for a sticky one: the context is lost)."""
    drv = bindings()
    err, *values = result if isinstance(result, tuple) else (result,)
    if err != drv.CUresult.CUDA_SUCCESS:
        prefix = f"{NO_DEVICE}: " if err in (drv.CUresult.CUDA_ERROR_NO_DEVICE,
                                             drv.CUresult.CUDA_ERROR_INVALID_DEVICE) else ""
        cls = KernelFault if int(err) in STICKY_ERRORS else PorterError
        if cls is KernelFault:
            mark_lost(f"{what}: {error_text(err)}")
        raise cls(f"{prefix}{what} failed: {error_text(err)}")
    if not values:
        return None
    return values[0] if len(values) == 1 else tuple(values)


class KernelFault(PorterError):
    """A kernel ended in a sticky error (illegal address, illegal instruction, a trap):
    the context is lost, so nothing more can run in this process."""

    exit_code = 1


class KernelHang(PorterError):
    """A kernel did not finish before its watchdog deadline; the context is unusable
    until the process ends."""

    exit_code = 1


# CUresult codes after which the context is lost (cuda.h: "the process must be terminated").
STICKY_ERRORS = frozenset({700, 702, 710, 714, 715, 716, 717, 718, 719})
NOT_READY = 600


def call(fn, *args, what: str):
    """``fn(*args)`` for a cuda.bindings function: a missing driver library becomes the
    one-line "no CUDA device" error, and a binding that refuses porter's argument types
    (a porter bug, ARCH_FACTS "Host side") a PorterError that names the call."""
    try:
        return fn(*args)
    except TypeError as exc:
        raise PorterError(f"{what}: cuda.bindings refused porter's arguments ({exc}); "
                          "this is a porter bug, please report it") from None
    except RuntimeError as exc:        # a missing libcuda (missing_driver) is a RuntimeError
        if not missing_driver(exc):
            raise
        raise PorterError(f"{NO_DEVICE}: {what} needs the NVIDIA driver library, which is not installed "
                          "here") from None


def error_text(err) -> str:
    """'NAME (description)' for a CUresult."""
    drv = bindings()
    try:
        _, name = drv.cuGetErrorName(err)
        _, text = drv.cuGetErrorString(err)
    except Exception:   # noqa: BLE001 - the driver may be the thing that is broken
        return f"CUresult {int(err)}"
    name = name.decode() if isinstance(name, bytes) else str(name)
    text = text.decode() if isinstance(text, bytes) else str(text)
    return f"{name} ({text})"


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
        self.ptr = int(check(call(bindings().cuMemAlloc, self.nbytes, what="cuMemAlloc"), f"cuMemAlloc({self.nbytes} B)"))

    @classmethod
    def from_host(cls, host_ptr: int, nbytes: int) -> "DeviceBuffer":
        """A device copy of ``nbytes`` contiguous bytes at host address ``host_ptr``."""
        buf = cls(nbytes)
        buf.copy_from_host(host_ptr, nbytes)
        return buf

    def copy_from_host(self, host_ptr: int, nbytes: int) -> None:
        check(call(bindings().cuMemcpyHtoD, self.ptr, int(host_ptr), int(nbytes), what="cuMemcpyHtoD"), "cuMemcpyHtoD")

    def copy_to_host(self, host_ptr: int, nbytes: int) -> None:
        check(call(bindings().cuMemcpyDtoH, int(host_ptr), self.ptr, int(nbytes), what="cuMemcpyDtoH"), "cuMemcpyDtoH")

    def memset(self, byte: int, nbytes: int | None = None, offset: int = 0) -> None:
        """Fill ``nbytes`` (default: the rest of the buffer) from ``offset`` with ``byte``."""
        n = self.nbytes - offset if nbytes is None else int(nbytes)
        if offset < 0 or n < 0 or offset + n > self.nbytes:
            raise PorterError(f"memset of {n} B at offset {offset} exceeds a {self.nbytes} B buffer")
        check(call(bindings().cuMemsetD8, self.ptr + int(offset), int(byte) & 0xFF, n, what="cuMemsetD8"),
              "cuMemsetD8")

    def free(self) -> None:
        """cuMemFree, unless the context is lost (context_lost): after a hang, cuMemFree
        may wait for the hung kernel forever, and after a fault it frees nothing."""
        if self.ptr and not context_lost():
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
    module = check(call(drv.cuModuleLoadData, bytes(cubin), what="cuModuleLoadData"), "cuModuleLoadData")
    function = check(call(drv.cuModuleGetFunction, module, entry.encode(), what="cuModuleGetFunction"),
                     f"cuModuleGetFunction({entry})")
    if hasattr(drv, "cuFuncLoad"):
        # under lazy module loading (the driver's default, CUDA_MODULE_LOADING) the image is
        # only loaded at the first launch: load it now, so a cubin the driver refuses is
        # refused here, inside CudaDevice.load's fallback, not at that launch
        check(call(drv.cuFuncLoad, function, what="cuFuncLoad"), f"cuFuncLoad({entry})")
    return function


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


def _dims(v) -> tuple[int, int, int]:
    t = tuple(int(x) for x in (v if isinstance(v, (tuple, list)) else (v,)))
    return (t + (1, 1, 1))[:3]


def set_function_attributes(function, smem_bytes: int, cluster) -> None:
    """Opt ``function`` in to ``smem_bytes`` of dynamic shared memory and, past the
    portable 8, to a larger cluster (both must precede the launch)."""
    drv = bindings()
    fattr = drv.CUfunction_attribute
    if smem_bytes > DEFAULT_DYNAMIC_SMEM:
        check(call(drv.cuFuncSetAttribute, function, fattr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                   int(smem_bytes), what="cuFuncSetAttribute"), "cuFuncSetAttribute(max dynamic shared memory)")
    c = _dims(cluster)
    if c[0] * c[1] * c[2] > PORTABLE_CLUSTER:
        check(call(drv.cuFuncSetAttribute, function, fattr.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1,
                   what="cuFuncSetAttribute"), "cuFuncSetAttribute(non-portable cluster size)")


def function_attributes(function) -> dict:
    """Registers, static shared memory, max threads and the dynamic shared memory limit
    the driver reports for a loaded kernel (the resources as the GPU sees them)."""
    drv = bindings()
    fattr = drv.CUfunction_attribute
    out = {}
    for key, attr in (("registers", fattr.CU_FUNC_ATTRIBUTE_NUM_REGS),
                      ("static_smem_bytes", fattr.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES),
                      ("max_threads", fattr.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
                      ("max_dynamic_smem_bytes", fattr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES),
                      ("local_bytes", fattr.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES)):
        out[key] = int(check(call(drv.cuFuncGetAttribute, attr, function, what="cuFuncGetAttribute"),
                             f"cuFuncGetAttribute({attr.name})"))
    return out


def launch_config(grid, block, smem_bytes: int, cluster=(1, 1, 1), cooperative: bool = False, stream=None):
    """A CUlaunchConfig (real binding types throughout): grid and block, dynamic shared
    memory, the legacy default stream, and the cluster / cooperative launch attributes.

    ``cooperative``: all CTAs must be resident at once (persistent kernels whose CTAs
    wait on each other); the driver then rejects a grid that cannot be co-resident
    instead of letting it hang.
    """
    drv = bindings()
    config = drv.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = _dims(grid)
    config.blockDimX, config.blockDimY, config.blockDimZ = _dims(block)
    config.sharedMemBytes = int(smem_bytes)
    config.hStream = stream if stream is not None else drv.CUstream(0)
    attrs = []
    c = _dims(cluster)
    if c[0] * c[1] * c[2] > 1:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
        attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = c
        attrs.append(attr)
    if cooperative:
        attr = drv.CUlaunchAttribute()
        attr.id = drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
        attr.value.cooperative = 1
        attrs.append(attr)
    config.attrs, config.numAttrs = attrs, len(attrs)
    return config


class KernelParams:
    """kernelParams for cuLaunchKernelEx: a void** whose entries point at each argument's
    bytes (kept alive here for as long as the launch may read them)."""

    def __init__(self, args: list):
        self.args = list(args)
        self.pointers = (ctypes.c_void_p * max(len(self.args), 1))(*[ctypes.addressof(a) for a in self.args])
        self.address = ctypes.addressof(self.pointers)


def enqueue(function, config, params: KernelParams, what: str = "cuLaunchKernelEx") -> None:
    """Enqueue one launch without waiting for it."""
    drv = bindings()
    check(call(drv.cuLaunchKernelEx, config, function, params.address, 0, what=what), what)


# Functions whose compile-time cluster (__cluster_dims__) made the driver refuse the cluster
# launch attribute; they launch without it (the compiled cluster applies).
_COMPILED_CLUSTER: set = set()


def _key(function):
    try:
        return int(function)
    except (TypeError, ValueError):
        return repr(function)


def enqueue_launch(function, grid, block, smem_bytes: int, cluster, cooperative: bool, params: KernelParams,
                   what: str = "kernel") -> str:
    """Enqueue one launch; "" or a note. When the driver refuses the launch with a cluster
    attribute (a kernel whose ``__cluster_dims__`` fixes its cluster may not be given one at
    launch), it is retried once without the attribute, and the note says so; if that is
    refused too, the first error is raised."""
    c, g = _dims(cluster), _dims(grid)
    if any(gi % ci for gi, ci in zip(g, c)):
        # checked here: the retry below must never turn this porter bug into a launch
        raise PorterError(f"{what}: grid {g} is not a whole number of {c} clusters")
    clustered = c[0] * c[1] * c[2] > 1 and _key(function) not in _COMPILED_CLUSTER
    config = launch_config(grid, block, smem_bytes, c if clustered else (1, 1, 1), cooperative)
    try:
        enqueue(function, config, params, f"cuLaunchKernelEx({what})")
        return ""
    except KernelFault:
        raise
    except PorterError as first:
        if not clustered:
            raise
        try:
            enqueue(function, launch_config(grid, block, smem_bytes, (1, 1, 1), cooperative), params,
                    f"cuLaunchKernelEx({what})")
        except PorterError:
            raise first from None
        _COMPILED_CLUSTER.add(_key(function))
        return (f"{what}: the driver refused the cluster launch attribute {c} ({first}); launched without it "
                "(the kernel's __cluster_dims__ sets its cluster)")


def _poll(query, name: str, handle, what: str, timeout_s: float, hang: str, max_delay: float) -> None:
    """Poll ``query(handle)`` (cuStreamQuery / cuEventQuery) with growing sleeps until it is
    no longer NOT_READY (then check its status) or ``timeout_s`` passes (KernelHang)."""
    import time

    deadline = time.monotonic() + timeout_s
    delay = 1e-4
    while True:
        result = call(query, handle, what=name)
        err = result[0] if isinstance(result, tuple) else result
        if int(err) != NOT_READY:
            check(result, f"{what} ({name})")
            return
        if time.monotonic() >= deadline:
            mark_lost(f"{what}: {hang}")
            raise KernelHang(f"{what}: {hang}")
        time.sleep(delay)
        delay = min(delay * 2, max_delay)


def wait(what: str, timeout_s: float | None = None, stream=None, poll_s: float = 0.002) -> None:
    """Wait for ``stream`` (default: the legacy stream) with a deadline: poll
    cuStreamQuery instead of a blocking synchronize, so a kernel that never finishes
    becomes KernelHang naming ``what`` after ``timeout_s`` instead of hanging the host.
    A sticky failure raises KernelFault, any other error PorterError."""
    drv = bindings()
    stream = stream if stream is not None else drv.CUstream(0)
    if timeout_s is None:
        check(call(drv.cuStreamSynchronize, stream, what="cuStreamSynchronize"), f"{what} (cuStreamSynchronize)")
        return
    _poll(drv.cuStreamQuery, "cuStreamQuery", stream, what, timeout_s,
          f"still running after {timeout_s:.0f} s (watchdog); the kernel hangs or waits on something that never "
          "arrives", poll_s * 25)


def wait_event(event, what: str, timeout_s: float | None = None) -> None:
    """Wait for ``event`` like ``wait`` waits for a stream: cuEventQuery polled with a deadline."""
    drv = bindings()
    if timeout_s is None:
        check(call(drv.cuEventSynchronize, event, what="cuEventSynchronize"), f"{what} (cuEventSynchronize)")
        return
    _poll(drv.cuEventQuery, "cuEventQuery", event, what, timeout_s, f"not done after {timeout_s:.0f} s (watchdog)", 0.05)


def launch(function, grid, block, smem_bytes: int, cluster: tuple[int, int, int],
           args: list, cooperative: bool = False, what: str = "kernel", timeout_s: float | None = None) -> str:
    """Launch ``function`` with ``args`` (ctypes objects) and wait for it to finish
    (with a watchdog when ``timeout_s`` is given); returns enqueue_launch's note or ""."""
    set_function_attributes(function, smem_bytes, cluster)
    params = KernelParams(args)
    note = enqueue_launch(function, grid, block, smem_bytes, cluster, cooperative, params, what)
    wait(f"{what} execution", timeout_s)
    return note
