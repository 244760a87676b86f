from __future__ import annotations

import copy

import numpy as np
import pytest

from porter.megakernel.dag import build_dag
from porter.megakernel.encode import encode
from porter.megakernel.hw import HwFigures
from porter.megakernel.plan import build_plan
from porter.megakernel.scheduler import list_schedule
from porter.validation.megakernel_vm import (LOGITS_RTOL, MegakernelVM, VMError, caches_from_reference,
                                             logits_error, run_step)
from porter.validation.model_config import load_model_config
from porter.validation.reference_llama import KVCache, ReferenceLlama
from porter.validation.weights import BF16, random_weights

HOPPER = HwFigures(132, 4.8e12)
BLACKWELL = HwFigures(148, 7.7e12)


def _reference(model, pos, seed=1):
    cfg = load_model_config(model)
    w = random_weights(cfg, seed=seed)
    ref = ReferenceLlama(cfg, w)
    prompt = np.random.default_rng(seed).integers(0, cfg.vocab_size, pos)
    _, cache = ref.prefill(list(prompt))
    return cfg, w, ref, cache


@pytest.mark.parametrize("model, pos", [("tiny", 0), ("tiny", 21), ("tiny-gqa4", 45)])
@pytest.mark.parametrize("fuse", [True, False])
@pytest.mark.parametrize("arch, sched", [(HOPPER, "list"), (BLACKWELL, "round_robin")])
def test_vm_matches_fp64_reference(model, pos, fuse, arch, sched):
    cfg, w, ref, cache = _reference(model, pos)
    token = 11
    plan = build_plan(arch, cfg, pos=pos, scheduler=sched, token=token, fuse=fuse)
    logits, nxt, vm = run_step(plan["program"], cfg, w, caches_from_reference(cfg, cache, pos))
    ref_logits = ref.decode_step(token, pos, cache)
    assert logits_error(logits, ref_logits) <= LOGITS_RTOL
    assert nxt == int(np.argmax(logits))
    assert nxt == int(np.argmax(ref_logits))
    # the K/V the step appended at pos, against the reference's
    for l in range(cfg.num_layers):
        k = vm.by_name(f"cache.k.{l}")[pos].astype(np.float64)
        np.testing.assert_allclose(k, cache.k[l][pos].reshape(-1), rtol=2e-2, atol=2e-2)
        assert not vm.by_name(f"cache.v.{l}")[pos + 1:].astype(np.float32).any()


def test_every_interleaving_gives_the_same_bits():
    cfg, w, ref, cache = _reference("tiny-gqa4", 17)
    plan = build_plan(HOPPER, cfg, pos=17, token=5)
    caches = caches_from_reference(cfg, cache, 17)
    outs = [run_step(plan["program"], cfg, w, caches, order=o, seed=s)[0]
            for o, s in (("round_robin", 0), ("reverse", 0), ("random", 1), ("random", 2))]
    for o in outs[1:]:
        assert o.tobytes() == outs[0].tobytes()


def test_multi_step_greedy_decode_tracks_reference():
    cfg, w, ref, cache = _reference("tiny", 6)
    caches = caches_from_reference(cfg, cache, 6)
    token = 3
    for pos in range(6, 10):
        plan = build_plan(BLACKWELL, cfg, pos=pos, token=token)
        logits, nxt, vm = run_step(plan["program"], cfg, w, caches)
        ref_logits = ref.decode_step(token, pos, cache)
        assert logits_error(logits, ref_logits) <= LOGITS_RTOL
        assert nxt == int(np.argmax(ref_logits))
        caches = {name: vm.by_name(name) for name in caches}      # the VM's own cache carries on
        token = nxt


def test_vm_detects_deadlock():
    cfg = load_model_config("tiny")
    g = build_dag(cfg, HOPPER, pos=2)
    queues = copy.deepcopy(list_schedule(g, HOPPER))
    for q in queues:
        if 0 in q:
            q.remove(0)
    next(q for q in queues if q).append(0)
    prog = encode(g, queues)
    with pytest.raises(VMError, match="deadlock"):
        MegakernelVM(prog, cfg, random_weights(cfg)).run()


def test_vm_rejects_wrong_weights():
    cfg = load_model_config("tiny")
    plan = build_plan(HOPPER, cfg, pos=0)
    w = random_weights(cfg)
    w["model.norm.weight"] = np.zeros(3, dtype=BF16)
    with pytest.raises(VMError, match="model.norm.weight shape"):
        MegakernelVM(plan["program"], cfg, w)
    del w["model.norm.weight"]
    with pytest.raises(VMError, match="missing"):
        MegakernelVM(plan["program"], cfg, w)


def _full_sequence_logits(cfg, w, toks):
    """Independent check of the reference: all positions at once, causal mask, no cache."""
    W = {k: np.asarray(v, dtype=np.float64) for k, v in w.items()}
    T, hd, nh, nkv = len(toks), cfg.head_dim, cfg.num_attention_heads, cfg.num_key_value_heads
    cos, sin = cfg.rope_tables(T)
    cos, sin = np.concatenate([cos, cos], 1)[:, None, :], np.concatenate([sin, sin], 1)[:, None, :]

    def rope(x):                                   # x [T, heads, hd]
        rot = np.concatenate([-x[..., hd // 2:], x[..., :hd // 2]], -1)
        return x * cos + rot * sin

    def norm(x, wt):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + cfg.rms_norm_eps) * wt

    x = W["model.embed_tokens.weight"][toks]
    mask = np.triu(np.full((T, T), -np.inf), 1)
    for l in range(cfg.num_layers):
        p = f"model.layers.{l}."
        h = norm(x, W[p + "input_layernorm.weight"])
        q = rope((h @ W[p + "self_attn.q_proj.weight"].T).reshape(T, nh, hd))
        k = rope((h @ W[p + "self_attn.k_proj.weight"].T).reshape(T, nkv, hd))
        v = (h @ W[p + "self_attn.v_proj.weight"].T).reshape(T, nkv, hd)
        k, v = np.repeat(k, cfg.group_size, 1), np.repeat(v, cfg.group_size, 1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd) + mask
        pr = np.exp(s - s.max(-1, keepdims=True))
        pr /= pr.sum(-1, keepdims=True)
        o = np.einsum("hts,shd->thd", pr, v).reshape(T, -1)
        x = x + o @ W[p + "self_attn.o_proj.weight"].T
        h = norm(x, W[p + "post_attention_layernorm.weight"])
        gt, up = h @ W[p + "mlp.gate_proj.weight"].T, h @ W[p + "mlp.up_proj.weight"].T
        x = x + (gt / (1 + np.exp(-gt)) * up) @ W[p + "mlp.down_proj.weight"].T
    return norm(x[-1], W["model.norm.weight"]) @ W[cfg.lm_head_name()].T


@pytest.mark.parametrize("model", ["tiny", "tiny-gqa4"])
def test_reference_decode_equals_full_sequence_forward(model):
    cfg = load_model_config(model)
    w = random_weights(cfg, seed=2)
    toks = list(np.random.default_rng(2).integers(0, cfg.vocab_size, 40))
    logits, cache = ReferenceLlama(cfg, w).prefill(toks, KVCache.empty(cfg))
    np.testing.assert_allclose(logits, _full_sequence_logits(cfg, w, toks), rtol=1e-9, atol=1e-9)
    assert cache.length == 40 and logits.std() > 0.1


@pytest.mark.slow
@pytest.mark.parametrize("arch_name", ["hopper", "blackwell"])
def test_llama_1b_plan_shapes(arch_name):
    from porter.descriptor.arch import load_arch
    arch = load_arch(arch_name)
    cfg = load_model_config("llama-3.2-1b")
    plan = build_plan(arch, cfg, pos=1024)
    prog = plan["program"]
    assert prog.instructions.shape[0] == arch.sm_count and prog.instructions.shape[2] == 32
    shapes = cfg.weight_shapes()
    for t in prog.tensors:
        if t.kind == "weight":
            assert t.shape == shapes[t.name]
    assert {t.name for t in prog.tensors if t.kind == "weight"} == set(shapes)
    assert prog.tensor("cache.k.15").shape == (cfg.max_seq_len, 512)
    assert prog.tensor("buf.o_part").shape[0] == 32
    assert 0.3 < plan["floor_ratio"] < 0.95
    assert plan["memory_floor_us"] == pytest.approx(cfg.param_count() * 2 / arch.hbm_bandwidth_bytes_per_s * 1e6)
    assert plan["per_sm"]["max"] - plan["per_sm"]["min"] < 0.5 * plan["per_sm"]["mean"]


def test_unfused_program_uses_every_opcode():
    from porter.megakernel.isa import Opcode, W
    cfg = load_model_config("tiny")
    plan = build_plan(HOPPER, cfg, pos=3, fuse=False)
    used = {int(x) for x in np.unique(plan["instruction_tensor"][:, :, W.OP])}
    assert used == {int(o) for o in Opcode}


from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

from porter.megakernel.checker import check_races  # noqa: E402
from porter.validation.model_config import config_from_dict  # noqa: E402


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(hd=st.sampled_from([8, 16]), nkv=st.integers(1, 2), gs=st.integers(1, 3),
       hidden=st.sampled_from([32, 48, 64]), mlp=st.sampled_from([32, 80, 96]),
       vocab=st.integers(40, 300), layers=st.integers(1, 2), pos=st.integers(0, 40),
       fuse=st.booleans(), sms=st.sampled_from([3, 7, 132]), sched=st.sampled_from(["list", "round_robin"]),
       tied=st.booleans())
def test_vm_matches_reference_on_random_shapes(hd, nkv, gs, hidden, mlp, vocab, layers, pos, fuse, sms,
                                               sched, tied):
    cfg = config_from_dict(dict(
        name="rand", num_layers=layers, hidden_size=hidden, num_attention_heads=nkv * gs,
        num_key_value_heads=nkv, head_dim=hd, intermediate_size=mlp, vocab_size=vocab,
        rms_norm_eps=1e-5, rope_theta=10000.0, max_seq_len=48, tie_word_embeddings=tied))
    w = random_weights(cfg, seed=pos)
    ref = ReferenceLlama(cfg, w)
    _, cache = ref.prefill(list(np.random.default_rng(pos).integers(0, vocab, pos)))
    plan = build_plan(HwFigures(sms, 1e12), cfg, pos=pos, scheduler=sched, token=1, fuse=fuse)
    check_races(plan["dag"])
    logits, nxt, _ = run_step(plan["program"], cfg, w, caches_from_reference(cfg, cache, pos), order="random")
    ref_logits = ref.decode_step(1, pos, cache)
    assert logits_error(logits, ref_logits) <= LOGITS_RTOL
