/* Fault: a correct product that also writes the element just after C (C[M*N]). */

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++) acc += A[(long)i * K + p] * B[(long)p * N + j];
            C[(long)i * N + j] = acc;
        }
    C[(long)M * N] = 0.0f;
}
