/* The weights-as-A kernel's (magic + z) pairs with zero points (mma_w.cu's {{c2_decl}}): filled
 * at each group's start by mma_w_zero.cuh.
 */
    unsigned c2[NC][2];
