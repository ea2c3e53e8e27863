/* RMSNorm in CUDA C, header-free, optionally fused with the residual add (vLLM's
 * fused_add_rms_norm): the frame that core/workloads/rmsnorm/cuda.py fills.
 *
 * Rendered behind `typedef <scalar> T;` and the genome's #defines: THREADS, ROWS_PER_BLOCK,
 * SPLIT, PERSISTENT, RED, VEC, COLS_MAX, FULL_FIT, HAS_RES, ELT (WAVES with a persistent grid).
 * Slots:
 *   {{to_f}} {{from_f}}  bodies converting T <-> float (../../kernels/convert.cuh)
 *   {{ld}} {{st}}        the load / store cache hint ("", ".nc", ".cs")
 *   {{block_sums}}       the block reduction's body: reduce_shuffle / reduce_all_warps / reduce_smem.cuh
 *   {{row_sums}}         row_sums over the cluster (cluster_sum.cuh) or `#define row_sums block_sums`
 *   {{row_norm}}         row_norm.cuh, filled
 *   {{cluster_dims}}     ` __cluster_dims__(SPLIT, 1, 1)` or nothing
 *   {{srow}}             the row group's shared memory declaration (row = smem), or a null pointer
 *   {{rows}}             the kernel body that picks the row group: row_group.cuh or cluster_row.cuh
 */

#include "../../kernels/convert.cuh"

// V elements of T <-> V floats through one 2/4/8/16-byte access with the genome's cache hints
// (HINT = false for data this kernel wrote: a non-coherent load could return the stale line)
template <int V, bool HINT = true> static __device__ __forceinline__ void load_vec(const T *p, float *o) {
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {
        unsigned short h;
        if constexpr (HINT) asm volatile("ld.global{{ld}}.u16 %0, [%1];" : "=h"(h) : "l"(p));
        else asm volatile("ld.global.u16 %0, [%1];" : "=h"(h) : "l"(p) : "memory");
        o[0] = to_f((T)h);
    } else {
        unsigned u[BYTES / 4];
        if constexpr (!HINT && BYTES == 16) asm volatile("ld.global.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p) : "memory");
        else if constexpr (!HINT && BYTES == 8) asm volatile("ld.global.v2.u32 {%0,%1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p) : "memory");
        else if constexpr (!HINT) asm volatile("ld.global.u32 %0, [%1];" : "=r"(u[0]) : "l"(p) : "memory");
        else if constexpr (BYTES == 16) asm volatile("ld.global{{ld}}.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(u[0]), "=r"(u[1]), "=r"(u[2]), "=r"(u[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{{ld}}.v2.u32 {%0,%1}, [%2];" : "=r"(u[0]), "=r"(u[1]) : "l"(p));
        else asm volatile("ld.global{{ld}}.u32 %0, [%1];" : "=r"(u[0]) : "l"(p));
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {
            if constexpr (ELT == 4) o[i] = __uint_as_float(u[i]);
            else { o[2 * i] = to_f((T)(u[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(u[i] >> 16)); }
        }
    }
}
template <int V, bool OUT> static __device__ __forceinline__ void store_any(T *p, const float *v) {
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {
        unsigned short h = (unsigned short)from_f(v[0]);
        if constexpr (OUT) asm volatile("st.global{{st}}.u16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
        else asm volatile("st.global.u16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
    } else {
        unsigned u[BYTES / 4];
#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {
            if constexpr (ELT == 4) u[i] = __float_as_uint(v[i]);
            else u[i] = (unsigned)(unsigned short)from_f(v[2 * i]) | ((unsigned)(unsigned short)from_f(v[2 * i + 1]) << 16);
        }
        if constexpr (BYTES == 16) {
            if constexpr (OUT) asm volatile("st.global{{st}}.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
            else asm volatile("st.global.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(u[0]), "r"(u[1]), "r"(u[2]), "r"(u[3]) : "memory");
        } else if constexpr (BYTES == 8) {
            if constexpr (OUT) asm volatile("st.global{{st}}.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(u[0]), "r"(u[1]) : "memory");
            else asm volatile("st.global.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(u[0]), "r"(u[1]) : "memory");
        } else {
            if constexpr (OUT) asm volatile("st.global{{st}}.u32 [%0], %1;" :: "l"(p), "r"(u[0]) : "memory");
            else asm volatile("st.global.u32 [%0], %1;" :: "l"(p), "r"(u[0]) : "memory");
        }
    }
}
template <int V> static __device__ __forceinline__ void store_vec(T *p, const float *v) { store_any<V, false>(p, v); }
template <int V> static __device__ __forceinline__ void store_vec_out(T *p, const float *v) { store_any<V, true>(p, v); }

// the block's totals of N values, in place, in every thread
template <int N> static __device__ __forceinline__ void block_sums(float (&s)[N], float *red) {
{{block_sums}}
}
{{row_sums}}
{{row_norm}}

// rows not aligned to the vector width: scalar, two reads, few registers (so the fast path keeps its occupancy)
static __device__ __noinline__ void row_norm_scalar(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out,
                                                    int cols, float eps, float *red) {
    float ss = 0.f;
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        float v = to_f(x[c]);
        if (HAS_RES) { v += to_f(res[c]); res[c] = from_f(v); }
        ss += v * v;
    }
    float sum[1] = {ss};
    block_sums<1>(sum, red);
    const float rstd = rsqrtf(sum[0] / cols + eps);
    for (int c = threadIdx.x; c < cols; c += THREADS) {
        const float v = HAS_RES ? to_f(res[c]) : to_f(x[c]);
        out[c] = from_f(v * rstd * to_f(w[c]));
    }
    __syncthreads();
}

extern "C" __global__ void __launch_bounds__(THREADS){{cluster_dims}}
abebot_rmsnorm(const T *__restrict__ x, const T *__restrict__ w, T *res, T *__restrict__ out, int rows, int cols, float eps) {
    __shared__ float red[RED];
    {{srow}}
    const bool aligned = cols % VEC == 0;  // else rows start off the vector grid: run the scalar twin
{{rows}}
}
