/* SiLU-and-multiply kernel body of the flat grid (parallel_config.schedule = flat;
 * silu_mul.cu's {{main}}): the tokens * hidden elements as one span over all threads of the grid.
 */

    const long long n = (long long)tokens * hidden;
    const long long tid = (long long)blockIdx.x * THREADS + threadIdx.x, nthreads = (long long)gridDim.x * THREADS;
    if (aligned(gate, up, out)) {
        const long long nv = n - n % VEC;  // the vector part; the last n % VEC elements run scalar
        span_run<VEC>(gate, up, out, nv, tid, nthreads);
        span_run<1>(gate + nv, up + nv, out + nv, n - nv, tid, nthreads);
    } else {
        span_run<1>(gate, up, out, n, tid, nthreads);
    }
