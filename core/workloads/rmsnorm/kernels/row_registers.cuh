/* RMSNorm row cache (register_allocation.regs.row = registers): the row waits for its norm
 * in registers (one read of x); row_norm.cuh's {{row_cache}} declares `row`.
 * KEEP(r, it, e, v) stores element e of vector it of row r, FETCH(r, it, c, xv) gets a vector
 * back; row_norm.cuh's {{keep_fetch}}, #undef'd after row_norm.
 */

#define KEEP(r, it, e, v) row[r][it][e] = (v)
#define FETCH(r, it, c, xv) for (int e = 0; e < V; ++e) xv[e] = row[r][it][e]
