/* The W4A16 kernel of the x-as-A tensor-core path (cuda_mma.py): mma.sync m16n8k16 with x as the
 * A fragment and the dequantised, repacked weights as B; WK x WN warps, KB blocks along K.
 * Slots: title ("RMSNorm + " or nothing), dtype, zero_points, T, the shape (threads, wk, wn, nt, b,
 * kb, s, xr), helpers (mma_helpers.cuh), prologue (the fused norm's block_inv), bounds, entry
 * (cuda_norm.py's, with ws / cnt), c2_once / c2 (the magic + z pairs, once or per column),
 * gamma_decl, part_decl, before_loop / top / bottom (the chunk loads: the cp.async ring of
 * cuda_ring.py, double buffered or not), unroll, frag_at (a step's x fragments), scale / target /
 * b0..b3 (the scale on the weights or on the sums), flush, norm_call, reduce_wk / split_k
 * (reduce_wk.cuh, split_k.cuh), inv_y.
 */
// AbeBot generated CUDA {{title}}W4A16 on tensor cores ({{dtype}}, zero points: {{zero_points}})
typedef {{T}} T;
#define THREADS {{threads}}
#define WK {{wk}}
#define WN {{wn}}
#define NT {{nt}}
#define NB4 (NT / 4)
#define B {{b}}
#define KB {{kb}}
#define MT 16
#define ELT 2
#define S {{s}}
#define XR {{xr}}

{{helpers}}
{{prologue}}
extern "C" __global__ void {{bounds}}
{{entry}}
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, wk = warp % WK, wn = warp / WK;
    const int g = lane >> 2, t = lane & 3, m0 = blockIdx.y * 16, KS = G * 4;
    const int nb0 = (blockIdx.x * WN + wn) * NB4, n0 = nb0 * 32;
    const uint4 *wp = (const uint4 *)qw + (long long)nb0 * KS * 32 + lane;
    const bool ok[2] = {m0 + g < M, m0 + g + 8 < M};
    const T *xr[2] = {x + (long long)(ok[0] ? m0 + g : 0) * G * 128 + 8 * t, x + (long long)(ok[1] ? m0 + g + 8 : 0) * G * 128 + 8 * t};{{c2_once}}{{gamma_decl}}
    float acc[NT][4] = {};{{part_decl}}
    const int chunks = (KS + B - 1) / B, first = blockIdx.z * WK + wk, stride = WK * KB;
{{before_loop}}#pragma unroll {{unroll}}
    for (int c = first; c < chunks; c += stride) {
        const int s0 = c * B;
{{top}}#pragma unroll
        for (int u = 0; u < B; ++u) {
            const int ks = s0 + u;
            if (ks >= KS) break;
            const int grp = ks >> 2;
{{frag_at}}
#pragma unroll
            for (int j = 0; j < NT; ++j) {
                const int col = n0 + 8 * j + g;
                {{c2}}
                const uint4 &q = w[u][j / 4];
                const unsigned wv = j % 4 == 0 ? q.x : j % 4 == 1 ? q.y : j % 4 == 2 ? q.z : q.w;
{{scale}}                mma({{target}}, fr, {{b0}}, {{b1}});
                mma({{target}}, fr + 4, {{b2}}, {{b3}});
            }
{{flush}}
        }{{bottom}}
    }{{norm_call}}
{{reduce_wk}}
#if KB > 1
{{split_k}}
#endif
    if (wk != 0) return;
#pragma unroll
    for (int j = 0; j < NT; ++j)
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const int row = m0 + g + 8 * (r / 2), col = n0 + 8 * j + 2 * t + r % 2;
            if (row < M && col < N) y[(long long)row * N + col] = from_f(acc[j][r]{{inv_y}});
        }
}
