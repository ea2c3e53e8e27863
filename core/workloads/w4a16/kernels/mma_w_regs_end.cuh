/* The register ring's step end (mma_w.cu's {{step_end}}): the steps D (words) and DX (x) ahead
 * into the slots this one leaves.
 */
            if (s0 + u + D < steps) load_words(w[slot], wp, wstride, s0 + u + D);
            if (s0 + u + DX < steps) load_x(xv[xs], xp, ok, s0 + u + DX);
