/* GEMM math on the FFMA units (register_allocation.regs.math = ffma): each thread owns a TM x TN
 * tile of C in registers, its lanes laid out LM x LN in the warp, its rows / columns contiguous
 * or strided by the lane grid (STRIDED).
 * gemm.cu's {{ffma}} (under #else of USE_MMA): defines Acc, init_acc, compute_tile and store_c.
 * Uses BK, WARPS_N, WTM, WTN, LM, LN, TM, TN, STRIDED and A_IDX / B_IDX of gemm.cu.
 * Slots:
 *   {{unroll}}  the k loop's #pragma unroll (full, 1 or 2)
 */

typedef float Acc[TM][TN];
static __device__ __forceinline__ void init_acc(Acc &acc) {
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) acc[i][j] = 0.f;
}
// thread tile row i / column j of this thread inside the block tile
#if STRIDED
#define ROW_OF(i) (wm * WTM + (i) * LM + lm)
#define COL_OF(j) (wn * WTN + (j) * LN + ln)
#else
#define ROW_OF(i) (wm * WTM + lm * TM + (i))
#define COL_OF(j) (wn * WTN + ln * TN + (j))
#endif
static __device__ __forceinline__ void compute_tile(const T *a, const T *b, Acc &acc) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N, lm = lane / LN, ln = lane % LN;
    {{unroll}}
    for (int kk = 0; kk < BK; ++kk) {
        float av[TM], bv[TN];
#pragma unroll
        for (int i = 0; i < TM; ++i) av[i] = to_f(a[A_IDX(ROW_OF(i), kk)]);
#pragma unroll
        for (int j = 0; j < TN; ++j) bv[j] = to_f(b[B_IDX(kk, COL_OF(j))]);
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) acc[i][j] = fmaf(av[i], bv[j], acc[i][j]);
    }
}
static __device__ __forceinline__ void store_c(T *C, Acc &acc, int m0, int n0, int M, int N) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N, lm = lane / LN, ln = lane % LN;
#pragma unroll
    for (int i = 0; i < TM; ++i)
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            int row = m0 + ROW_OF(i), col = n0 + COL_OF(j);
            if (row < M && col < N) C[(long long)row * N + col] = from_f(acc[i][j]);
        }
}
