/* RMSNorm step STORE: out = x * rstd * w, x fetched back from the row cache (FETCH).
 * One step of row_norm (row_norm.cuh's {{steps}}, in the genome's instruction_sequence.body
 * order); it covers every row of the group. Uses row_norm's locals and THREADS,
 * ROWS_PER_BLOCK, HAS_RES, the KEEP / FETCH macros of the row_*.cuh picked.
 */

    // STORE: out = x * rstd * w
#include "for_row_item.cuh"  // for r (ro), for it (c): closed below
            if ((r == 0 || r < nrows) && (FULL || c < n)) {
                float xv[V], ov[V];
                FETCH(r, it, c, xv);
#pragma unroll
                for (int e = 0; e < V; ++e) ov[e] = xv[e] * ss[r] * wv[it][e];
                store_vec_out<V>(out + ro + c, ov);
            }
        }
    }
