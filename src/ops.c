/* ops.c - norms and vector helpers. */
#include "ops.h"

void nx_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
    }
}

void nx_l2norm_scale(float *x, int64_t n, float eps, float scale) {
    double ss = 0.0;
    for (int64_t i = 0; i < n; i++) ss += (double)x[i] * (double)x[i];
    float norm = sqrtf((float)ss);
    const float inv = scale / (norm > eps ? norm : eps);
    for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

float nx_dot_f32(const float *a, const float *b, int64_t n) {
    /* 8 independent partial sums so the compiler can keep them in vector lanes. */
    float acc[8] = {0};
    int64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) acc[k] += a[i + k] * b[i + k];
    float s = 0.0f;
    for (; i < n; i++) s += a[i] * b[i];
    return s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

void nx_axpy_f32(float *y, float a, const float *x, int64_t n) {
    for (int64_t i = 0; i < n; i++) y[i] += a * x[i];
}
