/* The words w[] of one 4/8/16-byte load -> the floats o[]: a float a word (ELT 4), or two 16-bit
 * elements a word, low half first (ELT 2). Inside a load_vec's `else {` after `unsigned w[BYTES / 4]`
 * was loaded; expects BYTES, ELT, T and to_f (convert.cuh).
 */

#pragma unroll
        for (int i = 0; i < BYTES / 4; ++i) {
            if constexpr (ELT == 4) o[i] = __uint_as_float(w[i]);
            else { o[2 * i] = to_f((T)(w[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(w[i] >> 16)); }
        }
