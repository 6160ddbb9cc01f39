/* ops_avx512.h - AVX-512 versions of the trunk's own hot loops (everything except matmuls).
 * Only call when nx_cpu_isa() >= NX_ISA_AVX512 (the context checks once at creation). */
#ifndef NX_OPS_AVX512_H
#define NX_OPS_AVX512_H

#include <stdbool.h>
#include <stdint.h>

float nx_ops_dot_f32_avx512(const float *a, const float *b, int64_t n);
float nx_ops_dot_f16_avx512(const uint16_t *a, const float *b, int64_t n);
void  nx_ops_axpy_f32_avx512(float *y, float a, const float *x, int64_t n);
void  nx_ops_axpy_f16_avx512(float *y, float a, const uint16_t *x, int64_t n);
/* Element-wise activations with a vectorised exp (ops_avx512.c: relative error < 2^-22, a few
 * ulp; the scalar nx_silu / nx_sigmoid use libm's expf).  Every element gets the same
 * instructions whatever its position (tails use masked lanes), so a value never depends on the
 * batch size or on where a row starts.  In place allowed (y == x). */
void  nx_ops_silu_avx512(float *y, const float *x, int64_t n);            /* y = x * sigmoid(x) */
void  nx_ops_swiglu_avx512(float *g, const float *u, int64_t n);          /* g = silu(g) * u */
void  nx_ops_mul_silu_avx512(float *y, const float *z, int64_t n);        /* y *= silu(z) */
void  nx_ops_mul_sigmoid_avx512(float *y, const float *z, int64_t n);     /* y *= sigmoid(z) */
void  nx_ops_exp_avx512(float *y, const float *x, float sub, int64_t n);  /* y = exp(x - sub) */
/* One token of the delta rule for one value head (d % 16 == 0), see gdn.c:
 * for each value index j: u = decay * <src_j, k>; delta = beta (v_j - u);
 * dst_j = decay * src_j + delta k; o_j = <dst_j, q>.  src may equal dst. */
void  nx_gdn_step_avx512(const float *src, float *dst, const float *k, const float *q, const float *v,
                         float decay, float beta, float *o, int d);
/* n (<= NX_GDN_MAX_STEPS) consecutive tokens of the same head fused into one pass over the state:
 * token t uses k[t], q[t], v[t], decay[t], beta[t], writes o[t][0..d) and, when dst[t] is not
 * NULL, the state after it to dst[t]; token 0 reads src.  Bit-identical to n chained
 * nx_gdn_step_avx512 calls (src, dst[0]), (dst[0], dst[1]), ...  A dst[t] may equal src (each
 * state row is read before it is written); dst[t] 64-byte aligned and != src gets streaming
 * stores.  d % 16 == 0, d <= 512. */
#define NX_GDN_MAX_STEPS 16
void  nx_gdn_steps_avx512(const float *src, float *const *dst, int n, const float *const *k,
                          const float *const *q, const float *const *v, const float *decay,
                          const float *beta, float *const *o, int d);

#endif
