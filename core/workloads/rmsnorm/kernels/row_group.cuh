/* RMSNorm kernel body without a cluster (rmsnorm.cu's {{rows}}, SPLIT = 1): the row group(s)
 * of this block, each through the vector path (aligned rows; bound-check free when FULL_FIT and
 * the row is COLS_MAX wide) or the scalar twin.
 * Slot {{rb}}: `const int rb = blockIdx.x;` (a block per group) or the persistent grid's loop head.
 * Row indices are int (rows <= 2^20), offsets 64-bit: every warp issues these instructions before
 * its first load, and in a launch-bound kernel each one counts.
 */

    {{rb}} {
        const int row0 = rb * ROWS_PER_BLOCK;
        if (row0 < rows) {
            const int nrows = min(ROWS_PER_BLOCK, rows - row0);
            const long long o = (long long)row0 * cols;
            if (aligned && FULL_FIT && cols == COLS_MAX) row_norm<VEC, FULL_FIT>(x + o, w, res + o, out + o, cols, cols, nrows, eps, red, srow);
            else if (aligned) row_norm<VEC, false>(x + o, w, res + o, out + o, cols, cols, nrows, eps, red, srow);
            else for (int i = 0; i < nrows; ++i) row_norm_scalar(x + o + (long long)i * cols, w, res + o + (long long)i * cols, out + o + (long long)i * cols, cols, eps, red);
        }
    }
