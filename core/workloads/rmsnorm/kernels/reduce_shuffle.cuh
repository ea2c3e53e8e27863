/* RMSNorm block reduction (register_allocation.regs.reduce = shuffle): warp shuffles, warp totals in red, the first warp sums them, two barriers.
 * The body of block_sums<N>(float (&s)[N], float *red) (rmsnorm.cu's {{block_sums}}): the block's
 * totals of N values, in place, in every thread. Uses THREADS; red holds RED floats.
 */

#pragma unroll
    for (int r = 0; r < N; ++r) {
        for (int o = 16; o > 0; o >>= 1) s[r] += __shfl_xor_sync(0xffffffffu, s[r], o);
        if (threadIdx.x % 32 == 0) red[r * 32 + threadIdx.x / 32] = s[r];
    }
    __syncthreads();
    if (threadIdx.x < 32) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
            float t = threadIdx.x < THREADS / 32 ? red[r * 32 + threadIdx.x] : 0.f;
            for (int o = 16; o > 0; o >>= 1) t += __shfl_xor_sync(0xffffffffu, t, o);
            if (threadIdx.x == 0) red[N * 32 + r] = t;
        }
    }
    __syncthreads();
#pragma unroll
    for (int r = 0; r < N; ++r) s[r] = red[N * 32 + r];
