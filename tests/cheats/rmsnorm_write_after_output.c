/* Fault: a correct RMSNorm that also writes the element just after out. */
#include <math.h>

void abebot_rmsnorm(const float *x, const float *w, float *residual, float *out, int rows, int cols, float eps) {
    (void)residual;
    for (int i = 0; i < rows; i++) {
        const float *r = x + (long)i * cols;
        float ss = 0.0f;
        for (int j = 0; j < cols; j++) ss += r[j] * r[j];
        float s = 1.0f / sqrtf(ss / cols + eps);
        for (int j = 0; j < cols; j++) out[(long)i * cols + j] = r[j] * s * w[j];
    }
    out[(long)rows * cols] = 0.0f;
}
