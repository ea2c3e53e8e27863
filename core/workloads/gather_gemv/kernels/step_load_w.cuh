/* Gathered GEMV step LOAD_W of dot_span's loop (gather_gemv.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses dot_span's hr, wr, k, stride,
 * K, acc, hv, wv and ROWS, V.
 */

        float wv[ROWS][V];
#pragma unroll
        for (int r = 0; r < ROWS; ++r) load_vec<V, 1>(wr[r] + k, wv[r]);
