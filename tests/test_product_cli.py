"""`--product` for every product a descriptor names (issue 20 item 7): the descriptor's default,
products with figures of their own, and products that share the descriptor's one set of figures
(blackwell: B200 and GB200). The terminal's `next:` line names the product run and carries it."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from porter.cli import main
from porter.commands.target import verdict_lines
from porter.descriptor.arch import load_arch
from porter.pipeline.runner import RunOptions, default_out_name, resolve


@pytest.mark.parametrize("name", ["ampere", "hopper", "blackwell", "rtx-blackwell"])
def test_every_named_product_is_accepted(name):
    arch = load_arch(name)
    for product in set(arch.product_names) | set(arch.products):
        if arch.products_figures and product not in arch.products_figures:
            continue   # a products section lists the products with figures; identity.products may repeat one
        chosen = arch.for_product(product)
        assert chosen.product == product and chosen.target == arch.target


def test_products_sharing_one_set_of_figures():
    bw = load_arch("blackwell")
    b200, gb200 = bw.for_product("B200"), bw.for_product("GB200")
    for p in (b200, gb200):   # same figures, own name and own cache key
        assert (p.sm_count, p.hbm_bytes, p.peak_tflops) == (bw.sm_count, bw.hbm_bytes, bw.peak_tflops)
    assert len({bw.digest, b200.digest, gb200.digest}) == 3
    assert default_out_name(b200) == "blackwell-b200"
    arch, _, _ = resolve(RunOptions(arch="blackwell", product="GB200"))
    assert arch.product == "GB200"


def test_cli_target_accepts_b200_and_rejects_a_typo(capsys):
    # resolve() runs before any stage: a typo fails in one line, a listed product gets past it.
    assert main(["target", "blackwell", "--product", "B300", "-q", "--out", "/nonexistent/x"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no product 'B300'; did you mean 'B200'?" in err[0]


def _result(**kw):
    base = dict(arch="blackwell", arch_arg="blackwell", products=("B200", "GB200"), out_dir="/tmp/x", product="")
    base.update(kw)
    return SimpleNamespace(**base)


OK = [{"name": "k1", "level": "emulated", "checks_failed": []}]


def test_next_line_names_the_product_run_and_carries_it():
    dev = SimpleNamespace(status="not-run", data={})
    line = verdict_lines(_result(product="B200"), OK, [], dev)[-1]
    assert line.startswith("next: on a machine with a B200,")
    assert "`porter target blackwell --product B200 --device on`" in line
    line = verdict_lines(_result(arch="hopper", arch_arg="hopper", product="H100 SXM"), OK, [], dev)[-1]
    assert "an H100 SXM" in line and "--product 'H100 SXM' --device on" in line
    # No product chosen and none with figures: every listed product, no --product.
    line = verdict_lines(_result(), OK, [], dev)[-1]
    assert "one of B200, GB200, run `porter target blackwell --device on`" in line


def test_next_line_without_a_gpu_names_the_product():
    dev = SimpleNamespace(status="failed", data={"no_device": True, "why": "no CUDA driver"})
    line = verdict_lines(_result(product="GB200"), OK, [], dev)[-1]
    assert line == "next: device validation needs a GB200; this machine has none (no CUDA driver)"
