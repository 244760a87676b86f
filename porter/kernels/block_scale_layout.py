"""Where block scale factors live: the host tensor, shared memory and Tensor Memory.

Block-scaled tcgen05 MMAs (kind::mxf8f6f4 scale_vec::1X with ue8m0 per 32 elements of K,
kind::mxf4nvf4 scale_vec::4X with ue4m3 per 16) read their scale factors from Tensor
Memory (PTX ISA 9.7.16.10.7 "Block Scaling for tcgen05.mma"): the scale of row r (of A, or
of column r of B) sits in TMEM lane ``r % 32`` - duplicated into all four 32-lane
partitions - at column ``base + r // 32`` of each 128-row group, and the byte of that 32-bit
word is the K block: for 1X the instruction descriptor's SF id picks the byte
(9.7.16.10.7.2.1), for 4X the word holds the four scales of one K=64 MMA (9.7.16.10.7.2.3).

porter stages them with ``tcgen05.cp.32x128b.warpx4`` (9.7.16.9.2): 32 rows x 16 bytes
from shared memory, multicast to the four lane partitions. So the unit of staging is a
**chunk**: 128 rows x 4 scale columns = 512 bytes, byte ``(r % 32) * 16 + (r // 32) * 4 + c``.
The host stores the scale tensor of an R x S scale matrix (S = K / block) as chunks in
row-group-major, K-minor order: chunk ``(r // 128, c // 4)`` at ``((r // 128) * (S // 4) +
c // 4) * 512``. The chunks of one 128-row group along K are then contiguous, so one TMA
box (viewed as rows of 128 bytes, 4 rows per chunk) loads a whole pipeline stage.

Everything here is numpy on the CPU: the layout and its inverse, and a model of the
TMA -> shared memory -> tcgen05.cp -> MMA read path used by the tests.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from porter.errors import PorterError

CHUNK_ROWS = 128        # rows (of A, or columns of B) per chunk: one MMA's M / 128 of N
CHUNK_COLS = 4          # scale columns (K blocks) per chunk: one 32-bit TMEM word per row
CHUNK_BYTES = CHUNK_ROWS * CHUNK_COLS   # 512
CP_ROWS = 32            # tcgen05.cp .32x128b: 32 rows of 16 bytes
CP_ROW_BYTES = 16
TMA_ROW_BYTES = 128     # the scale tensor as a 2D uint8 TMA tensor: rows of 128 bytes
TMA_ROWS_PER_CHUNK = CHUNK_BYTES // TMA_ROW_BYTES   # 4


@dataclass(frozen=True)
class ScaleScheme:
    """One block-scale format as the MMA consumes it."""

    name: str              # "mx" (ue8m0 / 32) or "nvfp4" (ue4m3 / 16)
    scale_format: str
    block: int             # elements of K per scale
    mma_k: int             # K of one MMA instruction
    scale_vec: str         # PTX .scale_vec qualifier

    @property
    def scales_per_mma(self) -> int:
        return self.mma_k // self.block

    def check_shape(self, rows: int, k: int, what: str = "operand") -> None:
        need_k = self.block * CHUNK_COLS
        if rows % CHUNK_ROWS or k % need_k:
            raise PorterError(
                f"{self.name} scale factors of {what}: {rows} x K={k} must have rows a multiple of "
                f"{CHUNK_ROWS} and K a multiple of {need_k} (128-row x 4-scale chunks)")


MX_1X = ScaleScheme("mx", "ue8m0", 32, 32, "scale_vec::1X")      # kind::mxf8f6f4
NVFP4_4X = ScaleScheme("nvfp4", "ue4m3", 16, 64, "scale_vec::4X")  # kind::mxf4nvf4


def chunk_offset(row: int | np.ndarray, col: int | np.ndarray):
    """Byte of (row < 128, scale column < 4) inside a 512-byte chunk."""
    return (row % CP_ROWS) * CP_ROW_BYTES + (row // CP_ROWS) * CHUNK_COLS + col


def kernel_offset(row, col, n_scale_cols: int):
    """Byte offset of scale (row, col) in the host tensor the kernel reads."""
    chunks_along_k = n_scale_cols // CHUNK_COLS
    chunk = (row // CHUNK_ROWS) * chunks_along_k + col // CHUNK_COLS
    return chunk * CHUNK_BYTES + chunk_offset(row % CHUNK_ROWS, col % CHUNK_COLS)


def to_kernel_layout(scales: np.ndarray) -> np.ndarray:
    """(R, S) uint8 scale matrix (row r, K block c) -> flat uint8 tensor in kernel order."""
    scales = np.asarray(scales)
    if scales.ndim != 2 or scales.dtype != np.uint8:
        raise PorterError(f"scale matrix must be 2D uint8 (raw ue8m0 / ue4m3 bytes), got "
                          f"{scales.dtype} with shape {scales.shape}")
    rows, cols = scales.shape
    if rows % CHUNK_ROWS or cols % CHUNK_COLS:
        raise PorterError(f"scale matrix {rows} x {cols}: rows must be a multiple of {CHUNK_ROWS} "
                          f"and scale columns a multiple of {CHUNK_COLS}")
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    out = np.empty(rows * cols, dtype=np.uint8)
    out[kernel_offset(r, c, cols)] = scales
    return out


def from_kernel_layout(flat: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Inverse of :func:`to_kernel_layout`."""
    flat = np.asarray(flat, dtype=np.uint8).reshape(-1)
    if flat.size != rows * cols:
        raise PorterError(f"scale tensor has {flat.size} bytes, expected {rows} x {cols}")
    r, c = np.meshgrid(np.arange(rows), np.arange(cols), indexing="ij")
    return flat[kernel_offset(r, c, cols)]


def tma_box_rows(chunks: int) -> int:
    """TMA box height (rows of 128 B) that loads ``chunks`` consecutive chunks."""
    return chunks * TMA_ROWS_PER_CHUNK


def tma_row_of_chunk(row_group: int, k_chunk: int, n_scale_cols: int) -> int:
    """TMA row coordinate of chunk (row_group, k_chunk) in the 2D (bytes / 128) x 128 view."""
    return (row_group * (n_scale_cols // CHUNK_COLS) + k_chunk) * TMA_ROWS_PER_CHUNK


# ---- model of the on-chip path, for tests ---------------------------------------------------

def tcgen05_cp_32x128b_warpx4(tmem: np.ndarray, column: int, smem_chunk: np.ndarray) -> None:
    """Model ``tcgen05.cp.32x128b.warpx4 [taddr = column], desc(smem_chunk)``: row i of the
    32 x 16-byte source lands in lane i of every 32-lane partition, columns column..column+3.
    ``tmem`` is uint8 (128 lanes, columns, 4 bytes per 32-bit cell, little-endian)."""
    rows = np.asarray(smem_chunk, dtype=np.uint8).reshape(CP_ROWS, CP_ROW_BYTES // 4, 4)
    for partition in range(4):
        tmem[partition * CP_ROWS:(partition + 1) * CP_ROWS, column:column + CP_ROW_BYTES // 4] = rows


def mma_reads_scale(tmem: np.ndarray, base_column: int, row, k_block: int,
                    scheme: ScaleScheme, sf_id: int, lane_partition: int = 0):
    """The scale an MMA with scale address ``base_column`` reads for ``row`` (< MMA M or N)
    and the ``k_block``-th scale block of its K (PTX ISA 9.7.16.10.7.2/3): 1X - byte
    ``sf_id``; 4X - byte ``k_block`` (sf_id must be 0). Any lane partition holds a copy.
    ``row`` may be an int (returns an int) or an integer array (returns a uint8 array)."""
    group, r = divmod(row, CHUNK_ROWS)
    if scheme.scales_per_mma == 1:
        if k_block != 0:
            raise PorterError("scale_vec::1X has one scale per row per MMA")
        byte = sf_id
    else:
        if sf_id != 0:
            raise PorterError("scale_vec::4X needs SF id 0")
        byte = k_block
    lane = lane_partition * CP_ROWS + r % CP_ROWS
    column = base_column + group * CHUNK_COLS + r // CP_ROWS
    value = tmem[lane, column, byte]
    return int(value) if np.ndim(value) == 0 else value


@dataclass(frozen=True)
class StagePlan:
    """How one pipeline stage's scale factors of an operand sit in TMEM and which address /
    SF id MMA j of the stage uses."""

    scheme: ScaleScheme
    rows: int                  # 128 (A per CTA) or the MMA N (B)
    stage_k: int               # K elements per pipeline stage

    @property
    def row_groups(self) -> int:
        return self.rows // CHUNK_ROWS

    @property
    def k_chunks(self) -> int:
        return self.stage_k // (self.scheme.block * CHUNK_COLS)

    @property
    def chunks(self) -> int:
        return self.row_groups * self.k_chunks

    @property
    def smem_bytes(self) -> int:
        return self.chunks * CHUNK_BYTES

    @property
    def tmem_columns(self) -> int:
        return self.chunks * CHUNK_COLS

    @property
    def mmas(self) -> int:
        return self.stage_k // self.scheme.mma_k

    def smem_chunk_offset(self, row_group: int, k_chunk: int) -> int:
        """Shared memory holds the stage as TMA delivered it: row group major, K chunk minor."""
        return (row_group * self.k_chunks + k_chunk) * CHUNK_BYTES

    def tmem_chunk_column(self, row_group: int, k_chunk: int) -> int:
        """TMEM keeps, per K chunk, the row groups side by side (what one MMA reads)."""
        return (k_chunk * self.row_groups + row_group) * CHUNK_COLS

    def mma_operand(self, j: int) -> tuple[int, int]:
        """(column offset of the scale address, SF id) for MMA j of the stage."""
        k_first = j * self.scheme.mma_k // self.scheme.block     # first scale column of MMA j
        k_chunk, within = divmod(k_first, CHUNK_COLS)
        column = k_chunk * self.row_groups * CHUNK_COLS
        if self.scheme.scales_per_mma == 1:
            return column, within
        if within != 0:
            raise PorterError("scale_vec::4X MMAs must start on a 4-scale chunk")
        return column, 0
