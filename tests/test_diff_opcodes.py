"""``porter diff``: the tensor-core opcodes are always in the SASS table, a side without
SASS reads "-", and ``--kernel NAME`` selects that kernel only."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.commands.diff import histogram_rows, kernel_diff, opcode_mark, pair_kernels


def test_signature_rows_come_first_and_are_never_cut():
    a = {f"OP{i}": 100 + i for i in range(50)} | {"HGMMA": 4}
    b = {f"OP{i}": 1 for i in range(50)} | {"UTCHMMA": 4}
    rows = histogram_rows(a, b, {"HGMMA", "UTCHMMA"}, top=5)
    assert [r[0] for r in rows[:2]] == ["HGMMA", "UTCHMMA"]      # small counts, still first
    assert len(rows) == 7                                        # 2 signature + top 5 others
    assert rows[2][0] == "OP49"                                  # others: biggest change first
    assert opcode_mark(4, 0) == "gone" and opcode_mark(0, 4) == "new" and opcode_mark(3, 3) == ""


def test_side_without_sass_is_none_not_zero():
    rows = histogram_rows(None, {"UTCOMMA": 4, "IMAD": 9}, {"UTCOMMA"})
    assert rows == [("UTCOMMA", None, 4), ("IMAD", None, 9)]
    assert opcode_mark(None, 4) == ""                            # not "new": nothing to compare


@pytest.fixture(scope="module")
def archs():
    return load_arch("hopper"), load_arch("blackwell")


def test_exact_kernel_name_selects_that_kernel_only(archs):
    hop, bw = archs
    assert [k for k, _, _ in pair_kernels(hop, bw, "gemm.nvfp4")] == ["gemm.nvfp4"]
    assert [k for k, _, _ in pair_kernels(hop, bw, "gemm.bf16")] == ["gemm.bf16"]
    assert {k for k, _, _ in pair_kernels(hop, bw, "gemm.nvfp4*")} == {"gemm.nvfp4", "gemm.nvfp4.pair"}
    # a variant name selects all of its forms; a CTA-pair form hopper does not offer is
    # listed there as unsupported (with what it lacks), not as a missing kernel
    pairs = {k: (x, y) for k, x, y in pair_kernels(hop, bw, "attention.bf16.hd128")}
    assert set(pairs) == {"attention.hd128", "attention.hd128.pair"}
    on_hopper = pairs["attention.hd128.pair"][0]
    assert on_hopper is not None and "cta_pair" in on_hopper.missing


@pytest.fixture(scope="module")
def gemm_diffs(archs):
    hop, bw = archs
    out = {}
    for name in ("gemm.bf16", "gemm.nvfp4"):
        (_, sa, sb), = pair_kernels(hop, bw, name)
        out[name] = kernel_diff(hop, bw, sa, sb)
    return out


def _rows(d):
    return {op: (x, y) for op, x, y in histogram_rows(d["histogram"].get("a"), d["histogram"].get("b"),
                                                      set(d["signature_opcodes"]), top=30)}


def test_bf16_shows_wgmma_gone_and_tcgen05_new(gemm_diffs):
    rows = _rows(gemm_diffs["gemm.bf16"])
    assert rows["HGMMA"][0] > 0 and rows["HGMMA"][1] == 0
    assert rows["UTCHMMA"][0] == 0 and rows["UTCHMMA"][1] > 0
    assert {"HGMMA", "UTCHMMA", "LDTM", "UTCBAR"} <= set(gemm_diffs["gemm.bf16"]["signature_opcodes"])


def test_nvfp4_unsupported_on_hopper_shows_dashes_and_its_mma(gemm_diffs):
    d = gemm_diffs["gemm.nvfp4"]
    assert "a" not in d["histogram"]
    rows = _rows(d)
    for op in ("UTCOMMA", "UTCBAR", "LDTM"):
        assert rows[op][0] is None and rows[op][1] > 0, op
    assert all(x is None for x, _ in rows.values())


def test_cli_table_lists_signatures_and_dashes(capsys):
    from porter.cli import main

    assert main(["diff", "hopper", "blackwell", "--kernel", "gemm.nvfp4", "--full"]) == 0
    out = capsys.readouterr().out
    table = out.split("SASS opcodes", 1)[1]
    for op in ("* UTCOMMA", "* UTCBAR", "* LDTM"):
        assert op in table, op
    assert "─ gemm.nvfp4.pair ─" not in out
    line = next(l for l in table.splitlines() if "* UTCOMMA" in l)
    assert " - " in line and " 0 " not in line


def test_html_page_lists_signatures_dashes_and_kind_renames(archs, gemm_diffs):
    from porter.descriptor.archdiff import diff_archs
    from porter.report.diff_html import render_diff_html

    hop, bw = archs
    page = render_diff_html(hop, bw, diff_archs(hop, bw).to_dict(), list(gemm_diffs.items()))
    assert "f8 → f8f6f4" in page and "e4m3, e5m2 kept; gains e2m3, e3m2, e2m1" in page
    assert "<td>* HGMMA gone</td>" in page and "<td>* UTCHMMA new</td>" in page
    assert "<tr><td>* UTCOMMA</td><td>-</td>" in page


def test_resources_level_says_it_is_the_build_level(gemm_diffs):
    """diff runs no numerics model: its level row must not read as the report's level."""
    from porter.commands.diff import BUILD_LEVEL

    res = gemm_diffs["gemm.bf16"]["resources"]
    assert BUILD_LEVEL == "build level (this command runs no numerics)"
    assert res["a"][BUILD_LEVEL] == res["b"][BUILD_LEVEL] == "sass-checked" and "level" not in res["b"]
