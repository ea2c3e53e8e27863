/* RoPE load_cs body reading cos/sin straight from the global cache (rope.cu's {{cs_from}}):
 * V cos and V sin values of column j through load_vec's cos/sin hint. Uses V.
 */

    load_vec<V, 1>(cs + j, c);
    load_vec<V, 1>(cs + H + j, s);
