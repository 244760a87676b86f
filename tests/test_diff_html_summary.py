"""`porter diff --html` opens with a summary table, one row per kernel, each linking to that
kernel's section (issue 20 item 2: the hopper -> blackwell page is 550 KB of hunks)."""

from __future__ import annotations

import re

import pytest

from porter.cli import main
from porter.descriptor.arch import load_arch
from porter.planning.srcdiff import Hunk
from porter.report.diff_html import render_diff_html, section_ids

import test_pipeline_support as fam


def _diff(hunks=(), notes=(), hist=None, res=None, sig=()):
    return {"a": "k", "b": "k", "hunks": list(hunks), "notes": list(notes), "histogram": hist or {},
            "resources": res or {}, "signature_opcodes": list(sig)}


def _links_and_sections(html: str) -> tuple[list[str], list[str]]:
    head = html[:html.index("<h2>Features</h2>")]
    links = re.findall(r"<a href='#([^']+)'>", head)
    sections = re.findall(r"<h2 id='(k-[^']+)'>", html)
    return links, sections


def test_page_opens_with_a_summary_row_per_kernel_linking_to_its_section():
    a, b = load_arch("hopper"), load_arch("blackwell")
    results = [
        ("gemm.bf16", _diff([Hunk("@@ -1 +1 @@", ["-wgmma", "+tcgen05", "+x"], ["tcgen05 (gemm/t.cu.j2)"])],
                            hist={"a": {"HGMMA": 4}, "b": {"UTCHMMA": 2}}, sig=["HGMMA", "UTCHMMA"],
                            res={"a": {"registers": 168}, "b": {"registers": 90}})),
        ("gemm.nvfp4", _diff(notes=["unsupported on hopper: needs fp4"])),
        ("gemm.bf16 -> gemm.bf16.pair", _diff()),
    ]
    html = render_diff_html(a, b, {"features": {}}, results)
    body = html[html.index("<body>"):]
    assert body.index("<h2 id='summary'>") < body.index("<h2>Features</h2>")   # the first section
    links, sections = _links_and_sections(html)
    assert links == sections and len(set(links)) == 3
    row = re.search(r"<tr><td><a href='#k-gemm.bf16'>gemm.bf16</a></td>(.*?)</tr>", html).group(1)
    assert "<td>1</td><td>+2 -1</td><td>tcgen05 (1)</td><td>+UTCHMMA, -HGMMA</td><td>168 -&gt; 90</td>" in row
    assert "unsupported on hopper" in html[:html.index("<h2>Features</h2>")]
    # every section links back to the summary
    assert html.count("href='#summary'") == 3


def test_section_ids_are_unique_and_fragment_safe():
    ids = section_ids(["gemm.bf16 -> gemm.bf16.pair", "gemm.bf16 -> gemm.bf16.pair", "a/b c", ""])
    assert ids == ["k-gemm.bf16-gemm.bf16.pair", "k-gemm.bf16-gemm.bf16.pair-2", "k-a-b-c", "k-kernel"]
    assert all(re.fullmatch(r"[A-Za-z0-9_.-]+", i) for i in ids)


@pytest.fixture()
def fake(monkeypatch, tmp_path):
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    return fam


def test_cli_html_page_has_the_summary(fake, tmp_path, capsys):
    page = tmp_path / "diff.html"
    assert main(["diff", "hopper", "blackwell", "--kernel", "fake.*", "--html", str(page), "--no-build"]) == 0
    capsys.readouterr()
    links, sections = _links_and_sections(page.read_text())
    assert links == sections and "k-fake.axpy" in links and len(links) >= 2
