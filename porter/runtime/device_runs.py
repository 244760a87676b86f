"""Family-specific device runs for the harness: GEMM, attention, megakernel.

Each family has a ``validate_*`` (fresh inputs per shape and seed, outputs poisoned,
one launch, judged against the CPU reference) and a ``bench_*`` (inputs rotated past
the L2, warm-up, device events around every launch, median of many, the baseline
timed in the same process).

Validation does every device operation through a ``porter.runtime.device.Device``
(``device=``; default: ``get_device()``, the CUDA device unless ``PORTER_DEVICE`` says
otherwise), so the emulated device can stand behind the same host code; the run
objects (``GemmRun``, ``AttentionRun``, ``DecodeStepRun``) take it too and keep the
kernel arguments as (ctype, value) pairs. ``validate_*(..., log=callable)`` reports
each launch before it starts and each check as it finishes. Benchmarks time CUDA
launches only: they enqueue through ``Launcher`` without a host wait so timed launches
run back to back.

Kernels come from the device's ``load``: on a GPU, from the prepared cubins when
``PORTER_CUBIN_DIR`` names a folder written by ``benchmarks/device_check.py prepare``
(``porter.runtime.cubins``), else built here.
"""
from __future__ import annotations

import numpy as np

from porter.errors import PorterError
from porter.runtime import timing
from porter.validation import device_harness as dh

from porter.runtime.cubins import CUBIN_DIR_ENV, MANIFEST  # noqa: E402,F401  (prepared cubins)

GEMM_VALIDATE_SHAPES = ((256, 256, 256), (512, 768, 512), (768, 512, 1280), (2048, 1024, 768),
                        (4096, 4096, 1024))
GEMM_BENCH_SHAPES = ((8192, 8192, 8192),)
# (batch, heads_q, heads_kv, seq_q, seq_k): tails, GQA, Sq != Sk, a multi-tile case.
ATTENTION_VALIDATE_SHAPES = ((1, 2, 2, 128, 128), (2, 4, 1, 192, 320), (1, 4, 2, 300, 300),
                             (1, 2, 1, 160, 100), (2, 8, 2, 1024, 1024))
ATTENTION_BENCH_SHAPES = ((4, 16, 16, 4096, 4096), (4, 16, 16, 16384, 16384))
# causal with seq_q >> seq_k: bottom-right alignment leaves the first rows without a key
ATTENTION_CAUSAL_WIDE = (1, 2, 1, 1024, 96)
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
# Validation goes through a porter.runtime.device.Device (a GPU, or the emulated device);
# the benchmarks below time CUDA launches and use the driver through Launcher.

def _device(device=None):
    from porter.runtime.device import get_device

    return device if device is not None else get_device()


def source_digest(spec, arch) -> str:
    """sha256 of the rendered CUDA source (recorded per kernel in the prepared manifest)."""
    import hashlib

    from porter.kernels import family_module

    return hashlib.sha256(family_module(spec.family).render(spec, arch).encode()).hexdigest()


def load_kernel(spec, arch, device=None):
    """``spec.entry`` loaded on ``device`` (default: the CUDA device): prepared cubins when
    PORTER_CUBIN_DIR names them, else built here."""
    return _device(device).load(spec, arch)


def _handle(function):
    """The driver handle of a CudaFunction (or a bare handle)."""
    return getattr(function, "handle", function)


class Launcher:
    """Enqueue a CUDA kernel on the legacy default stream without waiting for it (timing)."""

    def __init__(self, function, grid, block, smem_bytes: int, cluster=(1, 1, 1),
                 cooperative: bool = False):
        from porter.runtime import driver

        self.driver, self.name = driver, getattr(function, "name", "kernel")
        self.function = _handle(function)
        driver.set_function_attributes(self.function, smem_bytes, cluster)
        self.shape = (grid, block, smem_bytes, cluster, cooperative)
        self.config, self.note = None, ""

    def __call__(self, params) -> None:
        """``params``: a driver.KernelParams (pack once, launch many times). The first launch
        settles the configuration (driver.enqueue_launch); later ones reuse it."""
        if self.config is not None:
            self.driver.enqueue(self.function, self.config, params, f"cuLaunchKernelEx({self.name})")
            return
        grid, block, smem_bytes, cluster, cooperative = self.shape
        self.note = self.driver.enqueue_launch(self.function, grid, block, smem_bytes, cluster, cooperative,
                                               params, self.name)
        if self.driver._key(self.function) in self.driver._COMPILED_CLUSTER:
            cluster = (1, 1, 1)
        self.config = self.driver.launch_config(grid, block, smem_bytes, cluster, cooperative)

    def run(self, params, timeout_s: float | None = None) -> None:
        """Launch and wait (with a watchdog when ``timeout_s`` is given); a failed kernel raises here, named."""
        self(params)
        self.driver.wait(f"{self.name} execution", timeout_s)


def packed(args: list):
    """driver.KernelParams for (ctype, value) pairs (CUDA launches only)."""
    from porter.runtime import driver

    return driver.KernelParams([driver.pack_arg(ctype, value) for ctype, value in args])


def upload(arr: np.ndarray, device=None):
    return _device(device).upload(arr)


def download(buf, shape, dtype, device=None) -> np.ndarray:
    return _device(device).download(buf, shape, dtype)


def poison(buf, nbytes: int | None = None, offset: int = 0, device=None) -> None:
    _device(device).memset(buf, dh.POISON_BYTE, nbytes, offset)


def _cuda():
    """The CUDA device (benchmarks time CUDA launches only)."""
    from porter.runtime.device import get_device

    return get_device("cuda")


def _emit(log, **event) -> None:
    """Tell the caller (a device-check child streaming its progress) what happens now."""
    if log is not None:
        log(event)


def _device_tensor(buf, shape, dtype_name: str, itemsize: int):
    """A TensorInfo for a C-contiguous device buffer (what plan_gemm reads)."""
    from porter.runtime.arrays import TensorInfo

    strides, acc = [], itemsize
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return TensorInfo(ptr=buf.ptr, shape=tuple(shape), strides=tuple(reversed(strides)), dtype=dtype_name,
                      itemsize=itemsize, device="cuda", keepalive=buf)


def guarded_baseline(fn, *args, **kwargs) -> dict:
    """A vendor baseline that cannot cost porter's own measurement: an exception in it
    (a torch error, a backend torch lacks) is the baseline skipped with the reason. A
    porter kernel's hang or fault (the context lost) still ends the benchmark."""
    from porter.runtime.driver import KernelFault, KernelHang

    try:
        return fn(*args, **kwargs)
    except (KernelFault, KernelHang):
        raise
    except Exception as exc:  # noqa: BLE001 - whatever the baseline raises, porter's numbers stand
        name = getattr(fn, "__name__", "baseline")
        return {"name": name, "skipped": f"the baseline raised {type(exc).__name__}: {str(exc)[:200]}",
                "raised": type(exc).__name__}


# ---- GEMM ---------------------------------------------------------------------------------

def _gemm_variant(spec) -> tuple[str, bool]:
    return spec.variant.split(".", 1)[1], spec.name.endswith(".pair")


def _policy_key(spec) -> str:
    """The tolerance policy a GEMM spec is judged by: its variant's, or the fast-accumulation
    one where the config accumulates fp8 in the wgmma accumulator (tolerance.policy_key)."""
    from porter.validation import tolerance

    return tolerance.policy_key(_gemm_variant(spec)[0], spec.config.get("accumulation"))


def _fit(shape, multiples) -> tuple[int, ...]:
    return tuple(max(m, -(-v // m) * m) for v, m in zip(shape, multiples))


def gemm_plan(spec, arch, inp: dh.GemmInputs, a_buf, b_buf, c_buf, max_ctas: int | None = None):
    """porter.runtime's launch plan for ``inp`` in device buffers (anything with ``ptr``):
    shapes, tiles, tensor maps and grid are all checked here, before any launch."""
    from porter.runtime.gemm import plan_gemm

    variant, pair = _gemm_variant(spec)
    plan = plan_gemm(_device_tensor(a_buf, inp.a.shape, inp.a.dtype.name, inp.a.itemsize),
                     _device_tensor(b_buf, inp.b.shape, inp.b.dtype.name, inp.b.itemsize),
                     arch, variant=variant, pair=pair, scales=inp.scales,
                     scale_a=inp.scale_a, scale_b=inp.scale_b,
                     out=_device_tensor(c_buf, (inp.m, inp.n), "bfloat16", 2), max_ctas=max_ctas, spec=spec)
    if plan.spec.name != spec.name or plan.spec.entry != spec.entry:
        raise PorterError(f"{spec.name}: the runtime planned {plan.spec.name} ({plan.spec.entry}) instead")
    return plan


class PackedArgs:
    """A run keeps its kernel arguments as (ctype, value) pairs (``args``, what every device
    takes); CUDA launches of the benchmarks want them packed, made once (``params``)."""

    _packed = None

    @property
    def params(self):
        if self._packed is None:
            self._packed = packed(self.args)
        return self._packed


class GemmRun(PackedArgs):
    """One input set on a device: operands, C and the kernel arguments as (ctype, value)."""

    def __init__(self, spec, arch, inp: dh.GemmInputs, device=None):
        self.device = dev = _device(device)
        self.inp, self.bufs = inp, []
        a_buf, b_buf = dev.upload(inp.a), dev.upload(inp.b)
        self.c_buf = dev.alloc(inp.m * inp.n * 2)
        self.bufs += [a_buf, b_buf, self.c_buf]
        plan = gemm_plan(spec, arch, inp, a_buf, b_buf, self.c_buf, max_ctas=getattr(dev, "sm_count", None))
        # Operands under their tensor map's name, or as plain pointers (a, b, sfa, sfb) for a
        # kernel that takes no map for them (the mma_sync path's cp.async / scale pointers).
        addresses = {("tma_a" if "tma_a" in plan.maps else "a"): a_buf.ptr,
                     ("tma_b" if "tma_b" in plan.maps else "b"): b_buf.ptr}
        for param, flat in plan.host_scales.items():
            buf = dev.upload(flat)
            self.bufs.append(buf)
            addresses[param] = buf.ptr
        values = {"c": self.c_buf.ptr, "m": plan.m, "n": plan.n, "k": plan.k,
                  "scale_a": plan.scale_a, "scale_b": plan.scale_b}
        values.update({p: addresses[p] for p, ctype in plan.params if ctype.endswith("*") and p in addresses})
        if "tma_c" in plan.maps:
            addresses["tma_c"] = self.c_buf.ptr      # epilogue=tma: C's map over the output buffer
        for param, tmap in plan.maps.items():
            values[param] = dev.encode_tensor_map(tmap, addresses[param])
        missing = [p for p, _ in plan.params if p not in values]
        if missing:
            raise PorterError(f"{spec.name}: kernel parameters without a value: {', '.join(missing)}")
        self.args = [(ctype, values[p]) for p, ctype in plan.params]
        self.plan, self.spec = plan, spec


    def launch(self, function) -> None:
        p = self.plan
        self.device.launch(function, p.grid, p.block, p.smem_bytes, p.cluster, self.args)

    def launcher(self, function) -> Launcher:
        p = self.plan
        return Launcher(function, p.grid, p.block, p.smem_bytes, p.cluster)

    def result(self) -> np.ndarray:
        import ml_dtypes

        return self.device.download(self.c_buf, (self.inp.m, self.inp.n), ml_dtypes.bfloat16)


def gemm_shapes(spec) -> list[tuple[int, int, int]]:
    """The validation shapes for ``spec``: the smallest first (a smoke launch that shows a
    launch-configuration problem in seconds), a single k-block (K = one 128-byte k-tile:
    64 bf16, 128 fp8), then the tails and multi-wave cases, and fp8 at K = 16384."""
    from porter.kernels import gemm

    mult = gemm.shape_multiples(spec)
    variant, _ = _gemm_variant(spec)
    k_block = max(mult[2], 128 if variant in ("fp8", "mxfp8") else 64, 256 if variant == "nvfp4" else 0)
    shapes = [_fit((1, 1, 1), mult), _fit((256, 256, k_block), mult)]
    shapes += [_fit(s, mult) for s in GEMM_VALIDATE_SHAPES]
    if variant == "fp8":
        shapes.append(_fit((256, 256, 16384), mult))
    out = []
    for s in shapes:
        if s not in out:
            out.append(s)
    return out


def validate_gemm(spec, arch, shapes=None, seeds: int = 2, device=None, log=None) -> list[dict]:
    """Each shape x seed: fresh inputs, C poisoned, one launch, judged against fp64."""
    variant, _ = _gemm_variant(spec)
    dev = _device(device)
    function = dev.load(spec, arch)
    checks = []
    for shape in shapes or gemm_shapes(spec):
        for r in range(seeds):
            seed = dh.seed_for(shape, r)
            run = GemmRun(spec, arch, dh.gemm_inputs(variant, *shape, seed), dev)
            poison(run.c_buf, device=dev)
            _emit(log, event="launch", kernel=spec.name, shape=list(shape), seed=seed)
            run.launch(function)
            ref_same, ref_unq = run.inp.references()
            res = dh.compare_gemm(_policy_key(spec), run.result(), ref_same, ref_unq)
            check = {"shape": list(shape), "seed": seed, **res}
            _emit(log, event="check", kernel=spec.name, check=check)
            checks.append(check)
    return checks


def bench_gemm(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    from porter.runtime import baselines

    variant, _ = _gemm_variant(spec)
    function = load_kernel(spec, arch, _cuda())
    rows = []
    for shape in shapes or GEMM_BENCH_SHAPES:
        first = dh.bench_gemm_inputs(variant, *shape, dh.seed_for(shape, 0, base=7))
        sets = timing.rotation_sets(first.nbytes, arch.l2_bytes)
        inputs = [first] + [dh.bench_gemm_inputs(variant, *shape, dh.seed_for(shape, i, base=7))
                            for i in range(1, sets)]
        runs = [GemmRun(spec, arch, inp, _cuda()) for inp in inputs]
        launch = runs[0].launcher(function)
        events = timing.DriverEvents()
        flush = l2_flush(arch, sets, first.nbytes)
        # porter, then the baseline, then porter again: the same process, the same inputs,
        # and drift between the rounds shows in stats["drift"]
        stats = timing.time_launches(lambda i: launch(runs[i].params), events, sets=sets, before=flush)
        # the timed kernel must also be right: C poisoned, one more launch, judged on a sample of
        # rows; before the baseline, so a baseline that breaks the context cannot cost porter's row
        poison(runs[0].c_buf, device=_cuda())
        launch.run(runs[0].params, timeout_s=_cuda().launch_timeout_s)
        check = _gemm_spot_check(variant, runs[0])
        base = guarded_baseline(baselines.gemm_baseline, variant, inputs, sets, before=flush) if baseline else None
        if base is not None and base.get("time"):
            stats = timing.merge_timings(stats, timing.time_launches(lambda i: launch(runs[i].params), events, sets=sets,
                                                             before=flush))
        flops = 2.0 * shape[0] * shape[1] * shape[2]
        row = _rate_row("gemm", spec, list(shape), flops, stats, arch, PEAK_KEY[variant],
                        _rotation(sets, first.nbytes, arch, flush), min_bytes=first.nbytes)
        row["spot_check"] = check
        if base is not None:
            row["baseline"] = base
            _relate(row)
        rows.append(row)
        del runs
        if flush is not None:
            flush.free()
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
    return dh.compare_gemm(_policy_key(run.spec), out[pick], ref_same, ref_unq)


# ---- attention ---------------------------------------------------------------------------------

def attention_plan(spec, arch, q, k, v, max_ctas: int | None = None) -> tuple[dict, dict, dict]:
    """(launch plan, host q/k/v as padded 2-D views, checked tensor maps): no GPU needed.
    ``max_ctas``: the device's SM count (the persistent grid never exceeds it)."""
    from porter.kernels import attention as family

    b, hq, hkv, sq, sk, d = family.validate_inputs(q, k, v)
    if d != spec.config["head_dim"]:
        raise PorterError(f"{spec.name}: inputs have head dim {d}, the kernel {spec.config['head_dim']}")
    plan = family.launch_plan(spec, arch, b, hq, hkv, sq, sk, max_ctas=max_ctas)
    # tiny problems get zero rows up to one TMA box (the kernel masks them): the family's rule
    # pointer-staged mainloops (cp.async) take q / k / v unpadded: family.host_views
    host = family.host_views(plan, q, k, v)
    return plan, host, family.tensor_maps(spec, plan, d * 2)


class AttentionRun(PackedArgs):
    """One q, k, v set on a device: O and lse buffers and the kernel arguments."""

    def __init__(self, spec, arch, q, k, v, device=None):
        import ml_dtypes

        self.device = dev = _device(device)
        self.plan, host, maps = attention_plan(spec, arch, q, k, v, max_ctas=getattr(dev, "sm_count", None))
        self.bufs = {p: dev.upload(x) for p, x in host.items()}
        self.o_shape, self.lse_shape = self.plan["outputs"]["o"], self.plan["outputs"]["lse"]
        self.o_buf = dev.alloc(int(np.prod(self.o_shape)) * 2)
        self.lse_buf = dev.alloc(int(np.prod(self.lse_shape)) * 4)
        values = {"o": self.o_buf.ptr, "lse": self.lse_buf.ptr, **self.plan["scalars"]}
        for p in self.plan["tensor_maps"]:
            out = self.plan.get("output_maps", {}).get(p)    # o_store=tma: O's map over the output buffer
            values[p] = dev.encode_tensor_map(maps[p], values[out] if out else self.bufs[p].ptr)
        for p in self.plan.get("pointers", ()):
            values[p] = self.bufs[p].ptr
        self.args = [(ctype, values[p]) for p, ctype in spec.config["params"]]
        self.cluster = tuple(spec.cluster)
        self.nbytes = sum(x.nbytes for x in host.values()) + self.o_buf.nbytes + self.lse_buf.nbytes
        self.bf16 = ml_dtypes.bfloat16


    def launch(self, function) -> None:
        self.device.launch(function, self.plan["grid"][0], self.plan["block"][0], self.plan["smem_bytes"],
                           self.cluster, self.args)

    def launcher(self, function, spec=None) -> Launcher:
        return Launcher(function, self.plan["grid"][0], self.plan["block"][0], self.plan["smem_bytes"], self.cluster)

    def poison_outputs(self) -> None:
        poison(self.o_buf, device=self.device)
        poison(self.lse_buf, device=self.device)

    def result(self):
        return (self.device.download(self.o_buf, self.o_shape, self.bf16),
                self.device.download(self.lse_buf, self.lse_shape, np.float32))


def attention_flops(b: int, hq: int, sq: int, sk: int, d: int, causal: bool) -> float:
    """4 B Hq D x (query, key) pairs computed: all Sq Sk, or the bottom-right causal ones."""
    if causal:
        i = np.arange(sq)
        pairs = float(np.clip(i + (sk - sq) + 1, 0, sk).sum())
    else:
        pairs = float(sq) * sk
    return 4.0 * b * hq * d * pairs


def attention_shapes(spec) -> list[tuple[int, int, int, int, int]]:
    """The validation shapes: the smallest first (smoke), then the defaults, and for a
    causal kernel seq_q much larger than seq_k (rows that see no key at all)."""
    shapes = [(1, 1, 1, 64, 64), *ATTENTION_VALIDATE_SHAPES]
    if spec.config.get("causal"):
        shapes.append(ATTENTION_CAUSAL_WIDE)
    return shapes


def validate_attention(spec, arch, shapes=None, seeds: int = 2, device=None, log=None) -> list[dict]:
    from porter.validation.reference_attention import attention_same_precision, reference_attention

    d, causal = spec.config["head_dim"], bool(spec.config["causal"])
    dev = _device(device)
    function = dev.load(spec, arch)
    checks = []
    for shape in shapes or attention_shapes(spec):
        b, hq, hkv, sq, sk = shape
        for r in range(seeds):
            seed = dh.seed_for((*shape, d, causal), r)
            q, k, v = dh.attention_inputs(b, hq, hkv, sq, sk, d, seed)
            run = AttentionRun(spec, arch, q, k, v, dev)
            run.poison_outputs()
            where = {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk, "head_dim": d}
            _emit(log, event="launch", kernel=spec.name, shape=where, seed=seed)
            run.launch(function)
            o, lse = run.result()
            q64, k64, v64 = (x.astype(np.float64) for x in (q, k, v))
            ref, lse_ref = reference_attention(q64, k64, v64, causal)
            same, _ = attention_same_precision(q64, k64, v64, causal)
            res = dh.compare_attention(o, lse, ref, lse_ref, same)
            check = {"shape": where, "causal": causal, "seed": seed, **res}
            _emit(log, event="check", kernel=spec.name, check=check)
            checks.append(check)
    return checks


BENCH_POOL = 1 << 22


def _bench_qkv(b, hq, hkv, sq, sk, d, seed):
    """Random bf16 q, k, v drawn in fp32 (the bench shapes are too big for fp64 draws); a
    tensor larger than BENCH_POOL values repeats a seeded pool of normal draws from a
    random offset (drawing 134 M values takes seconds of a device lease; the timing
    depends on the bytes and the softmax's spread, not on fresh values everywhere)."""
    import ml_dtypes

    rng = np.random.default_rng(seed)
    pool = rng.standard_normal(BENCH_POOL, dtype=np.float32).astype(ml_dtypes.bfloat16)

    def draw(shape):
        n = int(np.prod(shape))
        if n <= BENCH_POOL:
            return rng.standard_normal(shape, dtype=np.float32).astype(ml_dtypes.bfloat16)
        return np.resize(np.roll(pool, -int(rng.integers(0, BENCH_POOL))), shape)

    return tuple(draw(s) for s in ((b, hq, sq, d), (b, hkv, sk, d), (b, hkv, sk, d)))


def bench_attention(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    from porter.runtime import baselines

    d, causal = spec.config["head_dim"], bool(spec.config["causal"])
    function = load_kernel(spec, arch, _cuda())
    rows = []
    for shape in shapes or ATTENTION_BENCH_SHAPES:
        b, hq, hkv, sq, sk = shape
        first = _bench_qkv(b, hq, hkv, sq, sk, d, dh.seed_for(shape, 0, base=7))
        per_set = sum(x.nbytes for x in first) + first[0].nbytes + b * hq * sq * 4    # q, k, v, O, lse
        sets = timing.rotation_sets(per_set, arch.l2_bytes)
        qkvs = [first] + [_bench_qkv(b, hq, hkv, sq, sk, d, dh.seed_for(shape, i, base=7)) for i in range(1, sets)]
        runs = [AttentionRun(spec, arch, *qkv, device=_cuda()) for qkv in qkvs]
        launch = runs[0].launcher(function, spec)
        events = timing.DriverEvents()
        flush = l2_flush(arch, sets, per_set)
        stats = timing.time_launches(lambda i: launch(runs[i].params), events, sets=sets, before=flush)
        # O and lse poisoned, one more launch: every O element written and finite; lse written
        # (-inf is legal for a row that sees no key); before the baseline, as for GEMM
        runs[0].poison_outputs()
        launch.run(runs[0].params, timeout_s=_cuda().launch_timeout_s)
        o, lse = runs[0].result()
        w_o, w_lse = dh.written_check(o, "O"), dh.written_check(lse, "lse")
        spot = {"written": [w_o, w_lse],
                "passed": w_o["passed"] and w_o["nonfinite_written"] == 0 and w_lse["passed"]}
        base = guarded_baseline(baselines.attention_baseline, qkvs, causal, sets, before=flush) if baseline else None
        if base is not None and base.get("time"):
            stats = timing.merge_timings(stats, timing.time_launches(lambda i: launch(runs[i].params), events, sets=sets,
                                                             before=flush))
        row = _rate_row("attention", spec, {"b": b, "hq": hq, "hkv": hkv, "sq": sq, "sk": sk, "head_dim": d},
                        attention_flops(b, hq, sq, sk, d, causal), stats, arch, "bf16",
                        _rotation(sets, per_set, arch, flush), min_bytes=per_set)
        row["causal"], row["spot_check"] = causal, spot
        if base is not None:
            row["baseline"] = base
            _relate(row)
        rows.append(row)
        del runs
        if flush is not None:
            flush.free()
    return rows


class L2Flush:
    """Before each timed launch, overwrite a buffer twice the L2 (cuMemsetD8Async on the
    legacy stream, ahead of the start event): what the previous launch left in the L2 is
    evicted when the input sets alone cannot rotate past it."""

    def __init__(self, nbytes: int):
        from porter.runtime import driver

        self.driver, self.nbytes = driver, int(nbytes)
        self.buf = driver.DeviceBuffer(self.nbytes)

    def __call__(self, i: int) -> None:
        drv = self.driver.bindings()
        self.driver.check(self.driver.call(drv.cuMemsetD8Async, self.buf.ptr, (i * 37) & 0xFF, self.nbytes,
                                           drv.CUstream(0), what="cuMemsetD8Async"), "cuMemsetD8Async (L2 flush)")

    def free(self) -> None:
        self.buf.free()


def l2_flush(arch, sets: int, bytes_per_set: int) -> L2Flush | None:
    """An L2Flush when ``sets`` input sets together stay under ROTATE_L2_FACTOR x L2, else None."""
    l2 = int(getattr(arch, "l2_bytes", 0) or 0)
    if l2 <= 0 or sets * bytes_per_set >= timing.ROTATE_L2_FACTOR * l2:
        return None
    return L2Flush(2 * l2)


def _rotation(sets: int, bytes_per_set: int, arch, flush) -> str:
    note = timing.rotation_note(sets, bytes_per_set, arch.l2_bytes)
    if flush is not None:
        note += f"; L2 flushed before each timed launch ({flush.nbytes / 2**20:.0f} MiB memset, untimed)"
    return note


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


class DecodeStepRun(PackedArgs):
    """One decode step's arena, tables, instructions and counters on a device."""

    def __init__(self, spec, arch, program, cfg, weights, caches, pos: int, device=None):
        from porter.kernels import megakernel as family

        self.device = dev = _device(device)
        self.program, self.pos = program, pos
        self.launch_cfg = family.launch_config(spec, program)
        self.arena = arena = poisoned_arena(program, cfg, weights, caches, pos)
        self.d_arena = dev.upload(arena)
        recs = family.tensor_table_records(program, [self.d_arena.ptr + t.offset for t in program.tensors])
        self.d_tensors = dev.upload(recs)
        self.d_instr = dev.upload(np.ascontiguousarray(program.instructions, dtype=np.int32))
        self.n_counters = max(1, self.launch_cfg["n_counters"])
        self.d_counters = dev.upload(np.zeros(self.n_counters, dtype=np.int32))
        values = {"instructions": self.d_instr.ptr, "queue_len": self.launch_cfg["queue_len"],
                  "counters": self.d_counters.ptr, "tensors": self.d_tensors.ptr}
        self.args = [(ctype, values[name]) for name, ctype in family.PARAMS]
        self.cooperative = bool(self.launch_cfg.get("cooperative", False))


    def launch(self, function) -> None:
        c = self.launch_cfg
        self.device.launch(function, c["grid"][0], c["block"][0], c["smem_bytes"], (1, 1, 1), self.args,
                           cooperative=self.cooperative)

    def launcher(self, function) -> Launcher:
        c = self.launch_cfg
        return Launcher(function, c["grid"][0], c["block"][0], c["smem_bytes"], cooperative=self.cooperative)

    def repoison(self) -> None:
        """Copy the poisoned host arena over the device one again (CUDA bench: before the judged step)."""
        self.d_arena.copy_from_host(self.arena.ctypes.data, self.arena.nbytes)

    def reset_counters(self) -> None:
        """Counters start each step at zero (the kernel's contract), enqueued on stream 0 (CUDA bench)."""
        from porter.runtime import driver

        drv = driver.bindings()
        driver.check(driver.call(drv.cuMemsetD32Async, self.d_counters.ptr, 0, self.n_counters, drv.CUstream(0),
                                 what="cuMemsetD32Async"), "cuMemsetD32Async (counters)")

    def read(self) -> dict:
        from porter.kernels import megakernel as family

        arena = self.device.download(self.d_arena, self.arena.shape, np.uint8)
        counters = self.device.download(self.d_counters, (self.n_counters,), np.int32)

        def tensor(name):
            t = self.program.tensor(name)
            return arena[t.offset:t.offset + t.nbytes].view(family._np_dtype(t.dtype)).reshape(t.shape)

        caches = {t.name: tensor(t.name)[self.pos] for t in self.program.tensors if t.kind == "cache"}
        return {"logits": tensor("buf.logits").copy(), "token": int(tensor("out.token").reshape(-1)[0]),
                "counters": counters[:self.launch_cfg["n_counters"]], "cache_rows": caches}


def _require_resident(spec, program, device=None) -> None:
    sm_count = _device(device).sm_count
    grid = program.instructions.shape[0]
    if sm_count < grid:
        raise PorterError(f"{spec.name}: {grid} persistent CTAs wait on each other and need as many SMs; "
                          f"the device has {sm_count}")


def _planned_hw(arch, device):
    """The figures the step is planned for: the descriptor's, on as many queues (persistent
    CTAs) as the device has SMs when it has fewer (a smaller part, or the emulated device)."""
    import dataclasses

    from porter.megakernel.hw import HwFigures

    hw = HwFigures.of(arch)
    sm = getattr(device, "sm_count", None)
    return dataclasses.replace(hw, sm_count=sm) if isinstance(sm, int) and 0 < sm < hw.sm_count else hw


def validate_megakernel(spec, arch, shapes=None, seeds: int = 2, device=None, log=None) -> list[dict]:
    """The planned step of the small test models on the device vs the fp64 reference
    (the kernel takes any model within its compiled maxima; the tiny ones keep the
    reference cheap)."""
    from porter.kernels import megakernel as family
    from porter.megakernel.plan import build_plan

    dev = _device(device)
    function = dev.load(spec, arch)
    checks = []
    for model in shapes or MEGAKERNEL_VALIDATE_MODELS:
        for r in range(seeds):
            inp = family.step_inputs(model, MEGAKERNEL_VALIDATE_POS, seed=r)
            cfg, pos = inp["cfg"], inp["pos"]
            plan = build_plan(_planned_hw(arch, dev), cfg, pos=pos, token=inp["token"])
            program = plan["program"]
            _require_resident(spec, program, dev)
            run = DecodeStepRun(spec, arch, program, cfg, inp["weights"], inp["caches"], pos, dev)
            _emit(log, event="launch", kernel=spec.name, shape={"model": model, "pos": pos}, seed=r)
            run.launch(function)
            got = run.read()
            ref_rows = {f"cache.{nm}.{layer}": src[layer][pos] for layer in range(cfg.num_layers)
                        for nm, src in (("k", inp["ref_cache"].k), ("v", inp["ref_cache"].v))}
            res = dh.compare_decode_step(got["logits"], got["token"], got["cache_rows"], inp["ref_logits"],
                                         ref_rows, family.LOGITS_RTOL, family.CACHE_RTOL, family.CACHE_ROW_RTOL)
            targets = np.asarray(program.counter_targets, dtype=np.int64)
            counters_ok = bool(np.array_equal(got["counters"].astype(np.int64), targets))
            res["counters_ok"] = counters_ok
            res["passed"] = bool(res["passed"] and counters_ok)
            check = {"model": model, "pos": pos, "seed": r, **res}
            _emit(log, event="check", kernel=spec.name, check=check)
            checks.append(check)
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
    from porter.runtime import baselines
    from porter.validation.model_config import load_model_config

    function = load_kernel(spec, arch, _cuda())
    rows, models = [], {}
    for shape in shapes or MEGAKERNEL_BENCH_POS:
        # a decode position of the kernel's model, or {"model", "pos"} (a rehearsal's small model)
        model, pos = (shape["model"], int(shape["pos"])) if isinstance(shape, dict) else (spec.config["model"], shape)
        if model not in models:
            models[model] = (lambda c: (c, bench_weights(c, seed=0)))(load_model_config(model))
        cfg, weights = models[model]
        if not 0 < pos < cfg.max_seq_len:
            raise PorterError(f"{spec.name}: decode position {pos} must be in 1..{cfg.max_seq_len - 1} "
                              f"({cfg.name} max_seq_len)")
        plan = build_plan(arch, cfg, pos=pos, token=1)
        program = plan["program"]
        _require_resident(spec, program, _cuda())
        run = DecodeStepRun(spec, arch, program, cfg, weights, _random_caches(cfg, pos, seed=pos), pos, _cuda())
        launch = run.launcher(function)
        stats = timing.time_launches(lambda i: launch(run.params), timing.DriverEvents(), warmup=3, reps=30,
                                 before=lambda i: run.reset_counters())
        # the arena poisoned again, counters reset, one more step: that step is judged
        run.repoison()
        run.reset_counters()
        launch.run(run.params, timeout_s=_cuda().launch_timeout_s)
        got = run.read()
        counters_ok = bool(np.array_equal(got["counters"].astype(np.int64),
                                          np.asarray(program.counter_targets, dtype=np.int64)))
        logits_ok = bool(np.isfinite(got["logits"].astype(np.float64)).all())
        token_ok = got["token"] == int(np.argmax(got["logits"].astype(np.float64)))
        us = stats["median_ms"] * 1e3
        achieved = timing.rate(plan["hbm_bytes"], stats)
        row = {"family": "megakernel", "name": spec.name, "shape": {"model": cfg.name, "pos": pos},
               "time": stats, "us_per_step": us, "hbm_bytes": plan["hbm_bytes"],
               "achieved_gb_s": achieved / 1e9,
               "pct_of_peak_bandwidth": 100.0 * achieved / arch.hbm_bandwidth_bytes_per_s,
               "predicted_latency_us": plan["predicted_latency_us"], "memory_floor_us": plan["memory_floor_us"],
               "spot_check": {"counters_ok": counters_ok, "logits_finite": logits_ok, "token_is_argmax": token_ok,
                              "passed": counters_ok and logits_ok and token_ok},
               "note": "timed region excludes the counter reset (enqueued before each start event)"}
        if baseline:
            copy = guarded_baseline(baselines.copy_bandwidth, plan["hbm_bytes"])
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
    tflops = timing.rate(flops, stats) / 1e12
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
        base["tflops"] = timing.rate(row["flops"], base["time"]) / 1e12
        row["pct_of_baseline"] = 100.0 * row["tflops"] / base["tflops"]
        row["beyond_noise"] = timing.distinguishable(row["time"], base["time"])


_VALIDATE = {"gemm": validate_gemm, "attention": validate_attention, "megakernel": validate_megakernel}
_BENCH = {"gemm": bench_gemm, "attention": bench_attention, "megakernel": bench_megakernel}


def validate_family(spec, arch, shapes=None, seeds: int = 2, device=None, log=None) -> list[dict]:
    if spec.family not in _VALIDATE:
        raise PorterError(f"{spec.name}: no device validation for family {spec.family!r}")
    return _VALIDATE[spec.family](spec, arch, shapes, seeds, device=device, log=log)


def bench_family(spec, arch, shapes=None, baseline: bool = True) -> list[dict]:
    if spec.family not in _BENCH:
        raise PorterError(f"{spec.name}: no benchmark for family {spec.family!r}")
    return _BENCH[spec.family](spec, arch, shapes, baseline)
