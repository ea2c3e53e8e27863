/* The device functions of both tensor-core W4A16 kernels (mma.cu, mma_w.cu; their {{helpers}}):
 * 16-bit conversions, the pair arithmetic, mma, the x loads, cp.async and the lop3 dequantisation
 * dq. Slots: to_f / from_f (conversion bodies, ../../kernels/convert.cuh), cvt2 (the float pair conversion), mma_t (bf16 or
 * f16), one (the pair (1, 1)), x_ld (the x load with its cache hint), magic (lop3's exponent).
 */
#include "../../kernels/convert.cuh"
static __device__ __forceinline__ unsigned pack2(float lo, float hi) {
    unsigned r; asm("{{cvt2}} %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo)); return r; }
static __device__ __forceinline__ unsigned lop3_and_or(unsigned a, unsigned b, unsigned c) {
    unsigned r; asm("lop3.b32 %0, %1, %2, %3, 0xEA;" : "=r"(r) : "r"(a), "r"(b), "r"(c)); return r; }
// a - b as (-b) * 1 + a, and a * b as a * b + (-0): fma.{{mma_t}}x2 exists since sm_80
static __device__ __forceinline__ unsigned sub2(unsigned a, unsigned b) {
    unsigned r; asm("fma.rn.{{mma_t}}x2 %0, %1, %2, %3;" : "=r"(r) : "r"(b ^ 0x80008000u), "r"({{one}}), "r"(a)); return r; }
static __device__ __forceinline__ unsigned mul2(unsigned a, unsigned b) {
    unsigned r; asm("fma.rn.{{mma_t}}x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(0x80008000u)); return r; }
static __device__ __forceinline__ void mma(float *d, const unsigned *a, unsigned b0, unsigned b1) {
    asm("mma.sync.aligned.m16n8k16.row.col.f32.{{mma_t}}.{{mma_t}}.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1)); }
// 8 adjacent x values of one row as 4 pairs (0 past M); with a fused RMSNorm, times gamma and a scale
static __device__ __forceinline__ unsigned times(unsigned u, unsigned gv, float scale) {
    return pack2(to_f((T)(u & 0xffffu)) * to_f((T)(gv & 0xffffu)) * scale, to_f((T)(u >> 16)) * to_f((T)(gv >> 16)) * scale);
}
static __device__ __forceinline__ uint4 x_row8(const T *p, const T *gp, float scale, bool ok) {
    uint4 u = make_uint4(0u, 0u, 0u, 0u);
    if (!ok) return u;
    {{x_ld}}
    if (!gp) return u;
    const uint4 gv = *(const uint4 *)gp;
    return make_uint4(times(u.x, gv.x, scale), times(u.y, gv.y, scale), times(u.z, gv.z, scale), times(u.w, gv.w, scale));
}
// 16 bytes global -> shared without registers (L1 bypassed), and the wait for all but the n newest groups
static __device__ __forceinline__ void cp_async16(void *dst, const void *src, bool ok = true) {  // zeros if !ok
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;"
                 :: "r"((unsigned)__cvta_generic_to_shared(dst)), "l"(src), "r"(ok ? 16 : 0));
}
template <int n> static __device__ __forceinline__ void cp_async_wait() {
    asm volatile("cp.async.wait_group %0;" :: "n"(n) : "memory");
}
// values (lo, hi) of pair p of a word, minus (magic + z)
static __device__ __forceinline__ unsigned dq(unsigned w, int p, unsigned c2) {
    return sub2(lop3_and_or(w >> (4 * p), 0x000F000Fu, {{magic}}), c2);
}