"""Per-product figures (issue #13 item 4): a descriptor describes an architecture, its
``products`` section each product's own SM count, memory and peaks; ``--product`` makes
the megakernel's queues, the roofline and the report follow the product."""

from __future__ import annotations

import pickle
import re

import pytest

from porter import paths
from porter.descriptor.arch import arch_from_text, load_arch
from porter.cli import main
from porter.errors import PorterError
from porter.kernels import megakernel
from porter.megakernel.hw import HwFigures
from porter.pipeline.runner import default_out_name

RTX_TEXT = (paths.data_dir("arch") / "rtx-blackwell.yaml").read_text()


def test_shipped_products_and_defaults():
    hopper = load_arch("hopper")
    assert hopper.product == hopper.default_product == "H200 SXM"
    assert hopper.product_names == ("H200 SXM", "H100 SXM")
    h100 = hopper.for_product("H100 SXM")
    assert (h100.sm_count, h100.hbm_bytes, h100.hbm_bandwidth_bytes_per_s) == (132, 80 * 10**9, 3.35e12)
    assert h100.peak_tflops == hopper.peak_tflops          # same chip, same tensor-core rates
    assert h100.digest != hopper.digest and h100.product == "H100 SXM"
    # Selecting the default gives the descriptor's own figures (and its cache key).
    assert hopper.for_product("H200 SXM") == hopper
    a40 = load_arch("ampere").for_product("A100 SXM 40GB")
    assert a40.hbm_bandwidth_bytes_per_s == 1.555e12 and a40.sm_count == 108


def test_rtx_blackwell_products_differ_in_sms_memory_and_peak():
    rtx = load_arch("rtx-blackwell")
    assert rtx.product == "RTX 5090" and rtx.sm_count == 170 and rtx.hbm_bytes == 32 * 10**9
    assert rtx.hbm_bandwidth_bytes_per_s == 1.792e12
    pro = rtx.for_product("RTX PRO 6000")
    assert (pro.sm_count, pro.l2_bytes, pro.hbm_bytes) == (188, 128 * 1024 * 1024, 96 * 10**9)
    assert pro.hbm_bandwidth_bytes_per_s == rtx.hbm_bandwidth_bytes_per_s
    # The roofline follows the product: more fp4 peak at the same bandwidth moves the ridge.
    assert pro.ridge_flop_per_byte("fp4") == pytest.approx(2000e12 / 1.792e12)
    assert rtx.ridge_flop_per_byte("fp4") == pytest.approx(1676e12 / 1.792e12)
    # Everything architectural stays: limits, tensor core, features.
    assert (pro.smem_per_block_bytes, pro.features, pro.tensor_core) == (rtx.smem_per_block_bytes, rtx.features,
                                                                         rtx.tensor_core)


def test_megakernel_queues_follow_the_product():
    rtx = load_arch("rtx-blackwell")
    pro = rtx.for_product("RTX PRO 6000")
    assert megakernel.make_spec(rtx, "llama-decode").config["grid"] == 170
    assert megakernel.make_spec(pro, "llama-decode").config["grid"] == 188
    assert HwFigures.of(pro).sm_count == 188 and HwFigures.of(pro).product == "RTX PRO 6000"
    h100 = load_arch("hopper").for_product("H100 SXM")
    assert HwFigures.of(h100).hbm_bandwidth_bytes_per_s == 3.35e12


def test_product_survives_pickling_and_names_its_build_folder():
    pro = load_arch("rtx-blackwell").for_product("RTX PRO 6000")
    back = pickle.loads(pickle.dumps(pro))   # pipeline workers get the arch this way
    assert back.product == "RTX PRO 6000" and back.sm_count == 188 and back == pro
    assert default_out_name(pro) == "rtx-blackwell-rtx-pro-6000"
    assert default_out_name(load_arch("rtx-blackwell")) == "rtx-blackwell"


def test_unknown_product_is_one_line():
    with pytest.raises(PorterError, match=r"products: no product 'RTX 6000'; did you mean 'RTX PRO 6000'\?"):
        load_arch("rtx-blackwell").for_product("RTX 6000")
    with pytest.raises(PorterError, match=r"products: no product 'B300'; did you mean 'B200'\?"):
        load_arch("blackwell").for_product("B300")


def test_cli_unknown_product_exits_2(capsys):
    assert main(["target", "rtx-blackwell", "--product", "RTX 6000", "-q"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "did you mean 'RTX PRO 6000'" in err[0]


def _edit(old: str, new: str) -> str:
    assert RTX_TEXT.count(old) == 1, old
    return RTX_TEXT.replace(old, new)


@pytest.mark.parametrize("old, new, message", [
    ("  RTX PRO 6000:\n", "  RTX PRO 5000:\n    source: \"[DSP] x\"\n  RTX PRO 6000:\n",
     r"products\.RTX PRO 5000: a product entry with no figures of its own"),
    ("  RTX PRO 6000:\n", "  RTX 5090:\n    sm_count: 168\n    source: \"[DS] x\"\n  RTX PRO 6000:\n",
     r"products\.RTX 5090\.sm_count: the default product says 168, the architecture sections say 170"),
    ("      fp4: 2000\n", "      fp4: 2000\n      bf16: 500\n",
     r"products\.RTX PRO 6000\.dense_tflops\.bf16: no architecture peak for bf16 to differ from"),
    ("    hbm_gb: 96\n", "    hbm_gb: 96 GB\n", r"products\.RTX PRO 6000\.hbm_gb: expected a number"),
])
def test_bad_products_section_is_one_line(old, new, message):
    with pytest.raises(PorterError, match=message) as exc:
        arch_from_text(_edit(old, new), "rtx.yaml")
    assert "\n" not in str(exc.value) and re.match(r"rtx\.yaml:\d+: ", str(exc.value))


def test_default_product_needs_no_entry_of_its_own():
    # The sections describe the default: naming another default re-labels them, and the
    # product that was the default then has no figures of its own to select.
    arch = arch_from_text(_edit("  default: RTX 5090\n", "  default: RTX 5090 D\n"), "rtx.yaml")
    assert arch.product == "RTX 5090 D" and arch.product_names == ("RTX 5090 D", "RTX PRO 6000")
    assert arch.for_product("RTX 5090 D").sm_count == 170
    with pytest.raises(PorterError, match="no product 'RTX 5090'"):
        arch.for_product("RTX 5090")


@pytest.mark.slow
def test_target_with_product_reports_it(tmp_path):
    from porter.pipeline import RunOptions, run_target

    out = tmp_path / "pro"
    result = run_target(RunOptions(arch="rtx-blackwell", product="RTX PRO 6000", kernel="megakernel", out=out,
                                   emulate="off", device="off"))
    assert result.product == "RTX PRO 6000"
    md = next(out.glob("report*.md")).read_text()
    assert md.startswith("# Bring-up report: rtx-blackwell (sm_120a, RTX PRO 6000)")
    assert "188 queues" in md or "188" in md


def test_bench_takes_the_product_too(capsys):
    # The roofline a benchmark is measured against follows the product on the bench.
    assert main(["bench", "hopper", "--kernel", "gemm.bf16", "--product", "H100"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no product 'H100'" in err[0] and "H100 SXM" in err[0]
