/* SiLU-and-multiply in CUDA C, header-free (vLLM's silu_and_mul: out = silu(gate) * up): the
 * frame that core/workloads/silu_mul/cuda.py fills.
 *
 * Rendered behind `typedef <scalar> T;` and the genome's #defines: THREADS, VEC, STORE_VEC, ITEMS,
 * ELT, ROWS_PER_BLOCK (row groups) and WAVES (grids sized per SM).
 * Slots:
 *   {{to_f}} {{from_f}}  bodies converting T <-> float (../../kernels/convert.cuh)
 *   {{exp}} {{div}}      silu's exponential (expf, __expf) and division (g / d, __fdividef, rcp)
 *   {{ld}} {{st}}        the load / store cache hint
 *   {{unroll}}           the step loop's #pragma unroll count
 *   {{steps}}            the step_*.cuh in the genome's order, one line apart
 *   {{main}}             the kernel body: main_flat.cuh or main_rows.cuh, filled
 */

#include "../../kernels/convert.cuh"
static __device__ __forceinline__ float silu(float g) { const float d = 1.0f + {{exp}}(-g); return {{div}}; }
static __device__ __forceinline__ bool aligned(const void *a, const void *b, const void *c) {
    return (((unsigned long long)a | (unsigned long long)b | (unsigned long long)c) % (VEC * ELT)) == 0;
}

// V elements of T -> V floats through one 2/4/8/16-byte load with the genome's cache hint
template <int V> static __device__ __forceinline__ void load_vec(const T *p, float *o) {
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {
        unsigned short h;
        asm volatile("ld.global{{ld}}.u16 %0, [%1];" : "=h"(h) : "l"(p));
        o[0] = to_f((T)h);
    } else {
        unsigned w[BYTES / 4];
        if constexpr (BYTES == 16) asm volatile("ld.global{{ld}}.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{{ld}}.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
        else asm volatile("ld.global{{ld}}.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
#include "../../kernels/words_to_floats.cuh"
    }
}
// V floats -> V elements of T through one store with the genome's cache hint
template <int V> static __device__ __forceinline__ void store_vec(T *p, const float *v) {
    constexpr int BYTES = V * ELT;
    if constexpr (BYTES == 2) {
        const unsigned short h = (unsigned short)from_f(v[0]);
        asm volatile("st.global{{st}}.u16 [%0], %1;" :: "l"(p), "h"(h) : "memory");
    } else {
        unsigned w[BYTES / 4];
#include "../../kernels/floats_to_words.cuh"
        if constexpr (BYTES == 16) asm volatile("st.global{{st}}.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
        else if constexpr (BYTES == 8) asm volatile("st.global{{st}}.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
        else asm volatile("st.global{{st}}.u32 [%0], %1;" :: "l"(p), "r"(w[0]) : "memory");
    }
}

// elements [0, n) of one span, V at a time: thread tid of nthreads takes vectors tid, tid + nthreads, ...
// ITEMS of them per step, in flight together
template <int V>
static __device__ __forceinline__ void span_run(const T *__restrict__ g, const T *__restrict__ u, T *__restrict__ o,
                                                long long n, long long tid, long long nthreads) {
    constexpr int SV = STORE_VEC < V ? STORE_VEC : V;
    const long long span = nthreads * V;
#pragma unroll {{unroll}}
    for (long long base = tid * V; base < n; base += span * ITEMS) {
        float gv[ITEMS][V], uv[ITEMS][V];
{{steps}}
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_silu_mul(const T *__restrict__ gate, const T *__restrict__ up, T *__restrict__ out, int tokens, int hidden) {
{{main}}
}
