/* quant_lowbit_avx2.c - AVX2 dot kernels for q2_K, q3_K, iq4_xs (against q8_K) and iq4_nl
 * (against q8_0); same contract and results (up to float summation order) as the scalar kernels
 * in quant_dot_lowbit.c.  Shape as quant_avx2.c's K kernels: up to ROWS activation rows per pass,
 * each 32-element piece of a super-block decoded once and used for every row.
 *
 * q2_K / q3_K: per half h of 128 elements one load of qs; the ymm of bit pair k holds elements
 * 128h + 32k .. +31 (sub-blocks 8h + 2k and 8h + 2k + 1: maddubs lanes 0..7 and 8..15), codes
 * unsigned (q3_K: 0..7 with the hmask bit, value code - 4; the -4 comes off through the bsums).
 * iq4_xs / iq4_nl: table values v by pshufb, multiplied as maddubs(|v|, sign(y, v)) (pairs
 * <= 2 * 127 * 127 < 2^15; q8 codes are never -128).
 */
#include "quant/quant_simd_common.h"

/* ---- q2_K / q3_K ----------------------------------------------------------------------------- */

ALWAYS_INLINE void k23_rows(bool three, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *qs, *hmask = NULL;
        int16_t sc[16];
        __m256i c16; /* q2_K: mins per bsums lane; q3_K: scales per bsums lane */
        float d, dmin = 0;
        if (three) {
            const nx_block_q3_K *p = (const nx_block_q3_K *)w + ib;
            prefetch_ahead(p, (int)sizeof *p);
            qs = p->qs, hmask = p->hmask, d = f16(p->d);
            uint8_t s[16];
            nx_q3_unpack_scales(p->scales, s);
            for (int j = 0; j < 16; j++) sc[j] = (int16_t)(s[j] - 32);
            c16 = _mm256_loadu_si256((const __m256i *)sc);
        } else {
            const nx_block_q2_K *p = (const nx_block_q2_K *)w + ib;
            prefetch_ahead(p, (int)sizeof *p);
            qs = p->qs, d = f16(p->d), dmin = f16(p->dmin);
            for (int j = 0; j < 16; j++) sc[j] = p->scales[j] & 0xF;
            c16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(_mm_loadu_si128((const __m128i *)p->scales), 4),
                                                      _mm_set1_epi8(0x0F)));
        }
        __m256i isum[ROWS];
        for (int r = 0; r < nr; r++) isum[r] = _mm256_setzero_si256();
        const __m256i hm = three ? _mm256_loadu_si256((const __m256i *)hmask) : _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * h));
            for (int k = 0; k < 4; k++) {
                __m256i q = _mm256_and_si256(_mm256_srl_epi16(raw, _mm_cvtsi32_si128(2 * k)), m3);
                if (three) {
                    const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(hm, _mm_cvtsi32_si128(4 * h + k)), one);
                    q = _mm256_or_si256(q, _mm256_slli_epi16(hb, 2));
                }
                const int j = 8 * h + 2 * k;
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(sc[j + 1]), _mm_set1_epi16(sc[j]));
                for (int r = 0; r < nr; r++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(xr[r][ib].qs + 128 * h + 32 * k));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scv));
                }
            }
        }
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            const __m256i bm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), c16);
            if (three) {
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d),
                                         _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], _mm256_slli_epi32(bm, 2))), acc[r]);
            } else {
                acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
                acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a->d), _mm256_cvtepi32_ps(bm), acc[r]);
            }
        }
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(acc[r]);
}

DEFINE_DOT(nx_dot_q2_K_avx2, k23_rows, false)
DEFINE_DOT(nx_dot_q3_K_avx2, k23_rows, true)

/* ---- iq4_xs / iq4_nl ------------------------------------------------------------------------- */

/* The 32 values of a sub-block of 32 (16 bytes of nibbles) as signed bytes, element order. */
ALWAYS_INLINE __m256i iq4_values(const uint8_t *qs, __m256i tab) {
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    return _mm256_shuffle_epi8(tab, idx);
}

ALWAYS_INLINE void xs_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nx_iq4nl_values));
    __m256 acc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const nx_block_iq4_xs *p = (const nx_block_iq4_xs *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        __m256i isum[ROWS];
        for (int r = 0; r < nr; r++) isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 8; j++) {
            const __m256i v = iq4_values(p->qs + 16 * j, tab), av = _mm256_abs_epi8(v);
            const int ls = (((p->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((p->scales_h >> (2 * j)) & 3) << 4)) - 32;
            const __m256i scv = _mm256_set1_epi16((int16_t)ls);
            for (int r = 0; r < nr; r++) {
                const __m256i y = _mm256_loadu_si256((const __m256i *)(xr[r][ib].qs + 32 * j));
                isum[r] = _mm256_add_epi32(isum[r],
                                           _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(y, v)), scv));
            }
        }
        const float d = f16(p->d);
        for (int r = 0; r < nr; r++)
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * xr[r][ib].d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(acc[r]);
}

DEFINE_DOT(nx_dot_iq4_xs_avx2, xs_rows, 0) /* kind unused: one format */

ALWAYS_INLINE void nl_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK;
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)nx_iq4nl_values));
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[ROWS];
    const nx_block_q8_0 *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const nx_block_iq4_nl *p = (const nx_block_iq4_nl *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        const __m256i v = iq4_values(p->qs, tab), av = _mm256_abs_epi8(v);
        const float dw = f16(p->d);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_0 *a = xr[r] + ib;
            const __m256i y = _mm256_loadu_si256((const __m256i *)a->qs);
            const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(av, _mm256_sign_epi8(y, v)), ones);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * f16(a->d)), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(acc[r]);
}

DEFINE_DOT(nx_dot_iq4_nl_avx2, nl_rows, 0) /* kind unused: one format */
