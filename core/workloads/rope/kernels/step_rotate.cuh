/* RoPE step ROTATE of a work-item step, for all ITEMS items (rope.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses token_run's locals a, b, c, s,
 * xp, j, ok, and ITEMS, V, H.
 */

#pragma unroll
        for (int i = 0; i < ITEMS; ++i)
#pragma unroll
            for (int e = 0; e < V; ++e) {
                const float x1 = a[i][e], x2 = b[i][e];
                a[i][e] = x1 * c[i][e] - x2 * s[i][e];
                b[i][e] = x2 * c[i][e] + x1 * s[i][e];
            }
