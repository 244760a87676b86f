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

from porter.cli import main

KERNEL = r"""
typedef unsigned int u32;
typedef unsigned long long u64;
struct alignas(64) Map { unsigned char b[128]; };

__device__ __forceinline__ u32 sa(const void* p) { return (u32)__cvta_generic_to_shared(p); }
__device__ __forceinline__ u64 desc128(u32 a) {        // K-major, 128B swizzle, 1024-byte stride
    return (u64)((a >> 4) & 0x3FFF) | (1ull << 16) | ((u64)(1024 >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wait_parity(u32 bar, u32 par) {
    asm volatile("{\n.reg .pred p;\nW: mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n@!p bra W;\n}\n"
                 :: "r"(bar), "r"(par) : "memory");
}
__device__ __forceinline__ void tma2d(u32 dst, const Map* m, u32 bar, int x, int y) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%3, %4}], [%2];" :: "r"(dst), "l"(m), "r"(bar), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ void expect(u32 bar, u32 bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(bytes) : "memory");
}
#define A8(i) "+f"(d[i]), "+f"(d[i+1]), "+f"(d[i+2]), "+f"(d[i+3]), "+f"(d[i+4]), "+f"(d[i+5]), "+f"(d[i+6]), "+f"(d[i+7])

extern "C" __global__ void __launch_bounds__(160)
release(const __grid_constant__ Map ma, const __grid_constant__ Map mb, float* c) {
    __shared__ alignas(1024) unsigned char atile[8192];
    __shared__ alignas(1024) unsigned char btile[8192];
    __shared__ alignas(8) u64 full0, full1, empty;
    const int tid = threadIdx.x, warp = tid / 32;
    if (tid == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&full0)));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(sa(&full1)));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], ARRIVALS;" :: "r"(sa(&empty)));
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
    for (int k = 0; k < 4; ++k) {
        u64 da = desc128(sa(atile) + 32 * k), db = desc128(sa(btile) + 32 * k);
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 "
                     "{%0,%1,%2,%3,%4,%5,%6,%7,%8,%9,%10,%11,%12,%13,%14,%15,"
                     "%16,%17,%18,%19,%20,%21,%22,%23,%24,%25,%26,%27,%28,%29,%30,%31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : A8(0), A8(8), A8(16), A8(24) : "l"(da), "l"(db), "r"(k));
    }
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    RELEASE_BEFORE
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    RELEASE_AFTER
    const int lane = tid % 32, r = warp * 16 + lane / 4, col = (lane % 4) * 2;
    for (int j = 0; j < 8; ++j) {
        c[r * 64 + j * 8 + col] = d[4 * j];           c[r * 64 + j * 8 + col + 1] = d[4 * j + 1];
        c[(r + 8) * 64 + j * 8 + col] = d[4 * j + 2]; c[(r + 8) * 64 + j * 8 + col + 1] = d[4 * j + 3];
    }
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
