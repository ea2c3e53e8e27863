/* SiLU-and-multiply step LOAD_GATE of span_run, for all ITEMS vectors of a step
 * (silu_mul.cu's {{steps}}, in the genome's instruction_sequence.body order, one line apart).
 * Uses span_run's locals gv, uv, base, span, n, SV and ITEMS, V.
 */

#pragma unroll
        for (int it = 0; it < ITEMS; ++it) if (base + it * span < n) load_vec<V>(g + base + it * span, gv[it]);
