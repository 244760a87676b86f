"""A wgmma may read its shared-memory operands until it completes, which a thread learns only
from a wgmma.wait_group that covers it (PTX ISA 9.7.15), so a stage may be refilled only
once a wait ordered before the refill completed the wgmma: released after the issue but
before the wait, the refill races with the read whatever order the run takes (PTX ISA 8).
The race detector records the reads again where they end, as reads of the warp's wgmma
completion (ops.wgmma.CompletionAgent), whose clock a warp acquires by completing the
operation in its own wait. Before that record, the early release below was caught only when
the refill happened to land while the wgmma was in flight (2 of the 20 early releases below).

The kernel (written here): one consumer warpgroup multiplies a 64 x 64 A tile by B with four
m64n64k16 wgmmas and releases its stage on an mbarrier, from every warp or from warp 0
alone (one elected arrival, after its own wait: the other warps' waits need not have run);
the producer warp then refills A or B by TMA with other rows."""

from __future__ import annotations

import json

import pytest

from emu_tma_wgmma_cu import HELPERS
from porter.cli import main

KERNEL = HELPERS + r"""
// 160 threads: one consumer warpgroup (warps 0-3) and a producer warp (warp 4). C is 64 x 64.
extern "C" __global__ void __launch_bounds__(160)
release(const __grid_constant__ Map ma, const __grid_constant__ Map mb, float* c) {
    __shared__ alignas(1024) unsigned char atile[8192];
    __shared__ alignas(1024) unsigned char btile[8192];
    __shared__ alignas(8) u64 full0, full1, empty;
    const int tid = threadIdx.x, warp = tid / 32;
    if (tid == 0) {
        mbar_init(sa(&full0), 1);
        mbar_init(sa(&full1), 1);
        mbar_init(sa(&empty), ARRIVALS);
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    if (warp == 4) {
        if (tid == 128) {
            expect(sa(&full0), 8192 + 8192);
            tma2d(sa(atile), &ma, sa(&full0), 0, 0);
            tma2d(sa(btile), &mb, sa(&full0), 0, 0);
            wait_parity(sa(&empty), 0);                         // the stage is free: refill it
            expect(sa(&full1), 8192);
            REFILL
        }
        return;
    }
    float d[32];
    for (int i = 0; i < 32; ++i) d[i] = 0.f;
    wait_parity(sa(&full0), 0);
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    wgmma_k64(d, sa(atile), sa(btile));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    RELEASE_BEFORE
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    RELEASE_AFTER
    store_c64(c, d, warp, tid % 32);
    wait_parity(sa(&full1), 0);
}
"""
ARRIVE = 'asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(sa(&empty)) : "memory");'
# the stage refilled: A (each warp's own 16 rows) or B (which every warp's D depends on)
REFILLS = {"A": "tma2d(sa(atile), &ma, sa(&full1), 0, 64);", "B": "tma2d(sa(btile), &mb, sa(&full1), 0, 64);"}
RELEASERS = {"every warp": ("4", f"if (tid % 32 == 0) {ARRIVE}"), "warp 0": ("1", f"if (tid == 0) {ARRIVE}")}

HARNESS = '''
import numpy as np
LAUNCH = {"arch": "sm_90a", "entry": "release", "grid": 1, "block": 160}
TOLERANCE = {"rtol": 1e-4, "atol": 1e-4}
AXES = {2: ("row", "col")}

def arguments(h):
    a = h.rng.standard_normal((128, 64)).astype(h.bfloat16)      # rows 64..127: the refill
    b = h.rng.standard_normal((128, 64)).astype(h.bfloat16)      # rows 64..127: the refill
    return [h.tensor_map(a, box=(64, 64), swizzle="128B", name="A"),
            h.tensor_map(b, box=(64, 64), swizzle="128B", name="B"), np.zeros((64, 64), np.float32)]

def reference(args):
    a, b = (x.astype(np.float64) for x in args[:2])
    return {2: a[:64] @ b[:64].T}
'''


def _run(capsys, tmp_path, releaser: str, early: bool, seed: int, refill: str = "A"):
    arrivals, arrive = RELEASERS[releaser]
    source = (KERNEL.replace("ARRIVALS", arrivals).replace("REFILL", REFILLS[refill]).replace("RELEASE_BEFORE", arrive if early else "")
              .replace("RELEASE_AFTER", "" if early else arrive))
    (tmp_path / "release.cu").write_text(source)
    (tmp_path / "release_harness.py").write_text(HARNESS)
    code = main(["emu", "run", str(tmp_path / "release.cu"), "--harness", str(tmp_path / "release_harness.py"),
                 "--seed", str(seed), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), out + err


SEEDS = [0, 1, 2, 3, -1]


@pytest.mark.parametrize("refill", sorted(REFILLS))
@pytest.mark.parametrize("releaser", sorted(RELEASERS))
@pytest.mark.parametrize("seed", SEEDS)
def test_a_stage_released_after_the_wait_passes_in_every_order(capsys, tmp_path, releaser, seed, refill):
    code, r, text = _run(capsys, tmp_path, releaser, early=False, seed=seed, refill=refill)
    assert code == 0 and r["passed"] and not r["warnings"], text


@pytest.mark.parametrize("refill", sorted(REFILLS))
@pytest.mark.parametrize("releaser", sorted(RELEASERS))
@pytest.mark.parametrize("seed", SEEDS)
def test_a_stage_released_before_the_wait_is_caught_in_every_order(capsys, tmp_path, releaser, seed, refill):
    code, r, text = _run(capsys, tmp_path, releaser, early=True, seed=seed, refill=refill)
    assert code == 1 and not r["passed"], text
    found = " ".join(r["diagnostics"]) if isinstance(r["diagnostics"], list) else str(r["diagnostics"])
    # the refill landed after the wgmmas completed (the race with their reads, as recorded where
    # they end) or while they ran (their accumulators undefined, the store the error)
    assert ("its reads end at the wgmma.wait_group that completes it" in found
            or "which holds an undefined value" in found), text
