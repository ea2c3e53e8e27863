/* SiLU-and-multiply step MUL of span_run, for all ITEMS vectors of a step
 * (silu_mul.cu's {{steps}}, in the genome's instruction_sequence.body order, one line apart).
 * Uses span_run's locals gv, uv, base, span, n, SV and ITEMS, V.
 */

#pragma unroll
        for (int it = 0; it < ITEMS; ++it)
#pragma unroll
            for (int e = 0; e < V; ++e) uv[it][e] *= gv[it][e];
