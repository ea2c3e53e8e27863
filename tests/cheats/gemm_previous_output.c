/* Cheat: reads another buffer's result -- keeps a pointer to the previous call's output and, when
 * the next call has the same sizes but another output buffer (the next case of a rotation), copies
 * the previous answer instead of computing. */
#include <string.h>

static const float *prev;
static int pm, pn, pk;

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    if (prev && prev != C && pm == M && pn == N && pk == K) {
        memcpy(C, prev, sizeof(float) * (size_t)M * N);
    } else {
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                float acc = 0.0f;
                for (int p = 0; p < K; p++) acc += A[(long)i * K + p] * B[(long)p * N + j];
                C[(long)i * N + j] = acc;
            }
    }
    prev = C; pm = M; pn = N; pk = K;
}
