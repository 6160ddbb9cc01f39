/* ops.c - norms and vector helpers. */
#include "forward/ops.h"

/* Sum of squares in double with four independent chains (element i goes to chain i % 4), so the
 * adds do not wait on each other's latency; the order is fixed, so the result does not depend on
 * where a row sits in a batch. */
static double sum_squares(const float *x, int64_t n) {
    double a[4] = {0.0, 0.0, 0.0, 0.0};
    int64_t i = 0;
    for (; i + 4 <= n; i += 4)
        for (int k = 0; k < 4; k++) a[k] += (double)x[i + k] * (double)x[i + k];
    for (int k = 0; i < n; i++, k++) a[k] += (double)x[i] * (double)x[i];
    return (a[0] + a[1]) + (a[2] + a[3]);
}

void nx_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps) {
    const double ss = sum_squares(x, n);
    const float scale = 1.0f / sqrtf((float)(ss / (double)n) + eps);
    if (w) {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale * w[i];
    } else {
        for (int64_t i = 0; i < n; i++) out[i] = x[i] * scale;
    }
}

void nx_l2norm_scale(float *x, int64_t n, float eps, float scale) {
    const double ss = sum_squares(x, n);
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
