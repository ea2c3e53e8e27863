/* RoPE step STORE of a work-item step, for all ITEMS items (rope.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses token_run's locals a, b, c, s,
 * xp, j, ok, and ITEMS, V, H.
 */

#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) { store_vec<V>(xp[i] + j[i], a[i]); store_vec<V>(xp[i] + H + j[i], b[i]); }
