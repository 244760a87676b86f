"""O stored by TMA (knob ``o_store=tma``) in the tcgen05 (one and two Q tiles per CTA, CTA
pairs) and wgmma attention: the knob's checks and its shared-memory budget, the output tensor
map the host builds (3-D, so a box stops at seq_q within its head), the generated source and
SASS, the simulator running the forms (``emulated``), the timing model's epilogue term, and a
planted bug per new synchronisation step that the simulator must catch for its reason."""
from __future__ import annotations

import numpy as np
import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import attention, attention_tcgen05, attention_wgmma
from porter.kernels import knobs as K
from porter.kernels.base import KernelSpec
from porter.runtime.emulated_runs import emulate

TMA = {"o_store": "tma"}


@pytest.fixture(scope="module")
def archs():
    return {"blackwell": load_arch("blackwell"), "hopper": load_arch("hopper")}


def _spec(arch, name, **extra):
    return K.spec_with_knobs(arch, name, {**TMA, **extra})


def test_knob_is_checked_and_off_by_default(archs):
    for arch_name, name in (("blackwell", "attention.hd128"), ("hopper", "attention.hd64")):
        arch = archs[arch_name]
        with pytest.raises(PorterError, match=r"--set o_store=smem: legal values: direct, tma"):
            K.spec_with_knobs(arch, name, {"o_store": "smem"})
        default = K.spec_with_knobs(arch, name, {})
        assert "o_store" not in default.config and K.default_knobs(arch, name)["o_store"] == "direct"
        src = attention.render(default, arch)
        assert "tma_o" not in src and "cp.async.bulk.tensor.3d" not in src
        # o_store=direct given explicitly renders the default source
        assert attention.render(K.spec_with_knobs(arch, name, {"o_store": "direct"}), arch) == src


# Where the ring does not fit beside the form's own K/V stages O is staged in Q instead (the
# one-CTA hd128 forms keep their 3 stages; test_staging_in_q_where_the_ring_does_not_fit).
RING_FITS = [(n, q) for n in ("attention.hd64", "attention.hd64.pair", "attention.hd128.causal.pair") for q in (1, 2)]
RING_FITS.append(("attention.hd128", 2))


@pytest.mark.parametrize("name,q_tiles", RING_FITS)
def test_tcgen05_staging_ring_fits_beside_the_kv_ring(archs, name, q_tiles):
    arch = archs["blackwell"]
    spec = _spec(arch, name, q_tiles=q_tiles)
    cfg, d = spec.config, spec.config["head_dim"]
    ring = cfg["o_staging"]
    assert ring["box_bytes"] == 128 * 128 and 1 <= ring["slots"] <= q_tiles * d // 64
    assert ring["bytes"] == ring["slots"] * ring["box_bytes"] and cfg["smem_budget"]["o_staging"] == ring["bytes"]
    assert spec.smem_bytes <= arch.smem_per_block_bytes and cfg["stages"] >= 2
    # the ring fits beside the form's own K/V stages: it never costs one
    default = K.spec_with_knobs(arch, name, {"q_tiles": q_tiles})
    assert cfg["stages"] == default.config["stages"] and spec.smem_bytes > default.smem_bytes
    assert [p[0] for p in cfg["params"]][:4] == ["tma_q", "tma_k", "tma_v", "tma_o"]
    src = attention.render(spec, arch)
    for text in ("cp.async.bulk.tensor.3d.global.shared::cta.tile.bulk_group", "fence.proxy.async.shared::cta",
                 "cp.async.bulk.wait_group.read", "cp.async.bulk.commit_group", "p.tma_o = &tma_o;"):
        assert text in src, text
    assert any("op:tma_store" in r.why for r in spec.sass_required)


# The one-CTA hd128 forms fill shared memory with Q and 3 K/V stages: no staging box fits beside
# them, so o_store=tma stages O in the Q buffer instead (o_staging.in = q) at the same 3 stages.
IN_Q = [("blackwell", "attention.hd128"), ("blackwell", "attention.hd128.causal"),
        ("hopper", "attention.hd128"), ("hopper", "attention.hd128.causal")]


@pytest.mark.parametrize("arch_name,name", IN_Q)
def test_staging_in_q_where_the_ring_does_not_fit(archs, arch_name, name):
    arch = archs[arch_name]
    spec, default = _spec(arch, name), K.spec_with_knobs(arch, name, {})
    ring, d = spec.config["o_staging"], spec.config["head_dim"]
    # no K/V stage taken, no byte added: the boxes are Q's
    assert ring["in"] == "q" and ring["bytes"] == 0 and ring["slots"] == d // 64
    assert spec.config["stages"] == default.config["stages"] == 3 and spec.smem_bytes == default.smem_bytes
    src = attention.render(spec, arch)
    assert "st.release_q(s.q_empty());" in src and "cp.async.bulk.wait_group.read 0" in src
    if arch.has("tmem"):
        # the MMA issuer no longer frees Q after the last S: the softmax does, after the stores read it
        assert "commit_bar(s.q_empty())" not in src and "store_row(p, t, row, o_addr, true, m, l, s.q, st);" in src
        assert "constexpr bool kOInQ = true;" in src
    else:
        assert "mbar_init(s.q_empty(), kConsumerWarpgroups);" in src and "mbar_arrive(s.q_empty())" not in src
        assert "return s.q + wg * kOBoxBytes;" in src
    # with stages=2 the ring fits again and is used
    two = _spec(arch, name, stages=2)
    assert "in" not in two.config["o_staging"] and two.config["o_staging"]["bytes"] > 0


def test_staging_that_fits_nowhere_is_refused_in_one_line(archs):
    """The two-Q-tile form stores O from its correction warpgroup, which holds no Q tile: where
    its box does not fit beside the K/V stages (a descriptor with less shared memory per block)
    the knob is refused in one line naming the limit and the stage count it would fit with."""
    import dataclasses

    bw = archs["blackwell"]
    default = K.spec_with_knobs(bw, "attention.hd128", {"q_tiles": 2})
    small = dataclasses.replace(bw, smem_per_block_bytes=default.smem_bytes)    # no room for a box
    with pytest.raises(PorterError, match=r"^attention.hd128: --set o_store=tma: the O staging box \(16384 B\) does "
                                          r"not fit shared memory beside \d K/V stages: \d+ B > smem_per_block_bytes "
                                          rf"{default.smem_bytes}( \(it fits with --set stages=\d\))?$"):
        _spec(small, "attention.hd128", q_tiles=2)


def test_wgmma_rings_per_consumer_warpgroup(archs):
    arch = archs["hopper"]
    for name, d, extra in (("attention.hd64", 64, {}), ("attention.hd128", 128, {"stages": 2})):
        spec = _spec(arch, name, **extra)
        ring = spec.config["o_staging"]
        assert ring["box_bytes"] == 64 * 128 and ring["slots"] == d // 64 and ring["barrier"] == 3
        assert ring["bytes"] == 2 * ring["slots"] * ring["box_bytes"] and spec.smem_bytes <= arch.smem_per_block_bytes
    # one consumer warpgroup: its own ring, barrier 3
    one = _spec(arch, "attention.hd64", consumers=1, pingpong=False)
    assert one.config["o_staging"]["bytes"] == one.config["o_staging"]["slots"] * 64 * 128


@pytest.mark.parametrize("sq", [64, 300])
def test_output_map_is_three_dimensional_and_stops_at_seq_q(archs, sq):
    from porter.runtime.device_runs import attention_plan
    from porter.runtime.emulated import EmuDevice
    from porter.validation import device_harness as dh

    arch = archs["blackwell"]
    spec = _spec(arch, "attention.hd128.pair")
    q, k, v = dh.attention_inputs(2, 3, 1, sq, 100, 128, seed=1)
    plan, host, maps = attention_plan(spec, arch, q, k, v)
    m = maps["tma_o"]
    assert m.dims == (128, sq, 6) and m.strides == (256, 256 * sq) and m.box == (64, min(128, sq), 1)
    assert m.swizzle == "128B" and plan["output_maps"] == {"tma_o": "o"} and "tma_o" not in host
    raw = EmuDevice().encode_tensor_map(m, 1 << 20)
    assert len(raw) == 128


@pytest.mark.parametrize("arch_name,name,extra,shape", [
    ("blackwell", "attention.hd128", {"stages": 2}, (1, 3, 1, 300, 200)),      # ring reused across tiles, ragged head
    ("blackwell", "attention.hd64.causal.pair", {"q_tiles": 2}, (1, 2, 1, 700, 530)),
    ("hopper", "attention.hd128.causal", {"stages": 2}, (1, 3, 1, 300, 200)),
    # staged in Q (3 stages): Q tiles reused across tiles; 700 x 530 causal: the first Q tile sees no key
    ("blackwell", "attention.hd128.causal", {}, (1, 2, 1, 700, 530)),
    ("hopper", "attention.hd128.causal", {}, (1, 2, 1, 700, 530)),
])
def test_forms_emulated_at_ragged_shapes(archs, arch_name, name, extra, shape):
    arch = archs[arch_name]
    res = emulate(_spec(arch, name, **extra), arch, shapes=[shape], seeds=1)
    assert res["status"] == "passed", res["reason"]
    assert all(c["passed"] for c in res["checks"])


@pytest.mark.slow
@pytest.mark.parametrize("arch_name,q_tiles", [("blackwell", 1), ("blackwell", 2), ("hopper", 1)])
def test_every_form_emulated_at_the_standard_shapes(archs, arch_name, q_tiles):
    arch = archs[arch_name]
    extra = {"q_tiles": q_tiles} if q_tiles > 1 else {}
    names = [v.name for v in attention.variants(arch) if isinstance(v, KernelSpec)]
    assert len(names) == (8 if arch_name == "blackwell" else 4)
    for name in names:
        # (the one-CTA hd128 forms stage O in Q at their 3 K/V stages)
        res = emulate(_spec(arch, name, **extra), arch, seeds=1)
        assert res["status"] == "passed", (name, res["reason"])


def test_timing_model_costs_the_epilogue_store(archs):
    """L0: the direct store writes each 32-byte sector half (twice O's bytes at the SM's L2
    share), the TMA store puts O through the shared-memory port and a fence + two named barriers
    per box; the per-Q-tile term is what differs."""
    from porter.timing import attention_model
    from porter.timing.figures import Figures

    for arch_name, name, product in (("blackwell", "attention.hd128.pair", "B200"), ("hopper", "attention.hd64", "H200 SXM")):
        arch = archs[arch_name].for_product(product)
        fig = Figures.of(arch)
        direct = K.spec_with_knobs(arch, name, {})
        tma = _spec(arch, name)
        rows, d = 128, direct.config["head_dim"]
        assert attention_model.epilogue_store_cycles(direct.config, rows, d, fig) == pytest.approx(
            2 * rows * d * 2 / fig.l2_bytes_per_clk_per_sm)
        assert attention_model.epilogue_store_cycles(tma.config, rows, d, fig) == pytest.approx(
            rows * d * 2 / fig["smem_bytes_per_clk_per_sm"] + d // 64 * (fig["fence_cycles"] + 2 * fig["named_barrier_cycles"]))
        a = attention_model.tile_costs(direct, arch, fig)
        b = attention_model.tile_costs(tma, arch, fig)
        assert b["per_q_tile"] < a["per_q_tile"] and b["resources"] == a["resources"]


# ---- planted bugs: one per new synchronisation step (attention/o_store_tma.cuh) -----------------
# (id, [(old, new)] applied to the rendered .cu (each must match exactly once), reasons: substrings
#  of the failure, any of which names the planted reason)
REWRITTEN = ("rewritten before the cp.async.bulk.wait_group.read", "shared-memory race in CTA")
MUTATIONS = [
    # the staging slot is rewritten while the TMA store of its previous box may still read it
    ("slot-rewritten-before-wait-group-read",
     [("            if (issuer) tma_store_wait_read<kSlots - 1>();\n", "")], REWRITTEN),
    # the writers' generic stores are not fenced before the async proxy (the TMA) reads them
    ("no-fence-proxy-async-before-the-store",
     [("        fence_proxy_async_smem();\n        named_barrier_sync(kBarrier0 + group, kThreadsStoring);\n",
       "        named_barrier_sync(kBarrier0 + group, kThreadsStoring);\n")],
     ("written by generic stores with no fence.proxy.async",)),
    # the issuer's wait_group.read is not passed on: the other writers rewrite the slot before it
    ("wait-group-read-not-passed-to-the-writers",
     [("            if (issuer) tma_store_wait_read<kSlots - 1>();\n            named_barrier_sync(kBarrier0 + group, kThreadsStoring);\n",
       "            if (issuer) tma_store_wait_read<kSlots - 1>();\n")], REWRITTEN + ("deadlock",)),
    # the store is issued before every writer has written (and fenced) its rows
    ("store-issued-before-the-writers-met",
     [("        fence_proxy_async_smem();\n        named_barrier_sync(kBarrier0 + group, kThreadsStoring);\n",
       "        fence_proxy_async_smem();\n")], REWRITTEN + ("outside tolerance", "deadlock", "no fence.proxy.async")),
]
# (form id, arch, kernel, knobs, shape): more tiles than the emulated device's 4 SMs, so a slot is reused
FORMS = [
    ("tcgen05", "blackwell", "attention.hd128", {"stages": 2}, (1, 3, 1, 300, 200)),
    ("tcgen05-2q-pair", "blackwell", "attention.hd64.pair", {"q_tiles": 2}, (1, 5, 1, 300, 200)),
    ("wgmma", "hopper", "attention.hd64", {}, (1, 5, 1, 300, 200)),
]
# every mutation once in the default suite (spread over the forms), the whole matrix under slow
CASES = [pytest.param(m, f, marks=() if i % len(FORMS) == j else pytest.mark.slow, id=f"{m[0]}-{f[0]}")
         for i, m in enumerate(MUTATIONS) for j, f in enumerate(FORMS)]


def _mutated(arch, form, edits):
    _, _, name, extra, _ = form
    spec = _spec(arch, name, **extra)
    source = attention.render(spec, arch)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
        source = source.replace(old, new)
    return spec, source


@pytest.mark.parametrize("mutation,form", CASES)
def test_planted_bug_is_caught(archs, mutation, form):
    _, edits, reasons = mutation
    arch = archs[form[1]]
    spec, source = _mutated(arch, form, edits)
    result = emulate(spec, arch, shapes=[form[4]], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert any(r in result["reason"] for r in reasons), result["reason"]


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_unmutated_forms_pass_at_the_mutation_shapes(archs, form):
    """Every failure above is the planted bug's: the generated kernel passes there, and its
    final wait_group 0 leaves no exit warning (the next test removes it)."""
    _, arch_name, name, extra, shape = form
    res = emulate(_spec(archs[arch_name], name, **extra), archs[arch_name], shapes=[shape], seeds=1)
    assert res["status"] == "passed", res["reason"]
    assert not any("cp.async.bulk.wait_group" in w for w in res["warnings"]), res["warnings"]


# ---- planted bugs of the Q-buffer staging (o_staging.in = q): the hand-off of Q to O and back -----
# Forms that stage O in Q at their 3 stages, with more tiles than the emulated device's 4 SMs so
# that a CTA reloads Q after storing O from it.
FORMS_Q = [
    ("tcgen05-in-q", "blackwell", "attention.hd128", {}, (1, 3, 1, 300, 200)),
    ("wgmma-in-q", "hopper", "attention.hd128", {}, (1, 3, 1, 300, 200)),
]
RELEASE_BEFORE_READ = [("            tma_store_wait_read<0>();\n            mbar_arrive(q_empty);\n",
                        "            mbar_arrive(q_empty);\n")]
Q_REUSED = REWRITTEN + ("changed before the operation completed", "changed before the wgmma.wait_group",
                        "outside tolerance", "no fence.proxy.async", "while the TMA")
MUTATIONS_Q = [
    # Q handed to the producer before the O stores' wait_group.read: the next Q tile's TMA load
    # overwrites boxes the bulk stores may still be reading
    ("q-released-before-the-stores-read-it", FORMS_Q[0], RELEASE_BEFORE_READ, REWRITTEN),
    ("q-released-before-the-stores-read-it", FORMS_Q[1], RELEASE_BEFORE_READ, REWRITTEN),
    # tcgen05: Q freed by the last S's commit (the ring layout's hand-off) instead of after the
    # stores: the next Q lands while O is written over it / stored from it
    ("q-freed-by-the-last-qk-commit", FORMS_Q[0],
     [("            // (O is staged in Q: the softmax frees Q after the O stores have read it, not this S)\n",
       "            if (n == t.kv_tiles - 1) commit_bar(s.q_empty());\n"),
      ("            st.release_q(s.q_empty());\n", "")], Q_REUSED),
    # wgmma: the same, Q freed by every consumer warp right after its last S (the ring layout's
    # hand-off, kConsumerWarps arrivals) instead of by each warpgroup's storer after its stores
    ("q-freed-after-the-last-qk-wait", FORMS_Q[1],
     [("        mbar_init(s.q_empty(), kConsumerWarpgroups);\n", "        mbar_init(s.q_empty(), kConsumerWarps);\n"),
      ("                wgmma_wait<1>();                 // S(n) is ready; P V(n-1) may still run\n"
       "                fence_accumulator(sacc);\n",
       "                wgmma_wait<1>();                 // S(n) is ready; P V(n-1) may still run\n"
       "                fence_accumulator(sacc);\n"
       "                if (n == t.kv_tiles - 1 && lane == 0) mbar_arrive(s.q_empty());\n"),
      ("        st.release_q(s.q_empty());\n", "")], Q_REUSED),
    # wgmma: a warpgroup stages its O over the other warpgroup's Q rows, which that warpgroup's
    # last Q K^T may still be reading: its operand reads end at its own wgmma.wait_group, which
    # nothing orders before these stores (caught by happens-before whether its wgmma is still in
    # flight or already done in the order the run took)
    ("o-staged-over-the-other-warpgroups-q", FORMS_Q[1],
     [("        const uint32_t slot = st.begin(staging_of(s, wg));\n",
       "        const uint32_t slot = st.begin(staging_of(s, 1 - wg));\n")],
     Q_REUSED + ("which holds an undefined value",)),
]


@pytest.mark.parametrize("mid,form,edits,reasons", MUTATIONS_Q, ids=[f"{m[0]}-{m[1][0]}" for m in MUTATIONS_Q])
def test_planted_bug_of_the_q_staging_is_caught(archs, mid, form, edits, reasons):
    arch = archs[form[1]]
    spec, source = _mutated(arch, form, edits)
    result = emulate(spec, arch, shapes=[form[4]], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert any(r in result["reason"] for r in reasons), result["reason"]


@pytest.mark.parametrize("form", FORMS_Q, ids=[f[0] for f in FORMS_Q])
def test_unmutated_q_staging_forms_pass_at_the_mutation_shapes(archs, form):
    _, arch_name, name, extra, shape = form
    res = emulate(_spec(archs[arch_name], name, **extra), archs[arch_name], shapes=[shape], seeds=1)
    assert res["status"] == "passed", res["reason"]
    assert not any("cp.async.bulk.wait_group" in w for w in res["warnings"]), res["warnings"]


def _compiles_without_spills(arch, arch_name, name, q_tiles):
    from porter.kernels.build import build_kernel

    extra = {"q_tiles": q_tiles} if q_tiles > 1 else {}
    build = build_kernel(_spec(arch, name, **extra), arch)
    failed = [f"{c.name}: {c.detail}" for c in build.checks if not c.passed]
    assert build.ok and not failed, (arch_name, name, q_tiles, failed or build.compile_error)
    assert build.resources["spill_store_bytes"] == 0 and build.resources["local_bytes"] == 0


# By default the forms whose register split is ptxas's answer (REGS_2Q_O_TMA: two Q tiles, one
# CTA and a pair), a wgmma form and the two forms that stage O in Q; each is a cold NVRTC compile of ~4 s (the whole matrix, 20
# forms, ~90 s on a cold compile cache, runs under slow).
@pytest.mark.parametrize("arch_name,name,q_tiles", [("blackwell", "attention.hd128", 2),
                                                    ("blackwell", "attention.hd128.pair", 2),
                                                    ("hopper", "attention.hd64", 1),
                                                    ("blackwell", "attention.hd128", 1),     # staged in Q
                                                    ("hopper", "attention.hd128", 1)])       # staged in Q
def test_the_register_split_forms_compile_and_pass_their_sass_checks_without_spills(archs, arch_name, name, q_tiles):
    """NVRTC + SASS checks (no local memory, UTMASTG present): the two-Q-tile form's setmaxnreg
    split for o_store=tma (REGS_2Q_O_TMA) is what ptxas needed."""
    _compiles_without_spills(archs[arch_name], arch_name, name, q_tiles)


@pytest.mark.slow
def test_every_form_compiles_and_passes_its_sass_checks_without_spills(archs):
    """NVRTC + SASS checks (no local memory, UTMASTG present) for every o_store=tma form."""
    for arch_name, q_tiles in (("blackwell", 1), ("blackwell", 2), ("hopper", 1)):
        arch = archs[arch_name]
        for v in attention.variants(arch):
            if isinstance(v, KernelSpec):
                _compiles_without_spills(arch, arch_name, v.name, q_tiles)


@pytest.mark.parametrize("form", [pytest.param(FORMS[0], marks=pytest.mark.slow), FORMS[2]], ids=["tcgen05", "wgmma"])
def test_exit_before_the_final_wait_group_is_warned(archs, form):
    """Without the final wait_group 0 the CTA exits with its last boxes' stores unread: the
    simulator still completes them (so the numbers pass) but warns, since the CTA's shared
    memory is released at exit (the ISA states no rule for it, so a warning, not an error).
    The kernel as generated gives no such warning (test_unmutated_forms_pass_at_the_mutation_shapes)."""
    _, arch_name, _, _, shape = form
    arch = archs[arch_name]
    spec, source = _mutated(arch, form, [("    st.drain();", "    // (drain removed)")])
    res = emulate(spec, arch, shapes=[shape], seeds=1, source=source)
    assert any("not covered by a cp.async.bulk.wait_group" in w for w in res["warnings"]), res["warnings"]


# ---- the timed model (L1) times the O-store barrier on its own arrivals --------------------------
# Two pairs of warps meet at two named barriers whose id and thread count are registers
# (bar.sync %r, %r, as attention/o_store_tma.cuh's OStager and the ping-pong turns compile):
# warps 0, 1 at barrier 1 (warp 1 late, after four dependent global loads), warps 2, 3 at barrier 2 (both
# early). PTX ISA "bar, barrier": a names the barrier "as an immediate constant or register",
# b the participating threads; the timed mode must time each barrier on its own arrivals.
REG_BARRIER_PTX = """
.version 8.0
.target sm_90a
.address_size 64
.visible .entry probe(.param .u64 out) {
  .reg .u32 %r<12>; .reg .u64 %rd<4>; .reg .pred %p<3>;
  ld.param.u64 %rd1, [out];
  mov.u32 %r1, %tid.x;
  shr.u32 %r2, %r1, 5;
  shr.u32 %r3, %r2, 1;
  add.u32 %r5, %r3, 1;
  mov.u32 %r6, 64;
  mov.u32 %r7, 0;
  setp.ne.u32 %p1, %r2, 1;
  @%p1 bra SYNC;
  ld.global.u32 %r7, [%rd1];
  cvt.u64.u32 %rd2, %r7;
  add.u64 %rd3, %rd1, %rd2;
  ld.global.u32 %r7, [%rd3];
  cvt.u64.u32 %rd2, %r7;
  add.u64 %rd3, %rd1, %rd2;
  ld.global.u32 %r7, [%rd3];
  cvt.u64.u32 %rd2, %r7;
  add.u64 %rd3, %rd1, %rd2;
  ld.global.u32 %r7, [%rd3];
SYNC:
  bar.sync %r5, %r6;
  mul.wide.u32 %rd2, %r1, 4;
  add.u64 %rd3, %rd1, %rd2;
  st.global.u32 [%rd3], %r7;
  ret;
}
"""


def runs_l2_latency() -> float:
    from porter.descriptor.arch import load_arch
    from porter.timing.figures import Figures
    from porter.timing.l1 import params

    return params(Figures.of(load_arch("hopper")))["l2_latency_cycles"]


def test_timed_named_barrier_in_a_register_is_timed_on_its_own_arrivals():
    from porter import emu
    from porter.descriptor.arch import load_arch
    from porter.emu.timed import timed
    from porter.timing.figures import Figures
    from porter.timing.l1 import params

    with timed(params(Figures.of(load_arch("hopper"))), marks=("st.global.u32",)) as runs:
        res = emu.launch(REG_BARRIER_PTX, "probe", grid=1, block=128, args=[np.zeros(128, np.uint32)])
    assert not res.outputs[0].any()
    at = {w: t for _, w, t, _ in runs[0]["marks"]}
    late = 3 * runs_l2_latency()       # the fourth load is waited for by the store only
    # warps 0 and 1 leave barrier 1 after warp 1's loads, warps 2 and 3 leave barrier 2 at once
    # (timed as one barrier of every warp, they waited for warp 1's loads too)
    assert at[0] > late and at[1] > late, at
    assert at[2] < late / 4 and at[3] < late / 4, at
