"""Every cache entry carries a digest of its content, checked on read (issue 20 item 3): a
corrupt compile-cache entry (PTX, cubin, metadata), SASS text or stage-store entry is
discarded, rebuilt and counted, and the run says "N cache entries were corrupt and rebuilt"
instead of trusting it (a flipped PTX byte used to drop a kernel to numerics-model, a
torn SASS text to make the descriptor look wrong)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from porter.cli import main
from porter.compile import cache_entry, sass, toolchain
from porter.pipeline import RunOptions, run_target
from porter.pipeline.store import StageStore

import test_pipeline_support as fam

SOURCE = 'extern "C" __global__ void k(float* y, float a) { y[threadIdx.x] *= a; }\n'


@pytest.fixture(scope="module")
def cache(tmp_path_factory):
    """A compile cache of this module's own (corrupting the shared one would cost others)."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("PORTER_CACHE_DIR", str(root))
        yield root


def _flip(path: Path, at: int = -40) -> None:
    data = bytearray(path.read_bytes())
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("suffix", [".ptx", ".cubin", ".json"])
def test_a_corrupt_compile_entry_is_rebuilt_and_counted(cache, suffix):
    first = toolchain.compile_cuda(SOURCE, "sm_90a", "k.cu")
    (entry,) = (p for p in (cache / "compile").rglob(f"*{suffix}") if p.stem == first.key)
    if suffix == ".json":
        entry.write_text(entry.read_text()[:-5])              # torn metadata
    else:
        _flip(entry)
    calls, corrupt = toolchain.stats.nvrtc_calls, cache_entry.stats.corrupt
    again = toolchain.compile_cuda(SOURCE, "sm_90a", "k.cu")
    assert cache_entry.stats.corrupt == corrupt + 1
    assert toolchain.stats.nvrtc_calls == calls + 1 and not again.cached     # compiled anew, not trusted
    assert (again.ptx, again.cubin) == (first.ptx, first.cubin)
    third = toolchain.compile_cuda(SOURCE, "sm_90a", "k.cu")                 # the rebuilt entry is whole
    assert third.cached and cache_entry.stats.corrupt == corrupt + 1


def test_a_corrupt_sass_entry_is_rebuilt_and_counted(cache):
    cubin = toolchain.compile_cuda(SOURCE, "sm_90a", "k.cu").cubin
    before = set((cache / "sass").rglob("*.sass"))
    text = sass.disassemble(cubin)
    (entry,) = set((cache / "sass").rglob("*.sass")) - before
    entry.write_text(entry.read_text().replace("FMUL", "FADD", 1))           # plausible, but not what was written
    corrupt = cache_entry.stats.corrupt
    assert sass.disassemble(cubin) == text and "FMUL" in text
    assert cache_entry.stats.corrupt == corrupt + 1
    assert sass.disassemble(cubin) == text and cache_entry.stats.corrupt == corrupt + 1


def test_stage_store_checks_its_entries(tmp_path):
    store = StageStore(tmp_path)
    store.put("kernels/gemm.bf16", "k1", {"level": 3, "nested": [1.5, "x"]})
    assert store.get("kernels/gemm.bf16", "k1") == {"level": 3, "nested": [1.5, "x"]}
    path = store.path("kernels/gemm.bf16")
    path.write_text(path.read_text().replace('"level": 3', '"level": 5'))    # edited: digest no longer matches
    assert store.get("kernels/gemm.bf16", "k1") is None and store.corrupt == 1 and not path.exists()
    store.put("a", "k", [1, 2])
    store.path("a").write_bytes(store.path("a").read_bytes()[:10])           # torn
    assert store.get("a", "k") is None and store.corrupt == 2
    # An entry from before digests is a plain miss (rebuilt), not counted as corrupt.
    store.path("old").write_text(json.dumps({"key": "k", "result": 1}))
    assert store.get("old", "k") is None and store.corrupt == 2
    assert store.get("missing", "k") is None and store.corrupt == 2


RUNBOOK = """\
name: cache-bringup
summary: the kernels and the report of the fake family
stages:
  - {id: kernels, title: Kernels, day: 1, needs: [], kind: kernels, family: "*", proves: they build}
  - {id: numerics, title: Numerics, day: 1, needs: [kernels], kind: numerics, proves: arithmetic}
  - {id: report, title: Report, day: 1, needs: [numerics], kind: report, proves: a report}
"""


# jobs=2: the units run in pool workers, which report their counts back with each result;
# jobs=1 (in this process) is outside the default suite: the unit tests above cover its counter.
@pytest.mark.parametrize("jobs", [pytest.param(1, marks=pytest.mark.slow), 2])
def test_a_run_rebuilds_corrupt_entries_and_says_how_many(monkeypatch, tmp_path, capsys, jobs):
    cache = tmp_path / "cache"                                 # this run's entries only
    monkeypatch.setenv("PORTER_CACHE_DIR", str(cache))
    fam.install(monkeypatch, fam.write_templates(tmp_path / "tpl"), f"cache{jobs}")
    book = tmp_path / "rb.yaml"
    book.write_text(RUNBOOK)
    clean = run_target(RunOptions("blackwell", runbook=str(book), out=tmp_path / "o1", jobs=1, device="off"))
    assert clean.exit_code == 0 and clean.cache_corrupt == 0
    levels = json.loads((tmp_path / "o1" / "report.json").read_text())["kernels"]
    # One kernel's PTX and its SASS text, as a disk fault or a killed writer leaves them.
    kernel = json.loads((tmp_path / "o1" / ".stages" / "kernels" / "fake.axpy.json").read_text())
    ptx_file = Path(kernel["result"]["artifacts"]["fake.axpy.ptx"]).read_text()
    ptx = [p for p in (cache / "compile").rglob("*.ptx") if p.read_text() == ptx_file]
    sass_file = Path(kernel["result"]["artifacts"]["fake.axpy.sass"]).read_text()
    sass_texts = [p for p in (cache / "sass").rglob("*.sass") if p.read_text().endswith(sass_file)]
    assert len(ptx) == 1 and len(sass_texts) == 1
    _flip(ptx[0])
    _flip(sass_texts[0])
    out = tmp_path / "o2"
    rc = main(["target", "blackwell", "--runbook", str(book), "--out", str(out), "--jobs", str(jobs), "-q",
               "--device", "off"])
    text = capsys.readouterr().out
    assert rc == 0
    assert "2 cache entries were corrupt and rebuilt" in text
    report = json.loads((out / "report.json").read_text())
    assert report["run"]["cache_corrupt"] == 2
    assert [k["level"] for k in report["kernels"]] == [k["level"] for k in levels]
    assert "2 cache entries were corrupt and rebuilt" in (out / "report.md").read_text()
    # A corrupt stage-store entry of the build folder is rebuilt the same way.
    entry = out / ".stages" / "stage" / "kernels.json"      # the kernels stage's whole result
    _flip(entry, len(entry.read_bytes()) // 2)
    again = run_target(RunOptions("blackwell", runbook=str(book), out=out, jobs=1, device="off"))
    assert again.exit_code == 0 and again.cache_corrupt == 1
    assert "1 cache entry was corrupt and rebuilt" in (out / "report.md").read_text()
