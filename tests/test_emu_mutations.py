"""Planted bugs in generated Hopper kernels: each broken copy must fail in porter's PTX
simulator for the planted reason (wrong numbers, a checker error or a deadlock report).

Each mutation is one text substitution in the rendered CUDA source (which must match
exactly once, so a template change that moves the line fails the test instead of
silently testing nothing), built with NVRTC and run through ``porter.runtime.emulated_runs.emulate``
with the device harness's inputs, poisoning and references.
"""

from __future__ import annotations

import pytest

from porter.commands.kernel import find_kernel
from porter.runtime.emulated_runs import emulate
from porter.kernels import family_module

# (id, family, kernel, [(old, new)], shape, expected reason: a substring of the failure, or a tuple of them)
MUTATIONS = [
    ("mbarrier-parity", "gemm", "gemm.bf16",
     [("porter::mbar_wait(full_bars + 8 * stage, phase);", "porter::mbar_wait(full_bars + 8 * stage, phase ^ 1u);")],
     # the consumer's wgmma reads the TMA's bytes without having acquired their phase: its D is
     # undefined (ops.wgmma.Undefined), caught where the epilogue reads it, or, once the wgmma has
     # completed, as the next landing racing its read
     (256, 256, 64), ("which holds an undefined value", "write by the TMA issued by")),
    ("arrival-count", "gemm", "gemm.bf16",
     [("porter::mbar_init(empty_bars + 8 * s, 4 * CONSUMERS * CLUSTER_M);",
       "porter::mbar_init(empty_bars + 8 * s, 4 * CONSUMERS * CLUSTER_M + 1);")],
     (256, 256, 320), "deadlock"),
    ("expect-tx-bytes", "gemm", "gemm.bf16",
     [("porter::mbar_arrive_expect_tx(full, STAGE_TX_BYTES);", "porter::mbar_arrive_expect_tx(full, STAGE_TX_BYTES + 1024);")],
     (256, 256, 64), "tx-count 1024"),
    ("swizzle-mode", "gemm", "gemm.bf16",
     [("constexpr uint64_t DESC_TEMPLATE = 0x4000004000010000ull;",
       "constexpr uint64_t DESC_TEMPLATE = 0x8000004000010000ull;")],
     (256, 256, 64), "outside tolerance or unwritten"),
    ("stride-byte-offset", "gemm", "gemm.bf16",
     [("constexpr uint64_t DESC_TEMPLATE = 0x4000004000010000ull;",
       "constexpr uint64_t DESC_TEMPLATE = 0x4000002000010000ull;")],
     # the ISA states no rule against aliasing operand elements (a warning): the numbers catch it
     (256, 256, 64), "outside tolerance or unwritten"),
    ("tile-index", "gemm", "gemm.bf16",
     [("const int row0 = tile_m * TILE_M + consumer * MMA_M;", "const int row0 = tile_m * TILE_M;")],
     (256, 256, 64), "outside tolerance or unwritten"),
    ("missing-wait-group", "gemm", "gemm.bf16",
     [("            porter::wgmma_wait<0>();\n            if (lane == 0) release(prev_stage);",
       "            if (lane == 0) release(prev_stage);")],
     (256, 256, 64), "before the wgmma.wait_group that covers it"),
    ("early-release", "gemm", "gemm.bf16",
     [("porter::wgmma_wait<1>();\n                if (kb > 0 && lane == 0) release(prev_stage);",
       "if (lane == 0) release(stage);\n                porter::wgmma_wait<1>();"),
      ("            porter::wgmma_wait<0>();\n            if (lane == 0) release(prev_stage);",
       "            porter::wgmma_wait<0>();")],
     (256, 256, 512), "released before the wait"),
    ("missing-cluster-barrier", "gemm", "gemm.bf16",
     [("    // our empty barriers up to their last k-block.\n    porter::cluster_sync();",
       "    // our empty barriers up to their last k-block.")],
     (256, 256, 256), "missing cluster barrier before exit"),
    ("unbalanced-setmaxnreg", "gemm", "gemm.bf16",
     [("porter::setmaxnreg_inc<CONSUMER_REGS>();", "porter::setmaxnreg_inc<CONSUMER_REGS + 8>();")],
     (256, 256, 64), "setmaxnreg.inc"),
    ("shared-memory-race", "gemm", "gemm.bf16",
     [("                porter::named_barrier_sync(1 + consumer, 128);  // the chunk is complete\n", "")],
     (256, 256, 64), "shared-memory race in CTA"),
    # fp8's default (fast accumulation, 128 x 256): the epilogue reads `acc` with no wait
    ("fp8-missing-wait-group", "gemm", "gemm.fp8",
     [("            porter::wgmma_wait<0>();\n", "")],
     (256, 256, 128), "before the wgmma.wait_group that covers it"),
]

# Planted bugs in a kernel built with --set knobs (a form the device check's A/B rows
# benchmark): (id, kernel, knobs, [(old, new)], shape, expected reason).
KNOBBED_MUTATIONS = [
    # promoted fp8 (the A/B row's old form): the FADDs read the chain's `part` unwaited
    ("fp8-promoted-missing-wait-group", "gemm.fp8", {"accumulation": "promoted", "tile_n": 128},
     [("            porter::wgmma_wait<0>();\n", "")],
     (256, 128, 128), "before the wgmma.wait_group that covers it"),
]


@pytest.mark.parametrize("case", KNOBBED_MUTATIONS, ids=[m[0] for m in KNOBBED_MUTATIONS])
def test_planted_bug_in_a_knobbed_form_is_caught(case, hopper):
    from porter.kernels.knobs import spec_with_knobs

    _, name, knobs, edits, shape, reason = case
    spec = spec_with_knobs(hopper, name, knobs)
    source = family_module(spec.family).render(spec, hopper)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
        source = source.replace(old, new)
    result = emulate(spec, hopper, shapes=[shape], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert reason in result["reason"], result["reason"]


@pytest.mark.parametrize("case", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_planted_bug_is_caught(case, hopper, emulate_planted):
    _, _, name, edits, shape, reason = case
    result = emulate_planted(hopper, name, edits, shape)
    assert result["status"] == "failed", result
    reasons = reason if isinstance(reason, tuple) else (reason,)
    assert any(r in result["reason"] for r in reasons), result["reason"]


def test_unmutated_kernel_passes_at_the_mutation_shapes(hopper):
    """The anchors' kernel is right as generated: every failure above is the planted bug's."""
    spec = find_kernel("gemm.bf16", hopper)[0]
    source = family_module("gemm").render(spec, hopper)
    shapes = sorted({m[4] for m in MUTATIONS if m[2] == "gemm.bf16"})
    result = emulate(spec, hopper, shapes=shapes, seeds=1, source=source)
    assert result["status"] == "passed", result["reason"]


# Planted bugs in the megakernel's cross-CTA counters (issue 17 item 8): the waits spin on
# ld.acquire before backing off, and the signal is one release after the CTA barrier with
# no fence before it. Each broken copy runs the tiny model's decode step in the simulator.
# (The dropped fence itself has no planted twin: porter's simulator is sequentially
# consistent for global memory, so a relaxed signal would pass there; the argument that
# the release suffices is the PTX memory model's, written in counters.cuh.)
MEGAKERNEL_MUTATIONS = [
    # the spin gives up after kSpinPolls polls as if the count were reached: the consumer
    # reads activations its producers have not written yet
    ("counter-spin-exits-early",
     [("        if (ld_acquire_gpu(counter) >= target) return;",
       "        if (ld_acquire_gpu(counter) >= target || poll == kSpinPolls - 1) return;")],
     "outside tolerance or unwritten"),
    # early release: the signal goes out before the barrier that orders the other compute
    # warps' stores of the instruction
    ("counter-signal-before-barrier",
     [("        group_sync();           // every store of this instruction issued\n"
       "        if (c.ct == 0 && signal >= 0) {\n"
       "            // the release orders the CTA's stores, which the barrier above put before\n"
       "            // it in causality order: no fence first (counters.cuh, \"Ordering\")\n"
       "            signal_counter(counters + signal);\n"
       "        }",
       "        if (c.ct == 0 && signal >= 0) signal_counter(counters + signal);\n"
       "        group_sync();")],
     "outside tolerance or unwritten"),
]


@pytest.mark.parametrize("case", MEGAKERNEL_MUTATIONS, ids=[m[0] for m in MEGAKERNEL_MUTATIONS])
def test_planted_megakernel_counter_bug_is_caught(case, hopper):
    _, edits, reason = case
    spec = family_module("megakernel").variants(hopper)[0]
    source = family_module("megakernel").render(spec, hopper)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
        source = source.replace(old, new)
    result = emulate(spec, hopper, shapes=["tiny"], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert reason in result["reason"], result["reason"]
