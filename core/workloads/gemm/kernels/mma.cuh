/* GEMM math on the tensor cores (register_allocation.regs.math = mma): fragments taken from
 * shared memory with ldmatrix, multiplied with mma.sync m16n8k16 into fp32 accumulators.
 * gemm.cu's {{mma}} (under #if USE_MMA): defines Acc, init_acc, compute_tile and store_c.
 * Uses BK, WARPS_N, WTM, WTN and the A_IDX / B_IDX shared tile indexing of gemm.cu.
 * Slots:
 *   {{unroll}}  the k loop's #pragma unroll (full, 1 or 2)
 *   {{mma_t}}   the mma.sync operand type: bf16 or f16
 */

#define MI (WTM / 16)
#define NI (WTN / 8)
typedef float Acc[MI][NI][4];
static __device__ __forceinline__ void init_acc(Acc &acc) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < NI; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) acc[i][j][e] = 0.f;
}
static __device__ __forceinline__ void compute_tile(const T *a, const T *b, Acc &acc) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
    {{unroll}}
    for (int kk = 0; kk < BK; kk += 16) {
        unsigned af[MI][4], bfr[NI][2];
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
            int row = wm * WTM + mi * 16 + (lane % 16), col = kk + (lane / 16) * 8;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(af[mi][0]), "=r"(af[mi][1]), "=r"(af[mi][2]), "=r"(af[mi][3]) : "r"(smem_u32(a + A_IDX(row, col))));
        }
#pragma unroll
        for (int ni = 0; ni < NI; ni += 2) {
            int row = kk + (lane % 8) + ((lane / 8) % 2) * 8, col = wn * WTN + ni * 8 + (lane / 16) * 8;
            asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                         : "=r"(bfr[ni][0]), "=r"(bfr[ni][1]), "=r"(bfr[ni + 1][0]), "=r"(bfr[ni + 1][1]) : "r"(smem_u32(b + B_IDX(row, col))));
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi)
#pragma unroll
            for (int ni = 0; ni < NI; ++ni)
                asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.{{mma_t}}.{{mma_t}}.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                             : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
                             : "r"(af[mi][0]), "r"(af[mi][1]), "r"(af[mi][2]), "r"(af[mi][3]), "r"(bfr[ni][0]), "r"(bfr[ni][1]));
    }
}
static __device__ __forceinline__ void store_c(T *C, Acc &acc, int m0, int n0, int M, int N) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int wm = warp / WARPS_N, wn = warp % WARPS_N;
#pragma unroll
    for (int mi = 0; mi < MI; ++mi)
#pragma unroll
        for (int ni = 0; ni < NI; ++ni)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int row = m0 + wm * WTM + mi * 16 + lane / 4 + h * 8, col = n0 + wn * WTN + ni * 8 + (lane % 4) * 2;
                if (row >= M) continue;
                T *dst = C + (long long)row * N + col;
                if (col + 1 < N && (N % 2) == 0 && sizeof(T) == 2) {
                    unsigned lo = from_f(acc[mi][ni][2 * h]), hi = from_f(acc[mi][ni][2 * h + 1]);
                    *(unsigned *)dst = lo | (hi << 16);
                } else {
                    if (col < N) dst[0] = from_f(acc[mi][ni][2 * h]);
                    if (col + 1 < N) dst[1] = from_f(acc[mi][ni][2 * h + 1]);
                }
            }
}
