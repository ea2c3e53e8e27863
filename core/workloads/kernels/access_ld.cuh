/* The PTX of one 2/4/8/16-byte global load of BYTES bytes at p into the words w[] (a 2-byte load
 * into w[0]): load_vec_which.cuh's {{ld_0}} and {{ld_1}}, filled by the renderer (gather_gemv,
 * rope). Slot {{hint}}: the cache hint ("", ".nc", ".cs", ".L1::no_allocate", ...).
 */

        if constexpr (BYTES == 2) { unsigned short h; asm volatile("ld.global{{hint}}.u16 %0, [%1];" : "=h"(h) : "l"(p)); w[0] = h; }
        else if constexpr (BYTES == 16) asm volatile("ld.global{{hint}}.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(w[0]), "=r"(w[1]), "=r"(w[2]), "=r"(w[3]) : "l"(p));
        else if constexpr (BYTES == 8) asm volatile("ld.global{{hint}}.v2.u32 {%0,%1}, [%2];" : "=r"(w[0]), "=r"(w[1]) : "l"(p));
        else asm volatile("ld.global{{hint}}.u32 %0, [%1];" : "=r"(w[0]) : "l"(p));
