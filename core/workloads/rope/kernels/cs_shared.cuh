/* RoPE load_cs body with cos/sin staged in shared memory (memory_pattern.cs_stage = shared;
 * rope.cu's {{cs_from}}): V cos and V sin floats of column j from scs. Uses V.
 */

    // from shared memory (volatile, so the genome's order of the loads holds)
    const unsigned a = (unsigned)__cvta_generic_to_shared(scs + j);
#pragma unroll
    for (int e = 0; e < V; ++e) {
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(c[e]) : "r"(a + 4 * e));
        asm volatile("ld.shared.f32 %0, [%1];" : "=f"(s[e]) : "r"(a + 4 * (H + e)));
    }
