"""`porter predict` puts the published figure beside a prediction where one exists for
that product, kernel and shape (issue 16: "the anchor beside it ... with its source"),
in the table and as the JSON key `anchor`; elsewhere `anchor` is null."""

from __future__ import annotations

import json

from porter.cli import main


def _json(capsys, *argv):
    assert main(["predict", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_a_published_shape_carries_its_anchor_and_source(capsys):
    (row,) = _json(capsys, "hopper", "--kernel", "gemm.bf16", "--product", "H200 SXM", "--shapes", "8192x8192x8192")
    a = row["anchor"]
    assert a["tflops"] == 788.0 and "cuBLAS" in a["what"]
    assert abs(a["error"] - (row["tflops"] / 788.0 - 1)) < 1e-3


def test_a_shape_nobody_published_has_none(capsys):
    (row,) = _json(capsys, "hopper", "--kernel", "gemm.bf16", "--product", "H200 SXM", "--shapes", "4096x4096x4096")
    assert row["anchor"] is None


def test_the_table_names_the_anchor_as_published_not_predicted(capsys):
    assert main(["predict", "blackwell", "--kernel", "gemm.bf16.pair", "--product", "B200",
                 "--shapes", "4096x4096x4096"]) == 0
    out = capsys.readouterr().out
    assert "published 1540 TFLOP/s" in out and "ThunderKittens" in out
    assert "measured by others; the prediction beside it is not" in out
