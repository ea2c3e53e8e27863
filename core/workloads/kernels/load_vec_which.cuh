/* load_vec<V, WHICH>(p, o): V elements of T at p -> V floats o[] through one 2/4/8/16-byte load,
 * with the cache hint of operand WHICH (0 or 1) of the including kernel. Expects ELT, T and to_f
 * (convert.cuh). Slots:
 *   {{ld_0}} {{ld_1}}  access_ld.cuh with operand 0's / operand 1's cache hint
 */

template <int V, int WHICH> static __device__ __forceinline__ void load_vec(const T *p, float *o) {
    constexpr int BYTES = V * ELT;
    unsigned w[BYTES >= 4 ? BYTES / 4 : 1];
    if constexpr (WHICH == 0) {
{{ld_0}}
    } else {
{{ld_1}}
    }
    if constexpr (BYTES == 2) o[0] = to_f((T)w[0]);
    else {
#include "words_to_floats.cuh"
    }
}
