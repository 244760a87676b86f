"""``A . B^T`` in float64 for the tensor-core units, through BLAS without its thread pool.

The units compute every MMA as exact float64 products summed in float64 and rounded once to
the accumulator's format. numpy's einsum does this without BLAS but slowly (about 0.3-0.7 ms
CPU for M128 N256 K16-64); one BLAS dgemm call of the whole product is ~10x faster when it
runs on one thread, but OpenBLAS splits a product of more than 4 x 65536 multiply-adds
(M*N*K; interface/gemm.c, SMP_THRESHOLD_MIN x GEMM_MULTITHREAD_THRESHOLD) over its thread
pool, and on a loaded 2-core machine that made each call cost milliseconds. So the rows of A
go to dgemm in blocks of at most that many multiply-adds: every call stays on the calling
thread, whatever the pool's size. A BLAS with another threshold only changes the speed.

The sums' order differs from einsum's; the products of the tensor-core formats (at most 24
significant bits each, so exact in float64) and sums of a few hundred of them are exact in
float64 unless their magnitudes span more than ~2^25, and the one rounding to float32 after
hides the rest except at exact ties.
"""

from __future__ import annotations

import numpy as np

# multiply-adds per dgemm call: OpenBLAS runs a call of at most this many on one thread
_ONE_THREAD_MNK = 4 * 65536


def abt(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """float64 (M, N) = a (M, K) . b (N, K)^T, both float64."""
    m, k = a.shape
    n = b.shape[0]
    bt = np.ascontiguousarray(b.T)
    if m * n * k <= _ONE_THREAD_MNK:
        return np.dot(a, bt)
    out = np.empty((m, n), dtype=np.float64)
    step = max(1, _ONE_THREAD_MNK // max(1, n * k))
    a = np.ascontiguousarray(a)
    for r in range(0, m, step):
        np.dot(a[r:r + step], bt, out=out[r:r + step])
    return out
