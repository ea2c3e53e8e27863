/* RMSNorm row cache (register_allocation.regs.row = smem): the row waits for its norm
 * in shared memory: srow, SLICE floats a row.
 * KEEP(r, it, e, v) stores element e of vector it of row r, FETCH(r, it, c, xv) gets a vector
 * back; row_norm.cuh's {{keep_fetch}}, #undef'd after row_norm.
 */

#define KEEP(r, it, e, v) srow[(r) * SLICE + (it * THREADS + threadIdx.x) * V + (e)] = (v)
#define FETCH(r, it, c, xv) for (int e = 0; e < V; ++e) xv[e] = srow[(r) * SLICE + (c) + e]
