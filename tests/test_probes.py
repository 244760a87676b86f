"""Feature probes: the compiler confirms the shipped descriptors and catches false claims."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from porter import paths
from porter.descriptor.arch import FEATURES, load_arch
from porter.cli import main
from porter.errors import PorterError
from porter.descriptor.probes import check_arch, discover, judge, parse_probe

HOPPER_TEXT = (paths.data_dir("arch") / "hopper.yaml").read_text()
BLACKWELL_TEXT = (paths.data_dir("arch") / "blackwell.yaml").read_text()


def edited(tmp_path: Path, text: str, edits: list[tuple[str, str]], name: str) -> Path:
    for old, new in edits:
        assert text.count(old) == 1, f"edit anchor {old!r} is not unique"
        text = text.replace(old, new)
    path = tmp_path / name
    path.write_text(text)
    return path


# Each check compiles the probes once per session (the on-disk cache makes reruns cheap).
@pytest.fixture(scope="module")
def hopper_check():
    return check_arch(load_arch("hopper"))


@pytest.fixture(scope="module")
def blackwell_check():
    return check_arch(load_arch("blackwell"))


def by_probe(check):
    return {r.probe: r for r in check.probes}


def by_feature(check):
    return {f.feature: f for f in check.features}


# -- the probe set --------------------------------------------------------------------


def test_every_feature_has_a_probe_with_sass():
    probes = discover()
    assert {p.feature for p in probes} == set(FEATURES)
    for p in probes:
        assert p.shows, p.name
        assert p.text.get("proves"), f"{p.name} says what it proves"
        assert re.search(r"__global__", p.source), f"{p.name} is a kernel"


def test_header_errors_name_file_and_line(tmp_path):
    bad_key = tmp_path / "x.cu"
    bad_key.write_text("// probe: x\n// feature: tma\n// colour: red\n// shows: op:tma_load\n")
    with pytest.raises(PorterError, match=r"x\.cu:3: unknown probe header key 'colour'"):
        parse_probe(bad_key)
    # SASS lives in the descriptor: a probe names spellings, it cannot carry a regex.
    bad_ref = tmp_path / "y.cu"
    bad_ref.write_text("// probe: y\n// feature: tma\n// shows: ^UTMA(LDG\n")
    with pytest.raises(PorterError, match=r"y\.cu:3: '// shows: \^UTMA\(LDG' is not a descriptor spelling"):
        parse_probe(bad_ref)
    old_key = tmp_path / "v.cu"
    old_key.write_text("// probe: v\n// feature: tma\n// sass: ^UTMALDG\n")
    with pytest.raises(PorterError, match=r"v\.cu:3: unknown probe header key 'sass'"):
        parse_probe(old_key)
    bad_feature_ref = tmp_path / "u.cu"
    bad_feature_ref.write_text("// probe: u\n// feature: tma\n// shows: tmaa/pair\n")
    with pytest.raises(PorterError, match=r"'tmaa' is not a feature porter knows"):
        parse_probe(bad_feature_ref)
    wrong_name = tmp_path / "z.cu"
    wrong_name.write_text("// probe: other\n// feature: tma\n// shows: op:tma_load\n")
    with pytest.raises(PorterError, match="must match the file name 'z'"):
        parse_probe(wrong_name)
    unknown_feature = tmp_path / "w.cu"
    unknown_feature.write_text("// probe: w\n// feature: warp_drive\n// shows: op:x\n")
    with pytest.raises(PorterError, match="feature 'warp_drive' is not one porter knows"):
        parse_probe(unknown_feature)


# -- the shipped descriptors agree with the compiler ----------------------------------


def test_hopper_agrees(hopper_check):
    assert hopper_check.ok, hopper_check.contradictions
    r = by_probe(hopper_check)
    assert r["wgmma_bf16"].verdict == "confirmed"
    assert r["wgmma_bf16"].sass_found["kind:f16"] == ["HGMMA.64x8x16.F32.BF16"]
    assert r["wgmma_bf16"].sass_found["op:warpgroup_arrive"] == ["WARPGROUP.ARRIVE"]
    assert r["wgmma_fp8"].sass_found["kind:f8"] == ["QGMMA.64x8x32.F32.E4M3.E4M3"]
    for name in ("tcgen05_f16", "tmem_ld_st", "tcgen05_cta_pair", "cvt_fp4", "cvt_fp6"):
        assert r[name].verdict == "denied-confirmed", name
        assert "not supported on .target 'sm_90a'" in r[name].error
    assert by_feature(hopper_check)["fp8"].signature_seen_in == ["wgmma_fp8"]


def test_blackwell_agrees(blackwell_check):
    assert blackwell_check.ok, blackwell_check.contradictions
    r = by_probe(blackwell_check)
    for name in ("wgmma_bf16", "wgmma_fp8"):
        assert r[name].verdict == "denied-confirmed"
        assert "not supported on .target 'sm_100a'" in r[name].error
    assert r["tcgen05_f16"].sass_found["kind:f16"] == ["UTCHMMA"]
    assert r["tcgen05_cta_pair"].sass_found["kind:f16/pair"] == ["UTCHMMA.2CTA"]
    assert r["tcgen05_cta_pair"].sass_found["op:mma_commit/pair"] == ["UTCBAR.2CTA.MULTICAST"]
    assert r["tcgen05_mxf4nvf4"].sass_found["kind:mxf4nvf4/scale_vec_4x"] == ["UTCOMMA.4X"]
    # Block scaling shows as TMEM scale operands after the idesc, not as an opcode.
    scaled = r["tcgen05_mxf8f6f4"].sass_found
    assert any("idesc" in line and line.endswith("!UPT") for hits in scaled.values() for line in hits)
    assert set(r["tmem_ld_st"].sass_found) >= {"op:tmem_store", "op:tmem_load"}
    assert blackwell_check.kinds_without_probe == ["tf32", "i8", "mxf4"]


@pytest.mark.parametrize("name", ["hopper", "blackwell"])
def test_cli_check_passes(name, hopper_check, blackwell_check, capsys):
    assert main(["arch", "check", name]) == 0
    out = capsys.readouterr().out
    assert "descriptor AGREES with the compiler" in out.splitlines()[-1]
    assert "denied-confirmed" in out and "confirmed" in out


def test_cli_json(blackwell_check, capsys):
    assert main(["arch", "check", "blackwell", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is True and data["target"] == "sm_100a"
    assert {p["probe"] for p in data["probes"]} == {r.probe for r in blackwell_check.probes}


# -- false claims are caught ------------------------------------------------------------


def test_hopper_copy_claiming_tcgen05_is_contradicted(tmp_path, hopper_check, capsys):
    # Claim tcgen05 and drop the wgmma signature (the schema refuses signatures of unclaimed features).
    text, count = re.subn(r"^  wgmma: \[.*\]\n", "", HOPPER_TEXT, flags=re.M)
    assert count == 1
    path = edited(tmp_path, text, [("generation: wgmma", "generation: tcgen05")], "fake_tcgen05.yaml")
    check = check_arch(load_arch(path))
    r = by_probe(check)
    assert r["tcgen05_f16"].verdict.startswith("contradicted: descriptor claims tcgen05 but the compiler rejects")
    assert "tcgen05.alloc" in r["tcgen05_f16"].verdict
    # It also stopped claiming wgmma, which the compiler still accepts for sm_90a.
    assert r["wgmma_bf16"].verdict.startswith("contradicted: descriptor denies wgmma but the compiler accepts")
    assert main(["arch", "check", str(path)]) == 1
    assert "descriptor DISAGREES with the compiler" in capsys.readouterr().out


def test_hopper_copy_claiming_tmem_is_contradicted(tmp_path, hopper_check):
    path = edited(tmp_path, HOPPER_TEXT, [
        ("  lanes: 0\n  columns: 0\n  size_kib: 0\n",
         "  lanes: 128\n  columns: 512\n  cell_bits: 32\n  size_kib: 256\n  alloc_min_columns: 32\n"),
        ("accumulator: registers", "accumulator: tmem")], "fake_tmem.yaml")
    check = check_arch(load_arch(path))
    assert not check.ok
    tmem = by_probe(check)["tmem_ld_st"]
    assert tmem.claimed and not tmem.compiled
    assert tmem.verdict.startswith("contradicted: descriptor claims tmem")
    assert by_feature(check)["tmem"].verdict.startswith("contradicted")


def test_wrong_sass_signature_is_contradicted(tmp_path, blackwell_check):
    # Replace whatever pattern the descriptor lists for cta_pair with one no SASS shows.
    text, count = re.subn(r"^  cta_pair: \[.*\]$", "  cta_pair: ['^UTCHMMA\\.PAIR']", BLACKWELL_TEXT, flags=re.M)
    assert count == 1
    path = edited(tmp_path, text, [], "bad_sig.yaml")
    check = check_arch(load_arch(path))
    # The probe names the descriptor's cta_pair signature, so the wrong spelling fails it too.
    assert by_probe(check)["tcgen05_cta_pair"].verdict.startswith(
        "contradicted: compiles but its SASS lacks the descriptor's cta_pair = ^UTCHMMA\\.PAIR")
    verdict = by_feature(check)["cta_pair"].verdict
    assert verdict.startswith("contradicted: claimed but unproven") and "^UTCHMMA\\.PAIR" in verdict


def test_denial_needs_a_target_reason():
    arch = load_arch("blackwell")
    probe = next(p for p in discover() if p.name == "wgmma_bf16")
    typo = judge(probe, arch, compiled=False, sass_text="", error="wgmma_bf16.cu:3: error: expected a ';'")
    assert typo.verdict.startswith("contradicted: rejected for a reason other than the target")
    target = judge(probe, arch, compiled=False, sass_text="",
                   error="wgmma_bf16.cu:36: ptxas error: Instruction 'wgmma.fence' not supported on .target 'sm_100a'")
    assert target.verdict == "denied-confirmed"


def test_missing_probe_sass_is_contradicted():
    arch = load_arch("blackwell")
    probe = next(p for p in discover() if p.name == "tcgen05_f16")
    # A cubin that compiled but whose SASS has no tensor-core MMA.
    sass_text = "        /*0000*/                   MOV R1, c[0x0][0x28] ;\n        /*0010*/  EXIT ;\n"
    result = judge(probe, arch, compiled=True, sass_text=sass_text, error="")
    assert result.verdict.startswith("contradicted: compiles but its SASS lacks the descriptor's kind:f16 = UTCHMMA")


def test_probe_through_a_denied_prerequisite_does_not_judge_the_feature(tmp_path):
    # An arch that claims block scales but has no tcgen05/TMEM (sm_120a's mma.sync): the
    # tcgen05 block-scale probe is rejected because of tcgen05, which says nothing about
    # block scales. Not a contradiction; the feature is left without a probe.
    from porter.descriptor.probes import NOT_JUDGED, _feature_results

    arch = load_arch("hopper")
    probe = next(p for p in discover() if p.name == "tcgen05_mxf8f6f4")
    assert probe.feature == "block_scale_mx" and "tcgen05" in probe.also_needs
    claims = type("Claims", (), {"has": lambda self, f: f == "block_scale_mx" or arch.has(f),
                                 "target": arch.target, "tensor_core": arch.tensor_core,
                                 "sass_signatures": arch.sass_signatures})()
    error = "tcgen05_mxf8f6f4.cu:40: ptxas error: Instruction 'tcgen05.alloc' not supported on .target 'sm_90a'"
    result = judge(probe, claims, compiled=False, sass_text="", error=error)
    assert result.verdict.startswith(NOT_JUDGED) and result.ok and "tcgen05" in result.verdict
    # ...but a claim needs a probe that confirms it, and none does here: unproven.
    feature = next(f for f in _feature_results(claims, [probe], [result]) if f.feature == "block_scale_mx")
    assert feature.verdict.startswith("contradicted: claimed but unproven: no probe for block_scale_mx")
    assert "tcgen05_mxf8f6f4: not judged" in feature.verdict and not feature.ok
    # Rejected for its own sake (no denied prerequisite involved) is still a contradiction.
    alone = judge(probe, type(claims)(), compiled=False, sass_text="", error="x.cu:1: error: expected a ';'")
    assert alone.verdict.startswith("contradicted")


def hopper_claiming_cta_pair(tmp_path: Path) -> Path:
    """A Hopper copy that claims CTA pairs, with the cta_group 2 shape the schema asks for
    (a shape wgmma does not have: the loader refuses it, see below)."""
    return edited(tmp_path, HOPPER_TEXT, [
        ("cta_pair: false", "cta_pair: true"),
        ("        - {m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}\n    tf32:",
         "        - {m: 64, n_min: 8, n_max: 256, n_step: 8, cta_group: 1}\n"
         "        - {m: 128, n_min: 16, n_max: 256, n_step: 16, cta_group: 2}\n    tf32:")], "fake_pair.yaml")


class _ClaimsCtaPair:
    """The real Hopper descriptor with a (false) cta_pair claim added. A descriptor file cannot
    say this any more: cta_pair needs a cta_group 2 MMA shape and wgmma has none, which the
    loader refuses by the ISA's shape table. The probe judge must still catch the claim on its
    own (a second, independent judge), so the claim is added here past the loader."""

    def __init__(self, arch):
        self._arch = arch

    def __getattr__(self, name):
        return getattr(self._arch, name)

    def has(self, feature: str) -> bool:
        return feature == "cta_pair" or self._arch.has(feature)


def test_claim_whose_only_probe_is_not_judged_is_unproven(tmp_path, hopper_check, capsys):
    # The only cta_pair probe issues tcgen05, which sm_90a rejects and the descriptor
    # denies, so it cannot judge the claim; nothing else proves it: a contradiction.
    check = check_arch(_ClaimsCtaPair(load_arch("hopper")))
    assert by_probe(check)["tcgen05_cta_pair"].verdict.startswith("not judged")
    verdict = by_feature(check)["cta_pair"].verdict
    assert verdict.startswith("contradicted: claimed but unproven: no probe for cta_pair compiles and shows "
                              "its SASS on sm_90a (tcgen05_cta_pair: not judged")
    assert not check.ok and any(c.startswith("feature cta_pair: contradicted") for c in check.contradictions)
    # As a file, the same claim is refused before any probe runs: one line naming the shape.
    assert main(["arch", "check", str(hopper_claiming_cta_pair(tmp_path))]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "fake_pair.yaml" in err and "cta_group 2 is not a wgmma shape" in err


def test_claim_without_any_probe_is_unproven():
    from porter.descriptor.probes import _feature_results

    arch = load_arch("hopper")
    verdicts = {f.feature: f.verdict for f in _feature_results(arch, [], [])}
    assert verdicts["tma"] == ("contradicted: claimed but unproven: no probe for tma compiles and shows its SASS "
                               "on sm_90a (no probe in kernels_src/probes declares it as its feature)")
    assert verdicts["tcgen05"] == "no probe"   # a denial without a probe stays a gap, not a contradiction


@pytest.fixture(scope="module")
def rtx_check():
    return check_arch(load_arch("rtx-blackwell"))


def test_every_shipped_claim_has_a_confirming_probe(hopper_check, blackwell_check, rtx_check):
    for check in (hopper_check, blackwell_check, rtx_check):
        assert check.ok, check.contradictions
        results = by_probe(check)
        for feature in check.features:
            if feature.claimed:
                confirming = [p for p in feature.probes if results[p].verdict == "confirmed"]
                assert confirming, f"{check.arch}: {feature.feature} has no confirming probe"
                assert all(results[p].compiled and not results[p].sass_missing for p in confirming)


def test_local_include_is_inlined_and_a_missing_one_is_named(tmp_path):
    from porter.descriptor.probes import parse_probe
    (tmp_path / "shared.cuh").write_text("__device__ int helper() { return 7; }\n")
    header = "// probe: p\n// feature: tma\n// shows: op:tma_load\n\n"
    probe = tmp_path / "p.cu"
    probe.write_text(header + '#include "shared.cuh"\n__global__ void k(int* o) { *o = helper(); }\n')
    assert "return 7;" in parse_probe(probe).source          # what is compiled and cache-keyed
    probe.write_text(header + '#include "absent.cuh"\n')
    with pytest.raises(PorterError, match="absent.cuh' not found beside the probe"):
        parse_probe(probe)
