"""Family-specific device runs for the harness: GEMM, attention, megakernel.

Each family has a ``validate_*`` (fresh inputs per shape and seed, outputs poisoned,
one launch, judged against the CPU reference) and a ``bench_*`` (inputs rotated past
the L2, warm-up, device events around every launch, median of many, the baseline
timed in the same process). Launches here are enqueued without a host wait (unlike
``porter.runtime.driver.launch``) so timed launches run back to back; every CUDA
call's status is checked and each run ends in a synchronize that reports a failed
kernel.

Kernels come from ``porter.kernels.build.build_kernel`` or, when ``PORTER_CUBIN_DIR``
names a folder written by ``benchmarks/device_check.py prepare``, from the cubin
built there for the same spec (so a device machine without nvdisasm can still run).
"""
from __future__ import annotations

import ctypes
import json
import os
from pathlib import Path

import numpy as np

from porter.errors import PorterError
from porter.validation import device_harness as dh

CUBIN_DIR_ENV = "PORTER_CUBIN_DIR"
MANIFEST = "manifest.json"

GEMM_VALIDATE_SHAPES = ((256, 256, 256), (512, 768, 512), (768, 512, 1280), (2048, 1024, 768),
                        (4096, 4096, 1024))
GEMM_BENCH_SHAPES = ((8192, 8192, 8192),)
# (batch, heads_q, heads_kv, seq_q, seq_k): tails, GQA, Sq != Sk, a multi-tile case.
ATTENTION_VALIDATE_SHAPES = ((1, 2, 2, 128, 128), (2, 4, 1, 192, 320), (1, 4, 2, 300, 300),
                             (1, 2, 1, 160, 100), (2, 8, 2, 1024, 1024))
ATTENTION_BENCH_SHAPES = ((4, 16, 16, 4096, 4096), (4, 16, 16, 16384, 16384))
MEGAKERNEL_VALIDATE_MODELS = ("tiny", "tiny-gqa4")
MEGAKERNEL_VALIDATE_POS = 40
MEGAKERNEL_BENCH_POS = (1024,)
# The descriptor's peak_tflops key for each GEMM variant's operand format.
PEAK_KEY = {"bf16": "bf16", "fp8": "fp8", "mxfp8": "fp8", "nvfp4": "fp4"}


class NoDevice(PorterError):
    """No GPU of the descriptor's compute capability: device work cannot run."""

    exit_code = 3


# ---- device selection ------------------------------------------------------------------

def match_device(arch, devices: list[dict], why: str = "") -> tuple[dict | None, str]:
    """The first device whose compute capability is ``arch``'s, else (None, why not).

    ``devices`` are {index, name, compute_capability: [major, minor]} as
    ``porter.pipeline.device.list_devices`` gives them.
    """
    want = tuple(arch.compute_capability)
    for dev in devices:
        if tuple(dev["compute_capability"]) == want:
            return dev, ""
    if devices:
        seen = ", ".join(f"device {d['index']} {d['name']} (compute capability "
                         f"{d['compute_capability'][0]}.{d['compute_capability'][1]})" for d in devices)
        return None, (f"compute capability mismatch: {arch.name} kernels are built for {arch.target} "
                      f"(compute capability {want[0]}.{want[1]}) but the GPUs here are {seen}")
    return None, f"no CUDA device: {why or 'the driver sees no GPU'}"


def require_device(arch, devices: list[dict] | None = None) -> dict:
    """The device to run on, or NoDevice with the one-line reason."""
    why = ""
    if devices is None:
        from porter.pipeline.device import list_devices

        devices, why = list_devices()
    dev, reason = match_device(arch, devices, why)
    if dev is None:
        raise NoDevice(reason)
    if dev["index"] != 0:
        # porter.runtime.driver runs on device 0; say so rather than run on the wrong GPU.
        raise NoDevice(f"{dev['name']} (compute capability {arch.target}) is device {dev['index']}; "
                       f"porter runs on device 0: set CUDA_VISIBLE_DEVICES={dev['index']}")
    return dev


# ---- kernels, launches, memory --------------------------------------------------------------

_FUNCTIONS: dict[str, object] = {}


def _prebuilt_cubin(spec, arch) -> bytes | None:
    folder = os.environ.get(CUBIN_DIR_ENV)
    if not folder:
        return None
    manifest_path = Path(folder) / MANIFEST
    if not manifest_path.is_file():
        raise PorterError(f"{CUBIN_DIR_ENV}={folder}: no {MANIFEST} there; run benchmarks/device_check.py prepare")
    entry = json.loads(manifest_path.read_text()).get("kernels", {}).get(f"{arch.name}/{spec.name}")
    if entry is None:
        return None
    from porter.pipeline.work import jsonable

    if jsonable(spec.to_dict()) != entry["spec"] or entry.get("source_sha256") != source_digest(spec, arch):
        return None            # another configuration or an edited template: build this one afresh
    return (Path(folder) / entry["cubin"]).read_bytes()


def source_digest(spec, arch) -> str:
    """sha256 of the rendered CUDA source: a prebuilt cubin is used only for the same source."""
    import hashlib

    from porter.kernels import family_module

    return hashlib.sha256(family_module(spec.family).render(spec, arch).encode()).hexdigest()


def load_kernel(spec, arch):
    """The loaded ``spec.entry`` (prebuilt cubin if one matches, else build_kernel)."""
    key = f"{arch.name}/{spec.name}"
    if key in _FUNCTIONS:
        return _FUNCTIONS[key]
    from porter.runtime import driver

    cubin = _prebuilt_cubin(spec, arch)
    if cubin is not None:
        try:
            _FUNCTIONS[key] = driver.load_function(cubin, spec.entry)
            return _FUNCTIONS[key]
        except PorterError:
            pass               # e.g. a driver older than the NVRTC that built it: build here instead
    from porter.kernels.build import build_kernel

    build = build_kernel(spec, arch)
    if not build.ok:
        failed = next((c for c in build.checks if not c.passed), None)
        raise PorterError(f"{spec.name}: kernel not usable on {arch.name}: "
                          + (f"{failed.name}: {failed.detail}" if failed else build.compile_error))
    _FUNCTIONS[key] = driver.load_function(build.compiled.cubin, spec.entry)
    return _FUNCTIONS[key]


class Launcher:
    """Enqueue a kernel on the legacy default stream without waiting for it."""

    def __init__(self, function, grid: int, block: int, smem_bytes: int, cluster=(1, 1, 1),
                 cooperative: bool = False):
        from porter.runtime import driver

        self.drv, self.check, self.function = driver.bindings(), driver.check, function
        fattr = self.drv.CUfunction_attribute
        if smem_bytes > driver.DEFAULT_DYNAMIC_SMEM:
            self.check(self.drv.cuFuncSetAttribute(function, fattr.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                                   smem_bytes), "cuFuncSetAttribute(max dynamic shared memory)")
        config = self.drv.CUlaunchConfig()
        config.gridDimX, config.gridDimY, config.gridDimZ = grid, 1, 1
        config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
        config.sharedMemBytes = smem_bytes
        config.hStream = self.drv.CUstream(0)
        attrs = []
        if cluster[0] * cluster[1] * cluster[2] > 1:
            attr = self.drv.CUlaunchAttribute()
            attr.id = self.drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            attr.value.clusterDim.x, attr.value.clusterDim.y, attr.value.clusterDim.z = cluster
            attrs.append(attr)
        if cooperative:
            # CTAs that wait on each other: the driver refuses a grid that cannot be
            # co-resident instead of letting it hang
            attr = self.drv.CUlaunchAttribute()
            attr.id = self.drv.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_COOPERATIVE
            attr.value.cooperative = 1
            attrs.append(attr)
        config.attrs, config.numAttrs = attrs, len(attrs)
        self.config = config

    def __call__(self, args: list) -> None:
        pointers = (ctypes.c_void_p * len(args))(*[ctypes.addressof(a) for a in args])
        self.check(self.drv.cuLaunchKernelEx(self.config, self.function, ctypes.addressof(pointers), 0),
                   "cuLaunchKernelEx")

    def run(self, args: list) -> None:
        """Launch and wait; a failed kernel raises here, named."""
        self(args)
        self.check(self.drv.cuCtxSynchronize(), "kernel execution (cuCtxSynchronize)")


def upload(arr: np.ndarray):
    from porter.runtime import driver

    host = np.ascontiguousarray(arr)
    return driver.DeviceBuffer.from_host(host.ctypes.data, host.nbytes)


def download(buf, shape, dtype) -> np.ndarray:
    out = np.empty(shape, dtype=dtype)
    buf.copy_to_host(out.ctypes.data, out.nbytes)
    return out


def poison(buf, nbytes: int | None = None, offset: int = 0) -> None:
    from porter.runtime import driver

    n = buf.nbytes - offset if nbytes is None else nbytes
    driver.check(driver.bindings().cuMemsetD8(buf.ptr + offset, dh.POISON_BYTE, n), "cuMemsetD8 (poison)")


def _device_tensor(buf, shape, dtype_name: str, itemsize: int):
    """A TensorInfo for a C-contiguous device buffer (what plan_gemm reads)."""
    from porter.runtime.arrays import TensorInfo

    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return TensorInfo(ptr=buf.ptr, shape=tuple(shape), strides=tuple(reversed(strides)), dtype=dtype_name,
                      itemsize=itemsize, device="cuda", keepalive=buf)


# ---- GEMM ---------------------------------------------------------------------------------

def _gemm_variant(spec) -> tuple[str, bool]:
    return spec.variant.split(".", 1)[1], spec.name.endswith(".pair")


def _fit(shape, multiples) -> tuple[int, ...]:
    return tuple(max(m, -(-v // m) * m) for v, m in zip(shape, multiples))


def gemm_plan(spec, arch, inp: dh.GemmInputs, a_buf, b_buf, c_buf):
    """porter.runtime's launch plan for ``inp`` in device buffers (anything with ``ptr``):
    shapes, tiles, tensor maps and grid are all checked here, before any launch."""
    from porter.runtime.gemm import plan_gemm

    variant, pair = _gemm_variant(spec)
    plan = plan_gemm(_device_tensor(a_buf, inp.a.shape, inp.a.dtype.name, inp.a.itemsize),
                     _device_tensor(b_buf, inp.b.shape, inp.b.dtype.name, inp.b.itemsize),
                     arch, variant=variant, pair=pair, scales=inp.scales,
                     scale_a=inp.scale_a, scale_b=inp.scale_b,
                     out=_device_tensor(c_buf, (inp.m, inp.n), "bfloat16", 2))
    if plan.spec.name != spec.name or plan.spec.entry != spec.entry:
        raise PorterError(f"{spec.name}: the runtime planned {plan.spec.name} ({plan.spec.entry}) instead")
    return plan


class GemmRun:
    """One input set on the device: operands, C and the packed kernel arguments."""

    def __init__(self, spec, arch, inp: dh.GemmInputs):
        from porter.runtime import driver

        self.inp, self.bufs = inp, []
        a_buf, b_buf = upload(inp.a), upload(inp.b)
        self.c_buf = driver.DeviceBuffer(inp.m * inp.n * 2)
        self.bufs += [a_buf, b_buf, self.c_buf]
        plan = gemm_plan(spec, arch, inp, a_buf, b_buf, self.c_buf)
        addresses = {"tma_a": a_buf.ptr, "tma_b": b_buf.ptr}
        for param, flat in plan.host_scales.items():
            buf = upload(flat)
            self.bufs.append(buf)
            addresses[param] = buf.ptr
        values = {"c": self.c_buf.ptr, "m": plan.m, "n": plan.n, "k": plan.k,
                  "scale_a": plan.scale_a, "scale_b": plan.scale_b}
        for param, tmap in plan.maps.items():
            values[param] = tmap.encode(addresses[param])
        missing = [p for p, _ in plan.params if p not in values]
        if missing:
            raise PorterError(f"{spec.name}: kernel parameters without a value: {', '.join(missing)}")
        self.args = [driver.pack_arg(ctype, values[p]) for p, ctype in plan.params]
        self.plan = plan

    def launcher(self, function) -> Launcher:
        p = self.plan
        return Launcher(function, p.grid, p.block, p.smem_bytes, p.cluster)

    def result(self) -> np.ndarray:
        import ml_dtypes

        return download(self.c_buf, (self.inp.m, self.inp.n), ml_dtypes.bfloat16)


def validate_gemm(spec, arch, shapes=None, seeds: int = 2) -> list[dict]:
    from porter.kernels import gemm

    variant, _ = _gemm_variant(spec)
    function = load_kernel(spec, arch)
    checks = []
    for shape in shapes or [_fit(s, gemm.shape_multiples(spec)) for s in GEMM_VALIDATE_SHAPES]:
        for r in range(seeds):
            seed = dh.seed_for(shape, r)
            run = GemmRun(spec, arch, dh.gemm_inputs(variant, *shape, seed))
            poison(run.c_buf)
            run.launcher(function).run(run.args)
            ref_same, ref_unq = run.inp.references()
            res = dh.compare_gemm(variant, run.result(), ref_same, ref_unq)
            checks.append({"shape": list(shape), "seed": seed, **res})
    return checks


def bench_gemm(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    from porter.validation import baselines

    variant, _ = _gemm_variant(spec)
    function = load_kernel(spec, arch)
    rows = []
    for shape in shapes or GEMM_BENCH_SHAPES:
        first = dh.bench_gemm_inputs(variant, *shape, dh.seed_for(shape, 0, base=7))
        sets = dh.rotation_sets(first.nbytes, arch.l2_bytes)
        inputs = [first] + [dh.bench_gemm_inputs(variant, *shape, dh.seed_for(shape, i, base=7))
                            for i in range(1, sets)]
        runs = [GemmRun(spec, arch, inp) for inp in inputs]
        launch = runs[0].launcher(function)
        events = dh.DriverEvents()
        stats = dh.time_launches(lambda i: launch(runs[i].args), events, sets=sets)
        # the timed runs must also be right: judge the last output of set 0 on a sample of rows
        check = _gemm_spot_check(variant, runs[0])
        flops = 2.0 * shape[0] * shape[1] * shape[2]
        row = _rate_row("gemm", spec, list(shape), flops, stats, arch, PEAK_KEY[variant],
                        dh.rotation_note(sets, first.nbytes, arch.l2_bytes), min_bytes=first.nbytes)
        row["spot_check"] = check
        if baseline:
            row["baseline"] = baselines.gemm_baseline(variant, inputs, sets)
            _relate(row)
        rows.append(row)
        del runs
    return rows


def _gemm_spot_check(variant: str, run: GemmRun, rows: int = 64) -> dict:
    """The last timed output against the float64 reference on ``rows`` rows (a full
    8192^3 float64 product would cost more host time than the benchmark)."""
    import ml_dtypes

    from porter.validation import quantize

    def values(q):
        if not isinstance(q, quantize.Quantized):
            return np.asarray(q, dtype=np.float64)
        if q.scheme == "per_tensor" and q.elem == "e4m3":
            # ml_dtypes decodes 64M codes in a blink; quantize.dequantize's generic decoder
            # takes ~20 s for an 8192^2 operand (the two agree: test_bench_fp8_fast_path...)
            return q.codes.view(ml_dtypes.float8_e4m3fn).astype(np.float64) * np.float64(q.tensor_scale)
        return quantize.dequantize(q)

    out = run.result()
    pick = np.linspace(0, run.inp.m - 1, min(rows, run.inp.m)).astype(int)
    ref_same = values(run.inp.qa)[pick] @ values(run.inp.qb).T
    ref_unq = run.inp.a_f32[pick].astype(np.float64) @ run.inp.b_f32.astype(np.float64).T
    return dh.compare_gemm(variant, out[pick], ref_same, ref_unq)


# ---- attention ---------------------------------------------------------------------------------

def attention_plan(spec, arch, q, k, v) -> tuple[dict, dict, dict]:
    """(launch plan, host q/k/v as padded 2-D views, checked tensor maps): no GPU needed."""
    from porter.kernels import attention as family

    b, hq, hkv, sq, sk, d = family.validate_inputs(q, k, v)
    if d != spec.config["head_dim"]:
        raise PorterError(f"{spec.name}: inputs have head dim {d}, the kernel {spec.config['head_dim']}")
    plan = family.launch_plan(spec, arch, b, hq, hkv, sq, sk)
    # tiny problems get zero rows up to one TMA box (the kernel masks them): the family's rule
    host = family._pad_to_box(plan, {"tma_q": q, "tma_k": k, "tma_v": v})
    return plan, host, family.tensor_maps(spec, plan, d * 2)


class AttentionRun:
    def __init__(self, spec, arch, q, k, v):
        import ml_dtypes

        from porter.runtime import driver

        self.plan, host, maps = attention_plan(spec, arch, q, k, v)
        self.bufs = {p: upload(x) for p, x in host.items()}
        self.o_shape, self.lse_shape = self.plan["outputs"]["o"], self.plan["outputs"]["lse"]
        self.o_buf = driver.DeviceBuffer(int(np.prod(self.o_shape)) * 2)
        self.lse_buf = driver.DeviceBuffer(int(np.prod(self.lse_shape)) * 4)
        values = {"o": self.o_buf.ptr, "lse": self.lse_buf.ptr, **self.plan["scalars"]}
        for p in ("tma_q", "tma_k", "tma_v"):
            values[p] = maps[p].encode(self.bufs[p].ptr)
        self.args = [driver.pack_arg(ctype, values[p]) for p, ctype in spec.config["params"]]
        self.nbytes = sum(x.nbytes for x in host.values()) + self.o_buf.nbytes + self.lse_buf.nbytes
        self.bf16 = ml_dtypes.bfloat16

    def launcher(self, function, spec) -> Launcher:
        return Launcher(function, self.plan["grid"][0], self.plan["block"][0], self.plan["smem_bytes"], spec.cluster)

    def result(self):
        return download(self.o_buf, self.o_shape, self.bf16), download(self.lse_buf, self.lse_shape, np.float32)


def attention_flops(b: int, hq: int, sq: int, sk: int, d: int, causal: bool) -> float:
    """4 B Hq D x (query, key) pairs computed: all Sq Sk, or the bottom-right causal ones."""
    if causal:
        i = np.arange(sq)
        pairs = float(np.clip(i + (sk - sq) + 1, 0, sk).sum())
    else:
        pairs = float(sq) * sk
    return 4.0 * b * hq * d * pairs


def validate_attention(spec, arch, shapes=None, seeds: int = 2) -> list[dict]:
    from porter.validation.reference_attention import attention_same_precision, reference_attention

    d, causal = spec.config["head_dim"], bool(spec.config["causal"])
    function = load_kernel(spec, arch)
    checks = []
    for shape in shapes or ATTENTION_VALIDATE_SHAPES:
        b, hq, hkv, sq, sk = shape
        for r in range(seeds):
            seed = dh.seed_for((*shape, d, causal), r)
            q, k, v = dh.attention_inputs(b, hq, hkv, sq, sk, d, seed)
            run = AttentionRun(spec, arch, q, k, v)
            poison(run.o_buf)
            poison(run.lse_buf)
            run.launcher(function, spec).run(run.args)
            o, lse = run.result()
            q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
            ref, lse_ref = reference_attention(q64, k64, v64, causal)
            same, _ = attention_same_precision(q64, k64, v64, causal)
            res = dh.compare_attention(o, lse, ref, lse_ref, same)
            checks.append({"shape": {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk, "head_dim": d},
                           "causal": causal, "seed": seed, **res})
    return checks


def _bench_qkv(b, hq, hkv, sq, sk, d, seed):
    """Random bf16 q, k, v drawn straight in fp32 (the bench shapes are too big for fp64 draws)."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(s, dtype=np.float32).astype(ml_dtypes.bfloat16)
                 for s in ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)))


def bench_attention(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    from porter.validation import baselines

    d, causal = spec.config["head_dim"], bool(spec.config["causal"])
    function = load_kernel(spec, arch)
    rows = []
    for shape in shapes or ATTENTION_BENCH_SHAPES:
        b, hq, hkv, sq, sk = shape
        first = _bench_qkv(b, hq, hkv, sq, sk, d, dh.seed_for(shape, 0, base=7))
        per_set = sum(x.nbytes for x in first) + first[0].nbytes + b * hq * sq * 4    # q, k, v, O, lse
        sets = dh.rotation_sets(per_set, arch.l2_bytes)
        qkvs = [first] + [_bench_qkv(b, hq, hkv, sq, sk, d, dh.seed_for(shape, i, base=7)) for i in range(1, sets)]
        runs = [AttentionRun(spec, arch, *qkv) for qkv in qkvs]
        launch = runs[0].launcher(function, spec)
        stats = dh.time_launches(lambda i: launch(runs[i].args), dh.DriverEvents(), sets=sets)
        o, lse = runs[0].result()
        w_o, w_lse = dh.written_check(o, "O"), dh.written_check(lse, "lse")
        # every O element written and finite; lse written (-inf is legal for a row that sees no key)
        spot = {"written": [w_o, w_lse],
                "passed": w_o["passed"] and w_o["nonfinite_written"] == 0 and w_lse["passed"]}
        row = _rate_row("attention", spec, {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk, "head_dim": d},
                        attention_flops(b, hq, sq, sk, d, causal), stats, arch, "bf16",
                        dh.rotation_note(sets, per_set, arch.l2_bytes), min_bytes=per_set)
        row["causal"], row["spot_check"] = causal, spot
        if baseline:
            row["baseline"] = baselines.attention_baseline(qkvs, causal, sets)
            _relate(row)
        rows.append(row)
        del runs
    return rows


# ---- megakernel ---------------------------------------------------------------------------------

def poisoned_arena(program, cfg, weights, caches, pos: int) -> np.ndarray:
    """The step's host arena with what the step computes poisoned: activations, outputs
    and the cache rows from ``pos`` on (rows before it hold the prompt). A read before
    a write then shows as NaN downstream, an unwritten output as the poison pattern."""
    from porter.kernels import megakernel as family

    arena = family.host_arena(program, cfg, weights, caches)
    for t in program.tensors:
        if t.kind in ("activation", "output"):
            arena[t.offset:t.offset + t.nbytes] = dh.POISON_BYTE
        elif t.kind == "cache":
            row = t.nbytes // t.shape[0]
            arena[t.offset + pos * row:t.offset + t.nbytes] = dh.POISON_BYTE
    return arena


class DecodeStepRun:
    """One decode step's arena, tables, instructions and counters on the device."""

    def __init__(self, spec, arch, program, cfg, weights, caches, pos: int):
        from porter.kernels import megakernel as family
        from porter.runtime import driver

        self.program, self.pos = program, pos
        self.launch = family.launch_config(spec, program)
        self.arena = arena = poisoned_arena(program, cfg, weights, caches, pos)
        self.d_arena = upload(arena)
        recs = family.tensor_table_records(program, [self.d_arena.ptr + t.offset for t in program.tensors])
        self.d_tensors = upload(recs)
        self.d_instr = upload(np.ascontiguousarray(program.instructions, dtype=np.int32))
        self.n_counters = max(1, self.launch["n_counters"])
        self.d_counters = upload(np.zeros(self.n_counters, dtype=np.int32))
        values = {"instructions": self.d_instr.ptr, "queue_len": self.launch["queue_len"],
                  "counters": self.d_counters.ptr, "tensors": self.d_tensors.ptr}
        self.args = [driver.pack_arg(ctype, values[name]) for name, ctype in family.PARAMS]
        self.drv, self.check = driver.bindings(), driver.check

    def launcher(self, function) -> Launcher:
        return Launcher(function, self.launch["grid"][0], self.launch["block"][0], self.launch["smem_bytes"],
                        cooperative=bool(self.launch.get("cooperative", False)))

    def reset_counters(self) -> None:
        """Counters start each step at zero (the kernel's contract), enqueued on stream 0."""
        self.check(self.drv.cuMemsetD32Async(self.d_counters.ptr, 0, self.n_counters, self.drv.CUstream(0)),
                   "cuMemsetD32Async (counters)")

    def read(self) -> dict:
        from porter.kernels import megakernel as family

        arena = download(self.d_arena, self.arena.shape, np.uint8)
        counters = download(self.d_counters, (self.n_counters,), np.int32)

        def tensor(name):
            t = self.program.tensor(name)
            return arena[t.offset:t.offset + t.nbytes].view(family._np_dtype(t.dtype)).reshape(t.shape)

        caches = {t.name: tensor(t.name)[self.pos] for t in self.program.tensors if t.kind == "cache"}
        return {"logits": tensor("buf.logits").copy(), "token": int(tensor("out.token").reshape(-1)[0]),
                "counters": counters[:self.launch["n_counters"]], "cache_rows": caches}


def _require_resident(spec, program) -> None:
    from porter.runtime import driver

    info = driver.device()
    grid = program.instructions.shape[0]
    if info.sm_count < grid:
        raise PorterError(f"{spec.name}: {grid} persistent CTAs wait on each other and need as many SMs; "
                          f"{info.name} has {info.sm_count}")


def validate_megakernel(spec, arch, shapes=None, seeds: int = 2) -> list[dict]:
    """The planned step of the small test models on the device vs the fp64 reference
    (the kernel takes any model within its compiled maxima; the tiny ones keep the
    reference cheap)."""
    from porter.kernels import megakernel as family
    from porter.megakernel.plan import build_plan

    function = load_kernel(spec, arch)
    checks = []
    for model in shapes or MEGAKERNEL_VALIDATE_MODELS:
        for r in range(seeds):
            inp = family.step_inputs(model, MEGAKERNEL_VALIDATE_POS, seed=r)
            cfg, pos = inp["cfg"], inp["pos"]
            plan = build_plan(arch, cfg, pos=pos, token=inp["token"])
            program = plan["program"]
            _require_resident(spec, program)
            run = DecodeStepRun(spec, arch, program, cfg, inp["weights"], inp["caches"], pos)
            run.launcher(function).run(run.args)
            got = run.read()
            ref_rows = {f"cache.{nm}.{layer}": src[layer][pos] for layer in range(cfg.num_layers)
                        for nm, src in (("k", inp["ref_cache"].k), ("v", inp["ref_cache"].v))}
            res = dh.compare_decode_step(got["logits"], got["token"], got["cache_rows"], inp["ref_logits"],
                                         ref_rows, family.LOGITS_RTOL, family.CACHE_RTOL, family.CACHE_ROW_RTOL)
            targets = np.asarray(program.counter_targets, dtype=np.int64)
            counters_ok = bool(np.array_equal(got["counters"].astype(np.int64), targets))
            res["counters_ok"] = counters_ok
            res["passed"] = bool(res["passed"] and counters_ok)
            checks.append({"model": model, "pos": pos, "seed": r, **res})
    return checks


def _random_caches(cfg, pos: int, seed: int) -> dict:
    """bf16 K/V caches with random rows [0, pos) (never time attention on zeros)."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    out = {}
    for layer in range(cfg.num_layers):
        for nm in ("k", "v"):
            arr = np.zeros((cfg.max_seq_len, cfg.kv_dim), dtype=ml_dtypes.bfloat16)
            arr[:pos] = rng.standard_normal((pos, cfg.kv_dim), dtype=np.float32).astype(ml_dtypes.bfloat16)
            out[f"cache.{nm}.{layer}"] = arr
    return out


def bench_weights(cfg, seed: int = 0, pool_size: int = 1 << 22) -> dict:
    """Random-valued bf16 weights for timing, fast: each tensor repeats a seeded pool of
    normal draws scaled as ``validation.weights.random_weights`` scales them (that function
    draws all 1.2 B values of Llama-3.2-1B, ~30 s of host time on a device lease). The
    step's timing depends on the bytes, not on the values, as long as they are not zeros."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    pool = rng.standard_normal(pool_size, dtype=np.float32)
    out = {}
    for name, shape in cfg.weight_shapes().items():
        if name.endswith("norm.weight"):
            scaled = 1.0 + 0.1 * pool
        elif name == "model.embed_tokens.weight":
            scaled = pool
        else:
            scaled = pool / np.float32(np.sqrt(shape[1]))
        start = int(rng.integers(0, pool_size))
        part = np.roll(scaled, -start).astype(ml_dtypes.bfloat16)
        out[name] = np.resize(part, int(np.prod(shape))).reshape(shape)
    return out


def bench_megakernel(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    """µs per decode step of the compiled model (random weights), achieved bandwidth
    against the plan's HBM bytes, beside a device-to-device copy (the bandwidth
    ceiling) and the plan's predicted latency."""
    from porter.megakernel.plan import build_plan
    from porter.validation import baselines
    from porter.validation.model_config import load_model_config

    cfg = load_model_config(spec.config["model"])
    weights = bench_weights(cfg, seed=0)
    function = load_kernel(spec, arch)
    rows = []
    for pos in shapes or MEGAKERNEL_BENCH_POS:
        if not 0 < pos < cfg.max_seq_len:
            raise PorterError(f"{spec.name}: decode position {pos} must be in 1..{cfg.max_seq_len - 1} "
                              f"({cfg.name} max_seq_len)")
        plan = build_plan(arch, cfg, pos=pos, token=1)
        program = plan["program"]
        _require_resident(spec, program)
        run = DecodeStepRun(spec, arch, program, cfg, weights, _random_caches(cfg, pos, seed=pos), pos)
        launch = run.launcher(function)
        stats = dh.time_launches(lambda i: launch(run.args), dh.DriverEvents(), warmup=3, reps=20,
                                 before=lambda i: run.reset_counters())
        got = run.read()
        counters_ok = bool(np.array_equal(got["counters"].astype(np.int64),
                                          np.asarray(program.counter_targets, dtype=np.int64)))
        logits_ok = bool(np.isfinite(got["logits"].astype(np.float64)).all())
        token_ok = got["token"] == int(np.argmax(got["logits"].astype(np.float64)))
        us = stats["median_ms"] * 1e3
        achieved = dh.rate(plan["hbm_bytes"], stats)
        row = {"family": "megakernel", "name": spec.name, "shape": {"model": cfg.name, "pos": pos},
               "time": stats, "us_per_step": us, "hbm_bytes": plan["hbm_bytes"],
               "achieved_gb_s": achieved / 1e9,
               "pct_of_peak_bandwidth": 100.0 * achieved / arch.hbm_bandwidth_bytes_per_s,
               "predicted_latency_us": plan["predicted_latency_us"], "memory_floor_us": plan["memory_floor_us"],
               "spot_check": {"counters_ok": counters_ok, "logits_finite": logits_ok, "token_is_argmax": token_ok,
                              "passed": counters_ok and logits_ok and token_ok},
               "note": "timed region excludes the counter reset (enqueued before each start event)"}
        if baseline:
            copy = baselines.copy_bandwidth(plan["hbm_bytes"])
            row["baseline"] = copy
            if "bytes_per_s" in copy:
                row["pct_of_copy_bandwidth"] = 100.0 * achieved / copy["bytes_per_s"]
                row["copy_floor_us"] = plan["hbm_bytes"] / copy["bytes_per_s"] * 1e6
        rows.append(row)
        del run
    return rows


# ---- shared row helpers and dispatch ---------------------------------------------------------

def roofline_tflops(flops: float, min_bytes: float, arch, peak_key: str) -> float | None:
    """The descriptor's attainable rate for this problem: min(peak, intensity x HBM bandwidth),
    with the fewest bytes the problem must move (each input read once, each output written once)."""
    peak = (getattr(arch, "peak_tflops", None) or {}).get(peak_key)
    if not peak:
        return None
    bw = getattr(arch, "hbm_bandwidth_bytes_per_s", 0) or 0
    return min(peak, flops / min_bytes * bw / 1e12) if bw and min_bytes > 0 else peak


def _rate_row(family: str, spec, shape, flops: float, stats: dict, arch, peak_key: str, rotation: str,
              min_bytes: float = 0.0) -> dict:
    tflops = dh.rate(flops, stats) / 1e12
    peak = (getattr(arch, "peak_tflops", None) or {}).get(peak_key)
    roof = roofline_tflops(flops, min_bytes, arch, peak_key)
    return {"family": family, "name": spec.name, "shape": shape, "flops": flops, "min_bytes": min_bytes,
            "time": stats, "tflops": tflops, "peak_tflops": peak,
            "pct_of_peak": 100.0 * tflops / peak if peak else None,
            "roofline_tflops": roof, "pct_of_roofline": 100.0 * tflops / roof if roof else None,
            "rotation": rotation}


def _relate(row: dict) -> None:
    """% of baseline where the baseline ran (it reports TFLOP/s from the same FLOP count)."""
    base = row.get("baseline") or {}
    if base.get("time"):
        base["tflops"] = dh.rate(row["flops"], base["time"]) / 1e12
        row["pct_of_baseline"] = 100.0 * row["tflops"] / base["tflops"]
        row["beyond_noise"] = dh.distinguishable(row["time"], base["time"])


_VALIDATE = {"gemm": validate_gemm, "attention": validate_attention, "megakernel": validate_megakernel}
_BENCH = {"gemm": bench_gemm, "attention": bench_attention, "megakernel": bench_megakernel}


def validate_family(spec, arch, shapes=None, seeds: int = 2) -> list[dict]:
    if spec.family not in _VALIDATE:
        raise PorterError(f"{spec.name}: no device validation for family {spec.family!r}")
    return _VALIDATE[spec.family](spec, arch, shapes, seeds)


def bench_family(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    if spec.family not in _BENCH:
        raise PorterError(f"{spec.name}: no benchmark for family {spec.family!r}")
    return _BENCH[spec.family](spec, arch, shapes, baseline)
