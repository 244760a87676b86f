"""A rehearsal GPU behind the real cuda.bindings argument conversion.

``CheckedDriver`` stands in for ``cuda.bindings.driver`` in ``porter.runtime.driver``:
its types and enums are the real ones, and every function porter calls is first called
on the **real binding with exactly porter's arguments**. On a machine without the NVIDIA
driver the binding converts every argument and only then fails to find libcuda
(``DynamicLibNotFoundError``, ARCH_FACTS "Host side"), so a wrong argument type raises
the binding's own TypeError here, as it would on a GPU. Only after that does
``FakeGPU`` (host memory, Python kernels) serve the call, returning real binding types
(CUmodule, CUfunction, CUevent, CUtensorMap, CUresult) so the next call converts them
as the driver would.

``FakeGPU`` models what a first GPU run can meet: launches the driver refuses (dynamic
shared memory past 48 KiB without the attribute or past the opt-in limit, a grid that is
not whole clusters, a cooperative grid larger than the SMs), a sticky fault (every later
call returns the same error, as a lost context does), a hang (the stream never drains:
cuStreamQuery says NOT_READY, a blocking synchronize blocks), and GEMM / attention
kernels that compute their outputs from the tensor maps and pointers they are given.
Each kernel's behaviour comes from ``PORTER_REHEARSAL`` ("name=MODE" or "name=MODE@N",
comma-separated; default pass; ``@N``: from the kernel's N-th launch on, earlier ones
pass): ``fail`` computes a wrong result (x1.1), ``skip`` writes nothing, ``fault`` ends in a sticky illegal
address, ``hang`` never finishes, ``block`` blocks the host inside the launch call (a
driver call that never returns), ``crash`` kills the process (SIGSEGV), ``bug`` raises
a Python exception (a porter bug, as the child must report it).

Two more things a first visit meets are modelled as the driver does them: ``cuMemFree``
while a kernel hangs blocks (it synchronises on the hung kernel), and module loading
follows ``CUDA_MODULE_LOADING`` read at ``cuInit``: EAGER refuses a bad image in
``cuModuleLoadData``, anything else (the driver's default, lazy) accepts it and refuses
``cuFuncLoad`` or, without that call, the first launch of its kernel. Non-ELF images are
refused; ``PORTER_REHEARSAL_REFUSE`` ("name,name") also refuses the primary cubin of each named
kernel of the prepared manifest (as a driver older than the NVRTC that built it would),
so its fallback cubin (nvcc <= 13.0) is the one used.

It refuses to start where a driver is installed: there the real calls would run.
``rehearsal_device()`` installs it and returns a CudaDevice on top (the
``PORTER_DEVICE=porter.runtime.fakedriver:rehearsal_device`` factory).
"""

from __future__ import annotations

import ctypes
import os
import time

import numpy as np

from porter.errors import PorterError

REHEARSAL_ENV = "PORTER_REHEARSAL"
TIMEOUT_ENV = "PORTER_LAUNCH_TIMEOUT_S"
ARCH_ENV = "PORTER_REHEARSAL_ARCH"
REFUSE_ENV = "PORTER_REHEARSAL_REFUSE"
DEVICE_NAME = "NVIDIA H200 (rehearsal: porter.runtime.fakedriver)"
SMEM_OPTIN = 232448
DEFAULT_SMEM = 48 * 1024
SM_COUNT = 132
# modelled device rate for event timings (deterministic, round), and a launch's floor:
# large enough that a time-based warm-up takes few (host-computed) launches
MODEL_FLOPS_PER_S = 500e12
MODEL_MIN_LAUNCH_MS = 2.0

_ELEM_BYTES = {"UINT8": 1, "UINT16": 2, "UINT32": 4, "INT32": 4, "UINT64": 8, "INT64": 8,
               "FLOAT16": 2, "FLOAT32": 4, "FLOAT64": 8, "BFLOAT16": 2}


def _is_missing_driver(exc: BaseException) -> bool:
    from porter.runtime.driver import missing_driver

    return missing_driver(exc)


class CheckedDriver:
    """The real binding's types; its functions called for argument conversion first."""

    def __init__(self, gpu: "FakeGPU"):
        from cuda.bindings import driver as real

        self._real, self._gpu, self.calls = real, gpu, {}
        try:
            real.cuInit(0)
        except Exception as exc:  # noqa: BLE001
            if not _is_missing_driver(exc):
                raise
        else:
            raise PorterError("the rehearsal driver needs a machine without the NVIDIA driver "
                              "(here the real calls would run); rehearse elsewhere")

    def __getattr__(self, name):
        real = getattr(self._real, name)
        if isinstance(real, type) or not callable(real):
            return real
        impl = getattr(self._gpu, name, None)
        if impl is None:
            raise AttributeError(f"the rehearsal GPU does not model {name}; add it to FakeGPU")

        def checked(*args):
            try:
                real(*args)            # converts porter's arguments, then misses libcuda
            except Exception as exc:  # noqa: BLE001 - only the missing library means "converted"
                if not _is_missing_driver(exc):
                    raise
            self.calls[name] = self.calls.get(name, 0) + 1
            return impl(*args)

        checked.__name__ = name
        return checked


MODES = ("pass", "fail", "skip", "fault", "hang", "block", "crash", "bug")


def _behaviours() -> dict[str, str]:
    out = {}
    for item in filter(None, (os.environ.get(REHEARSAL_ENV) or "").split(",")):
        name, _, mode = item.partition("=")
        base, _, start = mode.partition("@")
        if base not in MODES or (start and not start.isdigit()):
            raise PorterError(f"{REHEARSAL_ENV}: {item!r}: a behaviour is {', '.join(MODES)}, optionally @N")
        out[name.strip()] = mode
    return out


def _view(addr: int, shape, dtype) -> np.ndarray:
    dtype = np.dtype(dtype)
    n = int(np.prod(shape)) * dtype.itemsize
    return np.ctypeslib.as_array((ctypes.c_uint8 * max(n, 1)).from_address(addr))[:n].view(dtype).reshape(shape)


class FakeGPU:
    """Host memory as device memory, Python functions as kernels; see the module doc."""

    def __init__(self, arch_name: str | None = None):
        from cuda.bindings import driver as real

        self.d = real
        self.arch_name = arch_name or os.environ.get(ARCH_ENV) or "hopper"
        self.behaviours = _behaviours()
        self.mem: dict[int, np.ndarray] = {}
        self.sticky = None               # a CUresult every call returns once a kernel faulted
        self.hung = False
        self.clock_ms = 0.0
        self.events: dict[int, float] = {}
        self.functions: dict[int, tuple] = {}   # handle -> (spec, entry)
        self.smem_optin: dict[int, int] = {}
        self.launches: list[str] = []
        # PORTER_REHEARSAL_CLUSTER=refuse: refuse the cluster launch attribute (compile-time clusters)
        self.refuse_cluster_attribute = os.environ.get("PORTER_REHEARSAL_CLUSTER") == "refuse"
        self.eager = False               # CUDA_MODULE_LOADING at cuInit
        self.refuse = {n.strip() for n in (os.environ.get(REFUSE_ENV) or "").split(",") if n.strip()}
        self.bad_modules: dict[int, str] = {}   # lazily loaded modules whose image the driver refuses
        self.module_of: dict[int, int] = {}     # function handle -> module handle
        self._next = 1
        self._specs = None

    # -- helpers --------------------------------------------------------------------

    def _ok(self, *values):
        return (self.d.CUresult.CUDA_SUCCESS, *values)

    def _err(self, name: str, *values):
        return (getattr(self.d.CUresult, name), *values)

    def _gate(self):
        return (self.sticky,) if self.sticky is not None else None

    def _id(self) -> int:
        self._next += 1
        return self._next

    def _spec_for(self, entry: str):
        prepared = self._prepared_spec(entry)
        if prepared is not None:
            return prepared
        if self._specs is None:
            from porter import kernels
            from porter.descriptor.arch import load_arch
            from porter.kernels.base import Unsupported

            arch = load_arch(self.arch_name)
            self._specs = {s.entry: s for f in kernels.FAMILIES for s in kernels.family_module(f).variants(arch)
                           if not isinstance(s, Unsupported)}
        return self._specs.get(entry)

    def _prepared_spec(self, entry: str):
        """The spec from the prepared manifest (what a device run loads), without rendering."""
        from porter.runtime import cubins

        folder = os.environ.get(cubins.CUBIN_DIR_ENV)
        if not folder:
            return None
        try:
            manifest = cubins.read_manifest(folder)
        except PorterError:
            return None
        from porter.pipeline.work import spec_from_dict

        for e in (manifest.get("kernels") or {}).values():
            if e.get("spec", {}).get("entry") == entry:
                return spec_from_dict(e["spec"])
        return None

    # -- init, device, context ------------------------------------------------------

    def cuInit(self, flags):
        # the driver reads CUDA_MODULE_LOADING once, at initialisation (default: lazy)
        self.eager = (os.environ.get("CUDA_MODULE_LOADING") or "LAZY").upper() == "EAGER"
        return self._ok()

    def cuDriverGetVersion(self):
        return self._ok(13000)

    def cuDeviceGetCount(self):
        return self._ok(1)

    def cuDeviceGet(self, ordinal):
        return self._ok(self.d.CUdevice(int(ordinal)))

    def cuDeviceGetName(self, n, dev):
        return self._ok(DEVICE_NAME.encode().ljust(int(n), b"\0"))

    def cuDeviceGetAttribute(self, attr, dev):
        a = self.d.CUdevice_attribute
        values = {a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: 9, a.CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: 0,
                  a.CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: SM_COUNT,
                  a.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: SMEM_OPTIN,
                  a.CU_DEVICE_ATTRIBUTE_CLOCK_RATE: 1980000, a.CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: 2619000,
                  a.CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE: 50 << 20}
        return self._ok(values.get(attr, 0))

    def cuDevicePrimaryCtxRetain(self, dev):
        return self._ok(self.d.CUcontext(self._id()))

    def cuCtxSetCurrent(self, ctx):
        return self._ok()

    def cuGetErrorName(self, err):
        return self._ok(self.d.CUresult(err).name.encode())

    def cuGetErrorString(self, err):
        return self._ok(b"rehearsal error " + self.d.CUresult(err).name.encode())

    # -- memory ---------------------------------------------------------------------

    def cuMemAlloc(self, n):
        if self._gate():
            return (self.sticky, self.d.CUdeviceptr(0))
        raw = np.zeros(int(n) + 256, dtype=np.uint8)
        addr = (raw.ctypes.data + 255) // 256 * 256
        self.mem[addr] = raw
        return self._ok(self.d.CUdeviceptr(addr))

    def cuMemFree(self, ptr):
        if self.hung:            # cuMemFree synchronises: on a hung kernel, forever
            self._block()
        if self._gate():
            return self._gate()
        self.mem.pop(int(ptr), None)
        return self._ok()

    def _copy(self, dst, src, n):
        if self._gate():
            return self._gate()
        ctypes.memmove(int(dst), int(src), int(n))
        return self._ok()

    def cuMemcpyHtoD(self, dst, src, n):
        return self._copy(dst, src, n)

    def cuMemcpyDtoH(self, dst, src, n):
        if self.hung:            # a synchronous copy waits for the stream: forever
            self._block()
        return self._copy(dst, src, n)

    def cuMemcpyDtoDAsync(self, dst, src, n, stream):
        return self._copy(dst, src, n)

    def cuMemsetD8(self, ptr, value, n):
        if self._gate():
            return self._gate()
        ctypes.memset(int(ptr), int(value), int(n))
        return self._ok()

    def cuMemsetD8Async(self, ptr, value, n, stream):
        return self.cuMemsetD8(ptr, value, n)

    def cuMemsetD32Async(self, ptr, value, n, stream):
        if self._gate():
            return self._gate()
        _view(int(ptr), (int(n),), np.uint32)[:] = int(value)
        return self._ok()

    # -- modules and functions --------------------------------------------------------

    def cuModuleLoadData(self, image):
        if self._gate():
            return (self.sticky, self.d.CUmodule(0))
        data = bytes(image) if not isinstance(image, int) else b""
        why = self._refusal(data)
        if why and self.eager:
            return self._err(why, self.d.CUmodule(0))
        handle = self._id()
        if why:
            self.bad_modules[handle] = why      # lazy loading: refused at the first launch
        return self._ok(self.d.CUmodule(handle))

    def _refusal(self, data: bytes) -> str:
        """The CUresult name this driver refuses ``data`` with, or ""."""
        if not data.startswith(b"\x7fELF"):
            return "CUDA_ERROR_INVALID_IMAGE"
        if self.refuse:
            import hashlib

            from porter.runtime import cubins

            digest = hashlib.sha256(data).hexdigest()
            folder = os.environ.get(cubins.CUBIN_DIR_ENV)
            try:
                kernels = cubins.read_manifest(folder).get("kernels", {}) if folder else {}
            except PorterError:
                kernels = {}
            for key, e in kernels.items():
                name = key.split("/", 1)[1]
                if name in self.refuse and e.get("cubin_sha256") == digest:
                    return "CUDA_ERROR_INVALID_IMAGE"
        return ""

    def cuModuleGetFunction(self, module, name):
        entry = name.decode() if isinstance(name, bytes) else str(name)
        spec = self._spec_for(entry)
        if spec is None:
            return self._err("CUDA_ERROR_NOT_FOUND", self.d.CUfunction(0))
        handle = self._id()
        self.functions[handle] = (spec, entry)
        self.module_of[handle] = int(module)
        return self._ok(self.d.CUfunction(handle))

    def cuFuncLoad(self, fn):
        refused = self.bad_modules.get(self.module_of.get(int(fn), -1))
        return self._err(refused) if refused else self._ok()

    def cuFuncSetAttribute(self, fn, attr, value):
        if attr == self.d.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
            if int(value) > SMEM_OPTIN:
                return self._err("CUDA_ERROR_INVALID_VALUE")
            self.smem_optin[int(fn)] = int(value)
        return self._ok()

    def cuFuncGetAttribute(self, attr, fn):
        a = self.d.CUfunction_attribute
        spec = self.functions.get(int(fn), (None,))[0]
        values = {a.CU_FUNC_ATTRIBUTE_NUM_REGS: 168, a.CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES: 1024,
                  a.CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: spec.threads if spec else 1024,
                  a.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: self.smem_optin.get(int(fn), DEFAULT_SMEM),
                  a.CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES: 0}
        return self._ok(values.get(attr, 0))

    # -- tensor maps ------------------------------------------------------------------

    def cuTensorMapEncodeTiled(self, dtype, rank, addr, dims, strides, box, estrides, *modes):
        """Our own 128 bytes: address, element bytes, rank, dims, strides (the fake kernels read them)."""
        name = self.d.CUtensorMapDataType(dtype).name.replace("CU_TENSOR_MAP_DATA_TYPE_", "")
        dims, strides, box = [int(x) for x in dims], [int(x) for x in strides], [int(x) for x in box]
        if int(addr) % 16 or any(s % 16 for s in strides) or any(not 0 < b <= 256 for b in box) \
                or len(dims) != int(rank):
            return self._err("CUDA_ERROR_INVALID_VALUE", self.d.CUtensorMap())
        tmap = self.d.CUtensorMap()
        words = (ctypes.c_uint64 * 16).from_address(tmap.getPtr())
        for i, v in enumerate([int(addr), _ELEM_BYTES.get(name, 1), int(rank), *dims, *strides][:16]):
            words[i] = v
        return self._ok(tmap)

    # -- launches, streams, events ----------------------------------------------------

    def cuLaunchKernelEx(self, config, fn, params, extra):
        if self._gate():
            return self._gate()
        spec, entry = self.functions.get(int(fn), (None, None))
        if spec is None:
            return self._err("CUDA_ERROR_INVALID_HANDLE")
        refused = self.bad_modules.get(self.module_of.get(int(fn), -1))
        if refused:
            return self._err(refused)
        grid = (config.gridDimX, config.gridDimY, config.gridDimZ)
        smem = int(config.sharedMemBytes)
        if smem > self.smem_optin.get(int(fn), DEFAULT_SMEM) or config.blockDimX * config.blockDimY * config.blockDimZ > 1024:
            return self._err("CUDA_ERROR_INVALID_VALUE")
        cluster, cooperative = (1, 1, 1), False
        ids = self.d.CUlaunchAttributeID
        for attr in list(config.attrs)[:config.numAttrs]:
            if attr.id == ids.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION:
                cluster = (attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z)
            elif attr.id == ids.CU_LAUNCH_ATTRIBUTE_COOPERATIVE:
                cooperative = bool(attr.value.cooperative)
        if any(g % c for g, c in zip(grid, cluster)):
            return self._err("CUDA_ERROR_INVALID_CLUSTER_SIZE")
        if self.refuse_cluster_attribute and cluster != (1, 1, 1):
            # as a driver may for a kernel whose __cluster_dims__ fixes the cluster
            return self._err("CUDA_ERROR_INVALID_VALUE")
        if cooperative and grid[0] * grid[1] * grid[2] > SM_COUNT:
            return self._err("CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE")
        names = spec.config.get("params")
        if names is None and spec.family == "megakernel":
            from porter.kernels import megakernel

            names = megakernel.PARAMS
        values = self._read_params(int(params), [tuple(p) for p in names])
        self.launches.append(spec.name)
        self.last = {"kernel": spec.name, "grid": grid, "cluster": cluster, "cooperative": cooperative,
                     "smem_bytes": smem, "values": values}
        mode, _, start = self.behaviours.get(spec.name, "pass").partition("@")
        if start and self.launches.count(spec.name) < int(start):
            mode = "pass"
        if mode == "block":
            self._block()
        if mode == "crash":
            import signal

            os.kill(os.getpid(), signal.SIGSEGV)
        if mode == "bug":
            raise ZeroDivisionError("a planted bug in the rehearsal kernel")
        if mode == "fault":
            self.sticky = self.d.CUresult.CUDA_ERROR_ILLEGAL_ADDRESS
            return self._ok()              # launch errors of a running kernel show at the next sync
        if mode == "hang":
            self.hung = True
            return self._ok()
        kernel = _idle if mode == "skip" else _KERNELS.get(spec.family, _idle)
        values["_grid"] = grid
        try:
            flops = kernel(spec, values, 1.1 if mode == "fail" else 1.0)
        except _Deadlock:
            self.hung = True                # CTAs waiting on each other forever
            return self._ok()
        self.clock_ms += max(flops / MODEL_FLOPS_PER_S * 1e3, MODEL_MIN_LAUNCH_MS)
        return self._ok()

    def _read_params(self, address: int, params: list[tuple[str, str]]) -> dict:
        ptrs = (ctypes.c_void_p * len(params)).from_address(address)
        out = {}
        for (name, ctype), p in zip(params, ptrs):
            if ctype == "TmaDescriptor":
                out[name] = tuple((ctypes.c_uint64 * 16).from_address(p))
            elif ctype.endswith("*"):
                out[name] = ctypes.c_uint64.from_address(p).value
            elif ctype == "int":
                out[name] = ctypes.c_int32.from_address(p).value
            else:
                out[name] = ctypes.c_float.from_address(p).value
        return out

    def _status(self):
        if self.sticky is not None:
            return (self.sticky,)
        if self.hung:
            return self._err("CUDA_ERROR_NOT_READY")
        return self._ok()

    def _block(self):
        while True:               # what a blocking wait on a hung kernel does
            time.sleep(3600)

    def cuStreamQuery(self, stream):
        return self._status()

    def cuEventQuery(self, ev):
        return self._status()

    def cuStreamSynchronize(self, stream):
        if self.hung:
            self._block()
        return self._status()

    def cuCtxSynchronize(self):
        return self.cuStreamSynchronize(None)

    def cuEventCreate(self, flags):
        return self._ok(self.d.CUevent(self._id()))

    def cuEventRecord(self, ev, stream):
        if self._gate():
            return self._gate()
        self.events[int(ev)] = self.clock_ms
        return self._ok()

    def cuEventSynchronize(self, ev):
        return self.cuStreamSynchronize(None)

    def cuEventElapsedTime(self, start, end):
        if self._gate():
            return (self.sticky, 0.0)
        return self._ok(float(self.events[int(end)] - self.events[int(start)]))

    def cuEventDestroy(self, ev):
        self.events.pop(int(ev), None)
        return self._ok()


# ---- the fake kernels: outputs from the arguments a real launch passes -----------------------

def _idle(spec, v, factor) -> float:
    return 0.0


def _gemm(spec, v, factor) -> float:
    import ml_dtypes

    m, n, k = v["m"], v["n"], v["k"]
    fmt = spec.config.get("a_format")
    dt = {"bf16": ml_dtypes.bfloat16, "e4m3": ml_dtypes.float8_e4m3fn}.get(fmt)
    if dt is None or spec.config.get("block_scale"):
        return 0.0                   # a format this rehearsal GPU does not compute: C stays unwritten
    # operands through tensor maps (their global address) or as plain pointers (mma_sync, cp.async)
    a = _view(v["tma_a"][0] if "tma_a" in v else v["a"], (m, k), dt).astype(np.float64)
    b = _view(v["tma_b"][0] if "tma_b" in v else v["b"], (n, k), dt).astype(np.float64)
    c = (a @ b.T) * v["scale_a"] * v["scale_b"] * factor
    _view(v["c"], (m, n), ml_dtypes.bfloat16)[:] = c.astype(np.float32).astype(ml_dtypes.bfloat16)
    return 2.0 * m * n * k


def _attention(spec, v, factor) -> float:
    """Softmax attention in fp32 per (batch, head) with 2-D matmuls (fast on the host), the
    causal mask aligned bottom-right, lse natural-log; rows that see no key: O = 0, lse = -inf."""
    import ml_dtypes

    b, hq, hkv, sq, sk = v["batch"], v["heads_q"], v["heads_kv"], v["seq_q"], v["seq_k"]
    d = spec.config["head_dim"]
    def operand(name):        # a tensor map's global address, or a plain pointer (cp.async mainloops)
        return v[f"tma_{name}"][0] if f"tma_{name}" in v else v[name]

    q = _view(operand("q"), (b, hq, sq, d), ml_dtypes.bfloat16).astype(np.float32)
    k = _view(operand("k"), (b, hkv, sk, d), ml_dtypes.bfloat16).astype(np.float32)
    val = _view(operand("v"), (b, hkv, sk, d), ml_dtypes.bfloat16).astype(np.float32)
    o_out = _view(v["o"], (b, hq, sq, d), ml_dtypes.bfloat16)
    lse_out = _view(v["lse"], (b, hq, sq), np.float32)
    visible = np.arange(sk)[None, :] <= np.arange(sq)[:, None] + (sk - sq) if spec.config["causal"] else None
    scale = np.float32(1.0 / np.sqrt(d))
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            s = (q[bi, h] @ k[bi, kh].T) * scale
            if visible is not None:
                s = np.where(visible, s, -np.inf)
            m = s.max(axis=1, keepdims=True)
            empty = np.isneginf(m)
            m = np.where(empty, 0.0, m)
            p = np.exp(s - m)
            l_sum = p.sum(axis=1, keepdims=True)
            o = np.where(empty, 0.0, (p @ val[bi, kh]) / np.where(empty, 1.0, l_sum))
            o_out[bi, h] = (o * factor).astype(ml_dtypes.bfloat16)
            with np.errstate(divide="ignore"):
                lse_out[bi, h] = np.where(empty, -np.inf, m + np.log(np.where(empty, 1.0, l_sum)))[:, 0]
    return 4.0 * b * hq * sq * sk * d


class _ArenaProgram:
    """What the megakernel VM reads of a program, rebuilt from the kernel's arguments alone
    (the instruction tensor and the tensor table in device memory), as the GPU sees it."""

    def __init__(self, instructions, n_tensors: int):
        import types

        self.instructions = instructions
        self.tensors = [types.SimpleNamespace(id=i, name=f"tensor {i}", kind="device") for i in range(n_tensors)]
        self.counter_names = []
        self.counter_targets = None     # the GPU knows no targets: set to the counters (no final check)


def _megakernel(spec, v, factor) -> float:
    """One decode step: porter's megakernel VM (validation/megakernel_vm.py) executing the
    instruction tensor at ``instructions`` on the tensors the ``tensors`` table points at,
    signalling ``counters``, all in the launch's device memory. A deadlock (a wait that
    can never be met) is a hang, as it would be on the GPU."""
    from porter.megakernel import isa
    from porter.validation.megakernel_vm import MegakernelVM, VMError

    grid, queue_len = v["_grid"][0], v["queue_len"]
    ins = _view(v["instructions"], (grid, queue_len, isa.WORDS), np.int32)
    slots = ins[:, :, isa.W.T0:isa.W.T0 + 7]
    n = int(slots.max()) + 1 if slots.size else 0
    recs = _view(v["tensors"], (n,), isa.TENSOR_DESC)
    dtypes = {int(isa.DType.BF16): "bfloat16", int(isa.DType.FP32): np.float32, int(isa.DType.INT32): np.int32}
    import ml_dtypes

    arrays = []
    for r in recs:
        dt = ml_dtypes.bfloat16 if dtypes[int(r["dtype"])] == "bfloat16" else dtypes[int(r["dtype"])]
        rows, cols = int(r["rows"]), int(r["cols"])
        arrays.append(_view(int(r["ptr"]), (cols,) if rows == 1 else (rows, cols), dt))
    sig = ins[:, :, isa.W.SIGNAL]
    n_counters = max(int(sig.max()) + 1 if sig.size else 0, 1)
    counters = _view(v["counters"], (n_counters,), np.int32)
    vm = MegakernelVM.__new__(MegakernelVM)
    vm.program, vm.cfg, vm.arrays, vm._f32, vm.trace = _ArenaProgram(ins, n), None, arrays, {}, []
    vm.counters = counters.astype(np.int64)
    vm.program.counter_targets = vm.counters
    try:
        vm.run()
    except VMError as exc:
        if "deadlock" in str(exc):
            raise _Deadlock(str(exc)) from None
        raise
    if factor != 1.0:            # "fail": one signal lost (the judged step sees a counter short)
        vm.counters[0] -= 1
    counters[:] = vm.counters.astype(np.int32)
    return 0.0


class _Deadlock(Exception):
    pass


_KERNELS = {"gemm": _gemm, "attention": _attention, "megakernel": _megakernel}


def install(gpu: FakeGPU | None = None) -> CheckedDriver:
    """Make porter.runtime.driver use the rehearsal GPU (for this process)."""
    from porter.runtime import driver

    checked = CheckedDriver(gpu or FakeGPU())
    driver.bindings = lambda: checked
    driver.LOST["why"] = ""
    driver._init.cache_clear()
    driver.context.cache_clear()
    return checked


def rehearsal_device():
    """PORTER_DEVICE factory: a CudaDevice on the rehearsal GPU, with the watchdog from
    PORTER_LAUNCH_TIMEOUT_S (default 2 s: a rehearsal's hang should cost seconds)."""
    from porter.runtime.device import CudaDevice

    install()
    dev = CudaDevice(launch_timeout_s=float(os.environ.get(TIMEOUT_ENV) or 2.0))
    dev.rehearsal = True          # results must not claim a level: no GPU ran anything
    return dev
