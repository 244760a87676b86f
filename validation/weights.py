"""Model weights for the megakernel checks: seeded random bf16 weights, or a safetensors file.

Names and shapes follow Hugging Face Llama (``model.layers.N.self_attn.q_proj.weight``,
linear weights stored [out_features, in_features]); ``ModelConfig.weight_shapes`` lists them.
"""

from __future__ import annotations

import os
from pathlib import Path

import ml_dtypes
import numpy as np

from porter.errors import PorterError

from .model_config import ModelConfig

BF16 = ml_dtypes.bfloat16


def random_weights(cfg: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """bf16 weights drawn with a fixed seed, scaled so activations stay O(1).

    Linear layers: N(0, 1/in_features); norms: 1 + N(0, 0.1^2); embeddings: N(0, 1).
    Same config + seed -> bit-identical weights.
    """
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in cfg.weight_shapes().items():
        if name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.standard_normal(shape, dtype=np.float32)
        elif name == "model.embed_tokens.weight":
            w = rng.standard_normal(shape, dtype=np.float32)
        else:
            w = rng.standard_normal(shape, dtype=np.float32) / np.float32(np.sqrt(shape[1]))
        out[name] = w.astype(BF16)
    return out


def check_weights(cfg: ModelConfig, weights: dict[str, np.ndarray], where: str = "weights") -> None:
    """Raise PorterError for a missing or mis-shaped tensor (all problems in one line)."""
    problems = []
    for name, shape in cfg.weight_shapes().items():
        if name not in weights:
            problems.append(f"missing {name} {list(shape)}")
        elif tuple(weights[name].shape) != shape:
            problems.append(f"{name} has shape {list(weights[name].shape)}, expected {list(shape)}")
    if problems:
        more = f" (+{len(problems) - 4} more)" if len(problems) > 4 else ""
        raise PorterError(f"{where}: {'; '.join(problems[:4])}{more}; "
                          f"the file must hold HF Llama tensors for model {cfg.name}")


def load_safetensors(cfg: ModelConfig, path: str | os.PathLike) -> dict[str, np.ndarray]:
    """Load and check HF Llama weights, converted to bf16.

    ``path`` is one safetensors file or a folder of them (a sharded checkpoint such as
    ``model-00001-of-00002.safetensors``; every ``*.safetensors`` in it is read).
    HF checkpoints already use the rotate-half RoPE layout the megakernel expects.
    """
    from safetensors import SafetensorError
    from safetensors.numpy import load_file

    p = Path(path)
    if p.is_dir():
        files = sorted(p.glob("*.safetensors"))
        if not files:
            raise PorterError(f"{p}: no *.safetensors files in this folder")
    elif p.is_file():
        files = [p]
    else:
        raise PorterError(f"{p}: weights file not found")
    raw: dict[str, np.ndarray] = {}
    for f in files:
        try:
            part = load_file(str(f))
        except (SafetensorError, OSError, ValueError, TypeError) as exc:
            raise PorterError(f"{f}: not a readable safetensors file ({exc}); re-export it") from None
        dup = sorted(set(part) & set(raw))
        if dup:
            raise PorterError(f"{f}: tensor {dup[0]} also appears in another shard; keep one copy")
        raw.update(part)
    if cfg.tie_word_embeddings:
        raw.pop("lm_head.weight", None)  # some exports keep a copy of the tied matrix
    check_weights(cfg, raw, where=str(p))
    out = {}
    for name in cfg.weight_shapes():
        arr = raw[name]
        if arr.dtype != BF16:
            if not np.issubdtype(arr.dtype, np.floating):
                raise PorterError(f"{p}: {name} has dtype {arr.dtype}; expected a float type")
            arr = arr.astype(np.float32).astype(BF16)
        out[name] = arr
    return out


def save_safetensors(weights: dict[str, np.ndarray], path: str | os.PathLike) -> Path:
    """Write weights to a safetensors file atomically (used by tests and tools)."""
    from safetensors.numpy import save

    from porter.fsutil import atomic_write

    data = save({k: np.ascontiguousarray(v) for k, v in weights.items()})
    return atomic_write(path, data)
