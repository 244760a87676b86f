from __future__ import annotations

import numpy as np
import pytest
import yaml

from porter.errors import PorterError
from porter.validation.model_config import config_from_dict, list_models, load_model_config
from porter.validation.weights import (BF16, check_weights, load_safetensors, random_weights,
                                       save_safetensors)


def test_llama_1b_config():
    c = load_model_config("llama-3.2-1b")
    assert (c.num_layers, c.hidden_size, c.num_attention_heads, c.num_key_value_heads) == (16, 2048, 32, 8)
    assert (c.head_dim, c.intermediate_size, c.vocab_size) == (64, 8192, 128256)
    assert c.rms_norm_eps == 1e-5 and c.rope_theta == 500000.0 and c.tie_word_embeddings
    assert c.param_count() == 1_235_814_400          # the published 1.24B
    assert "lm_head.weight" not in c.weight_shapes()


def test_tiny_configs_load():
    assert {"tiny", "tiny-gqa4", "llama-3.2-1b"} <= set(list_models())
    t = load_model_config("tiny")
    assert (t.num_layers, t.hidden_size, t.group_size, t.vocab_size) == (2, 64, 2, 256)


def test_llama3_rope_scaling_bands():
    c = load_model_config("llama-3.2-1b")
    base = 1.0 / (c.rope_theta ** (np.arange(0, 64, 2) / 64))
    inv = c.rope_inv_freq()
    assert inv[0] == base[0]                          # high frequencies untouched
    assert inv[-1] == pytest.approx(base[-1] / 32)    # low frequencies divided by the factor
    assert np.all(inv <= base + 1e-18)


def _tiny_dict():
    return yaml.safe_load((load_model_config.__globals__["MODELS_DIR"] / "tiny.yaml").read_text())


@pytest.mark.parametrize("change, words", [
    ({"hidden_size": -4}, "hidden_size"),
    ({"num_key_value_heads": 3}, "does not divide"),
    ({"head_dim": 15}, "even"),
    ({"rms_norm_eps": "small"}, "rms_norm_eps"),
    ({"typo_key": 1}, "unknown key"),
    ({"tie_word_embeddings": "yes"}, "tie_word_embeddings"),
    ({"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling"),
])
def test_bad_config_names_the_key(change, words):
    d = _tiny_dict()
    d.update(change)
    with pytest.raises(PorterError, match=words):
        config_from_dict(d, "tiny.yaml")


def test_missing_key_and_bad_files(tmp_path):
    d = _tiny_dict()
    del d["vocab_size"]
    with pytest.raises(PorterError, match="missing key.*vocab_size"):
        config_from_dict(d)
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: [unclosed\n")
    with pytest.raises(PorterError, match="not valid YAML"):
        load_model_config(bad)
    with pytest.raises(PorterError, match="not found"):
        load_model_config("no-such-model")


def test_random_weights_are_seeded_bf16():
    c = load_model_config("tiny")
    a, b, other = random_weights(c, 3), random_weights(c, 3), random_weights(c, 4)
    assert set(a) == set(c.weight_shapes())
    for k in a:
        assert a[k].dtype == BF16 and a[k].shape == c.weight_shapes()[k]
        assert a[k].tobytes() == b[k].tobytes()
    assert a["model.norm.weight"].tobytes() != other["model.norm.weight"].tobytes()


def test_safetensors_round_trip_and_errors(tmp_path):
    c = load_model_config("tiny")
    w = random_weights(c, 0)
    path = save_safetensors(w, tmp_path / "model.safetensors")
    back = load_safetensors(c, path)
    assert all(back[k].tobytes() == w[k].tobytes() for k in w)
    # fp32 tensors are accepted and rounded to bf16
    w32 = {k: v.astype(np.float32) for k, v in w.items()}
    back32 = load_safetensors(c, save_safetensors(w32, tmp_path / "f32.safetensors"))
    assert back32["lm_head.weight"].dtype == BF16
    missing = dict(w)
    del missing["model.layers.1.mlp.down_proj.weight"]
    with pytest.raises(PorterError, match=r"missing model\.layers\.1\.mlp\.down_proj\.weight"):
        load_safetensors(c, save_safetensors(missing, tmp_path / "missing.safetensors"))
    wrong = dict(w)
    wrong["model.layers.0.self_attn.k_proj.weight"] = np.zeros((16, 64), dtype=BF16)
    with pytest.raises(PorterError, match=r"k_proj\.weight has shape \[16, 64\], expected \[32, 64\]"):
        load_safetensors(c, save_safetensors(wrong, tmp_path / "wrong.safetensors"))
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\x00\x01not a safetensors file")
    with pytest.raises(PorterError, match="not a readable safetensors"):
        load_safetensors(c, garbage)
    with pytest.raises(PorterError, match="not found"):
        load_safetensors(c, tmp_path / "nope.safetensors")


def test_tied_model_tolerates_lm_head_copy(tmp_path):
    c = load_model_config("tiny-gqa4")
    w = random_weights(c, 0)
    w_extra = dict(w, **{"lm_head.weight": w["model.embed_tokens.weight"]})
    back = load_safetensors(c, save_safetensors(w_extra, tmp_path / "tied.safetensors"))
    assert "lm_head.weight" not in back
    check_weights(c, back)


def test_sharded_checkpoint_folder(tmp_path):
    c = load_model_config("tiny")
    w = random_weights(c, 5)
    names = sorted(w)
    save_safetensors({k: w[k] for k in names[::2]}, tmp_path / "ckpt" / "model-00001-of-00002.safetensors")
    save_safetensors({k: w[k] for k in names[1::2]}, tmp_path / "ckpt" / "model-00002-of-00002.safetensors")
    back = load_safetensors(c, tmp_path / "ckpt")
    assert all(back[k].tobytes() == w[k].tobytes() for k in w)
    save_safetensors({names[0]: w[names[0]]}, tmp_path / "ckpt" / "extra.safetensors")
    with pytest.raises(PorterError, match="also appears in another shard"):
        load_safetensors(c, tmp_path / "ckpt")
    (tmp_path / "empty").mkdir()
    with pytest.raises(PorterError, match="no \\*.safetensors"):
        load_safetensors(c, tmp_path / "empty")
