"""Descriptor values that used to pass every check (issue 20 item 4): a 200,000-character SASS
pattern (printed 16.7 MB), text of any length, and an MMA shape the generation's ISA has not
(m: 7). Each is now one line naming the key."""

from __future__ import annotations

import re

import pytest

from porter import paths
from porter.cli import main
from porter.descriptor.arch import arch_from_text
from porter.errors import PorterError

HOPPER = (paths.data_dir("arch") / "hopper.yaml").read_text()
BLACKWELL = (paths.data_dir("arch") / "blackwell.yaml").read_text()
AMPERE = (paths.data_dir("arch") / "ampere.yaml").read_text()


def _edit(text: str, old: str, new: str) -> str:
    assert text.count(old) >= 1, old
    return text.replace(old, new, 1)


def _error(text: str) -> str:
    with pytest.raises(PorterError) as info:
        arch_from_text(text, "d.yaml")
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 1000 and re.match(r"d\.yaml:\d+: ", msg), msg
    return msg


def test_a_huge_sass_pattern_is_refused_in_one_short_line(tmp_path, capsys):
    text = _edit(HOPPER, 'wgmma: ["HGMMA"', 'wgmma: ["^HGMMA' + "A" * 200_000 + '", "HGMMA"')
    msg = _error(text)
    assert "sass_signatures.wgmma[0]: pattern of 200,006 characters" in msg and "at most 160" in msg
    path = tmp_path / "long.yaml"
    path.write_text(text)
    assert main(["arch", "show", str(path)]) == 2
    out, err = capsys.readouterr()
    assert out == "" and len(err) < 1000


def test_a_huge_modifier_and_text_are_refused():
    assert "pattern of" in _error(_edit(BLACKWELL, "  pair: ", "  pair: " + "X" * 500 + "|"))
    long_summary = 'summary: "' + "word " * 1000 + '"'
    msg = _error(re.sub(r"^summary: .*$", long_summary, HOPPER, count=1, flags=re.M))
    assert "summary: text of 5,000 characters (at most 4,000)" in msg


@pytest.mark.parametrize("text, old, new, key, why", [
    (HOPPER, "{m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}",
     "{m: 7, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}",
     "shapes[0].m", "m 7 with cta_group 1 is not a wgmma shape (the PTX ISA allows m64 (cta_group 1))"),
    (HOPPER, "{m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}",
     "{m: 64, n_min: 8, n_max: 512, n_step: 8, cta_group: 1}", "shapes[0].n_min", "8 to 256"),
    (BLACKWELL, "{m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}",
     "{m: 256, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}", "shapes[0].m",
     "m 256 with cta_group 1 is not a tcgen05 shape"),
    (AMPERE, "{m: 16, n_min: 8, n_max: 8, n_step: 8, cta_group: 1}",
     "{m: 16, n_min: 8, n_max: 16, n_step: 8, cta_group: 1}", "shapes[0].n_min", "8 to 8"),
    (AMPERE, "      k: 16\n", "      k: 12\n", "f16.k", "k 12 is not a mma_sync K"),
])
def test_mma_shapes_outside_the_isa_are_refused(text, old, new, key, why):
    msg = _error(_edit(text, old, new))
    assert f"tensor_core.kinds." in msg and key in msg and why in msg


def test_shipped_descriptors_are_inside_the_isa():
    for name in ("ampere", "hopper", "blackwell", "rtx-blackwell"):
        arch_from_text((paths.data_dir("arch") / f"{name}.yaml").read_text(), f"{name}.yaml")
