/* The K warps' sums of both tensor-core kernels (mma.cu's and mma_w.cu's {{reduce_wk}}): acc[NT][4]
 * of every warp but the first of each column of warps, added in a fixed order through shared
 * memory. Uses WK, WN, NT, wk, wn, lane.
 */
#if WK > 1
    // the K warps' sums, added in a fixed order (deterministic); every thread reaches the barrier
    __shared__ float red[(WK - 1) * WN * NT * 4 * 32];
    if (wk > 0)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) red[((((wk - 1) * WN + wn) * NT + j) * 4 + r) * 32 + lane] = acc[j][r];
    __syncthreads();
    if (wk == 0)
        for (int l = 1; l < WK; ++l)
#pragma unroll
            for (int j = 0; j < NT; ++j)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[j][r] += red[((((l - 1) * WN + wn) * NT + j) * 4 + r) * 32 + lane];
#endif
