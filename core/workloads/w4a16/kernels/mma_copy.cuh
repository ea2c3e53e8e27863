/* The double-buffered mma kernel's chunk end (part of mma.cu's {{bottom}}): the next chunk's
 * words, loaded before this chunk's math, become this chunk's. Uses B, NB4.
 */
#pragma unroll
        for (int u = 0; u < B; ++u)
#pragma unroll
            for (int i = 0; i < NB4; ++i) w[u][i] = nxt[u][i];
