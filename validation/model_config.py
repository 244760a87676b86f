"""Model configurations for the megakernel (Llama-style decoders) from ``models/*.yaml``."""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import yaml

from porter.errors import PorterError

MODELS_DIR = Path(__file__).resolve().parent / "models"

_INT_KEYS = (
    "num_layers", "hidden_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "intermediate_size", "vocab_size", "max_seq_len",
)
_FLOAT_KEYS = ("rms_norm_eps", "rope_theta")
_OPTIONAL = ("rope_scaling", "tie_word_embeddings", "source")


@dataclass(frozen=True)
class ModelConfig:
    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    rms_norm_eps: float
    rope_theta: float
    max_seq_len: int
    tie_word_embeddings: bool = False
    rope_scaling: dict | None = field(default=None, hash=False, compare=False)
    source: str = ""

    @property
    def q_dim(self) -> int:
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        return self.num_key_value_heads * self.head_dim

    @property
    def group_size(self) -> int:
        """Query heads per KV head."""
        return self.num_attention_heads // self.num_key_value_heads

    def weight_shapes(self) -> dict[str, tuple[int, ...]]:
        """HF Llama weight names -> shapes ([out, in] for linear layers)."""
        h, i = self.hidden_size, self.intermediate_size
        shapes: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (self.vocab_size, h)}
        for n in range(self.num_layers):
            p = f"model.layers.{n}."
            shapes[p + "input_layernorm.weight"] = (h,)
            shapes[p + "self_attn.q_proj.weight"] = (self.q_dim, h)
            shapes[p + "self_attn.k_proj.weight"] = (self.kv_dim, h)
            shapes[p + "self_attn.v_proj.weight"] = (self.kv_dim, h)
            shapes[p + "self_attn.o_proj.weight"] = (h, self.q_dim)
            shapes[p + "post_attention_layernorm.weight"] = (h,)
            shapes[p + "mlp.gate_proj.weight"] = (i, h)
            shapes[p + "mlp.up_proj.weight"] = (i, h)
            shapes[p + "mlp.down_proj.weight"] = (h, i)
        shapes["model.norm.weight"] = (h,)
        if not self.tie_word_embeddings:
            shapes["lm_head.weight"] = (self.vocab_size, h)
        return shapes

    def lm_head_name(self) -> str:
        return "model.embed_tokens.weight" if self.tie_word_embeddings else "lm_head.weight"

    def param_count(self) -> int:
        return sum(int(np.prod(s)) for s in self.weight_shapes().values())

    def rope_inv_freq(self) -> np.ndarray:
        """Inverse frequencies (fp64, [head_dim/2]), with llama3 scaling when configured."""
        hd = self.head_dim
        inv = 1.0 / (self.rope_theta ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        sc = self.rope_scaling
        if sc and sc.get("rope_type") == "llama3":
            factor = float(sc["factor"])
            low = float(sc["low_freq_factor"])
            high = float(sc["high_freq_factor"])
            old = float(sc["original_max_position_embeddings"])
            low_wavelen, high_wavelen = old / low, old / high
            wavelen = 2 * math.pi / inv
            smooth = (old / wavelen - low) / (high - low)
            scaled = np.where(wavelen > low_wavelen, inv / factor, inv)
            mid = (1 - smooth) * inv / factor + smooth * inv
            is_mid = (wavelen <= low_wavelen) & (wavelen >= high_wavelen)
            inv = np.where(is_mid, mid, scaled)
        return inv

    def rope_tables(self, n_pos: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """fp64 cos/sin tables [n_pos, head_dim/2] (angle = pos * inv_freq)."""
        n_pos = self.max_seq_len if n_pos is None else n_pos
        ang = np.arange(n_pos, dtype=np.float64)[:, None] * self.rope_inv_freq()[None, :]
        return np.cos(ang), np.sin(ang)


def _fail(where: str, msg: str) -> PorterError:
    return PorterError(f"{where}: {msg}")


def config_from_dict(data: dict, where: str = "<model config>") -> ModelConfig:
    """Validate a mapping and build a ``ModelConfig``; PorterError names the bad key."""
    if not isinstance(data, dict):
        raise _fail(where, "expected a mapping of model keys; see validation/models/tiny.yaml")
    known = {"name", *_INT_KEYS, *_FLOAT_KEYS, *_OPTIONAL}
    unknown = sorted(set(data) - known)
    if unknown:
        raise _fail(where, f"unknown key(s) {unknown}; allowed: {sorted(known)}")
    missing = [k for k in ("name", *_INT_KEYS, *_FLOAT_KEYS) if k not in data]
    if missing:
        raise _fail(where, f"missing key(s) {missing}; add them (see validation/models/tiny.yaml)")
    vals: dict = {"name": str(data["name"])}
    for k in _INT_KEYS:
        v = data[k]
        if isinstance(v, bool) or not isinstance(v, int) or v <= 0:
            raise _fail(f"{where}: {k}", f"expected a positive integer, got {v!r}")
        vals[k] = v
    for k in _FLOAT_KEYS:
        v = data[k]
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0:
            raise _fail(f"{where}: {k}", f"expected a positive number, got {v!r}")
        vals[k] = float(v)
    if vals["num_attention_heads"] % vals["num_key_value_heads"]:
        raise _fail(f"{where}: num_key_value_heads",
                    f"{vals['num_key_value_heads']} does not divide num_attention_heads "
                    f"{vals['num_attention_heads']}")
    if vals["head_dim"] % 2:
        raise _fail(f"{where}: head_dim", f"must be even for RoPE, got {vals['head_dim']}")
    tie = data.get("tie_word_embeddings", False)
    if not isinstance(tie, bool):
        raise _fail(f"{where}: tie_word_embeddings", f"expected true or false, got {tie!r}")
    sc = data.get("rope_scaling")
    if sc is not None:
        need = ("rope_type", "factor", "low_freq_factor", "high_freq_factor",
                "original_max_position_embeddings")
        if not isinstance(sc, dict) or sc.get("rope_type") != "llama3" or any(k not in sc for k in need):
            raise _fail(f"{where}: rope_scaling",
                        f"only rope_type llama3 with keys {list(need)} is supported, got {sc!r}")
        if float(sc["high_freq_factor"]) <= float(sc["low_freq_factor"]):
            raise _fail(f"{where}: rope_scaling", "high_freq_factor must exceed low_freq_factor")
        sc = dict(sc)
    return ModelConfig(tie_word_embeddings=tie, rope_scaling=sc,
                       source=str(data.get("source", "")), **vals)


def load_model_config(name_or_path: str | os.PathLike) -> ModelConfig:
    """Load ``validation/models/<name>.yaml`` or a YAML file path."""
    p = Path(name_or_path)
    if not p.is_file() and p.suffix not in (".yaml", ".yml") and (MODELS_DIR / f"{p.name}.yaml").is_file():
        p = MODELS_DIR / f"{p.name}.yaml"   # a model name like "llama-3.2-1b"
    if not p.is_file():
        avail = sorted(x.stem for x in MODELS_DIR.glob("*.yaml"))
        raise PorterError(f"{p}: model config not found; available: {avail}")
    try:
        data = yaml.safe_load(p.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = f" line {mark.line + 1}" if mark else ""
        raise PorterError(f"{p}{line}: not valid YAML; fix the syntax") from None
    return config_from_dict(data, where=str(p))


def list_models() -> list[str]:
    return sorted(x.stem for x in MODELS_DIR.glob("*.yaml"))
