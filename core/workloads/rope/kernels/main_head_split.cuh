/* RoPE kernel body of the 2-D grid (parallel_config.schedule = head_split; rope.cu's {{main}}):
 * block (t, y) rotates heads [y * HEADS_PER_BLOCK, ...) of token t.
 * Uses HEADS_PER_BLOCK. Slot {{run}}: token_call.cuh.
 */

    const int t = blockIdx.x;
    const int h_lo = blockIdx.y * HEADS_PER_BLOCK, h_hi = h_lo + HEADS_PER_BLOCK < nq + nk ? h_lo + HEADS_PER_BLOCK : nq + nk;
    {
{{run}}
    }
