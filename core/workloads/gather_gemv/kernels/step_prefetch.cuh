/* Gathered GEMV step PREFETCH of dot_span's loop (gather_gemv.cu's {{steps}}, in the
 * genome's instruction_sequence.body order, one line apart). Uses dot_span's hr, wr, k, stride,
 * K, acc, hv, wv and ROWS, V.
 */

#pragma unroll
        for (int r = 0; r < ROWS; ++r) if (k + stride < K) asm volatile("prefetch.global.L2 [%0];" :: "l"(wr[r] + k + stride));
