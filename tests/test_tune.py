"""porter tune without Ray's runtime: the space, buckets, the search on the in-process
executor, the tuning file and how kernel variants read it back (fresh, stale), the cache
(a rerun runs nothing), retries, and the report."""

from __future__ import annotations

import json
import os

import pytest
import yaml

from porter.descriptor.arch import load_arch
from porter.tuning import table
from porter.tuning.buckets import bucket_of, sweep_shapes
from porter.tuning.cache import ResultCache
from porter.tuning.engine import OK, LocalExecutor, Task
from porter.tuning.sweep import Sweep, SweepOptions

KERNEL = "attention.hd64"
PINNED = {"rescale_threshold": 8, "poly_exp2_share": 0}   # the sweep covers the other knobs: a test-sized space
SHAPE = "4x16x16x4096x4096"


@pytest.fixture(scope="module")
def blackwell():
    return load_arch("blackwell")


def _spec(arch, name):
    from porter.kernels.knobs import spec_with_knobs

    with table.untuned():
        return spec_with_knobs(arch, name, {})


def test_buckets_round_up_to_powers_of_two(blackwell):
    gemm = _spec(blackwell, "gemm.bf16.pair")
    assert bucket_of(gemm, "8192x8192x8192") == "m8192.n8192.k8192"
    assert bucket_of(gemm, "5000x3000x1000") == "m8192.n4096.k1024"
    att = _spec(blackwell, "attention.hd128.causal")
    assert bucket_of(att, "4x16x16x3000x3000") == "hd128.causal.s4096"
    assert bucket_of(_spec(blackwell, "megakernel.llama-decode"), "1000") == "pos1024"
    # two shapes of one bucket sweep once, at the first given
    assert sweep_shapes(gemm, ["4096x4096x4096", "3000x4000x4096"]) == {"m4096.n4096.k4096": "4096x4096x4096"}


def _flaky(payload):
    """Fails on its first call for a given marker file, succeeds after (a retry's worth)."""
    marker = payload["marker"]
    if not os.path.exists(marker):
        open(marker, "w").close()
        raise RuntimeError("first attempt fails")
    return {"value": payload["value"]}


def _broken(payload):
    raise ValueError(f"candidate {payload['value']} is broken")


def test_local_executor_retries_once_then_records(tmp_path):
    tasks = [Task("a", f"{__name__}:_flaky", {"marker": str(tmp_path / "m"), "value": 1}, "flaky"),
             Task("b", f"{__name__}:_broken", {"value": 2}, "broken")]
    seen = []
    out = LocalExecutor().run(tasks, on_done=seen.append)
    assert out["a"].status == OK and out["a"].result == {"value": 1} and out["a"].attempts == 2
    assert out["b"].status == "failed" and out["b"].attempts == 2 and "candidate 2 is broken" in out["b"].error
    assert [o.key for o in seen] == ["a", "b"]


@pytest.fixture(scope="module")
def swept(blackwell, tmp_path_factory):
    """One real sweep (screen, compile, emulate) on the in-process executor."""
    cache = ResultCache(tmp_path_factory.mktemp("tune-cache"))
    sweep = Sweep(LocalExecutor(), cache, options=SweepOptions(budget=3, finalists=1, shapes=(SHAPE,), fixed=PINNED))
    result = sweep.kernel(blackwell, KERNEL, "B200")
    return sweep, cache, result


def test_sweep_screens_compiles_and_emulates(swept):
    import math

    from porter.kernels.knobs import knob_space

    _, _, s = swept
    space = knob_space(load_arch("blackwell"), KERNEL) | {k: (v,) for k, v in PINNED.items()}
    assert s.space_size == math.prod(len(v) for v in space.values()) and 0 < s.legal <= s.space_size
    assert sum(s.pruned.values()) == s.space_size - s.legal
    assert len(s.candidates) == 3 and s.candidates[0]["knobs"] == s.default_knobs   # the default is always compiled
    (bucket, row), = s.buckets.items()
    assert bucket == "hd64.s4096"
    chosen, default = row["chosen"], row["default"]
    assert chosen["level"] == "emulated" and chosen["emulation"] == "passed"
    assert chosen["time_us"] <= default["time_us"]           # never slower than the default, by the model
    assert "L0 only" in s.ranker_note
    assert s.failures == []


def test_a_rerun_hands_out_nothing(swept, blackwell):
    sweep, cache, first = swept
    again = Sweep(LocalExecutor(), cache, options=sweep.options).kernel(blackwell, KERNEL, "B200")
    assert again.tasks["run"] == 0 and again.tasks["cached"] == first.tasks["run"] + first.tasks["cached"]
    assert again.buckets == first.buckets


def test_the_tuning_file_is_read_back_by_the_variants(swept, blackwell, tmp_path, monkeypatch, capsys):
    from porter.commands.kernel import find_kernel
    from porter.tuning.entries import tuned_note

    _, _, s = swept
    monkeypatch.setenv("PORTER_TUNING_DIR", str(tmp_path))
    path = table.write(blackwell, "B200", [s])
    assert path == tmp_path / "blackwell.B200.yaml"
    data = yaml.safe_load(path.read_text())
    entry = data["kernels"][KERNEL]
    b = entry["buckets"][entry["default_bucket"]]
    assert entry["source_hash"] == s.source_hash and entry["porter_commit"]
    assert b["level"] == "emulated" and "not measured" in b["predicted"]["label"]
    assert b["default"]["predicted"]["time_us"] >= b["predicted"]["time_us"]

    spec, = find_kernel(KERNEL, blackwell)
    assert tuned_note(blackwell, spec) == f"{path}, bucket {entry['default_bucket']}"
    from porter.kernels.knobs import spec_with_knobs
    from porter.tuning.entries import norm_knobs

    with table.untuned():
        assert spec.to_dict() == spec_with_knobs(blackwell, KERNEL, norm_knobs(b["knobs"])).to_dict()

    # stale: the sources it was tuned on are not today's
    entry["source_hash"] = "0" * 16
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    spec, = find_kernel(KERNEL, blackwell)
    find_kernel(KERNEL, blackwell)
    err = capsys.readouterr().err
    assert tuned_note(blackwell, spec) == ""
    assert err.count("stale, ignored") == 1 and err.count("\n") == 1


def test_report_marks_default_chosen_and_the_front(swept):
    from porter.tuning.report import page, pareto

    _, _, s = swept
    text = page("blackwell", "B200", [s], {"executor": "local", "seconds": 1.0})
    assert "not measured" in text and "Pareto front" in text and "chosen" in text and "<svg" in text
    assert pareto([(100, 5.0), (120, 4.0), (130, 6.0), (90, 3.0)]) == [(90, 3.0), (100, 5.0), (130, 6.0)]


def test_cli_refuses_bad_input_in_one_line(capsys):
    from porter.cli import main

    assert main(["tune", "blackwell", "--kernel", "gemm.nope"]) == 2
    assert main(["tune", "blackwell", "--budget", "0"]) == 2
    assert main(["tune", "blackwell", "--kernel", "gemm.bf16.pair", "--shapes", "12x"]) == 2
    assert main(["tune", "blackwell", "--executor", "local", "--address", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 4 and all(line.startswith("porter: error: ") for line in err)
    json.dumps(err)
