"""SASS evidence lives in the descriptors only (issue #13 item 1).

Kernels and probes name spellings (``Arch.sass_patterns`` refs); the opcodes themselves
are in ``arch/*.yaml``. A grep finds no opcode spelled in ``porter/kernels/`` or in a
probe header, and a sibling target whose disassembly spells a feature differently
(sm_103a prints NVFP4's scale_vec::4X as ``.BLOCK16``, sm_100a as ``.4X``) is added by
editing YAML alone.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from porter import paths
from porter.descriptor.arch import arch_from_text, list_archs, load_arch
from porter.cli import main
from porter.errors import PorterError
from porter.kernels import gemm
from porter.kernels.build import build_kernel
from porter.levels import Level
from porter.descriptor.probes import check_arch, discover

ROOT = Path(__file__).resolve().parent.parent
BLACKWELL_TEXT = (paths.data_dir("arch") / "blackwell.yaml").read_text()
_OPCODE = re.compile(r"[A-Z][A-Z0-9_]{2,}(?![\[A-Za-z0-9_])")


def _vocabulary() -> tuple[set[str], set[str]]:
    """Every opcode head and modifier word the shipped descriptors spell: the first word
    of each pattern (and of each alternative), and the dotted words of each modifier
    fragment (found in text only as ``.WORD``: ``scale_vec::4X`` is PTX, ``.4X`` SASS)."""
    words: set[str] = set()
    modifiers: set[str] = set()
    for name in list_archs():
        arch = load_arch(name)
        patterns = [p for pats in arch.sass_signatures.values() for p in pats]
        patterns += [p for pats in arch.tensor_core.kind_sass.values() for p in pats]
        patterns += [p for pats in arch.sass_ops.values() for p in pats]
        for pattern in patterns:
            for alt in re.split(r"\|", pattern):
                head = _OPCODE.match(alt.lstrip("^(?:"))   # not a prefix before a class (UTC[A-Z]MMA)
                if head:
                    words.add(head.group(0))
        for frag in arch.sass_modifiers.values():
            modifiers.update(w for w in re.findall(r"\\\.([A-Z0-9][A-Z0-9_]+)", frag) if w != "128")
    return words, modifiers


OPCODES, MODIFIERS = _vocabulary()
VOCABULARY = OPCODES | MODIFIERS


def _literal_hits(text: str) -> list[str]:
    hits = [w for w in OPCODES if re.search(rf"(?<![A-Za-z0-9_]){re.escape(w)}(?![A-Za-z0-9_])", text)]
    return hits + [w for w in MODIFIERS if re.search(rf"\.{re.escape(w)}(?![A-Za-z0-9_])", text)]


def _strings(path: Path, docstrings: bool = True):
    """Every string constant of a module, f-string parts included (docstrings optional)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = set()
    if not docstrings:
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                    and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
                skip.add(id(body[0].value))
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            yield node.lineno, node.value


def test_vocabulary_is_real():
    # The grep below is only as good as its word list: it holds the tensor-core, TMEM,
    # TMA and spill opcodes and the modifiers, read from the YAML.
    assert {"HGMMA", "UTCHMMA", "UTCOMMA", "UTCBAR", "LDTM", "UTMALDG", "SYNCS", "HMMA", "QMMA",
            "OMMA", "LDGSTS", "STL", "MUFU", "2CTA", "4X", "MULTICAST"} <= VOCABULARY


def test_no_sass_literal_in_porter():
    # Every string porter's Python matches or prints (docstrings, which document what
    # nvdisasm shows, aside): the kernels' rules, the probes' judge, the schema's hints.
    hits = []
    for path in sorted((ROOT / "porter").rglob("*.py")):
        for lineno, text in _strings(path, docstrings=False):
            for word in _literal_hits(text):
                hits.append(f"{path.relative_to(ROOT)}:{lineno}: {word} in {text[:60]!r}")
    assert not hits, "SASS spelled in Python instead of arch/*.yaml:\n" + "\n".join(hits)


def test_no_sass_literal_in_probe_headers():
    hits = []
    for probe in discover():
        header = _header(probe.path)
        for word in _literal_hits(header):
            hits.append(f"{probe.path.name}: {word}")
        assert not re.search(r"^// (sass|sass-line):", header, re.M), probe.name
    assert not hits, "SASS spelled in a probe header instead of arch/*.yaml:\n" + "\n".join(hits)


def _header(path: Path) -> str:
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if not line.startswith("//"):
            break
        lines.append(line)
    return "\n".join(lines)


def test_no_sass_literal_in_kernel_modules_at_all():
    # porter/kernels/ holds none even in docstrings.
    hits = [f"{p.name}:{n}: {w}" for p in sorted((ROOT / "porter" / "kernels").glob("*.py"))
            for n, text in _strings(p) for w in _literal_hits(text)]
    assert not hits, hits


def test_the_grep_catches_a_literal(tmp_path):
    # The check can fail: a planted opcode in a string is found.
    planted = tmp_path / "planted.py"
    planted.write_text('RULE = ("UTCBAR", "commit")\nOK = "tcgen05.commit"\n')
    found = [(n, w) for n, text in _strings(planted) for w in _literal_hits(text)]
    assert found == [(1, "UTCBAR")]


def test_every_probe_spelling_is_spelled_by_a_descriptor_that_can_run_it():
    archs = [load_arch(n) for n in list_archs()]
    for probe in discover():
        able = [a for a in archs if all(a.has(f) for f in probe.needs)
                and probe.generation in ("", a.tensor_core.generation)]
        for ref in probe.shows:
            spelled = []
            for arch in able:
                try:
                    spelled.append(arch.sass_patterns(ref))
                except PorterError:
                    pass
            assert spelled or not able, (probe.name, ref, [a.name for a in able])


def test_refs_compose_and_fail_by_key():
    arch = load_arch("blackwell")
    (pair,) = arch.sass_patterns("kind:f16/pair")
    assert re.match(pair, "UTCHMMA.2CTA") and not re.match(pair, "UTCHMMA")
    (single,) = arch.sass_patterns("kind:f16/!pair")
    assert re.match(single, "UTCHMMA") and not re.match(single, "UTCHMMA.2CTA")
    (commit,) = arch.sass_patterns("op:mma_commit/pair/multicast")
    assert re.match(commit, "UTCBAR.2CTA.MULTICAST") and not re.match(commit, "UTCBAR.2CTA")
    hopper = load_arch("hopper")
    (shape,) = hopper.sass_patterns("kind:f16/shape", m=64, n=128, k=16, a="BF16")
    assert re.match(shape, "HGMMA.64x128x16.F32.BF16") and not re.match(shape, "HGMMA.64x256x16.F32.BF16")
    with pytest.raises(PorterError, match=r"hopper\.yaml: sass_modifiers\.pair: no SASS spelling"):
        hopper.sass_patterns("kind:f16/pair")
    with pytest.raises(PorterError, match=r"sass_ops\.tmem_load: no SASS spelling for 'op:tmem_load'"):
        hopper.sass_patterns("op:tmem_load")
    with pytest.raises(PorterError, match=r"the fragment needs .* filled in"):
        hopper.sass_patterns("kind:f16/shape")


# -- a sibling target, spelled differently, by YAML edits alone ----------------------------


def _sibling_text(scale_vec_4x: str) -> str:
    """blackwell.yaml retargeted to sm_103a (B300-class): kind::i8 does not exist there
    ([CUT]), and nvdisasm prints scale_vec::4X as ``scale_vec_4x``. Text edits only."""
    text = BLACKWELL_TEXT
    edits = [
        ("name: blackwell\n", "name: blackwell-sibling\n"),
        ("  target: sm_100a\n", "  target: sm_103a\n"),
        ('  min_ptx: "8.6"\n', '  min_ptx: "8.8"\n'),
        ('  min_cuda: "12.8"\n', '  min_cuda: "12.9"\n'),
        ("  elements: [bf16, f16, tf32, e4m3, e5m2, e2m3, e3m2, e2m1, s8, u8]\n",
         "  elements: [bf16, f16, tf32, e4m3, e5m2, e2m3, e3m2, e2m1]\n"),
        ("  scale_vec_4x: '\\.4X'\n", f"  scale_vec_4x: '{scale_vec_4x}'\n"),
        ("  block_scale_nvfp4: ['^UTCOMMA\\S*\\.4X']\n", f"  block_scale_nvfp4: ['^UTCOMMA\\S*{scale_vec_4x}']\n"),
    ]
    for old, new in edits:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    text, count = re.subn(r"    i8:\n(?:      .*\n)+?(?=    mxf8f6f4:)", "", text)
    assert count == 1
    # the timing model's rate for the kind goes with it (perf: names only kinds the arch has)
    text, count = re.subn(r"(mma_flop_per_clk_per_sm: \{[^}\n]*?), i8: \d+", r"\1", text)
    assert count == 1
    return text


@pytest.fixture(scope="module")
def sibling(tmp_path_factory):
    path = tmp_path_factory.mktemp("sibling") / "blackwell-sibling.yaml"
    path.write_text(_sibling_text("\\.BLOCK16"))
    return path


def test_sibling_arch_check_agrees(sibling, capsys):
    assert main(["arch", "check", str(sibling)]) == 0
    out = capsys.readouterr().out
    assert "blackwell-sibling (sm_103a)" in out and "AGREES" in out.splitlines()[-1]
    r = {p.probe: p for p in check_arch(load_arch(sibling)).probes}
    assert r["tcgen05_mxf4nvf4"].sass_found["kind:mxf4nvf4/scale_vec_4x"] == ["UTCOMMA.BLOCK16"]


def test_sibling_kernels_build_on_the_yaml_spelling(sibling):
    arch = load_arch(sibling)
    spec = gemm.make_spec(arch, "nvfp4", False)
    assert any("BLOCK16" in r.pattern for r in spec.sass_required)
    assert not any("4X" in r.pattern for r in spec.sass_required)
    build = build_kernel(spec, arch)
    failed = [c.name for c in build.checks if not c.passed]
    assert build.level >= Level.SASS_CHECKED, failed
    bf16 = build_kernel(gemm.make_spec(arch, "bf16", True), arch)
    assert bf16.level >= Level.SASS_CHECKED, [c.name for c in bf16.checks if not c.passed]


def test_the_wrong_spelling_is_caught_on_the_sibling(tmp_path, capsys):
    # blackwell.yaml's own spelling (.4X) on sm_103a: the probe and the kernel disagree.
    path = tmp_path / "blackwell-sibling.yaml"
    path.write_text(_sibling_text("\\.4X"))
    assert main(["arch", "check", str(path)]) == 1
    assert "kind:mxf4nvf4/scale_vec_4x" in capsys.readouterr().out
    arch = arch_from_text(path.read_text(), path)
    build = build_kernel(gemm.make_spec(arch, "nvfp4", False), arch)
    assert build.level < Level.SASS_CHECKED
    assert any("4X" in c.name and not c.passed for c in build.checks)
