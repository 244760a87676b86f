"""A wgmma whose operand bytes an unordered write changes while it reads them computes
undefined values (a data race: PTX ISA 8 leaves what the read returns undefined); the ISA's
wgmma rules restrict the accumulator and A-fragment registers, not those bytes. So the run
goes on with the warp's accumulators poisoned (ops.wgmma.Undefined): reading one is an error
naming the race, writing one gives it a value. DeepGEMM's sm90 FP8 GEMM with BLOCK_M = 32 does
this on purpose: its m64 wgmma reads A's rows 32..63 from the next stage while the producer
refills it, into accumulator rows it never reads. The kernel below (written here) does the
same in miniature: one consumer warpgroup multiplies a 32-row A tile with m64n64k16, whose
rows 32..63 come from the next 4 KB, which the producer warp refills while the wgmmas are in
flight."""

from __future__ import annotations

import json
import re

import pytest

from emu_tma_wgmma_cu import HELPERS
from porter.cli import main

KERNEL = HELPERS + r"""
// 160 threads: one consumer warpgroup (warps 0-3) and a producer warp (warp 4). C is 64 x 64.
extern "C" __global__ void __launch_bounds__(160)
pad_rows(const __grid_constant__ Map ma, const __grid_constant__ Map mb, float* c) {
    __shared__ alignas(1024) unsigned char stages[8192];    // A rows 0..31, then the "next stage"
    __shared__ alignas(1024) unsigned char btile[8192];     // B: 64 x 64 bf16
    __shared__ alignas(8) u64 full0, full1, issued;
    const int tid = threadIdx.x, warp = tid / 32;
    if (tid == 0) {
        mbar_init(sa(&full0), 1);
        mbar_init(sa(&full1), 1);
        mbar_init(sa(&issued), 4);
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    if (warp == 4) {
        if (tid == 128) {
            expect(sa(&full0), 4096 + 8192);
            tma2d(sa(stages), &ma, sa(&full0), 0, 0);          // A rows 0..31
            tma2d(sa(btile), &mb, sa(&full0), 0, 0);
            PRODUCER_WAIT                                      // the consumers' wgmmas are in flight
            expect(sa(&full1), 4096);
            tma2d(sa(stages + 4096), &ma, sa(&full1), 0, 32);  // refill the next stage: A rows 32..63
        }
        wait_parity(sa(&full1), 0);
        return;
    }
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    wait_parity(sa(&full0), 0);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma_k64(d, sa(stages), sa(btile));                       // A rows 32..63: the next stage
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    if (tid % 32 == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(&issued)) : "memory");
    EARLY_WAIT                                                 // the refill lands while they are in flight
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    EPILOGUE
    store_c64(c, d, warp, tid % 32);
    LATE_WAIT                                                  // or after the wgmmas completed
}
"""
WAIT = "wait_parity(sa(&full1), 0);"

# the padding rows' warps leave (DeepGEMM's form), or zero their accumulators, or store them
DISCARD = "if (warp >= 2) return;"
OVERWRITE = "if (warp >= 2) for (int i = 0; i < 32; ++i) d[i] = 0.f;"
STORE = ""

HARNESS = '''
import numpy as np
LAUNCH = {"arch": "sm_90a", "entry": "pad_rows", "grid": 1, "block": 160}
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
AXES = {2: ("row", "col")}

def arguments(h):
    a = h.rng.standard_normal((64, 64)).astype(h.bfloat16)
    b = h.rng.standard_normal((64, 64)).astype(h.bfloat16)
    return [h.tensor_map(a, box=(64, 32), swizzle="128B", name="A"),
            h.tensor_map(b, box=(64, 64), swizzle="128B", name="B"), np.zeros((64, 64), np.float32)]

def reference(args):
    a, b = (x.astype(np.float64) for x in args[:2])
    want = np.zeros((64, 64))
    want[:32] = a[:32] @ b.T            # rows 32..63: never stored, or stored as zeros
    return {2: want}
'''


def _run(capsys, tmp_path, epilogue: str, seed: int, late: bool = False):
    cu = tmp_path / "pad_rows.cu"
    cu.write_text(KERNEL.replace("EPILOGUE", epilogue).replace("EARLY_WAIT", "" if late else WAIT)
                  .replace("LATE_WAIT", WAIT if late else "")
                  .replace("PRODUCER_WAIT", "" if late else "wait_parity(sa(&issued), 0);"))
    harness = tmp_path / "pad_rows_harness.py"
    harness.write_text(HARNESS)
    code = main(["emu", "run", str(cu), "--harness", str(harness), "--seed", str(seed), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), out + err


@pytest.mark.parametrize("seed", [0, -1])
def test_padding_rows_read_while_refilled_and_discarded_pass_with_a_warning(capsys, tmp_path, seed):
    code, r, text = _run(capsys, tmp_path, DISCARD, seed)
    assert code == 0 and r["passed"], text
    undefined = [w for w in r["warnings"] if "hold undefined values" in w]
    assert undefined and all(re.search(r"CTA 0 warp [23]:", w) for w in undefined), text   # the padding rows' warps


def test_overwriting_the_undefined_accumulators_gives_them_values(capsys, tmp_path):
    code, r, text = _run(capsys, tmp_path, OVERWRITE, 0)
    assert code == 0 and r["passed"], text


def test_storing_the_undefined_accumulators_is_an_error_naming_the_race(capsys, tmp_path):
    code, r, text = _run(capsys, tmp_path, STORE, 0)
    assert code == 1 and not r["passed"], text
    found = " ".join(r["diagnostics"]) if isinstance(r["diagnostics"], list) else str(r["diagnostics"])
    assert "st.global.f32" in found and "which holds an undefined value" in found, text
    assert "TMA load rewrote it" in found or "changed before the wgmma.wait_group" in found, text
    assert 'PTX ISA 8 "Memory Consistency Model"' in found, text
    assert "CTA 0 warp 2" in found or "CTA 0 warp 3" in found, text


# A refill that nothing orders against the wgmmas at all (the producer does not wait for their
# issue, the consumers not for the refill): by the warp order it lands before a wgmma reads, while
# it reads, or after it completed (a race the race detector sees by happens-before). Unused, the
# results are undefined and the run passes; stored, before or after the landing, the race or the
# undefined value is the error.
@pytest.mark.parametrize("seed", [0, 1, 2, 3, -1])
def test_an_unordered_refill_leaves_unused_results_undefined(capsys, tmp_path, seed):
    code, r, text = _run(capsys, tmp_path, DISCARD, seed, late=True)
    assert code == 0 and r["passed"], text


@pytest.mark.parametrize("seed", [0, 1, 2, 3, -1])
def test_an_unordered_refill_is_an_error_when_the_results_are_stored(capsys, tmp_path, seed):
    code, r, text = _run(capsys, tmp_path, STORE, seed, late=True)
    assert code == 1 and not r["passed"], text
    found = " ".join(r["diagnostics"]) if isinstance(r["diagnostics"], list) else str(r["diagnostics"])
    assert "shared-memory race" in found or "which holds an undefined value" in found, text
