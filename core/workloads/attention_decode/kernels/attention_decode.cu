/* Decode attention in CUDA C, header-free (bf16/fp16 travel as 16-bit integers): flash-decoding
 * over an HND KV cache, GQA, K+1 causal query tokens. Rendered by core/workloads/attention_decode/
 * cuda.py behind `typedef <scalar> T;` and the genome's #defines:
 *   THREADS          threads per block
 *   HEAD_SPLIT       blocks sharing one KV head's query heads (1: all of them in one block, so
 *                    each KV byte is read once)
 *   TILE, STAGES     keys per tile staged in shared memory; 2: the next tile loads during this one
 *   CP_ASYNC, VEC    the tile load: cp.async (1) or loads and stores through registers (0), VEC
 *                    elements (VEC * ELT bytes) per access; a scalar copy where rows are unaligned
 *   SROWS            query rows a thread scores against one key in the score step
 *   ACC_REGS, ACC_N  output accumulators in registers (ACC_N units of VEC per thread) or in shared memory
 *   {{unroll}}       (a slot) the unroll of the P.V loop over a tile's keys
 *   EXP2             1: ex2.approx with log2(e) folded into q; 0: expf
 *   LAZY             1: the accumulators are rescaled only when a row's max grew
 *   COMBINE_RUNNING  how the last block merges the splits: one by one (1), or the largest max
 *                    first, then one weighted sum (0); always in split order (deterministic)
 *
 * Grid (splits, kv_heads * HEAD_SPLIT, batch). A block takes one split of one sequence's KV head
 * and the query rows of its share of the group: row r = j * cnt + i is query token j, query head
 * h_lo + i; token j sees keys [0, context - queries + j + 1). It keeps an online softmax per row
 * (max m, sum l, unnormalised output). With one split it writes out; with several, each block
 * writes its partials to the workspace, and the last block of its (sequence, head share) to
 * arrive (a ticket counter; the counter is reset to 0 for the next launch) merges them: the
 * reduction of the splits is a second pass in the same launch, not a second kernel.
 */

#include "../../kernels/convert.cuh"

#if VEC * ELT == 16
typedef uint4 VT;
#elif VEC * ELT == 8
typedef uint2 VT;
#else
typedef unsigned VT;
#endif

static __device__ __forceinline__ float ex(float x) {
#if EXP2
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#else
    return expf(x);
#endif
}

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

static __device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// rows [0, n) of d elements, from global src (row stride d) to shared dst (row stride KS)
static __device__ __forceinline__ void copy_rows(T *dst, const T *src, int n, int d, int KS, bool vec_ok) {
    if (vec_ok) {
        const int per = d / VEC;
        for (int idx = threadIdx.x; idx < n * per; idx += THREADS) {
            const int r = idx / per, c = (idx - r * per) * VEC;
#if CP_ASYNC
            asm volatile("cp.async.ca.shared.global [%0], [%1], %2;"
                         :: "r"((unsigned)__cvta_generic_to_shared(dst + r * KS + c)), "l"(src + (long long)r * d + c),
                            "n"(VEC * ELT));
#else
            *(VT *)(dst + r * KS + c) = *(const VT *)(src + (long long)r * d + c);
#endif
        }
    } else {
        for (int idx = threadIdx.x; idx < n * d; idx += THREADS) {
            const int r = idx / d, c = idx - r * d;
            dst[r * KS + c] = src[(long long)r * d + c];
        }
    }
#if CP_ASYNC
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

template <int N> static __device__ __forceinline__ void wait_tiles() {
#if CP_ASYNC
    asm volatile("cp.async.wait_group %0;" :: "n"(N) : "memory");
#endif
}

// VEC elements of T at p (aligned to VEC * ELT bytes) -> VEC floats
static __device__ __forceinline__ void to_floats(const T *p, float *o) {
    const VT v = *(const VT *)p;
    const unsigned *w = (const unsigned *)&v;
    constexpr int BYTES = VEC * ELT;
#include "../../kernels/words_to_floats.cuh"
}

// SROWS dot products of one key row kr (shared, T) with the q rows qr[0..SROWS) (shared floats, row
// stride d): VEC elements of the key at a time (shared rows are aligned), then a scalar tail
static __device__ __forceinline__ void dots(const float *const *qr, const T *kr, int d, float *acc) {
#pragma unroll
    for (int j = 0; j < SROWS; ++j) acc[j] = 0.0f;
    int c = 0;
    for (; c + VEC <= d; c += VEC) {
        float o[VEC];
        to_floats(kr + c, o);
#pragma unroll
        for (int j = 0; j < SROWS; ++j)
#pragma unroll
            for (int e = 0; e < VEC; ++e) acc[j] = fmaf(qr[j][c + e], o[e], acc[j]);
    }
    for (; c < d; ++c) {
        const float kc = to_f(kr[c]);
#pragma unroll
        for (int j = 0; j < SROWS; ++j) acc[j] = fmaf(qr[j][c], kc, acc[j]);
    }
}

extern "C" __global__ void __launch_bounds__(THREADS)
abebot_attention_decode(const T *__restrict__ q, const T *__restrict__ k, const T *__restrict__ v, T *__restrict__ out,
                        float *__restrict__ wo, float *__restrict__ wml, int *__restrict__ tickets, int queries,
                        int kv_heads, int group, int d, int context, int split_len) {
    extern __shared__ __align__(16) unsigned char smem[];
    __shared__ int last;
    const int s = blockIdx.x, ns = gridDim.x, h = blockIdx.y / HEAD_SPLIT, hs = blockIdx.y % HEAD_SPLIT;
    const int b = blockIdx.z, hpb = (group + HEAD_SPLIT - 1) / HEAD_SPLIT, h_lo = hs * hpb;
    const int cnt = min(hpb, group - h_lo);
    if (cnt <= 0) return;  // a share with no heads (group < HEAD_SPLIT): no block of it takes a ticket
    const int R = queries * cnt, RB = queries * hpb;  // rows of this block; the workspace's rows per block
    const int KS = (d + 16 / ELT - 1) / (16 / ELT) * (16 / ELT) + 16 / ELT;  // padded shared row (16-byte steps)
    T *ks = (T *)smem, *vs = ks + STAGES * TILE * KS;
    float *qs = (float *)(vs + STAGES * TILE * KS), *sc = qs + R * d, *ms = sc + R * TILE, *ls = ms + R, *as = ls + R;
#if !ACC_REGS
    float *acc_s = as + R;
#endif
    const long long kv = ((long long)b * kv_heads + h) * context * d;
    const long long row0 = (((long long)b * queries * kv_heads + h) * group + h_lo) * d;  // token 0, head h_lo
    const long long jstride = (long long)kv_heads * group * d;
    const unsigned long long any = (unsigned long long)k | (unsigned long long)v;
    const bool vec_ok = d % VEC == 0 && any % (VEC * ELT) == 0;
    const float qscale = rsqrtf((float)d) * (EXP2 ? 1.4426950408889634f : 1.0f);

    // output units: row r, columns c .. c + VEC - 1 (a row's last unit may run past d, into the
    // padding of the shared rows; those columns are computed from whatever is there and never stored)
    const int ncg = (d + VEC - 1) / VEC, units = R * ncg;
    for (int idx = threadIdx.x; idx < R * d; idx += THREADS) {
        const int r = idx / d, c = idx - r * d;
        qs[idx] = to_f(q[row0 + (r / cnt) * jstride + (long long)(r % cnt) * d + c]) * qscale;
    }
    for (int r = threadIdx.x; r < R; r += THREADS) { ms[r] = -__int_as_float(0x7f800000); ls[r] = 0.0f; }
#if ACC_REGS
    float acc[ACC_N][VEC];  // unit threadIdx.x + a * THREADS
#pragma unroll
    for (int a = 0; a < ACC_N; ++a)
#pragma unroll
        for (int e = 0; e < VEC; ++e) acc[a][e] = 0.0f;
#else
    for (int i = threadIdx.x; i < units * VEC; i += THREADS) acc_s[i] = 0.0f;  // unit u at acc_s + u * VEC
#endif

    const int k0 = s * split_len, k1 = min(k0 + split_len, context), ntiles = (k1 - k0 + TILE - 1) / TILE;
    copy_rows(ks, k + kv + (long long)k0 * d, min(TILE, k1 - k0), d, KS, vec_ok);
    copy_rows(vs, v + kv + (long long)k0 * d, min(TILE, k1 - k0), d, KS, vec_ok);
    for (int it = 0; it < ntiles; ++it) {
        const int t0 = k0 + it * TILE, nt = min(TILE, k1 - t0), buf = it % STAGES;
        if (STAGES == 1 && it > 0) {  // this tile into the one buffer, free since the last __syncthreads
            copy_rows(ks, k + kv + (long long)t0 * d, nt, d, KS, vec_ok);
            copy_rows(vs, v + kv + (long long)t0 * d, nt, d, KS, vec_ok);
        }
        if (STAGES == 2 && it + 1 < ntiles) {  // the next tile into the other buffer, during this one
            const int t1 = t0 + TILE, n1 = min(TILE, k1 - t1), nb = (it + 1) % STAGES;
            copy_rows(ks + nb * TILE * KS, k + kv + (long long)t1 * d, n1, d, KS, vec_ok);
            copy_rows(vs + nb * TILE * KS, v + kv + (long long)t1 * d, n1, d, KS, vec_ok);
            wait_tiles<2>();
        } else {
            wait_tiles<0>();
        }
        __syncthreads();
        const T *kt = ks + buf * TILE * KS, *vt = vs + buf * TILE * KS;
        // scores: a thread takes one key and SROWS rows (each key row read once for them), keys
        // fastest (a warp reads the same q rows, many key rows)
        for (int idx = threadIdx.x; idx < (R + SROWS - 1) / SROWS * nt; idx += THREADS) {
            const int r0 = idx / nt * SROWS, i = idx - idx / nt * nt;
            const float *qr[SROWS];
            float sj[SROWS];
#pragma unroll
            for (int j = 0; j < SROWS; ++j) qr[j] = qs + min(r0 + j, R - 1) * d;  // past the last row: a repeat, not stored
            dots(qr, kt + i * KS, d, sj);
#pragma unroll
            for (int j = 0; j < SROWS; ++j) {
                const int r = r0 + j;
                if (r < R) sc[r * TILE + i] = t0 + i < context - queries + r / cnt + 1 ? sj[j] : -__int_as_float(0x7f800000);
            }
        }
        __syncthreads();
        // the online softmax: a warp per row
        for (int r = threadIdx.x / 32; r < R; r += THREADS / 32) {
            const int lane = threadIdx.x % 32;
            float mt = -__int_as_float(0x7f800000);
            for (int i = lane; i < nt; i += 32) mt = fmaxf(mt, sc[r * TILE + i]);
            const float m_old = ms[r], m_new = fmaxf(m_old, warp_max(mt));
            const bool none = m_new == -__int_as_float(0x7f800000);  // nothing seen yet by this row
            float sum = 0.0f;
            for (int i = lane; i < nt; i += 32) {
                const float p = none ? 0.0f : ex(sc[r * TILE + i] - m_new);
                sc[r * TILE + i] = p;
                sum += p;
            }
            sum = warp_sum(sum);
            if (lane == 0) {
                const float alpha = none || m_new == m_old ? 1.0f : ex(m_old - m_new);
                ls[r] = ls[r] * alpha + sum;
                ms[r] = m_new;
                as[r] = alpha;
            }
        }
        __syncthreads();
        // P.V: each thread owns fixed output units, VEC columns of V read at a time
#if ACC_REGS
#pragma unroll
        for (int a = 0; a < ACC_N; ++a) {
            const int u = threadIdx.x + a * THREADS;
            if (u < units) {
                float *x = acc[a];
#else
        for (int u = threadIdx.x; u < units; u += THREADS) {
            {
                float *x = acc_s + u * VEC;
#endif
                const int r = u / ncg, c = (u - r * ncg) * VEC;
                const float al = as[r];
#if LAZY
                if (al != 1.0f) {
#else
                {
#endif
#pragma unroll
                    for (int e = 0; e < VEC; ++e) x[e] *= al;
                }
                const float *p = sc + r * TILE;
#pragma unroll {{unroll}}
                for (int i = 0; i < nt; ++i) {
                    float o[VEC];
                    to_floats(vt + i * KS + c, o);
#pragma unroll
                    for (int e = 0; e < VEC; ++e) x[e] = fmaf(p[i], o[e], x[e]);
                }
            }
        }
        __syncthreads();  // the buffers are refilled next
    }

    // this thread's units, for the output (one split) or the workspace (several)
    const long long g = ((long long)b * kv_heads + h) * HEAD_SPLIT + hs;
    float *part = wo + (g * ns + s) * RB * d;  // this block's partial rows
#if ACC_REGS
#pragma unroll
    for (int a = 0; a < ACC_N; ++a) {
        const int u = threadIdx.x + a * THREADS;
        if (u < units) {
            const float *x = acc[a];
#else
    for (int u = threadIdx.x; u < units; u += THREADS) {
        {
            const float *x = acc_s + u * VEC;
#endif
            const int r = u / ncg, c = (u - r * ncg) * VEC;
            if (ns == 1) {
                const float inv = 1.0f / ls[r];
                T *o = out + row0 + (r / cnt) * jstride + (long long)(r % cnt) * d + c;
#pragma unroll
                for (int e = 0; e < VEC; ++e) if (c + e < d) o[e] = from_f(x[e] * inv);
            } else {
#pragma unroll
                for (int e = 0; e < VEC; ++e) if (c + e < d) part[r * d + c + e] = x[e];
            }
        }
    }
    if (ns == 1) return;

    // several splits: the max and sum too, then the last block of this share merges the partials
    float *wm = wml, *wl = wml + (long long)gridDim.z * kv_heads * HEAD_SPLIT * ns * RB;
    for (int r = threadIdx.x; r < R; r += THREADS) { wm[(g * ns + s) * RB + r] = ms[r]; wl[(g * ns + s) * RB + r] = ls[r]; }
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(tickets + g, 1) == ns - 1;
    __syncthreads();
    if (!last) return;
    __threadfence();
    for (int idx = threadIdx.x; idx < R * d; idx += THREADS) {
        const int r = idx / d, c = idx - r * d;
        const long long at = g * ns * RB + r;  // split 0's m and l of row r; split t's at + t * RB
#if COMBINE_RUNNING
        float m = __ldcg(wm + at), l = __ldcg(wl + at), x = __ldcg(wo + at * d + c);
        for (int t = 1; t < ns; ++t) {
            const float mt = __ldcg(wm + at + t * RB);
            if (mt == -__int_as_float(0x7f800000)) continue;  // the split's keys are all hidden from this row
            const float mn = fmaxf(m, mt), a = ex(m - mn), w = ex(mt - mn);
            l = l * a + __ldcg(wl + at + t * RB) * w;
            x = x * a + __ldcg(wo + (at + t * RB) * d + c) * w;
            m = mn;
        }
#else
        float m = -__int_as_float(0x7f800000), l = 0.0f, x = 0.0f;
        for (int t = 0; t < ns; ++t) m = fmaxf(m, __ldcg(wm + at + t * RB));
        for (int t = 0; t < ns; ++t) {
            const float w = ex(__ldcg(wm + at + t * RB) - m);
            l += __ldcg(wl + at + t * RB) * w;
            x += __ldcg(wo + (at + t * RB) * d + c) * w;
        }
#endif
        out[row0 + (r / cnt) * jstride + (long long)(r % cnt) * d + c] = from_f(x / l);
    }
    if (threadIdx.x == 0) tickets[g] = 0;  // ready for the next launch
}
