"""PTX text the tcgen05 simulator tests share (test_emu_tcgen05_ops / _ws / _shift): the module
header, and the set-up and tear-down their hand-written kernels start and end with."""

HEAD = """.version 8.7
.target sm_100a
.address_size 64
"""


def tmem_setup(cols: int, nbars: int) -> str:
    """The kernel's first steps, as PTX: %r1 the thread, %r2 its warp; ``nbars`` (1 or 2)
    mbarriers in ``bars`` (%r10, then %r11 at +8) and the TMEM address slot after them
    (%r12); warp 0 allocates ``cols`` TMEM columns and gives up its allocation permit,
    thread 0 initialises each mbarrier with a count of 1, the CTA synchronises between
    tcgen05 fences, and every thread loads the TMEM base address into %r20. The caller
    declares .reg %r/%p and the .shared ``bars`` (8 bytes per mbarrier plus the slot)."""
    assert nbars in (1, 2)
    bars = [f"%r{10 + i}" for i in range(nbars)]
    lines = ["mov.u32 %r1, %tid.x;", "shr.u32 %r2, %r1, 5;", "mov.u32 %r10, bars;"]
    lines += [f"add.u32 %r{10 + i}, %r10, {8 * i};" for i in range(1, nbars)]
    lines += [f"add.u32 %r12, %r10, {8 * nbars};",
              "setp.ne.u32 %p1, %r2, 0;",
              "setp.ne.u32 %p2, %r1, 0;",
              "@%p1 bra SKIP_ALLOC;",
              f"tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%r12], {cols};",
              "tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;",
              "SKIP_ALLOC:",
              "@%p2 bra SKIP_INIT;"]
    lines += [f"mbarrier.init.shared::cta.b64 [{b}], 1;" for b in bars]
    lines += ["SKIP_INIT:",
              "tcgen05.fence::before_thread_sync;",
              "bar.sync 0;",
              "tcgen05.fence::after_thread_sync;",
              "ld.shared.u32 %r20, [%r12];"]
    return "".join(ln + "\n" if ln.endswith(":") else f"  {ln}\n" for ln in lines)


def tmem_teardown(cols: int) -> str:
    """The kernel's last steps, as PTX: the CTA synchronises between tcgen05 fences (every
    warp's TMEM reads done), warp 0 (%p1 false) frees the ``cols`` columns at %r20, and every
    thread returns from label END."""
    return ("  tcgen05.fence::before_thread_sync;\n  bar.sync 0;\n  @%p1 bra END;\n"
            "  tcgen05.fence::after_thread_sync;\n"
            f"  tcgen05.dealloc.cta_group::1.sync.aligned.b32 %r20, {cols};\nEND:\n  ret;\n")
