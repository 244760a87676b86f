"""The emulated device: porter's runtime ``Device`` interface over the PTX simulator.

It lives on the runtime side (not in ``porter.emu``) because it builds porter's kernels and
speaks porter's runtime interface; the simulator itself imports nothing of porter but its
error types.

``porter validate ARCH --device emu`` and the pipeline's emulation stage run the same
host code as a GPU run (inputs, poisoning, tensor maps, argument lists, read-back,
judging) against this device. Kernels are built with NVRTC as usual and their PTX is
executed; tensor maps are encoded by the simulator's own TMA unit (porter's layout, not
the driver's). Results are "emulated": executed in porter's PTX simulator, not on a GPU.

The emulated device has ``sm_count`` SMs (default 4): persistent kernels size their
grid from it, so small validation shapes still walk several tiles per CTA.
"""

from __future__ import annotations

import os

import numpy as np

from porter.emu.errors import CheckFailed, Deadlock, EmuError, Unsupported
from porter.emu import srcloc
from porter.emu.launch import Memory
from porter.emu.machine import LaunchState, Scheduler
from porter.emu.units import tma as tma_unit
from porter.errors import PorterError
from porter.runtime.device import check_args
from porter.runtime.driver import KernelFault, KernelHang

# The seed of the warp order, elected lanes and async completion times (default 0); a
# negative one runs warps in plain round-robin order with every copy landing a round later.
SEED_ENV = "PORTER_EMU_SEED"
RACES_ENV = "PORTER_EMU_RACES"      # "0" turns the shared-memory race detector off (it is on by default)
# Wall-clock seconds one emulated launch may run before it is stopped as a hang, naming the
# PTX lines its warps were at (an endless loop would otherwise run to the instruction budget:
# minutes). porter validate --time-limit overrides it; 0 means no limit.
TIME_LIMIT_ENV = "PORTER_EMU_TIME_LIMIT"
DEFAULT_TIME_LIMIT_S = 120.0


def time_limit_s(given: float | None = None) -> float | None:
    """The wall-clock limit per launch: ``given`` (a --time-limit), else PORTER_EMU_TIME_LIMIT,
    else the default; None when it is 0 (no limit)."""
    if given is None:
        text = os.environ.get(TIME_LIMIT_ENV, "").strip()
        try:
            given = float(text) if text else DEFAULT_TIME_LIMIT_S
        except ValueError:
            raise PorterError(f"{TIME_LIMIT_ENV}={text!r}: give the seconds one emulated launch may run "
                              "(0: no limit)") from None
    if given < 0 or given != given:
        raise PorterError(f"time limit {given!r}: give 0 (no limit) or a positive number of seconds")
    return given or None


def _env_seed() -> int:
    text = os.environ.get(SEED_ENV, "").strip()
    if not text:
        return 0
    try:
        return int(text)
    except ValueError:
        raise PorterError(f"{SEED_ENV}={text!r}: give an integer seed (negative: plain round-robin order)") from None


class EmuFunction:
    def __init__(self, prog, name: str, entry: str, regs: int | None, spec=None):
        self.prog, self.name, self.entry, self.regs, self.spec = prog, name, entry, regs, spec
        self.runs: list = []            # RunSummary per launch

    def __repr__(self) -> str:
        return f"EmuFunction({self.name})"


class EmuDevice:
    kind = "emu"

    def __init__(self, sm_count: int = 4, seed: int | None = None, check_races: bool | None = None,
                 time_limit: float | None = None):
        self.memory = Memory()
        self.time_limit_s = time_limit_s(time_limit)   # per launch (TIME_LIMIT_ENV)
        self.sm_count = sm_count
        self.seed = seed if seed is not None else _env_seed()
        self.launches = 0
        self.check_races = check_races if check_races is not None else os.environ.get(RACES_ENV, "1") != "0"
        self._functions: dict = {}
        self.name = "porter PTX simulator"
        self.sources: dict = {}          # spec name -> an edited .cu to use instead of the template

    # ---- memory --------------------------------------------------------------------------------
    def alloc(self, nbytes: int):
        return self.memory.alloc(nbytes)

    def upload(self, arr: np.ndarray):
        return self.memory.upload(arr)

    def download(self, buf, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        if out.nbytes > buf.nbytes:
            raise PorterError(f"download of {out.nbytes} B from a {buf.nbytes} B buffer")
        raw = self.memory.gmem.read(buf.ptr, out.nbytes)
        return raw.view(out.dtype).reshape(out.shape).copy()

    def memset(self, buf, byte: int, nbytes: int | None = None, offset: int = 0) -> None:
        n = buf.nbytes - offset if nbytes is None else nbytes
        self.memory.gmem.fill(buf.ptr + offset, byte, n)

    # ---- kernels ---------------------------------------------------------------------------------
    def load(self, spec, arch) -> EmuFunction:
        key = (arch.name, spec.name, self.sources.get(spec.name))
        if key in self._functions:
            return self._functions[key]
        ptx_text, regs = self._build(spec, arch)
        self.name = f"porter PTX simulator ({arch.target})"
        try:
            prog = self.memory.program(ptx_text, spec.entry, f"{spec.name}.ptx")
        except EmuError as exc:
            raise srcloc.with_source(exc, ptx_text, f"{spec.name}.ptx") from None
        fn = EmuFunction(prog, spec.name, spec.entry, regs, spec)
        fn.ptx_text = ptx_text        # for the source lines beside the PTX lines in messages
        self._functions[key] = fn
        return fn

    def _build(self, spec, arch) -> tuple[str, int | None]:
        from porter.compile import sass as sasslib
        from porter.kernels.build import build_kernel
        from porter.compile.toolchain import compile_cuda

        source = self.sources.get(spec.name)
        if source is not None:
            from porter.errors import CompileError

            try:
                compiled = compile_cuda(source, arch.target, name=f"{spec.name}.cu")
            except CompileError as exc:
                raise PorterError(f"{spec.name}: the edited source does not compile: {exc}") from None
            res = sasslib.resource_usage(compiled.cubin, compiled.log)
            entry = res.get(spec.entry) or next(iter(res.values()), None)
            return compiled.ptx, (entry.registers if entry else None)
        build = build_kernel(spec, arch)
        if build.compiled is None:
            raise PorterError(f"{spec.name}: kernel does not compile for {arch.name}: {build.compile_error}")
        return build.compiled.ptx, build.resources.get("registers")

    def encode_tensor_map(self, params, address: int) -> bytes:
        params.check(address)
        return tma_unit.encode(params, address)

    def launch(self, function, grid, block, smem_bytes: int, cluster, args: list, cooperative: bool = False) -> None:
        name = getattr(function, "name", "kernel")
        check_args(name, args)
        prog = function.prog
        params = bytearray(-(-max(prog.kernel.param_bytes, 1) // 16) * 16)
        if len(args) != len(prog.kernel.params):
            raise PorterError(f"{name}: {len(args)} arguments for {len(prog.kernel.params)} kernel parameters")
        import struct

        for (ctype, value), p in zip(args, prog.kernel.params):
            if ctype == "TmaDescriptor":
                raw = bytes(value)
            elif ctype.endswith("*"):
                raw = struct.pack("<Q", int(value))
            elif ctype == "int":
                raw = struct.pack("<i", int(value))
            elif ctype == "float":
                raw = struct.pack("<f", float(value))
            else:
                raise PorterError(f"{name}: kernel parameter type {ctype!r} is not one porter launches")
            if len(raw) != p.size:
                raise PorterError(f"{name}: a {ctype} argument is {len(raw)} bytes; PTX parameter {p.name} takes "
                                  f"{p.size}")
            params[p.offset:p.offset + p.size] = raw
        dims = [(v, 1, 1) if isinstance(v, int) else tuple(v) + (1,) * (3 - len(v)) for v in (grid, block, cluster)]
        if prog.kernel.cluster is not None and dims[2] == (1, 1, 1):
            dims[2] = tuple(prog.kernel.cluster) + (1,) * (3 - len(prog.kernel.cluster))
        state = LaunchState(prog, dims[0], dims[1], dims[2], int(smem_bytes), bytes(params), self.memory.gmem,
                            function.regs, cooperative)
        self.launches += 1
        # A kernel scheduled by cluster launch control takes over the clusters not yet started,
        # so how many start at once decides its tile walk: it runs with this device's residency,
        # one CTA per SM (the simulator's default keeps 16 clusters resident).
        resident = {}
        if "cluster_launch_control" in (getattr(getattr(function, "spec", None), "features", None) or ()):
            resident["max_resident_clusters"] = max(1, self.sm_count // (dims[2][0] * dims[2][1] * dims[2][2]))
        sched = Scheduler(state, seed=self.seed + self.launches if self.seed >= 0 else None,
                          check_races=self.check_races, wall_limit_s=self.time_limit_s, **resident)
        try:
            try:
                summary = sched.run()
            except EmuError as exc:
                raise srcloc.with_source(exc, getattr(function, "ptx_text", ""), prog.file) from None
        except Deadlock as exc:
            raise KernelHang(f"{name} (emulated): {exc}") from None
        except (CheckFailed, Unsupported) as exc:
            err = KernelFault if isinstance(exc, CheckFailed) else PorterError
            raise err(f"{name} (emulated): {exc}") from None
        except EmuError as exc:
            raise KernelFault(f"{name} (emulated): {exc}") from None
        function.runs.append(summary)

    def synchronize(self, what: str = "device") -> None:
        return None
