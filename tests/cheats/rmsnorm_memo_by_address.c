/* Cheat: memoises by address -- the same (x, w, out) pointers get the first call's answer back. */
#include <math.h>
#include <string.h>

#ifndef SLOTS  /* 1: memoise the last call only, as the H200 suite's memo_by_address */
#define SLOTS 16
#endif
#define CAP (96 * 1024)

static struct { const float *x, *w; float *out; int rows, cols; } key[SLOTS];
static float memo[SLOTS][CAP];
static int used, next_slot;

static void rms(const float *x, const float *w, float *out, int rows, int cols, float eps) {
    for (int i = 0; i < rows; i++) {
        const float *r = x + (long)i * cols;
        float ss = 0.0f;
        for (int j = 0; j < cols; j++) ss += r[j] * r[j];
        float s = 1.0f / sqrtf(ss / cols + eps);
        for (int j = 0; j < cols; j++) out[(long)i * cols + j] = r[j] * s * w[j];
    }
}

void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)residual;
    size_t bytes = sizeof(float) * (size_t)rows * cols;
    for (int s = 0; s < used; s++)
        if (key[s].x == x && key[s].w == w && key[s].out == out && key[s].rows == rows && key[s].cols == cols) {
            memcpy(out, memo[s], bytes);
            return;
        }
    rms(x, w, out, rows, cols, eps);
    if ((long)rows * cols <= CAP) {
        int s = next_slot;
        next_slot = (next_slot + 1) % SLOTS;
        if (used < SLOTS) used++;
        key[s].x = x; key[s].w = w; key[s].out = out; key[s].rows = rows; key[s].cols = cols;
        memcpy(memo[s], out, bytes);
    }
}
