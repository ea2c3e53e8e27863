/* Gathered GEMV split-K combine (parallel_config.split > 1; gather_gemv.cu's {{combine}}): the
 * SPLIT warps of a team add their sums through shared memory red. Uses ROWS, SPLIT.
 */

        // split-K: every warp's sums through shared memory (a uniform loop: every thread gets here)
        if (lane == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r) red[warp * ROWS + r] = acc[r];
        }
        __syncthreads();
        if (lane == 0 && part == 0) {
#pragma unroll
            for (int q = 1; q < SPLIT; ++q)
#pragma unroll
                for (int r = 0; r < ROWS; ++r) acc[r] += red[(warp + q) * ROWS + r];
        }
        __syncthreads();
