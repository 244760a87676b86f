"""The NVRTC toolchain: on-disk cache, source-line compile errors, clear missing-piece errors."""

from __future__ import annotations

import sys

import pytest

from porter import paths

from porter.compile import sass

from porter.compile import toolchain
from porter.cli import main
from porter.errors import CompileError, PorterError
from porter.compile.toolchain import compile_cuda

TINY = """
extern "C" __global__ void tiny(float* out, float x) {
    out[threadIdx.x] = x * 2.0f + threadIdx.x;
}
"""


@pytest.fixture(scope="session")
def session_cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("porter-cache")


@pytest.fixture
def fresh_cache(session_cache_dir, monkeypatch):
    """A cache folder of this test session only (NVRTC's bundled headers are extracted
    there once); every test that uses it compiles sources no other test compiles."""
    monkeypatch.setenv("PORTER_CACHE_DIR", str(session_cache_dir))
    return session_cache_dir


def test_second_compile_is_a_cache_hit(fresh_cache):
    calls, hits = toolchain.stats.nvrtc_calls, toolchain.stats.cache_hits
    first = compile_cuda(TINY, "sm_90a", "tiny.cu")
    assert toolchain.stats.nvrtc_calls == calls + 1
    assert not first.cached and first.cubin
    second = compile_cuda(TINY, "sm_90a", "tiny.cu")
    assert toolchain.stats.nvrtc_calls == calls + 1, "a cached compile must not call NVRTC"
    assert toolchain.stats.cache_hits == hits + 1
    assert second.cached and second.cubin == first.cubin and second.ptx == first.ptx
    assert any(p.suffix == ".cubin" for p in (fresh_cache / "compile").rglob("*"))
    # Another target is another key: NVRTC runs again.
    compile_cuda(TINY, "sm_100a", "tiny.cu")
    assert toolchain.stats.nvrtc_calls == calls + 2


def test_rejections_are_cached_too(fresh_cache):
    bad = "extern \"C\" __global__ void k() {\n  undeclared_thing();\n}\n"
    with pytest.raises(CompileError) as first:
        compile_cuda(bad, "sm_100a", "bad.cu")
    calls = toolchain.stats.nvrtc_calls
    with pytest.raises(CompileError) as second:
        compile_cuda(bad, "sm_100a", "bad.cu")
    assert toolchain.stats.nvrtc_calls == calls
    assert str(second.value) == str(first.value)


def test_frontend_error_quotes_the_source_line():
    src = "extern \"C\" __global__ void k(int* p) {\n    int x = 1;\n    p[0] = x +* ;\n}\n"
    with pytest.raises(CompileError) as info:
        compile_cuda(src, "sm_90a", "front.cu", use_cache=False)
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith("front.cu:3: error:")
    assert "| 3: p[0] = x +* ;" in msg


def test_ptxas_error_maps_back_to_the_source_line():
    probe = paths.data_dir("kernels_src") / "probes" / "wgmma_bf16.cu"
    source = probe.read_text()
    line = next(i for i, text in enumerate(source.splitlines(), 1) if "wgmma.fence" in text)
    with pytest.raises(CompileError) as info:
        compile_cuda(source, "sm_100a", "wgmma_bf16.cu")
    msg = str(info.value)
    assert "\n" not in msg
    assert msg.startswith(f"wgmma_bf16.cu:{line}: ptxas error:")
    assert "not supported on .target 'sm_100a'" in msg
    assert 'wgmma.fence.sync.aligned;' in msg.split(" | ", 1)[1]


def test_bad_target_is_a_porter_error():
    with pytest.raises(PorterError, match="bad compile target 'hopper'"):
        compile_cuda(TINY, "hopper")


def test_missing_nvdisasm_is_one_clear_error(monkeypatch):
    import nvidia

    monkeypatch.setattr(nvidia, "__path__", [])
    monkeypatch.setattr(sass.shutil, "which", lambda tool: None)
    with pytest.raises(PorterError) as info:
        sass.disassemble(b"\x7fELF not really")
    assert str(info.value) == ("nvdisasm not found (looked in the nvidia-cuda-nvdisasm wheel and on PATH): "
                               "pip install nvidia-cuda-nvdisasm")


def test_missing_nvrtc_is_one_clear_error(fresh_cache, monkeypatch, capsys):
    import cuda.bindings

    # Hide the binding module so the import inside the toolchain fails like a missing wheel.
    monkeypatch.delattr(cuda.bindings, "nvrtc", raising=False)
    monkeypatch.setitem(sys.modules, "cuda.bindings.nvrtc", None)
    with pytest.raises(PorterError, match=r"^cuda-python is not installed: pip install cuda-python nvidia-cuda-nvrtc$"):
        compile_cuda(TINY + "// unseen\n", "sm_90a", "tiny.cu")
    # Through the CLI: one line on stderr, exit code 2, no traceback.
    assert main(["arch", "check", "hopper"]) == 2
    err = capsys.readouterr().err.strip()
    assert err == "porter: error: cuda-python is not installed: pip install cuda-python nvidia-cuda-nvrtc"


def test_cached_failure_names_the_callers_file(tmp_path, monkeypatch):
    """The same failing source compiled under two names: the cache hit must not replay
    the first caller's file name."""
    monkeypatch.setenv("PORTER_CACHE_DIR", str(tmp_path))
    bad = '__global__ void k(int* o) {\n  *o = undefined_name;\n}\n'
    with pytest.raises(CompileError, match=r"^first\.cu:2: error"):
        compile_cuda(bad, "sm_90a", "first.cu")
    before = toolchain.stats.nvrtc_calls
    with pytest.raises(CompileError, match=r"^second\.cu:2: error: .*\| 2: \*o = undefined_name;"):
        compile_cuda(bad, "sm_90a", "second.cu")
    assert toolchain.stats.nvrtc_calls == before          # a cache hit, described for this caller
