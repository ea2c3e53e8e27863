/* The W4A16 kernel of the weights-as-A tensor-core path (cuda_mma_w.py): y^T = W^T x^T, the
 * dequantised weights mma's A operand, x its B operand, the scales on each group's float32 sums.
 * Slots: title ("RMSNorm + " or nothing), dtype, zero_points, T (the 16-bit type), the shape
 * (threads, wk, wn, vec, th, d, dx, u, kb, rows, s), helpers (mma_helpers.cuh), prologue (the
 * fused norm's block_inv), extra (the bulk ring's defines and helpers), w_ld / x_ld (the loads
 * with their cache hints), bounds, entry (cuda_norm.py's, with ws / cnt), gamma_decl, c2_decl
 * (mma_w_c2_*.cuh), ring_start / step_top / step_end (mma_w_{regs,lanes}_*.cuh or the bulk
 * ring's), zero (mma_w_zero.cuh), w_at / x_at (where a step's words and x are), inv_first /
 * inv_last (the norm's call), inv_at, reduce_wk and split_k (reduce_wk.cuh, split_k.cuh).
 */
// AbeBot generated CUDA {{title}}W4A16 on tensor cores, weights as A ({{dtype}}, zero points: {{zero_points}})
typedef {{T}} T;
#define THREADS {{threads}}
#define WK {{wk}}
#define WN {{wn}}
#define VEC {{vec}}
#define NC (2 * VEC)
#define TH {{th}}
#define NT (NC * TH)
#define D {{d}}
#define DX {{dx}}
#define U {{u}}
#define KB {{kb}}
#define ROWS {{rows}}
#define S {{s}}
#define MT ROWS
#define ELT 2

{{helpers}}
{{prologue}}{{extra}}// one step of 32 along K: VEC uint4 of words, and TH uint4 of x (row g, and g + 8 with 16 rows)
static __device__ __forceinline__ void load_words(uint4 *w, const uint4 *wp, long long wstride, int step) {
#pragma unroll
    for (int i = 0; i < VEC; ++i) { const uint4 *p = wp + i * wstride + step * 32; {{w_ld}} }
}
static __device__ __forceinline__ void load_x(uint4 *xv, const T *const *xp, const bool *ok, int step) {
#pragma unroll
    for (int h = 0; h < TH; ++h) {
        xv[h] = make_uint4(0u, 0u, 0u, 0u);
        if (ok[h]) { const T *p = xp[h] + step * 32; {{x_ld}} }
    }
}
// step `step` (if < steps) of every lane's words and x rows into ring slot `slot`; a group is
// committed even when empty, so that the wait counts stay exact
static __device__ __forceinline__ void ring_issue(uint4 *ring, int slot, const uint4 *wp, long long wstride, const T *const *xp, const bool *ok, int step, int steps) {
    if (step < steps) {
#pragma unroll
        for (int i = 0; i < VEC; ++i) cp_async16(ring + (slot * (VEC + TH) + i) * THREADS + threadIdx.x, wp + i * wstride + step * 32);
#pragma unroll
        for (int h = 0; h < TH; ++h) cp_async16(ring + (slot * (VEC + TH) + VEC + h) * THREADS + threadIdx.x, xp[h] + step * 32, ok[h]);
    }
    asm volatile("cp.async.commit_group;" ::: "memory");
}
extern "C" __global__ void {{bounds}}
{{entry}}
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wk = warp % WK, wn = warp / WK;
    const int g = lane >> 2, t = lane & 3, m0 = blockIdx.y * ROWS, KS = G * 4;
    const int cb0 = (blockIdx.x * WN + wn) * VEC, n0 = cb0 * 32;
    // this warp's share of K: whole groups [gb, ge), in order (blocks along K, then warps)
    const int kl = blockIdx.z * WK + wk;
    const int gb = (int)((long long)G * kl / (WK * KB)), ge = (int)((long long)G * (kl + 1) / (WK * KB));
    const int steps = 4 * (ge - gb);
    const long long wstride = (long long)KS * 32;
    const uint4 *wp = (const uint4 *)qw + (long long)cb0 * wstride + (long long)gb * 128 + lane;
    const uint2 *scp = sp + ((long long)cb0 * G + gb) * 8 + g;{{gamma_decl}}
    bool ok[TH];
    const T *xp[TH];
#pragma unroll
    for (int h = 0; h < TH; ++h) {
        ok[h] = m0 + g + 8 * h < M;
        xp[h] = x + (long long)(ok[h] ? m0 + g + 8 * h : 0) * G * 128 + (long long)gb * 128 + 8 * t;
    }
{{c2_decl}}
    float acc[NT][4] = {}, part[NT][4];
    uint2 sv[VEC], svn[VEC];  // this group's scales and the next one's, a group ahead
#pragma unroll
    for (int i = 0; i < VEC; ++i) svn[i] = steps ? scp[(long long)i * G * 8] : make_uint2(0u, 0u);
{{ring_start}}{{inv_first}}
    for (int s0 = 0; s0 < steps; s0 += U) {
#pragma unroll
        for (int u = 0; u < U; ++u) {
            if (s0 + u >= steps) break;
            if (u % 4 == 0) {  // a group starts: its scales, the next group's loads, zeroed sums{{zero}}
#pragma unroll
                for (int i = 0; i < VEC; ++i) {
                    sv[i] = svn[i];
                    if (s0 + u + 4 < steps) svn[i] = scp[((long long)i * G + (s0 + u) / 4 + 1) * 8];
                }
#pragma unroll
                for (int j = 0; j < NT; ++j) part[j][0] = part[j][1] = part[j][2] = part[j][3] = 0.f;
            }
{{step_top}}#pragma unroll
            for (int c = 0; c < NC; ++c)
#pragma unroll
                for (int ss = 0; ss < 2; ++ss) {
                    const uint4 &q = {{w_at}};
                    const int j = 2 * (c % 2) + ss;
                    const unsigned wv = j == 0 ? q.x : j == 1 ? q.y : j == 2 ? q.z : q.w;
                    const unsigned a[4] = {dq(wv, 0, c2[c][0]), dq(wv, 1, c2[c][1]), dq(wv, 2, c2[c][0]), dq(wv, 3, c2[c][1])};
#pragma unroll
                    for (int h = 0; h < TH; ++h)
                        mma(part[c * TH + h], a, ss ? {{x_at}}.z : {{x_at}}.x, ss ? {{x_at}}.w : {{x_at}}.y);
                }
{{step_end}}
            if (u % 4 == 3) {  // the group's sums times its scales: rows g (h 0) and g + 8 (h 1) of each tile
#pragma unroll
                for (int c = 0; c < NC; ++c) {
                    const unsigned pr = (c % 2) ? sv[c / 2].y : sv[c / 2].x;
                    const float s_lo = to_f((T)(pr & 0xffffu)), s_hi = to_f((T)(pr >> 16));
#pragma unroll
                    for (int h = 0; h < TH; ++h) {
                        float *p = part[c * TH + h], *o = acc[c * TH + h];
                        o[0] += p[0] * s_lo; o[1] += p[1] * s_lo; o[2] += p[2] * s_hi; o[3] += p[3] * s_hi;
                    }
                }
            }
        }
    }
{{reduce_wk}}
#if KB > 1
{{split_k}}
#endif{{inv_last}}
    if (wk != 0) return;
#pragma unroll
    for (int c = 0; c < NC; ++c)
#pragma unroll
        for (int h = 0; h < TH; ++h)
#pragma unroll
            for (int r = 0; r < 4; ++r) {
                const int row = m0 + 8 * h + 2 * t + (r & 1), col = n0 + 16 * c + g + 8 * (r >> 1);
                if (row < M && col < N) y[(long long)row * N + col] = from_f(acc[c * TH + h][r]{{inv_at}});
            }
}
