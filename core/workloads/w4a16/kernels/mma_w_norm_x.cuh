/* The fused RMSNorm's x times gamma (mma_w.cu's {{step_top}}, after the ring's part): a step's x
 * fragments multiplied by gamma, one 16-bit pair multiply each. Slot: x_at (where the step's x is).
 */
            uint4 xn[TH];
            {
                const uint4 gv = __ldg((const uint4 *)(gr + (s0 + u) * 32));
#pragma unroll
                for (int h = 0; h < TH; ++h) {
                    const uint4 &xx = {{x_at}};
                    xn[h] = make_uint4(mul2(xx.x, gv.x), mul2(xx.y, gv.y), mul2(xx.z, gv.z), mul2(xx.w, gv.w));
                }
            }
