"""Run PTX text in porter's simulator: ``porter.emu.launch`` and the ``Memory`` it runs on.

Example::

    from porter import emu
    out = np.zeros(32, np.float32)
    res = emu.launch(ptx_text, "my_kernel", grid=1, block=32, args=[out, 32, 2.0])
    res.outputs[0]        # the copy of ``out`` after the kernel ran
    res.summary           # warp-instructions, warps, CTAs, seconds, ...

Arguments, in the kernel's parameter order:

* a numpy array: copied to a fresh device buffer; the parameter gets its address;
  after the run ``outputs[i]`` holds the buffer's contents in the array's dtype/shape;
* a ``Buffer`` (from ``Memory.alloc``/``upload``): its address;
* an int or float: packed as the parameter's PTX type;
* ``emu.tensor_map(params, array_or_buffer)``: a 128-byte tensor map (``params`` as
  ``porter.runtime.tensormap.TensorMapParams``) over that array's device copy;
* 128 raw bytes: a tensor map already encoded with ``porter.emu.units.tma.encode``.

Results are "emulated": executed in porter's PTX simulator, not on a GPU.
"""

from __future__ import annotations

import functools
import struct
from dataclasses import dataclass

import numpy as np

from porter.emu import launch_args, launch_struct
from porter.emu.launch_struct import StructArg
from porter.emu import memory as mem
from porter.emu import ptx, srcloc
from porter.emu.errors import EmuError
from porter.emu.machine import LaunchState, RunSummary, Scheduler, build_program
from porter.emu.units import tma as tma_unit


@dataclass
class Buffer:
    """Device memory in the simulator: ``ptr`` is its address, ``nbytes`` its size."""
    memory: "Memory"
    ptr: int
    nbytes: int

    def to_host(self, shape=None, dtype=np.uint8) -> np.ndarray:
        n = self.nbytes if shape is None else int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
        raw = self.memory.gmem.read(self.ptr, n) if n else np.zeros(0, np.uint8)   # (0-size arrays too)
        arr = raw.view(dtype)
        return arr.reshape(shape) if shape is not None else arr


class Memory:
    """The simulated device's global memory and its loaded modules."""

    def __init__(self):
        self.gmem = mem.GlobalMemory()
        self._modules: dict = {}

    def alloc(self, nbytes: int, name: str = "buffer") -> Buffer:
        return Buffer(self, self.gmem.alloc(nbytes, name), max(int(nbytes), 1))

    def upload(self, arr: np.ndarray, name: str = "buffer") -> Buffer:
        host = np.ascontiguousarray(arr)
        buf = self.alloc(host.nbytes, name)
        self.gmem.write(buf.ptr, host.view(np.uint8).reshape(-1))
        return buf

    def program(self, ptx_text: str, entry: str, file: str = "<ptx>"):
        key = (hash(ptx_text), file, entry)
        prog = self._modules.get(key)
        if prog is None:
            module = _parse(ptx_text, file)
            prog = self._modules[key] = build_program(module, entry, self.gmem)
        return prog


@functools.lru_cache(maxsize=32)
def _parse(ptx_text: str, file: str) -> ptx.Module:
    """Parsed modules are never changed after parsing, so every simulated device shares them."""
    return ptx.parse(ptx_text, file)


@dataclass
class TensorMapArg:
    params: object
    source: object          # numpy array or Buffer


def tensor_map(params, source) -> TensorMapArg:
    """A tensor-map kernel argument over ``source`` (a numpy array argument or a Buffer)."""
    return TensorMapArg(params, source)


@dataclass
class LaunchResult:
    outputs: list                # per argument: the array after the run (numpy args), else None
    summary: RunSummary

    @property
    def warnings(self) -> list[str]:
        """Findings of rules the PTX ISA does not state, each with its reason (porter.emu.isa_rules)."""
        return list(self.summary.warnings)


def _dim3(v) -> tuple[int, int, int]:
    if isinstance(v, int):
        return (v, 1, 1)
    t = tuple(int(x) for x in v)
    return (t + (1, 1, 1))[:3]



def launch(ptx_text: str, entry: str, grid, block, args: list, cluster=(1, 1, 1), smem: int = 0,
           memory: Memory | None = None, seed: int | None = None, regs_per_thread: int | None = None,
           cooperative: bool = False, budget: int | None = None, file: str = "<ptx>",
           races: bool = True, relax=()) -> LaunchResult:
    """Run ``entry`` of ``ptx_text`` on a fresh (or the given) simulated device. Errors name
    the .cu line beside each PTX line when the PTX carries line info (porter.emu.srcloc).
    The shared-memory race detector runs unless ``races=False``; ``relax``: names of ISA rules
    (``launch_args.RELAXABLE``) to report as warnings instead of errors. Bad arguments are one
    EmuError naming the parameter; grids beyond ``launch_args.MAX_CTAS`` CTAs are refused."""
    try:
        return _launch(ptx_text, entry, grid, block, args, cluster, smem, memory, seed, regs_per_thread,
                       cooperative, budget, file, races, relax)
    except EmuError as exc:
        raise srcloc.with_source(exc, ptx_text, file) from None


def _launch(ptx_text, entry, grid, block, args, cluster, smem, memory, seed, regs_per_thread, cooperative,
            budget, file, races, relax=()) -> LaunchResult:
    if not isinstance(ptx_text, str) or not isinstance(entry, str):
        raise EmuError("launch: ptx_text and entry must be strings")
    if memory is not None and not isinstance(memory, Memory):
        raise EmuError(f"launch: memory must be a porter.emu.Memory, got {type(memory).__name__}")
    if not isinstance(args, (list, tuple)):
        raise EmuError(f"launch: args must be a list of kernel arguments, got {type(args).__name__}")
    grid, block, cluster = launch_args.grid_block_cluster(grid, block, cluster, bool(races))
    smem, seed, budget, regs_per_thread = launch_args.options(smem, seed, budget, regs_per_thread)
    relaxed = launch_args.relax(relax)
    memory = memory or Memory()
    prog = memory.program(ptx_text, entry, file)
    kernel = prog.kernel
    if kernel.cluster is not None:
        want = _dim3(kernel.cluster)
        if cluster == (1, 1, 1):
            cluster = want
        elif cluster != want:
            raise EmuError(f"{file}: {entry} declares cluster {want} (.reqnctapercluster) but was launched with "
                           f"cluster {cluster}")
    for i in range(3):
        if grid[i] % cluster[i]:
            raise EmuError(f"{file}: grid {grid} is not a multiple of the cluster shape {cluster}")
    threads = block[0] * block[1] * block[2]
    limit = kernel.maxntid or kernel.reqntid
    if limit is not None:                 # .maxntid 128 and .maxntid 128, 1, 1 say the same (PTX ISA "Performance-Tuning Directives: .maxntid": missing dimensions are 1)
        limit = _dim3(limit)
    if limit is not None and threads > limit[0] * limit[1] * limit[2]:
        raise EmuError(f"{file}: {entry} takes at most {limit} threads (.maxntid) but was launched with {block}")
    if threads > 1024 or threads <= 0:
        raise EmuError(f"{file}: a block of {block} threads is outside 1..1024")
    if len(args) != len(kernel.params):
        raise EmuError(f"{file}: {entry} takes {len(kernel.params)} parameters, {len(args)} arguments given")
    params = bytearray(-(-max(kernel.param_bytes, 1) // 16) * 16)
    outputs: list = [None] * len(args)
    buffers: dict[int, Buffer] = {}

    def device_copy(x, label: str) -> Buffer:
        """The device copy of ``x``, named by the kernel argument (and struct field) that first
        passes it, so a checker's "nearest: ..." names the parameter the harness gave it for."""
        if isinstance(x, Buffer):
            return x
        if id(x) not in buffers:
            buffers[id(x)] = memory.upload(x, label)
        return buffers[id(x)]

    for i, (p, a) in enumerate(zip(kernel.params, args)):
        if isinstance(a, TensorMapArg):
            if not isinstance(a.source, (np.ndarray, Buffer)):
                raise EmuError(f"launch: argument {i} for {p.name}: a tensor_map's source must be a numpy array or "
                               f"a Buffer, got {type(a.source).__name__}")
            buf = device_copy(a.source, f"argument {i}")
            try:
                raw = tma_unit.encode(a.params, buf.ptr)
            except (AttributeError, TypeError, ValueError) as exc:
                raise EmuError(f"launch: argument {i} for {p.name}: tensor-map parameters unusable ({exc})") from None
            if p.size == 8:             # a `const CUtensorMap*` parameter: the host copied the map to device memory
                raw = struct.pack("<Q", memory.upload(np.frombuffer(raw, np.uint8), f"argument {i} map").ptr)
        elif isinstance(a, StructArg):          # a by-value struct of pointers, maps and scalars
            raw = launch_struct.pack(a, f"launch: argument {i} for {p.name}",
                                     lambda x, off, i=i: device_copy(x, f"argument {i}+{off}"),
                                     lambda m, buf: tma_unit.encode(m.params, buf.ptr))
        elif isinstance(a, (bytes, bytearray)):
            raw = bytes(a)
        elif isinstance(a, (np.ndarray, Buffer)):
            if isinstance(a, np.ndarray):
                launch_args.array(a, i, p.name)
            raw = struct.pack("<Q", device_copy(a, f"argument {i}").ptr)
        elif isinstance(a, (bool, int, float, np.integer, np.floating)):
            raw = launch_args.scalar(p, a, i)
        else:
            raise EmuError(f"{file}: argument {i} for {p.name} is a {type(a).__name__}; pass a numpy array, a "
                           "Buffer, a number, a tensor_map(...) or 128 bytes")
        if len(raw) != p.size:
            raise EmuError(f"{file}: argument {i} for {p.name} is {len(raw)} bytes but the parameter takes {p.size}")
        params[p.offset:p.offset + p.size] = raw
    state = LaunchState(prog, grid, block, cluster, int(smem), bytes(params), memory.gmem, regs_per_thread,
                        cooperative)
    state.relaxed = relaxed
    sched = Scheduler(state, seed=seed, check_races=bool(races), **({"budget": budget} if budget else {}))
    summary = sched.run()
    for i, a in enumerate(args):
        if isinstance(a, np.ndarray):
            outputs[i] = buffers[id(a)].to_host(a.shape, a.dtype)
        elif isinstance(a, TensorMapArg) and isinstance(a.source, np.ndarray):
            outputs[i] = buffers[id(a.source)].to_host(a.source.shape, a.source.dtype)
        elif isinstance(a, StructArg):
            outputs[i] = {off: buffers[id(x)].to_host(x.shape, x.dtype) for off, x in a.arrays()}
    return LaunchResult(outputs, summary)
