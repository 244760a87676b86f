"""fp64 reference for one Llama decode step with a KV cache (plain numpy, batch 1).

Deliberately the textbook formulation and independent of porter.megakernel: full
matrices, HF Llama conventions (rotate-half RoPE, RMSNorm with weight, SiLU-gated MLP,
grouped-query attention). Weights are taken as given (bf16 values widened to fp64).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .model_config import ModelConfig


@dataclass
class KVCache:
    """fp64 caches per layer, [max_seq, n_kv_heads, head_dim]; positions < length are filled."""

    k: list[np.ndarray]
    v: list[np.ndarray]
    length: int = 0

    @classmethod
    def empty(cls, cfg: ModelConfig) -> "KVCache":
        shape = (cfg.max_seq_len, cfg.num_key_value_heads, cfg.head_dim)
        return cls([np.zeros(shape) for _ in range(cfg.num_layers)],
                   [np.zeros(shape) for _ in range(cfg.num_layers)])


@dataclass
class ReferenceLlama:
    cfg: ModelConfig
    weights: dict[str, np.ndarray]
    _w64: dict[str, np.ndarray] = field(default_factory=dict, repr=False)

    def w(self, name: str) -> np.ndarray:
        if name not in self._w64:
            self._w64[name] = np.asarray(self.weights[name], dtype=np.float64)
        return self._w64[name]

    def _rmsnorm(self, x: np.ndarray, weight: np.ndarray) -> np.ndarray:
        return x / np.sqrt(np.mean(x * x) + self.cfg.rms_norm_eps) * weight

    def _rope(self, x: np.ndarray, pos: int) -> np.ndarray:
        """x: [heads, head_dim]; rotate-half RoPE at position pos."""
        ang = pos * self.cfg.rope_inv_freq()
        cos = np.concatenate([np.cos(ang), np.cos(ang)])
        sin = np.concatenate([np.sin(ang), np.sin(ang)])
        half = x.shape[-1] // 2
        rot = np.concatenate([-x[..., half:], x[..., :half]], axis=-1)
        return x * cos + rot * sin

    def decode_step(self, token: int, pos: int, cache: KVCache) -> np.ndarray:
        """Logits (fp64 [vocab]) for ``token`` at ``pos``; appends K/V at ``pos`` to ``cache``."""
        c = self.cfg
        if pos != cache.length:
            raise ValueError(f"cache holds {cache.length} positions, asked to decode at {pos}")
        nh, nkv, hd = c.num_attention_heads, c.num_key_value_heads, c.head_dim
        x = self.w("model.embed_tokens.weight")[token].copy()
        for n in range(c.num_layers):
            p = f"model.layers.{n}."
            xn = self._rmsnorm(x, self.w(p + "input_layernorm.weight"))
            q = (self.w(p + "self_attn.q_proj.weight") @ xn).reshape(nh, hd)
            k = (self.w(p + "self_attn.k_proj.weight") @ xn).reshape(nkv, hd)
            v = (self.w(p + "self_attn.v_proj.weight") @ xn).reshape(nkv, hd)
            q, k = self._rope(q, pos), self._rope(k, pos)
            cache.k[n][pos] = k
            cache.v[n][pos] = v
            keys = cache.k[n][: pos + 1]        # [T, nkv, hd]
            vals = cache.v[n][: pos + 1]
            attn = np.empty((nh, hd))
            for h in range(nh):
                g = h // c.group_size
                s = keys[:, g, :] @ q[h] / np.sqrt(hd)
                pr = np.exp(s - s.max())
                pr /= pr.sum()
                attn[h] = pr @ vals[:, g, :]
            x = x + self.w(p + "self_attn.o_proj.weight") @ attn.reshape(-1)
            xn = self._rmsnorm(x, self.w(p + "post_attention_layernorm.weight"))
            gate = self.w(p + "mlp.gate_proj.weight") @ xn
            up = self.w(p + "mlp.up_proj.weight") @ xn
            act = gate / (1.0 + np.exp(-gate)) * up
            x = x + self.w(p + "mlp.down_proj.weight") @ act
        xn = self._rmsnorm(x, self.w("model.norm.weight"))
        cache.length = pos + 1
        return self.w(c.lm_head_name()) @ xn

    def prefill(self, tokens: list[int], cache: KVCache | None = None) -> tuple[np.ndarray, KVCache]:
        """Run decode steps over ``tokens``; returns the last logits and the filled cache."""
        cache = KVCache.empty(self.cfg) if cache is None else cache
        logits = None
        for t in tokens:
            logits = self.decode_step(int(t), cache.length, cache)
        return logits, cache
