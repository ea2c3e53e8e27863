/* The weights-as-A kernel's (magic + z) pairs without zero points (mma_w.cu's {{c2_decl}}): z = 8
 * everywhere, set once. Slot: base8 (the magic's value plus 8).
 */
    const unsigned c2v = pack2({{base8}}.f, {{base8}}.f); unsigned c2[NC][2];
#pragma unroll
    for (int c = 0; c < NC; ++c) c2[c][0] = c2[c][1] = c2v;
