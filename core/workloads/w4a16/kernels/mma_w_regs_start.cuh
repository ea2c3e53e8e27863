/* The weights-as-A kernel's ring in registers (stages = 0), before the step loop (mma_w.cu's
 * {{ring_start}}): D steps of words and DX of x in flight; the loop over a group's steps is
 * unrolled, so a step's slot is a constant.
 */
    uint4 w[D][VEC], xv[DX][TH];
#pragma unroll
    for (int u = 0; u < D; ++u)
        if (u < steps) load_words(w[u], wp, wstride, u);
#pragma unroll
    for (int u = 0; u < DX; ++u)
        if (u < steps) load_x(xv[u], xp, ok, u);
