/* RMSNorm row sums over a thread block cluster (sm_90 on, SPLIT > 1; rmsnorm.cu's {{row_sums}}).
 * Block k takes the k-th slice (whole vectors) of every row; each block's totals go into every
 * block's cred[.][k] (distributed shared memory), and after the cluster barrier every block sums
 * cred[r][0..SPLIT) in the same order: the same 1 / rms everywhere.
 * Uses ROWS_PER_BLOCK, SPLIT and block_sums.
 */

__shared__ float cred[ROWS_PER_BLOCK][SPLIT];
static __device__ __forceinline__ unsigned cluster_rank() {
    unsigned r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
template <int N> static __device__ __forceinline__ void row_sums(float (&s)[N], float *red) {
    block_sums<N>(s, red);
    // every block of the cluster has started (the arrive at its top): their shared memory exists
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    if (threadIdx.x < SPLIT) {
#pragma unroll
        for (int r = 0; r < N; ++r) {
            unsigned local = (unsigned)__cvta_generic_to_shared(&cred[r][cluster_rank()]), remote;
            asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(local), "r"((unsigned)threadIdx.x));
            asm volatile("st.shared::cluster.f32 [%0], %1;" :: "r"(remote), "f"(s[r]) : "memory");
        }
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
#pragma unroll
    for (int r = 0; r < N; ++r) {
        float t = 0.f;
#pragma unroll
        for (int k = 0; k < SPLIT; ++k) t += cred[r][k];
        s[r] = t;
    }
}
