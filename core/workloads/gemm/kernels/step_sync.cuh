/* GEMM main-loop barrier: the SYNC step, WAIT with synchronous copies, and the barrier the
 * renderer puts before a LOAD that overwrites the slot the previous MATH read. One line of
 * gemm.cu's {{body}}.
 */

__syncthreads();
