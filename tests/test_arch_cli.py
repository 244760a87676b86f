"""``porter arch list | show | diff``: tables, JSON, and one-line errors with exit code 2."""

from __future__ import annotations

import json

import pytest

from porter import paths
from porter.cli import main


def run(capsys, *argv):
    rc = main(list(argv))
    out, err = capsys.readouterr()
    return rc, out, err


def assert_one_line_error(rc, out, err, *needles):
    assert rc == 2
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("porter: error: "), err
    for needle in needles:
        assert needle in lines[0], lines[0]


def test_list(capsys):
    rc, out, _ = run(capsys, "arch", "list")
    assert rc == 0 and "hopper" in out and "blackwell" in out and "sm_100a" in out


def test_list_json(capsys):
    rc, out, _ = run(capsys, "arch", "list", "--json")
    rows = {r["name"]: r for r in json.loads(out)}
    assert rc == 0
    assert rows["hopper"]["tensor_core"] == "wgmma" and rows["blackwell"]["target"] == "sm_100a"
    assert "tmem" in rows["blackwell"]["features"] and rows["hopper"]["error"] is None


def test_show_table(capsys):
    rc, out, _ = run(capsys, "arch", "show", "blackwell")
    assert rc == 0
    for needle in ("sm_100a", "tcgen05.mma", "Tensor Memory", "128 lanes x 512 columns", "mxf4nvf4",
                   "UTCHMMA", "ue4m3 per 16", "uncertain"):
        assert needle in out, needle


def test_show_json_parses(capsys):
    rc, out, _ = run(capsys, "arch", "show", "hopper", "--json")
    d = json.loads(out)
    assert rc == 0 and d["target"] == "sm_90a" and d["tensor_core"]["generation"] == "wgmma"
    assert d["tmem"]["bytes"] == 0 and d["memory"]["hbm_bytes"] == 141 * 10**9


def test_show_by_path(capsys):
    rc, out, _ = run(capsys, "arch", "show", str(paths.data_dir("arch") / "hopper.yaml"), "--json")
    assert rc == 0 and json.loads(out)["name"] == "hopper"


def test_show_unknown_name_is_one_line(capsys):
    assert_one_line_error(*run(capsys, "arch", "show", "hoppr"), "arch 'hoppr'", "did you mean 'hopper'?")


def test_show_missing_file_is_one_line(capsys, tmp_path):
    assert_one_line_error(*run(capsys, "arch", "show", str(tmp_path / "x.yaml")), "file not found")


def test_show_bad_descriptor_is_one_line(capsys, tmp_path):
    text = (paths.data_dir("arch") / "hopper.yaml").read_text().replace("sm_count: 132", "sm_cont: 132")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    assert_one_line_error(*run(capsys, "arch", "show", str(bad)),
                          f"{bad}:", "limits.sm_cont: unknown key", "did you mean 'sm_count'?")


def test_python_tag_through_cli(capsys, tmp_path):
    bad = tmp_path / "evil.yaml"
    bad.write_text("!!python/object/apply:os.system ['echo hi']\n")
    assert_one_line_error(*run(capsys, "arch", "show", str(bad)), "YAML error")


def test_diff_table(capsys):
    rc, out, _ = run(capsys, "arch", "diff", "hopper", "blackwell")
    assert rc == 0
    for needle in ("gained", "lost", "wgmma", "tcgen05", "tmem", "cta_pair", "block_scale_nvfp4",
                   "shapes changed", "x2.28", "warpgroup", "thread"):
        assert needle in out, needle


def test_diff_says_not_given_for_unsourced_peaks_and_device_memory(capsys):
    rc, out, _ = run(capsys, "arch", "diff", "blackwell", "rtx-blackwell")
    assert rc == 0

    def peak_row(text: str, dtype: str) -> list[str]:   # dtype, before, after, ratio, ridges
        line = next(line for line in text.splitlines() if line.startswith(f"│ {dtype} "))
        return [cell.strip() for cell in line.split("│")[1:-1]]

    assert peak_row(out, "bf16")[1:4] == ["2250", "not given", "not given"]
    assert "device memory bandwidth" in out and "HBM" not in out
    rc, out, _ = run(capsys, "arch", "diff", "blackwell", "hopper")
    assert peak_row(out, "fp4")[1:4] == ["9000", "-", "gone"]
    rc, out, _ = run(capsys, "arch", "show", "rtx-blackwell")
    assert "device memory" in out and "32 GB at 1.792 TB/s" in out and "HBM" not in out


def test_diff_names_a_kind_rename_and_unprobed_kinds(capsys):
    rc, out, _ = run(capsys, "arch", "diff", "hopper", "blackwell")
    assert rc == 0
    assert "f8 -> f8f6f4" in out and "e4m3, e5m2 kept; gains e2m3, e3m2, e2m1" in out
    row = next(line for line in out.splitlines() if "f8 -> f8f6f4" in line)
    assert "renamed" in row and "lost" not in row
    assert "no probe issues mxf4 on blackwell" in out


def test_show_marks_kinds_without_probe(capsys):
    rc, out, _ = run(capsys, "arch", "show", "blackwell")
    assert rc == 0
    assert "tf32 (no probe)" in out and "mxf4 (block-scaled) (no probe)" in out
    assert "f16 (no probe)" not in out and "mxf4nvf4 (block-scaled) (no probe)" not in out


def test_diff_json(capsys):
    rc, out, _ = run(capsys, "arch", "diff", "hopper", "blackwell", "--json")
    d = json.loads(out)
    assert rc == 0
    assert d["features"]["lost"] == ["wgmma"]
    assert {"tcgen05", "tmem", "cta_pair", "fp4", "fp6", "block_scale_mx", "block_scale_nvfp4"} <= set(
        d["features"]["gained"])
    assert d["mma"]["shapes_changed"] is True
    peaks = {p["dtype"]: p for p in d["peaks"]}
    assert peaks["bf16"]["ratio"] == pytest.approx(2250 / 989)


def test_diff_unknown_arch_is_one_line(capsys):
    assert_one_line_error(*run(capsys, "arch", "diff", "hopper", "rubin"), "arch 'rubin'")


def test_arch_without_action_prints_help(capsys):
    rc, out, _ = run(capsys, "arch")
    assert rc == 2 and "list" in out and "diff" in out
