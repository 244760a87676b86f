"""Warp-level (mma.sync) attention kernels, FlashAttention-2 style: chosen by the tensor-core
generation, staged by TMA (rtx-blackwell, sm_120a) or cp.async (ampere, sm_80), compiled,
SASS-checked with the descriptor's signatures, no local memory, the family's numerics
model at the kernel's K/V tile, launch plans, and the operand layouts (Q, K, V through
ldmatrix, P from the S accumulators) judged by porter.emu's mma.sync unit."""

from __future__ import annotations

import numpy as np
import pytest

from porter.compile import sass as sasslib
from porter.descriptor.arch import load_arch
from porter.errors import CompileError, PorterError
from porter.kernels import attention, attention_mma_sync
from porter.kernels.base import KernelSpec
from porter.kernels.build import build_kernel
from porter.levels import Level
from porter.compile.toolchain import compile_cuda

NAMES = ("attention.hd64", "attention.hd64.causal", "attention.hd128", "attention.hd128.causal")
ARCHS = ("rtx-blackwell", "ampere")
KEYS = tuple((a, n) for a in ARCHS for n in NAMES)


@pytest.fixture(scope="module")
def archs():
    return {name: load_arch(name) for name in ARCHS}


def _spec(arch, name):
    return next(s for s in attention.variants(arch) if s.name == name)


@pytest.fixture(scope="module")
def builds(archs):
    return {(a, n): build_kernel(_spec(archs[a], n), archs[a]) for a, n in KEYS}


@pytest.mark.parametrize("arch_name", ARCHS)
def test_variants_take_the_mma_sync_mainloop(archs, arch_name):
    arch = archs[arch_name]
    specs = attention.variants(arch)
    assert [s.name for s in specs] == list(NAMES)
    assert all(isinstance(s, KernelSpec) and s.config["mainloop"] == "mma_sync" for s in specs)
    staging = "tma" if arch.has("tma") else "cp_async"
    for s in specs:
        cfg = s.config
        assert cfg["staging"] == staging and s.threads == 32 * cfg["warps"] == 256
        # hd64: two m16 row tiles per warp (256-row tiles) with 32-key K/V tiles fit the
        # registers; hd128: one row tile, 64 keys.
        assert (cfg["row_tiles"], cfg["block_n"]) == ({64: (2, 32), 128: (1, 64)}[cfg["head_dim"]])
        assert cfg["block_m"] == 16 * cfg["row_tiles"] * cfg["warps"]
        assert cfg["registers_estimate"] <= cfg["registers_budget"]
        assert s.smem_bytes <= arch.smem_per_block_bytes and cfg["stages"] >= 2
        names = [n for n, _ in cfg["params"]]
        assert names[:3] == (["tma_q", "tma_k", "tma_v"] if staging == "tma" else ["q", "k", "v"])
        assert names[3:] == ["o", "lse", "batch", "heads_q", "heads_kv", "seq_q", "seq_k", "softmax_scale_log2"]


def test_stages_follow_the_shared_memory(archs):
    rtx = {s.name: s.config["stages"] for s in attention.variants(archs["rtx-blackwell"])}
    amp = {s.name: s.config["stages"] for s in attention.variants(archs["ampere"])}
    # 99 KiB: Q (32 KiB) + 2 K/V stages of 32 KiB for hd128; 163 KiB: 4. hd64: Q 32 KiB
    # (256 rows) + 4 stages of 8 KiB (32 keys) on both.
    assert rtx["attention.hd128"] == 2 and amp["attention.hd128"] == 4
    assert rtx["attention.hd64"] == 4 and amp["attention.hd64"] == 4


@pytest.mark.parametrize("key", KEYS)
def test_reaches_sass_checked_without_local_memory(builds, key):
    build = builds[key]
    assert build.level >= Level.SASS_CHECKED, [c for c in build.checks if not c.passed]
    res = build.resources
    assert res["local_bytes"] == res["stack_bytes"] == res["spill_store_bytes"] == res["spill_load_bytes"] == 0


@pytest.mark.parametrize("key", KEYS)
def test_mma_count_and_signatures(archs, builds, key):
    arch = archs[key[0]]
    build = builds[key]
    cfg = build.spec.config
    d, bn = cfg["head_dim"], cfg["block_n"]
    per_tile = cfg["row_tiles"] * ((d // 16) * (bn // 8) + (bn // 16) * (d // 8))   # Q K^T + P V per K/V tile
    op = arch.tensor_core.kind_sass["f16"][0]
    assert sasslib.count_matching(build.histogram, op) == per_tile
    staging = "UTMALDG" if cfg["staging"] == "tma" else "LDGSTS"
    assert any(o.startswith(staging) for o in build.histogram)
    assert any(o.startswith("LDSM.16.MT88") for o in build.histogram), "V through ldmatrix.trans"
    # Every rule is built from the descriptor's own spellings (no opcode literal in Python).
    known = [p for ops in arch.tensor_core.kind_sass.values() for p in ops]
    known += [p for ps in arch.sass_signatures.values() for p in ps]
    known += [p for ps in getattr(arch, "sass_ops", {}).values() for p in ps]
    for rule in build.spec.sass_required + build.spec.sass_forbidden:
        assert any(p in rule.pattern for p in known), rule


def test_the_compiler_judges_the_staging(builds):
    with pytest.raises(CompileError):
        compile_cuda(builds[("rtx-blackwell", "attention.hd64")].source, "sm_80", "attn_mma_sync_tma_on_sm80.cu")


@pytest.mark.parametrize("name", NAMES)
def test_numerics_model(archs, name):
    spec = _spec(archs["rtx-blackwell"], name)
    result = attention.numerics(spec, archs["rtx-blackwell"])
    assert result["passed"] and result["block_n"] == spec.config["block_n"], \
        [c for c in result["cases"] if not c["passed"]]


def test_launch_plans(archs):
    rtx = attention.find_spec(archs["rtx-blackwell"], 128, True)
    plan = attention.launch_plan(rtx, archs["rtx-blackwell"], 2, 8, 2, 300, 300)
    assert plan["grid"] == (2 * 8 * 3, 1, 1) and plan["block"] == (256, 1, 1) and plan["smem_bytes"] == rtx.smem_bytes
    assert set(plan["tensor_maps"]) == {"tma_q", "tma_k", "tma_v"} and plan["pointers"] == {}
    maps = attention.tensor_maps(rtx, plan, 256)
    assert maps["tma_q"].box == (64, 128) and maps["tma_k"].box == (64, 64) and maps["tma_v"].swizzle == "128B"
    amp = attention.find_spec(archs["ampere"], 64, False)
    plan = attention.launch_plan(amp, archs["ampere"], 1, 4, 1, 1000, 77)
    assert plan["tensor_maps"] == {}
    assert plan["pointers"] == {"q": {"rows": 4000, "cols": 64, "dtype": "bf16"},
                                "k": {"rows": 77, "cols": 64, "dtype": "bf16"},
                                "v": {"rows": 77, "cols": 64, "dtype": "bf16"}}
    assert plan["grid"][0] == min(4 * -(-1000 // amp.config["block_m"]), archs["ampere"].sm_count)
    with pytest.raises(PorterError, match="softmax_scale"):
        attention.launch_plan(amp, archs["ampere"], 1, 4, 1, 10, 10, softmax_scale=-1.0)


def test_no_staging_feature_is_unsupported(archs):
    class NoCopies:
        name = "mma-sync-without-copies"
        tensor_core = archs["ampere"].tensor_core

        def has(self, feature):
            return feature == "mma_sync"

    made = attention_mma_sync.make_spec(NoCopies(), 64, False)
    assert made.missing == ("tma|cp_async",)


# ---- layout model, judged by porter.emu -------------------------------------------------

def swizzle_128b(row: int, chunk: int) -> int:
    return row * 128 + ((chunk ^ (row & 7)) << 4)


def _boxes(tile: np.ndarray) -> np.ndarray:
    """A [rows, D] bf16 (as uint16) tile as the kernel stores it: 64-column boxes of
    swizzled 128-byte rows."""
    rows, d = tile.shape
    smem = np.zeros(rows * d * 2, np.uint8)
    for box in range(d // 64):
        part = np.ascontiguousarray(tile[:, 64 * box: 64 * box + 64]).view(np.uint8).reshape(rows, 8, 16)
        for r in range(rows):
            for c in range(8):
                at = box * rows * 128 + swizzle_128b(r, c)
                smem[at: at + 16] = part[r, c]
    return smem


def test_template_uses_the_modelled_addresses(builds):
    src = builds[("ampere", "attention.hd128")].source
    for text in ("swizzle_128b(kWarpRows * warp + 16 * i + (lane & 15u), 2 * (kk % 4) + (lane >> 4))",
                 "mma_bf16_16816(sacc[i][2 * jj], qf[i][kk], r[0], r[1]);",
                 "mma_bf16_16816(oacc[i][2 * jj + 1], pa[i], r[2], r[3]);",
                 "const uint32_t key = (lane & 7u) + ((lane >> 4) << 3), half = (lane >> 3) & 1u;",
                 "swizzle_128b(16 * jj + key, 2 * (kk % 4) + half)",
                 "const uint32_t key = (lane & 7u) + (((lane >> 3) & 1u) << 3), half = lane >> 4;",
                 "swizzle_128b(16 * t + key, 2 * (jj % 4) + half)",
                 "pa[i][2] = pack_bf16x2(pacc[i][2 * t + 1][0], pacc[i][2 * t + 1][1]);"):
        assert text in src, text


def test_q_k_v_and_p_fragments_are_the_mma_operands():
    from porter.emu.units import mma_sync as emu

    rng = np.random.default_rng(1)
    d, bn, bm = 128, 64, 128
    q = rng.permutation(bm * d).astype("<u2").reshape(bm, d)
    k = rng.permutation(bn * d).astype("<u2").reshape(bn, d)
    v = rng.permutation(bn * d).astype("<u2").reshape(bn, d)
    qs, ks, vs = _boxes(q), _boxes(k), _boxes(v)
    ar, ac = emu.fragment_layout("m16n8k16", "a")
    br, bc = emu.fragment_layout("m16n8k16", "b")
    cr, cc = emu.fragment_layout("m16n8k16", "c")
    lanes = np.arange(32)
    for row_tiles in (1, 2):
        rows = 16 * row_tiles
        for warp in (0, 3):
            for i in range(row_tiles):
                for kk in range(d // 16):
                    addr = [(kk // 4) * bm * 128 + swizzle_128b(rows * warp + 16 * i + (l & 15), 2 * (kk % 4) + (l >> 4))
                            for l in lanes]
                    got = emu.ldmatrix(qs, addr, 4, False).astype("<u4").view("<u2").reshape(32, 4, 2)
                    assert (got == q[rows * warp + 16 * i + ar, 16 * kk + ac]).all(), ("Q", row_tiles, warp, i, kk)
    for kk in range(d // 16):                       # S = Q K^T: B(k = head dim, n = key)
        for jj in range(bn // 16):
            key = (lanes & 7) + ((lanes >> 4) << 3)
            half = (lanes >> 3) & 1
            addr = [(kk // 4) * bn * 128 + swizzle_128b(16 * jj + key[l], 2 * (kk % 4) + half[l]) for l in lanes]
            regs = emu.ldmatrix(ks, addr, 4, False).astype("<u4").view("<u2").reshape(32, 4, 2)
            for f, pair in ((2 * jj, regs[:, 0:2]), (2 * jj + 1, regs[:, 2:4])):
                assert (pair == k[8 * f + bc, 16 * kk + br]).all(), ("K", kk, f)
    for t in range(bn // 16):                       # O += P V: B(k = key, n = head dim), .trans
        for jj in range(d // 16):
            key = (lanes & 7) + (((lanes >> 3) & 1) << 3)
            half = lanes >> 4
            addr = [(jj // 4) * bn * 128 + swizzle_128b(16 * t + key[l], 2 * (jj % 4) + half[l]) for l in lanes]
            regs = emu.ldmatrix(vs, addr, 4, True).astype("<u4").view("<u2").reshape(32, 4, 2)
            for f, pair in ((2 * jj, regs[:, 0:2]), (2 * jj + 1, regs[:, 2:4])):
                assert (pair == v[16 * t + br, 8 * f + bc]).all(), ("V", t, f)
    # P's A fragment for keys [16 t, 16 t + 16): register j element e comes from S fragment
    # 2 t + j // 2, accumulator 2 (j % 2) + e - the same (row, key) the A layout wants.
    for t in range(bn // 16):
        for j in range(4):
            for e in range(2):
                frag, acc = 2 * t + j // 2, 2 * (j % 2) + e
                assert (cr[:, acc, 0] == ar[:, j, e]).all()
                assert (8 * frag + cc[:, acc, 0] == 16 * t + ac[:, j, e]).all()


def test_kv_ring_protocol_model():
    """A Python mirror of the template's KVLoader and consumer loop over a CTA's tiles
    (some with no visible key): every K/V tile the consumer reads from stage s at phase p
    is the one the loader put there last, and no slot is refilled before it was read.
    Loads are issued kStages - 1 ahead, one per consumer step (after its __syncthreads)."""
    from porter.kernels.attention import _kv_tiles

    rng = np.random.default_rng(0)
    for trial in range(200):
        stages = int(rng.integers(2, 5))
        causal = bool(rng.integers(2))
        sq, sk = int(rng.integers(1, 400)), int(rng.integers(1, 400))
        q_tiles = -(-sq // 128)
        my_tiles = [q_tiles - 1 - t for t in range(q_tiles)][int(rng.integers(0, q_tiles))::int(rng.integers(1, 4))]
        counts = [_kv_tiles(qt * 128, 128, 64, sq, sk, causal) for qt in my_tiles]
        wanted = [(t, n) for t, c in enumerate(counts) for n in range(c)]
        # loader: the flattened (tile, n) sequence, skipping tiles without keys
        loads = iter(wanted)
        content: dict[int, tuple] = {}
        fills = {s: 0 for s in range(stages)}        # completed fills per slot = mbarrier phases
        consumed: set = set()
        slot = 0

        def issue():
            nonlocal slot
            item = next(loads, None)
            if item is not None:
                assert slot not in content or content[slot] in consumed, "slot refilled before it was read"
                content[slot] = item
                fills[slot] += 1
            slot = (slot + 1) % stages

        for _ in range(stages - 1):
            issue()
        step = 0
        for t, c in enumerate(counts):
            for n in range(c):
                stage, phase = step % stages, (step // stages) & 1
                # mbar_wait(kv_full(stage), phase): this round's fill has landed, the next not yet
                assert fills[stage] == step // stages + 1 and (fills[stage] - 1) & 1 == phase
                issue()                                   # after __syncthreads: the previous slot is free
                assert content[stage] == (t, n), (trial, stage, content[stage], (t, n))
                consumed.add((t, n))
                step += 1
        assert next(loads, None) is None


def _driver_missing() -> bool:
    try:
        from cuda.bindings import driver as real

        real.cuInit(0)
    except Exception as exc:  # noqa: BLE001
        return type(exc).__name__ == "DynamicLibNotFoundError"
    return False


@pytest.mark.skipif(not _driver_missing(), reason="the NVIDIA driver is installed: real calls would run")
@pytest.mark.parametrize("arch_name", ARCHS)
def test_rehearsal_launch_with_pointers_or_tensor_maps(monkeypatch, archs, arch_name):
    """validate_attention through the rehearsal GPU: ampere's q / k / v pointers (unpadded,
    family.host_views) and rtx-blackwell's tensor maps both reach the launch."""
    from porter.runtime import cubins, device, driver, fakedriver
    from porter.runtime import timing
    from porter.validation import device_harness as dh
    from porter.runtime import device_runs as dr

    arch = archs[arch_name]
    monkeypatch.setattr(driver, "bindings", driver.bindings)
    monkeypatch.delenv(fakedriver.REHEARSAL_ENV, raising=False)
    monkeypatch.setattr(device, "_DEFAULT", {})
    monkeypatch.setattr(cubins, "candidates", lambda spec, arch: iter([("test", b"\x7fELF test")]))
    monkeypatch.setattr(timing, "MAX_ROTATION_SETS", 2)
    fakedriver.install(fakedriver.FakeGPU(arch_name))
    try:
        spec = _spec(arch, "attention.hd64.causal")
        checks = dr.validate_attention(spec, arch, shapes=[(1, 2, 1, 100, 70)], seeds=1)
        assert checks and all(c["passed"] for c in checks)
    finally:
        driver._init.cache_clear()
        driver.context.cache_clear()


@pytest.mark.slow
@pytest.mark.parametrize("arch_name,head_dim,causal,shape", [
    ("rtx-blackwell", 128, True, (1, 4, 2, 300, 420)), ("ampere", 64, True, (1, 4, 2, 300, 420)),
    ("rtx-blackwell", 64, False, (2, 2, 1, 90, 333))])
def test_persistent_tiles_gqa_and_masks_emulated(archs, arch_name, head_dim, causal, shape):
    """In porter's PTX simulator on a 2-SM device: several query tiles per persistent CTA
    (the next tile's Q and K/V loads in flight), grouped-query heads, causal with
    seq_q < seq_k, ragged key tails."""
    validate = pytest.importorskip("porter.runtime.emulated_runs")
    from porter.runtime.emulated import EmuDevice

    arch = archs[arch_name]
    spec = attention.find_spec(arch, head_dim, causal)
    result = validate.emulate(spec, arch, shapes=[shape], seeds=1, device=EmuDevice(sm_count=2))
    assert result["status"] == "passed", result["reason"]


def test_a_smaller_descriptor_takes_fewer_stages_or_names_the_shortfall():
    from porter import paths
    from porter.descriptor.arch import arch_from_text
    from porter.kernels.base import Unsupported

    text = (paths.data_dir("arch") / "ampere.yaml").read_text()
    assert text.count("smem_per_block_kib: 163") == 1
    small = arch_from_text(text.replace("smem_per_block_kib: 163", "smem_per_block_kib: 60"), "ampere-60k.yaml")
    specs = {s.name: s for s in attention.variants(small)}
    hd64 = specs["attention.hd64"]
    assert isinstance(hd64, KernelSpec) and hd64.config["stages"] == 3 and hd64.smem_bytes <= 60 * 1024
    hd128 = specs["attention.hd128"]
    assert isinstance(hd128, Unsupported) and "shared memory" in hd128.reason
