/* quant_lowbit_avx512.c - AVX-512 (VNNI) dot kernels for q2_K, q3_K, iq4_xs (against q8_K) and
 * iq4_nl (against q8_0); same contract and results (up to float summation order) as the scalar
 * kernels in quant_dot_lowbit.c.  Shape as quant_kquant_avx512.c: up to ROWS activation rows per
 * pass over the weight row, each super-block decoded once into registers for all of them.
 *
 * The three K-style formats share one decoded form (lbblock): four zmm of codes, zmm g holding
 * elements 64g..64g+63 in order, so they line up with 64 consecutive q8_K bytes; per int16
 * maddubs lane the scale of its sub-block; the fp16 super-scale(s) converted.  Per row and
 * super-block:
 *   s   = [q3_K: madd(bsums, -4 * scale per bsums lane), else 0]
 *         + sum_g dpwssd(maddubs(codes_g, y_g'), scales_g)        (16 exact int32 lanes)
 *   acc = fmadd(d * dy, float(s), acc)                             (16 float lanes)
 *   q2_K only: macc = fmadd(dmin * dy, float(madd(bsums, mins)), macc)   (8 float lanes)
 * result reduce_add(acc) [- hsum256(macc)].  gemm_lowbit_avx512.c repeats exactly these float
 * operations (bit-identical results whatever the batch size): change both or neither.  How the
 * int32 lanes are formed may change (integer sums are exact) as long as every lane keeps its
 * value.
 *   q2_K: codes 0..3 unsigned, scales 0..15, the mins through the bsums (16 sub-blocks of 16 =
 *         the 16 bsums lanes).
 *   q3_K: codes 0..7 unsigned (value code - 4), scales s - 32 in [-32, 31]; the -4 offset is
 *         the bsums term of s.
 *   iq4_xs: table values v in [-127, 113] go in as |v| with v's sign moved onto the activation
 *         (y' = v < 0 ? -y : y; q8_K codes are never -128, so no wrap), maddubs pairs stay
 *         <= 2 * 127 * 127 < 2^15; scales ls - 32.
 * iq4_nl: 32-element blocks against q8_0 as the legacy formats: per block dpbusd(|v|, y') in 8
 * int32 lanes, fmadd with dw * dy into an 8-lane acc; result hsum256(acc).
 */
#include "quant/quant_simd_common.h"

#include "quant/quant_lowbit_simd.h"

/* permutexvar index tables into 16 int16 scales: lane i of group g picks sub-block 4g + i/8
 * (16-element sub-blocks) or 2g + i/16 (32-element sub-blocks) */
static const uint16_t idx16[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};
static const uint16_t idx32[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};

/* |nx_iq4nl_values| (the sign is index < 8) */
static const int8_t iq4_abs[16] = {127, 104, 83, 65, 49, 35, 22, 10, 1, 13, 25, 38, 53, 69, 89, 113};

/* The 2-bit fields of a q2_K / q3_K block as four zmm of codes 0..3 (element order). */
ALWAYS_INLINE void decode_2bit(const uint8_t *qs, __m512i *q) {
    const __m512i three = _mm512_set1_epi8(3);
    /* per-16-bit-lane shift counts: zmm g takes bits 2k, k = 2(g % 2) (lower half) and + 1
     * (upper half) */
    const __m512i sh01 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    const __m512i sh23 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1);
    for (int h = 0; h < 2; h++) {
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * h)));
        q[2 * h] = _mm512_and_si512(_mm512_srlv_epi16(raw, sh01), three);
        q[2 * h + 1] = _mm512_and_si512(_mm512_srlv_epi16(raw, sh23), three);
    }
}

/* The 16 6-bit q3_K scales, s - 32, as int16 (same words as nx_q3_unpack_scales, in registers). */
ALWAYS_INLINE __m256i q3_scales16(const uint8_t *scales) {
    uint32_t a, b, c;
    memcpy(&a, scales, 4);
    memcpy(&b, scales + 4, 4);
    memcpy(&c, scales + 8, 4);
    const uint32_t w0 = (a & 0x0F0F0F0Fu) | ((c & 0x03030303u) << 4);
    const uint32_t w1 = (b & 0x0F0F0F0Fu) | (((c >> 2) & 0x03030303u) << 4);
    const uint32_t w2 = ((a >> 4) & 0x0F0F0F0Fu) | (((c >> 4) & 0x03030303u) << 4);
    const uint32_t w3 = ((b >> 4) & 0x0F0F0F0Fu) | (((c >> 6) & 0x03030303u) << 4);
    const __m128i lo = _mm_cvtsi64_si128((long long)((uint64_t)w0 | ((uint64_t)w1 << 32)));
    const __m128i v = _mm_insert_epi64(lo, (long long)((uint64_t)w2 | ((uint64_t)w3 << 32)), 1);
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(v), _mm256_set1_epi16(32));
}

/* The 8 iq4_xs scales, ls - 32, as int16 in lanes 0..7: low nibbles from scales_l (pdep spreads
 * nibble j to byte j), bits 4..5 from scales_h. */
ALWAYS_INLINE __m256i iq4xs_scales16(const nx_block_iq4_xs *p) {
    uint32_t l;
    memcpy(&l, p->scales_l, 4);
    const uint64_t ls = _pdep_u64(l, 0x0F0F0F0F0F0F0F0Full) | _pdep_u64(p->scales_h, 0x3030303030303030ull);
    return _mm256_sub_epi16(_mm256_cvtepu8_epi16(_mm_cvtsi64_si128((long long)ls)), _mm256_set1_epi16(32));
}

typedef struct {
    __m512i q[4];       /* codes (iq4_xs: |v|) of the 4 groups */
    __m512i sc[4];      /* int16 scale per maddubs lane */
    __mmask64 neg[4];   /* iq4_xs: lanes whose value is negative */
    __m256i c16;        /* q2_K: min per bsums lane; q3_K: -4 * scale per bsums lane */
    __m512 d, dmin;     /* broadcast */
} lbblock;

ALWAYS_INLINE lbblock decode_lb(int kind, const void *w, int64_t ib) {
    lbblock b;
    if (kind == LB_Q2_K) {
        const nx_block_q2_K *p = (const nx_block_q2_K *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        decode_2bit(p->qs, b.q);
        const __m128i raw = _mm_loadu_si128((const __m128i *)p->scales);
        const __m128i low4 = _mm_set1_epi8(0x0F);
        const __m512i sc = _mm512_castsi256_si512(_mm256_cvtepu8_epi16(_mm_and_si128(raw, low4)));
        b.c16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(raw, 4), low4));
        for (int g = 0; g < 4; g++) b.sc[g] = _mm512_permutexvar_epi16(_mm512_loadu_si512(idx16[g]), sc);
        int32_t d2;
        memcpy(&d2, &p->d, 4); /* d, dmin */
        const __m512 dboth = _mm512_cvtph_ps(_mm256_set1_epi32(d2));
        b.d = _mm512_moveldup_ps(dboth);
        b.dmin = _mm512_movehdup_ps(dboth);
    } else if (kind == LB_Q3_K) {
        const nx_block_q3_K *p = (const nx_block_q3_K *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        decode_2bit(p->qs, b.q);
        /* bit 2 of element 64g + l: bit 2g (l < 32) or 2g + 1 (l >= 32) of hmask[l % 32] */
        const __m512i hm = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)p->hmask));
        for (int g = 0; g < 4; g++) {
            const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * g))),
                                                   _mm256_set1_epi8((char)(1 << (2 * g + 1))), 1);
            b.q[g] = _mm512_mask_add_epi8(b.q[g], _mm512_test_epi8_mask(hm, sel), b.q[g], _mm512_set1_epi8(4));
        }
        const __m256i s16 = q3_scales16(p->scales);
        const __m512i sc = _mm512_castsi256_si512(s16);
        for (int g = 0; g < 4; g++) b.sc[g] = _mm512_permutexvar_epi16(_mm512_loadu_si512(idx16[g]), sc);
        b.c16 = _mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(s16, 2));
        int32_t d2;
        memcpy(&d2, p->scales + 10, 4); /* scales[10..11], d */
        b.d = _mm512_movehdup_ps(_mm512_cvtph_ps(_mm256_set1_epi32(d2)));
        b.dmin = b.d;
    } else {
        const nx_block_iq4_xs *p = (const nx_block_iq4_xs *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        const __m512i tab = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)iq4_abs));
        const __m512i low4 = _mm512_set1_epi8(0x0F), eight = _mm512_set1_epi8(8);
        /* 128-bit lanes of zmm g: low nibbles of qs[32g..+15] (elements 64g..+15), their high
         * nibbles (+16..31), then the same for qs[32g+16..+31] (+32..63) */
        const long long k4 = 0x0004000400040004ll; /* 4 in every 16-bit lane */
        const __m512i sh = _mm512_set_epi64(k4, k4, 0, 0, k4, k4, 0, 0);
        for (int g = 0; g < 4; g++) {
            const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p->qs + 32 * g)));
            const __m512i idx = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(raw, raw, 0x50), sh), low4);
            b.q[g] = _mm512_shuffle_epi8(tab, idx);
            b.neg[g] = _mm512_cmplt_epu8_mask(idx, eight);
        }
        const __m512i sc = _mm512_castsi256_si512(iq4xs_scales16(p));
        for (int g = 0; g < 4; g++) b.sc[g] = _mm512_permutexvar_epi16(_mm512_loadu_si512(idx32[g]), sc);
        int32_t d2;
        memcpy(&d2, &p->d, 4); /* d, scales_h */
        b.d = _mm512_moveldup_ps(_mm512_cvtph_ps(_mm256_set1_epi32(d2)));
        b.dmin = b.d;
    }
    return b;
}

/* The 16 int32 lanes s of one row and super-block (see the top of the file). */
ALWAYS_INLINE __m512i lb_sum(int kind, const lbblock *b, const nx_block_q8_K *a) {
    __m512i s = _mm512_setzero_si512();
    if (kind == LB_Q3_K)
        s = _mm512_madd_epi16(_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)a->bsums)),
                              _mm512_zextsi256_si512(b->c16));
    for (int g = 0; g < 4; g++) {
        __m512i y = _mm512_loadu_si512(a->qs + 64 * g);
        if (kind == LB_IQ4_XS) y = _mm512_mask_sub_epi8(y, b->neg[g], _mm512_setzero_si512(), y);
        s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(b->q[g], y), b->sc[g]);
    }
    return s;
}

ALWAYS_INLINE void lb_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    __m512 acc[ROWS];
    __m256 macc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        macc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const lbblock b = decode_lb(kind, w, ib);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            const __m512i s = lb_sum(kind, &b, a);
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(b.d, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc[r]);
            if (kind == LB_Q2_K) {
                const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), b.c16);
                macc[r] = _mm256_fmadd_ps(_mm256_mul_ps(_mm512_castps512_ps256(b.dmin), _mm256_set1_ps(a->d)),
                                          _mm256_cvtepi32_ps(mm), macc[r]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = kind == LB_Q2_K ? _mm512_reduce_add_ps(acc[r]) - hsum256(macc[r]) : _mm512_reduce_add_ps(acc[r]);
}

DEFINE_DOT(nx_dot_q2_K_avx512, lb_rows, LB_Q2_K)
DEFINE_DOT(nx_dot_q3_K_avx512, lb_rows, LB_Q3_K)
DEFINE_DOT(nx_dot_iq4_xs_avx512, lb_rows, LB_IQ4_XS)

/* The decoded form of one super-block for the GEMM panel (gemm_lowbit_avx512.c): the same
 * registers the kernel above works with, stored. */
void nx_lb_decode_avx512(int kind, const void *w, int64_t ib, nx_lb_panel_row *out) {
    lbblock b = kind == LB_Q2_K ? decode_lb(LB_Q2_K, w, ib) : kind == LB_Q3_K ? decode_lb(LB_Q3_K, w, ib)
                                                                             : decode_lb(LB_IQ4_XS, w, ib);
    for (int g = 0; g < 4; g++) {
        _mm512_store_si512(out->q[g], b.q[g]);
        _mm512_store_si512(out->sc[g], b.sc[g]);
        out->neg[g] = kind == LB_IQ4_XS ? (uint64_t)b.neg[g] : 0;
    }
    _mm256_store_si256((__m256i *)out->c16, b.c16);
    out->d = _mm512_cvtss_f32(b.d);
    out->dmin = _mm512_cvtss_f32(b.dmin);
}

/* ---- iq4_nl ---------------------------------------------------------------------------------- */

ALWAYS_INLINE void nl_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK;
    const __m256i tab = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)iq4_abs));
    const __m256i low4 = _mm256_set1_epi8(0x0F), eight = _mm256_set1_epi8(8);
    __m256 acc[ROWS];
    const nx_block_q8_0 *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const nx_block_iq4_nl *p = (const nx_block_iq4_nl *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        const __m128i raw = _mm_loadu_si128((const __m128i *)p->qs);
        const __m256i idx = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), low4);
        const __m256i q = _mm256_shuffle_epi8(tab, idx);
        const __mmask32 neg = _mm256_cmplt_epu8_mask(idx, eight);
        const float dw = f16(p->d);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_0 *a = xr[r] + ib;
            __m256i y = _mm256_loadu_si256((const __m256i *)a->qs);
            y = _mm256_mask_sub_epi8(y, neg, _mm256_setzero_si256(), y);
            const __m256i s = _mm256_dpbusd_epi32(_mm256_setzero_si256(), q, y);
            acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(dw * f16(a->d)), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = hsum256(acc[r]);
}

DEFINE_DOT(nx_dot_iq4_nl_avx512, nl_rows, 0) /* kind unused: one format */
