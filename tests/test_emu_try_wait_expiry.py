"""mbarrier.try_wait may return false with the phase still incomplete: its time limit expires
(PTX ISA "mbarrier.test_wait / mbarrier.try_wait": the limit is the implementation's), so a
kernel must retry it. The simulator lets the first try at an incomplete phase expire and parks
the retry until the phase completes, so a kernel that goes on after one try reads what its
barrier does not yet guard, and the race detector sees it, in every warp order. Before, every
try_wait parked until the phase completed and such a kernel passed.

The kernel (written here): warp 1 stages 32 floats in shared memory (after some busy work,
so warp 0 reaches its wait first) and arrives on an mbarrier; warp 0 waits on it, in a loop
or once, and copies the floats out, counting the tries that returned false."""

from __future__ import annotations

import json

import pytest

from porter.cli import main

KERNEL = r"""
typedef unsigned int u32;
__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }

extern "C" __global__ void __launch_bounds__(64) handoff(const float* in, float* out, int* expired) {
    __shared__ float buf[32];
    __shared__ alignas(8) unsigned long long full;
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const u32 bar = sa(&full);
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(bar));
        asm volatile("fence.mbarrier_init.release.cluster;");
    }
    __syncthreads();
    if (warp == 1) {
        float x = in[lane];
        for (int i = 0; i < 64; ++i) x = x * 1.0001f + in[(lane + i) % 32] * 0.0f;
        buf[lane] = x;
        __syncwarp();
        if (lane == 0) asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" :: "r"(bar) : "memory");
        return;
    }
    int misses = 0;
    u32 done = 0;
    do {
        asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0;\nselp.u32 %0, 1, 0, p;\n}\n"
                     : "=r"(done) : "r"(bar) : "memory");
        misses += !done;
    } while (RETRY);
    out[lane] = buf[lane];
    if (lane == 0) expired[0] = misses;
}
"""

HARNESS = '''
import numpy as np
LAUNCH = {"arch": "sm_90a", "entry": "handoff", "grid": 1, "block": 64}
TOLERANCE = {"rtol": 1e-3, "atol": 1e-3}

def arguments(h):
    x = h.rng.standard_normal(32).astype(np.float32)
    return [x, np.zeros(32, np.float32), np.full(1, -1, np.int32)]

def reference(args):       # out; and one expired try: warp 0 waits before warp 1 arrives
    return {1: args[0].astype(np.float64) * 1.0001 ** 64, 2: np.ones(1)}
'''


def _run(capsys, tmp_path, retry: bool, seed: int):
    (tmp_path / "handoff.cu").write_text(KERNEL.replace("RETRY", "!done" if retry else "false"))
    (tmp_path / "handoff_harness.py").write_text(HARNESS)
    code = main(["emu", "run", str(tmp_path / "handoff.cu"), "--harness", str(tmp_path / "handoff_harness.py"),
                 "--seed", str(seed), "--json"])
    out, err = capsys.readouterr()
    return code, json.loads(out), out + err


@pytest.mark.parametrize("seed", [0, 1, 2, -1])
def test_a_retried_try_wait_passes_and_its_first_try_expired(capsys, tmp_path, seed):
    code, r, text = _run(capsys, tmp_path, retry=True, seed=seed)
    assert code == 0 and r["passed"], text


@pytest.mark.parametrize("seed", [0, 1, 2, -1])
def test_a_single_try_wait_is_caught(capsys, tmp_path, seed):
    code, r, text = _run(capsys, tmp_path, retry=False, seed=seed)
    assert code == 1 and not r["passed"], text
    found = " ".join(r["diagnostics"]) if isinstance(r["diagnostics"], list) else str(r["diagnostics"])
    assert "shared-memory race" in found, text
