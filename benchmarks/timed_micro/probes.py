"""Micro-benchmarks of porter's timed simulator (porter.emu.timed): small probe kernels in
PTX, written here, each run in timed mode on one SM (two for a CTA pair), reporting the
throughput the model gives. They reproduce the shape of published curves:

- wgmma throughput vs N, SS vs RS (A from shared memory or registers);
- tcgen05 SS with N < 128 bound by shared memory, TS (A from Tensor Memory) at the peak;
- TMA bytes in flight vs bandwidth (Little's law up to the SM's share of the L2).

Figures are cycles of porter's timing model, not measurements. ``python probes.py``
prints the curves for hopper and blackwell.
"""

from __future__ import annotations

import numpy as np

from porter import emu
from porter.emu.timed import timed

LBO, SBO = 128, 256                  # K-major, no swizzle (PTX ISA shared-memory matrix layouts)


def params_of(arch_name: str) -> dict:
    from porter.descriptor.arch import load_arch
    from porter.timing.figures import Figures
    from porter.timing.l1 import params

    return params(Figures.of(load_arch(arch_name)))


def _timed_cycles(ptx: str, params: dict, block: int, args: list, cluster=(1, 1, 1), grid=1) -> tuple[float, list]:
    with timed(params) as runs:
        res = emu.launch(ptx, "probe", grid=grid, block=block, args=args, cluster=cluster)
    return runs[0]["cycles"], res.outputs


# ---- wgmma: one or two warpgroups, `mmas` m64nNk16 bf16 MMAs each, SS or RS ------------------

def wgmma_ptx(n: int, rs: bool, groups: int, per_group: int = 1) -> str:
    """``groups`` times: ``per_group`` MMAs, commit, wait for them (as a K loop that waits
    each step: the MMA latency is exposed, hidden only by the other warpgroup)."""
    acc = n // 2                                           # f32 accumulators per thread
    regs = ", ".join(f"%f{i}" for i in range(acc))
    a_regs = "{%r10, %r11, %r12, %r13}"
    a_bytes = 64 * 16 * 2
    b_bytes = n * 16 * 2
    desc = (LBO >> 4) << 16 | (SBO >> 4) << 32
    body = []
    for g in range(groups):
        body.append("wgmma.fence.sync.aligned;")
        for i in range(per_group):
            a_op = a_regs if rs else "%rd6"
            scale_d = "%p1" if g == i == 0 else "%p2"
            body.append(f"wgmma.mma_async.sync.aligned.m64n{n}k16.f32.bf16.bf16 {{{regs}}}, {a_op}, %rd8, "
                        f"{scale_d}, 1, 1{'' if rs else ', 0'}, 0;")
        body += ["wgmma.commit_group.sync.aligned;", "wgmma.wait_group.sync.aligned 0;"]
    return f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry probe(.param .u64 out)
{{
.reg .pred %p<4>; .reg .b32 %r<32>; .reg .f32 %f<{acc + 1}>; .reg .b64 %rd<16>;
.shared .align 1024 .b8 sm[{a_bytes + b_bytes}];
mov.u32 %r0, %tid.x;
mov.u32 %r1, sm;
mov.b32 %r10, 0; mov.b32 %r11, 0; mov.b32 %r12, 0; mov.b32 %r13, 0;
shr.u32 %r20, %r1, 4;
cvt.u64.u32 %rd5, %r20;
or.b64 %rd6, %rd5, {desc};
add.u32 %r21, %r1, {a_bytes};
shr.u32 %r22, %r21, 4;
cvt.u64.u32 %rd7, %r22;
or.b64 %rd8, %rd7, {desc};
setp.ne.u32 %p1, %r0, %r0;
setp.eq.u32 %p2, %r0, %r0;
{chr(10).join(body)}
ld.param.u64 %rd2, [out]; cvta.to.global.u64 %rd2, %rd2;
mul.wide.u32 %rd9, %r0, 4;
add.s64 %rd10, %rd2, %rd9;
st.global.f32 [%rd10], %f0;
ret;
}}
"""


def _steady(run, mmas: tuple[int, int], flop_per_mma: float) -> float:
    """FLOP per cycle between two runs of different MMA counts: the set-up, the pipeline's
    fill and the last MMA's latency cancel."""
    c1, c2 = run(mmas[0]), run(mmas[1])
    return (mmas[1] - mmas[0]) * flop_per_mma / max(1e-9, c2 - c1)


def wgmma_rate(params: dict, n: int, rs: bool, groups: tuple = (2, 6), warpgroups: int = 2) -> float:
    """Steady-state dense FLOP per cycle per SM of ``warpgroups`` warpgroups, each issuing an
    MMA and waiting for it, again and again."""
    def run(k):
        cycles, outs = _timed_cycles(wgmma_ptx(n, rs, k), params, 128 * warpgroups,
                                     [np.zeros(128 * warpgroups, np.float32)])
        assert np.all(outs[0] == 0.0)                      # zero operands: the MMAs ran, the result is exact
        return cycles
    return _steady(run, groups, warpgroups * 2.0 * 64 * n * 16)


# ---- TMA: one thread keeps `stages` bulk copies of `chunk` bytes in flight ---------------------

def tma_ptx(chunk: int, stages: int, copies: int) -> str:
    lines = []
    for i in range(copies):
        s = i % stages
        if i >= stages:
            lines += [f"W{i}:", f"mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r{40 + s}], {((i // stages) - 1) & 1};",
                      f"@!%p3 bra W{i};"]
        lines += [f"mbarrier.arrive.expect_tx.shared::cta.b64 %rd20, [%r{40 + s}], {chunk};",
                  f"add.s64 %rd21, %rd1, {(i * chunk) % (stages * chunk * 4)};",
                  f"add.u32 %r30, %r2, {s * chunk};",
                  f"cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%r30], [%rd21], {chunk}, "
                  f"[%r{40 + s}];"]
    for i in range(max(0, copies - stages), copies):
        s = i % stages
        lines += [f"E{i}:", f"mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r{40 + s}], {(i // stages) & 1};",
                  f"@!%p3 bra E{i};"]
    inits = []
    for s in range(stages):
        inits += [f"add.u32 %r{40 + s}, %r3, {8 * s};", f"mbarrier.init.shared::cta.b64 [%r{40 + s}], 1;"]
    return f""".version 8.0
.target sm_90a
.address_size 64
.visible .entry probe(.param .u64 src, .param .u64 out)
{{
.reg .pred %p<4>; .reg .b32 %r<{40 + stages + 1}>; .reg .b64 %rd<32>;
.shared .align 128 .b8 buf[{stages * chunk}];
.shared .align 8 .b8 bars[{8 * stages}];
ld.param.u64 %rd1, [src];
mov.u32 %r2, buf;
mov.u32 %r3, bars;
{chr(10).join(inits)}
fence.mbarrier_init.release.cluster;
{chr(10).join(lines)}
ld.shared.u32 %r4, [%r2];
ld.param.u64 %rd2, [out]; cvta.to.global.u64 %rd2, %rd2;
st.global.u32 [%rd2], %r4;
ret;
}}
"""


def tma_bandwidth(params: dict, inflight: int, chunk: int = 4096, copies: int = 24) -> float:
    """Bytes per cycle one SM's TMA delivers with ``inflight`` bytes of copies in flight."""
    stages = max(1, inflight // chunk)
    src = (np.arange(stages * chunk * 4, dtype=np.uint32) * 2654435761).astype(np.uint32).view(np.uint8)
    cycles, outs = _timed_cycles(tma_ptx(chunk, stages, copies), params, 1, [src, np.zeros(1, np.uint32)])
    assert int(outs[1][0]) == int(src[:4].view(np.uint32)[0]) or copies > stages   # the copy landed
    return copies * chunk / cycles


# ---- tcgen05: one thread issues `mmas` M=128 kind::f16 MMAs, A from shared memory or TMEM ----

def tcgen05_ptx(n: int, ts: bool, mmas: int, m: int = 128) -> str:
    a_bytes, b_bytes = m * 16 * 2, n * 16 * 2
    idesc = (1 << 4) | (1 << 7) | (1 << 10) | ((n >> 3) << 17) | ((m >> 4) << 24)   # f32 D, bf16 A/B, K-major
    desc = (1 << 46) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32)                     # version 1, no swizzle
    a_col = 256                                          # TS: A's 8 columns after D's (up to 256)
    a_op = f"[%r24]" if ts else "%rd5"
    mma = "\n".join(f"tcgen05.mma.cta_group::1.kind::f16 [%r20], {a_op}, %rd6, %r21, {'%p4' if i == 0 else '%p5'};"
                     for i in range(mmas))
    store_a = ""
    if ts:
        zeros = ", ".join(["%r60"] * 8)
        store_a = f"""mov.b32 %r60, 0;
and.b32 %r30, %r2, 3;
shl.b32 %r31, %r30, 21;
add.u32 %r32, %r20, %r31;
add.u32 %r32, %r32, {a_col};
tcgen05.st.sync.aligned.32x32b.x8.b32 [%r32], {{{zeros}}};
tcgen05.wait::st.sync.aligned;"""
    return f""".version 8.6
.target sm_100a
.address_size 64
.visible .entry probe(.param .u64 out)
{{
.reg .b32 %r<80>; .reg .b64 %rd<16>; .reg .pred %p<8>;
.shared .align 1024 .b8 buf[{a_bytes + b_bytes}];
.shared .align 16 .b8 bars[16];
mov.u32 %r1, %tid.x;
shr.u32 %r2, %r1, 5;
mov.u32 %r10, bars;
add.u32 %r12, %r10, 8;
mov.u32 %r13, buf;
setp.ne.u32 %p1, %r2, 0;
setp.ne.u32 %p2, %r1, 0;
@%p1 bra SKIP_ALLOC;
tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r12], 512;
tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;
SKIP_ALLOC:
@%p2 bra SKIP_INIT;
mbarrier.init.shared::cta.b64 [%r10], 1;
SKIP_INIT:
tcgen05.fence::before_thread_sync;
bar.sync 0;
tcgen05.fence::after_thread_sync;
ld.shared.u32 %r20, [%r12];
{store_a}
tcgen05.fence::before_thread_sync;
bar.sync 0;
tcgen05.fence::after_thread_sync;
@%p2 bra WAIT;
cvt.u64.u32 %rd3, %r13;
shr.u64 %rd4, %rd3, 4;
or.b64 %rd5, %rd4, {desc};
add.s64 %rd6, %rd5, {a_bytes >> 4};
add.u32 %r24, %r20, {a_col};
mov.u32 %r21, {idesc};
setp.ne.u32 %p4, %r1, %r1;
setp.eq.u32 %p5, %r1, %r1;
{mma}
tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r10];
WAIT:
mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r10], 0;
@!%p3 bra WAIT;
tcgen05.fence::after_thread_sync;
ld.param.u64 %rd7, [out];
cvta.to.global.u64 %rd7, %rd7;
mul.wide.u32 %rd8, %r1, 4;
add.s64 %rd9, %rd7, %rd8;
st.global.u32 [%rd9], %r1;
tcgen05.fence::before_thread_sync;
bar.sync 0;
@%p1 bra END;
tcgen05.fence::after_thread_sync;
tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r20, 512;
END:
ret;
}}
"""


def tcgen05_rate(params: dict, n: int, ts: bool, mmas: tuple = (4, 12)) -> float:
    """Steady-state dense FLOP per cycle per SM of back-to-back M=128 K=16 bf16 MMAs."""
    def run(k):
        cycles, outs = _timed_cycles(tcgen05_ptx(n, ts, k), params, 128, [np.zeros(128, np.uint32)])
        assert np.array_equal(outs[0], np.arange(128, dtype=np.uint32))
        return cycles
    return _steady(run, mmas, 2.0 * 128 * n * 16)


# ---- tcgen05 cta_group::2: a CTA pair, the leader issues M=256 MMAs over both SMs -----------

def tcgen05_pair_ptx(n: int, mmas: int) -> str:
    """Each CTA holds its 128 rows of A and its half of B's N rows; the leader (rank 0)
    issues the pair's MMAs and commits to both CTAs' barriers."""
    m = 256
    a_bytes, b_bytes = (m // 2) * 16 * 2, (n // 2) * 16 * 2
    idesc = (1 << 4) | (1 << 7) | (1 << 10) | ((n >> 3) << 17) | ((m >> 4) << 24)
    desc = (1 << 46) | ((LBO >> 4) << 16) | ((SBO >> 4) << 32)
    mma = "\n".join(f"tcgen05.mma.cta_group::2.kind::f16 [%r20], %rd5, %rd6, %r21, {'%p4' if i == 0 else '%p5'};"
                     for i in range(mmas))
    return f""".version 8.6
.target sm_100a
.address_size 64
.visible .entry probe(.param .u64 out) .reqnctapercluster 2, 1, 1
{{
.reg .b32 %r<80>; .reg .b64 %rd<16>; .reg .pred %p<8>;
.shared .align 1024 .b8 buf[{a_bytes + b_bytes}];
.shared .align 16 .b8 bars[16];
mov.u32 %r1, %tid.x;
shr.u32 %r2, %r1, 5;
mov.u32 %r3, %cluster_ctarank;
mov.u32 %r10, bars;
add.u32 %r12, %r10, 8;
mov.u32 %r13, buf;
setp.ne.u32 %p1, %r2, 0;
setp.ne.u32 %p2, %r1, 0;
setp.ne.u32 %p6, %r3, 0;
@%p1 bra SKIP_ALLOC;
tcgen05.alloc.cta_group::2.sync.aligned.shared::cta.b32 [%r12], 512;
tcgen05.relinquish_alloc_permit.cta_group::2.sync.aligned;
SKIP_ALLOC:
@%p2 bra SKIP_INIT;
mbarrier.init.shared::cta.b64 [%r10], 1;
fence.mbarrier_init.release.cluster;
SKIP_INIT:
tcgen05.fence::before_thread_sync;
barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
tcgen05.fence::after_thread_sync;
ld.shared.u32 %r20, [%r12];
@%p2 bra WAIT;
@%p6 bra WAIT;
cvt.u64.u32 %rd3, %r13;
shr.u64 %rd4, %rd3, 4;
or.b64 %rd5, %rd4, {desc};
add.s64 %rd6, %rd5, {a_bytes >> 4};
mov.u32 %r21, {idesc};
setp.ne.u32 %p4, %r1, %r1;
setp.eq.u32 %p5, %r1, %r1;
mov.b16 %rs1, 3;
{mma}
tcgen05.commit.cta_group::2.mbarrier::arrive::one.shared::cluster.multicast::cluster.b64 [%r10], %rs1;
WAIT:
mbarrier.try_wait.parity.shared::cta.b64 %p3, [%r10], 0;
@!%p3 bra WAIT;
tcgen05.fence::after_thread_sync;
ld.param.u64 %rd7, [out];
cvta.to.global.u64 %rd7, %rd7;
mul.wide.u32 %rd8, %r1, 4;
add.s64 %rd9, %rd7, %rd8;
mul.wide.u32 %rd10, %r3, 512;
add.s64 %rd9, %rd9, %rd10;
st.global.u32 [%rd9], %r1;
tcgen05.fence::before_thread_sync;
barrier.cluster.arrive.release.aligned;
barrier.cluster.wait.acquire.aligned;
@%p1 bra END;
tcgen05.fence::after_thread_sync;
tcgen05.dealloc.cta_group::2.sync.aligned.b32 %r20, 512;
END:
ret;
}}
""".replace(".reg .pred %p<8>;", ".reg .pred %p<8>; .reg .b16 %rs<4>;")


def tcgen05_pair_rate(params: dict, n: int, mmas: tuple = (4, 12)) -> float:
    """Steady-state dense FLOP per cycle per SM of a CTA pair's M=256 MMAs (SS)."""
    def run(k):
        cycles, outs = _timed_cycles(tcgen05_pair_ptx(n, k), params, 128, [np.zeros(256, np.uint32)],
                                     cluster=(2, 1, 1), grid=2)
        assert np.array_equal(outs[0], np.tile(np.arange(128, dtype=np.uint32), 2))
        return cycles
    return _steady(run, mmas, 2.0 * 256 * n * 16) / 2


def main() -> None:
    hopper = params_of("hopper")
    print("porter timed simulator micro-benchmarks (predicted by porter's timing model, not measured)")
    print("hopper wgmma m64nNk16 bf16, 2 warpgroups each issuing and waiting, steady state: FLOP/clk/SM (peak "
          f"{hopper['mma_flop_per_clk_per_sm']['f16']:g})")
    for n in (16, 32, 64, 128, 256):
        print(f"  N={n:3d}  SS {wgmma_rate(hopper, n, False):7.0f}   RS {wgmma_rate(hopper, n, True):7.0f}")
    print("hopper TMA (bulk copies of 4 KiB): bytes/clk/SM by bytes in flight "
          f"(L2 share {hopper['l2_bytes_per_clk_per_sm']:.1f} B/clk, window {hopper['tma_inflight_bytes']:g} B)")
    for kib in (4, 8, 16, 32, 64, 128):
        print(f"  {kib:4d} KiB  {tma_bandwidth(hopper, kib * 1024):6.1f}")

    blackwell = params_of("blackwell")
    print("blackwell tcgen05.mma M=128 kind::f16, steady state: FLOP/clk/SM (peak "
          f"{blackwell['mma_flop_per_clk_per_sm']['f16']:g}); SS reads A and B from shared memory, TS only B")
    for n in (32, 64, 128, 256):
        print(f"  N={n:3d}  SS {tcgen05_rate(blackwell, n, False):7.0f}   TS {tcgen05_rate(blackwell, n, True):7.0f}")
    print("blackwell tcgen05.mma SS per SM: 1 CTA M=128 vs a CTA pair (cta_group::2) M=256 over the same N")
    for n in (64, 128, 256):
        print(f"  N={n:3d}  1-CTA {tcgen05_rate(blackwell, n, False):7.0f}   pair {tcgen05_pair_rate(blackwell, n):7.0f}")


if __name__ == "__main__":
    main()
