/* RMSNorm row cache (register_allocation.regs.row = reread): the row waits for its norm
 * nowhere: x (or the residual written back) is read from global a second time.
 * KEEP(r, it, e, v) stores element e of vector it of row r, FETCH(r, it, c, xv) gets a vector
 * back; row_norm.cuh's {{keep_fetch}}, #undef'd after row_norm.
 */

#define KEEP(r, it, e, v) (void)0
#define FETCH(r, it, c, xv) if (HAS_RES) load_vec<V, false>(res + ro + (c), xv); else load_vec<V>(x + ro + (c), xv)
