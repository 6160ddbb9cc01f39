/* convert_kernels.h - the converter's per-row hot loops: F16 -> F32 widening and Q8_0
 * quantisation, scalar reference + AVX2/F16C versions chosen once at run time.
 *
 * The SIMD versions are bit-identical to the scalar ones, and the Q8_0 one to quant.c's
 * reference quantiser (ggml's quantize_row_q8_0_ref): d = amax / 127, id = 1 / d,
 * q = round-half-away-from-zero(x * id), d stored as F16.  tests/test_convert_kernels.c checks it.
 */
#ifndef NX_CONVERT_KERNELS_H
#define NX_CONVERT_KERNELS_H

#include <stdint.h>

typedef void (*nx_cv_f16_to_f32_fn)(const void *src, float *dst, uint64_t n); /* src may be unaligned */
typedef void (*nx_cv_q8_0_fn)(const float *src, void *dst, uint64_t n);      /* n % 32 == 0 */

void nx_cv_f16_to_f32_scalar(const void *src, float *dst, uint64_t n);
void nx_cv_q8_0_scalar(const float *src, void *dst, uint64_t n);
void nx_cv_f16_to_f32_avx2(const void *src, float *dst, uint64_t n);
void nx_cv_q8_0_avx2(const float *src, void *dst, uint64_t n);

/* Best available on this CPU (honours NX_ISA via nx_cpu_isa()). */
nx_cv_f16_to_f32_fn nx_cv_f16_to_f32_best(void);
nx_cv_q8_0_fn nx_cv_q8_0_best(void);

#endif
