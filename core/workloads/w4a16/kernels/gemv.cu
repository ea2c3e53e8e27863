/* The W4A16 GEMV kernel of the CUDA template's fma path (cuda.py): a block of TC column threads by
 * KSPLIT K lanes, each column thread VEC columns, B words in flight a thread, float32 FMAs; the K
 * lanes add up by shuffles, then through shared memory, in a fixed order.
 * Slots: title ("RMSNorm + " or nothing), dtype, zero_points, y_of, T, the shape (threads, ksplit,
 * mt, vec, b, elt), layout (WORD / SCALE defines), to_f / from_f (conversion bodies, ../../kernels/convert.cuh), load_words
 * (the word loads with their cache hint), load_raw8 (x loads), prescale (mask dequantisation),
 * norm_prologue (cuda_norm.py's block_inv), ssq_param / ssq_decl / ssq_arg / ssq_arg1 (the stream
 * norm's sums of squares), first_loads / batch_loads / copy_batch (the word batches, double
 * buffered or not), unroll, x_batch / x_word (x first or at each word), nz, zero_of, steps (a
 * word's math), acc_term, bounds, entry (cuda_norm.py's), norm_tail, inv_y.
 */
// AbeBot generated CUDA {{title}}W4A16 ({{dtype}}, zero points: {{zero_points}}): y = {{y_of}} . ((q - z) * s)
typedef {{T}} T;
#define THREADS {{threads}}
#define KSPLIT {{ksplit}}
#define TC (THREADS / KSPLIT)
#define KL (TC >= 32 ? 1 : 32 / TC)
#define NG (KSPLIT / KL)
#define MT {{mt}}
#define VEC {{vec}}
#define B {{b}}
#define ELT {{elt}}
{{layout}}
#include "../../kernels/convert.cuh"

// fp16x2 helpers of the half2 dequantisation: (hi, lo) packing, (a & b) | c, a - b, a * b + c, lo + hi
static __device__ __forceinline__ unsigned pack_h2(float lo, float hi) {
    unsigned r; asm("cvt.rn.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
static __device__ __forceinline__ unsigned lop3_and_or(unsigned a, unsigned b, unsigned c) {
    unsigned r; asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
static __device__ __forceinline__ unsigned hsub2(unsigned a, unsigned b) {
    unsigned r; asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b)); return r; }
static __device__ __forceinline__ unsigned hfma2(unsigned a, unsigned b, unsigned c) {
    unsigned r; asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
static __device__ __forceinline__ float h2_sum(unsigned v) {
    float lo, hi;
    asm("{ .reg .f16 l, h; mov.b32 {l, h}, %2; cvt.f32.f16 %0, l; cvt.f32.f16 %1, h; }" : "=f"(lo), "=f"(hi) : "r"(v));
    return lo + hi; }

// V adjacent words of one row of qweight
template <int V> static __device__ __forceinline__ void load_words(const int *p, unsigned *u) {
    constexpr int BYTES = 4 * V;
{{load_words}}
}
{{load_raw8}}// the 8 x values of one word (pre-scaled for the mask dequantisation)
static __device__ __forceinline__ void load_x8(const T *p, float *o) {
    load_raw8(p, o);
    {{prescale}}
}
{{norm_prologue}}
// columns [c, c + V) of rows [m0, m0 + MT): words ks, ks + KSPLIT, ... of the K / 8
template <int V>
static __device__ __forceinline__ void run(const T *__restrict__ x, const int *__restrict__ qw, const T *__restrict__ sc,
                                           const unsigned char *__restrict__ zp, const T *__restrict__ gm, const float *inv,
                                           int M, int N, int G, int m0, int c, int ks, float (*acc)[VEC]{{ssq_param}}) {
    const int KW = G * 16;
    const T *xr[MT];
#pragma unroll
    for (int a = 0; a < MT; ++a) xr[a] = x + (long long)(m0 + a < M ? m0 + a : m0) * G * 128;
{{first_loads}}
#pragma unroll {{unroll}}
    for (int j = ks; j < KW; j += KSPLIT * B) {
{{x_batch}}{{batch_loads}}
#pragma unroll
            for (int u = 0; u < B; ++u) {
                const int kw = j + u * KSPLIT;
                if (kw >= KW) break;
                const int grp = kw >> 4;
                float s[V], z[V], zc[{{nz}}][V];
#pragma unroll
                for (int e = 0; e < V; ++e) {
                    s[e] = to_f(sc[SCALE(grp, c + e)]);
                    z[e] = {{zero_of}};
#pragma unroll
                    for (int q = 0; q < {{nz}}; ++q) zc[q][e] = 8388608.f + z[e] * (float)(1 << (4 * q));
                }
{{x_word}}
                float part[MT][V] = {};{{steps}}
#pragma unroll
                for (int a = 0; a < MT; ++a)
#pragma unroll
                    for (int e = 0; e < V; ++e) acc[a][e] += {{acc_term}};
            }{{copy_batch}}
    }
}

extern "C" __global__ void {{bounds}}
{{entry}}
    const int tc = threadIdx.x % TC, ks = threadIdx.x / TC;
    const int c0 = (blockIdx.x * TC + tc) * VEC, m0 = blockIdx.y * MT;
    float acc[MT][VEC] = {};{{ssq_decl}}
    const bool vec_ok = N % VEC == 0 && ((unsigned long long)qw % (4 * VEC)) == 0;  // else column by column
    if (c0 < N) {
        if (vec_ok) run<VEC>(x, qw, sc, zp, gm, inv, M, N, G, m0, c0, ks, acc{{ssq_arg}});
        else {
            for (int e = 0; e < VEC && c0 + e < N; ++e) {
                float one[MT][VEC] = {};
                run<1>(x, qw, sc, zp, gm, inv, M, N, G, m0, c0 + e, ks, one{{ssq_arg1}});
#pragma unroll
                for (int a = 0; a < MT; ++a) acc[a][e] = one[a][0];
            }
        }
    }{{norm_tail}}
#if KSPLIT > 1
    // K lanes of a warp add up by shuffles (a warp holds KL of them), then the NG groups through
    // shared memory in a fixed order; every thread reaches both, so no shuffle or barrier diverges
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
#pragma unroll
            for (int off = TC; off < 32; off <<= 1) acc[a][e] += __shfl_xor_sync(0xffffffffu, acc[a][e], off);
#if NG > 1
    __shared__ float red[NG * TC * MT * VEC];
    if (ks % KL == 0)
#pragma unroll
        for (int a = 0; a < MT; ++a)
#pragma unroll
            for (int e = 0; e < VEC; ++e) red[(((ks / KL) * TC + tc) * MT + a) * VEC + e] = acc[a][e];
    __syncthreads();
    if (ks != 0) return;
    for (int l = 1; l < NG; ++l)
#pragma unroll
        for (int a = 0; a < MT; ++a)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[a][e] += red[((l * TC + tc) * MT + a) * VEC + e];
#endif
    if (ks != 0) return;
#endif
    if (c0 >= N) return;
#pragma unroll
    for (int a = 0; a < MT; ++a)
#pragma unroll
        for (int e = 0; e < VEC; ++e)
            if (m0 + a < M && c0 + e < N) y[(long long)(m0 + a) * N + c0 + e] = from_f(acc[a][e]{{inv_y}});
}
