/* Where word (kw, c) and scale (grp, c) are with layout = gptq (gemv.cu's {{layout}}): GPTQ's rows
 * of N. Uses N.
 */
#define WORD(kw, c) ((long long)(kw) * N + (c))
#define SCALE(grp, c) ((long long)(grp) * N + (c))
