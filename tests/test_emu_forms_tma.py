"""TMA load modes beside .tile (PTX ISA 9.7.9.27.1.2 "cp.async.bulk.tensor"): .tile::gather4,
four rows of a 2-D tensor gathered into one four-row box (swizzled by the destination's
address bits, out-of-bounds rows filled). A hand-written kernel, checked against numpy."""

from __future__ import annotations

import numpy as np
import pytest

from porter import emu
from porter.emu.errors import Unsupported
from porter.runtime.tensormap import TensorMapParams

from emu_tma_ptx import tma_load_and_wait

GATHER4 = "cp.async.bulk.tensor.2d.shared::cta.global.tile::gather4.mbarrier::complete_tx::bytes"

KERNEL = """.version 8.7
.target sm_100a
.address_size 64
.visible .entry k(.param .align 64 .b8 tmap[128], .param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .b64 %rd<8>;
    .shared .align 8 .b64 bar;
    .shared .align 128 .b8 tile[512];
    ld.param.u64 %rd6, [out];
    cvta.to.global.u64 %rd6, %rd6;
""" + tma_load_and_wait("BYTES", "COORDS", load=GATHER4) + """    mov.u32 %r2, 0;
COPY:
    shl.b32 %r3, %r2, 5;
    add.u32 %r3, %r3, %r0;
    shl.b32 %r4, %r3, 2;
    add.u32 %r5, %r1, %r4;
    ld.shared.u32 %r6, [%r5];
    mul.wide.u32 %rd3, %r3, 4;
    add.s64 %rd4, %rd6, %rd3;
    st.global.u32 [%rd4+4], %r6;
    add.u32 %r2, %r2, 1;
    setp.lt.u32 %p3, %r2, 4;
    @%p3 bra COPY;
    @%p1 st.global.u32 [%rd6], %r1;
    ret;
}
"""
SRC = np.arange(64 * 32, dtype=np.uint32).reshape(64, 32) * 3 + 1         # 64 rows of 32 columns


def _run(box, swizzle, coords):
    p = TensorMapParams("g", "UINT32", dims=(32, 64), strides=(128,), box=box, swizzle=swizzle)
    text = KERNEL.replace("BYTES", str(4 * box[0] * 4)).replace("COORDS", ", ".join(map(str, coords)))
    out = np.zeros(1 + 128, np.uint32)
    got = emu.launch(text, "k", grid=1, block=32, args=[emu.tensor_map(p, SRC), out], budget=200_000).outputs[1]
    return int(got[0]), got[1:].view(np.uint8)


def _want(box, col, rows):
    rows_data = np.zeros((4, box[0]), np.uint32)
    for i, r in enumerate(rows):
        if 0 <= r < 64:
            c = np.arange(col, col + box[0])
            inside = c < 32
            rows_data[i, inside] = SRC[r, c[inside]]
    return rows_data.reshape(-1).view(np.uint8)


def test_gather4_lands_four_rows_swizzled_by_the_address_bits():
    rows = (5, 17, 63, 70)                              # the last row is past the tensor: zeros
    base, got = _run((32, 1), "128B", (0,) + rows)
    addr = base + np.arange(512)
    landed = (addr ^ (((addr >> 7) & 7) << 4)) - base   # PTX ISA 5.5.7, from the address bits
    want = np.zeros(512, np.uint8)
    want[landed] = _want((32, 1), 0, rows)
    np.testing.assert_array_equal(got, want)


def test_gather4_without_swizzle_from_a_column_offset():
    rows = (3, 0, 60, 3)
    _, got = _run((16, 1), "NONE", (20,) + rows)        # columns 20..35: 32.. are past the tensor
    np.testing.assert_array_equal(got[:256], _want((16, 1), 20, rows))


def test_gather4_with_the_wrong_coordinate_count_is_one_line():
    with pytest.raises(Unsupported, match=r"gather4 expects \[tensormap, \{col, row0, row1, row2, row3\}\]"):
        _run((32, 1), "NONE", (0, 1, 2, 3))


def test_a_tile_load_with_cta_group_before_the_destination_space():
    # CUTLASS's order (.Nd.cta_group::N.shared::cluster.global...), which ptxas accepts
    line = f"{GATHER4} [%r1], [%rd1, {{COORDS}}], [%r9];"
    p = TensorMapParams("g", "UINT32", dims=(32, 64), strides=(128,), box=(32, 4), swizzle="NONE")
    text = KERNEL.replace("BYTES", "512").replace(line, "cp.async.bulk.tensor.2d.cta_group::1.shared::cluster.global"
                                                       ".mbarrier::complete_tx::bytes [%r1], [%rd1, {0, 8}], [%r9];")
    out = np.zeros(1 + 128, np.uint32)
    got = emu.launch(text, "k", grid=1, block=32, args=[emu.tensor_map(p, SRC), out], budget=200_000).outputs[1]
    np.testing.assert_array_equal(got[1:], SRC[8:12].reshape(-1))
