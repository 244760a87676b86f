"""Source diffs labelled by feature: origin tracking through the template loader."""

from __future__ import annotations

import jinja2
import pytest

from porter.descriptor.arch import load_arch
from porter.planning.srcdiff import label_of, labelled_diff, mark_template, render_with_origins, split_marked

import test_pipeline_support as fam


class _Arch:
    def __init__(self, feats):
        self.feats = set(feats)

    def has(self, f):
        return f in self.feats


def _env():
    return jinja2.Environment(trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


TEMPLATE = """\
head
{% if arch.has("tmem") %}
tmem line
  {% if extra %}
  nested plain if
  {% endif %}
{% elif arch.has("wgmma") %}
wgmma line
{% else %}
neither
{% endif %}
x {% if arch.has("fp4") %}inline{% endif %}
tail
"""


@pytest.mark.parametrize("feats, expect", [
    ({"tmem"}, {"tmem line": "tmem", "  nested plain if": "tmem"}),
    ({"wgmma"}, {"wgmma line": "wgmma"}),
    (set(), {"neither": "tmem+wgmma"}),
])
def test_marking_keeps_text_and_labels_branches(feats, expect):
    arch = _Arch(feats)
    plain = _env().from_string(TEMPLATE).render(arch=arch, extra=True)
    marked = _env().from_string(mark_template(TEMPLATE)).render(arch=arch, extra=True)
    lines, origins = split_marked(marked)
    assert lines == plain.splitlines()
    got = {l: label_of(o) for l, o in zip(lines, origins)}
    for line, label in expect.items():
        assert got[line] == label
    assert got["head"] == "template" and label_of(origins[-1]) == "template"


@pytest.fixture()
def fake(monkeypatch, tmp_path):
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    return fam


def test_hopper_to_blackwell_hunks_carry_their_feature(fake):
    hop, bw = load_arch("hopper"), load_arch("blackwell")
    spec_h = next(s for s in fam.variants(hop) if s.name == "fake.axpy")
    spec_b = next(s for s in fam.variants(bw) if s.name == "fake.axpy")
    a, b = render_with_origins(fam, spec_h, hop), render_with_origins(fam, spec_b, bw)
    assert a.origins is not None and b.origins is not None, (a.note, b.note)
    hunks = labelled_diff(a, b, "hopper", "blackwell", context=0)
    labels = [set(h.labels) for h in hunks]
    # the included tmem primitive, attributed to its folder's feature
    assert any(any(l.startswith("tmem (tmem/fake_scale.cuh)") for l in ls) for ls in labels)
    # the arch.has("tmem") branch in the kernel body
    body = next(h for h in hunks if any("fake_scale(a) * x[i]" in line for line in h.lines))
    assert body.labels == ["tmem"]
    # the block size comes from the config, which no feature decides
    cfg = next(h for h in hunks if any("// block" in line for line in h.lines))
    assert cfg.labels == ["template"]


def test_cli_diff_text_and_html(fake, tmp_path, capsys):
    from porter.cli import main

    page = tmp_path / "diff.html"
    assert main(["diff", "hopper", "blackwell", "--kernel", "fake.*", "--html", str(page), "--full"]) == 0
    out = capsys.readouterr().out
    assert "[feature: tmem (tmem/fake_scale.cuh), tmem, template]" in out
    assert "unsupported on hopper: needs fp4" in out
    assert "FFMA" in out                       # opcode histogram side by side
    assert "registers" in out                  # resources side by side
    html = page.read_text()
    assert "<script" not in html and "class='feat'>tmem</span>" in html
