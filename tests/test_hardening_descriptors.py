"""Hostile descriptors (issue #11, items 1-7 and 10): each ends in one bounded, literal
PorterError line naming the key, never a hang, a crash, a traceback or raw terminal codes."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from porter import paths
from porter.descriptor.arch import arch_from_text, load_arch
from porter.descriptor.arch_schema import _show, regex_hazard
from porter.cli import main
from porter.errors import PorterError

ARCH_DIR = paths.data_dir("arch")
HOPPER = (ARCH_DIR / "hopper.yaml").read_text()
# The identity products line, whatever it lists (the descriptors change under other issues).
PRODUCTS = re.search(r"^  products: \[.*\]$", HOPPER, re.M).group(0).strip()
BLACKWELL = (ARCH_DIR / "blackwell.yaml").read_text()
REPO = Path(__file__).resolve().parent.parent


def write(tmp_path: Path, text: str, old: str, new: str, name: str = "bad.yaml") -> Path:
    assert text.count(old) >= 1, old
    path = tmp_path / name
    path.write_text(text.replace(old, new, 1))
    return path


def error_of(path: Path) -> str:
    with pytest.raises(PorterError) as info:
        load_arch(path)
    msg = str(info.value)
    assert "\n" not in msg and len(msg) < 1000
    return msg


def alias_bomb(levels: int = 9, fan: int = 9) -> str:
    """A YAML list of a few hundred bytes that expands to fan**levels values."""
    parts = ["&a0 [" + ",".join(["1"] * fan) + "]"]
    parts += [f"&a{i} [" + ",".join([f"*a{i - 1}"] * fan) + "]" for i in range(1, levels)]
    return "[" + ", ".join(parts) + "]"


# -- item 1: alias bombs --------------------------------------------------------------


@pytest.mark.parametrize("anchor", ["schema: 1", "name: hopper", "summary: \""])
def test_alias_bomb_is_refused_fast_in_a_fresh_process(tmp_path, anchor):
    new = {"schema: 1": "schema: ", "name: hopper": "name: ", "summary: \"": "summary: "}[anchor]
    text = HOPPER.replace(anchor, new + alias_bomb() + ("\nx_: \"" if anchor.startswith("summary") else ""), 1)
    path = tmp_path / "bomb.yaml"
    path.write_text(text)
    assert path.stat().st_size < len(HOPPER.encode()) + 2_000  # hopper.yaml plus a bomb of a few hundred bytes
    start = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "porter", "arch", "show", str(path)],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert time.monotonic() - start < 30
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    assert "alias" in proc.stderr


def test_recursive_alias_is_refused(tmp_path):
    msg = error_of(write(tmp_path, HOPPER, "schema: 1", "schema: &r [*r]"))
    assert "refers to itself" in msg


def test_modest_aliases_still_load(tmp_path):
    # An alias used once is fine: only expansion past the budget is refused.
    text = HOPPER.replace(PRODUCTS, PRODUCTS.replace("products: ", "products: &p "), 1)
    lines = text.splitlines(keepends=True)
    notes = next(i for i, line in enumerate(lines) if line.startswith("  notes: "))
    lines[notes] = "  notes: *p\n"
    with pytest.raises(PorterError, match="tensor_core.notes: expected text, got list"):
        load_arch(write(tmp_path, "".join(lines), "x", "x"))
    lines[notes] = "  notes: &n \"plain notes\"\n"
    text = "".join(lines).replace("summary: \"", "summary: \"", 1)
    assert load_arch(write(tmp_path, text, "x", "x")).products == load_arch(ARCH_DIR / "hopper.yaml").products


def test_show_is_bounded_for_huge_and_cyclic_values():
    value: list = [1] * 10
    for _ in range(40):
        value = [value] * 10  # 10**41 leaves if expanded
    start = time.monotonic()
    text = _show(value)
    cyclic: list = []
    cyclic.append(cyclic)
    assert len(_show(cyclic)) <= 60 and len(text) <= 60
    assert len(_show("x" * 10**6)) <= 60 and _show({"a": "b"}) == "{'a': 'b'}"
    assert time.monotonic() - start < 1


# -- item 3: catastrophic regexes --------------------------------------------------------


def test_backtracking_signature_is_refused_at_load(tmp_path):
    path = write(tmp_path, HOPPER, 'tma: ["UTMALDG", "UTMASTG"]', "tma: ['^(.|.)*ZZZ$']")
    msg = error_of(path)
    assert "sass_signatures.tma[0]" in msg and "backtracking" in msg


@pytest.mark.parametrize("pattern", [r"^(.|.)*ZZZ$", r"(a+)+$", r"(\S*)*X", r"(a)\1",
                                     r".*.*.*.*.*ZZZ", r"(?=U)UTC", r"(ab|cd)+e"])
def test_regex_hazards_are_named(pattern):
    assert regex_hazard(pattern)


@pytest.mark.parametrize("pattern", ["HGMMA", r"^UTC[A-Z]MMA\S*\.2CTA", r"^QMMA\.SF\.16832",
                                     r"^UTCOMMA\S*\.4X", r"(\.2CTA)?X", "UTMALDG|UTMASTG"])
def test_shipped_style_patterns_are_allowed(pattern):
    assert regex_hazard(pattern) is None


def test_every_shipped_signature_is_in_the_subset():
    for path in ARCH_DIR.glob("*.yaml"):
        arch = load_arch(path)
        for patterns in (*arch.sass_signatures.values(), *arch.tensor_core.kind_sass.values()):
            for pattern in patterns:
                assert regex_hazard(pattern) is None, (path.name, pattern)


# -- item 4: scientific notation --------------------------------------------------------


@pytest.mark.parametrize("spelling", ["2.25e3", "2.25E3", "2250e0", "22.5e+2", "225000e-2"])
def test_scientific_notation_is_a_number(tmp_path, spelling):
    arch = load_arch(write(tmp_path, BLACKWELL, "bf16: 2250", f"bf16: {spelling}"))
    assert arch.peak_tflops["bf16"] == 2250.0


def test_quoted_scientific_number_hint_keeps_the_exponent(tmp_path):
    msg = error_of(write(tmp_path, BLACKWELL, "bf16: 2250", 'bf16: "2.25e3 TFLOP/s"'))
    assert "write 'bf16: 2.25e3'" in msg


# -- item 7: control characters ------------------------------------------------------------


@pytest.mark.parametrize("char", ["\\e[31m", "\\0", "\\u202e", "\\n# heading\\n", "\\t", "\\x07"])
def test_control_characters_in_text_are_refused(tmp_path, char):
    path = write(tmp_path, HOPPER, 'summary: "', f'summary: "{char}')
    msg = error_of(path)
    assert "summary" in msg and "control character" in msg
    assert all(ch.isprintable() for ch in msg)


@pytest.mark.parametrize("old,new,key", [
    (PRODUCTS, 'products: [H100, "H200\\e[2J"]', "identity.products[1]"),
    ("instruction: wgmma.mma_async", 'instruction: "wgmma\\u202e"', "tensor_core.instruction"),
    ("[DS]", '[DS] \\e]8;;http://evil\\e\\\\', "source"),
])
def test_control_characters_are_refused_in_every_text_field(tmp_path, old, new, key):
    msg = error_of(write(tmp_path, HOPPER, old, new))
    assert key in msg and "control character" in msg


def test_sources_descriptions_are_checked(tmp_path):
    text = HOPPER.replace("sources:\n", 'sources:\n  ZZ: "bad\\e[0m"\n', 1)
    msg = error_of(write(tmp_path, text, "x", "x"))
    assert "sources.ZZ" in msg


# -- item 10: files that are not descriptors ---------------------------------------------


def test_text_file_contents_are_not_echoed(tmp_path):
    path = tmp_path / "notes.yaml"
    path.write_text("SECRET-TOKEN-1234 is not a descriptor\n")
    msg = error_of(path)
    assert "SECRET" not in msg and "mapping" in msg


def test_dev_null_and_fifo_are_not_file_not_found(tmp_path, capsys):
    fifo = tmp_path / "pipe.yaml"
    os.mkfifo(fifo)
    for target in ("/dev/null", str(fifo)):
        rc = main(["arch", "show", target])
        err = capsys.readouterr().err
        assert rc == 2 and "not found" not in err and "not a regular file" in err, err


# -- item 5: targets the installed NVRTC does not know ----------------------------------------


def test_unknown_target_fails_at_load_naming_the_supported_list(tmp_path):
    from porter.descriptor.arch import nvrtc_targets

    if nvrtc_targets() is None:
        pytest.skip("NVRTC is not installed: the target check needs its list of targets")
    path = write(tmp_path, BLACKWELL, "target: sm_100a", "target: sm_999a")
    msg = error_of(path)
    assert "identity.target" in msg and "sm_999a" in msg and "sm_100" in msg and "supported" in msg
    line = next(i for i, t in enumerate(path.read_text().splitlines(), 1) if "sm_999a" in t)
    assert f":{line}:" in msg


def test_unknown_target_is_exit_2_before_any_compile(tmp_path, capsys):
    from porter.descriptor.arch import nvrtc_targets

    if nvrtc_targets() is None:
        pytest.skip("NVRTC is not installed")
    path = write(tmp_path, BLACKWELL, "target: sm_100a", "target: sm_999a")
    rc = main(["target", str(path), "--out", str(tmp_path / "out"), "--quiet"])
    err = capsys.readouterr().err
    assert rc == 2 and "identity.target" in err and len(err.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()


# -- item 6: implausible limits ---------------------------------------------------------------


@pytest.mark.parametrize("old,new,key", [
    ("smem_per_sm_kib: 228\n  smem_per_block_kib: 227", "smem_per_sm_kib: 4096\n  smem_per_block_kib: 4096",
     "limits.smem_per_sm_kib"),
    ("smem_per_block_kib: 227", "smem_per_block_kib: 228", "limits.smem_per_block_kib"),
    ("max_threads_per_block: 1024", "max_threads_per_block: 2048", "limits.max_threads_per_block"),
    ("max_regs_per_thread: 255", "max_regs_per_thread: 512", "limits.max_regs_per_thread"),
    ("max_portable: 8", "max_portable: 16", "cluster.max_portable"),
    ("max_nonportable: 16", "max_nonportable: 32", "cluster.max_nonportable"),
])
def test_figures_above_the_known_limit_are_refused(tmp_path, old, new, key):
    msg = error_of(write(tmp_path, BLACKWELL, old, new))
    assert key in msg and "arch_traits.h" in msg


def test_lower_figures_are_allowed_and_unknown_ccs_are_said_unchecked(tmp_path):
    from porter.descriptor.arch import limits_check, nvrtc_targets

    arch = load_arch(write(tmp_path, BLACKWELL, "smem_per_block_kib: 227", "smem_per_block_kib: 200"))
    assert arch.smem_per_block_bytes == 200 * 1024
    assert "within the known figures for compute capability 10.0" in limits_check(arch)
    if nvrtc_targets() is not None and 110 not in nvrtc_targets():
        pytest.skip("this NVRTC has no sm_110")
    # A compute capability porter has no table for loads, and says its limits are unchecked.
    other = load_arch(write(tmp_path, BLACKWELL, "target: sm_100a", "target: sm_110a", name="cc11.yaml"))
    assert "compute capability 11.0 has no known figures" in limits_check(other)


def test_arch_show_says_how_limits_were_checked(capsys):
    assert main(["arch", "show", "hopper"]) == 0
    out = capsys.readouterr().out
    assert "limits checked" in out and "compute capability 9.0" in out


def _fake(target: str, smem_bytes: int):
    from types import SimpleNamespace

    digits = target[3:].rstrip("af")
    return SimpleNamespace(target=target, smem_per_block_bytes=smem_bytes,
                           compute_capability=(int(digits[:-1]), int(digits[-1])))


@pytest.mark.parametrize("target,claimed,verdict", [
    ("sm_90a", 227 * 1024, "proved"),
    ("sm_90a", 228 * 1024, "contradicted"),
    ("sm_90a", 100 * 1024, "understated"),
    ("sm_120a", 99 * 1024, "proved"),
    ("sm_120a", 4096 * 1024, "contradicted"),
    ("sm_80", 163 * 1024, "not provable"),
])
def test_the_compiler_proves_shared_memory_per_block(target, claimed, verdict):
    from porter.commands.arch_check import prove_smem_per_block

    result = prove_smem_per_block(_fake(target, claimed))
    assert result["verdict"] == verdict, result
    assert result["ok"] == (verdict != "contradicted")
    assert result["figure"] == "limits.smem_per_block_kib" and result["detail"]


# -- item 9: same-named descriptors ---------------------------------------------------------


def test_a_copy_with_the_same_name_cannot_overwrite_anothers_build(tmp_path, monkeypatch):
    import json

    import test_pipeline_support as fam
    from porter.pipeline import RunOptions, run_target

    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    book = tmp_path / "fake.yaml"
    book.write_text(fam.RUNBOOK)
    out = tmp_path / "build" / "blackwell"
    first = run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1))
    assert first.exit_code == 0
    report = json.loads((out / "report.json").read_text())
    assert report["arch"]["path"] == str((ARCH_DIR / "blackwell.yaml").resolve())
    assert report["arch"]["digest"] and "sha256" in (out / "report.md").read_text()

    copy = tmp_path / "mine" / "blackwell.yaml"
    copy.parent.mkdir()
    copy.write_text(BLACKWELL.replace("sm_count: 148", "sm_count: 140"))
    with pytest.raises(PorterError) as info:
        run_target(RunOptions(str(copy), runbook=str(book), out=out, jobs=1))
    msg = str(info.value)
    assert str((ARCH_DIR / "blackwell.yaml").resolve()) in msg and str(copy.resolve()) in msg
    assert json.loads((out / "report.json").read_text())["arch"]["digest"] == report["arch"]["digest"]

    # A byte-identical copy builds the same thing and may share the folder.
    same = tmp_path / "same" / "blackwell.yaml"
    same.parent.mkdir()
    same.write_text(BLACKWELL)
    assert run_target(RunOptions(str(same), runbook=str(book), out=out, jobs=1)).exit_code == 0
    # The copy builds in its own folder, and the same file edited keeps its folder.
    other = tmp_path / "build" / "mine"
    assert run_target(RunOptions(str(copy), runbook=str(book), out=other, jobs=1)).exit_code == 0
    copy.write_text(BLACKWELL.replace("sm_count: 148", "sm_count: 132"))
    assert run_target(RunOptions(str(copy), runbook=str(book), out=other, jobs=1)).exit_code == 0


@pytest.mark.parametrize("target", ["sm_80a", "sm_90f", "sm_89a"])
def test_a_suffix_the_target_does_not_have_is_refused(tmp_path, target):
    from porter.descriptor.arch import nvrtc_targets

    if nvrtc_targets() is None:
        pytest.skip("NVRTC is not installed")
    msg = error_of(write(tmp_path, BLACKWELL, "target: sm_100a", f"target: {target}"))
    assert "identity.target" in msg and "suffix" in msg


@pytest.mark.parametrize("value,needle", [('"[bold]x"', "expected a descriptor name"), ("blackwell", "own name")])
def test_identity_previous_must_name_another_descriptor(tmp_path, value, needle):
    msg = error_of(write(tmp_path, BLACKWELL, "  previous: hopper", f"  previous: {value}"))
    assert "identity.previous" in msg and needle in msg
