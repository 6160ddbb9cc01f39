/* quant_kquant_avx512.c - AVX-512 (VNNI) dot kernels for the K formats q4_K, q5_K, q6_K
 * against q8_K activations; same contract and results (up to float summation order) as the
 * scalar kernels in quant_dot.c.  See quant_avx512.c for the shared shape of every kernel. */
#include "quant_avx512_common.h"

/* ---- q4_K / q5_K ---------------------------------------------------------------------------
 * A super-block is 4 groups of 64 elements; group g is one zmm of codes (bytes 0..31 =
 * sub-block 2g, 32..63 = sub-block 2g+1), matching 64 consecutive q8_K activation bytes.
 * maddubs gives 32 int16 lanes (lanes 0..15 sub-block 2g, 16..31 sub-block 2g+1); dpwssd
 * multiplies them by the matching 6-bit scale and accumulates in int32.  The min term uses
 * q8_K's bsums: lane k of the 16 bsums belongs to sub-block k/2. */

/* permutexvar index tables: lane i of group g picks scale 2g + i/16 */
static const uint16_t k4_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const uint16_t k4_min_idx[16] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7};

typedef struct {
    __m512i q[4];     /* codes of the 4 groups */
    __m512i sc[4];    /* int16 scales per maddubs lane, per group */
    __m256i m16;      /* int16 min per bsums lane */
    float d, dmin;
} k4block;

ALWAYS_INLINE k4block decode_k4(bool five, const void *w, int64_t ib, const __m512i *sidx, __m256i midx) {
    k4block b;
    const uint8_t *scales, *qs, *qh = NULL;
    uint16_t d, dmin;
    if (five) {
        const nx_block_q5_K *p = (const nx_block_q5_K *)w + ib;
        scales = p->scales, qs = p->qs, qh = p->qh, d = p->d, dmin = p->dmin;
    } else {
        const nx_block_q4_K *p = (const nx_block_q4_K *)w + ib;
        scales = p->scales, qs = p->qs, d = p->d, dmin = p->dmin;
    }
    uint8_t sc[8], m[8];
    nx_k4_unpack_scales(scales, sc, m);
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
    const __m256i m16 = _mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)m)));
    b.m16 = _mm256_permutexvar_epi16(midx, m16);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    /* shift counts per 16-bit lane: 0 in the lower half (low nibbles), 4 in the upper half */
    const __m512i nibble_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i qhz = _mm512_setzero_si512();
    if (five) qhz = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    for (int g = 0; g < 4; g++) {
        /* the 32 code bytes in both halves (a load, no shuffle), then low nibbles below and high
         * nibbles above */
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * g)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, nibble_shift), low4);
        if (five) {
            /* bit 2g of qh[l] is bit 4 of element l of sub-block 2g, bit 2g+1 of sub-block 2g+1 */
            const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * g))),
                                                   _mm256_set1_epi8((char)(1 << (2 * g + 1))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qhz, sel), q, _mm512_set1_epi8(16));
        }
        b.q[g] = q;
        b.sc[g] = _mm512_permutexvar_epi16(sidx[g], sc16);
    }
    b.d = f16(d);
    b.dmin = f16(dmin);
    return b;
}

ALWAYS_INLINE void k4_rows(bool five, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    __m512i sidx[4];
    for (int g = 0; g < 4; g++) sidx[g] = _mm512_loadu_si512(k4_scale_idx[g]);
    const __m256i midx = _mm256_loadu_si256((const __m256i *)k4_min_idx);
    __m512 acc[ROWS];
    __m256 macc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        macc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const k4block b = decode_k4(five, w, ib, sidx, midx);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            __m512i s02 = _mm512_setzero_si512(), s13 = _mm512_setzero_si512(); /* two chains */
            for (int g = 0; g < 4; g++) {
                const __m512i y = _mm512_loadu_si512(a->qs + 64 * g);
                const __m512i p = _mm512_maddubs_epi16(b.q[g], y);
                if (g & 1) s13 = _mm512_dpwssd_epi32(s13, p, b.sc[g]);
                else s02 = _mm512_dpwssd_epi32(s02, p, b.sc[g]);
            }
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(b.d * a->d), _mm512_cvtepi32_ps(_mm512_add_epi32(s02, s13)), acc[r]);
            const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), b.m16);
            macc[r] = _mm256_fmadd_ps(_mm256_set1_ps(b.dmin * a->d), _mm256_cvtepi32_ps(mm), macc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(acc[r]) - hsum256(macc[r]);
}

static void k4_dot(bool five, int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        if (five) {
            DISPATCH_ROWS(k4_rows(true, 4, n, out + r0, w, xg, xs), k4_rows(true, 3, n, out + r0, w, xg, xs),
                          k4_rows(true, 2, n, out + r0, w, xg, xs), k4_rows(true, 1, n, out + r0, w, xg, xs));
        } else {
            DISPATCH_ROWS(k4_rows(false, 4, n, out + r0, w, xg, xs), k4_rows(false, 3, n, out + r0, w, xg, xs),
                          k4_rows(false, 2, n, out + r0, w, xg, xs), k4_rows(false, 1, n, out + r0, w, xg, xs));
        }
    }
}

void nx_dot_q4_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    k4_dot(false, n, out, w, x, xs, nrows);
}
void nx_dot_q5_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    k4_dot(true, n, out, w, x, xs, nrows);
}

/* ---- q6_K ------------------------------------------------------------------------------------
 * Four zmm of unsigned 6-bit codes per super-block: zmm z = 2h + k2 (h = half of 128, k2 = 0
 * for elements +0..63, 1 for +64..127).  In zmm 2h: bytes 0..31 = ql[64h + l] low nibble |
 * (qh & 3) << 4, bytes 32..63 = ql[64h + 32 + l] low nibble | ((qh >> 2) & 3) << 4; zmm 2h+1
 * takes the high nibbles and qh bits 4..5 / 6..7.  maddubs lanes 8j..8j+7 of zmm z belong to
 * sub-block 4z + j.  The -32 offset is removed once per super-block with the bsums:
 * sum sc_j (q - 32) y = sum sc_j q y - 32 sum sc_j bsum_j. */
static const uint16_t q6_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

typedef struct {
    __m512i q[4];
    __m512i sc[4];
    __m256i sc16; /* the 16 scales as int16, for the bsums correction */
    float d;
} q6block;

ALWAYS_INLINE q6block decode_q6(const nx_block_q6_K *p, const __m512i *sidx) {
    q6block b;
    const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03);
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(p->ql + 64 * h);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(p->qh + 32 * h));
        __m512i hi0 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        __m512i hi1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 4)), _mm256_srli_epi16(qh, 6), 1);
        hi0 = _mm512_slli_epi16(_mm512_and_si512(hi0, low2), 4);
        hi1 = _mm512_slli_epi16(_mm512_and_si512(hi1, low2), 4);
        b.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), hi0);
        b.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hi1);
    }
    b.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p->scales));
    const __m512i sc = _mm512_castsi256_si512(b.sc16);
    for (int z = 0; z < 4; z++) b.sc[z] = _mm512_permutexvar_epi16(sidx[z], sc);
    b.d = f16(p->d);
    return b;
}

ALWAYS_INLINE void q6_rows(int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    __m512i sidx[4];
    for (int z = 0; z < 4; z++) sidx[z] = _mm512_loadu_si512(q6_scale_idx[z]);
    __m512 acc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const q6block b = decode_q6((const nx_block_q6_K *)w + ib, sidx);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            __m512i s02 = _mm512_setzero_si512(), s13 = _mm512_setzero_si512();
            for (int z = 0; z < 4; z++) {
                const __m512i p = _mm512_maddubs_epi16(b.q[z], _mm512_loadu_si512(a->qs + 64 * z));
                if (z & 1) s13 = _mm512_dpwssd_epi32(s13, p, b.sc[z]);
                else s02 = _mm512_dpwssd_epi32(s02, p, b.sc[z]);
            }
            /* offset correction, exact in int32 (|total| < 2^28) */
            const __m256i corr = _mm256_slli_epi32(
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), b.sc16), 5);
            const __m512i s = _mm512_sub_epi32(_mm512_add_epi32(s02, s13), _mm512_zextsi256_si512(corr));
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(b.d * a->d), _mm512_cvtepi32_ps(s), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

void nx_dot_q6_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        DISPATCH_ROWS(q6_rows(4, n, out + r0, w, xg, xs), q6_rows(3, n, out + r0, w, xg, xs),
                      q6_rows(2, n, out + r0, w, xg, xs), q6_rows(1, n, out + r0, w, xg, xs));
    }
}
