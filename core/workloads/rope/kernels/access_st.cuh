/* RoPE: the PTX of one 2/4/8/16-byte global store of the words w[] to p, BYTES bytes
 * (rope.cu's {{st}}). Slot {{hint}}: the cache hint.
 */

        if constexpr (BYTES == 2) asm volatile("st.global{{hint}}.u16 [%0], %1;" :: "l"(p), "h"((unsigned short)w[0]) : "memory");
        else if constexpr (BYTES == 16) asm volatile("st.global{{hint}}.v4.u32 [%0], {%1,%2,%3,%4};" :: "l"(p), "r"(w[0]), "r"(w[1]), "r"(w[2]), "r"(w[3]) : "memory");
        else if constexpr (BYTES == 8) asm volatile("st.global{{hint}}.v2.u32 [%0], {%1,%2};" :: "l"(p), "r"(w[0]), "r"(w[1]) : "memory");
        else asm volatile("st.global{{hint}}.u32 [%0], %1;" :: "l"(p), "r"(w[0]) : "memory");
