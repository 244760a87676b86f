"""Arch descriptors: the real ones load with the right features, bad ones fail in one line."""

from __future__ import annotations

import dataclasses
import json
import pickle
import re
from pathlib import Path

import pytest

from porter import paths
from porter.descriptor.arch import FEATURES, Arch, MmaShape, arch_from_text, list_archs, load_arch
from porter.errors import PorterError

ARCH_DIR = paths.data_dir("arch")
BLACKWELL = (ARCH_DIR / "blackwell.yaml").read_text()
HOPPER = (ARCH_DIR / "hopper.yaml").read_text()


def mutated(tmp_path: Path, text: str, old: str, new: str, name: str = "mut.yaml") -> Path:
    """Write ``text`` with exactly one ``old`` replaced by ``new``; return the file."""
    assert text.count(old) == 1, f"mutation anchor {old!r} is not unique"
    path = tmp_path / name
    path.write_text(text.replace(old, new))
    return path


def error_of(path: Path) -> str:
    with pytest.raises(PorterError) as info:
        load_arch(path)
    msg = str(info.value)
    assert "\n" not in msg, "errors are one line"
    assert msg.startswith(str(path)), "errors name the file first"
    return msg


def line_of(path: Path, needle: str) -> int:
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(needle)


# -- the shipped descriptors ---------------------------------------------------------------


def test_list_archs_has_both():
    names = list_archs()
    assert {"hopper", "blackwell"} <= set(names)
    assert names == sorted(names)


def test_hopper_figures_and_features():
    a = load_arch("hopper")
    assert isinstance(a, Arch)
    assert (a.name, a.target, a.min_ptx, a.min_cuda) == ("hopper", "sm_90a", "8.0", "12.0")
    assert a.compute_capability == (9, 0)
    assert a.path == ARCH_DIR / "hopper.yaml"
    assert "H200 SXM" in a.products
    assert a.sm_count == 132
    assert a.smem_per_sm_bytes == 228 * 1024 and a.smem_per_block_bytes == 227 * 1024
    assert a.regs_per_sm == 65536 and a.max_regs_per_thread == 255 and a.max_threads_per_block == 1024
    assert a.l2_bytes == 50 * 2**20
    assert a.hbm_bytes == 141 * 10**9 and a.hbm_bandwidth_bytes_per_s == pytest.approx(4.8e12)
    assert a.features == {"wgmma", "clusters", "dsmem", "tma", "mbarrier", "cp_async", "fp8", "setmaxnreg"}
    for f in ("tcgen05", "tmem", "cta_pair", "fp6", "fp4", "block_scale_mx", "block_scale_nvfp4"):
        assert not a.has(f)
    tc = a.tensor_core
    assert (tc.generation, tc.instruction, tc.issue, tc.accumulator) == (
        "wgmma", "wgmma.mma_async", "warpgroup", "registers")
    assert set(tc.mma_shapes) == {"f16", "tf32", "f8", "i8"}
    assert {k: tc.k_of(k) for k in tc.kinds} == {"f16": 16, "tf32": 8, "f8": 32, "i8": 32}
    assert tc.mma_shapes["f16"] == (MmaShape(64, 8, 256, 8, 16, 1),)
    assert tc.kind_formats["f8"] == ("e4m3", "e5m2")
    assert tc.valid_shape("f16", 64, 256) and tc.valid_shape("f16", 64, 8)
    assert not tc.valid_shape("f16", 128, 128)  # wgmma is M=64 only
    assert not tc.valid_shape("f16", 64, 12)
    assert tc.valid_shape("i8", 64, 24) and not tc.valid_shape("i8", 64, 40)
    assert not tc.valid_shape("mxf4", 128, 128)  # a kind Hopper does not have
    assert (a.tmem.lanes, a.tmem.columns, a.tmem.bytes) == (0, 0, 0)
    assert (a.cluster.max_portable, a.cluster.max_nonportable, a.cta_pair) == (8, 16, False)
    assert "e2m1" not in a.formats and dict(a.block_scales) == {}
    assert a.peak_tflops["bf16"] == 989
    assert a.ridge_flop_per_byte("bf16") == pytest.approx(989e12 / 4.8e12)
    assert a.sass_signatures["wgmma"][0] == "HGMMA"
    assert "H200" in a.section_sources["memory"]["default"]


def test_blackwell_figures_and_features():
    a = load_arch("blackwell")
    assert (a.target, a.min_ptx, a.min_cuda) == ("sm_100a", "8.6", "12.8")
    assert a.compute_capability == (10, 0)
    assert a.sm_count == 148
    assert a.features == set(FEATURES) - {"wgmma", "mma_sync"}
    assert not a.has("wgmma")
    tc = a.tensor_core
    assert (tc.generation, tc.instruction, tc.issue, tc.accumulator) == ("tcgen05", "tcgen05.mma", "thread", "tmem")
    assert set(tc.mma_shapes) == {"f16", "tf32", "f8f6f4", "i8", "mxf8f6f4", "mxf4", "mxf4nvf4"}
    assert tc.k_of("f16") == 16 and tc.k_of("tf32") == 8 and tc.k_of("f8f6f4") == 32 and tc.k_of("mxf4nvf4") == 64
    assert tc.valid_shape("f16", 128, 256) and tc.valid_shape("f16", 64, 8)
    assert not tc.valid_shape("f16", 128, 8)  # M=128 needs N % 16
    assert tc.valid_shape("f16", 256, 256, cta_group=2) and not tc.valid_shape("f16", 256, 256)
    assert tc.valid_shape("f8f6f4", 256, 64, cta_group=2) and not tc.valid_shape("f8f6f4", 256, 48, cta_group=2)
    assert tc.valid_shape("mxf4nvf4", 128, 128) and not tc.valid_shape("mxf4nvf4", 64, 128)
    assert tc.kinds_for_format("e2m1") == ("f8f6f4", "mxf8f6f4", "mxf4", "mxf4nvf4")
    assert tc.block_scaled_kinds == {"mxf8f6f4", "mxf4", "mxf4nvf4"}
    assert (a.tmem.lanes, a.tmem.columns, a.tmem.bytes) == (128, 512, 256 * 1024)
    assert a.cta_pair and a.cluster.max_portable == 8 and a.cluster.max_nonportable == 16
    assert set(a.formats) >= {"bf16", "f16", "tf32", "e4m3", "e5m2", "e2m3", "e3m2", "e2m1"}
    mx, nv = a.block_scales["mx"], a.block_scales["nvfp4"]
    assert (mx.scale_format, mx.block_size) == ("ue8m0", 32)
    assert (nv.scale_format, nv.block_size, nv.kinds) == ("ue4m3", 16, ("mxf4nvf4",))
    assert a.peak_tflops == {"bf16": 2250, "f16": 2250, "fp8": 4500, "fp6": 4500, "fp4": 9000}
    assert a.ridge_flop_per_byte("e4m3") == a.ridge_flop_per_byte("fp8") == pytest.approx(4500e12 / 7.7e12)
    sigs = a.sass_signatures
    assert "UTCHMMA" in sigs["tcgen05"] and "UTCQMMA" in sigs["tcgen05"]
    assert {"LDTM", "UTCATOMSWS"} <= set(sigs["tmem"])
    assert sigs["tma"][0] == "UTMALDG" and sigs["mbarrier"] == ("SYNCS",)
    assert tc.kind_sass["mxf4nvf4"] == ("UTCOMMA",)
    assert "memory.l2_mib" in a.uncertain


def test_every_section_cites_a_defined_source():
    for name in list_archs():
        a = load_arch(name)
        for section, src in a.section_sources.items():
            texts = src.values() if hasattr(src, "values") else [src]
            for text in texts:
                refs = re.findall(r"\[([A-Z][A-Z0-9_]*)", text)
                assert refs and set(refs) <= set(a.sources), (name, section, text)


def test_arch_is_immutable_and_picklable():
    a = load_arch("blackwell")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.sm_count = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        a.peak_tflops["bf16"] = 1.0  # type: ignore[index]
    with pytest.raises(TypeError):
        a.tensor_core.mma_shapes["f16"] = ()  # type: ignore[index]
    assert isinstance(a.formats, tuple) and isinstance(a.features, frozenset)
    b = pickle.loads(pickle.dumps(a))
    assert b == a and hash(b) == hash(a) and b.has("tmem")
    tc = pickle.loads(pickle.dumps(a.tensor_core))
    assert tc == a.tensor_core


def test_to_dict_is_json():
    for name in list_archs():
        d = load_arch(name).to_dict()
        again = json.loads(json.dumps(d))
        assert again["target"] == d["target"] and again["features"] == d["features"]
    d = load_arch("blackwell").to_dict()
    assert d["tmem"]["bytes"] == 262144
    assert d["tensor_core"]["kinds"]["f16"]["shapes"][0] == {
        "m": 64, "n_min": 8, "n_max": 256, "n_step": 8, "k": 16, "cta_group": 1}


def test_has_rejects_unknown_feature():
    with pytest.raises(PorterError, match="did you mean 'tmem'"):
        load_arch("hopper").has("tmen")


def test_ridge_unknown_dtype():
    with pytest.raises(PorterError, match="no peak rate for 'fp4'"):
        load_arch("hopper").ridge_flop_per_byte("fp4")


def test_load_by_path_and_name_agree(tmp_path):
    p = tmp_path / "copy.yaml"
    p.write_text(HOPPER)
    a, b = load_arch(p), load_arch(str(p))
    assert a == b and a.digest == load_arch("hopper").digest
    assert a.path == p


# -- features derive from content ----------------------------------------------------------


def test_features_follow_content(tmp_path):
    # Denying setmaxnreg means dropping its SASS signature too (the loader refuses a
    # signature for a feature the descriptor does not claim).
    no_setmaxnreg = HOPPER.replace('  setmaxnreg: ["USETMAXREG"]\n', "")
    a = load_arch(mutated(tmp_path, no_setmaxnreg, "setmaxnreg: true", "setmaxnreg: false"))
    assert not a.has("setmaxnreg") and a.has("wgmma")
    a = load_arch(mutated(tmp_path, HOPPER, "distributed_smem: true", "distributed_smem: false"))
    assert not a.has("dsmem") and a.has("clusters")
    text = BLACKWELL.replace("  block_scale_nvfp4: ['^UTCOMMA\\S*\\.4X']\n", "")
    start = text.index("  nvfp4:\n")
    end = text.index("\npeak:")
    text = text[:start] + text[end:]
    a = arch_from_text(text, "no-nvfp4.yaml")
    assert a.has("block_scale_mx") and not a.has("block_scale_nvfp4") and "nvfp4" not in a.block_scales


# -- one test per error class --------------------------------------------------------------


def test_missing_file(tmp_path):
    with pytest.raises(PorterError, match=r"nope\.yaml: arch descriptor file not found"):
        load_arch(tmp_path / "nope.yaml")


def test_unknown_bare_name():
    with pytest.raises(PorterError, match=r"arch 'hoppr': no descriptor .*did you mean 'hopper'\?"):
        load_arch("hoppr")


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "  sm_count: 148", "  sm_count: [148")
    msg = error_of(p)
    assert re.match(rf"{re.escape(str(p))}:\d+:\d+: YAML error: ", msg), msg


def test_python_tag_is_an_error_not_executed(tmp_path):
    marker = tmp_path / "pwned"
    p = mutated(tmp_path, HOPPER, "name: hopper",
                f"name: !!python/object/apply:os.system ['touch {marker}']")
    msg = error_of(p)
    assert "YAML error" in msg and "safe loader" in msg
    assert not marker.exists()


def test_unknown_key_suggests_nearest(tmp_path):
    p = mutated(tmp_path, HOPPER, "smem_per_sm_kib: 228", "smem_per_sm: 228")
    msg = error_of(p)
    assert f":{line_of(p, 'smem_per_sm:')}: limits.smem_per_sm: unknown key" in msg
    assert "did you mean 'smem_per_sm_kib'?" in msg


def test_unknown_top_level_section(tmp_path):
    p = mutated(tmp_path, HOPPER, "tmem:\n", "tmemory:\n")
    msg = error_of(p)
    assert "tmemory: unknown key; did you mean 'tmem'?" in msg


def test_missing_key(tmp_path):
    p = mutated(tmp_path, HOPPER, "  min_cuda: \"12.0\"\n", "")
    msg = error_of(p)
    assert "identity.min_cuda: missing key; add 'min_cuda:'" in msg
    assert f":{line_of(p, 'identity:')}:" in msg


def test_wrong_unit_in_value(tmp_path):
    p = mutated(tmp_path, HOPPER, "smem_per_sm_kib: 228", "smem_per_sm_kib: 228 KB")
    msg = error_of(p)
    assert "limits.smem_per_sm_kib: expected a number in KiB" in msg
    assert "write 'smem_per_sm_kib: 228'" in msg


def test_wrong_type_bool(tmp_path):
    p = mutated(tmp_path, HOPPER, "tma: true", "tma: yes please")
    assert "async_copy.tma: expected true or false" in error_of(p)


def test_version_must_be_quoted(tmp_path):
    p = mutated(tmp_path, HOPPER, 'min_ptx: "8.0"', "min_ptx: 8.0")
    assert 'identity.min_ptx: expected a quoted version like "8.0", got the number 8.0' in error_of(p)


def test_out_of_range_hints_at_unit(tmp_path):
    p = mutated(tmp_path, HOPPER, "smem_per_sm_kib: 228", "smem_per_sm_kib: 233472")
    msg = error_of(p)
    assert "limits.smem_per_sm_kib: value 233472 is out of range" in msg and "KiB" in msg


def test_bad_choice_suggests(tmp_path):
    p = mutated(tmp_path, HOPPER, "generation: wgmma", "generation: wgma")
    assert "tensor_core.generation: expected one of" in error_of(p)
    p = mutated(tmp_path, HOPPER, "formats: [f16, bf16]", "formats: [f16, bf61]")
    assert "did you mean 'bf16'?" in error_of(p)


def test_duplicate_key(tmp_path):
    p = mutated(tmp_path, HOPPER, "  hbm_gb: 141\n", "  hbm_gb: 141\n  hbm_gb: 80\n")
    msg = error_of(p)
    assert "memory.hbm_gb: duplicate key" in msg


def test_tmem_without_tmem_accumulator(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "accumulator: tmem", "accumulator: registers")
    assert "tmem.size_kib: Tensor Memory is declared but tensor_core.accumulator is 'registers'" in error_of(p)


def test_tmem_accumulator_without_tmem(tmp_path):
    text = BLACKWELL.replace("  lanes: 128\n  columns: 512\n", "  lanes: 0\n  columns: 0\n").replace(
        "size_kib: 256", "size_kib: 0")
    p = tmp_path / "x.yaml"
    p.write_text(text)
    assert "tensor_core.accumulator: accumulator is tmem but the tmem section has size 0" in error_of(p)


def test_tmem_size_mismatch(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "size_kib: 256", "size_kib: 128")
    assert "tmem.size_kib: 128 KiB does not match lanes x columns x cell_bits" in error_of(p)


def test_cta_pair_without_clusters(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "max_portable: 8", "max_portable: 1")
    assert "cluster.cta_pair: CTA pairs are claimed but clusters are limited to 1 CTA" in error_of(p)


def test_cta_group_2_without_cta_pair(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "cta_pair: true", "cta_pair: false")
    assert "a cta_group 2 shape needs CTA pairs" in error_of(p)


def test_cta_pair_without_cta_group_2_shape(tmp_path):
    p = mutated(tmp_path, HOPPER, "cta_pair: false", "cta_pair: true")
    msg = error_of(p)
    assert f"{p}:{line_of(p, 'cta_pair: true')}: cluster.cta_pair: cta_pair: true but no MMA shape with cta_group 2" in msg


def test_format_without_consuming_kind(tmp_path):
    p = mutated(tmp_path, HOPPER, "elements: [bf16, f16, tf32, e4m3, e5m2, s8, u8]",
                "elements: [bf16, f16, tf32, e4m3, e5m2, e2m1, s8, u8]")
    msg = error_of(p)
    assert "formats.elements[5]: format e2m1 is listed but no MMA kind consumes it" in msg
    assert f":{line_of(p, 'elements:')}:" in msg


def test_kind_format_not_listed(tmp_path):
    p = mutated(tmp_path, HOPPER, "elements: [bf16, f16, tf32, e4m3, e5m2, s8, u8]",
                "elements: [bf16, f16, tf32, e4m3, s8, u8]")
    assert "tensor_core.kinds.f8.formats[1]: format e5m2 is not in formats.elements" in error_of(p)


def test_block_scale_without_its_kind(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "kinds: [mxf4nvf4]", "kinds: [mxf4nvf5]")
    msg = error_of(p)
    assert "block_scales.nvfp4.kinds[0]: block scale 'nvfp4' names MMA kind 'mxf4nvf5'" in msg
    assert "did you mean 'mxf4nvf4'?" in msg


def test_block_scaled_kind_without_block_scale(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "kinds: [mxf8f6f4, mxf4, mxf4nvf4]", "kinds: [mxf8f6f4, mxf4nvf4]")
    assert "tensor_core.kinds.mxf4.block_scaled: a block-scaled kind that no block_scales entry consumes" in error_of(p)


def test_peak_without_format(tmp_path):
    p = mutated(tmp_path, HOPPER, "    fp8: 1979\n", "    fp8: 1979\n    fp4: 4000\n")
    assert "peak.dense_tflops.fp4: a peak for fp4 but formats.elements has none of e2m1" in error_of(p)


def test_signature_for_unclaimed_feature(tmp_path):
    p = mutated(tmp_path, HOPPER, '  wgmma: ["HGMMA", "QGMMA", "IGMMA"]\n',
                '  wgmma: ["HGMMA", "QGMMA", "IGMMA"]\n  tmem: ["LDTM"]\n')
    assert "sass_signatures.tmem: a signature for 'tmem', which this descriptor does not claim" in error_of(p)


def test_bad_signature_regex(tmp_path):
    p = mutated(tmp_path, HOPPER, 'mbarrier: ["SYNCS"]', 'mbarrier: ["SYNCS("]')
    assert "sass_signatures.mbarrier[0]: pattern 'SYNCS(' is not a valid regular expression" in error_of(p)


def test_smem_per_block_above_per_sm(tmp_path):
    p = mutated(tmp_path, HOPPER, "smem_per_block_kib: 227", "smem_per_block_kib: 229")
    assert "limits.smem_per_block_kib: 229 KiB per block is more than the 228 KiB per SM" in error_of(p)


def test_source_must_cite_defined_key(tmp_path):
    p = mutated(tmp_path, HOPPER, '  source: "[PTX] wgmma .atype', '  source: "[XYZ] wgmma .atype')
    assert "formats.source: source cites [XYZ], which 'sources' does not define" in error_of(p)


def test_source_missing(tmp_path):
    p = mutated(tmp_path, HOPPER, '  source: "[PTX] wgmma .atype/.btype: f16, bf16, tf32, e4m3, e5m2, s8, u8"\n', "")
    assert "formats.source: missing key" in error_of(p)


def test_uncertain_names_missing_key(tmp_path):
    p = mutated(tmp_path, BLACKWELL, "  - memory.l2_mib\n", "  - memory.l2\n")
    assert "uncertain[0]: 'memory.l2' names no key of this descriptor" in error_of(p)


def test_empty_file_and_wrong_top_level(tmp_path):
    p = tmp_path / "empty.yaml"
    p.write_text("")
    assert "the file is empty" in error_of(p)
    p.write_text("- a\n- b\n")
    assert "expected a mapping of top-level sections, got list" in error_of(p)


def test_wrong_schema_version(tmp_path):
    p = mutated(tmp_path, HOPPER, "schema: 1", "schema: 2")
    assert "schema: expected schema version 1, got 2" in error_of(p)


def test_sass_matches_uses_signatures():
    b, h = load_arch("blackwell"), load_arch("hopper")
    # opcodes seen with nvdisasm 13.5 on NVRTC-compiled tcgen05 probes
    seen = ["UTCHMMA.2CTA gdesc[UR8], gdesc[UR10], tmem[UR6], idesc[UR5], UP0 ;",
            "@P0 UTCOMMA.2CTA.4X gdesc[UR14]", "LDTM.x32 R4, tmem[UR4]", "UTCQMMA gdesc[UR8]"]
    assert b.sass_matches("cta_pair", seen) == tuple(seen[:2])
    assert b.sass_matches("block_scale_nvfp4", seen) == (seen[1],)
    assert b.sass_matches("tmem", seen) == (seen[2],)
    assert b.sass_matches("tcgen05", ["UTCIMMA gdesc[UR4]"])
    assert not b.sass_matches("cta_pair", ["UTCHMMA gdesc[UR8]"])
    assert not b.sass_matches("setmaxnreg", seen)  # no signature: never proven by SASS
    assert h.sass_matches("wgmma", ["HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], R24"])
    assert not h.sass_matches("wgmma", seen)
    with pytest.raises(PorterError):
        h.sass_matches("hgmma", seen)


def test_error_quoting_control_characters_stays_one_line(tmp_path):
    p = tmp_path / "nl.yaml"
    p.write_text(HOPPER + "? \"bad\\nkey\"\n: 1\n")
    msg = error_of(p)
    assert "bad\\nkey: unknown key" in msg


def test_pure_python_safe_loader_gives_same_results(tmp_path, monkeypatch):
    import yaml

    from porter.descriptor import arch_schema

    monkeypatch.setattr(arch_schema, "_SAFE_LOADER", yaml.SafeLoader)
    assert arch_from_text(BLACKWELL, "b.yaml").features == load_arch("blackwell").features
    p = mutated(tmp_path, HOPPER, "  sm_count: 132", "  sm_count: [132")
    assert re.search(r"mut\.yaml:\d+:\d+: YAML error", error_of(p))
    marker = tmp_path / "pwned"
    p = mutated(tmp_path, HOPPER, "name: hopper", f"name: !!python/object/apply:os.system ['touch {marker}']")
    assert "safe loader" in error_of(p) and not marker.exists()


def test_reload_sees_same_size_edit(tmp_path):
    p = mutated(tmp_path, HOPPER, "sm_count: 132", "sm_count: 132")
    first = load_arch(p)
    assert load_arch(p) is first  # unchanged bytes: cached object
    p.write_text(HOPPER.replace("sm_count: 132", "sm_count: 131"))
    assert load_arch(p).sm_count == 131
