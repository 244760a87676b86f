"""PTX text the TMA-load tests share (test_emu_forms_tma, test_emu_forms_public2,
test_emu_idioms): the steps from an mbarrier's initialisation to the wait that sees one tensor
load land, as a hand-written single-warp kernel does them."""

TILE_LOAD = "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes"


def tma_load_and_wait(nbytes, coords: str, load: str = TILE_LOAD, tmap: str = "tmap",
                      label: str = "WAIT") -> str:
    """%r0 = the thread, %r1 = ``tile``, %r9 = ``bar``, %p1 = thread 0: thread 0 initialises
    the mbarrier with a count of 1, the CTA synchronises, thread 0 expects ``nbytes`` and
    issues ``load`` of the box at ``coords`` (PTX operands, e.g. "0, 0") of the tensor-map
    parameter ``tmap`` (%rd1, generic) into the tile; every thread then waits on phase 0
    (%p2). The caller declares %p, %r, %rd and the .shared ``bar`` and ``tile``."""
    return f"""    mov.u32 %r0, %tid.x;
    mov.u32 %r1, tile;
    mov.u32 %r9, bar;
    setp.eq.u32 %p1, %r0, 0;
    @%p1 mbarrier.init.shared::cta.b64 [%r9], 1;
    bar.sync 0;
    mov.u64 %rd1, {tmap};
    cvta.param.u64 %rd1, %rd1;
    @%p1 mbarrier.arrive.expect_tx.shared::cta.b64 %rd2, [%r9], {nbytes};
    @%p1 {load} [%r1], [%rd1, {{{coords}}}], [%r9];
{label}:
    mbarrier.try_wait.parity.shared::cta.b64 %p2, [%r9], 0;
    @!%p2 bra {label};
"""
