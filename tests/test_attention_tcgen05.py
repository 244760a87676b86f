"""Attention on tcgen05 tensor cores: every variant compiles for the tcgen05 descriptor and its
SASS shows the port - UTCHMMA for both MMAs (Q K^T from shared-memory descriptors, P V with
P read from Tensor Memory), LDTM / STTM softmax traffic, MUFU.EX2, UTMALDG, no spills -
within the descriptor's shared-memory and TMEM limits. Layout tests check the descriptors
the kernel computes against the canonical layouts the TMA boxes produce."""
from __future__ import annotations

import re
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.errors import CompileError, PorterError
from porter.kernels import attention, attention_tcgen05
from porter.kernels import encodings_tcgen05 as enc
from porter.kernels.base import KernelSpec, Unsupported
from porter.kernels.build import build_kernel
from porter.levels import Level
from porter.compile.sass import count_matching
from porter.compile.toolchain import compile_cuda

NAMES = ["attention.hd64", "attention.hd64.causal", "attention.hd128", "attention.hd128.causal"]
PAIR_NAMES = ["attention.hd128.pair", "attention.hd128.causal.pair", "attention.hd64.pair", "attention.hd64.causal.pair"]
ALL_NAMES = NAMES + PAIR_NAMES


@pytest.fixture(scope="module")
def tc_arch():
    return load_arch("blackwell")


@pytest.fixture(scope="module")
def wg_arch():
    return load_arch("hopper")


@pytest.fixture(scope="module")
def variants(tc_arch):
    return {s.name: s for s in attention.variants(tc_arch)}


@pytest.fixture(scope="module")
def specs(variants):
    return {name: s for name, s in variants.items() if isinstance(s, KernelSpec)}


@pytest.fixture(scope="module")
def builds(tc_arch, specs):
    """Each tcgen05 attention kernel built once per session (the compile cache helps reruns)."""
    return {name: build_kernel(spec, tc_arch) for name, spec in specs.items()}


def test_every_variant_reaches_sass_checked(builds):
    assert sorted(builds) == sorted(ALL_NAMES)
    for name, b in builds.items():
        failed = [c.to_dict() for c in b.checks if not c.passed]
        assert b.level == Level.SASS_CHECKED, (name, failed)
        assert b.spec.config["mainloop"] == "tcgen05" and b.spec.entry.startswith("attention_fwd_tcgen05_")


def _sass_lines(build, regex):
    return [line for line in build.sass.splitlines() if re.search(regex, line)]


@pytest.mark.parametrize("name", ALL_NAMES)
def test_both_mmas_are_tcgen05_with_p_from_tensor_memory(builds, name):
    b = builds[name]
    d, bn = b.spec.config["head_dim"], b.spec.config["block_n"]
    form = r"UTCHMMA\.2CTA" if b.spec.config["cta_group"] == 2 else r"UTCHMMA"
    # S = Q K^T: A and B are shared-memory descriptors, D in TMEM; one MMA per 16 of the head dim.
    qk = _sass_lines(b, form + r" gdesc\[UR\d+\], gdesc\[UR\d+\], tmem\[")
    # O += P V: A is a TMEM address (P never touches shared memory), B a descriptor (V).
    pv = _sass_lines(b, form + r" tmem\[UR\d+\], gdesc\[UR\d+\], tmem\[")
    assert qk and len(qk) % (d // 16) == 0
    assert pv and len(pv) % (bn // 16) == 0
    # Every MMA is one of the two, all in this kernel's one cta_group.
    assert count_matching(b.histogram, r"UTCHMMA") == len(qk) + len(pv)


@pytest.mark.parametrize("name", ["attention.hd64", "attention.hd128.causal"])
def test_softmax_reads_and_writes_tensor_memory(builds, name):
    b = builds[name]
    cfg = b.spec.config
    d, bn, chunk = cfg["head_dim"], cfg["block_n"], cfg["tmem_chunk"]
    # S row: block_n / 32 loads; O correction: head_dim / 32 loads + stores; epilogue: loads.
    assert count_matching(b.histogram, r"LDTM") >= bn // chunk + 2 * (d // chunk)
    # P (block_n / 2 columns of bf16 pairs) + the corrected O.
    assert count_matching(b.histogram, r"STTM") >= bn // (2 * chunk) + d // chunk
    # One ex2 per MUFU score of the row (unrolled; poly_exp2_share of them on the FMA units)
    # plus the correction factor.
    mufu_scores = bn - round(bn * cfg["poly_exp2_share"])
    assert count_matching(b.histogram, r"MUFU\.EX2") >= mufu_scores + 1
    assert count_matching(b.histogram, r"UTMALDG") >= 3          # Q, K, V boxes
    assert count_matching(b.histogram, r"UTCBAR") >= 4           # s_full, q_empty, kv_empty, pv_done
    assert count_matching(b.histogram, r"HGMMA|HMMA\b") == 0


def test_registers_and_limits_from_ptxas(builds, tc_arch):
    for name, b in builds.items():
        r = b.resources
        assert 0 < r["registers"] <= tc_arch.max_regs_per_thread, name
        # 6 warps of one CTA per SM must fit the register file at that count.
        assert r["registers"] * b.spec.threads <= tc_arch.regs_per_sm, name
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == r["local_bytes"] == 0, name
        assert r["shared_bytes"] + b.spec.smem_bytes <= tc_arch.smem_per_block_bytes, name


@pytest.mark.parametrize("name", ALL_NAMES)
def test_tmem_column_map_is_disjoint_and_fits(specs, tc_arch, name):
    spec = specs[name]
    cfg = spec.config
    cols = cfg["tmem_columns"]
    bn, d = cfg["block_n"], cfg["head_dim"]
    regions = [(c, c + bn) for c in cols["s"]] + [(o, o + d) for o in cols["o"]] + [(cols["p"], cols["p"] + bn // 2)]
    regions.sort()
    assert all(a_end <= b_start for (_, a_end), (b_start, _) in zip(regions, regions[1:])), regions
    assert regions[-1][1] == cols["used"] <= cols["allocated"] == spec.tmem_columns <= tc_arch.tmem.columns
    alloc = spec.tmem_columns
    assert alloc >= tc_arch.tmem.alloc_min_columns and alloc & (alloc - 1) == 0, "tcgen05.alloc takes a power of 2"
    assert len(cols["s"]) == 2, "S is double-buffered so Q K^T(n+1) overlaps the softmax of n"


@pytest.mark.parametrize("name,stages", [("attention.hd64", 4), ("attention.hd128", 3),
                                         ("attention.hd128.pair", 4)])
def test_stages_follow_the_shared_memory_budget(specs, tc_arch, name, stages):
    spec = specs[name]
    cfg = spec.config
    assert cfg["stages"] == stages
    assert spec.smem_bytes == cfg["smem_budget"]["total"] <= tc_arch.smem_per_block_bytes
    assert spec.smem_bytes == (cfg["smem_budget"]["align_slack"] + cfg["q_bytes"] + stages * cfg["stage_bytes"]
                               + cfg["smem_budget"]["barriers"])
    # One stage more would not fit (hd128) or the ring is at its cap (hd64).
    plan = attention_tcgen05.smem_plan(cfg["head_dim"], cfg["block_n"], tc_arch.smem_per_block_bytes,
                                       cfg["cta_group"])
    assert plan["stages"] == stages
    tight = attention_tcgen05.smem_plan(cfg["head_dim"], cfg["block_n"], spec.smem_bytes - 1, cfg["cta_group"])
    assert tight["stages"] == stages - 1


@pytest.mark.parametrize("name", ["attention.hd64", "attention.hd128", "attention.hd128.pair"])
def test_instruction_descriptors(specs, name):
    cfg = specs[name].config
    qk = enc.decode_instr_desc(int(cfg["idesc_qk"], 16), "f16")
    pv = enc.decode_instr_desc(int(cfg["idesc_pv"], 16), "f16")
    bf16 = enc.AB_TYPE["f16"]["bf16"]
    for f in (qk, pv):
        assert f["m"] == cfg["block_m"] == 128 * cfg["cta_group"] and f["a_type"] == f["b_type"] == bf16 and f["d_type"] == enc.DTYPE["f32"]
        assert f["a_major_mn"] == 0, "A (Q from smem, P from TMEM) is K-major"
    assert qk["n"] == cfg["block_n"] and qk["b_major_mn"] == 0        # K rows: K-major
    assert pv["n"] == cfg["head_dim"] and pv["b_major_mn"] == 1       # V rows: N (head dim) contiguous


# ---- descriptor vs. TMA box layout (canonical layouts, PTX ISA tcgen05 "Shared Memory
# Matrix Layouts"), all in bytes before the 128B swizzle. The swizzle XORs address bits
# 4-6 with bits 7-9 on both sides (TMA SWIZZLE_128B and the descriptor's 128B mode) from
# 1024-aligned tiles, so equal pre-swizzle offsets mean equal bytes. ----

def _tma_offset(row, col, rows_per_box):
    """Byte of bf16 element (row, col) of a tile loaded as 64-column, 128 B-row TMA boxes."""
    return (col // 64) * rows_per_box * 128 + row * 128 + 2 * (col % 64)


def _k_major_sw128(mn, k, sbo):
    """K-major, 128B swizzle: 8 rows of 128 B per atom (k contiguous), SBO between 8-row groups."""
    return 128 * (mn % 8) + sbo * (mn // 8) + 2 * k


def _mn_major_sw128(mn, k, lbo, sbo):
    """MN-major, 128B swizzle: ((8 x 8 elements, n), (8, k)) : ((2 B, 16 B, LBO), (128 B, SBO))."""
    return 2 * (mn % 64) + lbo * (mn // 64) + 128 * (k % 8) + sbo * (k // 8)


def test_v_descriptor_reads_v_transposed_from_the_tma_boxes(specs):
    cfg = specs["attention.hd128"].config
    desc = enc.decode_smem_desc(int(cfg["desc_v_mn_major"], 16))
    assert desc["swizzle"] == enc.SWIZZLE["128b"] and desc["version"] == 1 and desc["base_offset"] == 0
    bn, d = cfg["block_n"], cfg["head_dim"]
    for kk in range(bn // 16):                   # MMA kk: keys 16 kk .. +15, start + 2048 kk
        start = kk * 16 * 128
        for key in range(16):
            for col in range(d):
                got = start + _mn_major_sw128(col, key, desc["lbo"], desc["sbo"])
                assert got == _tma_offset(16 * kk + key, col, bn), (kk, key, col)


@pytest.mark.parametrize("name,operand", [("attention.hd128", "q"), ("attention.hd128", "k"),
                                          ("attention.hd128.pair", "k")])
def test_q_and_k_descriptors_step_32_bytes_inside_a_box(specs, name, operand):
    cfg = specs[name].config
    desc = enc.decode_smem_desc(int(cfg["desc_k_major"], 16))
    assert desc["swizzle"] == enc.SWIZZLE["128b"] and desc["sbo"] == 1024
    rows, d = cfg["tma_boxes"][operand][1], cfg["head_dim"]   # rows this CTA holds (K: half in a pair)
    for kk in range(d // 16):                    # MMA kk: head-dim 16 kk .. +15
        start = (kk // 4) * rows * 128 + (kk % 4) * 32
        for row in range(rows):
            for k in range(16):
                assert start + _k_major_sw128(row, k, desc["sbo"]) == _tma_offset(row, 16 * kk + k, rows)


def test_p_columns_match_the_tmem_a_operand_steps(specs):
    """P is stored as bf16 pairs (keys 2j, 2j+1 in column j); MMA kk reads 8 columns at
    P + 8 kk, i.e. keys 16 kk .. +15 - the same keys the V descriptor of MMA kk covers."""
    cfg = specs["attention.hd64"].config
    bn = cfg["block_n"]
    keys_of_column = {j: (2 * j, 2 * j + 1) for j in range(bn // 2)}
    for kk in range(bn // 16):
        cols = range(cfg["tmem_columns"]["p"] + 8 * kk, cfg["tmem_columns"]["p"] + 8 * kk + 8)
        keys = sorted(k for c in cols for k in keys_of_column[c - cfg["tmem_columns"]["p"]])
        assert keys == list(range(16 * kk, 16 * kk + 16))


# ---- rendering, features, host side ----

def test_pair_splits_k_rows_and_v_columns_across_the_cluster(specs, variants, tc_arch):
    single, pair = specs["attention.hd128"], specs["attention.hd128.pair"]
    assert pair.cluster == (2, 1, 1) and single.cluster == (1, 1, 1)
    assert set(pair.features) >= {"cta_pair", "clusters"} and "cta_pair" not in single.features
    assert pair.variant == single.variant == "attention.bf16.hd128"
    cfg = pair.config
    assert cfg["block_m"] == 256 and cfg["cta_rows"] == 128
    assert cfg["tma_boxes"] == {"q": [64, 128], "k": [64, 64], "v": [64, 128]}
    # Half the K/V bytes per CTA and stage, same Q and TMEM per CTA.
    assert cfg["stage_bytes"] * 2 == single.config["stage_bytes"] and cfg["q_bytes"] == single.config["q_bytes"]
    assert pair.tmem_columns == single.tmem_columns
    assert tc_arch.tensor_core.valid_shape("f16", 256, cfg["head_dim"], 2)
    src = attention.render(pair, tc_arch)
    assert "#define PORTER_TCGEN05_CTA_GROUP 2" in src and "tma_load_2d_pair(" in src
    assert "commit_multicast(bar, 0x3)" in src and "cluster_sync()" in src
    assert cfg["v_swizzle_bytes"] == 128 and cfg["tma_swizzles"] == {"v": "128B"}


def test_hd64_pair_v_takes_the_64_byte_swizzle(specs, tc_arch):
    """Each CTA of the hd64 pair holds 32 V columns = 64 bytes per key: its V boxes and the
    V descriptor use the 64-byte swizzle (atom 8 keys x 64 B: SBO 512 B), the MMA's K step is
    16 keys x 64 B; Q and K keep 128 B. The launch plan gives the V map its own swizzle."""
    for name in ("attention.hd64.pair", "attention.hd64.causal.pair"):
        cfg = specs[name].config
        assert cfg["v_swizzle_bytes"] == 64 and cfg["v_box_cols"] == 32
        assert cfg["tma_boxes"]["v"] == [32, cfg["block_n"]] and cfg["tma_boxes"]["q"] == [64, 128]
        d = enc.decode_smem_desc(int(cfg["desc_v_mn_major"], 16))
        assert d["swizzle"] == enc.SWIZZLE["64b"] and d["sbo"] == 8 * 64 and d["lbo"] == cfg["block_n"] * 64
        plan = attention.launch_plan(specs[name], tc_arch, 1, 2, 1, 300, 300)
        assert plan["tensor_maps"]["tma_v"]["swizzle"] == "64B" and plan["tensor_maps"]["tma_k"]["swizzle"] == "128B"
        src = attention.render(specs[name], tc_arch)
        assert "constexpr int kVBoxCols = 32;" in src and "kk * kMmaK * kVRowBytes" in src
    assert attention_tcgen05.v_swizzle_bytes(64) == 128 and attention_tcgen05.v_swizzle_bytes(32) == 64
    assert attention_tcgen05.v_swizzle_bytes(8) is None


def test_render_inlines_the_tmem_primitives(specs, tc_arch):
    spec = specs["attention.hd128.causal"]
    src = attention.render(spec, tc_arch)
    assert "#include \"" not in src
    assert "tcgen05.st.sync.aligned.32x32b.x32.b32" in src
    assert re.search(r'tcgen05\.mma" PORTER_TC_CG "\.kind::f16 \[%0\], \[%1\], %2', src), "A-from-TMEM form"
    assert "#define PORTER_TCGEN05_CTA_GROUP 1" in src
    assert f"constexpr uint32_t kTmemColumns = {spec.tmem_columns};" in src


def test_the_compiler_rejects_the_tcgen05_kernel_for_a_wgmma_target(specs, tc_arch, wg_arch):
    src = attention.render(specs["attention.hd64"], tc_arch)
    with pytest.raises(CompileError):
        compile_cuda(src, wg_arch.target, "attention_tcgen05_on_wgmma.cu")


def test_without_tcgen05_the_mainloop_names_what_is_missing(wg_arch):
    made = attention_tcgen05.make_spec(wg_arch, 128, False)
    assert len(made) == 1 and isinstance(made[0], Unsupported)      # no cta_pair: no .pair entry
    assert set(made[0].missing) >= {"tcgen05", "tmem"} and made[0].name == "attention.hd128"
    pair = attention_tcgen05.make_one(wg_arch, 128, True, pair=True)
    assert isinstance(pair, Unsupported) and set(pair.missing) >= {"tcgen05", "cta_pair"}


def test_dispatch_picks_tcgen05_by_feature(specs, wg_arch):
    assert all(isinstance(s, KernelSpec) and s.config["mainloop"] == "tcgen05" for s in specs.values())
    assert all(s.config["mainloop"] == "wgmma" for s in attention.variants(wg_arch) if isinstance(s, KernelSpec))


def test_params_and_launch_plan(specs, tc_arch):
    spec = specs["attention.hd128"]
    assert [tuple(p) for p in spec.config["params"]] == list(attention.PARAMS)
    plan = attention.launch_plan(spec, tc_arch, 2, 8, 2, 1000, 1000)
    assert plan["block"] == (192, 1, 1) and plan["smem_bytes"] == spec.smem_bytes
    assert plan["grid"][0] == min(2 * 8 * 8, tc_arch.sm_count)
    assert plan["tensor_maps"]["tma_k"]["box"] == [64, spec.config["block_n"]]


def test_numerics_model_passes_at_the_spec_tile(specs, tc_arch):
    spec = specs["attention.hd128.causal"]
    res = attention.numerics(spec, tc_arch)
    assert res["passed"], res
    assert res["block_n"] == spec.config["block_n"]


def test_host_entry_without_a_device_says_so(tc_arch):
    from porter.runtime import driver

    try:
        driver.device()
        pytest.skip("a CUDA device is present; the launch itself is covered by GPU tests")
    except PorterError:
        pass
    x = np.zeros((1, 2, 16, 128), dtype=ml_dtypes.bfloat16)
    with pytest.raises(PorterError, match="^no CUDA device: "):
        attention.attention(x, x, x, causal=False, arch=tc_arch)


def test_files_branch_on_features_not_names():
    from porter import paths

    files = [paths.data_dir("templates") / "attention" / "tcgen05.cu.j2", Path(attention_tcgen05.__file__)]
    files += sorted((paths.data_dir("kernels_src") / "attention").glob("tmem_*"))
    assert len(files) >= 4
    for f in files:
        text = f.read_text().lower()
        for word in ("hopper", "blackwell", "sm_90", "sm_100", "arch.name =="):
            assert word not in text, f"{f.name} mentions {word!r}"


# ---- the handshake protocol, replayed on a CPU model ------------------------------------
# The mainloop's roles only meet at mbarriers, so the waits, arrivals and commits below
# mirror templates/attention/tcgen05.cu.j2 step for step (same counters, same parities).
# A random scheduler interleaves the producer, the TMA engine, the MMA issuer, the
# in-order tensor core and the four softmax warps over tile sequences with empty tiles,
# and every read checks that it sees the data it expects: a wrong parity, a missing
# barrier or a too-small ring shows up as a deadlock or a stale / overwritten buffer.

class _Bar:
    """mbarrier: arrivals per phase, tx bytes; try_wait(P) is true once the phase of parity
    P completed, i.e. the current (incomplete) phase has the other parity."""

    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _maybe_flip(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, expect_tx=0):
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0
        self._maybe_flip()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._maybe_flip()

    def passed(self, parity):
        return self.phase % 2 != parity


def _replay_protocol(kv_tiles, stages, seed, group=1, fault=None):
    """Run the roles of one CTA (group 1) or one CTA pair (group 2) to completion.

    Pair rules mirrored: only CTA 0 issues MMAs and arms the full barriers (with both
    CTAs' bytes); both CTAs' loads complete on CTA 0's barriers; commits arrive on the
    barrier in both CTAs; every softmax warp of the pair arrives on CTA 0's p_full; each
    CTA's producer and softmax wait on their own barriers. ``fault`` breaks one rule on
    purpose (see the test below)."""
    import random

    rng = random.Random(seed)
    S_BUF, WARPS = (1 if fault == "one_s_buffer" else 2), 4
    ctas = range(group)

    def cta_bars(r):
        b = {"q_full": _Bar(1), "q_empty": _Bar(1), "p_full": _Bar(WARPS * group), "pv_done": _Bar(1)}
        for i in range(stages):
            b[f"k_full{i}"], b[f"v_full{i}"], b[f"kv_empty{i}"] = _Bar(1), _Bar(1), _Bar(1)
        for i in range(S_BUF):
            b[f"s_full{i}"] = _Bar(1)
        return b

    bars = [cta_bars(r) for r in ctas]
    mem = [{"q": None, "k": [None] * stages, "v": [None] * stages, "s": [None] * S_BUF,
            "p": [None] * WARPS, "o": [None] * WARPS} for _ in ctas]
    tma, tc_queue = [], []
    state = {"pv_last": None}
    stage_done = [None] * stages       # last kv iteration whose P V finished with the stage
    s_read = {(r, w): [None] * S_BUF for r in ctas for w in range(WARPS)}

    def wait(r, name, parity):
        while not bars[r][name].passed(parity):
            yield

    def load(r, kind, st, tag, bar):
        if r == 0:                          # the even CTA arms its barrier for the whole pair
            bars[0][bar].arrive(expect_tx=group)
        tma.append((r, kind, st, tag, bar))

    def producer(r):
        it = q_round = 0
        for tile, n_kv in enumerate(kv_tiles):
            if n_kv == 0:
                continue
            yield from wait(r, "q_empty", (q_round & 1) ^ 1)
            load(r, "q", None, tile, "q_full")
            q_round += 1
            for n in range(n_kv):
                st = it % stages
                yield from wait(r, f"kv_empty{st}", ((it // stages) & 1) ^ 1)
                assert stage_done[st] in (None, it - stages), "stage refilled before its P V finished"
                load(r, "k", st, it, f"k_full{st}")
                load(r, "v", st, it, f"v_full{st}")
                it += 1
                yield

    def mma_issuer():
        it0 = q_round = 0
        for tile, n_kv in enumerate(kv_tiles):
            if n_kv == 0:
                continue
            yield from wait(0, "q_full", q_round & 1)
            q_round += 1

            def pv_step(it, first):
                st = it % stages
                yield from wait(0, "p_full", it & 1)
                yield from wait(0, f"v_full{st}", (it // stages) & 1)
                tc_queue.append(("pv", it, st, first, tile))
                tc_queue.append(("commit", f"kv_empty{st}"))
                tc_queue.append(("commit", "pv_done"))

            for n in range(n_kv):
                it = it0 + n
                st, buf = it % stages, it % S_BUF
                yield from wait(0, f"k_full{st}", (it // stages) & 1)
                tc_queue.append(("qk", it, st, buf, tile))
                tc_queue.append(("commit", f"s_full{buf}"))
                if n == n_kv - 1:
                    tc_queue.append(("commit", "q_empty"))
                if n > 0:
                    yield from pv_step(it - 1, n == 1)
                yield
            it0 += n_kv
            yield from pv_step(it0 - 1, n_kv == 1)

    def tensor_core():
        while True:
            if not tc_queue:
                yield
                continue
            op = tc_queue.pop(0)
            if op[0] == "commit":
                for r in ctas:                  # multicast to the pair
                    bars[r][op[1]].arrive()
            elif op[0] == "qk":
                _, it, st, buf, tile = op
                for r in ctas:
                    assert mem[r]["q"] == tile and mem[r]["k"][st] == it, "Q K^T on a stale Q or K"
                    mem[r]["s"][buf] = it
                assert all(rd[buf] in (None, it - S_BUF) for rd in s_read.values()), "S overwritten before read"
            else:
                _, it, st, first, tile = op
                for r in ctas:
                    assert mem[r]["v"][st] == it, "P V on a stale V"
                    for w in range(WARPS):
                        assert mem[r]["p"][w] == it, "P V before P was written"
                        o = mem[r]["o"][w]
                        assert first or (o[0] == tile and o[1] == it - 1 and o[2] == it), "O not corrected"
                        mem[r]["o"][w] = (tile, it, None)
                stage_done[st] = it
                state["pv_last"] = it
            yield

    def tma_engine():
        while True:
            if tma:
                r, kind, st, tag, bar = tma.pop(rng.randrange(len(tma)))   # loads land in any order
                if kind == "q":
                    mem[r]["q"] = tag
                else:
                    mem[r][kind][st] = tag
                bars[0][bar].complete_tx(1)
            yield

    def softmax(r, w):
        it0 = 0
        for tile, n_kv in enumerate(kv_tiles):
            for n in range(n_kv):
                it, buf = it0 + n, (it0 + n) % S_BUF
                yield from wait(r, f"s_full{buf}", (it // S_BUF) & 1)
                assert mem[r]["s"][buf] == it, "softmax read a stale S"
                s_read[(r, w)][buf] = it
                yield
                if n > 0:
                    yield from wait(r, "pv_done", (it - (0 if fault == "pv_parity" else 1)) & 1)
                    assert mem[r]["o"][w][:2] == (tile, it - 1), "O corrected before P V(n-1) finished"
                    mem[r]["o"][w] = (tile, it - 1, it)
                else:
                    mem[r]["o"][w] = (tile, None, it)
                assert state["pv_last"] == (it - 1 if it else None), "P overwritten while a P V may read it"
                mem[r]["p"][w] = it
                bars[0]["p_full"].arrive()
                yield
            it0 += n_kv
            if n_kv:
                yield from wait(r, "pv_done", (it0 - 1) & 1)
                assert mem[r]["o"][w][:2] == (tile, it0 - 1), "epilogue read O before the last P V"

    finite = {"mma": mma_issuer()}
    for r in ctas:
        finite[f"producer{r}"] = producer(r)
        finite.update({f"softmax{r}.{w}": softmax(r, w) for w in range(WARPS)})
    daemons = [tensor_core(), tma_engine()]
    steps = 0
    while finite:
        steps += 1
        assert steps < 400_000, f"deadlock: {sorted(finite)} never finish"
        pick = rng.randrange(len(finite) + len(daemons))
        if pick >= len(finite):
            next(daemons[pick - len(finite)])
            continue
        name = list(finite)[pick]
        try:
            next(finite[name])
        except StopIteration:
            del finite[name]
    # Everything the roles started has drained: no arrival was left pending.
    while tc_queue or tma:
        for d in daemons:
            next(d)
    return bars


@pytest.mark.parametrize("group", [1, 2])
@pytest.mark.parametrize("stages", [2, 3, 4])
def test_handshake_protocol_has_no_deadlock_or_stale_read(stages, group):
    import random

    rng = random.Random(stages)
    for seed in range(30):
        kv_tiles = [rng.choice([0, 1, 1, 2, 3, 5]) for _ in range(rng.randint(1, 5))]
        bars = _replay_protocol(kv_tiles, stages, seed, group)
        total = sum(kv_tiles)
        for r in range(group):
            assert bars[r]["pv_done"].phase == total and bars[r]["q_empty"].phase == sum(1 for n in kv_tiles if n)
        assert bars[0]["p_full"].phase == total and bars[0]["k_full0"].tx == 0


@pytest.mark.parametrize("fault", ["pv_parity", "one_s_buffer"])
def test_handshake_model_catches_a_broken_rule(fault):
    """The model is not vacuous: the softmax waiting for the wrong P V phase, or a single
    S buffer (S(n+1) issued while the softmax may still read S(n)), is caught within a
    few schedules."""
    with pytest.raises(AssertionError):
        for seed in range(40):
            _replay_protocol([3, 4, 2], 4, seed, fault=fault)


def test_row_max_and_sum_are_tree_reductions(specs, tc_arch):
    """FA4's reduction: independent partial maxima / sums combined pairwise, so the dependent
    depth per S row is block_n / partials + log2(partials), not block_n."""
    spec = specs["attention.hd128"]
    red = spec.config["row_reduction"]
    parts, bn = red["partials"], spec.config["block_n"]
    assert red["kind"] == "tree" and parts > 1 and parts & (parts - 1) == 0
    assert red["max_depth"] == bn // parts + parts.bit_length() - 1 < bn // 2
    src = attention.render(spec, tc_arch)
    assert f"constexpr int kRowParts = {parts};" in src
    assert "const float row_max = tree_max(part);" in src and "l = l * alpha + tree_sum(part);" in src
    # no running chain over the row is left
    assert "mx = fmaxf(mx," not in src and "sum += p0 + p1" not in src


def test_lazy_rescale_threshold_is_a_knob(tc_arch):
    """Default 8 (FA4: O rescaled only when the max grows past 2^8); 0 = the classic online
    softmax, kept for an A/B on the first GPU visit; the numerics model follows the config."""
    spec = attention_tcgen05.make_one(tc_arch, 128, False, pair=False)
    assert spec.config["rescale_threshold_log2"] == 8
    src = attention.render(spec, tc_arch)
    assert "constexpr float kRescaleThreshold = 8.0f;" in src
    classic = attention_tcgen05.make_one(tc_arch, 128, False, pair=False, knobs={"rescale_threshold": 0})
    assert "constexpr float kRescaleThreshold = 0.0f;" in attention.render(classic, tc_arch)
    with pytest.raises(PorterError, match="rescale_threshold"):
        attention_tcgen05.make_one(tc_arch, 128, False, pair=False, knobs={"rescale_threshold": 3})
    res = attention.numerics(spec, tc_arch)
    assert res["passed"] and all(c["rescale_threshold"] == 8.0 for c in res["cases"])


def test_poly_exp2_share_splits_the_row_between_fma_and_mufu(builds, tc_arch):
    """FA4's split: a share of each row's exponentials by the degree-4 polynomial on the FMA
    units (the coefficients the numerics model checks), the rest on the MUFU. The default
    (share 0, see POLY_EXP2_SHARE) has every score on the MUFU; at 25% the SASS has fewer
    MUFU.EX2 by exactly the polynomial's share, and still no spills."""
    from porter.validation import attention_numerics as an

    default = builds["attention.hd128"]
    bn = default.spec.config["block_n"]
    assert default.spec.config["poly_exp2_share"] == 0
    assert count_matching(default.histogram, r"MUFU\.EX2") >= bn + 1
    spec = attention_tcgen05.make_one(tc_arch, 128, False, pair=False, knobs={"poly_exp2_share": 25})
    cfg = spec.config
    assert cfg["poly_exp2_share"] == 0.25 and cfg["poly_exp2"]["pairs_per_8"] == 2
    assert [float(np.float32(c)) for c in cfg["poly_exp2"]["coef"]] == [float(np.float32(c)) for c in an.EXP2_POLY]
    src = attention.render(spec, tc_arch)
    assert "constexpr int kPolyPairsPer8 = 2;" in src and "exp2_poly<Exp2Coef>(x)" in src
    b = build_kernel(spec, tc_arch)
    assert b.level == Level.SASS_CHECKED, [c.to_dict() for c in b.checks if not c.passed]
    ex2 = count_matching(b.histogram, r"MUFU\.EX2")
    # per row: 3/4 of the scores on the MUFU, + the correction factor
    assert bn * 3 // 4 + 1 <= ex2 < bn, ex2
    with pytest.raises(PorterError, match="poly_exp2_share"):
        attention_tcgen05.make_one(tc_arch, 128, False, pair=False, knobs={"poly_exp2_share": 30})
