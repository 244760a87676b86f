"""``porter emu run``: a user's own kernel (.cu or .ptx) in porter's PTX simulator with a
Python harness. The README example (examples/emu: a TMA + wgmma tile GEMM for sm_90a) runs
end to end; a broken kernel fails for its reason (exit 1); a hostile harness ends in one
clear line (exit 2)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from porter.cli import main

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "examples" / "emu" / "tma_wgmma.cu"
HARNESS = ROOT / "examples" / "emu" / "tma_wgmma_harness.py"


def _run(capsys, *argv):
    code = main(["emu", "run", *map(str, argv)])
    out, err = capsys.readouterr()
    return code, out, err


def test_the_readme_example_runs_end_to_end(capsys):
    code, out, err = _run(capsys, KERNEL, "--harness", HARNESS)
    assert code == 0, out + err
    assert "tile_gemm from" in out and "grid 2x1x1, block 128x1x1" in out
    assert re.search(r"ran: [\d,]+ warp-instructions .* 2 CTAs, 8 warps, 32 wgmma, 4 TMA", out)
    assert re.search(r"argument 2 \(64x128 float32\): passed, max abs err", out)
    assert "diagnostics: none" in out and out.rstrip().endswith("passed: executed in porter's PTX simulator, not on a GPU")


def test_json_and_a_ptx_file_with_flags(capsys, tmp_path):
    from porter.compile.toolchain import compile_cuda

    ptx = tmp_path / "tile.ptx"
    ptx.write_text(compile_cuda(KERNEL.read_text(), "sm_90a", name=KERNEL.name).ptx)
    code, out, err = _run(capsys, ptx, "--harness", HARNESS, "--entry", "tile_gemm", "--grid", "2", "--block",
                          "128,1,1", "--seed", "3", "--json")
    assert code == 0, out + err
    r = json.loads(out)
    assert r["passed"] and r["target"] == "sm_90a" and r["grid"] == [2, 1, 1] and r["seed"] == 3
    assert r["checks"][0]["argument"] == 2 and r["checks"][0]["passed"]


def _broken(tmp_path, old, new) -> Path:
    src = KERNEL.read_text()
    assert src.count(old) == 1, old
    path = tmp_path / KERNEL.name
    path.write_text(src.replace(old, new))
    return path


def test_a_wrong_store_names_the_first_bad_element(capsys, tmp_path):
    cu = _broken(tmp_path, "out[row * ldc + col + 1] = acc[4 * j + 1];", "out[row * ldc + col + 1] = acc[4 * j];")
    code, out, err = _run(capsys, cu, "--harness", HARNESS)
    assert code == 1, out + err
    assert re.search(r"argument 2 \(64x128 float32\): FAILED: argument 2\[row 0, col 1\]: expected -?[\d.e+-]+, "
                     r"got -?[\d.e+-]+ \(\d+ of 8192 elements outside tolerance\)", out), out
    assert out.rstrip().endswith("failed: executed in porter's PTX simulator, not on a GPU")


def test_an_aliasing_descriptor_is_a_warning_and_the_numbers_fail(capsys, tmp_path):
    # stride byte offset 512 B instead of 1024 B: two core-matrix groups read the same bytes; the
    # PTX ISA states no rule against it (a warning at the wgmma's line), and the numbers are wrong
    cu = _broken(tmp_path, "((u64)(1024 >> 4) << 32)", "((u64)(512 >> 4) << 32)")
    code, out, err = _run(capsys, cu, "--harness", HARNESS)
    assert code == 1, out + err
    assert re.search(r"argument 2 \(64x128 float32\): FAILED", out), out
    assert re.search(r"tma_wgmma\.ptx:\d+: wgmma\.mma_async [AB]: matrix descriptor \w+ \(LBO \d+ B, SBO 512 B, 128B\) "
                     r"makes different operand elements read the same shared bytes \(a warning: the PTX ISA", out), out
    assert "failed in the simulator" not in out


def test_a_deadlock_is_reported_with_the_cu_line(capsys, tmp_path):
    cu = _broken(tmp_path, '"r"(2 * 64 * 64 * 2)', '"r"(3 * 64 * 64 * 2)')    # more bytes than the TMA brings
    code, out, err = _run(capsys, cu, "--harness", HARNESS)
    assert code == 1, out + err
    wait_line = next(i for i, line in enumerate(cu.read_text().splitlines(), 1) if "mbarrier.try_wait" in line)
    assert "deadlock" in out and f"(tma_wgmma.cu:{wait_line})" in out, out
    assert "failed in the simulator" in out


HOSTILE = {
    "raises": ("def arguments(h):\n    return [1 / 0]\n", r"bad\.py: line 2 in arguments: ZeroDivisionError: division by zero"),
    "not-a-list": ("def arguments(h):\n    return {'a': 1}\n", r"arguments\(\) returned a dict; return a list"),
    "wrong-element": ("def arguments(h):\n    return ['x', 1, 2, 3]\n", r"arguments\(\)\[0\] is a str"),
    "wrong-count": ("def arguments(h):\n    return [1, 2]\n", r"returned 2 arguments; tile_gemm takes 4"),
    "loops": ("def arguments(h):\n    while True:\n        pass\n", r"did not return within 2 s"),
    "exits": ("import os\ndef arguments(h):\n    os._exit(7)\n", r"harness process ended \(exit code 7\)"),
    "bad-map": ("import numpy as np\ndef arguments(h):\n    return [h.tensor_map(np.zeros((64, 64), np.float32), "
                "box=(64, 64), swizzle='128B')]\n", r"bad\.py: line 3 in arguments: h\.tensor_map 64x64 float32: the inner box"),
    "wrong-kind": ("import numpy as np\ndef arguments(h):\n    return [np.zeros(4), np.zeros(4), np.zeros(4), 1]\n",
                   r"bad\.py: tma_wgmma\.ptx: argument 0 for \w+ is 8 bytes but the parameter takes 128"),
    "bad-reference": ("import numpy as np\nLAUNCH = {'grid': 2}\n"
                      "def arguments(h):\n    return [b'\\0' * 128, b'\\0' * 128, np.zeros((64, 128), np.float32), 128]\n"
                      "def reference(args):\n    return {2: np.zeros(3)}\n",
                      r"reference\(\)\[2\] has shape \(3,\); argument 2 is \(64, 128\)"),
}


@pytest.mark.parametrize("case", sorted(HOSTILE))
def test_a_hostile_harness_ends_in_one_clear_line(capsys, tmp_path, case):
    body, expected = HOSTILE[case]
    harness = tmp_path / "bad.py"
    harness.write_text(body)
    code, out, err = _run(capsys, KERNEL, "--arch", "sm_90a", "--harness", harness, "--harness-timeout", "2")
    assert code == 2, out + err
    assert err.count("\n") == 1 and err.startswith("porter: error: "), err
    assert re.search(expected, err), err
    assert "Traceback" not in out + err


def test_bad_input_is_one_line(capsys, tmp_path):
    code, _, err = _run(capsys, KERNEL)
    assert code == 2 and "give --arch" in err
    code, _, err = _run(capsys, KERNEL, "--arch", "sm_90a")
    assert code == 2 and "tile_gemm takes 4 parameters: give --harness" in err
    code, _, err = _run(capsys, tmp_path / "none.cu", "--arch", "sm_90a")
    assert code == 2 and "no such file" in err
    code, _, err = _run(capsys, KERNEL, "--harness", HARNESS, "--entry", "nope")
    assert code == 2 and "no kernel 'nope'" in err
    code, _, err = _run(capsys, KERNEL, "--grid", "0")
    assert code == 2 and "positive integers" in err
    code, _, err = _run(capsys, KERNEL, "--harness", HARNESS, "--grid", "3", "--cluster", "2")
    assert code == 2 and "not a multiple of the cluster shape" in err and err.count("\n") == 1


def test_a_ptx_file_says_which_target_it_runs_for_when_arch_differs(capsys, tmp_path):
    from porter.compile.toolchain import compile_cuda

    ptx = tmp_path / "tile.ptx"
    ptx.write_text(compile_cuda(KERNEL.read_text(), "sm_90a", name=KERNEL.name).ptx)
    code, out, err = _run(capsys, ptx, "--harness", HARNESS, "--arch", "sm_100a")
    assert code == 0, out + err
    notes = [line for line in out.splitlines() if line.startswith("note: ")]
    assert notes == ["note: tile.ptx runs as written for its .target sm_90a; --arch sm_100a only chooses the NVRTC "
                     "target of a .cu file"], out
    code, out, err = _run(capsys, ptx, "--harness", HARNESS, "--arch", "sm_90a")      # the same target: no note
    assert code == 0 and "note: " not in out, out + err


def test_a_bad_tensor_map_names_the_map_once(tmp_path):
    import numpy as np

    from porter.errors import PorterError
    from porter.runtime.emulated_harness import Harness

    a = np.zeros((64, 64), np.float32)
    for kw in ({"dims": (64, 64), "strides": (100,)}, {}):
        with pytest.raises(PorterError) as e:
            Harness.tensor_map(a, box=(64, 300), name="A", **kw)
        msg = str(e.value)
        assert msg.startswith("h.tensor_map A: ") and msg.count(" A:") == 1 and msg.count("A") == 1, msg


def test_relax_takes_only_rules_porter_can_relax(capsys):
    code, out, err = _run(capsys, KERNEL, "--harness", HARNESS, "--relax", "tcgen05-fence")
    assert code == 2 and out == ""
    assert err.strip() == "porter: error: --relax tcgen05-fence: not a rule porter can relax (rules: tcgen05-fences, tmem-lanes)"


def test_a_relaxed_run_says_so_in_its_header_and_json(capsys):
    code, out, err = _run(capsys, KERNEL, "--harness", HARNESS, "--relax", "tcgen05-fences")
    assert code == 0 and "relaxed: tcgen05-fences (these PTX ISA rules' errors are reported as warnings)" in out
    code, out, err = _run(capsys, KERNEL, "--harness", HARNESS, "--relax", "tcgen05-fences", "--json")
    assert code == 0 and json.loads(out)["relaxed"] == ["tcgen05-fences"]
