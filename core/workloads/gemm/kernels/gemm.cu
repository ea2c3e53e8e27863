/* GEMM C = A @ B in CUDA C (row-major A: M x K, B: K x N, C: M x N), header-free, bounds-safe for
 * any M, N, K: the frame that core/workloads/gemm/cuda.py fills.
 *
 * Each block computes a BM x BN tile of C (blocks rasterised in groups of GROUP_M tile rows for
 * L2 reuse), streaming BK-deep tiles of A and B through a STAGES-deep shared-memory ring,
 * copied with cp.async (COPY_ASYNC) or loads through registers.
 *
 * Rendered behind `typedef <scalar> T;` and the genome's #defines: BM, BN, BK, WARPS_M,
 * WARPS_N, THREADS, GROUP_M, MIN_BLOCKS, VEC, STAGES, COPY_ASYNC, SWIZZLE, LDA, LDB, CH, NCH_A,
 * NCH_B, A_STAGE, B_STAGE, WTM, WTN, USE_MMA, LM, LN, TM, TN, STRIDED.
 * Slots:
 *   {{to_f}} {{from_f}}  bodies converting T <-> float (../../kernels/convert.cuh)
 *   {{cp_cache}}         cp.async cache level: cg (16-byte copies, L2 only) or ca
 *   {{elt}}              bytes of T (picks the width of a synchronous vector copy)
 *   {{mma}} {{ffma}}     the math paths: mma.cuh and ffma.cuh, filled (USE_MMA picks one)
 *   {{body}}             the main loop's statements in the genome's order: step_*.cuh
 */

#include "../../kernels/convert.cuh"

// element (r, c) of a shared tile with leading dimension LD: padded rows or XOR-swizzled 16-byte chunks
#if SWIZZLE
#define A_IDX(r, c) ((r) * LDA + ((((c) / CH) ^ ((r) % NCH_A)) * CH) + ((c) % CH))
#define B_IDX(r, c) ((r) * LDB + ((((c) / CH) ^ ((r) % NCH_B)) * CH) + ((c) % CH))
#else
#define A_IDX(r, c) ((r) * LDA + (c))
#define B_IDX(r, c) ((r) * LDB + (c))
#endif

static __device__ __forceinline__ unsigned smem_u32(const void *p) {
    unsigned a; asm("{ .reg .u64 t; cvta.to.shared.u64 t, %1; cvt.u32.u64 %0, t; }" : "=r"(a) : "l"(p)); return a;
}
static __device__ __forceinline__ void cp_commit() {
#if COPY_ASYNC
    asm volatile("cp.async.commit_group;\n" ::);
#endif
}
template <int N> static __device__ __forceinline__ void cp_wait() {
#if COPY_ASYNC
    asm volatile("cp.async.wait_group %0;\n" :: "n"(N < 0 ? 0 : N));
#endif
}

// one VEC-wide copy global -> shared; falls back to guarded element copies at edges / misalignment
static __device__ __forceinline__ void copy_vec(T *dst, const T *src, bool full, int valid) {
    if (full) {
#if COPY_ASYNC
        asm volatile("cp.async.{{cp_cache}}.shared.global [%0], [%1], %2;\n"
                     :: "r"(smem_u32(dst)), "l"(src), "n"(VEC * (int)sizeof(T)));
#else
#if VEC * {{elt}} == 16
        *(uint4 *)dst = __ldg((const uint4 *)src);
#elif VEC * {{elt}} == 8
        *(uint2 *)dst = __ldg((const uint2 *)src);
#elif VEC * {{elt}} == 4
        *(unsigned *)dst = __ldg((const unsigned *)src);
#else
        *dst = *src;
#endif
#endif
    } else {
#pragma unroll
        for (int e = 0; e < VEC; ++e) dst[e] = e < valid ? src[e] : from_f(0.f);
    }
}

static __device__ __forceinline__ void load_tile(const T *__restrict__ A, const T *__restrict__ B, T *sA, T *sB,
                                                 int slot, int kt, int m0, int n0, int M, int N, int K) {
    T *a = sA + slot * A_STAGE, *b = sB + slot * B_STAGE;
    const int k0 = kt * BK;
#pragma unroll
    for (int v = threadIdx.x; v < BM * BK / VEC; v += THREADS) {
        int r = v / (BK / VEC), c = (v % (BK / VEC)) * VEC;
        int gr = m0 + r, gc = k0 + c;
        int valid = gr < M ? min(VEC, K - gc) : 0;
        copy_vec(a + A_IDX(r, c), A + (long long)min(gr, M - 1) * K + min(gc, K - 1), valid == VEC && (K % VEC) == 0, valid);
    }
#pragma unroll
    for (int v = threadIdx.x; v < BK * BN / VEC; v += THREADS) {
        int r = v / (BN / VEC), c = (v % (BN / VEC)) * VEC;
        int gr = k0 + r, gc = n0 + c;
        int valid = gr < K ? min(VEC, N - gc) : 0;
        copy_vec(b + B_IDX(r, c), B + (long long)min(gr, K - 1) * N + min(gc, N - 1), valid == VEC && (N % VEC) == 0, valid);
    }
}

#if USE_MMA
{{mma}}
#else
{{ffma}}
#endif

extern "C" __global__ void __launch_bounds__(THREADS, MIN_BLOCKS)
abebot_gemm(const T *__restrict__ A, const T *__restrict__ B, T *__restrict__ C, int M, int N, int K) {
    extern __shared__ __align__(16) unsigned char smem[];
    T *sA = (T *)smem, *sB = sA + STAGES * A_STAGE;
    const int tiles_m = (M + BM - 1) / BM, tiles_n = (N + BN - 1) / BN;
    const int pid = blockIdx.x, width = GROUP_M * tiles_n, group = pid / width;
    const int first_m = group * GROUP_M, size_m = min(tiles_m - first_m, GROUP_M);
    const int m0 = (first_m + (pid % width) % size_m) * BM, n0 = ((pid % width) / size_m) * BN;
    const int KT = (K + BK - 1) / BK;
    Acc acc;
    init_acc(acc);
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < KT) load_tile(A, B, sA, sB, s, s, m0, n0, M, N, K);
        cp_commit();
    }
    for (int kt = 0; kt < KT; ++kt) {
        {{body}}
    }
    cp_wait<0>();
    store_c(C, acc, m0, n0, M, N);
}
