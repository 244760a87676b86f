"""Hopper (wgmma) GEMM kernels: configuration from the descriptor, NVRTC compile,
SASS (HGMMA / QGMMA at the chosen shape, TMA, setmaxnreg, FADD promotion for fp8), no
spills, limits, and the "before" picture: the same source is rejected for sm_100a
because wgmma is gone.

Builds: "bf16" and "fp8" are the shipped specs (both accumulate the whole K in the wgmma
accumulator: for fp8 the fast-accumulation mode, the default since issue 17 item 5);
"fp8.promoted" is fp8 with accumulation "promoted" (a wgmma chain per TILE_K added into
fp32 registers), the previous default, kept as a knob value."""

from __future__ import annotations

import re

import pytest

from porter.descriptor.arch import arch_from_text
from porter import paths
from porter.errors import CompileError, PorterError
from porter.kernels import encodings_wgmma as enc
from porter.kernels import gemm, gemm_wgmma
from porter.kernels.build import build_kernel, sass_checks
from porter.levels import Level
from porter.compile.toolchain import compile_cuda



def _spec(hopper, name):
    variant, _, accumulation = name.partition(".")
    if accumulation:
        return gemm_wgmma.make_spec(hopper, gemm.VARIANTS[variant], False, accumulation=accumulation)
    return gemm.make_spec(hopper, variant)


BUILDS = ("bf16", "fp8", "fp8.promoted")


@pytest.fixture(scope="module")
def builds(hopper):
    """Each Hopper kernel rendered and compiled once per session (the disk cache helps too)."""
    return {name: build_kernel(_spec(hopper, name), hopper) for name in BUILDS}


EXPECTED = {
    # build: (tile_m, tile_n, tile_k, mma_k, SASS opcode of the main loop, stages, accumulation)
    "bf16": (128, 256, 64, 16, "HGMMA.64x256x16.F32.BF16", 4, "tensor-core"),
    # Default fp8 (fast accumulation): one fragment, so the 128 x 256 tile bf16 has.
    "fp8": (128, 256, 128, 32, "QGMMA.64x256x32.F32.E4M3.E4M3", 4, "tensor-core"),
    # Promoted: two 64 x N fp32 accumulators per consumer thread bound N to 128 (N = 256
    # would need 2 x 128 + overhead > 232 registers); the smaller stage buys 6 stages.
    "fp8.promoted": (128, 128, 128, 32, "QGMMA.64x128x32.F32.E4M3.E4M3", 6, "promoted"),
}


@pytest.mark.parametrize("name", BUILDS)
def test_config_from_descriptor(hopper, name):
    spec = _spec(hopper, name)
    cfg = spec.config
    tile_m, tile_n, tile_k, mma_k, _, stages, accumulation = EXPECTED[name]
    assert (cfg["tile_m"], cfg["tile_n"], cfg["tile_k"], cfg["mma_k"]) == (tile_m, tile_n, tile_k, mma_k)
    assert cfg["tile_k"] * cfg["element_bytes"] == 128  # one 128B swizzle row
    assert cfg["stages"] == stages and cfg["smem_per_stage_bytes"] == (tile_m + tile_n) * 128
    assert hopper.tensor_core.valid_shape(cfg["kind"], cfg["mma_m"], cfg["mma_n"])
    assert (cfg["producer_regs"], cfg["consumer_regs"]) == (40, 232)
    assert 128 * cfg["producer_regs"] + 256 * cfg["consumer_regs"] <= hopper.regs_per_sm
    assert cfg["registers_at_launch"] == 168
    assert cfg["grid_ctas"] == hopper.sm_count
    # Accumulation: promoted fp8 keeps two fragments (the chain's and the fp32 one).
    assert cfg["accumulation"] == accumulation
    copies = 2 if accumulation == "promoted" else 1
    assert cfg["accumulator_regs"] == copies * tile_n // 2
    assert cfg["accumulator_regs"] + gemm_wgmma.CONSUMER_OVERHEAD_REGS <= cfg["consumer_regs"]
    assert cfg["promote_every_k"] == (tile_k if accumulation == "promoted" else 0)
    assert f"{copies} x {tile_n // 2} fp32 accumulator registers" in cfg["register_budget"]
    # Clusters + TMA multicast in the descriptor: 2 CTAs along M share B.
    assert cfg["cluster_m"] == 2 and spec.cluster == (2, 1, 1)
    assert cfg["b_slice_rows"] == tile_n // 2 and cfg["shape_multiple"] == [256, tile_n, tile_k]
    assert cfg["tensor_maps"][1]["box"] == [tile_k, tile_n // 2] and cfg["tensor_maps"][1]["multicast"]


def test_promoted_tile_is_chosen_by_registers(hopper):
    """The promoted fp8 tile follows the consumers' register budget: the note says why
    N is not 256 and why there is no third consumer warpgroup, and a smaller register
    file shrinks N (or is refused, naming registers) rather than spilling."""
    fp8 = gemm.VARIANTS["fp8"]
    note = gemm_wgmma.make_spec(hopper, fp8, False, accumulation="promoted").config["register_budget"]
    assert "N=256 would need 296" in note
    assert "3 consumer warpgroups would leave 152 per consumer thread (too few)" in note
    # The default is fast accumulation for every variant (the model predicts it faster).
    assert gemm_wgmma.default_accumulation(fp8) == "tensor-core"
    assert gemm_wgmma.default_accumulation(gemm.VARIANTS["bf16"]) == "tensor-core"
    assert "1 x 128 fp32 accumulator registers" in gemm.make_spec(hopper, "fp8").config["register_budget"]
    with pytest.raises(PorterError, match="accumulation 'fast'; use one of promoted, tensor-core"):
        gemm_wgmma.make_spec(hopper, fp8, False, accumulation="fast")
    # Fewer registers for the consumers (a smaller register file) shrink the promoted N.
    text = (paths.data_dir("arch") / "hopper.yaml").read_text()
    smaller = arch_from_text(text.replace("regs_per_sm: 65536", "regs_per_sm: 40960"), "regs.yaml")
    cfg = gemm_wgmma.make_spec(smaller, fp8, False, accumulation="promoted").config
    assert cfg["accumulator_regs"] + gemm_wgmma.CONSUMER_OVERHEAD_REGS <= cfg["consumer_regs"]
    assert cfg["tile_n"] == 64 and cfg["accumulation"] == "promoted"
    tiny = arch_from_text(text.replace("regs_per_sm: 65536", "regs_per_sm: 32768"), "regs.yaml")
    with pytest.raises(PorterError, match="no wgmma N of gemm.fp8 fits 96 registers per consumer thread "
                                          "with promoted accumulation"):
        gemm_wgmma.make_spec(tiny, fp8, False, accumulation="promoted")
    assert gemm.make_spec(tiny, "bf16").config["tile_n"] == 64   # one accumulator still fits


def test_smaller_descriptor_shrinks_the_kernel(hopper):
    """Less shared memory -> smaller N; no TMA multicast -> no cluster. Both from the YAML."""
    text = (paths.data_dir("arch") / "hopper.yaml").read_text()
    assert "smem_per_block_kib: 227" in text and "tma_multicast: true" in text
    small = arch_from_text(text.replace("smem_per_block_kib: 227", "smem_per_block_kib: 120")
                           .replace("tma_multicast: true", "tma_multicast: false"), "small.yaml")
    spec = gemm.make_spec(small, "bf16")
    cfg = spec.config
    assert cfg["tile_n"] == 64 and cfg["stages"] >= gemm_wgmma.MIN_STAGES
    assert cfg["cluster_m"] == 1 and spec.cluster == (1, 1, 1) and cfg["shape_multiple"] == [128, 64, 64]
    # The kernel generalises: the single-CTA m64n64 configuration compiles and passes its rules.
    build = build_kernel(spec, small)
    assert build.level == Level.SASS_CHECKED, [c.detail for c in build.checks if not c.passed]
    assert build.histogram.get("HGMMA.64x64x16.F32.BF16") == cfg["k_steps"]
    assert build.histogram.get("UTMALDG.2D") == 2 and "UTMALDG.2D.MULTICAST" not in build.histogram
    assert "__cluster_dims__" not in build.source and "UCGABAR_ARV" not in build.histogram
    tiny = arch_from_text(text.replace("smem_per_block_kib: 227", "smem_per_block_kib: 48"), "tiny.yaml")
    with pytest.raises(PorterError, match="no wgmma N leaves 4 stages"):
        gemm.make_spec(tiny, "bf16")


@pytest.mark.parametrize("variant", BUILDS)
def test_reaches_sass_checked(builds, variant):
    b = builds[variant]
    failed = [c.to_dict() for c in b.checks if not c.passed]
    assert not failed, failed
    assert b.level == Level.SASS_CHECKED and b.target == "sm_90a"


@pytest.mark.parametrize("variant", BUILDS)
def test_sass_main_loop(builds, variant):
    b = builds[variant]
    cfg = b.spec.config
    opcode = EXPECTED[variant][4]
    # Exactly one wgmma per MMA_K step of a stage: the loop is unrolled, nothing serialised.
    assert b.histogram.get(opcode) == cfg["k_steps"] == cfg["tile_k"] // cfg["mma_k"]
    assert sum(n for op, n in b.histogram.items() if op.startswith(("HGMMA", "QGMMA"))) == cfg["k_steps"]
    assert b.histogram.get("UTMALDG.2D") == 1                      # A box
    assert b.histogram.get("UTMALDG.2D.MULTICAST") == 1            # this CTA's B slice, to the cluster
    assert b.histogram.get("USETMAXREG.DEALLOC.CTAPOOL") == 1       # producer gives registers back
    assert b.histogram.get("USETMAXREG.TRY_ALLOC.CTAPOOL") == 1     # consumers take them
    assert not any(op.startswith(("HMMA", "QMMA", "LDL", "STL")) for op in b.histogram)


@pytest.mark.parametrize("variant", BUILDS)
def test_sass_epilogue(builds, variant):
    b = builds[variant]
    chunks = b.spec.config["tile_n"] // 64           # 64-column staging chunks per tile
    # Per chunk a thread packs 16 bf16x2, stores them to the staging tile (32-bit STS),
    # then moves 4 x 16 bytes to C: only 128-bit coalesced global stores.
    assert b.histogram.get("F2FP.BF16.F32.PACK_AB") == 16 * chunks
    assert b.histogram.get("STS") == 16 * chunks
    assert b.histogram.get("LDS.128") == b.histogram.get("STG.E.128") == 4 * chunks
    assert not [op for op in b.histogram if op.startswith("STG") and op != "STG.E.128"]


@pytest.mark.parametrize("variant", BUILDS)
def test_no_spills_and_no_wgmma_serialisation(builds, variant):
    b = builds[variant]
    assert b.resources["spill_store_bytes"] == b.resources["spill_load_bytes"] == 0
    assert b.resources["local_bytes"] == 0 and b.resources["stack_bytes"] == 0
    assert b.resources["registers"] <= b.spec.config["registers_at_launch"]
    # ptxas says so when it has to wait on wgmma itself: "(C7517) wgmma.wait_group is
    # injected ... to allow use of registers defined by GMMA" (accumulators touched
    # between MMAs) or "wgmma.mma_async instructions are serialized".
    log = b.compiled.log.lower()
    assert "injected" not in log and "serialized" not in log, b.compiled.log
    # Only the kernel's own waits. Tensor-core accumulation: wait_group 1 in the loop,
    # wait_group 0 before the epilogue. Promoted: one wait_group 0 per chain, in the loop.
    promoted = b.spec.config["accumulation"] == "promoted"
    assert b.histogram.get("WARPGROUP.DEPBAR.LE") == (1 if promoted else 2)
    assert b.histogram.get("WARPGROUP.ARRIVE") == 1


@pytest.mark.parametrize("variant", BUILDS)
def test_sass_promotion(builds, variant):
    """Promoted: the k-block loop (not unrolled) adds the chain's N/2 fragment registers
    into the fp32 accumulator with exactly N/2 FADDs - each register once, no FFMA
    tricks, no FADD anywhere else; tensor-core accumulation has no FADD at all."""
    b = builds[variant]
    cfg = b.spec.config
    fadds = sum(n for op, n in b.histogram.items() if op.startswith("FADD"))
    if cfg["accumulation"] == "promoted":
        assert fadds == b.histogram.get("FADD") == cfg["mma_n"] // 2
        assert any("(op:fp32_add)" in r.why for r in b.spec.sass_required)
        # In SASS order: the chain's MMAs, its wait (DEPBAR), then the stage releases
        # (remote mbarrier arrivals) and the FADDs - never a FADD before the wait.
        ops = [m.group(1) for m in re.finditer(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P\w+\s+)?([A-Z][\w.]*)",
                                               b.sass, re.M)]
        depbar = ops.index("WARPGROUP.DEPBAR.LE")
        mmas = [i for i, op in enumerate(ops) if op.startswith("QGMMA")]
        fadd_at = [i for i, op in enumerate(ops) if op == "FADD"]
        releases = [i for i, op in enumerate(ops) if op.startswith("SYNCS.ARRIVE.TRANS64.RED")]
        assert len(mmas) == cfg["k_steps"] and max(mmas) < depbar < min(fadd_at)
        assert releases and all(depbar < i for i in releases)
    else:
        assert fadds == 0 and not any("FADD" in r.pattern for r in b.spec.sass_required)
    # The epilogue's alpha scaling is the only other fp32 arithmetic: one FMUL per
    # accumulator register (+1 for alpha = scale_a * scale_b).
    assert b.histogram.get("FMUL") == cfg["mma_n"] // 2 + 1


def test_fits_shared_memory(builds, hopper):
    for b in builds.values():
        cfg = b.spec.config
        # 1 KiB alignment slack + 2 x 8 KiB epilogue staging + stages x (A + B + two mbarriers)
        assert cfg["epilogue_bytes"] == 2 * 64 * 64 * 2
        assert b.spec.smem_bytes == 1024 + cfg["epilogue_bytes"] + cfg["stages"] * (cfg["smem_per_stage_bytes"] + 16)
        assert b.resources["shared_bytes"] + b.spec.smem_bytes <= hopper.smem_per_block_bytes


def test_source_carries_the_python_encodings(builds):
    src = builds["bf16"].source
    assert re.search(r"DESC_TEMPLATE = 0x4000004000010000ull;", src)
    assert enc.c_literal(enc.k_major_swizzled_template(128)) in src
    assert "DESC_K_STEP = 2;" in src
    assert "STAGE_TX_BYTES = A_STAGE_BYTES + B_STAGE_BYTES" in src
    assert "A_STAGE_BYTES = 16384" in src and "B_STAGE_BYTES = 32768" in src


def test_sass_rules_can_fail(builds):
    # The bf16 spec's rules applied to the fp8 kernel's SASS: no HGMMA there.
    checks = sass_checks(builds["bf16"].spec, builds["fp8"].histogram)
    failed = [c.name for c in checks if not c.passed]
    # (every spelling comes from the descriptor: the kind's opcode, then its shape modifier)
    assert failed == [r"sass has (?:HGMMA)\S*\.64x256x16\.F32\.BF16"]
    # The promoted spec's rules on the fast-accumulation SASS: wrong N and no promotion.
    checks = sass_checks(builds["fp8.promoted"].spec, builds["fp8"].histogram)
    failed = [c.name for c in checks if not c.passed]
    assert failed == [r"sass has (?:QGMMA)\S*\.64x128x32\.F32\.E4M3", r"sass has ^FADD\b"]


def test_hopper_source_is_rejected_for_sm_100a(builds):
    """The issue's "before" picture: Blackwell has no wgmma, so ptxas refuses the Hopper kernel."""
    with pytest.raises(CompileError, match="wgmma") as info:
        compile_cuda(builds["bf16"].source, "sm_100a", "gemm.bf16.hopper.cu")
    assert "sm_100a" in str(info.value) and "\n" not in str(info.value)


def test_pair_and_block_scaled_are_not_wgmma(hopper):
    with pytest.raises(PorterError, match="CTA-pair"):
        gemm_wgmma.make_spec(hopper, gemm.VARIANTS["bf16"], pair=True)
    with pytest.raises(PorterError, match="block-scaled"):
        gemm_wgmma.make_spec(hopper, gemm.VARIANTS["mxfp8"], pair=False)


def source_constants(src: str) -> dict[str, int]:
    """The integer constexprs of namespace gemm in a rendered kernel, evaluated."""
    values: dict[str, int] = {}
    for name, expr in re.findall(r"constexpr (?:int|uint32_t|uint64_t) (\w+) = ([^;]+);", src):
        expr = re.sub(r"(\d)(?:ull|u)\b", r"\1", expr)
        try:
            values[name] = int(eval(expr, {"__builtins__": {}}, dict(values)))  # noqa: S307 - our own source
        except (NameError, SyntaxError):
            pass
    return values


@pytest.mark.parametrize("variant", BUILDS)
def test_operand_layout_model(builds, variant):
    """TMA (SWIZZLE_128B) writes a stage; the descriptors the kernel builds from its
    emitted constants must read back, for every consumer and K step, exactly the
    A and B elements that MMA is meant to multiply."""
    b = builds[variant]
    cfg, const = b.spec.config, source_constants(b.source)
    elem, mma_k, mma_m = cfg["element_bytes"], cfg["mma_k"], cfg["mma_m"]
    row_bytes = cfg["tile_k"] * elem
    a_ring = 1024                                   # any 1024-aligned base
    b_ring = a_ring + const["STAGES"] * const["A_STAGE_BYTES"]
    stage = 1                                       # not stage 0: the stage offset is exercised
    smem = {}
    # A: one box of tile_m rows. B: CLUSTER_M boxes of B_SLICE_ROWS rows, slice r landing
    # B_SLICE_BYTES * r into the stage (multicast from cluster rank r).
    boxes = [("A", a_ring + stage * const["A_STAGE_BYTES"], 0, cfg["tile_m"])]
    boxes += [("B", b_ring + stage * const["B_STAGE_BYTES"] + r * const["B_SLICE_BYTES"],
               r * const["B_SLICE_ROWS"], const["B_SLICE_ROWS"]) for r in range(const["CLUSTER_M"])]
    assert cfg["tile_m"] * row_bytes == const["A_STAGE_BYTES"]
    assert const["B_SLICE_ROWS"] * row_bytes == const["B_SLICE_BYTES"]
    for name, dst, first_row, rows in boxes:
        for r in range(rows):
            for byte in range(row_bytes):
                smem[enc.tma_box_address(dst, r, byte)] = (name, first_row + r, byte)
    assert len(smem) == (cfg["tile_m"] + cfg["tile_n"]) * row_bytes  # no two boxes overlap

    def desc_of(addr):  # porter::wgmma_desc
        return const["DESC_TEMPLATE"] | ((addr & 0x3FFFF) >> 4)

    for kk in range(const["K_STEPS"]):
        for consumer in range(const["CONSUMERS"]):
            da = desc_of(a_ring + stage * const["A_STAGE_BYTES"] + consumer * const["A_CONSUMER_BYTES"])
            da += kk * const["DESC_K_STEP"]
            for r in range(mma_m):
                for kb in range(mma_k * elem):
                    got = smem[enc.operand_byte_address(da, r, kb)]
                    assert got == ("A", consumer * mma_m + r, kk * mma_k * elem + kb)
        db = desc_of(b_ring + stage * const["B_STAGE_BYTES"]) + kk * const["DESC_K_STEP"]
        for r in range(cfg["mma_n"]):
            for kb in range(mma_k * elem):
                assert smem[enc.operand_byte_address(db, r, kb)] == ("B", r, kb + kk * mma_k * elem)


def test_epilogue_staging_model(builds):
    """Fragment -> swizzled staging -> 16-byte pieces -> C: every accumulator lands on
    its own (row, col) of the warpgroup's 64 x N block, and all of them are written."""
    b = builds["bf16"]
    src, n = b.source, b.spec.config["mma_n"]
    # The statements modelled below, as they stand in the kernel.
    for stmt in ("const uint32_t piece = ((j ^ (lane / 4)) << 4) + 4 * (lane % 4);",
                 "const int frag_row = 16 * warp_in_wg + lane / 4;",
                 "staging + r * 128 + ((p ^ (r % 8)) << 4)",
                 "col0 + q * EPI_COLS + 8 * p"):
        assert stmt in src
    written = {}
    for warp in range(4):
        for lane in range(32):
            for q in range(n // 64):
                for j in range(8):
                    for e in range(4):
                        idx = 4 * (q * 8 + j) + e
                        # PTX ISA wgmma D fragment: where acc[idx] belongs.
                        want = (16 * warp + lane // 4 + 8 * (e >= 2), 8 * (idx // 4) + 2 * (lane % 4) + e % 2)
                        frag_row = 16 * warp + lane // 4 + 8 * (e >= 2)
                        byte = frag_row * 128 + ((j ^ (lane // 4)) << 4) + 4 * (lane % 4) + 2 * (e % 2)
                        r, physical = byte // 128, (byte % 128) // 16
                        p = physical ^ (r % 8)         # the reader whose piece this is
                        got = (r, q * 64 + 8 * p + (byte % 16) // 2)
                        assert got == want
                        written[got] = written.get(got, 0) + 1
    assert len(written) == 64 * n and set(written.values()) == {1}


@pytest.mark.parametrize("variant", BUILDS)
def test_cluster_multicast_protocol(builds, variant):
    """The cluster form: compile-time cluster dims, B slices multicast to both CTAs,
    every consumer warp releasing the slot in every CTA, barriers sized for it."""
    b = builds[variant]
    src, const = b.source, source_constants(b.source)
    assert "__launch_bounds__(gemm::THREADS, 1) __cluster_dims__(2, 1, 1)" in src
    assert const["CLUSTER_M"] == 2 and const["B_SLICE_BYTES"] * 2 == const["B_STAGE_BYTES"]
    assert "porter::mbar_init(empty_bars + 8 * s, 4 * CONSUMERS * CLUSTER_M);" in src
    assert "porter::mbar_arrive_remote(porter::map_to_cta(empty_bars + 8 * s, r));" in src
    # The slot is re-armed for the whole B tile although this CTA loads only its slice.
    assert "STAGE_TX_BYTES = A_STAGE_BYTES + B_STAGE_BYTES" in src
    # Cluster barrier after the barrier inits and before exit (UCGABAR arrive + wait, twice);
    # the ring's own arrivals and waits carry no GPU-scope fence or L1 invalidation.
    assert b.histogram.get("UCGABAR_ARV") == b.histogram.get("UCGABAR_WAIT") == 2
    assert b.histogram.get("MEMBAR.ALL.GPU") == 2 and b.histogram.get("CCTL.IVALL") == 2


def test_shape_check_counts_cluster_units(hopper):
    spec = gemm.make_spec(hopper, "bf16")
    gemm.check_problem_shape(spec, 256, 256, 64)
    with pytest.raises(PorterError, match=r"M=128 must be a positive multiple of 256 .*cluster 2x1x1.*pad M to 256"):
        gemm.check_problem_shape(spec, 128, 256, 64)


# ---- the ring protocol, replayed on a model of mbarrier semantics ------------------------

class ModelBarrier:
    """mbarrier as the PTX ISA defines it: a phase completes when the pending arrivals
    reach 0 and the tx-count is back to 0; try_wait(P) is true once the phase of parity
    P has completed (a fresh barrier passes P = 1)."""

    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase, self.pending = self.phase + 1, self.count

    def arrive(self, expect_tx=0):
        assert self.pending > 0
        self.tx += expect_tx
        self.pending -= 1
        self._complete()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        self._complete()

    def try_wait(self, parity):
        return (self.phase & 1) != parity


# How a consumer hands stages back, by the order of the wgmma waits and releases in its
# k-block loop (see release_policy):
#   "lagged" tensor-core accumulation: the group of k-block kb stays in flight while kb + 1
#            is issued; wait_group 1 then frees kb's stage; wait_group 0 + release after the loop;
#   "own"    promoted: wait_group 0 right after each chain, then release that chain's stage;
#   "early"  a broken order (release before the chain's wait): the model must catch it.
RELEASE_POLICIES = {
    ("commit", "wait1", "release(prev_stage)", "wait0", "release(prev_stage)"): "lagged",
    ("commit", "wait0", "release(stage)"): "own",
    ("commit", "release(stage)", "wait0"): "early",
}


def release_policy(src: str) -> str:
    """The consumer's release policy, read from the rendered kernel's k-block loop."""
    consumer = src[src.index("// ---- consumer warpgroups"):]
    loop = consumer[consumer.index("for (int kb = 0; kb < num_k; ++kb) {"):consumer.index("// Epilogue")]
    tokens = {"porter::wgmma_commit();": "commit", "porter::wgmma_wait<1>();": "wait1",
              "porter::wgmma_wait<0>();": "wait0", "release(prev_stage);": "release(prev_stage)",
              "release(stage);": "release(stage)"}
    found = sorted((m.start(), name) for stmt, name in tokens.items()
                   for m in re.finditer(re.escape(stmt), loop))
    order = tuple(name for _, name in found)
    assert order in RELEASE_POLICIES, f"consumer loop order {order} has no model"
    return RELEASE_POLICIES[order]


def replay_cluster(const, empty_count, units, num_k, seed, policy="lagged"):
    """One cluster running the kernel's producer and consumer-warp programs (as written
    in gemm/wgmma.cu.j2, releasing stages by ``policy``) under a random interleaving, TMA
    completions arriving late and in any order. Asserts every MMA sees its own stage
    data and that no stage is overwritten before the wgmma group reading it completed;
    returns the finished tiles."""
    import random

    rnd = random.Random(seed)
    cm, stages, consumers = const["CLUSTER_M"], const["STAGES"], const["CONSUMERS"]
    a_bytes, slice_bytes = const["A_STAGE_BYTES"], const["B_SLICE_BYTES"]
    ctas = [{"full": [ModelBarrier(1) for _ in range(stages)],
             "empty": [ModelBarrier(empty_count) for _ in range(stages)],
             "smem": [{} for _ in range(stages)]} for _ in range(cm)]
    tma, finished = [], []

    def producer(rank):
        stage = phase = 0
        for unit_m, tile_n in units:
            for kb in range(num_k):
                while not ctas[rank]["empty"][stage].try_wait(phase ^ 1):
                    yield
                ctas[rank]["full"][stage].arrive(expect_tx=const["STAGE_TX_BYTES"])
                tma.append((rank, stage, "A", (unit_m * cm + rank, kb), a_bytes))
                tma.extend((dst, stage, f"B{rank}", (tile_n, kb), slice_bytes) for dst in range(cm))
                stage, phase = (0, phase ^ 1) if stage + 1 == stages else (stage + 1, phase)
                yield

    def consumer_warp(rank, first):
        me, stage, phase = ctas[rank], 0, 0

        def complete(s, want):  # wait_group: the group that read stage s has finished
            assert me["smem"][s] == want, "stage overwritten while a wgmma may still read it"

        def release(s):
            for r in range(cm):
                ctas[r]["empty"][s].arrive()

        for unit_m, tile_n in units:
            tile_m, prev = unit_m * cm + rank, None
            for kb in range(num_k):
                while not me["full"][stage].try_wait(phase):
                    yield
                want = {"A": (tile_m, kb), **{f"B{r}": (tile_n, kb) for r in range(cm)}}
                assert me["smem"][stage] == want   # the chain is issued on this stage
                if policy == "early":
                    release(stage)
                yield  # the wgmma group is in flight until its wait_group
                if policy == "lagged":             # wait_group<1>: the previous group is done
                    if prev is not None:
                        complete(*prev)
                        release(prev[0])
                    prev = (stage, want)
                else:                              # wait_group<0>: this chain is done
                    complete(stage, want)
                    if policy == "own":
                        release(stage)
                stage, phase = (0, phase ^ 1) if stage + 1 == stages else (stage + 1, phase)
            if policy == "lagged":                 # after the loop: wait_group<0>
                complete(*prev)
                release(prev[0])
            if first:
                finished.append((tile_m, tile_n))
            yield

    live = [producer(r) for r in range(cm)]
    live += [consumer_warp(r, i == 0) for r in range(cm) for i in range(4 * consumers)]
    for _ in range(10 ** 6):
        if not live and not tma:
            return finished
        if tma and (not live or rnd.random() < 0.3):
            dst, stage, key, value, nbytes = tma.pop(rnd.randrange(len(tma)))
            ctas[dst]["smem"][stage][key] = value
            ctas[dst]["full"][stage].complete_tx(nbytes)
            continue
        proc = rnd.choice(live)
        try:
            next(proc)
        except StopIteration:
            live.remove(proc)
    raise AssertionError("deadlock: the ring stopped making progress")


@pytest.mark.parametrize("variant", BUILDS)
def test_ring_protocol_model(builds, variant):
    b = builds[variant]
    src, const = b.source, source_constants(b.source)
    policy = release_policy(src)
    assert policy == {"promoted": "own", "tensor-core": "lagged"}[b.spec.config["accumulation"]]
    count_expr = re.search(r"porter::mbar_init\(empty_bars \+ 8 \* s, ([^)]+)\);", src).group(1)
    empty_count = eval(count_expr, {"__builtins__": {}}, const)  # noqa: S307 - our own source
    assert empty_count == 4 * const["CONSUMERS"] * const["CLUSTER_M"]
    # Slices of the B tile plus the A tile: exactly what full[s] is armed for.
    assert const["STAGE_TX_BYTES"] == const["A_STAGE_BYTES"] + const["CLUSTER_M"] * const["B_SLICE_BYTES"]
    for seed in range(40):
        units = [(u % 3, u // 3) for u in range(seed % 4, 6, 1 + seed % 3)]  # one cluster's share
        num_k = 1 + seed % 7
        done = replay_cluster(const, empty_count, units, num_k, seed, policy)
        assert sorted(done) == sorted((um * const["CLUSTER_M"] + r, tn)
                                      for um, tn in units for r in range(const["CLUSTER_M"]))
    # The model has teeth: releasing only the local CTA's slot lets a peer overwrite a
    # stage that is still being read...
    with pytest.raises(AssertionError, match="overwritten"):
        for seed in range(40):
            replay_cluster(const, 4 * const["CONSUMERS"], [(0, 0), (1, 0)], 6, seed, policy)
    # ... and so does releasing a stage before the wait_group of the chain that reads it.
    with pytest.raises(AssertionError, match="overwritten"):
        for seed in range(40):
            replay_cluster(const, empty_count, [(0, 0), (1, 0)], 2 * const["STAGES"], seed, "early")


def test_release_policy_reads_the_source(builds):
    """The policy comes from the kernel text: moving the promoted release above its
    wait_group turns it into the "early" policy the replay rejects."""
    src = builds["fp8.promoted"].source
    moved = src.replace("porter::wgmma_wait<0>();\n                if (lane == 0) release(stage);",
                        "if (lane == 0) release(stage);\n                porter::wgmma_wait<0>();")
    assert moved != src
    assert release_policy(src) == "own" and release_policy(moved) == "early"


# ---- promotion, replayed on the kernel's own statements ---------------------------------

def _promoted_program(src: str) -> dict:
    """What the promoted consumer does with its two fragments, read from the kernel text:
    where `acc` is zeroed, the chain's scale-d condition, the promotion statement."""
    consumer = src[src.index("// ---- consumer warpgroups"):]
    consumer = consumer[:consumer.index("// Epilogue")]
    tile_loop = consumer[consumer.index("while (tiles.next(unit_m, tile_n)) {"):]
    chain = re.search(r"wgmma_tile\(part, [^;]*, ([^;?]+) \? 1u : 0u\);", tile_loop)
    assert chain, "the promoted chain's wgmma call was not found"
    cond = chain.group(1).strip().replace("||", " or ").replace("&&", " and ")
    return {"zero_per_tile": "acc[i] = 0.f;" in tile_loop,
            "scale_d": lambda kb, kk: bool(eval(cond, {"__builtins__": {}}, {"kb": kb, "kk": kk})),  # noqa: S307
            "promotes": "acc[i] += part[i];" in tile_loop}


def _replay_promoted(program, tiles, mma_k, k_steps):
    """Run the program over several tiles in a row with one `acc` and one `part` (as the
    persistent kernel keeps them): per MMA, part = scale_d ? part + chunk : chunk, chunks
    rounded once to fp32 like reference_gemm.gemm_model; after each chain acc += part."""
    import numpy as np

    acc = part = None
    out = []
    for a, b in tiles:
        m, k = a.shape
        if program["zero_per_tile"] or acc is None:
            acc = np.zeros((m, b.shape[0]), np.float32)
        for kb in range(k // (mma_k * k_steps)):
            for kk in range(k_steps):
                lo = (kb * k_steps + kk) * mma_k
                chunk = (a[:, lo:lo + mma_k] @ b[:, lo:lo + mma_k].T).astype(np.float32)
                part = part + chunk if (program["scale_d"](kb, kk) and part is not None) else chunk
            if program["promotes"]:
                acc = acc + part
        out.append(acc if program["promotes"] else part)
    return out


def test_promoted_kernel_matches_the_numerics_model(builds):
    """The kernel's promoted loop, replayed over consecutive tiles of one CTA, gives
    bit for bit what gemm_model(promote_k=promote_every_k) says; zeroing `acc` outside
    the tile loop or carrying the chain across intervals (scale-d 1 after the first
    k-block) would not."""
    import numpy as np

    from porter.validation import formats, quantize
    from porter.validation.reference_gemm import gemm_model

    b = builds["fp8.promoted"]
    cfg, src = b.spec.config, b.source
    rng = np.random.default_rng(3)
    k = 4 * cfg["promote_every_k"]
    values = []   # two tiles of e4m3 operands, as the values the MMA multiplies (codes)
    for _ in range(2):
        qa = quantize.quantize_for("fp8", rng.standard_normal((16, k)).astype(np.float32))
        qb = quantize.quantize_for("fp8", (rng.standard_normal((8, k)) / np.sqrt(k)).astype(np.float32))
        values.append((formats.decode(qa.codes, qa.elem), formats.decode(qb.codes, qb.elem)))
    want = [gemm_model(a, b, mma_k=cfg["mma_k"], out_dtype="fp32", promote_k=cfg["promote_every_k"])
            for a, b in values]

    def replay(text):
        return _replay_promoted(_promoted_program(text), values, cfg["mma_k"], cfg["k_steps"])

    for got, ref in zip(replay(src), want):
        np.testing.assert_array_equal(got.astype(np.float64), ref)
    # ... and not what one accumulator over the whole K gives (the rounding order differs).
    whole_k = [gemm_model(a, b, mma_k=cfg["mma_k"], out_dtype="fp32") for a, b in values]
    assert any((w != r).any() for w, r in zip(whole_k, want))
    stale_acc = src.replace("""#pragma unroll
            for (int i = 0; i < MMA_N / 2; ++i) acc[i] = 0.f;
            for (int kb = 0;""", """            for (int kb = 0;""")
    carried = src.replace("wgmma_tile(part, desc_a + kk * DESC_K_STEP, desc_b + kk * DESC_K_STEP, kk > 0 ? 1u : 0u);",
                          "wgmma_tile(part, desc_a + kk * DESC_K_STEP, desc_b + kk * DESC_K_STEP, "
                          "(kb > 0 || kk > 0) ? 1u : 0u);")
    for broken in (stale_acc, carried):
        assert broken != src
        got = replay(broken)
        assert any(not np.allclose(g, r, rtol=1e-3) for g, r in zip(got, want))
