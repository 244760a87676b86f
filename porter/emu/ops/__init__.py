"""Instruction builders by family; ``builder_for`` picks one for a parsed instruction.

Each family module maps an opcode's first word to ``build(instr, decoder) -> fn(warp,
mask)``. An opcode no family knows, or a form a family does not implement, is an
``Unsupported`` error naming the PTX line: the simulator never skips an instruction.
"""

from __future__ import annotations

from porter.emu.ops import alu, bits, call, clc, control, cp_async, memory, mma_sync, sync, tcgen05, tma, wgmma

FAMILIES = {}
for _mod in (alu, bits, control, memory, sync, tma, wgmma, mma_sync, cp_async, tcgen05, call, clc):
    FAMILIES.update(_mod.BUILDERS)


def builder_for(ins, d):
    head = ins.opcode.split(".", 1)[0]
    build = FAMILIES.get(head)
    if build is None:
        raise d.unsupported()
    return build
