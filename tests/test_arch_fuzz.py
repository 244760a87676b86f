"""Hypothesis: any descriptor text gives an Arch or a one-line PorterError, nothing else."""

from __future__ import annotations

import copy

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from porter import paths
from porter.descriptor.arch import Arch, arch_from_text
from porter.errors import PorterError

REAL = {p.stem: yaml.safe_load(p.read_text()) for p in sorted(paths.data_dir("arch").glob("*.yaml"))}

FAST = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])

scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**70), 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
    st.sampled_from(["sm_100a", "8.6", "tmem", "e2m1", "mx", "[DS] x", "UTC(", 0, 1, 2, 128, 256]),
)
values = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)), max_leaves=8)


def check(text: str) -> None:
    try:
        arch = arch_from_text(text, "fuzz.yaml")
    except PorterError as exc:
        msg = str(exc)
        assert msg.startswith("fuzz.yaml") and "\n" not in msg, msg
        return
    assert isinstance(arch, Arch)
    arch.to_dict()
    for feature in arch.features:
        assert arch.has(feature)


def _paths(node, prefix=()):
    """Every (container path, key) in a parsed descriptor."""
    if isinstance(node, dict):
        for k, v in node.items():
            yield prefix + (k,)
            yield from _paths(v, prefix + (k,))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            yield prefix + (i,)
            yield from _paths(v, prefix + (i,))


@st.composite
def mutated_descriptor(draw):
    doc = copy.deepcopy(REAL[draw(st.sampled_from(sorted(REAL)))])
    for _ in range(draw(st.integers(1, 3))):
        where = draw(st.sampled_from(list(_paths(doc))))
        parent = doc
        for step in where[:-1]:
            parent = parent[step]
        key = where[-1]
        action = draw(st.sampled_from(["replace", "delete", "add", "swap"]))
        if action == "replace":
            parent[key] = draw(values)
        elif action == "delete":
            del parent[key]
        elif action == "add" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=10))] = draw(values)
        elif action == "swap" and isinstance(parent[key], (int, float)) and not isinstance(parent[key], bool):
            parent[key] = draw(st.sampled_from([0, -1, 1, parent[key] * 1024, parent[key] / 3, str(parent[key])]))
        if where[:-1] and not _exists(doc, where[:-1]):
            break
    return yaml.safe_dump(doc, sort_keys=False, allow_unicode=True)


def _exists(doc, where) -> bool:
    node = doc
    for step in where:
        try:
            node = node[step]
        except (KeyError, IndexError, TypeError):
            return False
    return True


@FAST
@given(mutated_descriptor())
def test_mutated_real_descriptors(text):
    check(text)


@FAST
@given(st.text(max_size=200))
def test_random_text(text):
    check(text)


@FAST
@given(values)
def test_random_yaml_values(value):
    check(yaml.safe_dump(value))


@FAST
@given(st.sampled_from(sorted(REAL)), st.integers(0, 4000), st.integers(1, 40))
def test_truncated_and_spliced_text(name, cut, length):
    text = (paths.data_dir("arch") / f"{name}.yaml").read_text()
    check(text[:cut])
    check(text[:cut] + text[cut + length:])
