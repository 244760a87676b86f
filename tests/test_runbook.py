"""Runbooks: the shipped ones load; every class of mistake is one PorterError line naming
the file and the stage."""

from __future__ import annotations

import pytest

from porter.errors import PorterError
from porter.planning.runbook import STAGE_KINDS, list_runbooks, load_runbook, runbook_from_text

GOOD = """\
name: t
stages:
  - {id: a, title: A, day: 1, needs: [], kind: descriptor-check, proves: x}
  - {id: b, title: B, day: 2, needs: [a], kind: kernels, family: gemm, proves: y}
  - {id: c, title: C, day: 3, needs: [a, b], kind: report, proves: z}
"""


@pytest.mark.parametrize("name", ["blackwell-bringup", "generic-bringup"])
def test_shipped_runbooks_load_as_a_dag(name):
    book = load_runbook(name)
    assert name in list_runbooks()
    gens = book.generations()
    assert gens[0] == ["descriptor"]
    assert gens[-1] == ["report"]
    kinds = {s.kind for s in book.stages.values()}
    # every stage kind the pipeline knows is exercised by the shipped runbooks
    assert kinds == set(STAGE_KINDS)
    assert all(1 <= s.day <= 5 for s in book.stages.values())


def test_blackwell_runbook_names_hopper_and_all_families():
    book = load_runbook("blackwell-bringup")
    assert book.base == "hopper"
    fams = {s.family for s in book.stages.values() if s.kind == "kernels"}
    assert {"gemm", "attention", "megakernel", "*"} <= fams


def test_good_text_builds_graph_with_edges():
    book = runbook_from_text(GOOD, "t.yaml")
    g = book.graph()
    assert set(g.edges) == {("a", "b"), ("a", "c"), ("b", "c")}
    assert book.generations() == [["a"], ["b"], ["c"]]
    assert book.subset({"b"}).stages.keys() == {"a", "b"}


@pytest.mark.parametrize("text, words", [
    (GOOD.replace("kind: report", "kind: reprot"), ["t.yaml", "stage 'c'", "unknown stage kind 'reprot'", "did you mean 'report'"]),
    (GOOD.replace("needs: [a, b]", "needs: [a, bb]"), ["t.yaml", "stage 'c'", "unknown stage 'bb'", "did you mean 'b'"]),
    (GOOD.replace("needs: []", "needs: [c]"), ["t.yaml", "dependency cycle", "a -> b -> c -> a"]),
    (GOOD.replace("id: c,", "id: b,"), ["t.yaml", "stage 'b'", "duplicate id"]),
    (GOOD.replace("proves: y", "").replace(", }", "}"), ["t.yaml", "stage 'b'", "missing field proves"]),
    (GOOD.replace("day: 3", "day: 9"), ["t.yaml", "stage 'c'", "'day' must be 1..5"]),
    (GOOD.replace(", family: gemm", ""), ["t.yaml", "stage 'b'", "needs 'family'"]),
    ("stages: [\n", ["t.yaml", "not valid YAML"]),
    ("name: x\n", ["t.yaml", "non-empty 'stages'"]),
])
def test_each_mistake_is_one_clear_line(text, words):
    with pytest.raises(PorterError) as info:
        runbook_from_text(text, "t.yaml")
    message = str(info.value)
    assert "\n" not in message
    for w in words:
        assert w in message, (w, message)


def test_cycle_names_every_stage_in_it():
    text = GOOD.replace("needs: []", "needs: [b]")
    with pytest.raises(PorterError, match=r"cycle (a -> b -> a|b -> a -> b)"):
        runbook_from_text(text, "t.yaml")


def test_cli_bad_runbook_exits_2_with_one_line(tmp_path, capsys):
    from porter.cli import main

    bad = tmp_path / "bad.yaml"
    bad.write_text(GOOD.replace("kind: report", "kind: nope"))
    code = main(["target", "blackwell", "--runbook", str(bad), "--out", str(tmp_path / "o"), "-q"])
    err = capsys.readouterr().err.strip()
    assert code == 2
    assert len(err.splitlines()) == 1 and "bad.yaml" in err and "unknown stage kind 'nope'" in err
