"""Harness files for ``porter emu run``: a small Python file that builds a kernel's
arguments and says what the outputs must be.

A harness defines, at module level::

    def arguments(h):            # h: Harness (below)
        a = h.rng.standard_normal((64, 64)).astype(h.bfloat16)
        c = np.zeros((64, 64), np.float32)
        return [h.tensor_map(a, box=(64, 64), swizzle="128B"), c, 64]

    def reference(args):         # the arguments as passed, tensor maps replaced by their arrays
        return {1: args[0].astype(np.float64) @ ...}   # argument index -> expected array

    TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}          # optional (default 1e-3 / 1e-3)
    AXES = {1: ("row", "col")}                         # optional: names for the indices in messages
    LAUNCH = {"entry": "k", "grid": 2, "block": 128}   # optional defaults for the command's flags

``arguments`` returns the kernel's arguments in parameter order: numpy arrays (copied to
the simulated device; the parameter gets the address; the array's contents after the run are
the output), Python or numpy numbers (packed as the parameter's PTX type), and tensor maps
made with ``h.tensor_map(array, box, swizzle)``. ``reference`` is optional (without it the
run only checks that the kernel runs cleanly); each array it returns is compared with the
argument's contents after the run, elementwise ``|got - expected| <= atol + rtol |expected|``.

Both functions run in a child process under a time limit (``run_harness``), so a harness
that raises, returns the wrong types or never returns ends in one line naming the harness
and what it did, and cannot touch the simulator's state.
"""

from __future__ import annotations

import multiprocessing
import os
import traceback
from pathlib import Path

import numpy as np

from porter.emu.launch import TensorMapArg, tensor_map
from porter.emu.launch_struct import StructArg
from porter.errors import PorterError
from porter.runtime.tensormap import TensorMapParams

DEFAULT_TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}
LAUNCH_KEYS = ("entry", "grid", "block", "cluster", "smem", "arch")
# numpy / ml_dtypes dtype name -> CUtensorMapDataType (fp8 and packed formats travel as bytes)
_MAP_TYPES = {"bfloat16": "BFLOAT16", "float16": "FLOAT16", "float32": "FLOAT32", "float64": "FLOAT64",
              "int32": "INT32", "uint32": "UINT32", "int64": "INT64", "uint64": "UINT64", "uint16": "UINT16",
              "uint8": "UINT8", "int8": "UINT8", "float8_e4m3fn": "UINT8", "float8_e5m2": "UINT8"}


class Harness:
    """What ``arguments(h)`` gets: a seeded random generator, bf16/fp8 dtypes, and the
    tensor-map helper."""

    def __init__(self, seed: int = 0):
        import ml_dtypes

        self.seed = seed
        self.rng = np.random.default_rng(seed)
        self.bfloat16 = ml_dtypes.bfloat16
        self.float8_e4m3fn = ml_dtypes.float8_e4m3fn

    @staticmethod
    def tensor_map(array: np.ndarray, box, swizzle: str = "NONE", name: str = "", oob_fill: str = "NONE",
                   dims=None, strides=None, element_strides=None):
        """A tiled TMA tensor map over ``array`` (C order, any rank up to 5), as
        ``cuTensorMapEncodeTiled`` would make it: dims and ``box`` innermost first (``box``
        in elements, e.g. ``(64, 64)`` for 64 rows of 64 elements), ``swizzle`` one of NONE,
        32B, 64B, 128B. The kernel gets the 128-byte map (a ``const CUtensorMap*``
        parameter gets a copy of it in global memory); the array is its global tensor.

        ``dims`` and ``strides`` (bytes, one per dim but the innermost) describe the tensor
        as a host code's own ``cuTensorMapEncodeTiled`` call does, over the array's bytes
        from its start (e.g. a 2-D matrix seen as 3-D ``{8, rows, cols / 8}`` with strides
        ``{row bytes, 16}``); then only the driver's rules apply (strides multiples of 16,
        a box up to 256 per dim, which may exceed the dim: the rest is out of bounds)."""
        if not isinstance(array, np.ndarray):
            raise PorterError(f"h.tensor_map: give a numpy array, got {type(array).__name__}")
        dtype = _MAP_TYPES.get(array.dtype.name)
        if dtype is None:
            raise PorterError(f"h.tensor_map: no tensor-map data type for {array.dtype.name} "
                              f"(use one of {', '.join(sorted(_MAP_TYPES))})")
        array = np.ascontiguousarray(array)
        box = tuple(int(b) for b in box)
        label = name or f"{'x'.join(map(str, array.shape))} {array.dtype.name}"
        if dims is None and strides is None:
            dims = tuple(int(d) for d in reversed(array.shape))
            strides = tuple(int(s) for s in reversed(array.strides[:-1]))
            params = TensorMapParams(label, dtype, dims, strides, box, swizzle, oob_fill=oob_fill,
                                     element_strides=tuple(element_strides or ()))
            try:
                params.check()
            except PorterError as exc:
                raise PorterError(_map_message(params.name, exc)) from None
            return tensor_map(params, array)
        if dims is None or strides is None:
            raise PorterError(f"h.tensor_map {label}: give both dims and strides (bytes), or neither")
        dims, strides = tuple(int(d) for d in dims), tuple(int(s) for s in strides)
        params = TensorMapParams(label, dtype, dims, strides, box, swizzle, oob_fill=oob_fill,
                                 element_strides=tuple(element_strides or ()))
        _check_explicit_map(params, array)
        return tensor_map(params, array)

    @staticmethod
    def struct(size: int, fields: dict):
        """A by-value struct parameter (``.param .align A .b8 p[size]``) as a library's host
        code fills it: ``fields`` maps a byte offset to a numpy array (the field holds its
        device address), ``h.tensor_map(...)`` (the 128-byte map, 64-byte aligned), a numpy
        scalar such as ``np.int32(256)`` (its bytes) or bytes. ``reference`` sees the argument
        as ``{offset: array}`` and checks a field with the key ``(argument, offset)``."""
        if not isinstance(size, (int, np.integer)) or size <= 0 or not isinstance(fields, dict):
            raise PorterError("h.struct: give the struct's size in bytes and {offset: field}")
        for offset in fields:
            if isinstance(offset, bool) or not isinstance(offset, (int, np.integer)) or offset < 0:
                raise PorterError(f"h.struct: field offset {offset!r} is not a byte offset (a whole number >= 0)")
        return StructArg(int(size), {int(k): v for k, v in fields.items()})


def _map_message(name: str, exc: Exception) -> str:
    """``h.tensor_map NAME: what is wrong``, the map named once (the encoder's own message
    already starts with ``tensor map NAME:``)."""
    msg = str(exc)
    for prefix in (f"tensor map {name}: ", f"{name}: "):
        if msg.startswith(prefix):
            msg = msg[len(prefix):]
            break
    return f"h.tensor_map {name}: {msg}"


def _check_explicit_map(params: TensorMapParams, array: np.ndarray) -> None:
    """A map given by dims and strides: the driver's encoding rules (the simulator's own
    encoder states them), and every element it can reach lies inside the array."""
    from porter.emu.errors import EmuError
    from porter.emu.units import tma as tma_unit

    try:
        tma_unit.encode(params, 0)
    except EmuError as exc:
        raise PorterError(_map_message(params.name, exc)) from None
    last = params.element_bytes * (params.dims[0] - 1) + \
        sum(s * (d - 1) for s, d in zip(params.strides, params.dims[1:]))
    if last + params.element_bytes > array.nbytes:
        raise PorterError(f"h.tensor_map {params.name}: dims {params.dims} with strides {params.strides} B reach "
                          f"byte {last + params.element_bytes - 1}, beyond the array's {array.nbytes} B")


def _struct_view(arg):
    """What reference() sees of a struct argument: {offset: array} (tensor maps as their
    arrays), copies taken before the run."""
    return {off: x.copy() for off, x in arg.arrays()}


class HarnessSpec:
    """What a harness produced: the arguments, the expected outputs and how to judge them."""

    def __init__(self, args: list, expected: dict, tolerance: dict, axes: dict, launch: dict, has_reference: bool):
        self.args, self.expected, self.tolerance, self.axes = args, expected, tolerance, axes
        self.launch, self.has_reference = launch, has_reference


# ---- running a harness safely ----------------------------------------------------------------

def run_harness(path: str | Path, seed: int = 0, timeout_s: float = 60.0) -> HarnessSpec:
    """Import the harness at ``path`` and call ``arguments`` and ``reference`` in a child
    process limited to ``timeout_s``; PorterError (one line) for anything wrong."""
    path = Path(path)
    if not path.is_file():
        raise PorterError(f"--harness {path}: no such file")
    ctx = multiprocessing.get_context("fork")
    recv, send = ctx.Pipe(duplex=False)
    child = ctx.Process(target=_child, args=(str(path), seed, send), daemon=True)
    child.start()
    send.close()
    try:
        if not recv.poll(timeout_s):
            raise PorterError(f"{path.name}: the harness did not return within {timeout_s:g} s "
                              f"(arguments() and reference() run under --harness-timeout); is there an endless loop?")
        try:
            status, payload = recv.recv()
        except EOFError:
            child.join(5)
            raise PorterError(f"{path.name}: the harness process ended (exit code {child.exitcode}) before "
                              "returning its arguments") from None
    finally:
        if child.is_alive():
            child.kill()
        child.join(5)
        recv.close()
    if status == "error":
        raise PorterError(payload)
    return HarnessSpec(**payload)


def _child(path: str, seed: int, send) -> None:
    """In the child: everything the harness does, with its errors turned into one line."""
    try:
        try:
            result = ("ok", _evaluate(path, seed))
        except PorterError as exc:                      # e.g. h.tensor_map's rules: say which harness line
            text, name = str(exc), Path(path).name
            result = ("error", text if text.startswith(name) else f"{name}: {_where(exc, path)}{text}")
        except BaseException as exc:                    # the harness's own failure, whatever it is
            result = ("error", f"{Path(path).name}: {_where(exc, path)}{type(exc).__name__}: {exc}")
        try:
            send.send(result)
        except Exception as exc:                        # unpicklable results
            send.send(("error", f"{Path(path).name}: cannot pass the harness's results back ({exc})"))
    finally:
        send.close()
        os._exit(0)


def _where(exc: BaseException, path: str) -> str:
    """``line N in FUNC: `` of the innermost frame inside the harness file, if any."""
    here = os.path.abspath(path)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if os.path.abspath(f.filename) == here]
    return f"line {frames[-1].lineno} in {frames[-1].name}: " if frames else ""


def _evaluate(path: str, seed: int) -> dict:
    import importlib.util

    name = Path(path).name
    spec = importlib.util.spec_from_file_location("porter_user_harness", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    fn = getattr(module, "arguments", None)
    if not callable(fn):
        raise PorterError(f"{name}: define arguments(h) returning the kernel's arguments in parameter order")
    args = fn(Harness(seed))
    if not isinstance(args, (list, tuple)):
        raise PorterError(f"{name}: arguments() returned a {type(args).__name__}; return a list of the kernel's "
                          "arguments in parameter order")
    args = list(args)
    for i, a in enumerate(args):
        ok = isinstance(a, (np.ndarray, TensorMapArg, StructArg, bytes, bytearray)) or \
            (isinstance(a, (int, float, np.integer, np.floating)) and not isinstance(a, bool))
        if not ok:
            raise PorterError(f"{name}: arguments()[{i}] is a {type(a).__name__}; give a numpy array, a number or "
                              "h.tensor_map(array, box, swizzle)")
        if isinstance(a, np.ndarray) and a.dtype.hasobject:
            raise PorterError(f"{name}: arguments()[{i}] is an array of Python objects; give a numeric dtype")
    inputs = [a.source if isinstance(a, TensorMapArg) else _struct_view(a) if isinstance(a, StructArg) else a
              for a in args]
    inputs = [x.copy() if isinstance(x, np.ndarray) else x for x in inputs]
    expected: dict = {}
    ref = getattr(module, "reference", None)
    if ref is not None:
        if not callable(ref):
            raise PorterError(f"{name}: reference must be a function reference(args) -> {{index: expected array}}")
        got = ref(inputs)
        if not isinstance(got, dict):
            raise PorterError(f"{name}: reference() returned a {type(got).__name__}; return {{argument index: "
                              "expected array}}")
        for k, v in got.items():
            if isinstance(k, tuple) and len(k) == 2 and isinstance(k[0], (int, np.integer)) and \
                    0 <= int(k[0]) < len(args) and isinstance(inputs[int(k[0])], dict):
                out = inputs[int(k[0])].get(k[1])       # (struct argument, field offset)
                if out is None:
                    raise PorterError(f"{name}: reference() key {k!r}: argument {k[0]} has no array field at "
                                      f"offset {k[1]!r} (fields: {sorted(inputs[int(k[0])])})")
                k = (int(k[0]), int(k[1]))
            elif not isinstance(k, (int, np.integer)) or not 0 <= int(k) < len(args):
                raise PorterError(f"{name}: reference() key {k!r} is not an argument index 0..{len(args) - 1} "
                                  "(or (argument, offset) of a struct's array field)")
            else:
                out = inputs[int(k)]
                k = int(k)
            if not isinstance(out, np.ndarray):
                raise PorterError(f"{name}: reference() checks argument {k}, which is not an array")
            try:
                want = np.asarray(v, dtype=np.float64)
            except (TypeError, ValueError):
                raise PorterError(f"{name}: reference()[{k}] is a {type(v).__name__}, not numbers") from None
            if want.shape != out.shape:
                raise PorterError(f"{name}: reference()[{k}] has shape {want.shape}; argument {k} is {out.shape}")
            expected[k] = want
    tol = dict(DEFAULT_TOLERANCE)
    user_tol = getattr(module, "TOLERANCE", None)
    if user_tol is not None:
        if not isinstance(user_tol, dict) or set(user_tol) - {"rtol", "atol"} or \
                not all(isinstance(x, (int, float)) and x >= 0 for x in user_tol.values()):
            raise PorterError(f"{name}: TOLERANCE must be {{'rtol': number >= 0, 'atol': number >= 0}}")
        tol.update({k: float(v) for k, v in user_tol.items()})
    axes = getattr(module, "AXES", None) or {}
    if not isinstance(axes, dict) or not all(isinstance(v, (list, tuple)) for v in axes.values()) or \
            not all(_index_key(k) is not None for k in axes):
        raise PorterError(f"{name}: AXES must map an argument index (or (argument, struct offset), as "
                          "reference() keys a struct field) to a tuple of index names")
    launch = getattr(module, "LAUNCH", None) or {}
    if not isinstance(launch, dict) or set(launch) - set(LAUNCH_KEYS):
        raise PorterError(f"{name}: LAUNCH may set {', '.join(LAUNCH_KEYS)}")
    return {"args": args, "expected": expected, "tolerance": tol,
            "axes": {_index_key(k): tuple(str(a) for a in v) for k, v in axes.items()}, "launch": dict(launch),
            "has_reference": ref is not None}


def _index_key(k):
    """An AXES key as judge() looks it up: an argument index, or (argument, struct offset)."""
    if isinstance(k, (int, np.integer)) and not isinstance(k, bool):
        return int(k)
    if isinstance(k, tuple) and len(k) == 2 and all(isinstance(x, (int, np.integer)) and not isinstance(x, bool)
                                                    for x in k):
        return (int(k[0]), int(k[1]))
    return None


# ---- judging ---------------------------------------------------------------------------------------

def judge(spec: HarnessSpec, outputs: list) -> list[dict]:
    """One check per expected output: passed, the largest error, and the first bad element."""
    from porter.validation.device_harness import describe_mismatch, first_mismatch

    checks = []
    for i, want in sorted(spec.expected.items(), key=lambda kv: kv[0] if isinstance(kv[0], tuple) else (kv[0], -1)):
        out = outputs[i[0]][i[1]] if isinstance(i, tuple) else outputs[i]     # a struct's field, or an argument
        got = np.asarray(out).astype(np.float64)
        bound = spec.tolerance["atol"] + spec.tolerance["rtol"] * np.abs(want)
        axes = spec.axes.get(i) or (("row", "col") if got.ndim == 2 else tuple(f"i{d}" for d in range(got.ndim)))
        label = f"argument {i[0]} (struct field at offset {i[1]})" if isinstance(i, tuple) else f"argument {i}"
        bad = first_mismatch(got, want, bound, axes, label)
        with np.errstate(invalid="ignore"):
            err = float(np.nanmax(np.abs(got - want))) if got.size else 0.0
        checks.append({"argument": i if not isinstance(i, tuple) else f"{i[0]}+{i[1]}", "shape": list(got.shape),
                       "dtype": str(np.asarray(out).dtype),
                       "max_abs_err": err, "passed": bad is None, "mismatch": bad,
                       "message": describe_mismatch(bad) if bad else ""})
    return checks
