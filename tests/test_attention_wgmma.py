"""Hopper attention (wgmma mainloop): every variant compiles for sm_90a and its SASS shows
the port: HGMMA for both MMAs (the second with P from registers), MUFU.EX2 softmax,
UTMALDG loads, setmaxnreg, no spills, within the descriptor's limits."""
from __future__ import annotations

import re

import pytest

from porter.descriptor.arch import load_arch
from porter.errors import CompileError
from porter.kernels import attention, attention_wgmma
from porter.kernels.base import KernelSpec, Unsupported
from porter.kernels.build import build_kernel
from porter.levels import Level
from porter.compile.sass import count_matching
from porter.compile.toolchain import compile_cuda



@pytest.fixture(scope="module")
def builds(hopper):
    """Each Hopper attention kernel built once per session (the compile cache helps reruns)."""
    return {spec.name: build_kernel(spec, hopper) for spec in attention.variants(hopper)}


def test_every_variant_reaches_sass_checked(builds):
    assert sorted(builds) == sorted(["attention.hd64", "attention.hd64.causal",
                                     "attention.hd128", "attention.hd128.causal"])
    for name, b in builds.items():
        failed = [c.to_dict() for c in b.checks if not c.passed]
        assert b.level == Level.SASS_CHECKED, (name, failed)


def _sass_lines(build, regex):
    return [l for l in build.sass.splitlines() if re.search(regex, l)]


@pytest.mark.parametrize("name", ["attention.hd64", "attention.hd128.causal"])
def test_both_mmas_are_warpgroup_mmas_with_p_from_registers(builds, name):
    b = builds[name]
    d, bn = b.spec.config["head_dim"], b.spec.config["block_n"]
    # S = Q K^T: A and B are shared-memory descriptors, one HGMMA per 16 of the head dim.
    qk = _sass_lines(b, rf"HGMMA\.64x{bn}x16\.F32\.BF16 R\d+, gdesc\[UR\d+\]")
    # O += P V: A is a register fragment (P never touches shared memory), B transposed (V).
    pv = _sass_lines(b, rf"HGMMA\.64x{d}x16\.F32\.BF16 R\d+, R\d+, gdesc\[UR\d+\]\.tnspB")
    # Each MMA appears twice: S in the prologue and the steady-state loop, P V in the
    # loop and after it (the software pipeline), each as head_dim/16 resp. block_n/16 steps.
    assert len(qk) == 2 * (d // 16)
    assert len(pv) == 2 * (bn // 16)
    assert count_matching(b.histogram, r"HGMMA") == len(qk) + len(pv)
    assert count_matching(b.histogram, r"WARPGROUP\.ARRIVE") >= 4


def test_consumer_warpgroups_take_turns_on_named_barriers(builds):
    """Ping-pong: bar.sync on a named barrier (not 0, which is __syncthreads) before
    issuing, bar.arrive on the other warpgroup's barrier after, 256 threads each."""
    for name, b in builds.items():
        assert b.spec.config["pingpong"]
        assert _sass_lines(b, r"BAR\.SYNC(\.DEFER_BLOCKING)? R\d+, 0x100"), name
        assert _sass_lines(b, r"BAR\.ARV R\d+, 0x100"), name


def test_softmax_overlaps_the_previous_pv(builds):
    """wgmma.wait_group 1 after issuing S(n) and P V(n-1): the softmax of tile n runs
    while the tensor core still accumulates O. Checked in the SASS, not the source:
    every exponential of the steady-state softmax must sit between the DEPBAR that waits
    for S(n) (LE 1) and the next one that waits for P V(n-1) (LE 0). (When the wait<0>
    followed the softmax in the same basic block, ptxas scheduled it above all of the
    MUFU.EX2s and the overlap was gone although the source looked right.)"""
    for name, b in builds.items():
        lines = b.sass.splitlines()
        wait1 = [i for i, l in enumerate(lines) if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x1\b", l)]
        assert len(wait1) == 1, name
        wait0 = next(i for i in range(wait1[0] + 1, len(lines))
                     if re.search(r"WARPGROUP\.DEPBAR\.LE gsb0, 0x0\b", lines[i]))
        overlapped = sum("MUFU.EX2" in l for l in lines[wait1[0]:wait0])
        bn = b.spec.config["block_n"]
        # bn/2 scores per thread, plus the two rows' correction factors.
        assert overlapped >= bn // 2 + 2, (name, overlapped)


@pytest.mark.parametrize("name", ["attention.hd64.causal", "attention.hd128"])
def test_softmax_runs_on_mufu_ex2_with_folded_scale(builds, name):
    b = builds[name]
    bn = b.spec.config["block_n"]
    # Each consumer thread owns 2 rows x bn/4 columns of S: bn/2 exponentials for P
    # plus one correction factor per row.
    assert count_matching(b.histogram, r"MUFU\.EX2") >= bn // 2 + 2
    assert count_matching(b.histogram, r"MUFU\.LG2") >= 1, "LSE needs log2(l)"
    # exp2(s * scale_log2 - m * scale_log2) is one FFMA feeding each MUFU.EX2.
    assert count_matching(b.histogram, r"FFMA") >= bn // 2


def test_tma_loads_setmaxnreg_and_no_spills(builds, hopper):
    for name, b in builds.items():
        d = b.spec.config["head_dim"]
        # Q, K, V: one 64-column (128-byte) box each per 64 of the head dim.
        assert count_matching(b.histogram, r"UTMALDG") == 3 * (d // 64), name
        assert count_matching(b.histogram, r"USETMAXREG\.DEALLOC") == 1, name
        assert count_matching(b.histogram, r"USETMAXREG\.TRY_ALLOC") == 1, name
        assert count_matching(b.histogram, r"(STL|LDL)\b") == 0, name
        r = b.resources
        assert r["spill_store_bytes"] == r["spill_load_bytes"] == r["local_bytes"] == r["stack_bytes"] == 0
        # Launch-time registers: the whole CTA must fit the register file; setmaxnreg
        # then moves the producer's share to the consumers.
        assert r["registers"] * b.spec.threads <= hopper.regs_per_sm, name
        cfg = b.spec.config
        assert 128 * cfg["producer_regs"] + 256 * cfg["consumer_regs"] <= hopper.regs_per_sm


def test_shared_memory_plan_fits_the_block_budget(hopper):
    for spec in attention.variants(hopper):
        cfg = spec.config
        need = 1024 + cfg["q_bytes"] + cfg["stages"] * cfg["stage_bytes"]
        assert cfg["stages"] >= 2
        assert need <= spec.smem_bytes <= hopper.smem_per_block_bytes
        # One more stage would not fit (or the ring is at its cap).
        assert (cfg["stages"] == attention_wgmma.MAX_STAGES
                or need + cfg["stage_bytes"] > hopper.smem_per_block_bytes)
    assert attention_wgmma.smem_plan(128, 128, 100 * 1024)["stages"] is None


class _SmallSmem:
    """The Hopper descriptor with a smaller shared-memory budget per block."""

    def __init__(self, arch, smem):
        self._arch, self.smem_per_block_bytes = arch, smem

    def __getattr__(self, name):
        return getattr(self._arch, name)


def test_tiny_smem_budget_is_unsupported_not_broken(hopper):
    out = attention_wgmma.make_spec(_SmallSmem(hopper, 96 * 1024), 128, False)
    assert isinstance(out, Unsupported) and "shared memory" in out.reason
    fits = attention_wgmma.make_spec(_SmallSmem(hopper, 120 * 1024), 64, True)
    assert isinstance(fits, KernelSpec) and fits.config["stages"] == 3 and fits.smem_bytes <= 120 * 1024


def test_the_compiler_rejects_the_hopper_kernel_on_a_tcgen05_target(builds):
    """The port is necessary: the wgmma mainloop does not build for a tcgen05-only arch."""
    blackwell = load_arch("blackwell")
    assert not blackwell.has("wgmma")
    with pytest.raises(CompileError, match="wgmma|not supported"):
        compile_cuda(builds["attention.hd64"].source, blackwell.target, "attention.hd64.cu")


# ---- the producer / consumer protocol, replayed on the CPU ----------------------------
# A model of templates/attention/wgmma.cu.j2's synchronisation: mbarriers with phase
# parity and transaction bytes, TMA loads landing at random later times, two consumer
# warpgroups running the software-pipelined loop. Every buffer carries a tag of what
# was loaded into it; the consumers check the tag when an MMA is issued AND when it is
# waited for, so a load that overwrites a buffer still being read is caught, as is a
# deadlock (no role can move and no load is in flight).

import random


class _MBarrier:
    def __init__(self, count):
        self.count, self.pending, self.tx, self.phase = count, count, 0, 0

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, n=1):
        assert self.pending >= n, "more arrivals than the barrier expects in this phase"
        self.pending -= n
        self._maybe_complete()

    def arrive_expect_tx(self, nbytes):
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes):
        self.tx -= nbytes
        assert self.tx >= 0
        self._maybe_complete()

    def done(self, parity):
        # try_wait.parity(P): true once the phase with parity P has completed; on a
        # fresh barrier parity 1 counts as the completed "previous" phase.
        return (self.phase & 1) != parity


def _replay_protocol(kv_tiles_per_tile, stages, seed, fault=None):
    rng = random.Random(seed)
    warps_per_wg, wgs = 4, 2
    q_full, q_empty = _MBarrier(1), _MBarrier(warps_per_wg * wgs)
    k_full = [_MBarrier(1) for _ in range(stages)]
    v_full = [_MBarrier(1) for _ in range(stages)]
    kv_empty = [_MBarrier(warps_per_wg * wgs) for _ in range(stages)]
    buf = {"q": None, **{("k", s): None for s in range(stages)}, **{("v", s): None for s in range(stages)}}
    in_flight = []   # TMA loads not yet landed: (buffer, tag, barrier)
    # Ping-pong turn barriers (named barriers of 256 = 128 waiting + 128 arriving):
    # turns[g] counts the other warpgroup's arrivals not yet matched by g's bar.sync.
    # A second arrival before the sync would complete the hardware barrier with the
    # wrong 256 threads, so at most one may be pending.
    turns = [0, 0]

    def take_turn(wg):
        while turns[wg] == 0:
            yield "blocked"
        turns[wg] -= 1

    def give_turn(wg):
        if fault == "no_pingpong_token" and wg == 1 and not started[0]:
            started[0] = True
            return
        turns[1 - wg] += 1
        assert turns[1 - wg] <= 1, "two turn hand-offs pending on one named barrier"

    started = [False]

    def tma(buffer, tag, bar):
        in_flight.append((buffer, tag, bar))

    def wait(bar, parity):
        while not bar.done(parity):
            yield "blocked"

    def producer():
        kv_iter = 0
        for q_round, (tile, kv) in enumerate(kv_tiles_per_tile):
            yield from wait(q_empty, (q_round & 1) ^ 1)
            q_full.arrive_expect_tx(1)
            tma("q", tile, q_full)
            for n in range(kv):
                stage, rnd = kv_iter % stages, kv_iter // stages
                yield from wait(kv_empty[stage], (rnd & 1) ^ (fault != "empty_parity"))
                k_full[stage].arrive_expect_tx(1)
                tma(("k", stage), (tile, n), k_full[stage])
                v_full[stage].arrive_expect_tx(1)
                tma(("v", stage), (tile, n), v_full[stage])
                kv_iter += 1
                yield

    def consumer(wg):
        kv_iter = 0
        if wg == 1:
            give_turn(wg)            # warpgroup 0 issues first
        for q_round, (tile, kv) in enumerate(kv_tiles_per_tile):
            yield from wait(q_full, q_round & 1)
            if fault == "early_q_release" and kv > 0:
                q_empty.arrive(warps_per_wg)
            if kv == 0:
                q_empty.arrive(warps_per_wg)
                continue
            stage, phase = kv_iter % stages, (kv_iter // stages) & 1
            yield from wait(k_full[stage], phase)
            yield from take_turn(wg)
            assert buf["q"] == tile and buf[("k", stage)] == (tile, 0)      # issue S(0)
            give_turn(wg)
            yield
            assert buf["q"] == tile and buf[("k", stage)] == (tile, 0)      # wait<0>
            if kv == 1 and fault != "early_q_release":
                q_empty.arrive(warps_per_wg)
            pv = None   # (stage, tag) read by the P V in flight, waited for one step later
            for n in range(1, kv):
                if pv is not None:
                    yield
                    assert buf[("v", pv[0])] == pv[1]                       # wait<0>: P V(n-2) done
                    if fault != "early_release":
                        kv_empty[pv[0]].arrive(warps_per_wg)
                prev, prev_phase = stage, phase
                kv_iter += 1
                stage, phase = kv_iter % stages, (kv_iter // stages) & 1
                yield from wait(k_full[stage], phase)
                yield from wait(v_full[prev], prev_phase)
                yield from take_turn(wg)
                assert buf["q"] == tile and buf[("k", stage)] == (tile, n)  # issue S(n)
                assert buf[("v", prev)] == (tile, n - 1)                    # issue P V(n-1)
                give_turn(wg)
                if fault == "early_release":
                    kv_empty[prev].arrive(warps_per_wg)
                pv = (prev, (tile, n - 1))
                yield
                assert buf["q"] == tile and buf[("k", stage)] == (tile, n)  # wait<1>: S(n) done
                if n == kv - 1 and fault != "early_q_release":
                    q_empty.arrive(warps_per_wg)
                # the softmax of S(n) runs here, while P V(n-1) may still accumulate
            if pv is not None:
                yield
                assert buf[("v", pv[0])] == pv[1]                           # wait<0> after the loop
                if fault != "early_release":
                    kv_empty[pv[0]].arrive(warps_per_wg)
            yield from wait(v_full[stage], phase)
            yield from take_turn(wg)
            assert buf[("v", stage)] == (tile, kv - 1)                      # last P V
            give_turn(wg)
            yield
            assert buf[("v", stage)] == (tile, kv - 1)
            kv_empty[stage].arrive(warps_per_wg)
            kv_iter += 1
        if wg == 0 and fault != "unbalanced_turns":
            yield from take_turn(wg)   # consume warpgroup 1's last hand-off before exit

    roles = [producer(), consumer(0), consumer(1)]
    stuck = 0   # consecutive picks in which the picked role could not move
    while roles or in_flight:
        if in_flight and (not roles or rng.random() < 0.3):
            buffer, tag, bar = in_flight.pop(rng.randrange(len(in_flight)))
            buf[buffer] = tag
            bar.complete_tx(1)
            stuck = 0
            continue
        role = rng.choice(roles)
        try:
            stuck = stuck + 1 if next(role) == "blocked" else 0
        except StopIteration:
            roles.remove(role)
            stuck = 0
        # With nothing in flight, only a role can unblock another; 200 blocked picks
        # in a row (each role picked many times) means none of them can move.
        assert stuck < 200 or in_flight, "deadlock: every role waits and no load is in flight"
    assert all(b.pending == b.count and b.tx == 0 for b in [q_full, q_empty] + k_full + v_full + kv_empty)
    # No named-barrier arrival is left pending at exit: every hand-off was consumed.
    assert turns == [0, 0], f"turn hand-offs left pending at exit: {turns}"


@pytest.mark.parametrize("stages", [2, 3, 4])
@pytest.mark.parametrize("seed", range(6))
def test_pipeline_protocol_delivers_every_tile_in_order(stages, seed):
    rng = random.Random(1000 * stages + seed)
    # A persistent CTA's tile list: causal tiles visit different numbers of K/V tiles,
    # including none (rows that see no key) and a single one (prologue + tail only).
    tiles = [(t, rng.choice([0, 1, 1, 2, 3, 5, 8])) for t in range(12)]
    _replay_protocol(tiles, stages, seed)


@pytest.mark.parametrize("fault", ["early_release", "early_q_release", "empty_parity", "no_pingpong_token",
                                   "unbalanced_turns"])
def test_pipeline_protocol_model_catches_broken_protocols(fault):
    """The replay is a real check: freeing a stage before its P V finished, freeing Q
    before the last S, waiting on the wrong parity, warpgroup 1 not handing the
    first turn to warpgroup 0, or exiting with a turn hand-off still pending, each
    fails for some schedule."""
    failures = 0
    for seed in range(20):
        rng = random.Random(seed)
        tiles = [(t, rng.choice([1, 2, 3, 5, 8])) for t in range(10)]
        try:
            _replay_protocol(tiles, 2, seed, fault=fault)
        except AssertionError:
            failures += 1
    assert failures > 0


def test_rendered_loop_has_the_order_the_protocol_model_replays(builds):
    """Ties the model above to the source: in the steady-state loop, the P V issued by
    the previous iteration is waited for (wait<0>) at the top, and only then is its stage
    freed, O rescaled and P packed; S(n) is issued before P V(n-1); the q_empty arrival
    follows wait<1>; the softmax comes last, overlapping P V(n-1)."""
    src = builds["attention.hd128.causal"].source
    loop = src[src.index("for (int n = 1; n < t.kv_tiles; ++n)"):]
    order = ["wgmma_wait<0>();", "mbar_arrive(s.kv_empty(pv_stage));", "rescale_o(oacc, alpha);",
             "pack_p(sacc, pfrag);", "mbar_wait(s.v_full(prev_stage), prev_phase);", "take_turn(wg);",
             "mma_qk(sacc, q_rows, s.k(stage));", "mma_pv(oacc, pfrag, s.v(prev_stage));",
             "give_turn(wg);", "wgmma_wait<1>();", "mbar_arrive(s.q_empty());", "online_softmax("]
    positions = [loop.index(x) for x in order]
    assert positions == sorted(positions)
    # After the loop: wait for the loop's last P V, free its stage, rescale, issue the last P V.
    tail = loop[loop.index("online_softmax("):]
    tail_order = ["wgmma_wait<0>();", "mbar_arrive(s.kv_empty(pv_stage));", "rescale_o(oacc, alpha);",
                  "pack_p(sacc, pfrag);", "mma_pv(oacc, pfrag, s.v(stage));", "mbar_arrive(s.kv_empty(stage));"]
    positions = [tail.index(x) for x in tail_order]
    assert positions == sorted(positions)
    assert "if (wg == 1) give_turn(wg);" in src and "constexpr bool kPingPong = true;" in src
    # ... and the opening hand-off is consumed before exit (the model's turns == [0, 0]).
    assert src.index("if (wg == 0) take_turn(wg);") > src.index("store_lse(p, t, row")
    assert "mbar_init(s.q_empty(), kConsumerWarps);" in src and "constexpr uint32_t kConsumerWarps = 4 * kConsumerWarpgroups;" in src


# ---- S accumulator fragment -> P register-A fragment (no shuffles) -----------------------

def _d_fragment(lane: int, reg: int) -> tuple[int, int]:
    """(row, col) in a warp's 16 rows of the wgmma f32 accumulator (PTX ISA, wgmma
    "Register Fragments", matrix D for .m64nNk16): register 4j + 2i + e holds row
    lane/4 + 8i, column 8j + 2 (lane % 4) + e."""
    j, i, e = reg // 4, (reg % 4) // 2, reg % 2
    return lane // 4 + 8 * i, 8 * j + 2 * (lane % 4) + e


def _a_fragment(lane: int, reg: int, half: int) -> tuple[int, int]:
    """(row, col) of the 16-bit element in the low (half 0) or high (half 1) 16 bits of
    A register reg (a0..a3) of a .bf16 register-A wgmma (PTX ISA, matrix A for
    .m64nNk16): a0 / a1 rows lane/4 / + 8, columns 2 (lane % 4) + half; a2 / a3 the
    same rows 8 columns further."""
    return lane // 4 + 8 * (reg % 2), 8 * (reg // 2) + 2 * (lane % 4) + half


def test_p_fragment_packing_matches_the_isa_layouts():
    """pack_p_fragment reinterprets the QK accumulator as the PV A operand in place:
    for every lane, every k-slice and both halves of every A register, the packed S
    element must be the one at the same (row, column) of P."""
    from porter import paths

    src = (paths.data_dir("kernels_src") / "attention" / "wgmma_frag.cuh").read_text()
    packs = re.findall(r"a\[(\d)\] = pack_bf16x2\(p\[8 \* kk \+ (\d)\], p\[8 \* kk \+ (\d)\]\);", src)
    assert sorted(int(q) for q, _, _ in packs) == [0, 1, 2, 3]
    # pack_bf16x2(lo, hi): its first argument lands in the low half (common.cuh, cvt.rn.bf16x2).
    for kk in range(128 // 16):
        for q, lo, hi in packs:
            for half, off in ((0, int(lo)), (1, int(hi))):
                for lane in range(32):
                    s_row, s_col = _d_fragment(lane, 8 * kk + off)
                    a_row, a_col = _a_fragment(lane, int(q), half)
                    assert (s_row, s_col) == (a_row, 16 * kk + a_col), (kk, q, half, lane)
