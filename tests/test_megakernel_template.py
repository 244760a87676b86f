"""Megakernel family: the interpreter compiles per arch, shows its machine code, plans differ.

Compiles (NVRTC, no GPU) once per arch per session; the VM numerics and the
schedule checks run on the tiny model.
"""
from __future__ import annotations

import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import FAMILIES, family_module, megakernel
from porter.kernels.base import KernelSpec, Unsupported
from porter.kernels.build import build_kernel
from porter.levels import Level
from porter.megakernel.checker import ScheduleError, check_program, check_schedule
from porter.megakernel.isa import WORDS, Instruction, Opcode
from porter.compile.sass import count_matching

ARCHS = ("hopper", "blackwell")


class _Without:
    """A descriptor stand-in: the real arch with some features taken away."""

    def __init__(self, arch, *features: str):
        self._arch, self._drop = arch, set(features)

    def has(self, feature: str) -> bool:
        return feature not in self._drop and self._arch.has(feature)

    def __getattr__(self, name):
        return getattr(self._arch, name)


@pytest.fixture(scope="module")
def archs():
    return {name: load_arch(name) for name in ARCHS}


@pytest.fixture(scope="module")
def specs(archs):
    out = {}
    for name, arch in archs.items():
        (spec,) = megakernel.variants(arch)
        out[name] = spec
    return out


@pytest.fixture(scope="module")
def builds(archs, specs):
    return {name: build_kernel(specs[name], archs[name]) for name in ARCHS}


@pytest.fixture(scope="module")
def numerics(archs, specs):
    return {name: megakernel.numerics(specs[name], archs[name]) for name in ARCHS}


def test_registered_as_a_family():
    assert FAMILIES["megakernel"] == "megakernel"
    assert family_module("megakernel") is megakernel


def test_one_llama_decode_variant_per_arch(specs):
    for spec in specs.values():
        assert isinstance(spec, KernelSpec)
        assert spec.variant == "megakernel.llama-decode"
        assert spec.config["model"] == "llama-3.2-1b"
        assert spec.entry == "megakernel_llama_decode"


@pytest.mark.parametrize("name", ARCHS)
def test_compiles_and_passes_sass_checks(builds, name):
    b = builds[name]
    failed = [f"{c.name}: {c.detail}" for c in b.checks if not c.passed]
    assert b.level == Level.SASS_CHECKED, failed
    hist = b.histogram
    assert count_matching(hist, r"UBLKCP") >= 1           # weight pages by the copy engine
    assert count_matching(hist, r"SYNCS\.PHASECHK") >= 1  # mbarrier waits of the ring
    assert count_matching(hist, r"MUFU\.EX2") >= 1
    assert count_matching(hist, r"REDG?\.E\.ADD\.S32\.STRONG\.GPU") >= 1
    assert count_matching(hist, r"(STL|LDL)\b") == 0
    assert b.resources["spill_store_bytes"] == 0 and b.resources["local_bytes"] == 0


def test_config_comes_from_the_descriptor(archs, specs, builds):
    for name, arch in archs.items():
        spec, cfg = specs[name], specs[name].config
        assert cfg["grid"] == arch.sm_count
        assert spec.threads == 32 * (cfg["compute_warps"] + cfg["loader_warps"])
        assert cfg["weight_copy"] == "bulk"                 # both descriptors have TMA
        # the ring takes what the per-block budget leaves after the scratch
        ring_off = cfg["smem_layout"]["ring"]
        # ... less the 1 KiB system reserve and the stated 1 KiB margin (issue #11)
        budget = arch.smem_per_block_bytes - megakernel.SYSTEM_RESERVE_BYTES - megakernel.SMEM_MARGIN_BYTES
        assert cfg["pages"] == (budget - ring_off) // cfg["page_bytes"]
        assert spec.smem_bytes == ring_off + cfg["pages"] * cfg["page_bytes"] <= budget
        src = builds[name].source
        assert f"constexpr uint32_t kPages = {cfg['pages']};" in src
        assert f"grid {arch.sm_count} CTAs" in src
    assert specs["hopper"].config["grid"] == 132 and specs["blackwell"].config["grid"] == 148


def test_smaller_shared_memory_means_fewer_pages(archs):
    arch = archs["hopper"]

    class Small(_Without):
        smem_per_block_bytes = 99 * 1024

    small = megakernel.make_spec(Small(arch), "llama-decode")
    assert small.config["pages"] < megakernel.make_spec(arch, "llama-decode").config["pages"]
    assert small.smem_bytes <= 99 * 1024


def test_cp_async_fallback_without_tma(archs):
    arch = _Without(archs["hopper"], "tma")
    (spec,) = megakernel.variants(arch)
    assert spec.config["weight_copy"] == "cp.async"
    b = build_kernel(spec, arch)
    assert b.level == Level.SASS_CHECKED, [c.detail for c in b.checks if not c.passed]
    assert count_matching(b.histogram, r"LDGSTS") >= 1
    assert count_matching(b.histogram, r"UBLKCP") == 0


def test_unsupported_without_mbarrier(archs):
    (u,) = megakernel.variants(_Without(archs["blackwell"], "mbarrier"))
    assert isinstance(u, Unsupported) and u.missing == ("mbarrier",)


def test_model_that_breaks_the_layout_is_a_clear_error():
    from dataclasses import replace

    from porter.validation.model_config import load_model_config

    cfg = load_model_config("tiny")
    with pytest.raises(PorterError, match="head_dim 96"):
        megakernel._check_model(replace(cfg, head_dim=96), 16384)
    with pytest.raises(PorterError, match="exceeds"):
        megakernel._check_model(replace(cfg, intermediate_size=16384), 16384)


@pytest.mark.parametrize("name", ARCHS)
def test_numerics_vm_matches_fp64_reference(numerics, name):
    r = numerics[name]
    assert r["passed"], r["runs"]
    assert [x["order"] for x in r["runs"]] == list(megakernel.VM_ORDERS)
    for run in r["runs"]:
        assert run["logits_rel_err"] <= megakernel.LOGITS_RTOL
        assert run["token"] == r["reference_token"]
    plan = r["plan"]
    assert plan["queues"] == r["grid"]
    assert sum(plan["instructions_per_sm"]) == plan["instructions"]
    assert plan["predicted_latency_us"] > 0 and plan["memory_floor_us"] > 0
    assert 0 < plan["floor_ratio"] <= 1


@pytest.mark.parametrize("which", ["plan", "model_plan"])
def test_the_two_archs_get_different_schedules(numerics, which):
    h, b = numerics["hopper"][which], numerics["blackwell"][which]
    assert h["queues"] == 132 and b["queues"] == 148
    assert h["instruction_tensor_shape"][0] == 132 and b["instruction_tensor_shape"][0] == 148
    assert len(h["instructions_per_sm"]) == 132 and len(b["instructions_per_sm"]) == 148
    assert sum(h["instructions_per_sm"]) == h["instructions"]
    if which == "model_plan":   # weight streaming dominates: more HBM bandwidth, shorter step
        assert b["predicted_latency_us"] < h["predicted_latency_us"]


def test_full_model_plan_is_summarised(numerics):
    for r in numerics.values():
        mp = r["model_plan"]
        assert mp["model"] == "llama-3.2-1b" and mp["pos"] == megakernel.MODEL_PLAN_POS
        assert 0 < mp["floor_ratio"] <= 1 and mp["memory_floor_us"] < mp["predicted_latency_us"]


@pytest.fixture(scope="module")
def tiny_plan(archs):
    from porter.megakernel.plan import build_plan

    return build_plan(archs["hopper"], "tiny", pos=20)


def test_planted_circular_wait_is_rejected(tiny_plan):
    g, queues = tiny_plan["dag"], [list(q) for q in tiny_plan["queues"]]
    # two dependencies a -> b and c -> d on four distinct instructions, planted as
    # SM0: [..., d, a] and SM1: [..., b, c]: a -> b (counter), b -> c (queue),
    # c -> d (counter), d -> a (queue): each SM waits on the other forever
    producers: dict[str, list[int]] = {}
    for n, data in g.nodes(data=True):
        if data["signal"] is not None:
            producers.setdefault(data["signal"], []).append(n)
    deps = [(p, n) for n, data in g.nodes(data=True) for k in data["waits"] for p in producers[k]]
    a, b = deps[0]
    c, d = next((c, d) for c, d in deps if not {c, d} & {a, b})
    for q in queues:
        q[:] = [n for n in q if n not in (a, b, c, d)]
    queues[0] += [d, a]
    queues[1] += [b, c]
    with pytest.raises(ScheduleError, match="circular wait") as exc:
        check_schedule(g, queues)
    assert exc.value.cycle


def test_planted_circular_wait_in_the_instruction_tensor_is_rejected():
    # SM0 waits on counter 1 then signals counter 0; SM1 waits on counter 0 then signals 1
    prog = np.zeros((2, 2, WORDS), dtype=np.int32)
    prog[0, 0] = Instruction(Opcode.RESIDUAL_ADD, signal=0, waits=[(1, 1)], tensors=[0, -1, 1]).to_words()
    prog[1, 0] = Instruction(Opcode.RESIDUAL_ADD, signal=1, waits=[(0, 1)], tensors=[0, -1, 1]).to_words()
    with pytest.raises(ScheduleError, match="circular wait"):
        check_program(prog, np.array([1, 1], dtype=np.int32))


def test_launch_tables_match_the_program(specs, tiny_plan):
    program = tiny_plan["program"]
    recs = megakernel.tensor_table_records(program)
    assert recs.dtype.itemsize == 32
    for t in program.tensors:
        assert recs[t.id]["ptr"] == t.offset
        assert recs[t.id]["dtype"] == int(t.dtype)
        assert recs[t.id]["rows"] * recs[t.id]["cols"] == t.numel
    launch = megakernel.launch_config(specs["hopper"], program)
    assert launch["grid"] == (132, 1, 1) and launch["block"] == (specs["hopper"].threads, 1, 1)
    # fewer queues than the kernel's SMs (a smaller part, the emulated device) launch as they are
    assert megakernel.launch_config(specs["blackwell"], program)["grid"] == (132, 1, 1)
    # more than the kernel was configured for cannot all be resident
    import dataclasses
    wide = dataclasses.replace(program, instructions=np.zeros((133, *program.instructions.shape[1:]), np.int32))
    with pytest.raises(PorterError, match="133 queues but the kernel was configured for 132 SMs"):
        megakernel.launch_config(specs["hopper"], wide)


def test_host_arena_places_every_input(tiny_plan):
    import ml_dtypes

    inp = megakernel.step_inputs(pos=20)
    program = tiny_plan["program"]
    arena = megakernel.host_arena(program, inp["cfg"], inp["weights"], inp["caches"])
    assert arena.nbytes == program.arena_bytes
    for name in ("model.layers.1.mlp.down_proj.weight", "cache.k.0"):
        t = program.tensor(name)
        got = arena[t.offset:t.offset + t.nbytes].view(ml_dtypes.bfloat16).reshape(t.shape)
        want = inp["weights"][name] if name in inp["weights"] else inp["caches"][name]
        assert np.array_equal(got.view(np.uint16), np.asarray(want).view(np.uint16))
    t = program.tensor("buf.h")
    assert not arena[t.offset:t.offset + t.nbytes].any()      # activations start at zero


@pytest.mark.gpu
@pytest.mark.parametrize("name", ARCHS)
def test_device_step_matches_the_vm(archs, specs, name):
    from porter.megakernel.plan import build_plan
    from porter.pipeline.device import find_device
    from porter.validation.megakernel_vm import run_step

    arch = archs[name]
    dev, why = find_device(arch)
    if dev is None:
        pytest.skip(why)
    inp = megakernel.step_inputs(pos=40)
    plan = build_plan(arch, inp["cfg"], pos=40, token=inp["token"])
    program = plan["program"]
    out = megakernel.run_on_device(specs[name], arch, program, inp["cfg"], inp["weights"], inp["caches"])
    logits, token, vm = run_step(program, inp["cfg"], inp["weights"], inp["caches"])
    assert np.array_equal(out["counters"], program.counter_targets)   # every instruction signalled once
    assert out["token"] == token
    # same fp32 math, other summation order and ex2.approx: far inside the reference tolerance
    assert np.abs(out["logits"] - logits).max() <= 1e-3 * np.abs(logits).max()
    for cache_name, got in out["caches"].items():
        want = vm.by_name(cache_name).astype(np.float32)
        assert np.allclose(got.astype(np.float32), want, rtol=2.0 ** -7, atol=1e-3), cache_name
