/* SiLU-and-multiply step STORE of span_run, for all ITEMS vectors of a step
 * (silu_mul.cu's {{steps}}, in the genome's instruction_sequence.body order, one line apart).
 * Uses span_run's locals gv, uv, base, span, n, SV and ITEMS, V.
 */

#pragma unroll
        for (int it = 0; it < ITEMS; ++it) if (base + it * span < n) {
#pragma unroll
            for (int k = 0; k < V; k += SV) store_vec<SV>(o + base + it * span + k, uv[it] + k);
        }
