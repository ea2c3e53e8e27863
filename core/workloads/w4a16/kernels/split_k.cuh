/* Blocks along K of both tensor-core kernels (their {{split_k}}, under #if KB > 1): each writes its
 * partial tile to the workspace ws; the last to finish (a counter per tile in cnt, reset for the
 * next launch) adds all of them in block order. Uses KB, WN, NT, wk, wn, lane.
 */
    __shared__ int last;
    const long long tile = (long long)blockIdx.y * gridDim.x + blockIdx.x, tiles = (long long)gridDim.x * gridDim.y;
    if (wk == 0)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) ws[(((blockIdx.z * tiles + tile) * WN + wn) * NT * 4 + j * 4 + r) * 32 + lane] = acc[j][r];
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(cnt + tile, 1) == KB - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (wk == 0)
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                float v = 0.f;
                for (int z = 0; z < KB; ++z) v += __ldcg(ws + (((z * tiles + tile) * WN + wn) * NT * 4 + j * 4 + r) * 32 + lane);
                acc[j][r] = v;
            }
    if (threadIdx.x == 0) cnt[tile] = 0;
