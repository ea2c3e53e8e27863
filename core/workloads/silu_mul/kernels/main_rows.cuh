/* SiLU-and-multiply kernel body over row groups (a block per group of ROWS_PER_BLOCK rows, or a
 * persistent grid; silu_mul.cu's {{main}}): each row a span over the block's threads.
 * Slot {{loop}}: the loop head over this block's groups (one group, or a persistent grid's share).
 */

    // rows start on the vector grid only when hidden is a multiple of VEC: else the scalar twin runs
    const bool vec_ok = hidden % VEC == 0 && aligned(gate, up, out);
    {{loop}} {
        for (int i = 0; i < ROWS_PER_BLOCK; ++i) {
            const long long row = (long long)rb * ROWS_PER_BLOCK + i;
            if (row >= tokens) break;
            const long long o = row * hidden;
            if (vec_ok) span_run<VEC>(gate + o, up + o, out + o, hidden, threadIdx.x, THREADS);
            else span_run<1>(gate + o, up + o, out + o, hidden, threadIdx.x, THREADS);
        }
    }
