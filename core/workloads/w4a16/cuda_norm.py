"""The fused RMSNorm's pieces of the CUDA W4A16 kernels (:mod:`core.workloads.rmsnorm_w4a16`).

The kernel's entry (W4A16's parameters, or the fused one's with gamma and eps), the block's 1 / rms
computed from x before or after the weights stream (:data:`PROLOGUE`, called by :data:`NORM_CALL`),
and the ``stream`` variant's reduction of the sums of squares its K lanes gathered (:data:`STREAM_INV`).
The GEMV path (:mod:`core.workloads.w4a16.cuda`) and both tensor-core paths (:mod:`cuda_mma`,
:mod:`cuda_mma_w`) use them.
"""
from __future__ import annotations


def entry(norm: str | None, call_first: bool = True) -> str:
    """The kernel's name and parameters; with a fused RMSNorm applied at load, its rows' 1 / rms
    first (applied at the store, it is computed after the weights have streamed). ``call_first``
    False leaves :data:`NORM_CALL` to the caller, who places it after the first loads are issued."""
    if not norm:
        return """abebot_w4a16(const T *__restrict__ x, const int *__restrict__ qw, const T *__restrict__ sc, const unsigned char *__restrict__ zp,
             T *__restrict__ y, int M, int N, int G) {
    const T *gm = nullptr;
    const float *inv = nullptr;"""
    return """abebot_rmsnorm_w4a16(const T *__restrict__ x, const T *__restrict__ gm, const int *__restrict__ qw,
                     const T *__restrict__ sc, T *__restrict__ y, int M, int N, int G, float eps) {
    const unsigned char *zp = nullptr;
    __shared__ float inv[MT];""" + (NORM_CALL if norm == "load" and call_first else "")


NORM_CALL = """
    block_inv(x, M, (long long)G * 128, blockIdx.y * MT, eps, inv);"""

# ``stream``: the K lanes summed x^2 of their K slices as x streamed in (x is read once either way);
# column thread 0's lanes cover K once, so adding theirs up, as the sums are, gives each row's.
STREAM_INV = """
    {
#pragma unroll
        for (int a = 0; a < MT; ++a)
#pragma unroll
            for (int off = TC; off < 32; off <<= 1) ssq[a] += __shfl_xor_sync(0xffffffffu, ssq[a], off);
        __shared__ float ssr[NG][MT];
        if (tc == 0 && ks % KL == 0)
#pragma unroll
            for (int a = 0; a < MT; ++a) ssr[ks / KL][a] = ssq[a];
        __syncthreads();
        if (threadIdx.x < MT) {
            float t = 0.f;
            for (int l = 0; l < NG; ++l) t += ssr[l][threadIdx.x];
            inv[threadIdx.x] = rsqrtf(t / (float)(G * 128) + eps);
        }
        __syncthreads();
    }"""


# Every block recomputes its rows' 1 / sqrt(mean(x^2) + eps) from x (tiny, from L2): that is the
# fusion -- the normalised row is never written out. Warp shuffles, then one float per warp.
PROLOGUE = """
static __device__ __forceinline__ void block_inv(const T *__restrict__ x, int M, long long K, int m0, float eps, float *inv) {
    __shared__ float ssw[THREADS / 32][MT];
    float ss[MT] = {};
    if (M - m0 == 1) {  // decoding's single row: 4 loads in flight a thread, not 1 (the latency is the cost)
#pragma unroll 4
        for (long long k = threadIdx.x * 8; k < K; k += THREADS * 8) {
            float v[8];
            load_raw8(x + m0 * K + k, v);
#pragma unroll
            for (int i = 0; i < 8; ++i) ss[0] = fmaf(v[i], v[i], ss[0]);
        }
    } else {
        for (long long k = threadIdx.x * 8; k < K; k += THREADS * 8) {
#pragma unroll
            for (int a = 0; a < MT; ++a) {
                if (m0 + a >= M) continue;
                float v[8];
                load_raw8(x + (m0 + a) * K + k, v);
#pragma unroll
                for (int i = 0; i < 8; ++i) ss[a] = fmaf(v[i], v[i], ss[a]);
            }
        }
    }
#pragma unroll
    for (int a = 0; a < MT; ++a) {
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) ss[a] += __shfl_xor_sync(0xffffffffu, ss[a], o);
        if (threadIdx.x % 32 == 0) ssw[threadIdx.x / 32][a] = ss[a];
    }
    __syncthreads();
    if (threadIdx.x < MT) {
        float t = 0.f;
        for (int w = 0; w < THREADS / 32; ++w) t += ssw[w][threadIdx.x];
        inv[threadIdx.x] = rsqrtf(t / (float)K + eps);
    }
    __syncthreads();
}
"""
