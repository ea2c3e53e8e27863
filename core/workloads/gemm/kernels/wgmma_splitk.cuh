/* Split-K's reduction for kernels/wgmma.cu, included there when SPLIT_K > 1 (the genome's
 * parallel_config.split_k). A tile's K is cut into SPLIT_K slices, each a work unit of its own; every
 * consumer warpgroup of a unit leaves its fp32 partial in the workspace and counts itself on the
 * tile's counter, and the one that counts last adds the SPLIT_K partials and stores C.
 *
 * Workspace `ws`: one slot of 128 threads x ACC_F floats per (CTA tile, consumer warpgroup, slice),
 * slot ((tile * CONSUMERS + wg) * SPLIT_K + slice); within a slot, chunk c (4 accumulators) of
 * thread t at floats (c * 128 + t) * 4, so each warp's store or load of a chunk is 512 contiguous
 * bytes. The layout is the accumulator fragment's own: the warpgroup that adds the partials holds
 * the same fragment, so no element changes thread. Counters `sems`: one int per (CTA tile, consumer
 * warpgroup), zero before a launch; the last warpgroup to count sets it back to zero.
 *
 * Order and determinism: the partials are added in slice order 0..SPLIT_K-1, all read back from the
 * workspace (the last slice's own included), so the sum's rounding does not depend on which slice
 * finished last. Nothing waits on another unit, so no launch order or residency can deadlock it.
 * Memory order: each thread fences its stores (fence.acq_rel.gpu) before the warpgroup's barrier;
 * one thread counts with an acq_rel atomic; the verdict is broadcast by bar.red; the last one fences
 * again and reads with ld.global.cg (L2, where the other SMs' stores are).
 *
 * Expects the #defines of wgmma.cu (MI, BN, CONSUMERS, SPLIT_K).
 */

#define ACC_F (MI * BN / 2)  // accumulators of one consumer thread

struct F4 { float x, y, z, w; };

static __device__ __forceinline__ void zero_acc(float (&acc)[MI][BN / 2]) {
#pragma unroll
    for (int i = 0; i < MI; ++i)
#pragma unroll
        for (int j = 0; j < BN / 2; ++j) acc[i][j] = 0.f;
}
static __device__ __forceinline__ void st_cg4(float *p, float a, float b, float c, float d) {
    asm volatile("st.global.cg.v4.f32 [%0], {%1, %2, %3, %4};" :: "l"(p), "f"(a), "f"(b), "f"(c), "f"(d) : "memory");
}
static __device__ __forceinline__ F4 ld_cg4(const float *p) {
    F4 v;
    asm volatile("ld.global.cg.v4.f32 {%0, %1, %2, %3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "l"(p)
                 : "memory");
    return v;
}
static __device__ __forceinline__ void fence_gpu() { asm volatile("fence.acq_rel.gpu;" ::: "memory"); }

// Leaves this warpgroup's partial in the workspace and counts it. True when it counted last: `acc`
// then holds the sum of the tile's SPLIT_K partials (slice order) and the caller stores C; false
// otherwise (another warpgroup will). `slot` is the (CTA tile, warpgroup) index, `ks` the slice.
static __device__ __forceinline__ bool split_reduce(float (&acc)[MI][BN / 2], float *ws, int *sems, int slot, int ks,
                                                    int wg) {
    const int tid = threadIdx.x & 127;
    const float *base = ws + (long long)slot * SPLIT_K * (128 * ACC_F) + tid * 4;
    float *mine = ws + ((long long)slot * SPLIT_K + ks) * (128 * ACC_F) + tid * 4;
#pragma unroll
    for (int c = 0; c < ACC_F / 4; ++c) {
        const int i = c / (BN / 8), j = (c % (BN / 8)) * 4;
        st_cg4(mine + c * 512, acc[i][j], acc[i][j + 1], acc[i][j + 2], acc[i][j + 3]);
    }
    fence_gpu();  // this thread's partial is visible at GPU scope ...
    asm volatile("bar.sync %0, 128;" :: "r"(1 + wg) : "memory");  // ... and the warpgroup's, before it counts
    unsigned last = 0;
    if (tid == 0) {
        unsigned before;
        asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], 1;" : "=r"(before) : "l"(sems + slot) : "memory");
        last = before == SPLIT_K - 1;
        if (last) asm volatile("st.relaxed.gpu.global.u32 [%0], 0;" :: "l"(sems + slot) : "memory");  // next launch
    }
    asm volatile("{\n\t.reg .pred p, q;\n\tsetp.ne.u32 q, %1, 0;\n\tbar.red.or.pred p, %2, 128, q;\n\t"
                 "selp.u32 %0, 1, 0, p;\n}" : "=r"(last) : "r"(last), "r"(1 + wg) : "memory");
    if (!last) return false;
    fence_gpu();  // the other slices' partials (counted before this one) are read after the count
    // acc = p0, then acc += p1, ..., p(SPLIT_K-1): the own partial is read back too, so acc is free scratch.
    // One slice a pass (not unrolled), so the loads in flight are at most one partial's, not SPLIT_K's.
#pragma unroll
    for (int c = 0; c < ACC_F / 4; ++c) {
        const F4 p = ld_cg4(base + c * 512);
        const int i = c / (BN / 8), j = (c % (BN / 8)) * 4;
        acc[i][j] = p.x; acc[i][j + 1] = p.y; acc[i][j + 2] = p.z; acc[i][j + 3] = p.w;
    }
#pragma unroll 1
    for (int s = 1; s < SPLIT_K; ++s) {
        const float *part = base + (long long)s * (128 * ACC_F);
#pragma unroll
        for (int c = 0; c < ACC_F / 4; ++c) {
            const F4 p = ld_cg4(part + c * 512);
            const int i = c / (BN / 8), j = (c % (BN / 8)) * 4;
            acc[i][j] += p.x; acc[i][j + 1] += p.y; acc[i][j + 2] += p.z; acc[i][j + 3] += p.w;
        }
    }
    return true;
}
