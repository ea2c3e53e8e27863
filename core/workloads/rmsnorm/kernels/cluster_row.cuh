/* RMSNorm kernel body over a thread block cluster (SPLIT > 1; rmsnorm.cu's {{rows}}): a whole
 * cluster per row group, this block on its slice of every row; unaligned rows go to the scalar
 * twin on the cluster's block 0 alone. Uses SPLIT, ROWS_PER_BLOCK, VEC, FULL_FIT, COLS_MAX and
 * cluster_rank() of cluster_sum.cuh.
 */

    const int row0 = (int)(blockIdx.x / SPLIT) * ROWS_PER_BLOCK;  // a whole cluster per row group
    const int nrows = min(ROWS_PER_BLOCK, rows - row0);
    const long long o = (long long)row0 * cols;
    if (aligned) {
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");  // waited on before the first remote store
        const int slice = (cols + SPLIT * VEC - 1) / (SPLIT * VEC) * VEC;
        const int c0 = min(cols, (int)cluster_rank() * slice);
        if (FULL_FIT && cols == COLS_MAX) row_norm<VEC, FULL_FIT>(x + o + c0, w + c0, res + o + c0, out + o + c0, slice, cols, nrows, eps, red, srow);
        else row_norm<VEC, false>(x + o + c0, w + c0, res + o + c0, out + o + c0, min(slice, cols - c0), cols, nrows, eps, red, srow);
    } else if (cluster_rank() == 0) {  // no shared memory of another block
        for (int i = 0; i < nrows; ++i) row_norm_scalar(x + o + (long long)i * cols, w, res + o + (long long)i * cols, out + o + (long long)i * cols, cols, eps, red);
    }
