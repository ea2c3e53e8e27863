/* GEMM main-loop step MATH: multiply the ring slot of tile kt into the accumulators
 * (compute_tile of mma.cuh or ffma.cuh). One line of gemm.cu's {{body}}.
 */

compute_tile(sA + (kt % STAGES) * A_STAGE, sB + (kt % STAGES) * B_STAGE, acc);
