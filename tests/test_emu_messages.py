"""Messages an engineer can act on (issue 18 item 5): the simulator's checker, deadlock and
unsupported-form messages name the .cu file:line beside the PTX line (from the PTX's
.file/.loc line info), and a numeric mismatch names the first bad element in the output's
own terms, expected and got, and how many elements differ."""

from __future__ import annotations

import re

import numpy as np
import pytest

from porter import emu
from porter.emu.srcloc import SourceMap
from porter.runtime.emulated_runs import check_where
from porter.validation import device_harness as dh

# hand-written PTX with line info, as NVRTC -lineinfo writes it: line 9 is an inlined helper's
PTX = """\
.version 8.0
.target sm_90a
.address_size 64
.visible .entry k(.param .u64 k_param_0)
{
\t.reg .b32 %r<3>;
\t.loc\t1 12 3
\tmov.u32 %r1, %tid.x;
\t.loc\t2 40 5, function_name $L__info_string0, inlined_at 1 14 7
\tbar.sync 0;
\t.loc\t1 15 1
\tbrev.b32 %r2, %r1;
\tret;
}
\t.file\t1 "/home/me/project/k.cu"
\t.file\t2 "/home/me/project/helpers.cuh"
"""


def test_source_map_reads_file_and_loc_directives():
    sm = SourceMap(PTX)
    assert sm.at(8) == "k.cu:12"
    assert sm.at(10) == "helpers.cuh:40, inlined at k.cu:14"
    assert sm.at(12) == "k.cu:15"
    assert sm.at(7) is None                       # a directive, not an instruction
    assert sm.annotate("k.ptx:12 `brev.b32` and k.ptx:8", "k.ptx") == \
        "k.ptx:12 (k.cu:15) `brev.b32` and k.ptx:8 (k.cu:12)"
    assert SourceMap(re.sub(r"\t\.loc.*\n", "", PTX)).annotate("k.ptx:12", "k.ptx") == "k.ptx:12"


def test_an_unsupported_form_names_the_source_line():
    # multimem (NVLink multicast memory, which one simulated device does not have) stands for a
    # form outside the simulator's subset; if the simulator ever learns it, pick another here
    ptx = PTX.replace("bar.sync 0;", "mov.u32 %r2, 0;").replace(
        "brev.b32 %r2, %r1;", "multimem.red.relaxed.sys.global.add.u32 [%r1], 1;")
    with pytest.raises(emu.Unsupported) as exc:
        emu.launch(ptx, "k", grid=1, block=32, args=[np.zeros(4, np.float32)], file="k.ptx")
    assert "multimem.red" in str(exc.value)
    assert "k.ptx:12 (k.cu:15)" in str(exc.value)


def test_a_deadlock_names_the_source_line_of_each_waiter():
    # two named-barrier arrivals expected, one warp arrives: the waiter's .cu line is named
    ptx = PTX.replace("bar.sync 0;", "bar.sync 0, 64;").replace("\tbrev.b32 %r2, %r1;\n", "")
    with pytest.raises(emu.Deadlock) as exc:
        emu.launch(ptx, "k", grid=1, block=32, args=[np.zeros(4, np.float32)], file="k.ptx")
    assert "k.ptx:10 (helpers.cuh:40, inlined at k.cu:14)" in str(exc.value)


def test_a_gemm_mismatch_names_row_col_expected_got_and_count():
    want = np.arange(12, dtype=np.float64).reshape(3, 4)
    got = want.copy()
    got[1, 2] += 5
    got[2, 3] = np.nan
    m = dh.first_mismatch(got, want, 0.5, dh.GEMM_AXES, "C")
    assert m["index"] == {"row": 1, "col": 2} and m["count"] == 2
    assert dh.describe_mismatch(m) == "C[row 1, col 2]: expected 6, got 11 (2 of 12 elements outside tolerance)"
    assert dh.first_mismatch(want, want, 0.0, dh.GEMM_AXES) is None


def test_an_attention_mismatch_names_batch_head_position():
    want = np.zeros((1, 2, 5, 4))
    got = want.copy()
    got[0, 1, 3, 2] = 1.0
    text = dh.describe_mismatch(dh.first_mismatch(got, want, 0.1, dh.ATTENTION_AXES, "O"))
    assert text.startswith("O[batch 0, head 1, position 3, dim 2]: expected 0, got 1 (1 of 40")


def test_the_megakernel_check_names_its_model_and_position():
    ref = np.linspace(-1, 1, 16)
    got = ref.copy()
    got[7] = 9.0
    res = dh.compare_decode_step(got.astype(np.float32), int(np.argmax(got)), {}, ref, {}, 0.01, 0.01, 0.01)
    check = {"model": "tiny-gqa4", "pos": 3, "seed": 1, **res}
    assert not check["passed"]
    assert check_where(check) == "model tiny-gqa4 position 3"
    text = dh.mismatch_text(check)
    assert text.startswith("logits[vocab 7]: expected") and "1 of 16" in text


def test_planted_gemm_bugs_name_the_cu_line_and_the_first_bad_element(hopper, emulate_planted):
    """Through the --source path (an edited rendered kernel): a deadlock names the .cu line
    of its waiters; a wrong tile index names the first bad C element."""
    hang = emulate_planted(hopper, "gemm.bf16", [(
        "porter::mbar_arrive_expect_tx(full, STAGE_TX_BYTES);",
        "porter::mbar_arrive_expect_tx(full, STAGE_TX_BYTES + 1024);")], (256, 256, 64))
    assert hang["status"] == "failed"
    assert re.search(r"gemm\.bf16\.ptx:\d+ \([\w.]+:\d+(, inlined at (line \d+|[\w.]+:\d+))?\)", hang["reason"]), hang["reason"]
    wrong = emulate_planted(hopper, "gemm.bf16", [(
        "const int row0 = tile_m * TILE_M + consumer * MMA_M;", "const int row0 = tile_m * TILE_M;")],
        (256, 256, 64))
    assert wrong["status"] == "failed"
    assert re.search(r"at 256x256x64 seed \d+: C\[row \d+, col \d+\]: (expected .*, got .* \(\d+ of 65536 elements "
                     r"outside tolerance\)|never written \(\d+ of 65536)", wrong["reason"]), wrong["reason"]
