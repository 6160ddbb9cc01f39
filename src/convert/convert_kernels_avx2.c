/* convert_kernels_avx2.c - AVX2 + F16C converter kernels (called only after a CPUID check). */
#include <immintrin.h>
#include <string.h>

#include "convert/convert_kernels.h"
#include "nextn_internal.h"

void nx_cv_f16_to_f32_avx2(const void *src, float *dst, uint64_t n) {
    const uint8_t *s = src;
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(s + 2 * i))));
    for (; i < n; i++) { /* the tail as nx_cv_f16_to_f32_scalar does it (not called: no call back up) */
        uint16_t h;
        memcpy(&h, s + 2 * i, 2);
        dst[i] = nx_f16_to_f32(h);
    }
}

/* Round half away from zero, exactly like roundf: t = trunc(|v|), +1 when |v| - t >= 0.5 (the
 * subtraction is exact), sign restored. */
static inline __m256i round_away(__m256 v) {
    const __m256 sign = _mm256_set1_ps(-0.0f);
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256 t = _mm256_round_ps(a, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256 up = _mm256_and_ps(_mm256_cmp_ps(_mm256_sub_ps(a, t), _mm256_set1_ps(0.5f), _CMP_GE_OQ), _mm256_set1_ps(1.0f));
    t = _mm256_or_ps(_mm256_add_ps(t, up), _mm256_and_ps(sign, v));
    return _mm256_cvtps_epi32(t);
}

void nx_cv_q8_0_avx2(const float *src, void *dst, uint64_t n) {
    uint8_t *out = dst;
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (uint64_t b = 0; b < n / 32; b++, src += 32, out += 34) {
        __m256 x0 = _mm256_loadu_ps(src), x1 = _mm256_loadu_ps(src + 8);
        __m256 x2 = _mm256_loadu_ps(src + 16), x3 = _mm256_loadu_ps(src + 24);
        __m256 m = _mm256_max_ps(_mm256_max_ps(_mm256_andnot_ps(sign, x0), _mm256_andnot_ps(sign, x1)),
                                 _mm256_max_ps(_mm256_andnot_ps(sign, x2), _mm256_andnot_ps(sign, x3)));
        __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
        h = _mm_max_ps(h, _mm_movehl_ps(h, h));
        h = _mm_max_ss(h, _mm_movehdup_ps(h));
        const float amax = _mm_cvtss_f32(h);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        uint16_t dh = nx_f32_to_f16(d);
        memcpy(out, &dh, 2);
        const __m256 vid = _mm256_set1_ps(id);
        __m256i i0 = round_away(_mm256_mul_ps(x0, vid)), i1 = round_away(_mm256_mul_ps(x1, vid));
        __m256i i2 = round_away(_mm256_mul_ps(x2, vid)), i3 = round_away(_mm256_mul_ps(x3, vid));
        /* int32 -> int8 with saturation; the packs interleave 128-bit lanes, the permute undoes it */
        __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
        p = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
        _mm256_storeu_si256((__m256i *)(out + 2), p);
    }
}
