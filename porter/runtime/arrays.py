"""What the host side needs to know about an array: pointer, shape, strides, dtype, device.

``tensor_info(obj)`` reads numpy arrays (host; ml_dtypes bfloat16 / float8 included),
``__cuda_array_interface__`` objects (device: CuPy, Numba, PyTorch) and ``__dlpack__``
producers (device or host: PyTorch, JAX, CuPy; the DLPack capsule is read with ctypes
so nothing but the standard library is needed). It never touches the memory, so all
of this runs without a GPU.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from porter.errors import PorterError

# DLPack (dlpack.h, v1.1) data type codes and the dtype names porter uses for them.
_DL_NAMES = {
    (0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64",
    (1, 8): "uint8", (1, 16): "uint16", (1, 32): "uint32", (1, 64): "uint64",
    (2, 16): "float16", (2, 32): "float32", (2, 64): "float64",
    (4, 16): "bfloat16",
    (10, 8): "float8_e4m3fn", (12, 8): "float8_e5m2", (14, 8): "float8_e8m0fnu",
    (15, 6): "float6_e2m3fn", (16, 6): "float6_e3m2fn", (17, 4): "float4_e2m1fn",
}
_DL_CPU, _DL_CUDA, _DL_CUDA_HOST, _DL_CUDA_MANAGED = 1, 2, 3, 13
# __cuda_array_interface__ typestr -> dtype name (CAI has no bfloat16 / fp8 spelling).
_TYPESTR = {"|u1": "uint8", "|i1": "int8", "<f2": "float16", "<f4": "float32", "<f8": "float64",
            "<i4": "int32", "<u4": "uint32", "<i8": "int64", "<u2": "uint16", "<i2": "int16"}


@dataclass(frozen=True)
class TensorInfo:
    ptr: int                       # address of element [0, 0, ...]
    shape: tuple[int, ...]
    strides: tuple[int, ...]       # in bytes
    dtype: str                     # numpy / ml_dtypes name: bfloat16, float8_e4m3fn, uint8, ...
    itemsize: int                  # bytes per element (packed fp4 arrives as uint8)
    device: str                    # "cpu" or "cuda"
    device_id: int = 0
    keepalive: Any = field(default=None, repr=False, compare=False)

    @property
    def c_contiguous(self) -> bool:
        expected = self.itemsize
        for size, stride in zip(reversed(self.shape), reversed(self.strides)):
            if size > 1 and stride != expected:
                return False
            expected *= size
        return True

    @property
    def nbytes(self) -> int:
        n = self.itemsize
        for s in self.shape:
            n *= s
        return n


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", _DLDevice), ("ndim", ctypes.c_int32),
                ("dtype", _DLDataType), ("shape", ctypes.POINTER(ctypes.c_int64)),
                ("strides", ctypes.POINTER(ctypes.c_int64)), ("byte_offset", ctypes.c_uint64)]


def _from_numpy(arr: np.ndarray, what: str) -> TensorInfo:
    return TensorInfo(ptr=int(arr.ctypes.data), shape=tuple(arr.shape), strides=tuple(arr.strides),
                      dtype=arr.dtype.name, itemsize=arr.dtype.itemsize, device="cpu", keepalive=arr)


def _from_cai(obj, what: str) -> TensorInfo:
    cai = obj.__cuda_array_interface__
    typestr = cai["typestr"]
    if typestr not in _TYPESTR:
        raise PorterError(f"{what}: __cuda_array_interface__ dtype {typestr!r} is not one porter reads; "
                          "pass the array through DLPack (torch tensors, cupy arrays) instead")
    itemsize = int(typestr[2:])
    shape = tuple(int(s) for s in cai["shape"])
    strides = cai.get("strides")
    if strides is None:  # C-contiguous
        strides, acc = [], itemsize
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    return TensorInfo(ptr=int(cai["data"][0]), shape=shape, strides=tuple(int(s) for s in strides),
                      dtype=_TYPESTR[typestr], itemsize=itemsize, device="cuda", keepalive=obj)


def _capsule_pointer(capsule, name: bytes) -> int:
    get = ctypes.pythonapi.PyCapsule_GetPointer
    get.restype, get.argtypes = ctypes.c_void_p, [ctypes.py_object, ctypes.c_char_p]
    return get(capsule, name)


def _from_dlpack(obj, what: str) -> TensorInfo:
    try:
        capsule = obj.__dlpack__()
    except (BufferError, TypeError, RuntimeError) as exc:
        raise PorterError(f"{what}: cannot export through DLPack ({exc})") from None
    # The capsule owns the producer's DLManagedTensor (DLTensor is its first member) and
    # frees it when garbage-collected; TensorInfo.keepalive holds it while in use.
    t = _DLTensor.from_address(_capsule_pointer(capsule, b"dltensor"))
    code, bits, lanes = t.dtype.code, t.dtype.bits, t.dtype.lanes
    if lanes != 1 or (code, bits) not in _DL_NAMES:
        raise PorterError(f"{what}: DLPack dtype code {code}, {bits} bits x {lanes} lanes is not one porter reads")
    itemsize = max(bits // 8, 1)
    shape = tuple(t.shape[i] for i in range(t.ndim))
    if t.strides:
        strides = tuple(t.strides[i] * itemsize for i in range(t.ndim))   # DLPack strides count elements
    else:
        strides, acc = [], itemsize
        for s in reversed(shape):
            strides.append(acc)
            acc *= s
        strides = tuple(reversed(strides))
    dev = t.device.device_type
    if dev in (_DL_CUDA, _DL_CUDA_MANAGED):
        device = "cuda"
    elif dev in (_DL_CPU, _DL_CUDA_HOST):
        device = "cpu"
    else:
        raise PorterError(f"{what}: DLPack device type {dev} is neither CPU nor CUDA")
    return TensorInfo(ptr=(t.data or 0) + t.byte_offset, shape=shape, strides=strides,
                      dtype=_DL_NAMES[(code, bits)], itemsize=itemsize, device=device,
                      device_id=t.device.device_id, keepalive=(obj, capsule))


def tensor_info(obj, what: str = "array") -> TensorInfo:
    """Describe ``obj`` (numpy, CUDA array interface or DLPack); ``what`` names it in errors."""
    if isinstance(obj, TensorInfo):
        return obj
    if isinstance(obj, np.ndarray):
        return _from_numpy(obj, what)
    if hasattr(obj, "__cuda_array_interface__"):
        # torch refuses CAI for bfloat16 and CAI cannot spell fp8: DLPack can.
        try:
            return _from_cai(obj, what)
        except PorterError:
            if not hasattr(obj, "__dlpack__"):
                raise
        except (AttributeError, TypeError, KeyError) as exc:
            if not hasattr(obj, "__dlpack__"):
                raise PorterError(f"{what}: unreadable __cuda_array_interface__ ({exc})") from None
    if hasattr(obj, "__dlpack__"):
        return _from_dlpack(obj, what)
    if hasattr(obj, "__array_interface__") or isinstance(obj, (list, tuple)):
        return _from_numpy(np.asarray(obj), what)
    raise PorterError(f"{what}: {type(obj).__name__} is not an array porter can read "
                      "(numpy, __cuda_array_interface__ or __dlpack__)")
