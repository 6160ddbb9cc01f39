/* quant_convert_avx512.c - AVX-512 versions of the activation quantisers q8_0 and q8_K
 * (quant_convert.c), bit-identical to the scalar reference: same codes, same scales, same
 * sums, for every input including zeros, NaN and infinities (tests/test_quant.c compares them).
 * They matter for prefill, where every matmul converts T activation rows first.
 *
 * q8_0: amax = max |x| (a max is exact in any order; a NaN element is ignored like fmaxf does),
 * d = amax / 127 and id = 1 / d in scalar exactly as the reference, codes = roundf(x * id)
 * (half away from zero) computed as trunc + (|fraction| >= 0.5 ? sign : 0), which is exact,
 * then narrowed by truncation like the reference's float -> int8 conversion (cvtt: NaN ->
 * 0x80000000 -> low byte 0).
 * q8_K: the element of largest magnitude (first one on ties, as the reference's strict >) sets
 * iscale = -127 / max; codes = the reference's round_even trick (v + 1.5 * 2^23, low mantissa
 * bits) done lane-wise with the same float add, clamped to <= 127; sums per 16 as int. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "quant/quant_impl.h"

static inline float hmax16(__m512 v) { return _mm512_reduce_max_ps(v); }

/* |x| with the sign bit cleared (also for NaN, like fabsf) */
static inline __m512 abs16(__m512 v) { return _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v), _mm512_set1_epi32(0x7FFFFFFF))); }

void nx_from_float_q8_0_avx512(const float *src, void *dst, int64_t n) {
    nx_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float *x = src + i * NX_QK;
        const __m512 x0 = _mm512_loadu_ps(x), x1 = _mm512_loadu_ps(x + 16);
        /* max_ps(a, b) returns b when a is NaN: NaN elements never replace the running max */
        const __m512 m = _mm512_max_ps(abs16(x1), _mm512_max_ps(abs16(x0), _mm512_setzero_ps()));
        const float amax = hmax16(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 vid = _mm512_set1_ps(id);
        __m512i q[2];
        for (int h = 0; h < 2; h++) {
            const __m512 v = _mm512_mul_ps(h ? x1 : x0, vid);
            const __m512 t = _mm512_roundscale_ps(v, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
            const __m512 frac = _mm512_sub_ps(v, t);
            /* |frac| >= 0.5: move one away from zero (t + copysign(1, v)) */
            const __mmask16 up = _mm512_cmp_ps_mask(abs16(frac), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
            const __m512 one = _mm512_or_ps(_mm512_set1_ps(1.0f),
                                            _mm512_and_ps(v, _mm512_castsi512_ps(_mm512_set1_epi32((int)0x80000000u))));
            const __m512 r = _mm512_mask_add_ps(t, up, t, one);
            q[h] = _mm512_cvttps_epi32(r);
        }
        _mm_storeu_si128((__m128i *)y[i].qs, _mm512_cvtepi32_epi8(q[0]));
        _mm_storeu_si128((__m128i *)(y[i].qs + 16), _mm512_cvtepi32_epi8(q[1]));
        y[i].d = nx_f32_to_f16(d);
    }
}

void nx_from_float_q8_K_avx512(const float *src, void *dst, int64_t n) {
    nx_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        __m512 m = _mm512_setzero_ps();
        for (int j = 0; j < NX_QK_K; j += 16) m = _mm512_max_ps(abs16(_mm512_loadu_ps(x + j)), m);
        const float amax = hmax16(m);
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* the first element whose magnitude is amax (the reference keeps the first on ties) */
        float max = 0.0f;
        const __m512 va = _mm512_set1_ps(amax);
        for (int j = 0; j < NX_QK_K; j += 16) {
            const __mmask16 hit = _mm512_cmp_ps_mask(abs16(_mm512_loadu_ps(x + j)), va, _CMP_EQ_OQ);
            if (hit) {
                max = x[j + __builtin_ctz(hit)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 vs = _mm512_set1_ps(iscale), magic = _mm512_set1_ps(12582912.0f);
        for (int j = 0; j < NX_QK_K; j += 16) {
            const __m512i bits = _mm512_castps_si512(_mm512_add_ps(_mm512_mul_ps(vs, _mm512_loadu_ps(x + j)), magic));
            __m512i v = _mm512_sub_epi32(_mm512_and_si512(bits, _mm512_set1_epi32(0x007FFFFF)), _mm512_set1_epi32(0x00400000));
            v = _mm512_min_epi32(v, _mm512_set1_epi32(127));
            const __m128i q = _mm512_cvtepi32_epi8(v);
            _mm_storeu_si128((__m128i *)(y[i].qs + j), q);
            /* the 16 codes of this group summed exactly (they fit int16) */
            const __m128i s = _mm_sad_epu8(_mm_xor_si128(q, _mm_set1_epi8((char)0x80)), _mm_setzero_si128());
            y[i].bsums[j / 16] = (int16_t)(_mm_cvtsi128_si32(s) + _mm_extract_epi16(s, 4) - 16 * 128);
        }
        y[i].d = 1 / iscale;
    }
}
