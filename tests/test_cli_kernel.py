"""``porter kernel list|show|render`` over the fake family."""

from __future__ import annotations

import pytest

from porter.cli import main

import test_pipeline_support as fam


@pytest.fixture(autouse=True)
def fake(monkeypatch, tmp_path):
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))


def test_list_shows_supported_and_missing_features(capsys):
    assert main(["kernel", "list", "--arch", "hopper"]) == 0
    out = capsys.readouterr().out
    assert "fake.axpy" in out and "supported" in out
    assert "unsupported" in out and "needs fp4" in out


def test_show_prints_config_and_budget(capsys):
    assert main(["kernel", "show", "fake.fp4", "--arch", "blackwell"]) == 0
    out = capsys.readouterr().out
    assert "block" in out and "256" in out
    assert "TMEM columns" in out and "512" in out            # the arch's limit
    assert "232448 B" in out                                 # 227 KiB per block


def test_render_writes_the_source(tmp_path, capsys):
    target = tmp_path / "k.cu"
    assert main(["kernel", "render", "fake.axpy", "--arch", "hopper", "-o", str(target)]) == 0
    text = target.read_text()
    assert "fake_axpy" in text and "fake_scale" not in text  # hopper: no tmem branch
    assert main(["kernel", "render", "fake.axpy", "--arch", "blackwell"]) == 0
    assert "fake_scale(a)" in capsys.readouterr().out


def test_unknown_kernel_is_one_line_with_close_names(capsys):
    assert main(["kernel", "show", "fake.axpi", "--arch", "blackwell"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "did you mean" in err and "fake.axpy" in err


def test_render_of_unsupported_variant_says_why(capsys):
    assert main(["kernel", "render", "fake.fp4", "--arch", "hopper"]) == 2
    assert "needs fp4" in capsys.readouterr().err
