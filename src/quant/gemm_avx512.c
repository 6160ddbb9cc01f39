/* gemm_avx512.c - AVX-512 VNNI micro-kernels of the GEMM path (see gemm.h) for q8_0 (against
 * q8_0 activations) and q4_K, q5_K, q6_K (against q8_K activations).
 *
 * Bit-identity with the vec-dot kernels (quant_avx512.c, quant_kquant_avx512.c).  Each output
 * element is accumulated exactly like the 1-row kernel does it:
 *  - q8_0: the prepared-activation kernel nx_dot_q8_0_prep_avx512: per octet of 8 blocks, 16
 *    int32 lanes (lane 2j+h = exact dot of the 16 codes of block j in dwords h, 2+h, 4+h, 6+h),
 *    converted and fmadd-ed with dw_j * dy_j into one 16-lane acc, octets in order, zero-padded
 *    blocks adding fma(0, 0, acc); result hsum256(lower + upper half of acc).  (The plain q8_0
 *    kernel, nx_dot_q8_0_avx512, sums differently; matmul never uses it at the AVX-512 level.)
 *  - q4_K / q5_K: per super-block, 16 int32 lanes (maddubs + dpwssd with the sub-block scales,
 *    summed over the 4 groups) -> float -> fmadd with d * a.d into acc; the mins term
 *    madd(bsums, m16) -> float -> fmadd with dmin * a.d into macc; result
 *    reduce_add(acc) - hsum256(macc).
 *  - q6_K: the same 16 lanes minus 32 * madd(bsums, scales) in the lower 8, -> fmadd with
 *    d * a.d; result reduce_add(acc).
 * If one of those kernels changes its float operations, the matching kernel here must follow
 * (tests/test_gemm.c compares them bit for bit).
 *
 * Panels are packed with plain scalar code: a panel is packed once per (activation block,
 * weight chunk) and then used for a whole activation block, so packing is ~1 % of the work.
 */
#include "quant/gemm.h"

#include <immintrin.h>
#include <string.h>

#include "quant/quant_impl.h"
#include "quant/quant_simd_common.h" /* hsum256: the vec-dot kernels' reduction order */

/* ---- q8_0 ------------------------------------------------------------------------------------
 * Activations: the prepared layout of quant_avx512.c (nx_prep_q8_0_from_blocks), per octet of
 * 8 blocks (Q8_ACT_STEP bytes): 4 x 64 code bytes (vector q, qword slot j = codes 8q..8q+7 of
 * block j), 16 int32 corrections, 16 float scales (lane 2j+h = block j's).
 * Panel, per octet, per weight row m (Q8_W_STEP bytes): the 4 vectors of weight codes + 128 in
 * the same slot order, then 16 float dw (lane 2j+h = block j's scale); a missing block or row
 * has code 0 (stored 0x80) and scale 0, like the kernel's zero padding. */
#define Q8_MR 4
#define Q8_NR 4
#define Q8_ACT_STEP 384
#define Q8_W_STEP 320

static int64_t q8_steps(int64_t n) { return (n / NX_QK + 7) / 8; }

static size_t q8_0_act_row_bytes(int64_t n) { return (size_t)q8_steps(n) * Q8_ACT_STEP; }

static void q8_0_pack_act(const void *xq, void *xp, int64_t n) { nx_prep_q8_0_from_blocks(xq, xp, n); }

static size_t q8_0_panel_bytes(int64_t n) { return (size_t)q8_steps(n) * Q8_MR * Q8_W_STEP; }

static void q8_0_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    const int64_t nb = n / NX_QK, steps = q8_steps(n);
    for (int m = 0; m < Q8_MR; m++) {
        const nx_block_q8_0 *wr = (const nx_block_q8_0 *)((const char *)w + (size_t)m * row_bytes);
        for (int64_t s = 0; s < steps; s++) {
            uint8_t *p = (uint8_t *)panel + ((size_t)s * Q8_MR + (size_t)m) * Q8_W_STEP;
            float dw[16];
            for (int j = 0; j < 8; j++) {
                const int64_t b = 8 * s + j;
                const bool have = m < rows && b < nb;
                for (int q = 0; q < 4; q++)
                    for (int t = 0; t < 8; t++)
                        p[64 * q + 8 * j + t] = (uint8_t)((have ? (uint8_t)wr[b].qs[8 * q + t] : 0) ^ 0x80);
                dw[2 * j] = dw[2 * j + 1] = have ? _cvtsh_ss(wr[b].d) : 0.0f;
            }
            memcpy(p + 256, dw, sizeof dw);
        }
    }
}

static void q8_0_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    const int64_t steps = q8_steps(n);
    __m512 acc[Q8_MR][Q8_NR];
    for (int m = 0; m < Q8_MR; m++)
        for (int r = 0; r < Q8_NR; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; s++) {
        const char *p = (const char *)panel + (size_t)s * Q8_MR * Q8_W_STEP;
        for (int m = 0; m < Q8_MR; m++) {
            const char *pm = p + m * Q8_W_STEP;
            const __m512i v0 = _mm512_load_si512(pm), v1 = _mm512_load_si512(pm + 64);
            const __m512i v2 = _mm512_load_si512(pm + 128), v3 = _mm512_load_si512(pm + 192);
            const __m512 dw = _mm512_load_ps(pm + 256);
            for (int r = 0; r < Q8_NR; r++) {
                const char *a = (const char *)x[r] + (size_t)s * Q8_ACT_STEP;
                __m512i t = _mm512_load_si512(a + 256);
                t = _mm512_dpbusd_epi32(t, v0, _mm512_load_si512(a));
                t = _mm512_dpbusd_epi32(t, v1, _mm512_load_si512(a + 64));
                t = _mm512_dpbusd_epi32(t, v2, _mm512_load_si512(a + 128));
                t = _mm512_dpbusd_epi32(t, v3, _mm512_load_si512(a + 192));
                acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_load_ps(a + 320)),
                                            acc[m][r]);
            }
        }
    }
    for (int r = 0; r < Q8_NR; r++)
        for (int m = 0; m < Q8_MR; m++)
            out[r * Q8_MR + m] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[m][r]),
                                                       _mm512_extractf32x8_ps(acc[m][r], 1)));
}

const nx_gemm_ops nx_gemm_q8_0_avx512 = {Q8_MR, Q8_NR, q8_0_act_row_bytes, q8_0_pack_act,
                                         q8_0_panel_bytes, q8_0_pack_panel, q8_0_tile};

/* ---- K formats ---------------------------------------------------------------------------------
 * Activations are q8_K rows as matmul converted them.  Panel: per super-block, K_MR = 2 weight
 * rows together (KW_BYTES):
 *   uint8 q[2][4][64]   codes of group g of row m: bytes 0..31 = sub-block 2g, 32..63 = 2g+1
 *                       (q4_K/q5_K); q6_K: see q6_K_pack_panel (the order of quant_kquant_avx512.c)
 *   int16 sc[2][4][32]  the scale of the sub-block each int16 maddubs lane belongs to
 *   int16 mc[2][16]     q4_K/q5_K: the min of bsums lane k's sub-block (k/2) - rows 0 and 1 side
 *                       by side, so one 512-bit madd with [bsums | bsums] gives both rows' mins
 *                       term in the lower / upper 8 lanes; q6_K: the 16 scales
 *   float dv[2][16]     d of row m in all 16 lanes
 *   float dminv[16]     dmin of row 0 (lanes 0..7) and row 1 (lanes 8..15)
 * The 1-row kernel's macc of row m (8 float lanes) is the lower / upper half of one zmm here: the
 * lanes are independent, each sees the same operations in the same order. */
#define K_MR 2
#define K_NR 4
#define KW_Q 0
#define KW_SC 512
#define KW_MC 1024
#define KW_DV 1088
#define KW_DMIN 1216
#define KW_BYTES 1280

static size_t k_panel_bytes(int64_t n) { return (size_t)(n / NX_QK_K) * KW_BYTES; }

static void pack_k4(bool five, const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    const int64_t nb = n / NX_QK_K;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    for (int64_t ib = 0; ib < nb; ib++) {
        char *p = (char *)panel + (size_t)ib * KW_BYTES;
        memset(p, 0, KW_BYTES);
        float dminv[16];
        for (int m = 0; m < K_MR; m++) {
            for (int l = 0; l < 8; l++) dminv[8 * m + l] = 0.0f;
            if (m >= rows) continue;
            const char *wr = (const char *)w + (size_t)m * row_bytes;
            const uint8_t *scales, *qs, *qh = NULL;
            uint16_t d, dmin;
            if (five) {
                const nx_block_q5_K *b = (const nx_block_q5_K *)wr + ib;
                scales = b->scales, qs = b->qs, qh = b->qh, d = b->d, dmin = b->dmin;
            } else {
                const nx_block_q4_K *b = (const nx_block_q4_K *)wr + ib;
                scales = b->scales, qs = b->qs, d = b->d, dmin = b->dmin;
            }
            uint8_t sc[8], mn[8];
            nx_k4_unpack_scales(scales, sc, mn);
            __m512i qhz = _mm512_setzero_si512();
            if (five) qhz = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
            for (int g = 0; g < 4; g++) {
                /* low nibbles of the 32 bytes in bytes 0..31, high nibbles in 32..63 */
                const __m256i raw = _mm256_loadu_si256((const __m256i *)(qs + 32 * g));
                __m512i q = _mm512_and_si512(
                    _mm512_inserti64x4(_mm512_castsi256_si512(raw), _mm256_srli_epi16(raw, 4), 1), low4);
                if (five) {
                    const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * g))),
                                                           _mm256_set1_epi8((char)(1 << (2 * g + 1))), 1);
                    q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qhz, sel), q, _mm512_set1_epi8(16));
                }
                _mm512_store_si512(p + KW_Q + 256 * m + 64 * g, q);
                const __m512i scv = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_set1_epi16(sc[2 * g])),
                                                       _mm256_set1_epi16(sc[2 * g + 1]), 1);
                _mm512_store_si512(p + KW_SC + 256 * m + 64 * g, scv);
            }
            int16_t mc[16];
            for (int k = 0; k < 16; k++) mc[k] = mn[k / 2];
            memcpy(p + KW_MC + 32 * m, mc, sizeof mc);
            _mm512_store_ps(p + KW_DV + 64 * m, _mm512_set1_ps(_cvtsh_ss(d)));
            for (int l = 0; l < 8; l++) dminv[8 * m + l] = _cvtsh_ss(dmin);
        }
        memcpy(p + KW_DMIN, dminv, sizeof dminv);
    }
}

static void q4_K_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    pack_k4(false, w, row_bytes, rows, n, panel);
}
static void q5_K_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    pack_k4(true, w, row_bytes, rows, n, panel);
}

static void q6_K_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    const int64_t nb = n / NX_QK_K;
    const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03);
    for (int64_t ib = 0; ib < nb; ib++) {
        char *p = (char *)panel + (size_t)ib * KW_BYTES;
        memset(p, 0, KW_BYTES);
        for (int m = 0; m < K_MR && m < rows; m++) {
            const nx_block_q6_K *b = (const nx_block_q6_K *)((const char *)w + (size_t)m * row_bytes) + ib;
            /* zmm 2h: bytes 0..31 = low nibble of ql[64h + l] | qh bits 0..1 << 4, bytes 32..63 =
             * low nibble of ql[64h + 32 + l] | qh bits 2..3 << 4; zmm 2h+1: the high nibbles with
             * qh bits 4..5 / 6..7 (qh = qh[32h + l]) */
            for (int h = 0; h < 2; h++) {
                const __m512i ql = _mm512_loadu_si512(b->ql + 64 * h);
                const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
                __m512i hi0 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
                __m512i hi1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 4)),
                                                 _mm256_srli_epi16(qh, 6), 1);
                hi0 = _mm512_slli_epi16(_mm512_and_si512(hi0, low2), 4);
                hi1 = _mm512_slli_epi16(_mm512_and_si512(hi1, low2), 4);
                _mm512_store_si512(p + KW_Q + 256 * m + 64 * (2 * h), _mm512_or_si512(_mm512_and_si512(ql, low4), hi0));
                _mm512_store_si512(p + KW_Q + 256 * m + 64 * (2 * h + 1),
                                   _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hi1));
            }
            int16_t scl[4][32], s16[16];
            for (int z = 0; z < 4; z++)
                for (int l = 0; l < 32; l++) scl[z][l] = b->scales[4 * z + l / 8]; /* lanes 8j.. -> 4z + j */
            for (int k = 0; k < 16; k++) s16[k] = b->scales[k];
            memcpy(p + KW_SC + 256 * m, scl, sizeof scl);
            memcpy(p + KW_MC + 32 * m, s16, sizeof s16);
            _mm512_store_ps(p + KW_DV + 64 * m, _mm512_set1_ps(_cvtsh_ss(b->d)));
        }
    }
}

/* six: q6_K (offset correction, no mins) rather than q4_K/q5_K */
ALWAYS_INLINE void k_tile(bool six, int64_t n, const void *panel, const void *const *x, float *out) {
    const int64_t nb = n / NX_QK_K;
    __m512 acc[K_MR][K_NR], macc[K_NR]; /* macc: row 0 in lanes 0..7, row 1 in 8..15 */
    for (int r = 0; r < K_NR; r++) {
        macc[r] = _mm512_setzero_ps();
        for (int m = 0; m < K_MR; m++) acc[m][r] = _mm512_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const char *p = (const char *)panel + (size_t)ib * KW_BYTES;
        const __m512i mc = _mm512_load_si512(p + KW_MC);
        __m512 ad[K_NR];
        __m512i bm[K_NR];
        for (int r = 0; r < K_NR; r++) {
            const nx_block_q8_K *a = (const nx_block_q8_K *)x[r] + ib;
            ad[r] = _mm512_set1_ps(a->d);
            /* lanes k of both halves: bsums[2k] * c[2k] + bsums[2k+1] * c[2k+1] of row 0 / row 1 */
            bm[r] = _mm512_madd_epi16(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)a->bsums)), mc);
            if (!six)
                macc[r] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_load_ps(p + KW_DMIN), ad[r]), _mm512_cvtepi32_ps(bm[r]),
                                          macc[r]);
        }
        for (int m = 0; m < K_MR; m++) {
            /* this row's codes and scales stay in registers for the K_NR activation rows */
            __m512i wq[4], ws[4];
            for (int g = 0; g < 4; g++) {
                wq[g] = _mm512_load_si512(p + KW_Q + 256 * m + 64 * g);
                ws[g] = _mm512_load_si512(p + KW_SC + 256 * m + 64 * g);
            }
            const __m512 dv = _mm512_load_ps(p + KW_DV + 64 * m);
            for (int r = 0; r < K_NR; r++) {
                const nx_block_q8_K *a = (const nx_block_q8_K *)x[r] + ib;
                __m512i s = _mm512_setzero_si512();
                for (int g = 0; g < 4; g++)
                    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(wq[g], _mm512_loadu_si512(a->qs + 64 * g)), ws[g]);
                if (six) {
                    const __m256i corr = m == 0 ? _mm512_castsi512_si256(bm[r]) : _mm512_extracti64x4_epi64(bm[r], 1);
                    s = _mm512_sub_epi32(s, _mm512_zextsi256_si512(_mm256_slli_epi32(corr, 5)));
                }
                acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(dv, ad[r]), _mm512_cvtepi32_ps(s), acc[m][r]);
            }
        }
    }
    for (int r = 0; r < K_NR; r++)
        for (int m = 0; m < K_MR; m++) {
            const __m256 mh = m == 0 ? _mm512_castps512_ps256(macc[r]) : _mm512_extractf32x8_ps(macc[r], 1);
            out[r * K_MR + m] = six ? _mm512_reduce_add_ps(acc[m][r]) : _mm512_reduce_add_ps(acc[m][r]) - hsum256(mh);
        }
}

static void k4_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    k_tile(false, n, panel, x, out);
}
static void q6_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    k_tile(true, n, panel, x, out);
}

const nx_gemm_ops nx_gemm_q4_K_avx512 = {K_MR, K_NR, NULL, NULL, k_panel_bytes, q4_K_pack_panel, k4_tile};
const nx_gemm_ops nx_gemm_q5_K_avx512 = {K_MR, K_NR, NULL, NULL, k_panel_bytes, q5_K_pack_panel, k4_tile};
const nx_gemm_ops nx_gemm_q6_K_avx512 = {K_MR, K_NR, NULL, NULL, k_panel_bytes, q6_K_pack_panel, q6_tile};
