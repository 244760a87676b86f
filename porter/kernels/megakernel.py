"""Megakernel family: one persistent kernel runs a whole batch-1 Llama decode step.

The kernel (``templates/megakernel.cu.j2`` over ``kernels_src/megakernel/``) is an
interpreter for the instruction tensor of ``porter/megakernel/isa.py``: one CTA per
SM walks its queue, waits on completion counters, runs each opcode and signals.
What it runs is data made by ``porter.megakernel.plan.build_plan`` for the arch;
what this module decides from the descriptor is the CTA's shape: warp roles,
the shared-memory page ring that streams weights (page count from
``smem_per_block_bytes``), bulk copies where the arch has TMA (cp.async
otherwise), and the grid (``sm_count`` queues).

``numerics`` runs the planned program for the tiny model through the Python VM
(``validation/megakernel_vm.py``) against the fp64 reference, in several SM
interleavings, and returns the check with the plan summary.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from porter.compile import render as renderlib
from porter.errors import PorterError
from porter.kernels.base import KernelSpec, SassRule, Unsupported, no_spills
from porter.megakernel import isa
from porter.megakernel.hw import PAGE_BYTES

FAMILY = "megakernel"
TEMPLATE = "megakernel.cu.j2"

# variant -> the model shape it is compiled for (validation/models/<name>.yaml)
MODELS = {"llama-decode": "llama-3.2-1b"}
NUMERICS_MODEL = "tiny"          # small enough for the VM and the fp64 reference in a test

LOADER_WARPS = 1                 # one warp issues every page copy; its lanes mostly idle
# Each page is read by one compute warp: 8 warps hold at most 8 of the ~12 pages
# while the rest are in flight from HBM. More warps would leave fewer pages in
# flight and lengthen the cross-warp reductions (norms, argmax, attention merge).
MAX_COMPUTE_WARPS = 8
# Registers per thread the kernel is planned for: the attention partial keeps q, o, m, l
# of a group in registers, and a matvec keeps its input vector's first 8 x 8 floats per
# lane and reduces 4 rows at once (matvec.cuh kXRegVecs, dot_rows; NVRTC: 164 registers
# on sm_90a, 167 on sm_100a, no spills). ptxas held the 288-thread block at 168 registers
# and spilled 4-8 B at one more live value on sm_100a (matvec.cuh kStageVecs and
# attention.cuh say which forms did), so 168 is the plan's figure.
REGS_PER_THREAD_BUDGET = 168
Y_ROWS = 128                     # matvec row window (results kept in shared memory)
MAX_PAGES = 32                   # mbarrier slots reserved in the layout
# Every CTA carries a 1 KiB system-reserved shared-memory section (sm_90, sm_100; a
# 1024-byte static section in every cubin). Whether it counts against the per-block opt-in
# limit is not settled (shared/ARCH_FACTS.md, "Host side"): until a device check settles it
# (run_on_device records the function's attributes after setting them), the plan counts it
# against the limit AND keeps a further stated margin, so it never asks for the last KiB.
SYSTEM_RESERVE_BYTES = 1024
SMEM_MARGIN_BYTES = 1024
NEEDS = ("mbarrier",)            # the page ring's full/empty handshake; everything else has a fallback

# Kernel parameters, in launch order.
PARAMS: tuple[tuple[str, str], ...] = (
    ("instructions", "const int*"),          # int32 [grid, queue_len, WORDS]
    ("queue_len", "int"),
    ("counters", "int*"),                    # int32 [n_counters], zeroed before each step
    ("tensors", "const TensorDesc*"),        # tensor_table_records(program, pointers)
)

# Numerics: logits vs the fp64 reference, relative to max |logit|. The VM computes
# in fp32 over bf16 weights and stores the new K/V rows in bf16 (the reference keeps
# them in fp64): one bf16 rounding is 2^-9 relative; 4 of them bound the measured
# ~1e-3 with room for other seeds.
LOGITS_RTOL = 4 * 2.0 ** -9
# The appended cache rows: one bf16 rounding of an fp32 value (2^-8 of the element
# covers it) plus the error the earlier layers carried in, bounded relative to the
# row's largest element (measured <= 3.3e-4 of it on layer 1, seeds 0-2).
CACHE_RTOL, CACHE_ROW_RTOL = 2.0 ** -8, 2.0 ** -9
VM_ORDERS = ("round_robin", "reverse", "random")
MODEL_PLAN_POS = 511             # the full-size plan is summarised for a 512-token context


def spec_name(variant: str) -> str:
    return f"{FAMILY}.{variant}"


def entry_name(variant: str) -> str:
    return f"megakernel_{variant.replace('-', '_')}"


def _model(variant: str):
    from porter.validation.model_config import load_model_config
    return load_model_config(MODELS[variant])


def _check_model(cfg, page_bytes: int) -> None:
    """The shape limits the kernel's layout assumes; a clear line when a model breaks one."""
    ks = sorted({cfg.hidden_size, cfg.intermediate_size, cfg.q_dim})
    for k in ks:
        if k % 8:
            raise PorterError(f"model {cfg.name}: matvec width {k} is not a multiple of 8 "
                              f"(weight rows are copied in 16-byte units)")
        if 2 * k > page_bytes:
            raise PorterError(f"model {cfg.name}: a bf16 weight row of {k} columns ({2 * k} B) exceeds "
                              f"one {page_bytes} B page of the megakernel ring")
    hd = cfg.head_dim
    if hd & (hd - 1) or Y_ROWS % hd:
        raise PorterError(f"model {cfg.name}: head_dim {hd} must be a power of two dividing {Y_ROWS} "
                          f"(matvec windows hold whole heads for the fused RoPE)")


def smem_plan(arch, cfg, compute_warps: int, pages: int | None = None, name: str = "") -> dict[str, Any]:
    """Shared-memory layout and page count from the descriptor's per-block budget."""
    max_k = max(cfg.hidden_size, cfg.intermediate_size, cfg.q_dim)
    group, hd = cfg.group_size, cfg.head_dim
    attn_floats = group * hd + compute_warps * group * (hd + 2)
    layout = {"full": 0, "empty": 8 * MAX_PAGES, "instr": 16 * MAX_PAGES}
    layout["red"] = layout["instr"] + 2 * isa.WORDS * 4
    layout["y"] = layout["red"] + 256
    layout["u"] = layout["y"] + 4 * Y_ROWS
    layout["x"] = layout["u"] + 4 * Y_ROWS
    x_bytes = 4 * max(max_k, attn_floats)
    layout["ring"] = -(-(layout["x"] + x_bytes) // 1024) * 1024
    limit = arch.smem_per_block_bytes
    budget = limit - SYSTEM_RESERVE_BYTES - SMEM_MARGIN_BYTES
    fit = min(MAX_PAGES, (budget - layout["ring"]) // PAGE_BYTES)
    if pages is not None and pages > fit:   # --set pages: held to the same budget
        from porter.kernels import knob_rules as kr

        raise kr.fail(name, "pages", pages, f"{layout['ring']} B of scratch + {pages} x {PAGE_BYTES} B pages > the "
                      f"{budget} B smem_per_block_bytes leaves after the system reserve and margin (at most {fit})")
    pages = fit if pages is None else pages
    # Every page the budget allows: depth lets the loader run further ahead across
    # counter waits. Each ring slot has one owner warp (page_ring.cuh), so with 12
    # pages over 8 warps, warps 0-3 own two slots; a page takes a warp far less
    # time to reduce than HBM takes to fill it, so the uneven share costs little.
    if pages < 2:
        raise PorterError(f"arch {arch.name}: smem_per_block_bytes {limit} less the {SYSTEM_RESERVE_BYTES} B "
                          f"system reserve and a {SMEM_MARGIN_BYTES} B margin leaves {budget} B: room for "
                          f"{max(pages, 0)} weight page(s) of {PAGE_BYTES} B after {layout['ring']} B of scratch; "
                          f"the megakernel needs at least 2 to overlap copies with compute")
    smem_bytes = layout["ring"] + pages * PAGE_BYTES
    check_smem_fit(arch.name, smem_bytes, limit)
    return {"layout": layout, "pages": pages, "smem_bytes": smem_bytes,
            "max_k": max_k, "x_bytes": x_bytes, "smem_budget": budget}


def check_smem_fit(what: str, dynamic_bytes: int, limit: int, static_bytes: int = SYSTEM_RESERVE_BYTES) -> None:
    """Fail with the figures when a configuration does not keep the stated margin: dynamic
    shared memory + the static section (the system reserve at least) + SMEM_MARGIN_BYTES
    must fit the per-block limit."""
    need = dynamic_bytes + static_bytes + SMEM_MARGIN_BYTES
    if need > limit:
        raise PorterError(f"{what}: megakernel shared memory does not fit: {dynamic_bytes} B dynamic + "
                          f"{static_bytes} B static (system reserve) + {SMEM_MARGIN_BYTES} B margin = {need} B, "
                          f"over the {limit} B per-block limit; fewer pages or a smaller scratch layout is needed")


def compute_warps_for(arch) -> int:
    """Compute warps: as many as the register file allows at the budget, at most 8, a power of two."""
    total = min(arch.max_threads_per_block, arch.regs_per_sm // REGS_PER_THREAD_BUDGET) // 32
    n = max(1, min(MAX_COMPUTE_WARPS, total - LOADER_WARPS))
    return 1 << (n.bit_length() - 1)


def sass_rules(arch) -> tuple[tuple[SassRule, ...], tuple[SassRule, ...]]:
    """Required and forbidden SASS, every spelling read from the descriptor."""
    def rule(ref: str, why: str) -> SassRule:
        return SassRule(arch.sass_pattern(ref), f"{why} ({ref})")

    required = [rule("op:bulk_copy", "cp.async.bulk weight pages (copy engine)") if arch.has("tma")
                else rule("cp_async", "cp.async weight pages")]
    required += [
        rule("mbarrier", "mbarrier full/empty handshake of the page ring"),
        rule("op:exp2", "base-2 online softmax and SiLU on the SFU"),
        rule("op:counter_signal", "counter signal: red.release.gpu.global.add"),
        rule("op:counter_wait", "counter wait: ld.acquire.gpu spin"),
        rule("op:l1_invalidate", "acquire invalidates L1 so later loads see other SMs' stores"),
        rule("op:backoff", "spin-wait backoff"),
        rule("op:warp_shuffle_xor", "warp-level matvec and softmax reductions"),
    ]
    forbidden = list(no_spills(arch)) + [
        rule("op:returning_atomic_add", "counter signals must be fire-and-forget reductions, not returning atomics"),
    ]
    return tuple(required), tuple(forbidden)


# Knobs (``--set``, porter.kernels.knobs): compute warps and weight pages in the ring. The
# grid is the plan's queue count (one per SM of the arch the plan is built for): not a knob.
KNOBS = ("compute_warps", "pages")


def knob_space(arch, name: str) -> dict[str, tuple]:
    cfg = _model(name.split(".", 1)[1])
    top = compute_warps_for(arch)
    warps = tuple(w for w in (1, 2, 4, 8) if w <= top)
    fit = smem_plan(arch, cfg, top)["pages"]
    return {"compute_warps": warps, "pages": tuple(range(2, fit + 1))}


def knobs_of(arch, spec: KernelSpec) -> dict:
    return {"compute_warps": spec.config["compute_warps"], "pages": spec.config["pages"]}


def spec_with_knobs(arch, name: str, knobs) -> KernelSpec:
    return make_spec(arch, name.split(".", 1)[1], knobs=knobs)


def make_spec(arch, variant: str, knobs=None) -> KernelSpec:
    from porter.kernels import knob_rules as kr

    cfg = _model(variant)
    _check_model(cfg, PAGE_BYTES)
    knobs = dict(knobs or {})
    name = spec_name(variant)
    warps = compute_warps_for(arch)
    if knobs:
        kr.check_names(name, knobs, {k: () for k in KNOBS})
        if "compute_warps" in knobs:
            kr.check_choice(name, "compute_warps", knobs["compute_warps"], tuple(w for w in (1, 2, 4, 8) if w <= warps),
                            f"powers of two up to {warps}: {REGS_PER_THREAD_BUDGET} registers per thread of "
                            f"regs_per_sm {arch.regs_per_sm}, with the loader warp")
            warps = knobs["compute_warps"]
        if "pages" in knobs:
            kr.check_int(name, "pages", knobs["pages"], 2, MAX_PAGES, "weight pages in the ring (mbarrier slots)")
    smem = smem_plan(arch, cfg, warps, knobs.get("pages"), name)
    required, forbidden = sass_rules(arch)
    threads = 32 * (warps + LOADER_WARPS)
    config = {
        "model": cfg.name,
        "grid": arch.sm_count,                      # one CTA (= one instruction queue) per SM
        "compute_warps": warps,
        "loader_warps": LOADER_WARPS,
        "warp_roles": {"compute": list(range(warps)), "loader": [warps],
                       "fetcher": "compute warp 0 (next instruction's words, double-buffered)"},
        "pages": smem["pages"],
        "page_bytes": PAGE_BYTES,
        "ring_bytes": smem["pages"] * PAGE_BYTES,
        "weight_copy": "bulk" if arch.has("tma") else "cp.async",
        "y_rows": Y_ROWS,
        "max_k": smem["max_k"],
        "max_head_dim": cfg.head_dim,
        "max_group": cfg.group_size,
        "smem_layout": smem["layout"],
        "params": [list(p) for p in PARAMS],
        "isa_words": isa.WORDS,
    }
    if knobs:   # what was overridden, so show / reports say so (absent from default specs)
        config["knobs"] = {k: kr.show(v) for k, v in sorted(knobs.items())}
    return KernelSpec(
        family=FAMILY, name=spec_name(variant), variant=spec_name(variant), entry=entry_name(variant),
        config=config, features=NEEDS + (("tma",) if arch.has("tma") else ()),
        sass_required=required, sass_forbidden=forbidden, threads=threads,
        smem_bytes=smem["smem_bytes"], template=TEMPLATE)


def variants(arch) -> list[KernelSpec | Unsupported]:
    out: list[KernelSpec | Unsupported] = []
    for variant in MODELS:
        missing = tuple(f for f in NEEDS if not arch.has(f))
        if missing:
            out.append(Unsupported(FAMILY, spec_name(variant), spec_name(variant), missing,
                                   reason="the weight page ring needs mbarrier full/empty handshakes"))
        else:
            out.append(make_spec(arch, variant))
    from porter.tuning.entries import tuned_variants   # a tuning/ entry replaces the hand-chosen knobs

    return tuned_variants(arch, out, render, spec_with_knobs)


def render(spec: KernelSpec, arch) -> str:
    fmt = isa.describe()
    fmt["epilogue_mask"] = isa.EPILOGUE_MASK
    return renderlib.render(spec.template or TEMPLATE, spec=spec, cfg=dict(spec.config), arch=arch, isa=fmt)


# ---- host side -----------------------------------------------------------------------

# The record is part of the ISA contract (isa.py, "Launch model"); context.cuh's
# TensorDesc static_asserts the offsets the template takes from isa.describe().
TENSOR_DESC_DTYPE = isa.TENSOR_DESC


def tensor_table_records(program, pointers=None) -> np.ndarray:
    """The kernel's ``tensors`` argument: one TensorDesc per tensor-table entry.

    ``pointers[id]`` are device addresses; by default each tensor sits at its
    ``TensorSpec.offset`` in one arena (add the arena base on the host).
    """
    return isa.tensor_desc_records(program.tensors, pointers)


def launch_config(spec: KernelSpec, program) -> dict:
    """Grid, block, shared memory and arguments for one step of ``program``."""
    grid, queue_len, words = program.instructions.shape
    # The kernel reads its queue count from gridDim: a plan for fewer queues than the arch
    # has SMs (a smaller part, the emulated device) runs as it is; more cannot be resident.
    if grid > spec.config["grid"]:
        raise PorterError(f"{spec.name}: the program has {grid} queues but the kernel was configured for "
                          f"{spec.config['grid']} SMs; plan it for the same arch")
    if words != isa.WORDS:
        raise PorterError(f"{spec.name}: instruction records of {words} words, expected {isa.WORDS}")
    # cooperative: the CTAs spin on each other's counters, so all of them must be
    # resident at once; a cooperative launch makes the driver refuse a grid that
    # cannot be (other work on the GPU, MPS limits) instead of hanging.
    return {"grid": (grid, 1, 1), "block": (spec.threads, 1, 1), "smem_bytes": spec.smem_bytes,
            "queue_len": queue_len, "n_counters": len(program.counter_targets),
            "arena_bytes": program.arena_bytes, "cooperative": True}


# ---- numerics -------------------------------------------------------------------------

def step_inputs(model: str = NUMERICS_MODEL, pos: int = 40, seed: int = 0) -> dict:
    """Seeded weights, a prompt, the bf16 cache of its first ``pos`` tokens and the
    fp64 reference's logits (and cache) for the decode step at ``pos``."""
    from porter.validation.megakernel_vm import caches_from_reference
    from porter.validation.model_config import load_model_config
    from porter.validation.reference_llama import ReferenceLlama
    from porter.validation.weights import random_weights

    cfg = load_model_config(model)
    weights = random_weights(cfg, seed)
    tokens = np.random.default_rng(seed).integers(0, cfg.vocab_size, pos + 1)
    ref = ReferenceLlama(cfg, weights)
    _, cache = ref.prefill([int(t) for t in tokens[:pos]])
    caches = caches_from_reference(cfg, cache, pos)       # bf16, positions [0, pos)
    ref_logits = ref.decode_step(int(tokens[pos]), pos, cache)
    return {"cfg": cfg, "weights": weights, "token": int(tokens[pos]), "pos": pos, "seed": seed,
            "caches": caches, "ref_logits": ref_logits, "ref_cache": cache}


def check_step(arch, model: str = NUMERICS_MODEL, pos: int = 40, seed: int = 0) -> dict:
    """Plan one decode step for ``arch``, run it in the VM, compare with the fp64 reference."""
    from porter.megakernel.plan import build_plan
    from porter.validation.megakernel_vm import run_step

    inp = step_inputs(model, pos, seed)
    cfg, weights, caches, ref_logits, cache = (inp["cfg"], inp["weights"], inp["caches"],
                                               inp["ref_logits"], inp["ref_cache"])
    plan = build_plan(arch, cfg, pos=pos, token=inp["token"])
    scale = float(np.abs(ref_logits).max())
    top2 = np.sort(ref_logits)[-2:]
    runs = []
    for order in VM_ORDERS:
        logits, token, vm = run_step(plan["program"], cfg, weights, caches, order=order, seed=seed + 1)
        err = float(np.abs(logits.astype(np.float64) - ref_logits).max() / scale)
        cache_ok = True
        for layer in range(cfg.num_layers):
            for nm, src in (("k", cache.k), ("v", cache.v)):
                got = vm.by_name(f"cache.{nm}.{layer}")[pos].astype(np.float64)
                want = src[layer][pos].reshape(-1)
                bound = CACHE_RTOL * np.abs(want) + CACHE_ROW_RTOL * np.abs(want).max()
                cache_ok &= bool(np.all(np.abs(got - want) <= bound))
        # the token must be the reference's unless the top two logits are closer than the tolerance
        token_ok = token == int(np.argmax(ref_logits)) or (top2[1] - top2[0]) <= 2 * LOGITS_RTOL * scale
        runs.append({"order": order, "label": f"{cfg.name} model, {order} SM order", "logits_rel_err": err, "token": token, "cache_ok": cache_ok,
                     "token_ok": bool(token_ok), "passed": bool(err <= LOGITS_RTOL and cache_ok and token_ok)})
    return {
        "model": cfg.name, "pos": pos, "seed": seed, "reference_token": int(np.argmax(ref_logits)),
        "logits_rtol": LOGITS_RTOL, "runs": runs, "passed": all(r["passed"] for r in runs),
        "plan": plan_fields(plan),
    }


def plan_fields(plan: dict) -> dict:
    """What the report shows of a plan: queues, instructions per SM, predicted latency."""
    from porter.megakernel.plan import summary

    s = summary(plan)
    return {
        "model": s["model"], "pos": s["pos"],
        "queues": int(plan["instruction_tensor"].shape[0]),
        "instruction_tensor_shape": s["instruction_tensor_shape"],
        "instructions": s["instructions"],
        "instructions_per_sm": [int(n) for n in plan["program"].queue_lengths()],
        "per_sm": s["per_sm"],
        "counters": s["counters"],
        "attention_splits": s["attention_splits"],
        "predicted_latency_us": s["predicted_latency_us"],
        "memory_floor_us": s["memory_floor_us"],
        "floor_ratio": s["floor_ratio"],
        "checks": s["checks"],
    }


def numerics(spec: KernelSpec, arch, model_plan: bool = True) -> dict:
    """The VM on the tiny model vs the fp64 reference, with the plan summary for ``arch``;
    ``model_plan`` adds the plan of the kernel's own model (Llama-3.2-1B: ~3 s)."""
    from porter.megakernel.plan import build_plan

    result = check_step(arch)
    result["variant"] = spec.variant
    result["kernel_model"] = spec.config["model"]
    result["grid"] = spec.config["grid"]
    bad = next((r for r in result["runs"] if not r["passed"]), None)
    if bad is not None:
        result["error"] = (f"VM ({bad['order']} order) vs fp64 reference: logits error "
                           f"{bad['logits_rel_err']:.2e} of max (tolerance {LOGITS_RTOL:.2e}), "
                           f"cache {'ok' if bad['cache_ok'] else 'off'}, token {'ok' if bad['token_ok'] else 'differs'}")
    if result["plan"]["queues"] != spec.config["grid"]:
        result["passed"] = False
        result["error"] = f"plan has {result['plan']['queues']} queues, kernel grid is {spec.config['grid']}"
    if model_plan:
        result["model_plan"] = plan_fields(build_plan(arch, spec.config["model"], pos=MODEL_PLAN_POS))
    return result


# ---- device run ------------------------------------------------------------------------

_NP_DTYPES = {isa.DType.BF16: "bfloat16", isa.DType.FP32: "float32", isa.DType.INT32: "int32"}


def _np_dtype(dt):
    import ml_dtypes

    return np.dtype(ml_dtypes.bfloat16) if dt == isa.DType.BF16 else np.dtype(_NP_DTYPES[dt])


def host_arena(program, cfg, weights, caches=None) -> np.ndarray:
    """The bytes of every tensor at its ``TensorSpec.offset``: weights, RoPE tables and
    the given KV-cache rows; activations, outputs and the rest of the caches zero."""
    from porter.megakernel.encode import host_tables

    arena = np.zeros(program.arena_bytes, dtype=np.uint8)
    tables = host_tables(program, cfg)
    for t in program.tensors:
        if t.kind == "weight":
            src = weights[t.name]
        elif t.kind == "table":
            src = tables[t.name]
        elif t.kind == "cache" and caches is not None and t.name in caches:
            src = caches[t.name]
        else:
            continue
        arr = np.ascontiguousarray(np.asarray(src).astype(_np_dtype(t.dtype))).reshape(-1)
        if arr.size != t.numel:
            raise PorterError(f"megakernel: tensor {t.name} has {arr.size} elements, the program "
                              f"expects {t.numel} {list(t.shape)}")
        arena[t.offset:t.offset + t.nbytes] = arr.view(np.uint8)
    return arena


def settle_smem(driver, function, spec, arch, smem_bytes: int) -> dict:
    """Opt the loaded kernel in to ``smem_bytes`` of dynamic shared memory, then ask the
    driver what it granted (cuFuncGetAttribute after cuFuncSetAttribute): the figures that
    settle whether the system reserve counts against the per-block limit. Fails with them
    when the driver grants less than the launch needs."""
    limit = int(arch.smem_per_block_bytes)
    # The question itself: can the whole per-block limit be granted as dynamic memory on top
    # of the static section? (If so, the 1 KiB reserve does not count against it.)
    try:
        driver.set_function_attributes(function, limit, (1, 1, 1))
        full = int(driver.function_attributes(function).get("max_dynamic_smem_bytes", 0)) >= limit
    except PorterError:
        full = False
    driver.set_function_attributes(function, smem_bytes, (1, 1, 1))
    attrs = dict(driver.function_attributes(function))
    granted, static = attrs.get("max_dynamic_smem_bytes", 0), attrs.get("static_smem_bytes", 0)
    attrs.update({"requested_dynamic_smem_bytes": int(smem_bytes), "per_block_limit_bytes": limit,
                  "full_limit_grantable": full})
    if granted < smem_bytes:
        raise PorterError(f"{spec.name}: the driver grants {granted} B of dynamic shared memory (static {static} B), "
                          f"the launch needs {smem_bytes} B of the descriptor's {arch.smem_per_block_bytes} B per block")
    return attrs


def run_on_device(spec: KernelSpec, arch, program, cfg, weights, caches=None) -> dict:
    """Launch one decode step of ``program`` on device 0 and read back what it wrote.

    Returns logits (fp32), token, counters (each must equal its target), and the
    K/V caches. The kernel is persistent and its CTAs wait on each other, so all
    ``grid`` CTAs must be resident at once: one per SM, nothing else running.
    """
    from porter.kernels.build import build_kernel
    from porter.runtime import driver

    launch = launch_config(spec, program)
    info = driver.device()
    if tuple(info.compute_capability) != tuple(arch.compute_capability):
        raise PorterError(f"{spec.name}: built for {arch.name} ({arch.target}) but device 0 is {info.name}")
    if info.sm_count < launch["grid"][0]:
        raise PorterError(f"{spec.name}: {launch['grid'][0]} persistent CTAs need as many SMs; "
                          f"{info.name} has {info.sm_count}")
    build = build_kernel(spec, arch)
    if not build.ok:
        failed = next((c for c in build.checks if not c.passed), None)
        raise PorterError(f"{spec.name}: kernel not usable on {arch.name}: "
                          + (f"{failed.name}: {failed.detail}" if failed else build.compile_error))
    arena = host_arena(program, cfg, weights, caches)
    d_arena = driver.DeviceBuffer.from_host(arena.ctypes.data, arena.nbytes)
    recs = tensor_table_records(program, [d_arena.ptr + t.offset for t in program.tensors])
    d_tensors = driver.DeviceBuffer.from_host(recs.ctypes.data, recs.nbytes)
    instructions = np.ascontiguousarray(program.instructions, dtype=np.int32)
    d_instr = driver.DeviceBuffer.from_host(instructions.ctypes.data, instructions.nbytes)
    counters = np.zeros(max(1, launch["n_counters"]), dtype=np.int32)
    d_counters = driver.DeviceBuffer.from_host(counters.ctypes.data, counters.nbytes)
    values = {"instructions": d_instr.ptr, "queue_len": launch["queue_len"],
              "counters": d_counters.ptr, "tensors": d_tensors.ptr}
    args = [driver.pack_arg(ctype, values[name]) for name, ctype in PARAMS]
    function = driver.load_function(build.compiled.cubin, spec.entry)
    attributes = settle_smem(driver, function, spec, arch, launch["smem_bytes"])
    driver.launch(function, launch["grid"][0], launch["block"][0], launch["smem_bytes"], (1, 1, 1), args,
                  cooperative=launch["cooperative"])
    d_arena.copy_to_host(arena.ctypes.data, arena.nbytes)
    d_counters.copy_to_host(counters.ctypes.data, counters.nbytes)

    def read(name):
        t = program.tensor(name)
        return arena[t.offset:t.offset + t.nbytes].view(_np_dtype(t.dtype)).reshape(t.shape).copy()

    return {"logits": read("buf.logits"), "token": int(read("out.token").reshape(-1)[0]),
            "function_attributes": attributes,
            "counters": counters[:launch["n_counters"]],
            "caches": {t.name: read(t.name) for t in program.tensors if t.kind == "cache"}}
