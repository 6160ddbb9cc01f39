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
/* One step of a delta-rule chain for one value head (nx_gdn_chain_avx512, and gdn.c's scalar
 * version).  A token step (q != NULL): u = decay * <s_j, k>, delta_j = beta (v_j - u),
 * s_j = decay * s_j + delta_j k, o_j = <s_j, q>; delta_out (optional) receives delta_j.  A replay
 * step (q == NULL) repeats a recorded token step's update with its recorded delta[j] (no dot
 * products): the same float operations, so the same bits.  dst (optional) receives the state
 * after the step. */
typedef struct nx_gdn_step {
    const float *k;        /* [d] */
    const float *q, *v;    /* [d] token step; q == NULL: replay step */
    const float *delta;    /* [d] replay step: the recorded deltas */
    float *delta_out;      /* [d] token step, optional */
    float *o;              /* [d] token step */
    float *dst;            /* [d*d] optional */
    float decay, beta;
} nx_gdn_step;

/* n (<= NX_GDN_MAX_STEPS) steps of one head fused into one pass over the state: step 0 reads
 * src, step t the state after step t-1.  Bit-identical to chained nx_gdn_step_avx512 calls
 * (token steps).  A dst may equal src (each state row is read before it is written); a dst
 * 64-byte aligned and != src gets streaming stores.  d % 16 == 0, d <= 512. */
#define NX_GDN_MAX_STEPS 65
void  nx_gdn_chain_avx512(const float *src, const nx_gdn_step *st, int n, int d);

#endif
