/* RoPE in CUDA C, NeoX style, in place, header-free (bf16/fp16 travel as 16-bit integers): the
 * frame that core/workloads/rope/cuda.py fills.
 *
 * Rendered behind `typedef <scalar> T;` and the genome's #defines: THREADS, VEC, ITEMS, ELT,
 * HALF_MAX, and TOKENS_PER_BLOCK (WAVES with a persistent grid) or HEADS_PER_BLOCK (head_split).
 * Slots:
 *   {{to_f}} {{from_f}}      bodies converting T <-> float (../../kernels/convert.cuh)
 *   {{ld_0}} {{ld_1}} {{st}}   ../../kernels/access_ld.cuh (load_vec_which.cuh's) / access_st.cuh with the
 *                          q/k load, cos/sin load and store hints
 *   {{cs_from}}            load_cs's body: cs_shared.cuh or cs_global.cuh
 *   {{stage}}              stage_shared.cuh (whole lines) or nothing
 *   {{unroll}}             the step loop's #pragma unroll count
 *   {{steps}}              the step_*.cuh in the genome's order, one line apart
 *   {{scs}}                the shared cos/sin declaration, or a null pointer
 *   {{main}}               main_head_split.cuh or main_tokens.cuh, filled
 */

#include "../../kernels/convert.cuh"

// V elements -> V floats through one load; WHICH 0 is q/k (x hint), 1 the cos/sin cache (cs hint)
#include "../../kernels/load_vec_which.cuh"
template <int V> static __device__ __forceinline__ void store_vec(T *p, const float *v) {
    constexpr int BYTES = V * ELT;
    unsigned w[BYTES >= 4 ? BYTES / 4 : 1];
    if constexpr (BYTES == 2) w[0] = (unsigned short)from_f(v[0]);
    else {
#include "../../kernels/floats_to_words.cuh"
    }
{{st}}
}
template <int V> static __device__ __forceinline__ void load_cs(const T *cs, const float *scs, int H, int j, float *c, float *s) {
{{cs_from}}
}

// heads [h_lo, h_hi) of one token (query heads, then key heads): (h_hi - h_lo) * H / V work items
template <int V>
static __device__ __forceinline__ void token_run(const T *__restrict__ cs, T *qt, T *kt, int nq, int h_lo, int h_hi, int H,
                                                 float *scs) {
{{stage}}    const int nv = H / V, n = (h_hi - h_lo) * nv;
#pragma unroll {{unroll}}
    for (int base = threadIdx.x; base < n; base += THREADS * ITEMS) {
        float a[ITEMS][V], b[ITEMS][V], c[ITEMS][V], s[ITEMS][V];
        T *xp[ITEMS];
        int j[ITEMS];
        bool ok[ITEMS];
#pragma unroll
        for (int i = 0; i < ITEMS; ++i) {
            const int w = base + i * THREADS, h = h_lo + w / nv;
            ok[i] = w < n;
            j[i] = (w % nv) * V;
            xp[i] = h < nq ? qt + (long long)h * 2 * H : kt + (long long)(h - nq) * 2 * H;
        }
{{steps}}
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_rope(const int *__restrict__ positions, const T *__restrict__ cache, T *q, T *k, int tokens, int nq, int nk, int H) {
    {{scs}}
    const unsigned long long any = (unsigned long long)cache | (unsigned long long)q | (unsigned long long)k;
    const bool vec_ok = H % VEC == 0 && any % (VEC * ELT) == 0;  // else the scalar twin
{{main}}
}
