"""porter.emu.units.wgmma against statements of the PTX ISA, written out independently here.

The smem layouts are checked three ways: the ISA's "Exact layout" CuTe examples of
9.7.15.5.1.2.1.3 evaluated literally (with Swizzle<B,4,3> on byte offsets), the
core-matrix wording of the LBO/SBO tables, and the swizzle tables of 5.5.7 copied cell
by cell (the layout TMA writes and a swizzled K-major wgmma operand reads).
"""

from __future__ import annotations

import numpy as np
import pytest

from porter.emu.errors import EmuError
from porter.emu.units import tma, wgmma

RNG = np.random.default_rng(7)

# PTX ISA 5.5.7 "Swizzling Modes": cell [line][position] = the 16-byte element (of that
# 128-byte line) stored at that position.
TABLE_128B = [[0, 1, 2, 3, 4, 5, 6, 7], [1, 0, 3, 2, 5, 4, 7, 6], [2, 3, 0, 1, 6, 7, 4, 5],
              [3, 2, 1, 0, 7, 6, 5, 4], [4, 5, 6, 7, 0, 1, 2, 3], [5, 4, 7, 6, 1, 0, 3, 2],
              [6, 7, 4, 5, 2, 3, 0, 1], [7, 6, 5, 4, 3, 2, 1, 0]]
TABLE_64B = TABLE_128B[:4]          # the ISA's 64B table is these four lines, repeating
TABLE_32B = TABLE_128B[:2]          # and the 32B table these two
TABLES = {"128B": TABLE_128B, "64B": TABLE_64B, "32B": TABLE_32B}
SWIZZLE_CODE = {"none": 0, "128B": 1, "64B": 2, "32B": 3}


def desc(start: int, lbo: int, sbo: int, swizzle: str = "none", base: int = 0) -> int:
    """The descriptor as 9.7.15.5.1.2.2 lays it out (matrix-descriptor-encode = (x & 0x3FFFF) >> 4)."""
    enc = lambda x: (x & 0x3FFFF) >> 4  # noqa: E731
    return enc(start) | enc(lbo) << 16 | enc(sbo) << 32 | base << 49 | SWIZZLE_CODE[swizzle] << 62


def cute_offset(shape, stride, index: int) -> int:
    """A CuTe mode (nested shape:stride) applied to a flat index, first sub-mode fastest."""
    off = 0
    for s, d in zip(shape, stride):
        off += (index % s) * d
        index //= s
    return off


def cute_swizzle(b: int, m: int, s: int, x: int) -> int:
    """CuTe Swizzle<B,M,S>: the B bits at [M+S, M+S+B) XOR-ed into [M, M+B)."""
    yyy = ((1 << b) - 1) << (m + s)
    return x ^ ((x & yyy) >> s)


def matrix_bytes(values: np.ndarray, elem_bytes: int) -> np.ndarray:
    """Element values (rows, k) of a uint dtype -> their little-endian bytes (rows, k*eb)."""
    return values.astype(f"<u{elem_bytes}").view(np.uint8).reshape(values.shape[0], -1)


def place_cute(smem, base, values, elem_bytes, row_mode, col_mode, swz_bits):
    """Write values[r, c] at base + Swizzle<swz_bits,4,3>(elem_bytes * layout(r, c))."""
    rows, cols = values.shape
    for r in range(rows):
        for c in range(cols):
            off = elem_bytes * (cute_offset(*row_mode, r) + cute_offset(*col_mode, c))
            off = cute_swizzle(swz_bits, 4, 3, off)
            smem[base + off: base + off + elem_bytes] = \
                np.frombuffer(int(values[r, c]).to_bytes(elem_bytes, "little"), np.uint8)


# -- descriptor ------------------------------------------------------------------------

def test_descriptor_fields_from_the_isa_bit_table():
    d = wgmma.decode_desc(desc(0x1230, 256, 1024, "128B"))
    assert (d.start_address, d.leading_byte_offset, d.stride_byte_offset, d.base_offset, d.swizzle) == \
           (0x1230, 256, 1024, 0, "128B")
    assert [wgmma.decode_desc(desc(0, 16, 16, s)).swizzle for s in ("none", "128B", "64B", "32B")] == \
           ["none", "128B", "64B", "32B"]
    assert wgmma.decode_desc(5 << 49).base_offset == 5
    # 14-bit fields: bit 14 of the start field is outside it (and undefined)
    assert wgmma.decode_desc(0x3FFF).start_address == 0x3FFF0


def test_descriptor_with_undefined_bits_is_rejected():
    with pytest.raises(EmuError, match="does not define"):
        wgmma.decode_desc(desc(0, 16, 1024) | 1 << 46, where="wgmma B")   # tcgen05's fixed 0b001
    assert wgmma.decode_desc(desc(0, 16, 1024) | 1 << 46, strict=False).stride_byte_offset == 1024


# -- layouts from the ISA's worked examples ---------------------------------------------

def test_k_major_no_swizzle_tf32_example():
    # Figure 166: Swizzle<0,4,3> o ((8,2),(4,4)):((4,32),(1,64)), LBO = 64*4 B, SBO = 32*4 B
    vals = RNG.integers(0, 2**32, size=(16, 16), dtype=np.uint64)
    smem = np.zeros(4096, np.uint8)
    place_cute(smem, 512, vals, 4, ((8, 2), (4, 32)), ((4, 4), (1, 64)), 0)
    got = wgmma.read_matrix(smem, desc(512, 64 * 4, 32 * 4), rows=16, k=16, elem_bits=32, mn_major=False)
    assert np.array_equal(got, matrix_bytes(vals, 4))


@pytest.mark.parametrize("swz,bits,row_mode,col_mode,lbo,sbo,rows", [
    # Figure 168: Swizzle<0,4,3> o ((8,1,2),(8,2)):((1,8,64),(8,128)), LBO 128*2, SBO 64*2
    ("none", 0, ((8, 1, 2), (1, 8, 64)), ((8, 2), (8, 128)), 256, 128, 16),
    # Figure 169: Swizzle<1,4,3> o ((8,2,2),(8,2)):((1,8,128),(16,256)), LBO 128*2, SBO 256*2
    ("32B", 1, ((8, 2, 2), (1, 8, 128)), ((8, 2), (16, 256)), 256, 512, 32),
    # Figure 170: Swizzle<2,4,3> o ((8,4,2),(8,2)):((1,8,256),(32,512)), LBO 256*2, SBO 512*2
    ("64B", 2, ((8, 4, 2), (1, 8, 256)), ((8, 2), (32, 512)), 512, 1024, 64),
])
def test_mn_major_bf16_examples(swz, bits, row_mode, col_mode, lbo, sbo, rows):
    vals = RNG.integers(0, 2**16, size=(rows, 16), dtype=np.uint64)   # (MN, K)
    smem = np.zeros(8192, np.uint8)
    place_cute(smem, 2048, vals, 2, row_mode, col_mode, bits)
    got = wgmma.read_matrix(smem, desc(2048, lbo, sbo, swz), rows=rows, k=16, elem_bits=16, mn_major=True)
    assert np.array_equal(got, matrix_bytes(vals, 2))


def test_k_major_no_swizzle_core_matrices_as_worded():
    # "core matrices" of 8 rows x 16 B, each row contiguous; LBO: the next core matrix
    # along K; SBO: the next 8 rows. Here LBO = 128 (K pairs adjacent), SBO = 256.
    vals = RNG.integers(0, 2**16, size=(64, 16), dtype=np.uint64)     # A: 64 x k16 bf16
    smem = np.zeros(1 << 15, np.uint8)
    base = 4096
    for i in range(8):                        # core matrix row block
        for j in range(2):                    # core matrix along K
            cm = base + i * 256 + j * 128
            for rr in range(8):
                smem[cm + rr * 16: cm + rr * 16 + 16] = matrix_bytes(vals[8 * i + rr: 8 * i + rr + 1,
                                                                         8 * j: 8 * j + 8], 2)[0]
    got = wgmma.read_matrix(smem, desc(base, 128, 256), rows=64, k=16, elem_bits=16, mn_major=False)
    assert np.array_equal(got, matrix_bytes(vals, 2))
    # LBO and SBO swapped: core matrix (2, 0) and (0, 1) are the same bytes; the ISA states no
    # rule against it, so it reads what the offsets name, with a warning for the caller
    swapped = wgmma.read_matrix(smem, desc(base, 256, 128), rows=64, k=16, elem_bits=16, mn_major=False)
    assert np.array_equal(swapped[16:24, 0:16], got[8:16, 0:16])         # its (2, 0) is the bytes of (1, 0)
    _, notes = wgmma.operand_layout(desc(base, 256, 128), 64, 16, 16, False)
    assert [k for k, _ in notes] == ["alias"], notes
    assert wgmma.operand_layout(desc(base, 128, 256), 64, 16, 16, False)[1] == ()
    # a wider LBO is a different (wrong) matrix, not an error
    other = wgmma.read_matrix(smem, desc(base, 2048, 256), rows=64, k=16, elem_bits=16, mn_major=False)
    assert not np.array_equal(other, got)


@pytest.mark.parametrize("swz", ["128B", "64B", "32B"])
def test_k_major_swizzled_reads_what_the_tma_tables_write(swz):
    """A K-major tile stored with rows of W bytes in the 5.5.7 table's permutation; each
    32-byte K slice is a wgmma operand with the start address moved along the row."""
    width = {"128B": 128, "64B": 64, "32B": 32}[swz]
    table = TABLES[swz]
    rows, eb = 64, 2
    vals = RNG.integers(0, 2**16, size=(rows, width // eb), dtype=np.uint64)
    linear = matrix_bytes(vals, eb).reshape(-1)        # row-major, row r at r*width
    smem = np.zeros(1 << 15, np.uint8)
    base = 8192                                       # on the 1024-byte pattern boundary
    for line in range(linear.size // 128):
        for pos in range(8):
            src = table[line % len(table)][pos]
            smem[base + line * 128 + pos * 16: base + line * 128 + pos * 16 + 16] = \
                linear[line * 128 + src * 16: line * 128 + src * 16 + 16]
    sbo = 8 * width                                   # one 8-row swizzle atom
    for ks in range(width // 32):
        got = wgmma.read_matrix(smem, desc(base + 32 * ks, 16, sbo, swz), rows=rows, k=16, elem_bits=16,
                                mn_major=False)
        assert np.array_equal(got, matrix_bytes(vals[:, 16 * ks: 16 * ks + 16], eb)), f"K slice {ks}"


def test_k_major_128b_e4m3_k32_slice():
    vals = RNG.integers(0, 256, size=(128, 128), dtype=np.uint64)      # B: N=128, 128 fp8 per row
    lin = matrix_bytes(vals, 1).reshape(-1)
    smem = np.zeros(1 << 16, np.uint8)
    for line in range(128):
        for pos in range(8):
            src = TABLE_128B[line % 8][pos]
            smem[line * 128 + pos * 16: line * 128 + pos * 16 + 16] = lin[line * 128 + src * 16:][:16]
    got = wgmma.read_matrix(smem, desc(64, 16, 1024, "128B"), rows=128, k=32, elem_bits=8, mn_major=False)
    assert np.array_equal(got, matrix_bytes(vals[:, 64:96], 1))


def test_tma_128b_tile_feeds_the_k_major_descriptor():
    """Integration: tma.load_tile's 128B swizzled box read back by K-major SW128 descriptors."""
    class P:
        data_type, dims, strides, box, swizzle = "BFLOAT16", (64, 64), (128,), (64, 64), "128B"
        element_strides, oob_fill, l2_promotion = (), "NONE", "NONE"
    vals = RNG.integers(0, 2**16, size=(64, 64), dtype=np.uint64)
    gmem = matrix_bytes(vals, 2).reshape(-1)
    tile = tma.load_tile(tma.decode(tma.encode(P, 0x100000)), (0, 0),
                         lambda a, n: gmem[a - 0x100000: a - 0x100000 + n], 2048)
    smem = np.zeros(16384, np.uint8)
    smem[2048: 2048 + tile.size] = tile
    for ks in range(4):
        got = wgmma.read_matrix(smem, desc(2048 + 32 * ks, 16, 1024, "128B"), 64, 16, 16, False)
        assert np.array_equal(got, matrix_bytes(vals[:, 16 * ks: 16 * ks + 16], 2))


def test_operand_bytes_are_the_bytes_read():
    d = desc(1024, 16, 1024, "128B")
    addrs = wgmma.operand_bytes(d, 64, 16, 16, False)
    assert addrs.dtype == np.int64 and addrs.size == 64 * 32
    # rows of 128 B, K slice 0 = logical chunks 0-1 of each row, XOR-ed with row%8
    expect = sorted(1024 + r * 128 + ((c ^ (r % 8)) * 16) + b for r in range(64) for c in (0, 1) for b in range(16))
    assert addrs.tolist() == expect


# -- errors --------------------------------------------------------------------------------

def test_descriptor_reading_outside_shared_memory():
    with pytest.raises(EmuError, match="wgmma A: .*outside the CTA's 4096 B"):
        wgmma.read_matrix(np.zeros(4096, np.uint8), desc(2560, 128, 256), 64, 16, 16, False, where="wgmma A")


def test_nonzero_base_offset_with_swizzle_counts_the_pattern_from_its_start():
    # a tile whose 128B pattern starts at 1024 + 384 (base offset (start >> 7) & 7 = 3) reads as
    # the same bytes placed on the 1024-byte boundary with base offset 0 (issue 18 item 3)
    img = np.random.default_rng(3).integers(0, 256, 64 * 128).astype(np.uint8)
    aligned, off = np.zeros(1 << 15, np.uint8), np.zeros(1 << 15, np.uint8)
    aligned[1024:1024 + img.size] = img
    off[1024 + 384:1024 + 384 + img.size] = img
    want = wgmma.read_matrix(aligned, desc(1024, 16, 1024, "128B"), 64, 16, 16, False)
    got = wgmma.read_matrix(off, desc(1024 + 384, 16, 1024, "128B", base=3), 64, 16, 16, False)
    np.testing.assert_array_equal(got, want)
    assert (wgmma.read_matrix(off, desc(1024 + 384, 16, 1024, "128B"), 64, 16, 16, False) != want).any()
    # without swizzle the ISA says the field is not used
    wgmma.read_matrix(np.zeros(1 << 15, np.uint8), desc(1024, 128, 256, "none", base=3), 64, 16, 16, False)


def test_k_slice_crossing_the_swizzle_row_reads_on_with_a_warning():
    # the ISA states no rule that a K slice stay in its swizzle row: row r's bytes 16.. are the
    # linear addresses past the row's end (row r + 1's first chunk), swizzled by their own bits
    smem = np.random.default_rng(5).integers(0, 256, 1 << 15).astype(np.uint8)
    start = 1024 + 112
    got = wgmma.read_matrix(smem, desc(start, 16, 1024, "128B"), 64, 16, 16, False)
    lin = start + np.arange(8)[:, None] * 128 + np.arange(32)[None, :]
    np.testing.assert_array_equal(got[:8], smem[tma.swizzle_array(lin, 128)])
    _, notes = wgmma.operand_layout(desc(start, 16, 1024, "128B"), 64, 16, 16, False)
    assert [k for k, _ in notes] == ["k-slice"] and "offset 112 in its 128 B row" in notes[0][1], notes
    assert wgmma.operand_layout(desc(1024 + 96, 16, 1024, "128B"), 64, 16, 16, False)[1] == ()


def test_overlapping_rows_read_with_a_warning():
    smem = np.random.default_rng(6).integers(0, 256, 1 << 15).astype(np.uint8)
    got = wgmma.read_matrix(smem, desc(1024, 128, 0), 64, 16, 16, False)
    np.testing.assert_array_equal(got[8:16], got[0:8])                   # SBO 0: every 8 rows alike
    assert [k for k, _ in wgmma.operand_layout(desc(1024, 128, 0), 64, 16, 16, False)[1]] == ["alias"]


def test_transposed_8bit_operand_rejected():
    with pytest.raises(EmuError, match="only for .f16/.bf16"):
        wgmma.read_matrix(np.zeros(1 << 15, np.uint8), desc(0, 256, 128), 64, 32, 8, True)


def test_shape_errors():
    with pytest.raises(EmuError, match="multiple of 8"):
        wgmma.read_matrix(np.zeros(1 << 15, np.uint8), desc(0, 128, 256), 12, 16, 16, False)
    with pytest.raises(EmuError, match="multiple of 16 B"):
        wgmma.read_matrix(np.zeros(1 << 15, np.uint8), desc(0, 128, 256), 64, 4, 16, False)


# -- register fragments --------------------------------------------------------------------

def test_accumulator_layout_formula_and_coverage():
    for n in (8, 64, 128, 256):
        rows, cols = wgmma.accumulator_layout(n)
        assert rows.shape == cols.shape == (128, n // 2)
        for t in (0, 1, 5, 37, 77, 127):
            warp, lane = divmod(t, 32)
            for j in range(n // 2):
                # ISA figure: d[4i+0..1] row 16*warp + lane/4, cols 8i + 2*(lane%4) + {0,1};
                # d[4i+2..3] the same columns 8 rows below
                assert rows[t, j] == 16 * warp + lane // 4 + (8 if j % 4 >= 2 else 0)
                assert cols[t, j] == 8 * (j // 4) + 2 * (lane % 4) + j % 2
        cells = rows * n + cols
        assert np.unique(cells).size == 64 * n and cells.min() == 0 and cells.max() == 64 * n - 1


def mma_sync_a_element(lane: int, i: int, elem_bits: int):
    """The A fragment of mma.m16n8k16 (16-bit), m16n8k32 (8-bit), m16n8k8 (tf32) as the ISA
    states it per warp (groupID = lane >> 2, threadID_in_group = lane % 4)."""
    g, tig = lane >> 2, lane % 4
    if elem_bits == 16:
        row = g if (i < 2 or 4 <= i < 6) else g + 8
        col = tig * 2 + (i & 1) + (8 if i >= 4 else 0)
    elif elem_bits == 8:
        row = g if (i < 4 or 8 <= i < 12) else g + 8
        col = tig * 4 + (i & 3) + (16 if i >= 8 else 0)
    else:
        row = g if i in (0, 2) else g + 8
        col = tig if i in (0, 1) else tig + 4
    return row, col


@pytest.mark.parametrize("k,bits", [(16, 16), (32, 8), (8, 32)])
def test_a_fragment_matches_per_warp_mma_layout(k, bits):
    """Each warp of the warpgroup holds rows 16*warp.. of A (the sparse section's warp-to-rows
    table), laid out as the warp-level mma A fragment; a_i is element i%per of register i//per."""
    rows, cols = wgmma.a_fragment_layout(k, bits)
    per = 32 // bits
    assert rows.shape == (128, 4, per)
    for t in range(128):
        warp, lane = divmod(t, 32)
        for i in range(4 * per):
            r, c = mma_sync_a_element(lane, i, bits)
            assert (rows[t, i // per, i % per], cols[t, i // per, i % per]) == (16 * warp + r, c), (t, i)
    cells = rows * k + cols
    assert np.unique(cells).size == 64 * k


def test_a_fragment_rejects_non_wgmma_shape():
    with pytest.raises(EmuError, match="not a wgmma shape"):
        wgmma.a_fragment_layout(32, 16)


# -- values and arithmetic -------------------------------------------------------------------

def test_decode_values_bit_patterns():
    def raw(words, width):
        return np.array(words, dtype=f"<u{width}").view(np.uint8).reshape(1, -1)
    assert wgmma.decode_values(raw([0x3F80, 0xC000, 0x0000], 2), "bf16").tolist() == [[1.0, -2.0, 0.0]]
    assert wgmma.decode_values(raw([0x3C00, 0x3800], 2), "f16").tolist() == [[1.0, 0.5]]
    assert wgmma.decode_values(raw([0x38, 0xC0, 0x7E], 1), "e4m3").tolist() == [[1.0, -2.0, 448.0]]
    assert wgmma.decode_values(raw([0x3C, 0x40], 1), "e5m2").tolist() == [[1.0, 2.0]]
    # tf32 keeps sign, 8 exponent and 10 mantissa bits of the 32-bit container
    assert wgmma.decode_values(raw([0x3F800000 | 0x1FFF], 4), "tf32").tolist() == [[1.0]]
    assert wgmma.decode_values(raw([0x3F802000], 4), "tf32").tolist() == [[1.0 + 2.0 ** -10]]
    with pytest.raises(EmuError, match="unknown"):
        wgmma.decode_values(raw([0], 2), "f8")


def test_mma_against_a_loop():
    a = RNG.standard_normal((64, 16))
    b = RNG.standard_normal((32, 16))
    d = RNG.standard_normal((64, 32)).astype(np.float32)
    out = wgmma.mma(a, b, d, scale_a=-1)
    assert out.dtype == np.float32 and out.shape == (64, 32)
    ref = np.array([[sum(-a[m, kk] * b[n, kk] for kk in range(16)) + float(d[m, n]) for n in range(32)]
                    for m in range(64)])
    assert np.allclose(out, ref, rtol=1e-6, atol=1e-6)
    assert np.array_equal(wgmma.mma(a, b), (a @ b.T).astype(np.float32))
    assert np.array_equal(wgmma.mma(a, b, scale_a=-1, scale_b=-1), wgmma.mma(a, b))
    with pytest.raises(EmuError, match="1 or -1"):
        wgmma.mma(a, b, scale_b=2)
    with pytest.raises(EmuError, match="does not match"):
        wgmma.mma(a, b, np.zeros((64, 16), np.float32))


def test_mn_major_128b_reads_row_major_v_tiles_as_tma_writes_them():
    """Attention's P.V: V stored [K rows][N cols] by two 128B-swizzled TMA boxes of 64 N
    each (the 5.5.7 table again); the N-major descriptor walks 8 K rows per SBO and the
    next 64 N elements per LBO."""
    k_rows, n = 32, 128
    vals = RNG.integers(0, 2**16, size=(k_rows, n), dtype=np.uint64)     # V[k, n]
    smem = np.zeros(1 << 15, np.uint8)
    base, box_bytes = 4096, k_rows * 128
    for half in range(2):
        lin = matrix_bytes(vals[:, 64 * half: 64 * half + 64], 2).reshape(-1)   # row k = line k
        for line in range(k_rows):
            for pos in range(8):
                src = TABLE_128B[line % 8][pos]
                at = base + half * box_bytes + line * 128 + pos * 16
                smem[at: at + 16] = lin[line * 128 + src * 16: line * 128 + src * 16 + 16]
    for ks in range(k_rows // 16):
        got = wgmma.read_matrix(smem, desc(base + ks * 2048, box_bytes, 1024, "128B"), rows=n, k=16,
                                elem_bits=16, mn_major=True)
        assert np.array_equal(got, matrix_bytes(vals[16 * ks: 16 * ks + 16].T.copy(), 2)), f"K slice {ks}"
