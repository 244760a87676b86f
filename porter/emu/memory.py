"""The machine's memory spaces: global (with bounds), param, shared per CTA, generic windows.

Address map (the simulator's own; the PTX ISA leaves it to the implementation):

* global: allocations from ``GLOBAL_BASE`` up, 256-byte aligned, separated by
  unallocated guard gaps so an access one past a buffer's end is caught; a generic
  address of global memory equals its global address (``cvta.to.global`` is identity).
* param: a launch's parameter buffer is the ``.param`` space, addressed from 0; its
  generic window starts at ``PARAM_GENERIC``.
* shared: each CTA's shared memory, the first ``SHARED_RESERVED`` bytes reserved (the
  driver's 1 KB of system-reserved shared memory per block on sm_80+,
  ``cudaDevAttrReservedSharedMemoryPerBlock``), so offset 0 is never valid; then the static
  ``.shared`` variables, then dynamic shared memory. Its generic window starts at
  ``SHARED_GENERIC``.
* shared::cluster: ``rank << RANK_SHIFT | offset`` names CTA ``rank``'s shared memory. A
  CTA's own shared::cta addresses are the same addresses (the ISA: the shared::cta window
  is contained in the shared::cluster window), so they carry the CTA's rank in bits 24 and
  up, as the hardware's do: clearing bit 24 (CUTLASS's ``addr & 0xFEFFFFFF``) names the
  even CTA of a pair, and ``mapa`` replaces the rank bits. A shared::cta access must stay in
  the executing CTA's window.
"""

from __future__ import annotations

import bisect

import numpy as np

from porter.emu.errors import CheckFailed, EmuError

GLOBAL_BASE = 0x7F00_0000_0000
GLOBAL_ALIGN = 256
GUARD = 4096
PARAM_GENERIC = 0x5000_0000_0000
SHARED_GENERIC = 0x6000_0000_0000
WINDOW = 1 << 32
SHARED_RESERVED = 1024
RANK_SHIFT = 24
RANK_MASK = 0x7F
OFFSET_MASK = (1 << RANK_SHIFT) - 1


class GlobalMemory:
    """Device memory: bump-allocated buffers with guard gaps, bounds-checked on every access."""

    def __init__(self):
        self.heap = np.zeros(1 << 20, dtype=np.uint8)
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.names: list[str] = []
        self.top = 0                     # next free offset from GLOBAL_BASE
        self._np_starts = np.zeros(0, dtype=np.uint64)
        self._np_ends = np.zeros(0, dtype=np.uint64)

    # ---- allocation -------------------------------------------------------------------------
    def alloc(self, nbytes: int, name: str = "buffer") -> int:
        nbytes = max(int(nbytes), 1)
        off = -(-self.top // GLOBAL_ALIGN) * GLOBAL_ALIGN
        end = off + nbytes
        need = -(-(end + GUARD) // 16) * 16
        if need > self.heap.size:
            grown = np.zeros(max(need, self.heap.size * 2), dtype=np.uint8)
            grown[:self.heap.size] = self.heap
            self.heap = grown
        self.top = end + GUARD
        addr = GLOBAL_BASE + off
        self.starts.append(addr)
        self.ends.append(addr + nbytes)
        self.names.append(name)
        self._np_starts = np.array(self.starts, dtype=np.uint64)
        self._np_ends = np.array(self.ends, dtype=np.uint64)
        self.heap[off:end] = 0
        return addr

    def write(self, addr: int, data: bytes | np.ndarray) -> None:
        raw = np.frombuffer(bytes(data), dtype=np.uint8) if not isinstance(data, np.ndarray) else \
            np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check_span(addr, raw.size, "host write")
        off = addr - GLOBAL_BASE
        self.heap[off:off + raw.size] = raw

    def read(self, addr: int, nbytes: int) -> np.ndarray:
        self._check_span(addr, nbytes, "read")
        off = addr - GLOBAL_BASE
        return self.heap[off:off + nbytes].copy()

    def fill(self, addr: int, byte: int, nbytes: int) -> None:
        self._check_span(addr, nbytes, "memset")
        off = addr - GLOBAL_BASE
        self.heap[off:off + nbytes] = byte

    def contains(self, addr: int) -> bool:
        return GLOBAL_BASE <= addr < GLOBAL_BASE + WINDOW * 256

    def _check_span(self, addr: int, nbytes: int, what: str) -> None:
        i = bisect.bisect_right(self.starts, addr) - 1
        if i < 0 or addr + nbytes > self.ends[i]:
            raise CheckFailed(f"global {what} of {nbytes} B at 0x{addr:x} is outside every allocation"
                              + self._nearest(addr))

    def _nearest(self, addr: int) -> str:
        if not self.starts:
            return " (nothing is allocated)"
        i = max(bisect.bisect_right(self.starts, addr) - 1, 0)
        return (f" (nearest: {self.names[i]} at 0x{self.starts[i]:x}..0x{self.ends[i]:x})")

    # ---- lane-vector access ---------------------------------------------------------------------
    def check_lanes(self, addrs: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        """Offsets into the heap for each lane's access; raises on any out-of-bounds lane."""
        signed = addrs.dtype == _I64
        a = addrs.view(np.uint64) if signed else addrs.astype(np.uint64, copy=False)   # (the same bits)
        if a.size:
            # the usual case, every lane in one allocation: the allocations are disjoint and
            # sorted (a bump allocator, nothing freed), so the lowest and the highest lane inside
            # the allocation the lowest starts in put every lane inside it (two reductions and
            # a bisect instead of a per-lane search)
            lo, hi = int(_MIN(a)), int(_MAX(a))
            i = bisect.bisect_right(self.starts, lo) - 1
            if i >= 0 and hi + nbytes <= self.ends[i]:     # (every lane below 2^63: the same values)
                return addrs - _I64_BASE if signed else (a - np.uint64(GLOBAL_BASE)).astype(np.int64)
        idx = np.searchsorted(self._np_starts, a, side="right") - 1
        bad = idx < 0
        if not np.count_nonzero(bad):        # count_nonzero: a quarter of any()'s cost on 32 lanes
            bad = a + np.uint64(nbytes) > self._np_ends[idx]
        if np.count_nonzero(bad):
            lane = int(np.argmax(bad))
            raise CheckFailed(f"global {what} of {nbytes} B at 0x{int(a[lane]):x} (lane {lane}) is outside "
                              "every allocation" + self._nearest(int(a[lane])))
        return (a - np.uint64(GLOBAL_BASE)).astype(np.int64)


def check_aligned(addrs: np.ndarray, align: int, what: str) -> None:
    if align > 1:
        bad = (addrs.astype(np.int64, copy=False) & (align - 1)) != 0
        if np.count_nonzero(bad):
            lane = int(np.argmax(bad))
            raise CheckFailed(f"misaligned {what}: address 0x{int(addrs[lane]):x} (lane {lane}) "
                              f"is not {align}-byte aligned")


def gather(buf: np.ndarray, offs: np.ndarray, nbytes: int, count: int = 1) -> np.ndarray:
    """Per lane, ``count`` consecutive elements of ``nbytes`` from ``buf`` at byte offsets ``offs``
    (aligned): uint{8*nbytes} array of shape (lanes, count)."""
    dt = _UINT[nbytes]
    # the offsets are aligned to the whole access (check_aligned): each lane's elements are
    # one row of ``count`` (take: a quarter of fancy indexing's cost)
    width = nbytes * count
    rows = buf[: buf.size - buf.size % width].view(dt).reshape(-1, count)
    return rows.take(offs // width, axis=0)


def scatter(buf: np.ndarray, offs: np.ndarray, nbytes: int, values: np.ndarray) -> None:
    """Store ``values`` (lanes, count) of ``nbytes`` each at byte offsets ``offs`` (aligned);
    later lanes win where lanes collide, as one of the hardware's allowed outcomes."""
    dt = _UINT[nbytes]
    view = buf[: buf.size - buf.size % nbytes].view(dt)
    base = offs // nbytes
    count = values.shape[1]
    if count == 1:
        view[base] = values[:, 0]
    else:
        view[base[:, None] + np.arange(count)] = values


_MIN, _MAX = np.minimum.reduce, np.maximum.reduce
_I64 = np.dtype(np.int64)
_I64_BASE = np.int64(GLOBAL_BASE)
_UINT = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64, 16: np.dtype("V16")}


class SharedMemory:
    """One CTA's shared memory: ``size`` bytes from offset 0, the first SHARED_RESERVED reserved;
    addressed as ``rank << RANK_SHIFT | offset``."""

    def __init__(self, size: int, cta_name: str, rank: int = 0):
        self.data = np.zeros(max(size, SHARED_RESERVED + 16), dtype=np.uint8)
        self.size = size
        self.cta_name = cta_name
        self.rank = rank
        self.base = rank << RANK_SHIFT
        self.exited = False

    def check_lanes(self, addrs: np.ndarray, nbytes: int, what: str) -> np.ndarray:
        """Offsets into ``data`` of the lanes' shared::cta addresses (checked in bounds)."""
        a = addrs.astype(np.int64, copy=False)
        if self.base:
            a = a - self.base
        bad = (a < SHARED_RESERVED) | (a + nbytes > self.size)
        if bad.any():
            lane = int(np.argmax(bad))
            raise CheckFailed(f"shared {what} of {nbytes} B at 0x{int(a[lane]) + self.base:x} (lane {lane}) is outside "
                              f"{self.cta_name}'s shared memory ({self._window()})")
        return a

    def check_span(self, addr: int, nbytes: int, what: str) -> None:
        """``addr``: an offset into ``data`` (rank bits already split off)."""
        if addr < SHARED_RESERVED or addr + nbytes > self.size:
            raise CheckFailed(f"shared {what} of {nbytes} B at offset 0x{addr:x} is outside {self.cta_name}'s "
                              f"shared memory ({self._window()})")

    def _window(self) -> str:
        return f"0x{self.base + SHARED_RESERVED:x}..0x{self.base + self.size:x}"


def split_cluster_address(addr: int, own_rank: int = 0) -> tuple[int, int]:
    """(rank, offset) of a shared::cluster (or shared::cta) address."""
    return (addr >> RANK_SHIFT) & RANK_MASK, addr & OFFSET_MASK


def cluster_address(offset: int, rank: int) -> int:
    """The shared::cluster address of ``offset`` (an offset or any CTA's address) in CTA ``rank``."""
    return (rank << RANK_SHIFT) | (offset & OFFSET_MASK)
