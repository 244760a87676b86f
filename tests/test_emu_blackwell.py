"""Every Blackwell (sm_100a) GEMM and attention kernel executed in porter's PTX simulator
(level "emulated": not on a GPU), with the device harness's poisoned outputs, fp64
references and tolerance policies; then planted bugs in them, each of which must fail for
its planted reason.

Shapes (porter.runtime.emulated_cases.emulation_shapes): a GEMM's single k-block, then a remainder
problem of 2 x workers + 1 tiles on the emulated device's 4 SMs (one CTA (pair) walks 3
tiles, the others 2: both TMEM accumulator buffers, their acc_empty phases and the TMA ring
wrap); attention with ragged lengths and grouped-query heads, then the same remainder of
tiles with all query heads on one K/V head, a partial last q-tile and seq_q < seq_k.
The default suite runs two input sets per shape; ``-m slow`` runs three.
"""

from __future__ import annotations

import pytest

from porter.commands.kernel import find_kernel
from porter.runtime.emulated_runs import emulate, emulation_shapes
from porter.kernels import family_module

BLACKWELL_KERNELS = [("gemm", n) for n in ("gemm.bf16", "gemm.fp8", "gemm.mxfp8", "gemm.nvfp4", "gemm.bf16.pair",
                                          "gemm.fp8.pair", "gemm.mxfp8.pair", "gemm.nvfp4.pair")] + \
    [("attention", n) for n in ("attention.hd64", "attention.hd64.causal", "attention.hd128",
                                "attention.hd128.causal", "attention.hd128.pair", "attention.hd128.causal.pair",
                                "attention.hd64.pair", "attention.hd64.causal.pair")]


def _spec(family: str, name: str, arch):
    return find_kernel(name, arch)[0]


def _check_result(result, spec, seeds: int) -> None:
    assert result["status"] == "passed", result["reason"]
    shapes = emulation_shapes(spec)
    assert len(result["checks"]) == seeds * len(shapes) >= 2
    for c in result["checks"]:
        written = c["written"] if isinstance(c["written"], list) else [c["written"]]
        assert c["passed"] and written and all(w["passed"] and w["unwritten"] == 0 for w in written)
    assert len({c["seed"] for c in result["checks"]}) == len(result["checks"])
    runs = result["runs"]
    assert runs and all(r["warp_instructions"] > 1000 for r in runs)
    if spec.family == "gemm":
        g = int(spec.config["cta_group"])
        m, n, _ = shapes[1]
        tiles = (m // spec.config["tile_m"]) * (n // spec.config["tile_n"])
        assert runs[-1]["ctas"] == 4 and tiles == 2 * (4 // g) + 1     # a remainder: one CTA (pair) walks 3
    else:
        g = int(spec.config["cta_group"])
        batch, heads, _, seq_q, _ = shapes[1]
        tiles = batch * heads * -(-seq_q // int(spec.config["block_m"]))
        assert runs[-1]["ctas"] == 4 and tiles == 2 * (4 // g) + 1 and shapes[1][3] < shapes[1][4]
        assert heads > shapes[1][2] and seq_q % int(spec.config["block_m"])      # grouped-query, ragged


@pytest.mark.parametrize("family,name", BLACKWELL_KERNELS, ids=[n for _, n in BLACKWELL_KERNELS])
def test_blackwell_kernel_emulated(family, name, blackwell):
    spec = _spec(family, name, blackwell)
    _check_result(emulate(spec, blackwell, seeds=2), spec, 2)


@pytest.mark.slow
@pytest.mark.parametrize("family,name", BLACKWELL_KERNELS, ids=[n for _, n in BLACKWELL_KERNELS])
def test_blackwell_kernel_emulated_several_seeds(family, name, blackwell):
    spec = _spec(family, name, blackwell)
    _check_result(emulate(spec, blackwell, seeds=3), spec, 3)


def test_every_blackwell_gemm_and_attention_kernel_is_covered(blackwell):
    names = {getattr(s, "name", None) for f in ("gemm", "attention") for s in family_module(f).variants(blackwell)
             if hasattr(s, "config")}
    assert names == {n for _, n in BLACKWELL_KERNELS}


# ---- planted bugs (issue #12 item 5) -------------------------------------------------------------
# (id, family, kernel, [(old, new)] applied to the rendered .cu (each must match exactly once),
#  shape, expected: a substring of the failure)
GEMM_SMALL = (128, 256, 64)
IDESC_BF16 = "{ 0x08400490u, 0x08400490u, 0x08400490u, 0x08400490u }"
MUTATIONS = [
    # M = 64 (bits 24-28 = 4): Layout F fills half the lanes; the epilogue reads lanes never written
    ("idesc-wrong-m", "gemm", "gemm.bf16", [(IDESC_BF16, IDESC_BF16.replace("0x084", "0x044"))],
     GEMM_SMALL, "never written since its columns were allocated"),
    # N = 128 (bits 17-22 = 16): the right half of each accumulator is never written
    ("idesc-wrong-n", "gemm", "gemm.bf16", [(IDESC_BF16, IDESC_BF16.replace("0x084", "0x082"))],
     GEMM_SMALL, "column 128, never written"),
    # the MMAs put the second accumulator buffer at column 128 instead of 256: buffer 1's MMAs
    # write columns 128..255 of buffer 0 with nothing ordering them after the epilogue's reads
    # (the TMEM happens-before check, in any order); without it, depending on the seeded order,
    # the epilogue reads buffer 1's columns 384.. that no MMA wrote or meets the MMAs in flight
    ("second-accumulator-column", "gemm", "gemm.bf16",
     [("const uint32_t d_tmem = tmem_base + buf * MMA_N;", "const uint32_t d_tmem = tmem_base + buf * (MMA_N / 2);")],
     (512, 512, 64), ("TMEM hand-off race in CTA", "column 384, never written",
                      "columns 128..159) that the tcgen05.mma issued at")),
    ("missing-commit", "gemm", "gemm.bf16", [("porter::tc::commit(bar(bars.acc_full[buf]));", "")],
     GEMM_SMALL, "deadlock"),
    # the pair's stage-release commit reaches only the even CTA: the odd producer never gets its stages back
    ("multicast-mask", "gemm", "gemm.bf16.pair",
     [("porter::tc::commit_multicast(bar(bars.empty[stage]), 0x3);",
       "porter::tc::commit_multicast(bar(bars.empty[stage]), 0x1);")],
     (256, 256, 64), "deadlock"),
    ("missing-fence-after-thread-sync", "gemm", "gemm.bf16",
     [("porter::mbar_wait(bar(bars.acc_full[buf]), acc_phase);\n            porter::tc::fence_after_thread_sync();",
       "porter::mbar_wait(bar(bars.acc_full[buf]), acc_phase);")],
     GEMM_SMALL, "without tcgen05.fence::after_thread_sync"),
    # the epilogue hands the accumulator back without fence::before_thread_sync: caught when the
    # MMA overwrites it (the third tile of a CTA)
    ("missing-fence-before-thread-sync", "gemm", "gemm.bf16",
     [("porter::tc::fence_before_thread_sync();\n                        __syncwarp();", "__syncwarp();")],
     (512, 768, 64), "without tcgen05.fence::before_thread_sync"),
    ("tmem-not-deallocated", "gemm", "gemm.bf16", [("porter::tmem::dealloc(tmem_base, TMEM_COLUMNS);", "")],
     GEMM_SMALL, "TMEM not deallocated at exit"),
    ("epilogue-lane-quarter", "gemm", "gemm.bf16",
     [("porter::tmem::addr(tmem_base, quarter * 32, buf * MMA_N)",
       "porter::tmem::addr(tmem_base, ((quarter + 1) % 4) * 32, buf * MMA_N)")],
     GEMM_SMALL, "may access TMEM lanes"),
    # A's scale chunks 2 and 3 swapped in TMEM: the MMAs scale K blocks with the wrong factors
    ("scale-factor-column", "gemm", "gemm.nvfp4",
     [("SFA_CHUNK_COLUMN[SFA_CHUNKS] = { 0u, 4u, 8u, 12u }", "SFA_CHUNK_COLUMN[SFA_CHUNKS] = { 0u, 4u, 12u, 8u }")],
     (128, 256, 256), "outside tolerance"),     # one 128 x 256 tile (N = 256 since issue 17)
    # the stage is released (commit) before its MMAs: the producer refills it under them
    ("stage-released-before-mma", "gemm", "gemm.bf16",
     [("#pragma unroll\n                    for (int j = 0; j < MMAS_PER_STAGE; ++j) {\n"
       "                        const uint64_t a_desc",
       "porter::tc::commit(bar(bars.empty[stage]));\n#pragma unroll\n"
       "                    for (int j = 0; j < MMAS_PER_STAGE; ++j) {\n                        const uint64_t a_desc"),
      ("// Frees the stage once these MMAs have read it.\n"
       "                    porter::tc::commit(bar(bars.empty[stage]));", "")],
     (128, 256, 512), "changed before the operation completed"),
    # block-scaled pair with N = 256 and a single TMEM accumulator (issue 17 item 2): the epilogue
    # hands the accumulator back after its first tcgen05.ld instead of its last, so the next
    # tile's MMAs overwrite columns the epilogue still reads (the TMEM hand-off check)
    ("single-accumulator-early-release", "gemm", "gemm.nvfp4.pair",
     [("if (col + EPI_COLS == MMA_N) {", "if (col == 0) {")],
     (768, 256, 256), ("without tcgen05.fence::before_thread_sync", "TMEM hand-off race in CTA")),
    # ... and the MMA issuer waits on the one accumulator's acc_empty with the epilogue's parity
    # (acc_phase, not acc_phase ^ 1): with one buffer the phase flips every tile, and the first
    # wait already blocks on a release that only follows the MMAs it holds back
    ("single-accumulator-wrong-phase", "gemm", "gemm.nvfp4.pair",
     [("porter::mbar_wait_cluster(bar(bars.acc_empty[buf]), acc_phase ^ 1);",
       "porter::mbar_wait_cluster(bar(bars.acc_empty[buf]), acc_phase);")],
     (768, 256, 256), "deadlock"),
    # the pair form's accumulator-full wait is a CTA-scope acquire since issue 17 item 4: what
    # orders the epilogue's tcgen05.ld after the multicast commit is the fence after it; drop
    # the fence and the simulator reports the unordered TMEM hand-off
    ("pair-cta-scope-wait-missing-fence", "gemm", "gemm.bf16.pair",
     [("porter::mbar_wait(bar(bars.acc_full[buf]), acc_phase);\n            porter::tc::fence_after_thread_sync();",
       "porter::mbar_wait(bar(bars.acc_full[buf]), acc_phase);")],
     (256, 256, 64), "without tcgen05.fence::after_thread_sync"),
    # attention: the softmax corrects O without waiting for the previous P V (pv_done): its
    # tcgen05.ld of O is ordered after no commit of the MMA writing O (the TMEM
    # happens-before check, in any order); without it, depending on the seeded order, the ld
    # meets the MMA still writing O, or the next P V overwrites the O it read unordered
    ("missing-pv-done-wait", "attention", "attention.hd128",
     [("                wait_bar(s.pv_done(), (it - 1) & 1u);\n                tc::fence_after_thread_sync();\n"
       "                correct_o(o_addr, alpha);", "                correct_o(o_addr, alpha);")],
     (1, 1, 1, 128, 1024), ("TMEM hand-off race in CTA", "still writes (it has not completed",
                            "without tcgen05.fence::before_thread_sync")),
    # attention: P is handed to the P V MMA before tcgen05.wait::st
    ("missing-wait-st", "attention", "attention.hd128",
     [("tmem::wait_st();\n            tc::fence_before_thread_sync();", "tc::fence_before_thread_sync();")],
     (1, 1, 1, 128, 128), "before that warp's tcgen05.wait::st"),
    # attention hd64 pair: the V descriptor claims the 128-byte swizzle while TMA wrote the V
    # boxes (32 columns = 64 B a key) with the 64-byte one: P V reads V scrambled
    ("v-swizzle-128b-on-64b-boxes", "attention", "attention.hd64.pair",
     [("constexpr uint64_t kDescVMnMajor = 0x8000402002000000ull;",
       "constexpr uint64_t kDescVMnMajor = 0x4000402002000000ull;")],
     (1, 2, 1, 256, 256), "outside tolerance"),
]


@pytest.mark.parametrize("case", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_planted_bug_is_caught(case, blackwell, emulate_planted):
    _, _, name, edits, shape, reason = case
    result = emulate_planted(blackwell, name, edits, shape)
    assert result["status"] == "failed", result
    reasons = reason if isinstance(reason, tuple) else (reason,)
    assert any(r in result["reason"] for r in reasons), result["reason"]


def test_unmutated_kernels_pass_at_the_mutation_shapes(blackwell):
    """The anchors' kernels are right as generated: every failure above is the planted bug's."""
    for name in sorted({m[2] for m in MUTATIONS}):
        family = name.split(".")[0]
        spec = _spec(family, name, blackwell)
        shapes = sorted({m[4] for m in MUTATIONS if m[2] == name})
        result = emulate(spec, blackwell, shapes=shapes, seeds=1)
        assert result["status"] == "passed", (name, result["reason"])


def test_attention_classic_rescale_form_emulated(blackwell):
    """rescale_threshold=0 (O corrected in TMEM whenever a row's max grows: the A/B partner of
    FA4's lazy rescaling, whose default skips nearly every correction on N(0, 1) inputs) still
    runs correctly in the simulator, so the correct_o path stays covered."""
    from porter.kernels import attention_tcgen05

    spec = attention_tcgen05.make_one(blackwell, 128, False, pair=False, knobs={"rescale_threshold": 0})
    _check_result(emulate(spec, blackwell, seeds=1), spec, 1)


def test_attention_poly_exp2_form_emulated(blackwell):
    """poly_exp2_share=25 (a quarter of each row's exp2 by the polynomial on the FMA units,
    off by default: see attention_tcgen05.POLY_EXP2_SHARE) runs correctly in the simulator,
    within the attention policy, for the GPU visit's A/B."""
    from porter.kernels import attention_tcgen05

    spec = attention_tcgen05.make_one(blackwell, 128, True, pair=False, knobs={"poly_exp2_share": 25})
    _check_result(emulate(spec, blackwell, seeds=1), spec, 1)
