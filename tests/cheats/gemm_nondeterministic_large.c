/* Fault: nondeterministic beyond tolerance -- every other call adds 1.0 to one output. */

static unsigned long calls;

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            float acc = 0.0f;
            for (int p = 0; p < K; p++) acc += A[(long)i * K + p] * B[(long)p * N + j];
            C[(long)i * N + j] = acc;
        }
    if (calls++ % 2)
        C[((long)M / 2) * N + N / 2] += 1.0f;
}
