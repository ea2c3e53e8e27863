/* The cp.async ring's step top (mma_w.cu's {{step_top}}): wait for this step's slot, read this
 * lane's words (wc) and x rows (xc) back. Uses S, VEC, TH, THREADS.
 */
            cp_async_wait<S - 1>();
            uint4 wc[VEC], xc[TH];
#pragma unroll
            for (int i = 0; i < VEC + TH; ++i) (i < VEC ? wc[i] : xc[i - VEC]) = ring[(slot * (VEC + TH) + i) * THREADS + threadIdx.x];
