/* Gathered GEMV step LOAD_H of dot_span's loop (gather_gemv.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses dot_span's hr, wr, k, stride,
 * K, acc, hv, wv and ROWS, V.
 */

        float hv[V]; load_vec<V, 0>(hr + k, hv);
