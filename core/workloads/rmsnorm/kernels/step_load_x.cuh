/* RMSNorm step LOAD_X: x (+ residual, written back) into the row cache, sums of squares.
 * One step of row_norm (row_norm.cuh's {{steps}}, in the genome's instruction_sequence.body
 * order); it covers every row of the group. Uses row_norm's locals and THREADS,
 * ROWS_PER_BLOCK, HAS_RES, the KEEP / FETCH macros of the row_*.cuh picked.
 */

    // LOAD_X: x (+ residual, written back) of every row of the group into the row cache; sums of
    // squares on the fly. Every load is issued before the first sum is stored: a store is ordered
    // after the loads before it, so one row (or vector) at a time would wait for memory each.
    float xs[ROWS_PER_BLOCK][ITEMS][V], rs[ROWS_PER_BLOCK][ITEMS][V];
#include "for_row_item.cuh"  // for r (ro), for it (c): closed below
            if ((r == 0 || r < nrows) && (FULL || c < n)) {
                load_vec<V>(x + ro + c, xs[r][it]);
                if (HAS_RES) load_vec<V>(res + ro + c, rs[r][it]);
            } else {
#pragma unroll
                for (int e = 0; e < V; ++e) xs[r][it][e] = rs[r][it][e] = 0.f;
            }
        }
    }
#include "for_row_item.cuh"  // for r (ro), for it (c): closed below
            if (HAS_RES) {
#pragma unroll
                for (int e = 0; e < V; ++e) xs[r][it][e] += rs[r][it][e];
                if ((r == 0 || r < nrows) && (FULL || c < n)) store_vec<V>(res + ro + c, xs[r][it]);
            }
#pragma unroll
            for (int e = 0; e < V; ++e) { ss[r] += xs[r][it][e] * xs[r][it][e]; KEEP(r, it, e, xs[r][it][e]); }
        }
    }
