"""The Blackwell (tcgen05) GEMM path: configs from the descriptor, generated source, and
the machine code NVRTC + nvdisasm produce for sm_100a (no GPU needed)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from porter.compile import sass as sasslib
from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import encodings_tcgen05 as enc
from porter.kernels import gemm, gemm_tcgen05
from porter.kernels.base import KernelSpec
from porter.kernels.build import build_kernel
from porter.levels import Level

VARIANTS = ("bf16", "fp8", "mxfp8", "nvfp4")
CASES = [(v, pair) for pair in (False, True) for v in VARIANTS]
IDS = [f"{v}{'.pair' if p else ''}" for v, p in CASES]
# Expected tensor-core opcode per variant (nvdisasm 13.x), checked on the real SASS.
OPCODE = {"bf16": "UTCHMMA", "fp8": "UTCQMMA", "mxfp8": "UTCQMMA", "nvfp4": "UTCOMMA"}


@pytest.fixture(scope="module")
def arch():
    return load_arch("blackwell")


@pytest.fixture(scope="module")
def builds(arch):
    """Every Blackwell GEMM kernel compiled once per test session (on-disk cache after)."""
    out = {}
    for v, pair in CASES:
        spec = gemm.make_spec(arch, v, pair)
        out[(v, pair)] = build_kernel(spec, arch)
    return out


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_reaches_sass_checked(builds, case):
    b = builds[case]
    failed = [f"{c.name}: {c.detail}" for c in b.checks if not c.passed]
    assert b.level == Level.SASS_CHECKED, failed
    assert b.resources["spill_store_bytes"] == 0 and b.resources["spill_load_bytes"] == 0
    assert b.resources["local_bytes"] == 0


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_sass_shows_the_path(builds, case):
    v, pair = case
    hist = builds[case].histogram
    op = OPCODE[v]
    mma = {k: n for k, n in hist.items() if k.startswith(op)}
    # One MMA per 32 bytes of K of the 128-byte stage, unrolled: four in the main loop.
    assert sum(mma.values()) == 4, hist
    assert all((".2CTA" in k) == pair for k in mma), mma
    if v == "nvfp4":
        assert all(k.endswith(".4X") for k in mma), mma
    assert sasslib.count_matching(hist, r"LDTM\.x32") >= 1          # epilogue tcgen05.ld
    assert sasslib.count_matching(hist, r"UTMALDG\.2D") >= 2        # A and B TMA loads
    assert sasslib.count_matching(hist, r"UTCBAR") == 2             # stage + accumulator commits
    assert sasslib.count_matching(hist, r"UTCATOMSWS") >= 2         # TMEM alloc + dealloc
    assert sasslib.count_matching(hist, r"(HMMA|QMMA|HGMMA|STL|LDL)\b") == 0
    if pair:
        assert sasslib.count_matching(hist, r"UTMALDG\.2D\.2CTA") >= 2
        assert sasslib.count_matching(hist, r"UTCBAR\.2CTA\.MULTICAST") == 2
    scaled = v in ("mxfp8", "nvfp4")
    assert (sasslib.count_matching(hist, r"UTCCP") > 0) == scaled
    # Coalesced epilogue, one pass of the (not unrolled) chunk loop: 64 columns per chunk =
    # 8 16-byte units per row written by each lane, read back as 8 steps of 4 rows x 128 B.
    cfg = builds[case].spec.config
    units = cfg["epilogue_chunk_columns"] // 8
    assert hist.get("STS.128") == units and hist.get("LDS.128") == units, hist
    assert hist.get("STG.E.128") == units and sasslib.count_matching(hist, r"STG") == units, hist


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_config_fits_the_descriptor(arch, builds, case):
    v, pair = case
    spec: KernelSpec = builds[case].spec
    cfg = spec.config
    assert cfg["mainloop"] == "tcgen05" and cfg["cta_group"] == (2 if pair else 1)
    assert arch.tensor_core.valid_shape(cfg["kind"], cfg["mma_m"], cfg["mma_n"], cfg["cta_group"])
    assert cfg["mma_k"] == arch.tensor_core.k_of(cfg["kind"])
    assert cfg["cta_rows"] == arch.tmem.lanes
    assert spec.cluster == ((2, 1, 1) if pair else (1, 1, 1))
    assert spec.threads == 192 and spec.smem_bytes <= arch.smem_per_block_bytes
    assert cfg["stages"] >= gemm_tcgen05.MIN_STAGES
    tmem = cfg["tmem_budget"]
    assert tmem["used"] <= tmem["allocated"] == spec.tmem_columns <= arch.tmem.columns
    assert spec.tmem_columns & (spec.tmem_columns - 1) == 0 and spec.tmem_columns >= 32
    # B200's 512 columns hold two 256-column accumulators for the unscaled variants; the
    # block-scaled ones take N = 256 too, and their scale slots leave room for one.
    assert cfg["mma_n"] == 256
    assert cfg["acc_buffers"] == (1 if v in ("mxfp8", "nvfp4") else 2)
    assert cfg["acc_buffers"] * cfg["mma_n"] + tmem["scale_slots"] * (tmem["sfa_per_slot"] + tmem["sfb_per_slot"]) \
        == tmem["used"] <= arch.tmem.columns
    assert cfg["params"] == gemm.kernel_params(gemm.VARIANTS[v])
    assert cfg["tile_m"] == cfg["mma_m"] and cfg["tile_n"] == cfg["mma_n"]
    assert cfg["tile_k"] * {"bf16": 16, "fp8": 8, "mxfp8": 8, "nvfp4": 4}[v] == 128 * 8
    budget = cfg["smem_budget"]
    assert budget["total"] == spec.smem_bytes == (budget["align_slack"] + budget["stages"] * budget["per_stage"]
                                                  + budget["epilogue_staging"] + budget["barriers"])
    # 4 epilogue warps x 32 rows x 128 B of bf16 staging.
    assert budget["epilogue_staging"] == 4 * 32 * budget["epilogue_row"] == 16384
    assert builds[case].resources["shared_bytes"] + spec.smem_bytes <= arch.smem_per_block_bytes
    assert builds[case].resources["registers"] <= cfg["registers_ceiling"] <= cfg["registers_budget"]


def test_expected_kinds_and_shapes(arch):
    got = {(v, p): (s.config["kind"], s.config["mma_m"], s.config["mma_n"])
           for v, p in CASES for s in [gemm.make_spec(arch, v, p)]}
    assert got[("bf16", False)] == ("f16", 128, 256)
    assert got[("fp8", True)] == ("f8f6f4", 256, 256)
    # Block-scaled: the widest N (256) with one accumulator next to a scale slot per stage
    # (issue 17 item 2), not N = 128 double-buffered.
    assert got[("mxfp8", False)] == ("mxf8f6f4", 128, 256)
    assert got[("nvfp4", True)] == ("mxf4nvf4", 256, 256)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_source_carries_the_encodings(builds, case):
    v, pair = case
    b = builds[case]
    cfg = b.spec.config
    src = b.source
    assert cfg["smem_desc_operand"] + "ull" in src
    for w in cfg["idesc"]:
        assert w + "u" in src
    f = enc.decode_instr_desc(int(cfg["idesc"][0], 16), cfg["kind"])
    assert (f["m"], f["n"], f["a_major_mn"], f["b_major_mn"]) == (cfg["mma_m"], cfg["mma_n"], 0, 0)
    # One cta_group for every tcgen05 op of the kernel (PTX ISA 9.7.16.10.9.1).
    assert "#define PORTER_TCGEN05_CTA_GROUP " + str(cfg["cta_group"]) in src
    ptx = b.compiled.ptx
    groups = set(re.findall(r"tcgen05\.\w+\.cta_group::(\d)", ptx))
    assert groups == {str(cfg["cta_group"])}
    for name, _ in cfg["params"]:
        assert re.search(rf"\b{name}\b", src.split(b.spec.entry, 1)[1].split("{", 1)[0])


def test_mxfp8_sf_ids_step_through_the_word(arch):
    cfg = gemm.make_spec(arch, "mxfp8", False).config
    ids = [enc.decode_instr_desc(int(w, 16), "mxf8f6f4") for w in cfg["idesc"]]
    assert [(f["sfa_id"], f["sfb_id"]) for f in ids] == [(j, j) for j in range(4)]
    assert all(f["scale_type"] == 1 for f in ids)                     # ue8m0
    nv = gemm.make_spec(arch, "nvfp4", False).config
    f = enc.decode_instr_desc(int(nv["idesc"][0], 16), "mxf4nvf4")
    assert (f["scale_type"], f["sfa_id"], f["sfb_id"]) == (0, 0, 0)   # ue4m3, 4X needs id 0
    assert nv["sfa_mma_column"] == [0, 4, 8, 12]                     # one 4-column chunk per MMA


def test_stages_after_the_epilogue_staging(arch):
    """The 16 KiB of epilogue staging costs a stage where the ring filled shared memory:
    bf16/fp8 pair 7 -> 6, nvfp4 (54 KiB stages at N = 256) 4 -> 3; the others keep theirs."""
    got = {f"{v}{'.pair' if p else ''}": gemm.make_spec(arch, v, p).config["stages"] for v, p in CASES}
    assert got == {"bf16": 4, "fp8": 4, "mxfp8": 4, "nvfp4": 3,
                   "bf16.pair": 6, "fp8.pair": 6, "mxfp8.pair": 6, "nvfp4.pair": 5}


def test_smaller_tmem_shrinks_the_tile(arch):
    """The chooser reads the TMEM budget (widest N first, two accumulators where they fit):
    with 256 columns bf16 keeps N = 256 in one accumulator, with 128 columns N shrinks to 128;
    nvfp4 with 256 columns has no room beside its scale slots for N = 256 and takes 128."""
    def cfg_of(columns, variant="bf16", pair=False):
        small = dataclasses.replace(arch, tmem=dataclasses.replace(arch.tmem, columns=columns))
        c = gemm_tcgen05.make_spec(small, gemm.VARIANTS[variant], pair).config
        return c["mma_n"], c["acc_buffers"], c["tmem_budget"]["allocated"]
    assert cfg_of(256) == (256, 1, 256)
    assert cfg_of(128) == (128, 1, 128)
    n, buffers, allocated = cfg_of(256, "nvfp4", True)
    assert n == 128 and allocated == 256


def test_path_needs_tcgen05(arch):
    hopper = load_arch("hopper")
    with pytest.raises(PorterError, match="tcgen05"):
        gemm_tcgen05.make_spec(hopper, gemm.VARIANTS["bf16"], False)


# ---- the block-scale path of the generated kernels, modelled on the CPU --------------------

def _model_block_scaled_gemm(cfg, qa, qb, m, n, k):
    """Replays what the kernel does with scale factors, driven by the spec's own numbers:
    TMA boxes of the host tensor (block_scale_layout order) -> shared memory chunks ->
    tcgen05.cp into the stage's TMEM slot at SFA/SFB_CHUNK_COLUMN -> MMA j reads its scales
    at SFA/SFB_MMA_COLUMN[j] with the SF ids of IDESC[j]. Returns the fp64 GEMM."""
    from porter.kernels import block_scale_layout as bsl
    from porter.validation import formats

    scheme = gemm_tcgen05.SCALE_SCHEMES[cfg["block_scale"]]
    va = formats.decode(qa.codes, qa.elem)
    vb = formats.decode(qb.codes, qb.elem)
    flat_a, flat_b = bsl.to_kernel_layout(qa.block_scales), bsl.to_kernel_layout(qb.block_scales)
    n_cols = k // scheme.block
    kc = cfg["sf_k_chunks"]
    sfa_slot = cfg["tmem_budget"]["sfa_per_slot"]
    rows_a, tile_n, tile_k, mma_k = cfg["cta_rows"], cfg["mma_n"], cfg["tile_k"], cfg["mma_k"]
    out = np.zeros((m, n))
    box = kc * bsl.CHUNK_BYTES
    for m0 in range(0, m, rows_a):                # each CTA's own 128 rows of A
        for n0 in range(0, n, tile_n):
            for kt in range(k // tile_k):
                row = bsl.tma_row_of_chunk(m0 // 128, kt * kc, n_cols) * bsl.TMA_ROW_BYTES
                smem_a = flat_a[row:row + box]
                smem_b = np.concatenate([
                    flat_b[(r := bsl.tma_row_of_chunk(n0 // 128 + g, kt * kc, n_cols) * bsl.TMA_ROW_BYTES):r + box]
                    for g in range(tile_n // 128)])
                tmem = np.zeros((128, cfg["tmem_budget"]["sfa_per_slot"] + cfg["tmem_budget"]["sfb_per_slot"], 4),
                                dtype=np.uint8)
                for i, col in enumerate(cfg["sfa_chunk_column"]):
                    bsl.tcgen05_cp_32x128b_warpx4(tmem, col, smem_a[i * 512:(i + 1) * 512])
                for i, col in enumerate(cfg["sfb_chunk_column"]):
                    bsl.tcgen05_cp_32x128b_warpx4(tmem, sfa_slot + col, smem_b[i * 512:(i + 1) * 512])
                for j in range(cfg["mmas_per_stage"]):
                    ids = enc.decode_instr_desc(int(cfg["idesc"][j], 16), cfg["kind"])
                    k0 = kt * tile_k + j * mma_k
                    per = scheme.scales_per_mma
                    ra, rb = np.arange(rows_a), np.arange(tile_n)
                    sa = np.stack([bsl.mma_reads_scale(tmem, cfg["sfa_mma_column"][j], ra, kb, scheme,
                                                       ids["sfa_id"]) for kb in range(per)], axis=1)
                    sb = np.stack([bsl.mma_reads_scale(tmem, sfa_slot + cfg["sfb_mma_column"][j], rb, kb, scheme,
                                                       ids["sfb_id"]) for kb in range(per)], axis=1)
                    fmt = "ue8m0" if scheme.scale_format == "ue8m0" else "e4m3"
                    sa_v = np.repeat(formats.decode(sa.astype(np.uint8), fmt), scheme.block, axis=1)
                    sb_v = np.repeat(formats.decode(sb.astype(np.uint8), fmt), scheme.block, axis=1)
                    a = va[m0:m0 + rows_a, k0:k0 + mma_k] * sa_v
                    b = vb[n0:n0 + tile_n, k0:k0 + mma_k] * sb_v
                    # einsum, not a @ b.T: tiny products, and BLAS threads cost seconds on a busy 2-core box
                    out[m0:m0 + rows_a, n0:n0 + tile_n] += np.einsum("ik,jk->ij", a, b)
    ts = float(qa.tensor_scale or 1.0) * float(qb.tensor_scale or 1.0)
    return out * ts


@pytest.mark.parametrize("variant,pair", [("mxfp8", False), ("mxfp8", True), ("nvfp4", False), ("nvfp4", True)])
def test_kernel_scale_path_reproduces_the_quantized_gemm(arch, variant, pair):
    from porter.validation import quantize

    cfg = gemm.make_spec(arch, variant, pair).config
    m, n, k = 256, 2 * cfg["mma_n"], 2 * cfg["tile_k"]
    rng = np.random.default_rng(7)
    a = rng.standard_normal((m, k)).astype(np.float32) * np.exp(rng.uniform(-4, 4, (m, 1))).astype(np.float32)
    b = rng.standard_normal((n, k)).astype(np.float32) * np.exp(rng.uniform(-4, 4, (1, k))).astype(np.float32)
    qa, qb = quantize.quantize_for(variant, a), quantize.quantize_for(variant, b)
    got = _model_block_scaled_gemm(cfg, qa, qb, m, n, k)
    want = np.einsum("ik,jk->ij", quantize.dequantize(qa), quantize.dequantize(qb))
    assert np.allclose(got, want, rtol=1e-12, atol=1e-12 * np.abs(want).max())


# ---- the barrier protocol of the generated kernels, modelled on the CPU --------------------
#
# A randomised interleaving of the roles exactly as templates/gemm/tcgen05.cu.j2 writes them:
# stage/phase counters, parity waits ((r & 1) ^ 1 for empty slots, (r & 1) for full ones,
# per-buffer accumulator phases), arrival counts (full 1 + tx, empty 1, acc_full 1,
# acc_empty 4 x CTA_GROUP) and asynchronous completions (TMA landing, MMA + commit) that
# fire in random order. It asserts that every MMA reads the stage loaded for its
# (tile, k) in every CTA, that no TMA overwrites a stage an MMA still reads, that no MMA
# writes an accumulator the epilogue still reads, that each epilogue sees its own tile's
# complete sum, and that nothing deadlocks.

class _MBar:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.completed = count, count, 0, 0

    def _settle(self):
        if self.pending == 0 and self.tx == 0:
            self.completed += 1
            self.pending = self.count

    def arrive(self, expect_tx=0):
        self.tx += expect_tx
        self.pending -= 1
        assert self.pending >= 0, "more arrivals than the barrier's count in one phase"
        self._settle()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._settle()

    def passed(self, parity):
        # try_wait.parity(P) succeeds once the phase with parity P completed, i.e. the
        # current phase has the other parity.
        return (self.completed & 1) != parity


def _tiles(num_m, num_n, first, stride, group_m):
    out, unit = [], first
    while unit < num_m * num_n:
        per_group = group_m * num_n
        group, in_group = divmod(unit, per_group)
        rows = min(num_m - group * group_m, group_m)
        out.append((group * group_m + in_group % rows, in_group // rows))
        unit += stride
    return out


def _simulate(cfg, num_m, num_n, k_tiles, seed):
    import random

    rng = random.Random(seed)
    S, B, G = cfg["stages"], cfg["acc_buffers"], cfg["cta_group"]
    tiles = _tiles(num_m, num_n, 0, 1, cfg["group_m"])        # one cluster walking every tile
    TX = cfg["stage_tx_bytes"]
    bars = [dict(full=[_MBar(1) for _ in range(S)], empty=[_MBar(1) for _ in range(S)],
                 acc_full=[_MBar(1) for _ in range(B)], acc_empty=[_MBar(4 * G) for _ in range(B)])
            for _ in range(G)]
    smem = [[None] * S for _ in range(G)]          # (tile, kt) landed in stage s of CTA c
    reading = [[0] * S for _ in range(G)]          # MMAs in flight on stage s
    acc = [[None] * B for _ in range(G)]           # (tile, k stages summed)
    epi_reading = [[0] * B for _ in range(G)]
    pending = []                                   # async completions, fired in random order
    seen = []

    def producer(c):
        stage = phase = 0
        for t in tiles:
            for kt in range(k_tiles):
                while not bars[c]["empty"][stage].passed(phase ^ 1):
                    yield
                if c == 0:
                    bars[0]["full"][stage].arrive(expect_tx=G * TX)
                s = stage

                def land(c=c, s=s, t=t, kt=kt):
                    assert reading[c][s] == 0, "TMA overwrote a stage an MMA still reads"
                    smem[c][s] = (t, kt)
                    bars[0]["full"][s].complete_tx(TX)  # the even CTA's barrier
                pending.append(land)
                stage, phase = (0, phase ^ 1) if stage + 1 == S else (stage + 1, phase)
                yield

    def mma():
        stage = phase = 0
        for i, t in enumerate(tiles):
            buf, acc_phase = i % B, (i // B) & 1
            while not bars[0]["acc_empty"][buf].passed(acc_phase ^ 1):
                yield
            for c in range(G):
                assert epi_reading[c][buf] == 0, "MMA overwrote an accumulator the epilogue reads"
                acc[c][buf] = (t, 0)
            for kt in range(k_tiles):
                while not bars[0]["full"][stage].passed(phase):
                    yield
                for c in range(G):
                    assert smem[c][stage] == (t, kt), "MMA read a stage loaded for another (tile, k)"
                    reading[c][stage] += 1
                    acc[c][buf] = (t, acc[c][buf][1] + 1)
                s = stage

                def done(s=s):                     # MMAs complete -> commit arrives (multicast)
                    for c in range(G):
                        reading[c][s] -= 1
                        bars[c]["empty"][s].arrive()
                pending.append(done)
                stage, phase = (0, phase ^ 1) if stage + 1 == S else (stage + 1, phase)
                yield

            def acc_done(buf=buf):
                for c in range(G):
                    bars[c]["acc_full"][buf].arrive()
            # commit after the last stage tracks every earlier MMA: fire after them
            pending.append(lambda f=acc_done, n=len(pending): f())
            yield

    def epilogue(c):
        for i, t in enumerate(tiles):
            buf, acc_phase = i % B, (i // B) & 1
            while not bars[c]["acc_full"][buf].passed(acc_phase):
                yield
            epi_reading[c][buf] += 1
            assert acc[c][buf] == (t, k_tiles), "epilogue read an incomplete or foreign accumulator"
            seen.append((c, t))
            yield
            epi_reading[c][buf] -= 1
            for _ in range(4):                     # one arrive per epilogue warp
                bars[0]["acc_empty"][buf].arrive()

    roles = [producer(c) for c in range(G)] + [mma()] + [epilogue(c) for c in range(G)]
    live = list(roles)
    for _ in range(200000):
        if not live and not pending:
            break
        # commits complete in issue order (a commit tracks all earlier tcgen05 ops of the
        # thread), TMA landings in any order: fire the oldest MMA completion or any landing.
        if pending and rng.random() < 0.4:
            pending.pop(rng.randrange(len(pending)) if rng.random() < 0.5 else 0)()
            continue
        if live:
            role = rng.choice(live)
            try:
                next(role)
            except StopIteration:
                live.remove(role)
    assert not live and not pending, "deadlock: roles still waiting"
    assert sorted(seen) == sorted((c, t) for c in range(G) for t in tiles)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_barrier_protocol_model(arch, case):
    cfg = gemm.make_spec(arch, *case).config
    for seed in range(3):
        _simulate(cfg, num_m=3, num_n=2, k_tiles=cfg["stages"] + 2, seed=seed)


# ---- the epilogue's index math, modelled on the CPU -------------------------------------
#
# The staging swizzle and read-back mapping are evaluated from the rendered kernel's own
# device functions (epi_stage_offset, epi_read_row, epi_read_unit), so editing them in the
# template changes what is checked here. One warp instruction of 16-byte shared accesses runs
# in 4 phases of 8 lanes; a phase is conflict-free when its 8 x 16 B hit 32 distinct banks.

def _epilogue_functions(src: str) -> dict:
    consts: dict[str, int] = {}
    for name, expr in re.findall(r"constexpr (?:int|uint32_t) (\w+) = ([^;]+);", src):
        try:   # integer constexprs in order; ones built from Jinja-free C++ only
            consts[name] = int(eval(re.sub(r"(\d)u\b", r"\1", expr).replace("/", "//"),  # noqa: S307
                                    {"__builtins__": {}}, dict(consts)))
        except (NameError, SyntaxError, TypeError):
            pass
    funcs = {}
    for name, args, expr in re.findall(
            r"PORTER_DEVICE uint32_t (epi_\w+)\(([^)]*)\) \{ return ([^;]+); \}", src):
        params = [a.split()[-1] for a in args.split(",")]
        # Unsigned C arithmetic on small non-negative values: Python's, with / -> //
        # (<<, &, ^, %, * and + bind the same way in both languages).
        py = re.sub(r"(\d)u\b", r"\1", expr).replace("/", "//")
        funcs[name] = eval(f"lambda {', '.join(params)}: {py}", {"__builtins__": {}, **consts})  # noqa: S307
    assert set(funcs) == {"epi_stage_offset", "epi_read_row", "epi_read_unit"}, sorted(funcs)
    return {**funcs, **consts}


def _banks(offsets):
    return [(off // 4 + b) % 32 for off in offsets for b in range(4)]


def _model_epilogue(cfg, src: str, n: int = 4096):
    """Replays one tile of the epilogue for every warp (and both CTAs of a pair) and checks
    each (row, 8-column unit) of C is stored exactly once with the value for that place, that
    every 8-lane phase of the staging writes and reads is bank-conflict free, and that each
    global store instruction of a warp covers whole, aligned 128-byte lines of C."""
    f = _epilogue_functions(src)
    off, read_row, read_unit = f["epi_stage_offset"], f["epi_read_row"], f["epi_read_unit"]
    chunk_cols, cols, warp_bytes = f["EPI_CHUNK_COLS"], f["EPI_COLS"], f["EPI_WARP_BYTES"]
    assert chunk_cols * 2 == f["EPI_ROW_BYTES"] == 128 and cfg["mma_n"] % chunk_cols == 0
    # The kernel's C addressing, mirrored below: row0 + r, column chunk + 8u of the tile.
    assert "const int row0 = tile_m * TILE_M + rank * CTA_ROWS + quarter * 32;" in src
    assert "c_tile + static_cast<size_t>(r) * n + chunk + 8 * u) = q;" in src
    assert "staging + epi_stage_offset(lane, part * (EPI_COLS / 8) + j)) = q;" in src
    steps = 32 * f["EPI_ROW_BYTES"] // (32 * 16)
    tile_m, tile_n, cta_rows = cfg["tile_m"], cfg["mma_n"], cfg["cta_rows"]
    stored = {}                                     # (row, col) of C -> times stored
    for rank in range(cfg["cta_group"]):
        for quarter in range(4):
            row0 = rank * cta_rows + quarter * 32    # tile (0, 0); other tiles only shift the base
            for chunk in range(0, tile_n, chunk_cols):
                staging = {}                        # byte offset -> (row, col) the unit holds
                for part in range(chunk_cols // cols):
                    for j in range(cols // 8):
                        unit = part * (cols // 8) + j
                        offs = [off(lane, unit) for lane in range(32)]
                        for phase in range(4):
                            banks = _banks(offs[8 * phase:8 * phase + 8])
                            assert len(set(banks)) == 32, f"staging write unit {unit}: bank conflict {sorted(banks)}"
                        for lane, o in enumerate(offs):
                            assert o % 16 == 0 and 0 <= o < warp_bytes, f"staging offset {o} outside the warp's buffer"
                            assert o not in staging, f"staging write of lane {lane} unit {unit} overwrites {staging[o]}"
                            staging[o] = (row0 + lane, chunk + 8 * unit)   # lane = accumulator row
                assert len(staging) == warp_bytes // 16
                for step in range(steps):
                    rows = [read_row(step, lane) for lane in range(32)]
                    units = [read_unit(lane) for lane in range(32)]
                    offs = [off(r, u) for r, u in zip(rows, units)]
                    for phase in range(4):
                        banks = _banks(offs[8 * phase:8 * phase + 8])
                        assert len(set(banks)) == 32, f"staging read step {step}: bank conflict {sorted(banks)}"
                    lines = {}
                    for r, u, o in zip(rows, units, offs):
                        place = (row0 + r, chunk + 8 * u)
                        assert staging.get(o) == place, f"C{place} would get the value of {staging.get(o)}"
                        stored[place] = stored.get(place, 0) + 1
                        addr = (place[0] * n + place[1]) * 2            # bytes, C 128-byte aligned
                        lines.setdefault(addr // 128, set()).add(addr % 128)
                    assert len(lines) == 4 and all(v == set(range(0, 128, 16)) for v in lines.values()), \
                        f"store step {step} touches lines {sorted((k, sorted(v)) for k, v in lines.items())}"
    want = {(r, c) for r in range(tile_m) for c in range(0, tile_n, 8)}
    assert set(stored) == want and set(stored.values()) == {1}, "C not stored exactly once per (row, unit)"


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_epilogue_index_model(builds, case):
    _model_epilogue(builds[case].spec.config, builds[case].source)


@pytest.mark.parametrize("old,new,match", [
    # no swizzle: the 8 rows of a write phase put unit u on the same 4 banks
    ("((unit ^ (row % 8u)) << 4)", "(unit << 4)", "staging write unit 0: bank conflict"),
    # swizzle over 4 rows: rows r and r + 4 of a phase still collide
    ("((unit ^ (row % 8u)) << 4)", "((unit ^ (row % 4u)) << 4)", "staging write unit 0: bank conflict"),
    # swizzle over 16 rows: units spill into the next row and overwrite it
    ("((unit ^ (row % 8u)) << 4)", "((unit ^ (row % 16u)) << 4)", "overwrites|outside"),
    # read-back 8 rows apart: rows past the buffer, half the tile never stored
    ("4u * step + lane / 8u", "8u * step + lane / 8u", "would get the value of None"),
    # lanes interleaved across 4 rows: conflicts, half-used lines, units stored twice
    ("4u * step + lane / 8u", "4u * step + lane % 4u", "staging read step 0: bank conflict"),
], ids=["no-swizzle", "swizzle-mod4", "swizzle-mod16", "read-row-stride", "read-interleaved"])
def test_epilogue_index_model_has_teeth(builds, old, new, match):
    b = builds[("bf16", False)]
    assert b.source.count(old) == 1
    with pytest.raises(AssertionError, match=match):
        _model_epilogue(b.spec.config, b.source.replace(old, new))


def test_epilogue_model_sees_an_unmirrored_store(builds):
    """The C address and the staging-write call are mirrored, not evaluated: a template edit
    there must stop the model rather than pass unchecked."""
    b = builds[("bf16", False)]
    src = b.source.replace("chunk + 8 * u) = q;", "chunk + 8 * (u ^ 1)) = q;")
    assert src != b.source
    with pytest.raises(AssertionError):
        _model_epilogue(b.spec.config, src)


@pytest.mark.parametrize("variant", ["bf16", "nvfp4"])
def test_pair_waits_no_stronger_than_the_isa_needs(arch, variant):
    """Issue 17 item 4: in the pair form only the accumulator hand-back (acc_empty, generic
    arrivals from the other CTA) waits with a cluster-scope acquire; the stage and
    accumulator-full waits (TMA complete_tx, tcgen05.commit) take the CTA-scope one, so the
    L1 invalidate ptxas puts after a cluster-scope acquire leaves the per-K-step path.
    wait_scope=cluster (the previous form) puts it back on every wait."""
    from porter.kernels import knobs

    name = f"gemm.{variant}.pair"
    forms = {scope: knobs.spec_with_knobs(arch, name, {"wait_scope": scope}) for scope in ("cta", "cluster")}
    assert gemm.make_spec(arch, variant, True).config["wait_scope"] == "cta"
    src = {scope: gemm.render(spec, arch) for scope, spec in forms.items()}
    waits = {scope: re.findall(r"porter::(mbar_wait(?:_cluster)?)\(bar\(bars\.(\w+)\[", text)
             for scope, text in src.items()}
    assert {b for w, b in waits["cta"] if w == "mbar_wait_cluster"} == {"acc_empty"}
    assert {b for w, b in waits["cta"] if w == "mbar_wait"} == {"full", "empty", "acc_full"}
    assert {w for w, _ in waits["cluster"]} == {"mbar_wait_cluster"}
    assert len(waits["cta"]) == len(waits["cluster"])
    l1 = arch.sass_pattern("op:l1_invalidate")
    built = {scope: build_kernel(spec, arch) for scope, spec in forms.items()}
    for b in built.values():
        assert b.level == Level.SASS_CHECKED and b.resources["spill_store_bytes"] == 0
    fewer = sasslib.count_matching(built["cluster"].histogram, l1) - sasslib.count_matching(built["cta"].histogram, l1)
    assert fewer >= 3, (built["cta"].histogram, built["cluster"].histogram)   # >= one per relaxed wait site


def test_wait_scope_is_a_pair_knob(arch):
    from porter.kernels import knobs

    with pytest.raises(PorterError, match="wait_scope"):
        knobs.spec_with_knobs(arch, "gemm.bf16", {"wait_scope": "cluster"})
    with pytest.raises(PorterError, match="wait_scope"):
        knobs.spec_with_knobs(arch, "gemm.bf16.pair", {"wait_scope": "gpu"})
    assert "wait_scope" not in gemm.make_spec(arch, "bf16", False).config
