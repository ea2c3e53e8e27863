/* RMSNorm step REDUCE: the row group's sums of squares -> 1 / rms (row_sums).
 * One step of row_norm (row_norm.cuh's {{steps}}, in the genome's instruction_sequence.body
 * order); it covers every row of the group. Uses row_norm's locals and THREADS,
 * ROWS_PER_BLOCK, HAS_RES, the KEEP / FETCH macros of the row_*.cuh picked.
 */

    // REDUCE: row-wide sums of squares (the block's, or the cluster's) -> 1 / rms
    row_sums<ROWS_PER_BLOCK>(ss, red);
#pragma unroll
    for (int r = 0; r < ROWS_PER_BLOCK; ++r) ss[r] = rsqrtf(ss[r] / cols + eps);
