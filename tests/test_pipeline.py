"""``porter target`` as a pipeline, over the fake family (tests/test_pipeline_support.py):
artifacts, levels, caching (no NVRTC on a rerun, counted across worker processes),
resumption after an interruption, concurrent runs, exit codes, the no-device line."""

from __future__ import annotations

import json
import multiprocessing
import time
from pathlib import Path

import pytest

from porter.compile import toolchain
from porter.pipeline import RunOptions, run_target
from porter.pipeline.context import Context

import test_pipeline_support as fam


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """The fake family registered, a runbook, and one cold run with two worker processes."""
    root = tmp_path_factory.mktemp("pipeline")
    tpl = fam.write_templates(root / "tpl")
    runbook = root / "fake-bringup.yaml"
    runbook.write_text(fam.RUNBOOK)
    token = f"{time.time_ns()}"   # fresh source text: the cold run must really compile
    with pytest.MonkeyPatch.context() as mp:
        fam.install(mp, tpl, token)
        parent_calls = toolchain.stats.nvrtc_calls
        cold = run_target(RunOptions("blackwell", runbook=str(runbook), out=root / "out", jobs=2))
        yield {"root": root, "tpl": tpl, "runbook": str(runbook), "token": token, "cold": cold,
               "parent_calls": toolchain.stats.nvrtc_calls - parent_calls, "mp": mp}


def _opts(setup, out=None, **kw):
    return RunOptions("blackwell", runbook=setup["runbook"], out=out or setup["root"] / "out", **kw)


def test_cold_run_passes_and_writes_every_artifact(setup):
    cold = setup["cold"]
    assert cold.exit_code == 0, [(s.id, s.summary) for s in cold.failed]
    status = {s.id: s.status for s in cold.stages}
    assert status == {"descriptor": "passed", "before": "passed", "kernels": "passed",
                      "numerics": "passed", "device": "not-run", "report": "passed"}
    for name in ("fake.axpy", "fake.fp4"):
        folder = setup["root"] / "out" / "kernels" / name
        for f in (f"{name}.cu", f"{name}.ptx", f"{name}.cubin", f"{name}.sass", "resources.json",
                  "numerics.json", "checks.json"):
            assert (folder / f).stat().st_size > 0, f
        assert "FFMA" in (folder / f"{name}.sass").read_text()
    for f in ("report.md", "report.json", "report.html"):
        assert (setup["root"] / "out" / f).exists()


def test_compiles_ran_in_workers_and_were_counted(setup):
    cold = setup["cold"]
    # 2 blackwell kernels + the hopper kernel compiled for sm_100a, each compiled once.
    # The single "before" unit runs in this process (a pool for one unit is waste); the
    # two kernels ran in worker processes, so this process's counter saw only one.
    assert cold.nvrtc_calls == 3
    assert setup["parent_calls"] == 1


def test_levels_and_no_device_said_plainly(setup):
    report = json.loads((setup["root"] / "out" / "report.json").read_text())
    levels = {k["name"]: k["level"] for k in report["kernels"]}
    assert levels == {"fake.axpy": "numerics-model", "fake.fp4": "numerics-model"}
    assert report["device"]["ran"] is False
    assert report["device"]["detail"].startswith("no GPU: device validation and benchmarks not run")
    assert all(k["level"] not in ("device-validated", "benchmarked") for k in report["kernels"])
    before = {b["name"]: b for b in report["before"]}
    assert before["fake.axpy"]["compiled"] is True


def test_rerun_does_no_compile_work(setup):
    calls = toolchain.stats.nvrtc_calls
    again = run_target(_opts(setup, jobs=2))
    assert again.exit_code == 0
    assert again.nvrtc_calls == 0 and toolchain.stats.nvrtc_calls == calls
    assert again.units_run == 0 and again.units_cached > 0
    assert again.seconds < 2.0


def _relocate(out, original) -> None:
    """Point a copied build folder's store entries at the copy's artifacts, and sign them
    again: an entry's digest covers its paths (porter.pipeline.store)."""
    from porter.pipeline.store import _digest

    for p in (out / ".stages").rglob("*.json"):
        entry = json.loads(p.read_text().replace(str(original), str(out)))
        if isinstance(entry, dict) and "digest" in entry:
            entry["digest"] = _digest(entry["key"], entry["result"])
        p.write_text(json.dumps(entry))


def test_changed_input_reruns_only_what_it_touches(setup, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(setup["root"] / "out", out)
    _relocate(out, setup["root"] / "out")   # the copy's artifact paths point at the original
    template = setup["tpl"] / "fake.cu.j2"
    original = template.read_text()
    template.write_text(original + "// an edited template\n")   # one input file changes
    try:
        run = run_target(_opts(setup, out=out, jobs=1))
    finally:
        template.write_text(original)
    names = {s.id: (s.units_run, s.units_cached) for s in run.stages}
    assert run.exit_code == 0
    assert names["kernels"][0] == 2 and names["before"][0] == 1   # new source: rebuilt
    assert names["descriptor"] == (0, 0)


def test_interrupted_run_resumes_without_redoing_finished_units(setup, tmp_path, monkeypatch):
    out = tmp_path / "out"
    finished = []
    original = Context._finish

    def finish_then_interrupt(self, stage, name, key, result):
        r = original(self, stage, name, key, result)
        finished.append(name)
        if len(finished) == 2:
            raise KeyboardInterrupt  # as if the user pressed Ctrl-C mid-stage
        return r

    monkeypatch.setattr(Context, "_finish", finish_then_interrupt)
    with pytest.raises(KeyboardInterrupt):
        run_target(_opts(setup, out=out, jobs=1))
    monkeypatch.setattr(Context, "_finish", original)
    stored = {p.relative_to(out / ".stages").as_posix() for p in (out / ".stages").rglob("*.json")}
    assert {"before/fake.axpy.json", "kernels/fake.axpy.json"} <= stored
    resumed = run_target(_opts(setup, out=out, jobs=1))
    assert resumed.exit_code == 0
    kernels = next(s for s in resumed.stages if s.id == "kernels")
    assert kernels.units_cached == 1 and kernels.units_run == 1      # fake.axpy reused, fake.fp4 built
    before = next(s for s in resumed.stages if s.id == "before")
    assert before.units_run == 0
    assert not list(out.rglob("*.tmp"))


def test_torn_store_entry_is_a_miss_not_a_crash(setup, tmp_path):
    import shutil

    out = tmp_path / "out"
    shutil.copytree(setup["root"] / "out", out)
    _relocate(out, setup["root"] / "out")
    (out / ".stages" / "stage" / "kernels.json").write_text('{"key": "trunc')
    run = run_target(_opts(setup, out=out, jobs=1))
    assert run.exit_code == 0
    kernels = next(s for s in run.stages if s.id == "kernels")
    assert kernels.units_cached == 2 and kernels.units_run == 0   # units still reused


def test_concurrent_runs_leave_whole_files(setup, tmp_path):
    out = tmp_path / "out"
    ctx = multiprocessing.get_context("spawn")
    args = (str(out), str(setup["tpl"]), setup["token"] + "-concurrent", setup["runbook"])
    with ctx.Pool(2) as pool:
        codes = pool.starmap(fam.child_run, [args, args])
    assert codes == [0, 0]
    assert not list(out.rglob("*.tmp")) and not list(out.rglob(".*.tmp"))
    for p in out.rglob("*.json"):
        json.loads(p.read_text())              # every JSON file whole
    cubin = out / "kernels" / "fake.axpy" / "fake.axpy.cubin"
    assert cubin.read_bytes()[:4] == b"\x7fELF"
    report = json.loads((out / "report.json").read_text())
    assert {k["name"] for k in report["kernels"]} == {"fake.axpy", "fake.fp4"}


def test_failing_kernel_fails_its_stage_and_exit_code_is_1(setup, tmp_path, capsys):
    from porter.cli import main

    setup["mp"].setattr(fam, "BROKEN", True)
    try:
        code = main(["target", "blackwell", "--runbook", setup["runbook"], "--out", str(tmp_path / "o"),
                     "-j", "1", "--device", "off"])
    finally:
        setup["mp"].setattr(fam, "BROKEN", False)
    captured = capsys.readouterr()
    assert code == 1
    assert "stage 'kernels' failed" in captured.err and "fake.broken" in captured.err
    assert "fake.broken" in captured.out and "missing HGMMA" in captured.out
    report = json.loads((tmp_path / "o" / "report.json").read_text())
    broken = next(k for k in report["kernels"] if k["name"] == "fake.broken")
    assert broken["level"] == "compiled" and broken["checks_failed"]
    # The hopper fake.broken compiles for the target but fails its SASS check there: the
    # Before section says both, as the before stage's summary does.
    before = next(b for b in report["before"] if b["name"] == "fake.broken")
    assert before["compiled"] and before["checks_failed"]
    md = (tmp_path / "o" / "report.md").read_text()
    line = next(l for l in md.splitlines() if l.startswith("- fake.broken: "))
    assert line.startswith("- fake.broken: compiles, but fails: ") and "HGMMA" in line


def _no_blackwell_gpu():
    from porter.descriptor.arch import load_arch
    from porter.pipeline.device import find_device

    if find_device(load_arch("blackwell"))[0] is not None:
        pytest.skip("a Blackwell GPU is present")


def test_device_on_without_a_gpu_exits_3_like_validate_and_keeps_the_rest(setup, tmp_path, capsys):
    from porter.cli import main

    _no_blackwell_gpu()
    out = tmp_path / "o"
    code = main(["target", "blackwell", "--runbook", setup["runbook"], "--out", str(out), "-j", "1",
                 "--device", "on"])
    captured = capsys.readouterr()
    assert code == 3                                   # porter validate/bench --device on: 3
    err = [line for line in captured.err.splitlines() if line.strip()]
    assert len(err) == 1 and err[0].startswith("porter: error: no CUDA device") and "--device on" in err[0]
    # The other stages ran and the report was written; nothing suggests the command that just failed.
    report = json.loads((out / "report.json").read_text())
    assert {k["name"] for k in report["kernels"]} == {"fake.axpy", "fake.fp4"}
    assert report["device"]["required_but_absent"] is True
    assert not any("--device on" in step for step in report["summary"]["next_steps"])
    assert "--device on`" not in captured.out and "--device on`" not in (out / "report.md").read_text()
    assert "this machine has none" in captured.out


def test_device_on_without_a_gpu_is_a_no_device_failure(setup, tmp_path):
    _no_blackwell_gpu()
    run = run_target(_opts(setup, out=tmp_path / "o", jobs=1, device="on"))
    assert run.exit_code == 3 and [s.id for s in run.failed] == ["device"]
    assert run.no_device is run.failed[0] and run.failed[0].summary.startswith("no CUDA device")


def test_probe_stage_without_porter_probes_fails_clearly(setup, tmp_path, monkeypatch):
    import sys

    book = tmp_path / "probes.yaml"
    book.write_text("name: p\nbase: hopper\nstages:\n"
                    "  - {id: descriptor, title: D, day: 1, needs: [], kind: descriptor-check, proves: x}\n"
                    "  - {id: probes, title: P, day: 1, needs: [descriptor], kind: probes, proves: y}\n")
    monkeypatch.setitem(sys.modules, "porter.descriptor.probes", None)   # import now raises ImportError
    run = run_target(RunOptions("blackwell", runbook=str(book), out=tmp_path / "o", jobs=1))
    assert [s.id for s in run.failed] == ["probes"]
    assert "porter.descriptor.probes is not available" in run.failed[0].summary


def test_bad_input_exits_2(tmp_path, capsys):
    from porter.cli import main

    assert main(["target", "blackwel", "--out", str(tmp_path / "o"), "-q"]) == 2
    err = capsys.readouterr().err
    assert "did you mean 'blackwell'" in err and len(err.strip().splitlines()) == 1


def test_every_variant_the_registry_knows_is_listed_with_its_reason(setup, tmp_path, monkeypatch):
    """A form the family creates only where the arch has cta_pair is absent from the
    family's hopper listing: the run lists it as unsupported, as `porter kernel list` does."""
    from porter.descriptor.arch import load_arch
    from porter.commands.kernel import all_variants

    monkeypatch.setattr(fam, "PAIRS", True)
    run = run_target(RunOptions("hopper", base="blackwell", runbook=setup["runbook"], out=tmp_path / "h",
                                jobs=1, device="off"))
    assert run.exit_code == 0, [(s.id, s.summary) for s in run.failed]
    report = json.loads((tmp_path / "h" / "report.json").read_text())
    listed = {k["name"] for k in report["kernels"]} | {u["name"] for u in report["unsupported"]}
    assert listed == {v.name for v in all_variants(load_arch("hopper"))} == {"fake.axpy", "fake.fp4", "fake.axpy.pair"}
    pair = next(u for u in report["unsupported"] if u["name"] == "fake.axpy.pair")
    assert "cta_pair" in pair["missing"]
    assert "2 unsupported" in next(s.summary for s in run.stages if s.id == "kernels")
    assert "fake.axpy.pair: needs" in (tmp_path / "h" / "report.md").read_text()


def test_exact_kernel_name_builds_that_kernel_only(setup, tmp_path, monkeypatch):
    """--kernel as validate and diff take it (match_kernels): an exact name is one kernel,
    even where another form shares its variant; a glob still selects both."""
    monkeypatch.setattr(fam, "PAIRS", True)
    out = tmp_path / "o"
    run = run_target(_opts(setup, out=out, jobs=1, device="off", kernel="fake.axpy"))
    kernels = next(s for s in run.stages if s.id == "kernels")
    assert [k["name"] for k in kernels.data["kernels"]] == ["fake.axpy"]
    run = run_target(_opts(setup, out=out, jobs=1, device="off", kernel="fake.axpy*"))
    kernels = next(s for s in run.stages if s.id == "kernels")
    assert sorted(k["name"] for k in kernels.data["kernels"]) == ["fake.axpy", "fake.axpy.pair"]


def test_probe_counts_are_arch_checks():
    """The probes stage counts verdicts as `porter arch check` does: a not-judged probe is
    not counted as agreeing."""
    from porter.commands.arch_check import summary_line
    from porter.pipeline.stages import probe_counts
    from porter.descriptor.probes import NOT_JUDGED, ArchCheck, ProbeResult

    def probe(name, verdict):
        return ProbeResult(probe=name, feature="f", needs=[], target="sm_x", claimed=True, denied_prereqs=[],
                           compiled=True, sass_found={}, sass_missing=[], signature_hits={}, verdict=verdict)

    check = ArchCheck("x", "sm_x", [probe("a", "confirmed"), probe("b", "confirmed"), probe("c", "denied-confirmed"),
                                    probe("d", f"{NOT_JUDGED}: it also uses tmem")], [], [], 0.0)
    text = probe_counts(check.to_dict(), NOT_JUDGED)
    assert text == "4 probes: 2 confirmed, 1 denied-confirmed, 1 not judged"
    assert "4 probes, 2 confirmed, 1 denied-confirmed, 1 not judged" in summary_line(check)


def test_kernel_filter_builds_only_matching_variants(setup, tmp_path):
    run = run_target(_opts(setup, out=tmp_path / "o", jobs=1, kernel="fake.fp4"))
    kernels = next(s for s in run.stages if s.id == "kernels")
    assert [k["name"] for k in kernels.data["kernels"]] == ["fake.fp4"]
    assert not (tmp_path / "o" / "kernels" / "fake.axpy").exists()


def test_generic_runbook_takes_no_guessed_base(setup, tmp_path):
    """Without --from, a runbook base or identity.previous there is no base (issue #11:
    `porter target hopper` used to port "from" blackwell, the most different arch)."""
    from porter.pipeline.runner import choose_base, resolve

    arch, base, book = resolve(RunOptions("hopper", runbook="generic-bringup"))
    assert book.base is None and base is None and not arch.previous
    assert "none" in choose_base(arch, None, book)[1]
    base, why = choose_base(arch, "blackwell", book)
    assert base.name == "blackwell" and why == "--from blackwell"
    # blackwell names hopper as the generation it follows
    arch, base, book = resolve(RunOptions("blackwell", runbook="generic-bringup"))
    assert base.name == "hopper" and "identity.previous" in choose_base(arch, None, book)[1]


def test_identity_previous_names_the_default_base(setup, tmp_path):
    from porter.descriptor.arch import load_arch
    from porter.errors import PorterError
    from porter.pipeline.runner import choose_base

    text = (Path(load_arch("hopper").path)).read_text()
    assert "previous:" not in text
    good = tmp_path / "next.yaml"
    good.write_text(text.replace("  target: sm_90a\n", "  target: sm_90a\n  previous: blackwell\n", 1))
    arch = load_arch(good)
    assert arch.previous == "blackwell"
    base, why = choose_base(arch, None, None)
    assert base.name == "blackwell" and "identity.previous" in why
    bad = tmp_path / "bad.yaml"
    bad.write_text(text.replace("  target: sm_90a\n", "  target: sm_90a\n  previous: blackwel\n", 1))
    with pytest.raises(PorterError, match="identity.previous"):
        choose_base(load_arch(bad), None, None)


def test_target_and_report_say_which_base_and_why(tmp_path, capsys, monkeypatch):
    from porter.cli import main

    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"))
    book = tmp_path / "fake.yaml"
    book.write_text(fam.RUNBOOK)
    out = tmp_path / "o"
    rc = main(["target", "blackwell", "--runbook", str(book), "--out", str(out), "--jobs", "1", "--quiet",
               "--device", "off"])
    text = capsys.readouterr().out
    assert rc == 0 and "base arch: hopper (named by runbook fake-bringup)" in text
    report = json.loads((out / "report.json").read_text())
    assert report["base"]["why"] == "named by runbook fake-bringup" == report["base_why"]
    assert "(named by runbook fake-bringup)" in (out / "report.md").read_text()


def test_terminal_verdict_says_the_level_and_what_next(tmp_path):
    from types import SimpleNamespace

    from porter.commands.target import verdict_lines

    result = SimpleNamespace(arch="blackwell", arch_arg="blackwell", products=("B200", "GB200"), out_dir=tmp_path)
    no_gpu = SimpleNamespace(status="not-run")
    ok = [{"name": "k1", "level": "numerics-model", "checks_failed": []},
          {"name": "k2", "level": "sass-checked", "checks_failed": []}]
    lines = verdict_lines(result, ok, [{"name": "k3"}], no_gpu)
    assert lines[0] == ("highest level reached: numerics-model (CPU model of the arithmetic, no kernel ran), "
                        "by 1 of 2 kernels; 1 unsupported on blackwell")
    assert "one of B200, GB200, run `porter target blackwell --device on`" in lines[-1]
    broken = [{"name": "k1", "level": "failed", "checks_failed": [{"name": "build", "detail": "x"}]}]
    lines = verdict_lines(result, broken, [], no_gpu)
    assert lines[0] == "no kernel got through: all 1 failed"
    assert "fix the failed checks of k1" in lines[1]
    assert not any("--device on" in line for line in lines)   # nothing a GPU could take yet
