"""Scale-factor layouts: host tensor <-> kernel chunks, and the TMA -> smem -> tcgen05.cp ->
MMA read path modelled on the CPU."""

from __future__ import annotations

import numpy as np
import pytest

from porter.errors import PorterError
from porter.kernels import block_scale_layout as bsl


def random_scales(rows, cols, seed=0):
    return np.random.default_rng(seed).integers(0, 256, size=(rows, cols), dtype=np.uint8)


@pytest.mark.parametrize("rows,cols", [(128, 4), (256, 8), (384, 16)])
def test_round_trip(rows, cols):
    s = random_scales(rows, cols)
    flat = bsl.to_kernel_layout(s)
    assert flat.shape == (rows * cols,)
    assert np.array_equal(bsl.from_kernel_layout(flat, rows, cols), s)
    # a permutation: every byte used once
    assert np.array_equal(np.sort(flat), np.sort(s.reshape(-1)))


def test_chunk_byte_formula():
    # row r, scale column c of a chunk: (r % 32) * 16 + (r // 32) * 4 + c
    assert bsl.chunk_offset(0, 0) == 0
    assert bsl.chunk_offset(1, 0) == 16
    assert bsl.chunk_offset(32, 0) == 4
    assert bsl.chunk_offset(127, 3) == 31 * 16 + 3 * 4 + 3
    # K chunks of one 128-row group are contiguous (one TMA box per stage)
    assert bsl.kernel_offset(0, 4, 16) == 512 and bsl.kernel_offset(128, 0, 16) == 4 * 512


def test_rejects_bad_shapes():
    with pytest.raises(PorterError, match="multiple of 128"):
        bsl.to_kernel_layout(random_scales(100, 4))
    with pytest.raises(PorterError, match="uint8"):
        bsl.to_kernel_layout(np.zeros((128, 4), dtype=np.float32))
    with pytest.raises(PorterError, match="K a multiple of 128"):
        bsl.MX_1X.check_shape(128, 96, "A")


@pytest.mark.parametrize("scheme,rows,stage_k", [(bsl.MX_1X, 128, 128), (bsl.MX_1X, 256, 128),
                                                 (bsl.NVFP4_4X, 128, 256), (bsl.NVFP4_4X, 256, 256)])
def test_mma_reads_every_scale_of_a_stage(scheme, rows, stage_k):
    """Host layout -> TMA box (contiguous bytes) -> tcgen05.cp per chunk -> the scale each
    MMA of the stage reads for each (row, K element) equals the source matrix."""
    k_total = stage_k * 2
    n_cols = k_total // scheme.block
    s = random_scales(rows, n_cols, seed=rows + stage_k)
    flat = bsl.to_kernel_layout(s)
    plan = bsl.StagePlan(scheme, rows=rows, stage_k=stage_k)
    assert plan.mmas == 4   # one 128-byte swizzle row of K per stage for every kind porter uses
    for stage in range(k_total // stage_k):
        # the producer loads, per 128-row group, k_chunks consecutive chunks (one TMA box)
        smem = np.zeros(plan.smem_bytes, dtype=np.uint8)
        for g in range(plan.row_groups):
            first = bsl.tma_row_of_chunk(g, stage * plan.k_chunks, n_cols) * bsl.TMA_ROW_BYTES
            box = flat[first:first + plan.k_chunks * bsl.CHUNK_BYTES]
            off = plan.smem_chunk_offset(g, 0)
            smem[off:off + box.size] = box
        tmem = np.zeros((128, plan.tmem_columns, 4), dtype=np.uint8)
        for g in range(plan.row_groups):
            for kc in range(plan.k_chunks):
                o = plan.smem_chunk_offset(g, kc)
                bsl.tcgen05_cp_32x128b_warpx4(tmem, plan.tmem_chunk_column(g, kc), smem[o:o + 512])
        for j in range(plan.mmas):
            column, sf_id = plan.mma_operand(j)
            for kb in range(scheme.scales_per_mma):
                src_col = stage * (stage_k // scheme.block) + j * scheme.scales_per_mma + kb
                for row in range(0, rows, 7):
                    for part in range(4):   # every lane partition carries the copy
                        got = bsl.mma_reads_scale(tmem, column, row, kb, scheme, sf_id, part)
                        assert got == s[row, src_col], (stage, j, kb, row)


def test_tma_box_geometry():
    plan = bsl.StagePlan(bsl.NVFP4_4X, rows=128, stage_k=256)
    assert plan.k_chunks == 4 and bsl.tma_box_rows(plan.k_chunks) == 16
    assert plan.smem_bytes == 2048 and plan.tmem_columns == 16
