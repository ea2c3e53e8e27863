/* load_raw8 of the GEMV and fused-norm kernels (gemv.cu's {{load_raw8}}, the tensor-core paths'
 * norm prologue): the 8 values of one word's rows of K as floats. Slot: load (cuda.py's _load, the
 * 16-byte load of p + h * 16 / ELT into u with the x loads' cache hint). Uses T, ELT, to_f.
 */
// 8 values of one word's rows of K as floats (16 bytes for 16-bit types, twice that for float)
static __device__ __forceinline__ void load_raw8(const T *p, float *o) {
    constexpr int BYTES = 16;
#pragma unroll
    for (int h = 0; h < 8 * ELT / 16; ++h) {
        unsigned u[4];
{{load}}
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            if constexpr (ELT == 4) o[h * 4 + i] = __uint_as_float(u[i]);
            else { o[2 * i] = to_f((T)(u[i] & 0xffffu)); o[2 * i + 1] = to_f((T)(u[i] >> 16)); }
        }
    }
}
