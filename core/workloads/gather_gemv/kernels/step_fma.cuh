/* Gathered GEMV step FMA of dot_span's loop (gather_gemv.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses dot_span's hr, wr, k, stride,
 * K, acc, hv, wv and ROWS, V.
 */

#pragma unroll
        for (int r = 0; r < ROWS; ++r)
#pragma unroll
            for (int e = 0; e < V; ++e) acc[r] += hv[e] * wv[r][e];
