"""Attention references, the FlashAttention kernel model, and the CPU check."""
from __future__ import annotations

import math

import numpy as np
import pytest

from porter.errors import PorterError
from porter.validation import attention_numerics as A
from porter.validation import reference_attention as RA


def _naive(q, k, v, causal, scale=None):
    """Loop-by-loop float64 attention with an explicit bottom-right mask."""
    b, hq, sq, d = q.shape
    hkv, sk = k.shape[1], k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    o = np.zeros_like(q, dtype=np.float64)
    lse = np.full((b, hq, sq), -np.inf)
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            for i in range(sq):
                js = [j for j in range(sk) if not causal or j <= i + sk - sq]
                if not js:
                    continue
                s = np.array([q[bi, h, i] @ k[bi, kh, j] for j in js]) * scale
                w = np.exp(s - s.max())
                o[bi, h, i] = (w / w.sum()) @ v[bi, kh, js]
                lse[bi, h, i] = s.max() + math.log(w.sum())
    return o, lse


def test_causal_mask_is_bottom_right_aligned():
    m = RA.causal_mask(2, 4)
    assert m.tolist() == [[True, True, True, False], [True, True, True, True]]
    m = RA.causal_mask(4, 2)
    assert m.tolist() == [[False, False], [False, False], [True, False], [True, True]]
    assert np.array_equal(RA.causal_mask(3, 3), np.tril(np.ones((3, 3), bool)))


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("sq,sk", [(5, 5), (3, 7), (6, 4)])
def test_reference_matches_naive_loops_with_gqa(causal, sq, sk):
    q, k, v = A.random_qkv(2, 4, 2, sq, sk, 8, seed=sq * 10 + sk)
    o, lse = RA.reference_attention(q, k, v, causal)
    o2, lse2 = _naive(q, k, v, causal)
    np.testing.assert_allclose(o, o2, rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(np.isinf(lse), np.isinf(lse2))
    fin = np.isfinite(lse2)
    np.testing.assert_allclose(lse[fin], lse2[fin], rtol=1e-12)


def test_gqa_equals_repeated_heads():
    q, k, v = A.random_qkv(1, 6, 2, 9, 11, 16, seed=4)
    o, lse = RA.reference_attention(q, k, v, causal=True)
    o_rep, lse_rep = RA.reference_attention(q, np.repeat(k, 3, 1), np.repeat(v, 3, 1), causal=True)
    np.testing.assert_array_equal(o, o_rep)
    np.testing.assert_array_equal(lse, lse_rep)


def test_lse_is_natural_log_sum_exp():
    q, k, v = A.random_qkv(1, 1, 1, 4, 6, 8, seed=5)
    _, lse = RA.reference_attention(q, k, v, softmax_scale=0.3)
    s = (q[0, 0] @ k[0, 0].T) * 0.3
    np.testing.assert_allclose(lse[0, 0], np.log(np.exp(s).sum(-1)), rtol=1e-12)
    _, lse_model = RA.flash_attention_model(q, k, v, softmax_scale=0.3, block_n=4)
    assert lse_model.dtype == np.float32
    np.testing.assert_allclose(lse_model, lse, atol=1e-5)


def test_rows_without_keys_give_zero_and_minus_inf():
    q, k, v = A.random_qkv(1, 2, 1, 6, 3, 8, seed=6)
    for fn in (RA.reference_attention, RA.flash_attention_model, RA.attention_same_precision):
        o, lse = fn(q, k, v, True)
        assert not o[:, :, :3].any() and np.all(np.isneginf(lse[:, :, :3]))
        assert np.all(np.isfinite(lse[:, :, 3:])) and np.all(np.isfinite(o))


@pytest.mark.parametrize("block_n", [16, 64, 128])
def test_model_close_to_reference_for_any_tile(block_n):
    q, k, v = A.random_qkv(1, 2, 2, 40, 100, 32, seed=7)    # 100 keys: a tail tile
    o, lse = RA.flash_attention_model(q, k, v, causal=True, block_n=block_n)
    ref, lse_ref = RA.reference_attention(q, k, v, causal=True)
    assert np.max(np.abs(o - ref)) < 2 ** -6
    np.testing.assert_allclose(lse, lse_ref, atol=1e-5)


def test_model_output_is_bf16():
    import ml_dtypes
    q, k, v = A.random_qkv(1, 1, 1, 8, 8, 16, seed=8)
    o, _ = RA.flash_attention_model(q, k, v)
    np.testing.assert_array_equal(o, o.astype(np.float32).astype(ml_dtypes.bfloat16).astype(np.float64))


def test_shape_errors():
    q, k, v = A.random_qkv(1, 3, 2, 4, 4, 8)
    with pytest.raises(PorterError, match="Hq % Hkv"):
        RA.reference_attention(q, k, v)
    with pytest.raises(PorterError, match="4-D"):
        RA.reference_attention(q[0], k, v)
    with pytest.raises(PorterError, match="unknown fault"):
        RA.flash_attention_model(q[:, :2], k, v, fault="typo")
    with pytest.raises(PorterError, match="positive"):
        A.check_attention(64, False, sq=0)


@pytest.mark.parametrize("case", A.ALL_CASES)
def test_check_attention_passes(case):
    r = A.check_attention(*case, seed=0)
    assert r["passed"], r
    for key in ("variant", "shape", "max_abs_err", "rel_fro_err", "deepgemm_diff", "sqnr_db",
                "lse_max_err", "tolerance", "reason", "passed"):
        assert key in r


def test_check_attention_all_seeds_and_tiles():
    assert all(r["passed"] for r in A.check_attention_all(seeds=(1,), block_n=64))


# ------------------------------------------------ a check that cannot fail is a defect

@pytest.mark.parametrize("case", [A.ALL_CASES[i] for i in (0, 1, 4, 5)])
def test_missing_rescale_fails(case):
    r = A.check_attention(*case, seed=0, block_n=64, fault="no_rescale")
    assert not r["passed"] and not r["passed_output"]


@pytest.mark.parametrize("case", [(128, False, 1, 4, 2, 96, 300), (256, False, 1, 1, 1, 33, 257)])
def test_missing_tail_mask_fails(case):
    r = A.check_attention(*case, seed=0, fault="no_tail_mask")
    assert not r["passed"] and not r["passed_lse"]


def test_missing_log2e_fold_fails():
    r = A.check_attention(64, True, seed=0, fault="no_log2e")
    assert not r["passed"] and not r["passed_output"] and not r["passed_lse"]


def test_wrong_mask_alignment_fails():
    """Top-left causal alignment where bottom-right is meant fails the check."""
    q, k, v = A.random_qkv(1, 2, 2, 32, 96, 64, seed=9)
    ref, lse_ref = RA.reference_attention(q, k, v, causal=True)
    same, _ = RA.attention_same_precision(q, k, v, causal=True)
    # top-left: query i sees keys j <= i, i.e. bottom-right with Sk cut to Sq
    out, lse = RA.flash_attention_model(q, k[:, :, :32], v[:, :, :32], causal=True)
    r = A.check_attention_outputs(out, lse, ref, lse_ref, same)
    assert not r["passed"]


# ---- FA4-style softmax of the tcgen05 mainloop: lazy rescaling, polynomial exp2 ----------

def _growing_scores(seed=3, d=64, sk=512):
    """q, k whose later keys score far higher (k rows scaled up tile by tile), so a row's max
    grows by more than 2^8 between some tiles and by less between others."""
    q, k, v = A.random_qkv(1, 2, 2, 64, sk, d, seed)
    k = RA.round_bf16(k * np.repeat(np.array([0.5, 1.0, 4.0, 4.5]), sk // 4)[None, None, :, None])
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
def test_lazy_rescale_normalises_exactly_within_the_policy(causal):
    q, k, v = _growing_scores()
    ref, lse_ref = RA.reference_attention(q, k, v, causal)
    same, _ = RA.attention_same_precision(q, k, v, causal)
    out0, lse0, n0 = A.tcgen05_softmax_model(q, k, v, causal, 128, None, 0.0)
    out8, lse8, n8 = A.tcgen05_softmax_model(q, k, v, causal, 128, None, 8.0)
    assert n8 < n0 and n8 > 0, (n0, n8)        # both paths taken: some rescales skipped, some not
    plain, plain_lse = RA.flash_attention_model(q, k, v, causal, 128)
    assert np.array_equal(out0, plain) and np.array_equal(lse0, plain_lse)   # threshold 0 = the classic model
    res = A.check_attention_outputs(out8, lse8, ref, lse_ref, same)
    assert res["passed"], res
    assert np.max(np.abs(lse8 - lse0)) < 1e-5


def test_exp2_polynomial_accuracy_against_bf16_p():
    x = np.linspace(-126, 8, 400001).astype(np.float32)
    got = A.exp2_poly_fp32(x).astype(np.float64)
    rel = np.abs(got / np.exp2(x.astype(np.float64)) - 1)
    assert rel.max() <= A.EXP2_POLY_MAX_REL_ERR < 2.0 ** -9 / 100      # far below bf16 P's half ulp
    # masked scores and ftz: exactly 0, never NaN
    assert A.exp2_poly_fp32(np.array([-np.inf, -200.0, -126.5], np.float32)).tolist() == [0.0, 0.0, 0.0]
    # at integers the exponent trick is exact up to the polynomial's value at 0
    assert abs(A.exp2_poly_fp32(np.float32(5.0)) / 32 - 1) <= A.EXP2_POLY_MAX_REL_ERR


@pytest.mark.parametrize("share", [0.5, 1.0])
def test_poly_exp2_share_passes_every_case(share):
    for case in A.ALL_CASES:
        res = A.check_attention(*case, rescale_threshold=8.0, poly_exp2_share=share)
        assert res["passed"], (case, res)
    assert A.poly_columns(128, 0.5).sum() == 64 and A.poly_columns(128, 0.0).sum() == 0


def test_fa4_options_are_checked():
    with pytest.raises(PorterError, match="poly_exp2_share"):
        A.check_attention(64, False, poly_exp2_share=1.5)
    with pytest.raises(PorterError, match="fault"):
        A.check_attention(64, False, rescale_threshold=8.0, fault="no_rescale")
