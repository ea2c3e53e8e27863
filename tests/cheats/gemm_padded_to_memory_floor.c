/* Cheat: memoises by a position-weighted hash of every 16th input element (so its answers stay
 * right whichever permutation of the inputs comes back, and the hash stays cheap next to the floor
 * even on a loaded machine), and spins until SPIN_NS nanoseconds have passed, so its
 * time sits just above the memory-bandwidth floor -- a byte-only roofline would accept it; the
 * compute roofline (flops / peak FLOP/s) must not. The test defines SPIN_NS from the measured floor. */
#include <string.h>
#include <time.h>

#ifndef SPIN_NS
#define SPIN_NS 0
#endif
#define SLOTS 128
#define CAP (200 * 200)

static struct { unsigned h1, h2; int m, n, k; } key[SLOTS];
static float memo[SLOTS][CAP];
static int used, next_slot;

static long long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (long long)t.tv_sec * 1000000000LL + t.tv_nsec;
}

static void hash(const float *x, long n, unsigned *h1, unsigned *h2) {
    const unsigned *u = (const unsigned *)x;
    unsigned a = *h1, b = *h2;
    for (long i = 0; i < n; i += 16) {
        a += u[i] * (2u * (unsigned)i + 1u);
        b += (u[i] ^ (unsigned)i) * 0x9E3779B1u;
    }
    *h1 = a;
    *h2 = b;
}

static void gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    for (int i = 0; i < M; i++) {  /* i-p-j: the inner loop vectorises, so misses stay cheap */
        float *c = C + (long)i * N;
        for (int j = 0; j < N; j++) c[j] = 0.0f;
        for (int p = 0; p < K; p++) {
            const float a = A[(long)i * K + p], *b = B + (long)p * N;
            for (int j = 0; j < N; j++) c[j] += a * b[j];
        }
    }
}

void abebot_gemm(const float *A, const float *B, float *C, int M, int N, int K) {
    long long t0 = now_ns();
    unsigned h1 = 0x12345678u, h2 = 0x9abcdef0u;
    hash(A, (long)M * K, &h1, &h2);
    hash(B, (long)K * N, &h1, &h2);
    for (int s = 0; s < used; s++)
        if (key[s].h1 == h1 && key[s].h2 == h2 && key[s].m == M && key[s].n == N && key[s].k == K) {
            memcpy(C, memo[s], sizeof(float) * (size_t)M * N);
            while (now_ns() - t0 < SPIN_NS) {}
            return;
        }
    gemm(A, B, C, M, N, K);
    if ((long)M * N <= CAP) {
        int s = next_slot;
        next_slot = (next_slot + 1) % SLOTS;
        if (used < SLOTS) used++;
        key[s].h1 = h1; key[s].h2 = h2; key[s].m = M; key[s].n = N; key[s].k = K;
        memcpy(memo[s], C, sizeof(float) * (size_t)M * N);
    }
}
