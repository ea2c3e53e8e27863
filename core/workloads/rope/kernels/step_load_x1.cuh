/* RoPE step LOAD_X1 of a work-item step, for all ITEMS items (rope.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses token_run's locals a, b, c, s,
 * xp, j, ok, and ITEMS, V, H.
 */

#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) load_vec<V, 0>(xp[i] + j[i], a[i]);
