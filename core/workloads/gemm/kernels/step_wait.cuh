/* GEMM main-loop step WAIT with cp.async copies: wait until the tile kt has landed, then a
 * barrier so every thread sees it. One line of gemm.cu's {{body}}.
 * Slot: {{pending}}  cp.async groups that may stay in flight (STAGES - 1 or STAGES - 2: whether
 * this iteration's LOAD was issued before the wait).
 * (With synchronous copies WAIT is a bare barrier: step_sync.cuh.)
 */

cp_wait<{{pending}}>(); __syncthreads();
