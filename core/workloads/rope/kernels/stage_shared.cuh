/* RoPE: the token's cos and sin staged into shared memory as floats, at the top of token_run
 * (memory_pattern.cs_stage = shared; rope.cu's {{stage}}, whole lines with their line breaks).
 * Uses THREADS.
 */

    // stage the token's cos and sin as floats (the previous token's readers are done)
    __syncthreads();
    for (int e = threadIdx.x; e < 2 * H; e += THREADS) { float f[1]; load_vec<1, 1>(cs + e, f); scs[e] = f[0]; }
    __syncthreads();
