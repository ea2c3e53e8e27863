/* RMSNorm: the heads of the two loops a row_norm step runs (step_load_x.cuh, step_store.cuh), for
 * each row r of the group (ro: its offset) and each of the thread's ITEMS vectors it (c: its first
 * column). It opens both loops; the including step closes them (`}` twice). Uses row_norm's
 * locals and THREADS, ROWS_PER_BLOCK.
 */

#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) {
        const long long ro = (long long)r * cols;
#pragma unroll
        for (int it = 0; it < ITEMS; ++it) {
            const int c = (it * THREADS + threadIdx.x) * V;
