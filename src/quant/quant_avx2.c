/* quant_avx2.c - AVX2 (+FMA, F16C) dot kernels; same contract and results (up to float
 * summation order) as the scalar kernels in quant_dot.c.  Compiled with the AVX2 flags; only
 * called after nx_cpu_isa() reported NX_ISA_AVX2 or better.
 *
 * Every kernel has the shape of DEFINE_DOT (quant_simd_common.h): activation rows in groups of
 * up to 4, each group handled by a helper specialised for its row count, weight blocks decoded
 * once per group.
 *
 * Integer dots use maddubs (u8 x s8 -> int16 pairs) then madd_epi16 (-> int32).  Signed
 * weights go in as |w| with sign(y, w) on the activation side, which needs y != -128 (true of
 * every activation row produced by from_float).  Pair sums stay below 2 * 128 * 127 < 32767, so
 * maddubs never saturates.  The K formats multiply the int16 pairs by the sub-block scale in
 * the madd step.
 */
#include "quant/quant_impl.h"

#include "quant/quant_simd_common.h"

/* ---- plain formats ------------------------------------------------------------------------- */

/* kind: 0 = f32, 1 = f16, 2 = bf16 (a constant after inlining); 8 elements from i */
ALWAYS_INLINE __m256 load8(int kind, const void *p, int64_t i) {
    if (kind == 0) return _mm256_loadu_ps((const float *)p + i);
    const __m128i v = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    if (kind == 1) return _mm256_cvtph_ps(v);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(v), 16));
}

ALWAYS_INLINE float load1(int kind, const void *p, int64_t i) {
    if (kind == 0) return ((const float *)p)[i];
    if (kind == 1) return f16(((const uint16_t *)p)[i]);
    return nx_bf16_to_f32(((const uint16_t *)p)[i]);
}

ALWAYS_INLINE void plain_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    __m256 acc0[ROWS], acc1[ROWS];
    const void *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc0[r] = acc1[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = load8(kind, w, i), w1 = load8(kind, w, i + 8);
        for (int r = 0; r < nr; r++) {
            acc0[r] = _mm256_fmadd_ps(w0, load8(kind, xr[r], i), acc0[r]);
            acc1[r] = _mm256_fmadd_ps(w1, load8(kind, xr[r], i + 8), acc1[r]);
        }
    }
    for (; i + 8 <= n; i += 8) {
        const __m256 w0 = load8(kind, w, i);
        for (int r = 0; r < nr; r++) acc0[r] = _mm256_fmadd_ps(w0, load8(kind, xr[r], i), acc0[r]);
    }
    for (int r = 0; r < nr; r++) {
        float s = hsum256(_mm256_add_ps(acc0[r], acc1[r]));
        for (int64_t j = i; j < n; j++) s += load1(kind, w, j) * load1(kind, xr[r], j);
        out[r] = s;
    }
}

DEFINE_DOT(nx_dot_f32_avx2, plain_rows, 0)
DEFINE_DOT(nx_dot_f16_avx2, plain_rows, 1)
DEFINE_DOT(nx_dot_bf16_avx2, plain_rows, 2)

/* ---- legacy 32-element formats --------------------------------------------------------------- */

/* Byte j of the result is 0x10 if bit j of qh is set, else 0. */
static inline __m256i bit4_from_bits(uint32_t qh) {
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, /* lane 0: bytes 0,1 */
                                          2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bit = _mm256_set1_epi64x((long long)0x8040201008040201ull);
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32((int)qh), shuf);
    v = _mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit);
    return _mm256_and_si256(v, _mm256_set1_epi8(0x10));
}

typedef struct {
    __m256i q; /* signed formats: |code|; unsigned formats: code */
    __m256i s; /* signed formats: the signed code (its sign is applied to y) */
    float d, m;
} wblock;

/* kind: 0 = q8_0, 1 = q4_0, 2 = q5_0 (signed, against q8_0); 3 = q4_1, 4 = q5_1 (against q8_1) */
ALWAYS_INLINE wblock decode_legacy(int kind, const void *w, int64_t ib) {
    wblock b;
    if (kind == 0) {
        const nx_block_q8_0 *p = (const nx_block_q8_0 *)w + ib;
        b.s = _mm256_loadu_si256((const __m256i *)p->qs);
        b.q = _mm256_abs_epi8(b.s); /* -128 -> 0x80 = unsigned 128: correct */
        b.d = f16(p->d);
        b.m = 0;
        return b;
    }
    const uint8_t *qs;
    uint32_t qh = 0;
    if (kind == 1) {
        const nx_block_q4_0 *p = (const nx_block_q4_0 *)w + ib;
        qs = p->qs, b.d = f16(p->d), b.m = 0;
    } else if (kind == 2) {
        const nx_block_q5_0 *p = (const nx_block_q5_0 *)w + ib;
        qs = p->qs, b.d = f16(p->d), b.m = 0;
        memcpy(&qh, p->qh, 4);
    } else if (kind == 3) {
        const nx_block_q4_1 *p = (const nx_block_q4_1 *)w + ib;
        qs = p->qs, b.d = f16(p->d), b.m = f16(p->m);
    } else {
        const nx_block_q5_1 *p = (const nx_block_q5_1 *)w + ib;
        qs = p->qs, b.d = f16(p->d), b.m = f16(p->m);
        memcpy(&qh, p->qh, 4);
    }
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    if (kind == 2 || kind == 4) q = _mm256_or_si256(q, bit4_from_bits(qh));
    if (kind == 1 || kind == 2) {
        b.s = _mm256_sub_epi8(q, _mm256_set1_epi8(kind == 1 ? 8 : 16));
        b.q = _mm256_abs_epi8(b.s);
    } else {
        b.q = q;
        b.s = q;
    }
    return b;
}

ALWAYS_INLINE __m256 block_dot(int kind, const wblock *b, const int8_t *yq) {
    __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    if (kind <= 2) y = _mm256_sign_epi8(y, b->s);
    const __m256i p16 = _mm256_maddubs_epi16(b->q, y);
    return _mm256_cvtepi32_ps(_mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

ALWAYS_INLINE void legacy_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK;
    const size_t xblock = kind <= 2 ? sizeof(nx_block_q8_0) : sizeof(nx_block_q8_1);
    __m256 acc0[ROWS], acc1[ROWS];
    float macc[ROWS];
    const char *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc0[r] = acc1[r] = _mm256_setzero_ps();
        macc[r] = 0;
        xr[r] = act_row(x, xs, r);
    }
    int64_t ib = 0;
    for (; ib + 2 <= nb; ib += 2) {
        const wblock b0 = decode_legacy(kind, w, ib), b1 = decode_legacy(kind, w, ib + 1);
        for (int r = 0; r < nr; r++) {
            const char *y0 = xr[r] + (size_t)ib * xblock, *y1 = y0 + xblock;
            if (kind <= 2) {
                const nx_block_q8_0 *a0 = (const nx_block_q8_0 *)y0, *a1 = (const nx_block_q8_0 *)y1;
                acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(b0.d * f16(a0->d)), block_dot(kind, &b0, a0->qs), acc0[r]);
                acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(b1.d * f16(a1->d)), block_dot(kind, &b1, a1->qs), acc1[r]);
            } else {
                const nx_block_q8_1 *a0 = (const nx_block_q8_1 *)y0, *a1 = (const nx_block_q8_1 *)y1;
                acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(b0.d * f16(a0->d)), block_dot(kind, &b0, a0->qs), acc0[r]);
                acc1[r] = _mm256_fmadd_ps(_mm256_set1_ps(b1.d * f16(a1->d)), block_dot(kind, &b1, a1->qs), acc1[r]);
                macc[r] += b0.m * f16(a0->s) + b1.m * f16(a1->s);
            }
        }
    }
    for (; ib < nb; ib++) {
        const wblock b0 = decode_legacy(kind, w, ib);
        for (int r = 0; r < nr; r++) {
            const char *y0 = xr[r] + (size_t)ib * xblock;
            if (kind <= 2) {
                const nx_block_q8_0 *a0 = (const nx_block_q8_0 *)y0;
                acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(b0.d * f16(a0->d)), block_dot(kind, &b0, a0->qs), acc0[r]);
            } else {
                const nx_block_q8_1 *a0 = (const nx_block_q8_1 *)y0;
                acc0[r] = _mm256_fmadd_ps(_mm256_set1_ps(b0.d * f16(a0->d)), block_dot(kind, &b0, a0->qs), acc0[r]);
                macc[r] += b0.m * f16(a0->s);
            }
        }
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(_mm256_add_ps(acc0[r], acc1[r])) + macc[r];
}

DEFINE_DOT(nx_dot_q8_0_avx2, legacy_rows, 0)
DEFINE_DOT(nx_dot_q4_0_avx2, legacy_rows, 1)
DEFINE_DOT(nx_dot_q5_0_avx2, legacy_rows, 2)
DEFINE_DOT(nx_dot_q4_1_avx2, legacy_rows, 3)
DEFINE_DOT(nx_dot_q5_1_avx2, legacy_rows, 4)

/* ---- q4_K / q5_K (weight stream prefetched, see prefetch_ahead) ------------------------------
 * Group g (64 elements) is two ymm of codes: low nibbles = sub-block 2g, high = 2g+1, each
 * matching 32 consecutive q8_K bytes.  The group is decoded once and used for every row
 * before the next group, so that all four rows' accumulators stay in the 16 ymm registers.
 * The min term is folded into the same float accumulator: sum_k bsums_k * m_{k/2}. */
ALWAYS_INLINE void k4_rows(bool five, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    const size_t wsize = five ? sizeof(nx_block_q5_K) : sizeof(nx_block_q4_K);
    const __m256i low4 = _mm256_set1_epi8(0x0F), one = _mm256_set1_epi8(1);
    __m256 acc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const uint8_t *blk = (const uint8_t *)w + (size_t)ib * wsize;
        prefetch_ahead(blk, (int)wsize);
        const uint8_t *scales, *qs, *qh = NULL;
        uint16_t d16, dmin16;
        if (five) {
            const nx_block_q5_K *p = (const nx_block_q5_K *)blk;
            scales = p->scales, qs = p->qs, qh = p->qh, d16 = p->d, dmin16 = p->dmin;
        } else {
            const nx_block_q4_K *p = (const nx_block_q4_K *)blk;
            scales = p->scales, qs = p->qs, d16 = p->d, dmin16 = p->dmin;
        }
        uint8_t sc[8], m[8];
        nx_k4_unpack_scales(scales, sc, m);
        const __m128i mv = _mm_loadl_epi64((const __m128i *)m);
        const __m256i m16 = _mm256_cvtepu8_epi16(_mm_unpacklo_epi8(mv, mv)); /* lane k = m[k/2] */
        const float d = f16(d16), dmin = f16(dmin16);
        __m256i qhv = _mm256_setzero_si256();
        if (five) qhv = _mm256_loadu_si256((const __m256i *)qh);
        __m256i isum[ROWS];
        for (int r = 0; r < nr; r++) isum[r] = _mm256_setzero_si256();
        for (int g = 0; g < 4; g++) {
            const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
            __m256i lo = _mm256_and_si256(raw, low4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
            if (five) {
                /* bit 2g / 2g+1 of qh[l] -> bit 4 of element l of sub-block 2g / 2g+1 */
                const __m256i blo = _mm256_and_si256(_mm256_srl_epi16(qhv, _mm_cvtsi32_si128(2 * g)), one);
                const __m256i bhi = _mm256_and_si256(_mm256_srl_epi16(qhv, _mm_cvtsi32_si128(2 * g + 1)), one);
                lo = _mm256_or_si256(lo, _mm256_slli_epi16(blo, 4));
                hi = _mm256_or_si256(hi, _mm256_slli_epi16(bhi, 4));
            }
            const __m256i slo = _mm256_set1_epi16(sc[2 * g]), shi = _mm256_set1_epi16(sc[2 * g + 1]);
            for (int r = 0; r < nr; r++) {
                const __m256i ylo = _mm256_loadu_si256((const __m256i *)(xr[r][ib].qs + 64 * g));
                const __m256i yhi = _mm256_loadu_si256((const __m256i *)(xr[r][ib].qs + 64 * g + 32));
                const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, ylo), slo);
                const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, yhi), shi);
                isum[r] = _mm256_add_epi32(isum[r], _mm256_add_epi32(plo, phi));
            }
        }
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), m16);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
            acc[r] = _mm256_fnmadd_ps(_mm256_set1_ps(dmin * a->d), _mm256_cvtepi32_ps(mm), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(acc[r]);
}

DEFINE_DOT(nx_dot_q4_K_avx2, k4_rows, false)
DEFINE_DOT(nx_dot_q5_K_avx2, k4_rows, true)

/* ---- q6_K -------------------------------------------------------------------------------------
 * Per half h (128 elements), four ymm of unsigned 6-bit codes, k = 0..3 covering elements
 * 128h + 32k + l: low/high nibble of ql[64h + 32(k&1) + l] with qh[32h + l] bits 2k..2k+1 on
 * top.  Each ymm spans sub-blocks 8h + 2k and 8h + 2k + 1 (16 elements each, 8 int16 lanes
 * after maddubs).  The -32 offset is removed with the bsums, as in quant_kquant_avx512.c; `kind`
 * is unused (one format). */
ALWAYS_INLINE void q6_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    const __m256i low4 = _mm256_set1_epi8(0x0F), low2 = _mm256_set1_epi8(0x03);
    __m256 acc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const nx_block_q6_K *p = (const nx_block_q6_K *)w + ib;
        prefetch_ahead(p, (int)sizeof(nx_block_q6_K));
        __m256i isum[ROWS];
        for (int r = 0; r < nr; r++) isum[r] = _mm256_setzero_si256();
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(p->ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(p->ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(p->qh + 32 * h));
            for (int k = 0; k < 4; k++) {
                const __m256i ql = (k & 1) ? ql1 : ql0;
                const __m256i lo = (k < 2) ? _mm256_and_si256(ql, low4)
                                           : _mm256_and_si256(_mm256_srli_epi16(ql, 4), low4);
                const __m256i hb = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * k)), low2);
                const __m256i q = _mm256_or_si256(lo, _mm256_slli_epi16(hb, 4));
                const int j = 8 * h + 2 * k; /* first sub-block of this ymm */
                const __m256i scv = _mm256_set_m128i(_mm_set1_epi16(p->scales[j + 1]), _mm_set1_epi16(p->scales[j]));
                for (int r = 0; r < nr; r++) {
                    const __m256i y = _mm256_loadu_si256((const __m256i *)(xr[r][ib].qs + 128 * h + 32 * k));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(_mm256_maddubs_epi16(q, y), scv));
                }
            }
        }
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p->scales));
        const float d = f16(p->d);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            const __m256i corr =
                _mm256_slli_epi32(_mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), sc16), 5);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(d * a->d), _mm256_cvtepi32_ps(_mm256_sub_epi32(isum[r], corr)),
                                     acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(acc[r]);
}

DEFINE_DOT(nx_dot_q6_K_avx2, q6_rows, 0)
