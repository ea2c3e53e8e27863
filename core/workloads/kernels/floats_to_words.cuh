/* The floats v[] -> the words w[] of one 4/8/16-byte store: a float a word (ELT 4), or two 16-bit
 * elements a word, low half first (ELT 2); the inverse of words_to_floats.cuh. Inside a
 * store_vec's `else {`, before the store; expects BYTES, ELT, T and from_f (convert.cuh).
 */

#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {
            if constexpr (ELT == 4) w[i] = __float_as_uint(v[i]);
            else w[i] = (unsigned)(unsigned short)from_f(v[2 * i]) | ((unsigned)(unsigned short)from_f(v[2 * i + 1]) << 16);
        }
