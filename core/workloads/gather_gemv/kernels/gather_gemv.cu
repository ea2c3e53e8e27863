/* Gathered GEMV in CUDA C, header-free: logits[t, j] = h[t] . W[ids[t, j]], the frame that
 * core/workloads/gather_gemv/cuda.py fills. A team of SPLIT warps takes a task of ROWS
 * candidates of one token; TEAMS teams a block.
 *
 * Rendered behind `typedef <scalar> T;` and the genome's #defines: THREADS, SPLIT, TEAMS, VEC,
 * ROWS, ELT (WAVES with a persistent grid).
 * Slots:
 *   {{to_f}} {{from_f}}  bodies converting T <-> float (../../kernels/convert.cuh)
 *   {{ld_0}} {{ld_1}}    ../../kernels/access_ld.cuh with the h load and W load hints (load_vec_which.cuh)
 *   {{unroll}}           dot_span's #pragma unroll count
 *   {{steps}}            the step_*.cuh in the genome's order, one line apart
 *   {{red}}              the split-K shared declaration (SPLIT > 1), or nothing
 *   {{loop}}             the loop head over this block's task groups (one, or a persistent grid's share)
 *   {{combine}}          a line break and combine_split.cuh (SPLIT > 1), or nothing
 */

#include "../../kernels/convert.cuh"

// V elements -> V floats through one load; WHICH 0 is h, 1 a row of W
#include "../../kernels/load_vec_which.cuh"

// this lane's partial sums of ROWS dot products: elements start, start + stride, ... (V at a time)
template <int V>
static __device__ __forceinline__ void dot_span(const T *__restrict__ hr, const T *const *wr, int K, int start, int stride,
                                                float *acc) {
#pragma unroll {{unroll}}
    for (int k = start; k < K; k += stride) {
{{steps}}
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_gather_gemv(const T *__restrict__ h, const T *__restrict__ W, const int *__restrict__ ids, T *__restrict__ logits,
                   int tokens, int cands, int vocab, int K) {
    {{red}}
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, team = warp / SPLIT, part = warp % SPLIT;
    const int G = (cands + ROWS - 1) / ROWS;
    const long long tasks = (long long)tokens * G;
    const unsigned long long any = (unsigned long long)h | (unsigned long long)W;
    const bool vec_ok = K % VEC == 0 && any % (VEC * ELT) == 0;  // else the scalar twin
    (void)vocab; (void)part;
    {{loop}} {
        const long long task = base + team;
        const bool active = task < tasks;
        const int t = active ? (int)(task / G) : 0, j0 = active ? (int)(task % G) * ROWS : 0;
        const T *wr[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r)  // a row past the last candidate reads the first one and is not stored
            wr[r] = W + (long long)ids[(long long)t * cands + (j0 + r < cands ? j0 + r : j0)] * K;
        float acc[ROWS];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) acc[r] = 0.f;
        const T *hr = h + (long long)t * K;
        if (active) {
            if (vec_ok) dot_span<VEC>(hr, wr, K, (part * 32 + lane) * VEC, SPLIT * 32 * VEC, acc);
            else dot_span<1>(hr, wr, K, part * 32 + lane, SPLIT * 32, acc);
        }
#pragma unroll
        for (int r = 0; r < ROWS; ++r)
            for (int o = 16; o > 0; o >>= 1) acc[r] += __shfl_xor_sync(0xffffffffu, acc[r], o);{{combine}}
        if (active && lane == 0 && part == 0) {
#pragma unroll
            for (int r = 0; r < ROWS; ++r)
                if (j0 + r < cands) logits[(long long)t * cands + j0 + r] = from_f(acc[r]);
        }
    }
}
