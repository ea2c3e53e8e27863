/* Nondeterministic within tolerance: every other call flips the lowest mantissa bit of C[0].
 * Correct (1 ulp is far inside float32's tolerance), but not bit-for-bit reproducible. */

static unsigned long calls;

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++) acc += A[(long)i * K + p] * B[(long)p * N + j];
            C[(long)i * N + j] = acc;
        }
    if (calls++ % 2) {
        union { float f; unsigned u; } v = { C[0] };
        v.u ^= 1u;
        C[0] = v.f;
    }
}
