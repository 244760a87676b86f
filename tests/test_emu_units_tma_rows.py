"""The TMA unit's vectorised box read (all row spans at once) against its row-by-row form,
over random tiled maps of every rank, element strides, and boxes partly or wholly outside
the tensor (whose rows are not read: PTX ISA 5.5.3.3 "Out of Bounds Access")."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.units import tma


def _map(rng, rank: int) -> tma.TensorMap:
    eb = int(rng.choice([1, 2, 4]))
    box0 = int(rng.choice([16, 32, 64])) // eb * 2
    dims = [int(rng.integers(1, 300))] + [int(rng.integers(1, 12)) for _ in range(rank - 1)]
    strides, s = [], -(-dims[0] * eb // 16) * 16
    for d in range(1, rank):
        s = s + 16 * int(rng.integers(0, 3))
        strides.append(s)
        s = s * dims[d]
    box = [box0] + [int(rng.integers(1, 9)) for _ in range(rank - 1)]
    estr = [1] + [int(rng.integers(1, 4)) for _ in range(rank - 1)]
    dtype = {1: "UINT8", 2: "BFLOAT16", 4: "FLOAT32"}[eb]
    return tma.TensorMap(address=0x7F00_0000_0000, data_type=dtype, dims=tuple(dims), strides=tuple(strides),
                         box=tuple(box), element_strides=tuple(estr), swizzle="NONE", oob_fill="NONE",
                         l2_promotion="NONE")


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_row_arrays_match_the_row_walk(rank):
    rng = np.random.default_rng(rank)
    for _ in range(40):
        m = _map(rng, rank)
        coords = tuple(int(rng.integers(-b - 2, d + 2)) for b, d in zip(m.box, m.dims))
        walked = list(tma._rows(m, coords))
        at, ga, nbytes = tma._row_arrays(m, coords)
        assert [(a, g) for a, g, _ in walked] == list(zip(at.tolist(), ga.tolist()))
        assert all(n == nbytes for _, _, n in walked)


def test_load_tile_reads_the_same_bytes_with_and_without_the_span_reader():
    rng = np.random.default_rng(9)
    heap = rng.integers(0, 256, 1 << 20).astype(np.uint8)
    base = 0x7F00_0000_0000

    def read_global(addr, n):
        return heap[addr - base:addr - base + n]

    def read_spans(addrs, n):
        return heap[(addrs - base)[:, None] + np.arange(n)]

    for rank in (2, 3):
        for _ in range(20):
            m = _map(rng, rank)
            coords = tuple(int(rng.integers(-b, d)) for b, d in zip(m.box, m.dims))
            want = tma.load_tile(m, coords, read_global, 1024)
            got = tma.load_tile(m, coords, read_global, 1024, read_spans=read_spans)
            np.testing.assert_array_equal(got, want)
            # a reader that cannot vouch for the spans (None): the row-by-row reads, same bytes
            np.testing.assert_array_equal(tma.load_tile(m, coords, read_global, 1024,
                                                        read_spans=lambda a, n: None), want)


@pytest.mark.parametrize("swizzle,width", [("128B", 128), ("64B", 64), ("32B", 32)])
def test_a_swizzled_box_lands_where_its_address_bits_put_it(swizzle, width):
    # each byte i of the box in linear order lands at swizzle(dst + i) (PTX ISA 5.5.7), here
    # with a destination off the pattern's boundary and a partly out-of-bounds box
    rng = np.random.default_rng(width)
    heap = rng.integers(0, 256, 1 << 16).astype(np.uint8)
    base = 0x7F00_0000_0000
    m = tma.TensorMap(address=base, data_type="UINT8", dims=(width, 40), strides=(width,), box=(width, 16),
                      element_strides=(1, 1), swizzle=swizzle, oob_fill="NONE", l2_promotion="NONE")
    for y, dst in ((0, 1024 + 384), (30, 2048), (-3, 1024 + 128)):
        linear = np.zeros(width * 16, np.uint8)
        for r in range(16):
            if 0 <= y + r < 40:
                linear[r * width:(r + 1) * width] = heap[(y + r) * width:(y + r + 1) * width]
        want = np.zeros_like(linear)
        want[tma.swizzle_array(dst + np.arange(linear.size), width) - dst] = linear
        got = tma.load_tile(m, (0, y), lambda a, n: heap[a - base:a - base + n], dst,
                            read_spans=lambda a, n: heap[(a - base)[:, None] + np.arange(n)])
        np.testing.assert_array_equal(got, want)
