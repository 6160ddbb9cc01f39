/* quant_kquant_avx512.c - AVX-512 (VNNI) dot kernels for the K formats q4_K, q5_K, q6_K
 * against q8_K activations; same contract and results (up to float summation order) as the
 * scalar kernels in quant_dot.c.  See quant_avx512.c for the shared shape of every kernel. */
#include "quant/quant_simd_common.h"

/* ---- q4_K / q5_K ---------------------------------------------------------------------------
 * A super-block is 4 groups of 64 elements; group g is one zmm of codes (bytes 0..31 =
 * sub-block 2g, 32..63 = sub-block 2g+1), matching 64 consecutive q8_K activation bytes.
 * maddubs gives 32 int16 lanes (lanes 0..15 sub-block 2g, 16..31 sub-block 2g+1); dpwssd
 * multiplies them by the matching 6-bit scale and accumulates in int32 (one chain per row and
 * super-block: |sum| < 2^25).  The min term uses q8_K's bsums: lane k of the 16 bsums belongs
 * to sub-block k/2; madd with the mins gives 8 int32 lanes.
 * Float work per row and super-block: acc += (d * dy) * float(codes sum), macc += (dmin * dy) *
 * float(min sum); result reduce(acc) - hsum(macc).  (matmul runs the kernels on prepared
 * activations at this ISA level, quant_kprep_avx512.c, which gemm_avx512.c mirrors; these are
 * the vec-dot kernels of the type table, checked against scalar.) */

/* permutexvar index tables into the 16 int16 {sc0..sc7, m0..m7}: lane i of group g picks
 * scale 2g + i/16; lane k of the min vector picks min k/2 */
static const uint16_t k4_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const uint16_t k4_min_idx[16] = {8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13, 14, 14, 15, 15};

/* The 8 scales and 8 mins of a q4_K/q5_K block as 16 int16 {sc0..sc7, m0..m7}, entirely in
 * registers (the same bit surgery as nx_k4_unpack_scales, on two 64-bit words: going through
 * a byte array costs a store-forwarding stall per super-block).  ab = scale bytes 0..7, c =
 * bytes 8..11:  lo = ab & 0x3F.. gives sc0..3 | m0..3;  hi = (nibbles of c: low ones in bytes
 * 0..3, high ones in bytes 4..7) | (top two bits of every byte of ab, moved to bits 4..5)
 * gives sc4..7 | m4..7; the 32-bit interleave of lo and hi orders them sc0..7, m0..7. */
ALWAYS_INLINE __m256i k4_scales_mins(const uint8_t *scales) {
    uint64_t ab;
    uint32_t c;
    memcpy(&ab, scales, 8);
    memcpy(&c, scales + 8, 4);
    const uint64_t lo = ab & 0x3F3F3F3F3F3F3F3Full;
    const uint64_t cn = (uint64_t)(c & 0x0F0F0F0Fu) | ((uint64_t)((c >> 4) & 0x0F0F0F0Fu) << 32);
    const uint64_t hi = cn | ((ab >> 2) & 0x3030303030303030ull);
    const __m128i v = _mm_unpacklo_epi32(_mm_cvtsi64_si128((long long)lo), _mm_cvtsi64_si128((long long)hi));
    return _mm256_cvtepu8_epi16(v);
}

typedef struct {
    __m512i q[4];  /* codes of the 4 groups */
    __m512i sc[4]; /* int16 scales per maddubs lane, per group */
    __m256i m16;   /* int16 min per bsums lane */
    __m512 d, dmin; /* broadcast */
} k4block;

ALWAYS_INLINE k4block decode_k4(bool five, const void *w, int64_t ib, const __m512i *sidx, __m256i midx) {
    k4block b;
    const uint8_t *scales, *qs, *qh = NULL;
    const uint16_t *dd; /* d, dmin: the first two fp16 of both block types */
    if (five) {
        const nx_block_q5_K *p = (const nx_block_q5_K *)w + ib;
        scales = p->scales, qs = p->qs, qh = p->qh, dd = &p->d;
    } else {
        const nx_block_q4_K *p = (const nx_block_q4_K *)w + ib;
        scales = p->scales, qs = p->qs, dd = &p->d;
    }
    prefetch_ahead(dd, five ? (int)sizeof(nx_block_q5_K) : (int)sizeof(nx_block_q4_K));
    const __m256i scm = k4_scales_mins(scales);
    const __m512i scm512 = _mm512_castsi256_si512(scm);
    b.m16 = _mm256_permutexvar_epi16(midx, scm);
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
        b.sc[g] = _mm512_permutexvar_epi16(sidx[g], scm512);
    }
    /* d and dmin: one 32-bit broadcast load, one conversion ([d, dmin] repeated), then the
     * even / odd lanes duplicated.  (Written as set1(d) * set1(dy) the compiler would fold
     * the product into a scalar multiply plus a broadcast per row.) */
    int32_t d2;
    memcpy(&d2, dd, 4);
    const __m512 dboth = _mm512_cvtph_ps(_mm256_set1_epi32(d2));
    b.d = _mm512_moveldup_ps(dboth);
    b.dmin = _mm512_movehdup_ps(dboth);
    return b;
}

ALWAYS_INLINE void k4_rows(bool five, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    __m512i sidx[4];
    for (int g = 0; g < 4; g++) sidx[g] = _mm512_loadu_si512(k4_scale_idx[g]);
    const __m256i midx = _mm256_loadu_si256((const __m256i *)k4_min_idx);
    __m512 acc[ROWS];
    /* min-term accumulators: rows 2i and 2i+1 share macc2[i] (lanes 0..7 / 8..15), so one zmm
     * madd + cvt + fmadd serves two rows; each lane still sees exactly the operations of the
     * one-row ymm version (macc1, used for an odd last row), so the result does not depend
     * on which row of a group a row is */
    __m512 macc2[ROWS / 2];
    __m256 macc1 = _mm256_setzero_ps();
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int i = 0; i < nr / 2; i++) macc2[i] = _mm512_setzero_ps();
    for (int64_t ib = 0; ib < nb; ib++) {
        const k4block b = decode_k4(five, w, ib, sidx, midx);
        /* d * dy per row as a vector multiply with dy as a broadcast memory operand: the same
         * product as the scalar d * dy, without a scalar -> vector broadcast per row */
        const __m512 dv = b.d, dminv = b.dmin;
        const __m512i m16x2 = _mm512_broadcast_i64x4(b.m16);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            __m512i s = _mm512_madd_epi16(_mm512_maddubs_epi16(b.q[0], _mm512_loadu_si512(a->qs)), b.sc[0]);
            for (int g = 1; g < 4; g++)
                s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(b.q[g], _mm512_loadu_si512(a->qs + 64 * g)), b.sc[g]);
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc[r]);
        }
        for (int r = 0; r + 1 < nr; r += 2) {
            const nx_block_q8_K *a0 = xr[r] + ib, *a1 = xr[r + 1] + ib;
            const __m512i bs = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)a0->bsums)),
                                                  _mm256_loadu_si256((const __m256i *)a1->bsums), 1);
            const __m512 dy2 = _mm512_mask_mov_ps(_mm512_set1_ps(a0->d), 0xFF00, _mm512_set1_ps(a1->d));
            macc2[r / 2] = _mm512_fmadd_ps(_mm512_mul_ps(dminv, dy2), _mm512_cvtepi32_ps(_mm512_madd_epi16(bs, m16x2)),
                                           macc2[r / 2]);
        }
        if (nr & 1) {
            const nx_block_q8_K *a = xr[nr - 1] + ib;
            const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), b.m16);
            macc1 = _mm256_fmadd_ps(_mm256_mul_ps(_mm512_castps512_ps256(dminv), _mm256_set1_ps(a->d)),
                                    _mm256_cvtepi32_ps(mm), macc1);
        }
    }
    for (int r = 0; r < nr; r++) {
        const __m256 m = r == nr - 1 && (nr & 1) ? macc1
                         : r & 1               ? _mm512_extractf32x8_ps(macc2[r / 2], 1)
                                               : _mm512_castps512_ps256(macc2[r / 2]);
        out[r] = _mm512_reduce_add_ps(acc[r]) - hsum256(m);
    }
}

DEFINE_DOT(nx_dot_q4_K_avx512, k4_rows, false)
DEFINE_DOT(nx_dot_q5_K_avx512, k4_rows, true)

/* ---- q6_K ------------------------------------------------------------------------------------
 * Four zmm of unsigned 6-bit codes per super-block: zmm z = 2h + k2 (h = half of 128, k2 = 0
 * for elements +0..63, 1 for +64..127).  In zmm 2h: bytes 0..31 = ql[64h + l] low nibble |
 * (qh & 3) << 4, bytes 32..63 = ql[64h + 32 + l] low nibble | ((qh >> 2) & 3) << 4; zmm 2h+1
 * takes the high nibbles and qh bits 4..5 / 6..7.  So one 64-byte load of ql feeds both zmm
 * of a half as is, and qh[32h..32h+31] is broadcast to both 256-bit halves and shifted per half
 * (per-lane variable shifts) to bring the wanted two bits to bits 4..5.  maddubs lanes
 * 8j..8j+7 of zmm z belong to sub-block 4z + j.
 * The -32 offset is removed with the bsums: sum sc_j (q - 32) y = sum sc_j q y - 32 sum sc_j
 * bsum_j, and the second sum is one more dpwssd of the 16 bsums (a zero-extended ymm) with
 * -32 sc_j (|32 sc_j| <= 4096 fits int16; the total stays < 2^28).  Float work as q4_K's
 * without the min term. */
static const uint16_t q6_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

/* vpternlog immediate for (A & C) | B, from the truth-table constants A = 0xF0, B = 0xCC,
 * C = 0xAA: (0xF0 & 0xAA) | 0xCC = 0xEC */
#define TERN_A_AND_C_OR_B 0xEC

typedef struct {
    __m512i q[4];
    __m512i sc[4];
    __m512i negsc32; /* lanes 0..15: -32 * scale_j, for the 16 bsums */
    __m512 d; /* broadcast */
} q6block;

ALWAYS_INLINE q6block decode_q6(const nx_block_q6_K *p, const __m512i *sidx) {
    q6block b;
    prefetch_ahead(p, (int)sizeof(nx_block_q6_K));
    const __m512i low4 = _mm512_set1_epi8(0x0F), bits45 = _mm512_set1_epi8(0x30);
    /* per-half shift counts that bring the two qh bits of each zmm to bits 4..5 */
    const __m512i shl_even = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1);
    const __m512i shr_odd = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1);
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(p->ql + 64 * h);
        const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(p->qh + 32 * h)));
        /* 16-bit lane shifts move bits across the two bytes of a lane, but only bits that the
         * masks (0x30 on qh, 0x0F on ql inside the ternlog) then drop */
        const __m512i hi0 = _mm512_and_si512(_mm512_sllv_epi16(qh, shl_even), bits45);
        const __m512i hi1 = _mm512_and_si512(_mm512_srlv_epi16(qh, shr_odd), bits45);
        b.q[2 * h] = _mm512_ternarylogic_epi32(ql, hi0, low4, TERN_A_AND_C_OR_B);
        b.q[2 * h + 1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(ql, 4), hi1, low4, TERN_A_AND_C_OR_B);
    }
    const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p->scales));
    const __m512i sc = _mm512_castsi256_si512(sc16);
    for (int z = 0; z < 4; z++) b.sc[z] = _mm512_permutexvar_epi16(sidx[z], sc);
    b.negsc32 = _mm512_castsi256_si512(_mm256_sub_epi16(_mm256_setzero_si256(), _mm256_slli_epi16(sc16, 5)));
    /* d: a 32-bit broadcast load of scales[14..15] and d (staying inside the block), converted,
     * odd lanes duplicated (see decode_k4) */
    int32_t d2;
    memcpy(&d2, p->scales + 14, 4);
    b.d = _mm512_movehdup_ps(_mm512_cvtph_ps(_mm256_set1_epi32(d2)));
    return b;
}

ALWAYS_INLINE void q6_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
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
        const __m512 dv = b.d; /* d * dy as in k4_rows */
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            /* the upper half of the bsums operand is zero (a ymm load zero-extends) */
            const __m512i bsums = _mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)a->bsums));
            __m512i s0 = _mm512_madd_epi16(bsums, b.negsc32);
            __m512i s1 = _mm512_madd_epi16(_mm512_maddubs_epi16(b.q[0], _mm512_loadu_si512(a->qs)), b.sc[0]);
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(b.q[1], _mm512_loadu_si512(a->qs + 64)), b.sc[1]);
            s1 = _mm512_dpwssd_epi32(s1, _mm512_maddubs_epi16(b.q[2], _mm512_loadu_si512(a->qs + 128)), b.sc[2]);
            s0 = _mm512_dpwssd_epi32(s0, _mm512_maddubs_epi16(b.q[3], _mm512_loadu_si512(a->qs + 192)), b.sc[3]);
            acc[r] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)),
                                     acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

DEFINE_DOT(nx_dot_q6_K_avx512, q6_rows, 0) /* kind unused: one format */
