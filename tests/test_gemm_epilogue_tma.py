"""C stored by TMA in the Hopper wgmma GEMM (knob ``epilogue=tma``, fast.cu's kernel 11): the
knob's checks and shared-memory budget (two staging tiles per consumer warpgroup), C's tensor
map over the output buffer, the generated source and SASS, the simulator running the form
(``emulated``) with staging tiles reused across chunks and tiles, a planted bug per new
synchronisation step that the simulator must catch for its reason, and the timing model's
epilogue term (the default's st.global at the SM's L2 share, the TMA store's read and bytes
off the exposed path)."""
from __future__ import annotations

import dataclasses

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import PorterError
from porter.kernels import gemm
from porter.kernels import knobs as K
from porter.runtime.emulated_runs import emulate

TMA = {"epilogue": "tma"}


@pytest.fixture(scope="module")
def hopper():
    return load_arch("hopper")


def test_knob_is_checked_and_off_by_default(hopper):
    with pytest.raises(PorterError, match=r"^gemm\.bf16: --set epilogue=direct: legal values: staged, tma"):
        K.spec_with_knobs(hopper, "gemm.bf16", {"epilogue": "direct"})
    default = K.spec_with_knobs(hopper, "gemm.bf16", {})
    assert "epilogue_mode" not in default.config and K.default_knobs(hopper, "gemm.bf16")["epilogue"] == "staged"
    src = gemm.render(default, hopper)
    assert "tma_c" not in src and "tma_store_2d(" not in src.split("extern \"C\"")[1]
    # epilogue=staged given explicitly renders the default source
    assert gemm.render(K.spec_with_knobs(hopper, "gemm.bf16", {"epilogue": "staged"}), hopper) == src


@pytest.mark.parametrize("name", ["gemm.bf16", "gemm.fp8"])
def test_two_staging_tiles_per_consumer_and_c_map(hopper, name):
    spec, default = K.spec_with_knobs(hopper, name, TMA), K.spec_with_knobs(hopper, name, {})
    cfg = spec.config
    assert cfg["epilogue_buffers"] == 2
    assert cfg["epilogue_bytes"] == 2 * default.config["epilogue_bytes"] == cfg["consumers"] * 2 * 64 * 64 * 2
    assert spec.smem_bytes == default.smem_bytes + default.config["epilogue_bytes"] <= hopper.smem_per_block_bytes
    assert cfg["stages"] == default.config["stages"]           # the second tiles fit beside the ring
    # its own symbol: its arguments differ from the default form's
    assert spec.entry == default.entry + "_c_tma"
    params = [p for p, _ in cfg["params"]]
    assert params[:4] == ["tma_a", "tma_b", "tma_c", "c"]
    (c_map,) = [t for t in cfg["tensor_maps"] if t["param"] == "tma_c"]
    assert c_map["box"] == [64, 64] and c_map["swizzle"] == "128B" and c_map["output"] == "c"
    src = gemm.render(spec, hopper)
    for text in ("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group", "fence.proxy.async.shared::cta",
                 "cp.async.bulk.wait_group.read", "cp.async.bulk.commit_group", "tma_store_wait_all<0>()"):
        assert text in src, text
    assert any("op:tma_store" in r.why for r in spec.sass_required)


def test_staging_that_does_not_fit_is_refused_in_one_line(hopper):
    """On a descriptor with no room for the second staging tiles at the asked stage count the
    knob is refused in one line naming shared memory."""
    asked = {"tile_n": 256, "stages": 4}
    default = K.spec_with_knobs(hopper, "gemm.bf16", asked)
    small = dataclasses.replace(hopper, smem_per_block_bytes=default.smem_bytes)
    K.spec_with_knobs(small, "gemm.bf16", asked)                        # the staged form still fits
    with pytest.raises(PorterError, match=r"^gemm\.bf16: --set stages=4: does not fit shared memory: .*32768 B "
                                          r"epilogue staging"):
        K.spec_with_knobs(small, "gemm.bf16", {**asked, **TMA})


def test_c_map_is_over_the_output(hopper):
    from porter.runtime.gemm import operand_maps

    spec = K.spec_with_knobs(hopper, "gemm.bf16", TMA)
    maps = operand_maps(spec, 512, 768, 256, 512, 512)
    c = maps["tma_c"]
    assert c.dims == (768, 512) and c.strides == (768 * 2,) and c.box == (64, 64) and c.swizzle == "128B"
    assert c.data_type == "BFLOAT16"
    assert "tma_c" not in operand_maps(K.spec_with_knobs(hopper, "gemm.bf16", {}), 512, 768, 256, 512, 512)


def test_sass_has_the_tma_store(hopper):
    from porter.kernels.build import build_kernel

    build = build_kernel(K.spec_with_knobs(hopper, "gemm.bf16", TMA), hopper)
    if build.compiled is None:
        pytest.skip(f"no NVRTC here: {build.compile_error}")
    assert build.ok, [c for c in build.checks if not c.passed]
    assert any("op:tma_store" in c.detail and c.passed for c in build.checks)
    assert build.resources["spill_store_bytes"] == 0


# (knobs, shape): more tiles than the emulated device's SMs (a CTA stores several tiles, so each
# staging tile is reused across tiles as well as across a tile's chunks); a single-chunk tile
# (tile_n 64) alternates its two tiles from one tile to the next
FORMS = [
    ("cluster2-n256", {}, (768, 512, 128)),
    ("n64-no-cluster", {"tile_n": 64, "cluster_m": 1}, (640, 192, 128)),
]


@pytest.mark.parametrize("form", FORMS, ids=[f[0] for f in FORMS])
def test_forms_emulated(hopper, form):
    _, extra, shape = form
    res = emulate(K.spec_with_knobs(hopper, "gemm.bf16", {**TMA, **extra}), hopper, shapes=[shape], seeds=1)
    assert res["status"] == "passed", res["reason"]
    assert all(c["passed"] for c in res["checks"])
    assert not any("cp.async.bulk.wait_group" in w for w in res["warnings"]), res["warnings"]


def test_default_shapes_emulated(hopper):
    res = emulate(K.spec_with_knobs(hopper, "gemm.fp8", TMA), hopper, seeds=1)
    assert res["status"] == "passed", res["reason"]


# ---- planted bugs: one per new synchronisation step -------------------------------------------
REWRITTEN = ("rewritten before the cp.async.bulk.wait_group.read", "shared-memory race in CTA")
MUTATIONS = [
    # the staging tile is rewritten while the TMA store of two chunks back may still read it
    ("tile-rewritten-before-wait-group-read",
     [("                if (thread_in_wg == 0) porter::tma_store_wait_read<EPI_BUFFERS - 1>();\n", "")], REWRITTEN),
    # the writers' generic stores are not fenced before the async proxy (the TMA) reads them
    ("no-fence-proxy-async-before-the-store",
     [("                porter::fence_proxy_async_smem();\n"
       "                porter::named_barrier_sync(1 + consumer, 128);  // the chunk is complete and fenced\n",
       "                porter::named_barrier_sync(1 + consumer, 128);  // the chunk is complete and fenced\n")],
     ("written by generic stores with no fence.proxy.async",)),
    # the store is issued before every writer has written (and fenced) its rows
    ("store-issued-before-the-writers-met",
     [("                porter::fence_proxy_async_smem();\n"
       "                porter::named_barrier_sync(1 + consumer, 128);  // the chunk is complete and fenced\n",
       "                porter::fence_proxy_async_smem();\n")],
     REWRITTEN + ("outside tolerance", "no fence.proxy.async", "deadlock")),
    # the store goes to the wrong place: chunk columns not advanced
    ("chunk-column-not-advanced",
     [("porter::tma_store_2d(&tma_c, tile_addr, col0 + q * EPI_COLS, row0);",
       "porter::tma_store_2d(&tma_c, tile_addr, col0, row0);")], ("outside tolerance", "mismatch")),
]


def _mutated(hopper, extra, edits):
    spec = K.spec_with_knobs(hopper, "gemm.bf16", {**TMA, **extra})
    source = gemm.render(spec, hopper)
    for old, new in edits:
        assert source.count(old) == 1, f"mutation anchor not found exactly once: {old[:70]!r}"
        source = source.replace(old, new)
    return spec, source


@pytest.mark.parametrize("mutation", MUTATIONS, ids=[m[0] for m in MUTATIONS])
def test_planted_bug_is_caught(hopper, mutation):
    _, edits, reasons = mutation
    _, extra, shape = FORMS[0]
    spec, source = _mutated(hopper, extra, edits)
    result = emulate(spec, hopper, shapes=[shape], seeds=1, source=source)
    assert result["status"] == "failed", result
    assert any(r in result["reason"] for r in reasons), result["reason"]


def test_missing_final_wait_is_reported(hopper):
    """Without the issuer's final wait_group 0 the CTA may exit while its stores still read
    shared memory: the simulator says so (the unmutated form leaves no such warning above)."""
    _, extra, shape = FORMS[0]
    spec, source = _mutated(hopper, extra, [("        if (threadIdx.x % 128u == 0) porter::tma_store_wait_all<0>();\n", "")])
    result = emulate(spec, hopper, shapes=[shape], seeds=1, source=source)
    said = " ".join([result.get("reason") or ""] + list(result.get("warnings", ())))
    assert "cp.async.bulk" in said, result


# ---- the timing model ------------------------------------------------------------------------

def test_timing_model_costs_the_epilogue_store(hopper):
    from porter.timing import gemm_model
    from porter.timing.figures import Figures

    arch = hopper.for_product("H100 SXM")
    fig = Figures.of(arch)
    staged = gemm_model.tile_costs(K.spec_with_knobs(arch, "gemm.bf16", {}), arch, fig)
    tma = gemm_model.tile_costs(K.spec_with_knobs(arch, "gemm.bf16", TMA), arch, fig)
    out = 128 * 256 * 2
    smem, l2 = fig["smem_bytes_per_clk_per_sm"], fig.l2_bytes_per_clk_per_sm
    drain = fig["mma_latency_base_cycles"] + fig["mma_latency_per_n_cycles"] * 256 + fig["named_barrier_cycles"]
    # staged: written, then read back under st.global that leave at the SM's L2 share
    assert staged["epilogue"] == pytest.approx(out / smem + max(out / smem, out / l2)
                                               + fig.ns_to_cycles(fig["l2_latency_ns"]) + drain)
    # tma: only the write, 4 chunks' fence and meetings are exposed; the read and bytes are the tile's
    assert tma["epilogue"] == pytest.approx(out / smem + 4 * (fig["fence_cycles"] + 2 * fig["named_barrier_cycles"])
                                            + drain)
    assert (tma["epilogue_async_smem"], tma["epilogue_async_l2"]) == pytest.approx((out / smem, out / l2))
    assert staged["epilogue_async_smem"] == staged["epilogue_async_l2"] == 0
    assert tma["resources"] == staged["resources"]
    # the knob moves the prediction the way fast.cu's kernel 11 moved the measurement
    from porter.timing.predict import predict

    for shape in ("8192x8192x8192", "6144x6144x6144"):
        a = predict(arch, K.spec_with_knobs(arch, "gemm.bf16", {"grid_ctas": 128, "stages": 3}),
                    product="H100 SXM", shape=shape)
        b = predict(arch, K.spec_with_knobs(arch, "gemm.bf16", {"grid_ctas": 128, "stages": 3, **TMA}),
                    product="H100 SXM", shape=shape)
        assert b.time_us < a.time_us, shape
