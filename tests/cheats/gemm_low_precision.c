/* Cheat: computes in a lower precision than the dtype -- the float32 inputs are cut to bfloat16
 * (the low 16 bits of each float dropped), then accumulated in float. */

static inline float bf16(float x) {
    union { float f; unsigned u; } v = { x };
    v.u &= 0xFFFF0000u;
    return v.f;
}

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++) acc += bf16(A[(long)i * K + p]) * bf16(B[(long)p * N + j]);
            C[(long)i * N + j] = acc;
        }
}
