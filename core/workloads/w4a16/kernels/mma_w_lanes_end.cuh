/* The cp.async ring's step end (mma_w.cu's {{step_end}}): the step S ahead into the slot this one
 * leaves.
 */
            ring_issue(ring, slot, wp, wstride, xp, ok, s0 + u + S, steps);
            slot = slot + 1 == S ? 0 : slot + 1;
