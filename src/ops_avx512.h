/* ops_avx512.h - AVX-512 versions of the trunk's own hot loops (everything except matmuls).
 * Only call when nx_cpu_isa() >= NX_ISA_AVX512 (the context checks once at creation). */
#ifndef NX_OPS_AVX512_H
#define NX_OPS_AVX512_H

#include <stdint.h>

float nx_ops_dot_f32_avx512(const float *a, const float *b, int64_t n);
float nx_ops_dot_f16_avx512(const uint16_t *a, const float *b, int64_t n);
void  nx_ops_axpy_f32_avx512(float *y, float a, const float *x, int64_t n);
void  nx_ops_axpy_f16_avx512(float *y, float a, const uint16_t *x, int64_t n);
/* One token of the delta rule for one value head (d % 16 == 0), see gdn.c:
 * for each value index j: u = decay * <src_j, k>; delta = beta (v_j - u);
 * dst_j = decay * src_j + delta k; o_j = <dst_j, q>.  src may equal dst. */
void  nx_gdn_step_avx512(const float *src, float *dst, const float *k, const float *q, const float *v,
                         float decay, float beta, float *o, int d);

#endif
