/* GEMM main-loop step LOAD (instruction_sequence.loop): issue the copy of the tile STAGES - 1
 * ahead into its ring slot, and commit it as one cp.async group. One line of gemm.cu's {{body}};
 * uses the main loop's locals (kt, KT, m0, n0) and STAGES.
 */

{ int nt = kt + STAGES - 1; if (nt < KT) load_tile(A, B, sA, sB, nt % STAGES, nt, m0, n0, M, N, K); cp_commit(); }
