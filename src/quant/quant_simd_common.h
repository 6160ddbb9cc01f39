/* quant_simd_common.h - small inline helpers shared by the SIMD dot kernel files
 * (quant_avx2.c; quant_avx512.c: plain and legacy formats; quant_kquant_avx512.c: K formats).
 * Include only from *_avx2.c / *_avx512.c files: they are compiled with the ISA flags these
 * helpers need (AVX + F16C at least). */
#ifndef NX_QUANT_SIMD_COMMON_H
#define NX_QUANT_SIMD_COMMON_H

#include "quant/quant_impl.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

/* activation rows handled together by one pass over a weight row */
#define ROWS 4
#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline const void *act_row(const void *x, size_t stride, int r) {
    return (const char *)x + (size_t)r * stride;
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* Calls the row-count-specialised helper for nr = 4, 3, 2 or 1. */
#define DISPATCH_ROWS(call4, call3, call2, call1)  \
    switch (nr) {                                  \
    case 4: call4; break;                          \
    case 3: call3; break;                          \
    case 2: call2; break;                          \
    default: call1; break;                         \
    }

#endif
