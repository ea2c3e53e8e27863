/* RMSNorm step LOAD_W: the thread's weight slice into registers.
 * One step of row_norm (row_norm.cuh's {{steps}}, in the genome's instruction_sequence.body
 * order); it covers every row of the group. Uses row_norm's locals and THREADS,
 * ROWS_PER_BLOCK, HAS_RES, the KEEP / FETCH macros of the row_*.cuh picked.
 */

    // LOAD_W: the weight slice this thread needs (the same for every row), into registers
#pragma unroll
    for (int it = 0; it < ITEMS; ++it) {
        const int c = (it * THREADS + threadIdx.x) * V;
        if (FULL || c < n) load_vec<V>(w + c, wv[it]);
    }
