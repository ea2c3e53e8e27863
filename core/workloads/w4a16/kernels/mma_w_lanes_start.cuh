/* The weights-as-A kernel's cp.async ring (stages > 0, copy = lanes), before the step loop
 * (mma_w.cu's {{ring_start}}): the first S steps of every lane's words and x rows. Uses S.
 */
    extern __shared__ uint4 ring[];
    int slot = 0;
#pragma unroll
    for (int r = 0; r < S; ++r) ring_issue(ring, r, wp, wstride, xp, ok, r, steps);
