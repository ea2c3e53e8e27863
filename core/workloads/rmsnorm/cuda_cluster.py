"""The CUDA RMSNorm template's row split over a thread block cluster (sm_90 on,
``parallel_config.split``): the CUDA C that sums a row group's squares over the cluster's blocks
through distributed shared memory, and the kernel body that hands each block its slice.

A decode-sized row is otherwise read and written by one SM alone: at one row of 8192 columns with
its residual, the GA's fastest kernel on a cluster of 8 blocks took 1.90 us, its fastest on one
block 2.40 us (H200, benchmarks/gpu_raw/call36_rows_loads).
"""

# A row group over the SPLIT blocks of a cluster: block k takes the k-th slice (whole vectors) of
# every row; each block's totals go into every block's cred[.][k] (distributed shared memory), and
# after the cluster barrier every block sums cred[r][0..SPLIT) in the same order: the same 1 / rms
# everywhere.
CLUSTER_SUM = """__shared__ float cred[ROWS_PER_BLOCK][SPLIT];
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
}"""

CLUSTER_ROW = """    const int row0 = (int)(blockIdx.x / SPLIT) * ROWS_PER_BLOCK;  // a whole cluster per row group
    const int nrows = min(ROWS_PER_BLOCK, rows - row0);
    const long long o = (long long)row0 * cols;
    if (aligned) {
        asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");  // waited on before the first remote store
        const int slice = (cols + SPLIT * VEC - 1) / (SPLIT * VEC) * VEC;
        const int c0 = min(cols, (int)cluster_rank() * slice);
        if (FULL_FIT && cols == COLS_MAX) row_norm<VEC, FULL_FIT>(x + o + c0, w + c0, res + o + c0, out + o + c0, slice, cols, nrows, eps, red, srow);
        else row_norm<VEC, false>(x + o + c0, w + c0, res + o + c0, out + o + c0, min(slice, cols - c0), cols, nrows, eps, red, srow);
    } else if (cluster_rank() == 0) {  // no shared memory of another block
        for (int i = 0; i < nrows; ++i) row_norm_scalar(x + o + (long long)i * cols, w, res + o + (long long)i * cols, out + o + (long long)i * cols, cols, eps, red);
    }"""
