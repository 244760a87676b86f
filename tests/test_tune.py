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
    """One real sweep (screen, compile, L1, emulate) on the in-process executor, for both
    of the descriptor's products at once (they generate the same code: one set of tasks)."""
    cache = ResultCache(tmp_path_factory.mktemp("tune-cache"))
    sweep = Sweep(LocalExecutor(), cache, options=SweepOptions(budget=3, finalists=1, l1_top=2, shapes=(SHAPE,),
                                                               fixed=PINNED))
    b200, gb200 = sweep.kernels(blackwell, KERNEL, ["B200", "GB200"])
    return sweep, cache, b200, gb200


def test_sweep_screens_compiles_times_and_emulates(swept):
    import math

    from porter.kernels.knobs import knob_space

    _, _, s, other = swept
    space = knob_space(load_arch("blackwell"), KERNEL) | {k: (v,) for k, v in PINNED.items()}
    assert s.raw_space == math.prod(len(v) for v in space.values())
    # grid_ctas applies only to a persistent launch: the non-persistent ones are one each
    assert s.space_size < s.raw_space and set(s.collapsed) == {"grid_ctas applies only with persistent=true (collapsed)"}
    assert 0 < s.legal <= s.space_size and sum(s.pruned.values()) == s.space_size - s.legal
    assert len(s.candidates) == 3 and s.candidates[0]["knobs"] == s.default_knobs   # the default is always compiled
    (bucket, row), = s.buckets.items()
    assert bucket == "hd64.s4096"
    chosen, default = row["chosen"], row["default"]
    assert chosen["level"] == "emulated" and chosen["emulation"] == "passed"
    # ranked by L1 (the timed simulation), never slower than the default by it
    assert chosen["level_model"] == "L1" and chosen["l1"]["level"] == "L1"
    assert chosen["time_us"] <= default["time_us"] and chosen["time_us"] == chosen["l1"]["time_us"]
    assert chosen["l0"]["low"] <= chosen["l0"]["time_us"] <= chosen["l0"]["high"]
    assert "L1" in s.ranker_note and s.l1_separates[bucket]["timed"] >= 2
    assert s.failures == []
    # the second product shared every task (the first counts them) and has its own choice
    assert other.product == "GB200" and other.shared_with == ["B200"] and other.tasks["run"] == 0
    assert other.buckets[bucket]["chosen"]["level"] == "emulated"


def test_knob_rules_collapse_only_what_the_rules_refuse():
    """space.APPLIES against the knob rules on every kernel with both knobs: the neutral
    spelling is legal, every other value of the dependent knob is refused."""
    from porter.kernels.knobs import check_knobs, default_knobs, knob_space
    from porter.tuning.space import APPLIES, OMIT

    seen = set()
    for name in ("hopper", "blackwell"):
        arch = load_arch(name)
        with table.untuned():
            from porter.commands.tune import _kernels

            for k in _kernels(arch, None):
                space, dflt = knob_space(arch, k), default_knobs(arch, k)
                for dep, on, need, neutral in APPLIES:
                    if dep not in space or on not in space:
                        continue
                    for off in (v for v in space[on] if v != need):
                        knobs = dict(dflt, **{on: off})
                        ok = {kk: vv for kk, vv in knobs.items() if kk != dep} if neutral is OMIT else \
                            dict(knobs, **{dep: neutral})
                        assert check_knobs(arch, k, ok) is None, (k, ok)
                        for v in space[dep]:
                            if v != neutral:
                                assert check_knobs(arch, k, dict(knobs, **{dep: v})) is not None, (k, dep, v)
                        seen.add(dep)
    assert seen == {dep for dep, *_ in APPLIES}


def test_the_screen_ranks_by_predicts_own_central_time(blackwell):
    from porter.timing import predict
    from porter.tuning.model import point

    spec = _spec(blackwell, "gemm.bf16.pair")
    for product in ("B200", "GB200"):
        p = predict(blackwell, spec, product=product, shape="4096x4096x4096")
        q = point(blackwell, spec, product, "4096x4096x4096")
        assert q["time_us"] == p.time_us and q["bound"] == p.bound and q["tflops"] == p.tflops


def test_a_rerun_hands_out_nothing(swept, blackwell):
    sweep, cache, first, _ = swept
    again = Sweep(LocalExecutor(), cache, options=sweep.options).kernels(blackwell, KERNEL, ["B200", "GB200"])[0]
    assert again.tasks["run"] == 0 and again.tasks["cached"] == first.tasks["run"] + first.tasks["cached"]
    assert again.buckets == first.buckets


def test_the_tuning_file_is_read_back_by_the_variants(swept, blackwell, tmp_path, monkeypatch, capsys):
    from porter.commands.kernel import find_kernel
    from porter.tuning.entries import tuned_note

    _, _, s, _ = swept
    monkeypatch.setenv("PORTER_TUNING_DIR", str(tmp_path))
    path = table.write(blackwell, "B200", [s])
    assert path == tmp_path / "blackwell.B200.yaml"
    data = yaml.safe_load(path.read_text())
    entry = data["kernels"][KERNEL]
    b = entry["buckets"][entry["default_bucket"]]
    assert entry["source_hash"] == s.source_hash and entry["porter_commit"]
    assert b["level"] == "emulated" and "not measured" in b["predicted"]["label"]
    assert b["predicted"]["model"] == "L1" and b["predicted_l0"]["model"] == "L0"
    assert b["predicted_l0"]["low_us"] <= b["predicted_l0"]["time_us"] <= b["predicted_l0"]["high_us"]
    assert b["default"]["predicted"]["time_us"] >= b["predicted"]["time_us"]
    assert b["same_as_default"] == (b["knobs"] == b["default"]["knobs"])
    assert b["l0_agrees"] == (b["predicted_l0"]["time_us"] <= b["default"]["predicted_l0"]["time_us"])

    # an entry that changes the configuration (one that only confirms the default applies nothing)
    b["knobs"]["stages"], b["same_as_default"] = 2, False
    path.write_text(yaml.safe_dump(data))
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

    _, _, s, _ = swept
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


def test_target_says_which_kernels_ran_tuned_from_its_kernels_stage(swept, blackwell, tmp_path, monkeypatch, capsys):
    """porter target's "tuned:" line is the kernels stage's record (fresh and from the
    stage cache alike); an entry that only confirms the default applies nothing."""
    from porter.cli import main

    _, _, s, _ = swept
    monkeypatch.setenv("PORTER_TUNING_DIR", str(tmp_path / "tuning"))
    path = table.write(blackwell, "B200", [s])
    data = yaml.safe_load(path.read_text())
    b = data["kernels"][KERNEL]["buckets"][data["kernels"][KERNEL]["default_bucket"]]
    b["knobs"]["stages"], b["same_as_default"] = 2, False      # a legal configuration other than the default
    path.write_text(yaml.safe_dump(data))
    args = ["target", "blackwell", "--kernel", KERNEL, "--emulate", "off", "--device", "off", "--out", str(tmp_path / "b")]
    for _ in range(2):    # built, then from the stage cache
        capsys.readouterr()
        assert main(args) == 0
        line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("tuned:"))
        assert line.startswith(f"tuned: {KERNEL} ({path}, bucket ")
    b["same_as_default"] = True
    path.write_text(yaml.safe_dump(data))
    capsys.readouterr()
    assert main(args) == 0
    assert "tuned: none" in capsys.readouterr().out
