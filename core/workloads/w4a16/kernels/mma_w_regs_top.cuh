/* The register ring's step top (mma_w.cu's {{step_top}}): the slots of this step's words and x.
 */
            const int slot = u % D, xs = u % DX;
