/* RoPE kernel body over token groups of all heads (schedule = a block per group or persistent;
 * rope.cu's {{main}}). Uses TOKENS_PER_BLOCK.
 * Slots: {{loop}} the loop head over this block's groups (one group, or a persistent grid's
 * share); {{run}} token_call.cuh.
 */

    const int h_lo = 0, h_hi = nq + nk;
    {{loop}} {
        for (int i = 0; i < TOKENS_PER_BLOCK; ++i) {
            const int t = rb * TOKENS_PER_BLOCK + i;
            if (t >= tokens) break;
{{run}}
        }
    }
