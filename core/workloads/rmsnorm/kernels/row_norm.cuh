/* RMSNorm's templated row-group function, row_norm<V, FULL> (rmsnorm.cu's {{row_norm}}): every
 * step covers all the group's rows, so their loads are in flight together and their sums meet
 * in one reduction. Uses THREADS, ROWS_PER_BLOCK, SPLIT, COLS_MAX, PERSISTENT and row_sums.
 * Slots:
 *   {{keep_fetch}}  the KEEP / FETCH macros of the row cache: row_registers / row_smem / row_reread.cuh
 *   {{row_cache}}   `    float row[ROWS_PER_BLOCK][ITEMS][V];` and its newline (row = registers), or nothing
 *   {{steps}}       step_load_x / step_load_w / step_reduce / step_store.cuh in the genome's order,
 *                   one line apart
 */

{{keep_fetch}}
// rows [0, nrows) of a group, ``cols`` apart; of each, the n columns of this block's slice
// (FULL: the slice is exactly ITEMS vectors a thread, so no column needs a bound check; a group
// always has its row 0, so that row's checks fold away too)
template <int V, bool FULL>
static __device__ __forceinline__ void row_norm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out,
                                                int n, int cols, int nrows, float eps, float *red, float *srow) {
    constexpr int ITEMS = (COLS_MAX + SPLIT * THREADS * V - 1) / (SPLIT * THREADS * V);
    constexpr int SLICE = ITEMS * THREADS * V;  // a row's place in srow
    (void)SLICE;
{{row_cache}}    float wv[ITEMS][V];
    float ss[ROWS_PER_BLOCK];
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) ss[r] = 0.f;

{{steps}}
    if (PERSISTENT) __syncthreads();  // red and srow are reused by the block's next group
}
#undef KEEP
#undef FETCH
