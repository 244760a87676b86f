"""The device seam: what porter's host code needs from something that runs kernels.

Validation (``porter.runtime.device_runs``) talks to a ``Device``, never to the CUDA
driver directly, so the same host code (inputs, poisoning, tensor maps, argument
lists, read-back, judging) runs on a GPU (``CudaDevice``, through cuda.bindings) or on
porter's PTX simulator (``porter.runtime.emulated``, "emulated"). Benchmarks stay CUDA-only.

The interface (keep it this small; an implementation needs exactly these):

``kind: str``
    ``"cuda"`` or ``"emu"``: what the results may claim (device-validated vs emulated).
``name: str``
    the device in words ("NVIDIA H200", "porter PTX emulator (sm_90a)").
``sm_count: int``
    streaming multiprocessors (persistent kernels need one per CTA).
``alloc(nbytes) -> Buffer``
    device memory; a ``Buffer`` has ``.ptr`` (int device address, 16-byte aligned or
    better) and ``.nbytes``; it lives as long as the Python object.
``upload(arr: np.ndarray) -> Buffer``
    a new buffer holding ``arr``'s bytes (C order).
``download(buf, shape, dtype) -> np.ndarray``
    a new host array of ``shape`` / ``dtype`` from the start of ``buf``.
``memset(buf, byte, nbytes=None, offset=0)``
    fill ``nbytes`` (default: the rest of the buffer) from ``offset`` with ``byte``;
    finished when it returns.
``load(spec, arch) -> function``
    the kernel ``spec.entry`` of the porter KernelSpec ``spec`` built for ``arch``; the
    handle is opaque to callers except ``.name`` (the kernel's name, for messages).
``encode_tensor_map(params: TensorMapParams, address: int) -> bytes``
    the 128-byte CUtensorMap for the tensor at ``address`` (``params.check(address)``
    first; the CUDA device asks the driver, the emulated one encodes it itself).
``launch(function, grid, block, smem_bytes, cluster, args, cooperative=False)``
    run the kernel to completion. ``grid`` and ``block`` are ints (x only) or up to
    3-tuples; ``cluster`` a 3-tuple (``(1, 1, 1)``: no cluster); ``args`` a list of
    ``(ctype, value)`` pairs in the kernel's parameter order, as in ``plan.params`` /
    ``spec.config["params"]``: ctype ``"TmaDescriptor"`` with 128 bytes, ``"...*"``
    (``"bf16*"``, ``"float*"``, ``"int*"``, ...) with an int device address, ``"int"``
    with an int, ``"float"`` with a float. On failure it raises a PorterError naming
    the kernel: ``KernelFault`` when the device is lost for this process (a sticky
    error: illegal address, trap), ``KernelHang`` when it did not finish (a watchdog
    deadline on a GPU, a deadlock in the emulator), plain PorterError otherwise.

``KernelFault`` and ``KernelHang`` are importable from here; ``check_args(name, args)``
applies the argument rules above (an implementation may call it first). Optional, read
with ``getattr``: ``load_notes`` (list of str) and ``on_note`` (a callable) for things a
run must report, ``rehearsal = True`` for a device whose results claim no level.

``get_device(kind)`` picks one: ``"cuda"`` (the default), ``"emu"``
(``porter.runtime.emulated.EmuDevice()``, constructed without arguments), or
``"module:callable"`` (a factory, e.g. ``porter.runtime.fakedriver:rehearsal_device``).
``PORTER_DEVICE`` in the environment sets the default; one instance per kind is kept.
"""

from __future__ import annotations

import os
from typing import Any, Protocol, runtime_checkable

import numpy as np

from porter.errors import PorterError
from porter.runtime.driver import KernelFault, KernelHang  # noqa: F401  (part of the interface)
from porter.runtime.tensormap import TensorMapParams

DEVICE_ENV = "PORTER_DEVICE"
# Per-launch watchdog on a GPU: the largest validation launch takes milliseconds, a
# persistent kernel waiting on a counter that never arrives takes forever.
LAUNCH_TIMEOUT_S = 20.0


@runtime_checkable
class Buffer(Protocol):
    ptr: int
    nbytes: int


@runtime_checkable
class Device(Protocol):
    kind: str
    name: str
    sm_count: int

    def alloc(self, nbytes: int) -> Buffer: ...

    def upload(self, arr: np.ndarray) -> Buffer: ...

    def download(self, buf: Buffer, shape, dtype) -> np.ndarray: ...

    def memset(self, buf: Buffer, byte: int, nbytes: int | None = None, offset: int = 0) -> None: ...

    def load(self, spec, arch) -> Any: ...

    def encode_tensor_map(self, params: TensorMapParams, address: int) -> bytes: ...

    def launch(self, function, grid, block, smem_bytes: int, cluster, args: list,
               cooperative: bool = False) -> None: ...


def check_args(name: str, args: list) -> None:
    """Reject an argument list a launch cannot pass (shared by every device)."""
    for i, pair in enumerate(args):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and isinstance(pair[0], str)):
            raise PorterError(f"{name}: kernel argument {i} must be a (ctype, value) pair, got {pair!r}")
        ctype, value = pair
        if ctype == "TmaDescriptor":
            if not isinstance(value, (bytes, bytearray)) or len(value) != 128:
                raise PorterError(f"{name}: argument {i} (TmaDescriptor) must be the 128 bytes of a CUtensorMap")
        elif ctype.endswith("*") or ctype == "int":
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
                raise PorterError(f"{name}: argument {i} ({ctype}) must be an int, got {type(value).__name__}")
        elif ctype == "float":
            if not isinstance(value, (int, float, np.floating, np.integer)):
                raise PorterError(f"{name}: argument {i} (float) must be a number, got {type(value).__name__}")
        else:
            raise PorterError(f"{name}: kernel parameter type {ctype!r} is not one porter launches")


class CudaFunction:
    """A kernel loaded into the CUDA context: the driver handle plus where it came from."""

    def __init__(self, handle, name: str, entry: str, source: str):
        self.handle, self.name, self.entry, self.source = handle, name, entry, source
        self.attributes: dict = {}

    def __repr__(self) -> str:
        return f"CudaFunction({self.name}, {self.source})"


class CudaDevice:
    """Device 0 through porter.runtime.driver (cuda.bindings). Launches run on the
    legacy default stream and are waited for by polling with a deadline
    (``launch_timeout_s``), so a hang becomes KernelHang instead of a stuck process."""

    kind = "cuda"

    def __init__(self, ordinal: int = 0, launch_timeout_s: float = LAUNCH_TIMEOUT_S):
        self.ordinal, self.launch_timeout_s = ordinal, launch_timeout_s
        self._functions: dict[str, CudaFunction] = {}
        self.load_notes: list[str] = []     # why a cubin was refused, a launch retried: for the run's report
        self.on_note = None

    @property
    def info(self):
        from porter.runtime import driver

        return driver.device(self.ordinal)

    @property
    def name(self) -> str:
        return self.info.name

    @property
    def sm_count(self) -> int:
        return self.info.sm_count

    def alloc(self, nbytes: int):
        from porter.runtime import driver

        driver.context(self.ordinal)
        return driver.DeviceBuffer(nbytes)

    def upload(self, arr: np.ndarray):
        host = np.ascontiguousarray(arr)
        buf = self.alloc(host.nbytes)
        buf.copy_from_host(host.ctypes.data, host.nbytes)
        return buf

    def download(self, buf, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if out.nbytes > buf.nbytes:
            raise PorterError(f"download of {out.nbytes} B from a {buf.nbytes} B buffer")
        buf.copy_to_host(out.ctypes.data, out.nbytes)
        return out

    def memset(self, buf, byte: int, nbytes: int | None = None, offset: int = 0) -> None:
        buf.memset(byte, nbytes, offset)

    def load(self, spec, arch) -> CudaFunction:
        """The kernel from the prepared cubins when ``PORTER_CUBIN_DIR`` names them (the
        first one the driver accepts: the primary set, then the fallback set built with
        an older toolchain), else built here (needs NVRTC and nvdisasm)."""
        from porter.runtime import cubins, driver

        key = f"{arch.name}/{spec.name}"
        if key in self._functions:
            return self._functions[key]
        refused = []
        for label, cubin in cubins.candidates(spec, arch):
            try:
                handle = driver.load_function(cubin, spec.entry)
            except KernelFault:
                raise
            except PorterError as exc:
                refused.append(f"{label}: {exc}")
                continue
            if refused:
                self.note(f"{spec.name}: " + "; ".join(refused) + f"; loaded {label}")
            fn = CudaFunction(handle, spec.name, spec.entry, label)
            self._functions[key] = fn
            return fn
        raise PorterError(f"{spec.name}: the driver refused every cubin: " + "; ".join(refused))

    def encode_tensor_map(self, params: TensorMapParams, address: int) -> bytes:
        return params.encode(address)

    def launch(self, function, grid, block, smem_bytes: int, cluster, args: list,
               cooperative: bool = False) -> None:
        from porter.runtime import driver

        name = getattr(function, "name", "kernel")
        check_args(name, args)
        packed = [driver.pack_arg(ctype, value) for ctype, value in args]
        handle = getattr(function, "handle", function)
        try:
            note = driver.launch(handle, grid, block, smem_bytes, cluster, packed, cooperative,
                                 what=name, timeout_s=self.launch_timeout_s)
        except (KernelFault, KernelHang):
            raise
        except PorterError as exc:
            if str(exc).startswith(name):
                raise
            raise PorterError(f"{name}: {exc}") from None
        if note:
            self.note(note)

    def note(self, text: str) -> None:
        """Something the run must report (a refused cubin, a launch retried): kept, and
        passed to ``on_note`` when set (the device check streams it)."""
        if text not in self.load_notes:
            self.load_notes.append(text)
            if self.on_note is not None:
                self.on_note(text)

    def synchronize(self, what: str = "device") -> None:
        from porter.runtime import driver

        driver.wait(what, self.launch_timeout_s)


_DEFAULT: dict[str, Any] = {}


def get_device(kind: str | None = None):
    """A device by kind: "cuda", "emu" or "module:callable" (default: $PORTER_DEVICE, else
    cuda). One instance per kind is kept for the process (loaded kernels are reused)."""
    kind = kind or os.environ.get(DEVICE_ENV) or "cuda"
    if kind in _DEFAULT:
        return _DEFAULT[kind]
    if kind == "cuda":
        dev = CudaDevice()
    elif kind == "emu":
        try:
            from porter.runtime.emulated import EmuDevice
        except ImportError as exc:
            raise PorterError(f"{DEVICE_ENV}=emu: porter's emulated device is not available ({exc})") from None
        dev = EmuDevice()
    elif ":" in kind:
        import importlib

        module, _, attr = kind.partition(":")
        try:
            factory = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as exc:
            raise PorterError(f"{DEVICE_ENV}={kind}: cannot import the device factory ({exc})") from None
        dev = factory()
    else:
        raise PorterError(f"{DEVICE_ENV}={kind}: a device is cuda, emu or module:callable")
    _DEFAULT[kind] = dev
    return dev
