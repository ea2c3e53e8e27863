/* Where word (kw, c) and scale (grp, c) are with layout = strips (gemv.cu's {{layout}}): strips of
 * the block's CB columns, each KW words (G scales) long (cuda.py's strips()). Uses TC, VEC, KW, G.
 */
#define CB (TC * VEC)
#define WORD(kw, c) ((long long)((c) / CB) * KW * CB + (c) % CB + (long long)(kw) * CB)
#define SCALE(grp, c) ((long long)((c) / CB) * G * CB + (c) % CB + (long long)(grp) * CB)
