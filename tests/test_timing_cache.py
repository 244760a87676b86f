"""porter.timing.cache (issue 16 item 10): a prediction is computed once per content key
(descriptor, product, kernel spec with its knobs, shape, the model's source), then read back."""

from __future__ import annotations

import pytest

from porter.descriptor.arch import load_arch
from porter.kernels.knobs import spec_with_knobs
from porter.timing import cache, predict


@pytest.fixture
def cache_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_second_call_hits_and_equals_a_fresh_prediction(cache_dir):
    arch = load_arch("hopper")
    spec = spec_with_knobs(arch, "gemm.bf16", {})
    stats: dict = {}
    first = cache.cached_predict(arch, spec, product="H100 SXM", shape="8192x8192x8192", stats=stats)
    again = cache.cached_predict(arch, spec, product="H100 SXM", shape="8192x8192x8192", stats=stats)
    assert stats == {"misses": 1, "hits": 1}
    assert first == again == predict(arch, spec, product="H100 SXM", shape="8192x8192x8192").to_dict()
    assert again["label"] == "predicted by porter's timing model, not measured"


def test_knob_product_and_shape_change_the_key(cache_dir):
    arch = load_arch("hopper")
    base = spec_with_knobs(arch, "gemm.bf16", {})
    one = spec_with_knobs(arch, "gemm.bf16", {"consumers": 1})
    k = cache.key(arch, base, "H100 SXM", "8192x8192x8192")
    assert k != cache.key(arch, one, "H100 SXM", "8192x8192x8192")
    assert k != cache.key(arch, base, "H200 SXM", "8192x8192x8192")
    assert k != cache.key(arch, base, "H100 SXM", "4096x4096x4096")
    assert k == cache.key(load_arch("hopper"), spec_with_knobs(arch, "gemm.bf16", {}), "H100 SXM", "8192x8192x8192")


def test_a_corrupt_entry_is_a_miss_and_is_rewritten(cache_dir):
    arch = load_arch("hopper")
    spec = spec_with_knobs(arch, "gemm.fp8", {})
    k = cache.key(arch, spec, "H100 SXM", "8192x8192x8192")
    path = cache_dir / "predict" / k[:2] / f"{k}.json"
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    stats: dict = {}
    out = cache.cached_predict(arch, spec, product="H100 SXM", shape="8192x8192x8192", stats=stats)
    assert stats == {"misses": 1} and out["kernel"] == "gemm.fp8"
    assert cache.cached_predict(arch, spec, product="H100 SXM", shape="8192x8192x8192", stats=stats) == out


def test_an_l1_prediction_is_cached_and_a_second_call_simulates_nothing(cache_dir, monkeypatch):
    """L1's key adds its level and the simulator's (and kernel's) source to L0's; the second
    call reads the entry back without running the timed simulator."""
    from porter.timing import l1

    arch = load_arch("blackwell")
    spec = spec_with_knobs(arch, "gemm.bf16.pair", {})
    assert cache.key(arch, spec, "B200", "8192x8192x8192", "L1") != cache.key(arch, spec, "B200", "8192x8192x8192")
    runs = []
    real = l1._simulate
    monkeypatch.setattr(l1, "_simulate", lambda *a: runs.append(1) or real(*a))
    monkeypatch.setattr(l1, "_MEASURED", {})          # no in-process reuse: the first call simulates
    stats: dict = {}
    first = cache.cached_predict(arch, spec, product="B200", shape="8192x8192x8192", stats=stats, level="L1")
    simulated = len(runs)
    assert simulated > 0 and first["level"] == "L1"
    monkeypatch.setattr(l1, "_MEASURED", {})
    again = cache.cached_predict(arch, spec, product="B200", shape="8192x8192x8192", stats=stats, level="L1")
    assert len(runs) == simulated and stats == {"misses": 1, "hits": 1} and again == first
    # an L0 entry for the same inputs is its own
    l0 = cache.cached_predict(arch, spec, product="B200", shape="8192x8192x8192", stats=stats)
    assert l0["level"] == "L0" and len(runs) == simulated
