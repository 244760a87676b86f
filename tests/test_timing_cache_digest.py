"""The timing model's on-disk caches (predictions, L1 measurements) check each entry's sha256.

An entry whose stored value no longer matches its digest (a flipped byte that still parses)
is discarded, counted as corrupt, and computed again: never used.
"""

from __future__ import annotations

import json

from porter.compile import cache_entry
from porter.timing import cache


def _entry_path(tmp_path):
    [path] = list((tmp_path / "predict-l1").rglob("*.json"))
    return path


def test_l1_entry_is_reused_and_a_corrupt_one_recomputed(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path))
    calls = []

    def compute():
        calls.append(1)
        return {"step_cycles": 1302.0, "bound": "tensor"}

    inputs = {"kernel": "gemm.bf16.pair", "shape": "1x2x3"}
    first = cache.l1_cached(inputs, compute)
    assert cache.l1_cached(inputs, compute) == first and len(calls) == 1   # from disk
    path = _entry_path(tmp_path)
    entry = json.loads(path.read_text())
    entry["value"]["step_cycles"] = 1.0                                    # parses, digest does not match
    path.write_text(json.dumps(entry))
    before = cache_entry.stats.corrupt
    again = cache.l1_cached(inputs, compute)
    assert again == first and len(calls) == 2
    assert cache_entry.stats.corrupt == before + 1
    assert json.loads(path.read_text())["value"] == first                  # rebuilt


def test_an_entry_of_the_old_format_is_a_miss_not_corrupt(tmp_path, monkeypatch):
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path))
    inputs = {"kernel": "k"}
    cache.l1_cached(inputs, lambda: {"v": 1})
    path = _entry_path(tmp_path)
    entry = json.loads(path.read_text())
    path.write_text(json.dumps({"key": entry["key"], "value": {"v": 2}}))  # no sha256: written before digests
    before = cache_entry.stats.corrupt
    assert cache.l1_cached(inputs, lambda: {"v": 1}) == {"v": 1}
    assert cache_entry.stats.corrupt == before
