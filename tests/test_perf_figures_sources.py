"""The standard behind every prediction (issue 16 item 1): a timing-model figure is either
sourced, with a source line of its own that names a document, or listed under
perf.uncertain with a [low, high] range that the prediction's range spans. A figure that
leaves perf.uncertain must bring a document with it, not only porter's own arithmetic."""

from __future__ import annotations

import re

import pytest

from porter.descriptor.arch import arch_from_text, load_arch
from porter.descriptor.arch_schema import check_descriptor, parse_yaml
from porter.errors import PorterError

ARCHS = ("ampere", "hopper", "blackwell", "rtx-blackwell")
# porter's own derivation: arithmetic over other figures, not a document
OWN_ARITHMETIC = {"DERIV"}
_REF = re.compile(r"\[([A-Z][A-Z0-9_]*)\]")


def _checked(text: str, path: str) -> dict:
    data, lines = parse_yaml(text, path)
    return check_descriptor(data, lines, path)


def _perf_sections(d: dict):
    """(dotted name, figures, their sources, their uncertain ranges) for the architecture's
    perf section and every product's own."""
    perf = d["perf"]
    yield "perf", perf, perf["source"], perf["uncertain"]
    for name, own in perf["products"].items():
        # a product's figures fall back on the architecture's ranges where it gives none
        yield f"products.{name}.perf", own, own["source"], {**perf["uncertain"], **own["uncertain"]}


def _figures(section: dict) -> list[str]:
    return [k for k in section if k not in ("source", "uncertain", "products", "notes")]


def _problems(d: dict) -> list[str]:
    out = []
    sources = d["sources"]
    for dotted, section, src, uncertain in _perf_sections(d):
        if isinstance(src, str):
            src = {"default": src}
        for key in _figures(section):
            ranged = key in uncertain or any(u.startswith(key + ".") for u in uncertain)
            if ranged:
                continue
            if key not in src:
                out.append(f"{dotted}.{key}: sourced figure with only the section's default source line")
                continue
            refs = set(_REF.findall(src[key]))
            documents = refs - OWN_ARITHMETIC
            if not documents:
                out.append(f"{dotted}.{key}: its source cites only porter's own arithmetic {sorted(refs)}")
            for ref in documents:
                if not str(sources.get(ref, "")).strip():
                    out.append(f"{dotted}.{key}: [{ref}] names no document under 'sources'")
        for key, (lo, hi) in uncertain.items():
            if not lo < hi:
                out.append(f"{dotted}.uncertain.{key}: [{lo:g}, {hi:g}] is a point; source it instead")
    return out


@pytest.mark.parametrize("name", ARCHS)
def test_every_figure_outside_the_ranges_names_a_document(name):
    arch = load_arch(name)
    d = _checked(arch.text, str(arch.path))
    assert d["perf"], f"{name}: no perf section"
    assert _problems(d) == []


def test_a_figure_moved_out_of_the_ranges_without_a_document_is_caught():
    arch = load_arch("hopper")
    d = _checked(arch.text, str(arch.path))
    assert "mbarrier_cycles" in d["perf"]["uncertain"]        # an estimate today, covered by the default line
    text = arch.text.replace("    mbarrier_cycles: [20, 80]\n", "", 1)
    assert text != arch.text
    problems = _problems(_checked(text, "x.yaml"))
    assert problems == ["perf.mbarrier_cycles: sourced figure with only the section's default source line"]
    # a source line of its own that is only porter's arithmetic does not count either
    text = text.replace("    launch_us: \"[HAZY]", "    mbarrier_cycles: \"[DERIV] 2 x 20\"\n    launch_us: \"[HAZY]", 1)
    assert _problems(_checked(text, "x.yaml")) == [
        "perf.mbarrier_cycles: its source cites only porter's own arithmetic ['DERIV']"]


def test_a_collapsed_range_is_caught_and_an_outside_one_refused():
    arch = load_arch("blackwell")
    text = arch.text.replace("    mbarrier_cycles: [20, 80]\n", "    mbarrier_cycles: [40, 40]\n", 1)
    assert text != arch.text
    assert _problems(_checked(text, "x.yaml")) == ["perf.uncertain.mbarrier_cycles: [40, 40] is a point; source it instead"]
    bad = arch.text.replace("    mbarrier_cycles: [20, 80]\n", "    mbarrier_cycles: [50, 80]\n", 1)
    with pytest.raises(PorterError, match=r"perf\.uncertain\.mbarrier_cycles: the range .* does not hold"):
        arch_from_text(bad, "x.yaml")
