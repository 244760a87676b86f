"""The TMA unit's box load with its row plan cached per (map, coordinates) and the box made
only where rows are missing: over random 2-D and 3-D boxes partly or wholly outside the
tensor, with and without the NaN fill, loaded repeatedly (cache warm) in any order, every
box equals the one built element by element here (PTX ISA 5.5.3.3: elements outside the
tensor are zero, or the NaN of the fill)."""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.units import tma

BASE = 0x7F00_0000_0000


def _map(rng, rank: int, fill: str) -> tma.TensorMap:
    dims = (int(rng.integers(8, 80)),) + tuple(int(rng.integers(2, 12)) for _ in range(rank - 1))
    strides, s = [], -(-dims[0] * 2 // 16) * 16 + 16 * int(rng.integers(0, 2))
    for d in range(1, rank):
        strides.append(s)
        s *= dims[d]
    box = (int(rng.choice([8, 16, 32])),) + tuple(int(rng.integers(1, 7)) for _ in range(rank - 1))
    return tma.TensorMap(address=BASE, data_type="BFLOAT16", dims=dims, strides=tuple(strides), box=box,
                         element_strides=(1,) * rank, swizzle="NONE", oob_fill=fill, l2_promotion="NONE")


def _want(heap: np.ndarray, m: tma.TensorMap, coords) -> np.ndarray:
    """The box, element by element (bf16 as uint16), innermost dimension fastest."""
    out = np.zeros(tuple(reversed(m.box)), dtype=np.uint16)
    words = heap.view("<u2")
    for idx in np.ndindex(*out.shape):
        c = [coords[d] + idx[len(idx) - 1 - d] for d in range(m.rank)]
        if all(0 <= c[d] < m.dims[d] for d in range(m.rank)):
            byte = c[0] * 2 + sum(c[d] * m.strides[d - 1] for d in range(1, m.rank))
            out[idx] = words[byte // 2]
        elif m.oob_fill != "NONE":
            out[idx] = 0x7FC0
    return out.reshape(-1)


@pytest.mark.parametrize("rank", [2, 3])
@pytest.mark.parametrize("fill", ["NONE", "NAN_REQUEST_ZERO_FMA"])
def test_boxes_loaded_again_and_again_are_the_tensor_elements(rank, fill):
    rng = np.random.default_rng(rank * 10 + len(fill))
    heap = rng.integers(0, 256, 1 << 18).astype(np.uint8)

    def read_global(addr, n):
        return heap[addr - BASE:addr - BASE + n]

    def read_spans(addrs, n):
        return heap[(addrs - BASE)[:, None] + np.arange(n)]

    maps = [_map(rng, rank, fill) for _ in range(4)]
    jobs = [(m, tuple(int(rng.integers(-b - 1, d + 1)) for b, d in zip(m.box, m.dims))) for m in maps for _ in range(6)]
    tma._row_arrays.cache_clear()
    for rep in range(3):                    # cold, then warm, in a new order each time
        for i in rng.permutation(len(jobs)):
            m, coords = jobs[i]
            want = _want(heap, m, coords)
            for spans in (read_spans, None):
                got = tma.load_tile(m, coords, read_global, 1024, read_spans=spans)
                assert np.array_equal(got.view("<u2"), want), (m, coords, rep)
    assert tma._row_arrays.cache_info().hits > 0


def test_the_cached_row_plan_is_read_only():
    rng = np.random.default_rng(1)
    m = _map(rng, 2, "NONE")
    at, addr, _ = tma._row_arrays(m, (0, 0))
    with pytest.raises(ValueError):
        at[0] = 1
    with pytest.raises(ValueError):
        addr[0] = 1


@pytest.mark.parametrize("swizzle", ["32B", "64B", "128B", "128B_ATOM_32B"])
def test_a_swizzled_box_lands_as_the_byte_map_places_it(swizzle):
    """Whole lines: the box placed by whole units equals the byte-by-byte gather of _landed."""
    if swizzle not in tma.SWIZZLE_WIDTH:
        pytest.skip(f"{swizzle}: not a swizzle of this unit")
    rng = np.random.default_rng(len(swizzle))
    width, grain = tma.SWIZZLE_WIDTH[swizzle], tma.SWIZZLE_GRAIN.get(swizzle, 16)
    used = 0
    for _ in range(60):
        dst = 128 * int(rng.integers(0, 64))
        size = 128 * int(rng.integers(1, 40))
        data = rng.integers(0, 256, size).astype(np.uint8)
        units = tma._landed_units(dst, size, width, grain)
        if units is not None:
            used += 1
            got = data.reshape(-1, grain)[units].reshape(-1)
            assert np.array_equal(got, data[tma._landed(dst, size, width, grain)])
    assert used == 60
