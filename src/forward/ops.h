/* ops.h - small element-wise kernels shared by the layers.
 * Norms accumulate the sum of squares in double, as ggml's CPU rms_norm / l2_norm do, then
 * scale in float; softplus is x above 20, else log(1 + e^x). */
#ifndef NX_OPS_H
#define NX_OPS_H

#include <math.h>
#include <stdint.h>

static inline float nx_sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }
static inline float nx_silu(float x) { return x / (1.0f + expf(-x)); }
static inline float nx_softplus(float x) { return x > 20.0f ? x : logf(1.0f + expf(x)); }

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (w may be NULL = 1); out may alias x. */
void nx_rmsnorm(const float *x, const float *w, float *out, int64_t n, float eps);
/* x <- x / max(||x||_2, eps) * scale */
void nx_l2norm_scale(float *x, int64_t n, float eps, float scale);
/* dot product in float (vectorised where available) */
float nx_dot_f32(const float *a, const float *b, int64_t n);
/* y[i] += a * x[i] */
void nx_axpy_f32(float *y, float a, const float *x, int64_t n);

#endif
