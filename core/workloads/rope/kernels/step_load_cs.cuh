/* RoPE step LOAD_CS of a work-item step, for all ITEMS items (rope.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses token_run's locals a, b, c, s,
 * xp, j, ok, and ITEMS, V, H.
 */

#pragma unroll
        for (int i = 0; i < ITEMS; ++i) if (ok[i]) load_cs<V>(cs, scs, H, j[i], c[i], s[i]);
