/* RMSNorm block reduction (register_allocation.regs.reduce = smem): a shared-memory tree over red, one row at a time.
 * The body of block_sums<N>(float (&s)[N], float *red) (rmsnorm.cu's {{block_sums}}): the block's
 * totals of N values, in place, in every thread. Uses THREADS; red holds RED floats.
 */

#pragma unroll
    for (int r = 0; r < N; ++r) {
        red[threadIdx.x] = s[r];
        __syncthreads();
        for (int st = THREADS / 2; st > 0; st >>= 1) {
            if (threadIdx.x < st) red[threadIdx.x] += red[threadIdx.x + st];
            __syncthreads();
        }
        s[r] = red[0];
        if (N > 1) __syncthreads();  // red is rewritten for the next row
    }
