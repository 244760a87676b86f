"""Instruction builders by family; ``builder_for`` picks one for a parsed instruction.

Each family module maps an opcode's first word to ``build(instr, decoder) -> fn(warp,
mask)``. An opcode no family knows, or a form a family does not implement, is an
``Unsupported`` error naming the PTX line: the simulator never skips an instruction.

Some forms share their first word with an older family but are a different operation
(``st.async`` is not ``st``, ``add.f16x2`` is not an integer ``add``, ``bar.red`` is not
``bar.sync``). Their modules list them in ``FORMS``: (head, matches(instr), build). The
first form whose head and predicate match wins; every other instruction of that head goes
to the family's builder as before.
"""

from __future__ import annotations

from porter.emu.ops import (alu, b128, bits, call, clc, cluster_async, cluster_generic, control, cp_async, cvt_packed,
                            cvt_round, fence_proxy, int_extra, local, matrix_b8, mbarrier_query, memory, mma_int,
                            mma_sync, packed_float, sync, tcgen05, tensormap, tma, tma_modes, warp_ops, wgmma)

FAMILIES = {}
for _mod in (alu, bits, control, memory, sync, tma, wgmma, mma_sync, cp_async, tcgen05, call, clc,
             warp_ops, int_extra, tensormap, packed_float):
    FAMILIES.update(_mod.BUILDERS)

# forms that share a head with an older family, by head (checked before the family's builder)
FORMS: dict[str, list] = {}
for _mod in (packed_float, cvt_packed, cvt_round, warp_ops, cluster_async, int_extra, tensormap, matrix_b8, b128,
             fence_proxy, mma_int, cluster_generic, mbarrier_query, local, tma_modes, call):
    for _head, _matches, _build in _mod.FORMS:
        FORMS.setdefault(_head, []).append((_matches, _build))


def builder_for(ins, d):
    head = ins.opcode.split(".", 1)[0]
    for matches, build in FORMS.get(head, ()):
        if matches(ins):
            return build
    build = FAMILIES.get(head)
    if build is None:
        raise d.unsupported()
    return build
