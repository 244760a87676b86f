// An Ampere-style GEMM written the way a public hand-written kernel is (a benchmark for
// porter's PTX simulator; written here):
//
//   C[m][n] = sum_k A[m][k] * B[n][k]          (A, B bf16 K-major; C f32; M, N any, K % 32 == 0)
//
// 128 threads as a 2x2 grid of warps over a 64x64 tile; per 32-wide K step the tile's A and
// B rows are copied with 16-byte `cp.async` into one of two padded shared-memory stages
// (commit / wait_group 1 double buffering), read back with `ldmatrix.x4` and multiplied with
// `mma.sync.m16n8k16` bf16; rows past M or N load a clamped row and the epilogue's bounds
// check (divergent in the tail tiles) drops them.

typedef unsigned int u32;
typedef unsigned short u16;

constexpr int BM = 64, BN = 64, BK = 32, PAD = 8, LD = BK + PAD;   // LD: elements per smem row

__device__ __forceinline__ u32 smem_addr(const void *p) {
    return static_cast<u32>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void cp16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_addr(dst)), "l"(src) : "memory");
}

__device__ __forceinline__ void ldmatrix_x4(u32 (&r)[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

__device__ __forceinline__ void mma_16x8x16(float (&c)[4], const u32 (&a)[4], u32 b0, u32 b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

extern "C" __global__ void __launch_bounds__(128)
gemm_mma_cp_async(const u16 *A, const u16 *B, float *C, int M, int N, int K) {
    __shared__ alignas(16) u16 sa[2][BM * LD];
    __shared__ alignas(16) u16 sb[2][BN * LD];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;

    // 64 rows x 4 chunks of 16 B per operand: two chunks of A and two of B per thread.
    auto load = [&](int stage, int k0) {
        for (int c = tid; c < BM * BK / 8; c += 128) {
            const int r = c / 4, kc = (c % 4) * 8;
            const int ra = min(m0 + r, M - 1), rb = min(n0 + r, N - 1);
            cp16(&sa[stage][r * LD + kc], A + (size_t)ra * K + k0 + kc);
            cp16(&sb[stage][r * LD + kc], B + (size_t)rb * K + k0 + kc);
        }
        asm volatile("cp.async.commit_group;" ::: "memory");
    };

    float acc[2][4][4] = {};
    const int ktiles = K / BK;
    load(0, 0);
    for (int kt = 0; kt < ktiles; ++kt) {
        if (kt + 1 < ktiles)
            load((kt + 1) % 2, (kt + 1) * BK);
        else
            asm volatile("cp.async.commit_group;" ::: "memory");
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        const u16 *as = sa[kt % 2], *bs = sb[kt % 2];
        for (int kk = 0; kk < BK; kk += 16) {
            u32 af[2][4], bf[2][4];
            for (int i = 0; i < 2; ++i)
                ldmatrix_x4(af[i], as + (wm + 16 * i + lane % 16) * LD + kk + (lane / 16) * 8);
            for (int j = 0; j < 2; ++j)
                ldmatrix_x4(bf[j], bs + (wn + 16 * j + (lane / 16) * 8 + lane % 8) * LD + kk + ((lane / 8) % 2) * 8);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 4; ++j)
                    mma_16x8x16(acc[i][j], af[i], bf[j / 2][2 * (j % 2)], bf[j / 2][2 * (j % 2) + 1]);
        }
        __syncthreads();                 // this stage is read before the copy two steps on lands
    }

    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 4; ++j)
            for (int e = 0; e < 4; ++e) {
                const int row = m0 + wm + 16 * i + lane / 4 + (e >= 2 ? 8 : 0);
                const int col = n0 + wn + 8 * j + 2 * (lane % 4) + (e & 1);
                if (row < M && col < N)
                    C[row * N + col] = acc[i][j][e];
            }
}
