/* gemm_lowbit_avx512.c - AVX-512 VNNI micro-kernels of the GEMM path (gemm.h) for q2_K, q3_K and
 * iq4_xs against q8_K activations (the rows as matmul converted them).
 *
 * Panel: per super-block, LB_MR weight rows side by side, each as nx_lb_panel_row - exactly the
 * registers quant_lowbit_avx512.c's 1-row kernel decodes (codes, int16 scale per maddubs lane,
 * the bsums coefficients, iq4_xs sign masks, d / dmin), made by the same decoder.  A missing row
 * of a partial panel is all zero (its results are not stored).
 *
 * Bit-identity with the 1-row kernel: per (weight row, activation row, super-block) the tile
 * forms the same 16 int32 lanes s (q3_K: madd(bsums, c16) + the dpwssd chain; others: the
 * chain from zero), then acc = fmadd(d * dy, float(s), acc), and for q2_K macc = fmadd(dmin * dy,
 * float(madd(bsums, mins)), macc) on 8 lanes; result reduce_add(acc) [- hsum256(macc)].  If the
 * 1-row kernel changes its float operations this file must follow (tests/test_gemm.c).
 */
#include "quant/gemm.h"

#include <immintrin.h>
#include <string.h>

#include "quant/quant_impl.h"
#include "quant/quant_lowbit_simd.h"
#include "quant/quant_simd_common.h" /* hsum256: the vec-dot kernels' reduction order */

#define LB_MR 2
#define LB_NR 4

static size_t lb_panel_bytes(int64_t n) { return (size_t)(n / NX_QK_K) * LB_MR * sizeof(nx_lb_panel_row); }

ALWAYS_INLINE void lb_pack(int kind, const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    const int64_t nb = n / NX_QK_K;
    nx_lb_panel_row *p = panel;
    for (int64_t ib = 0; ib < nb; ib++)
        for (int m = 0; m < LB_MR; m++) {
            nx_lb_panel_row *pr = &p[ib * LB_MR + m];
            if (m < rows) nx_lb_decode_avx512(kind, (const char *)w + (size_t)m * row_bytes, ib, pr);
            else memset(pr, 0, sizeof *pr);
        }
}

ALWAYS_INLINE void lb_tile(int kind, int64_t n, const void *panel, const void *const *x, float *out) {
    const int64_t nb = n / NX_QK_K;
    const nx_lb_panel_row *p = panel;
    __m512 acc[LB_MR][LB_NR];
    __m256 macc[LB_MR][LB_NR];
    for (int m = 0; m < LB_MR; m++)
        for (int r = 0; r < LB_NR; r++) {
            acc[m][r] = _mm512_setzero_ps();
            macc[m][r] = _mm256_setzero_ps();
        }
    for (int64_t ib = 0; ib < nb; ib++) {
        for (int m = 0; m < LB_MR; m++) {
            const nx_lb_panel_row *pr = &p[ib * LB_MR + m];
            __m512i wq[4], ws[4];
            __mmask64 neg[4];
            for (int g = 0; g < 4; g++) {
                wq[g] = _mm512_load_si512(pr->q[g]);
                ws[g] = _mm512_load_si512(pr->sc[g]);
                neg[g] = (__mmask64)pr->neg[g];
            }
            const __m256i c16 = _mm256_load_si256((const __m256i *)pr->c16);
            const __m512 dv = _mm512_set1_ps(pr->d);
            const __m256 dminv = _mm256_set1_ps(pr->dmin);
            for (int r = 0; r < LB_NR; r++) {
                const nx_block_q8_K *a = (const nx_block_q8_K *)x[r] + ib;
                __m512i s = _mm512_setzero_si512();
                if (kind == LB_Q3_K)
                    s = _mm512_madd_epi16(_mm512_zextsi256_si512(_mm256_loadu_si256((const __m256i *)a->bsums)),
                                          _mm512_zextsi256_si512(c16));
                for (int g = 0; g < 4; g++) {
                    __m512i y = _mm512_loadu_si512(a->qs + 64 * g);
                    if (kind == LB_IQ4_XS) y = _mm512_mask_sub_epi8(y, neg[g], _mm512_setzero_si512(), y);
                    s = _mm512_dpwssd_epi32(s, _mm512_maddubs_epi16(wq[g], y), ws[g]);
                }
                acc[m][r] = _mm512_fmadd_ps(_mm512_mul_ps(dv, _mm512_set1_ps(a->d)), _mm512_cvtepi32_ps(s), acc[m][r]);
                if (kind == LB_Q2_K) {
                    const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), c16);
                    macc[m][r] = _mm256_fmadd_ps(_mm256_mul_ps(dminv, _mm256_set1_ps(a->d)), _mm256_cvtepi32_ps(mm),
                                                 macc[m][r]);
                }
            }
        }
    }
    for (int r = 0; r < LB_NR; r++)
        for (int m = 0; m < LB_MR; m++)
            out[r * LB_MR + m] = kind == LB_Q2_K ? _mm512_reduce_add_ps(acc[m][r]) - hsum256(macc[m][r])
                                                 : _mm512_reduce_add_ps(acc[m][r]);
}

static void q2_K_pack(const void *w, size_t rb, int rows, int64_t n, void *panel) { lb_pack(LB_Q2_K, w, rb, rows, n, panel); }
static void q3_K_pack(const void *w, size_t rb, int rows, int64_t n, void *panel) { lb_pack(LB_Q3_K, w, rb, rows, n, panel); }
static void iq4_xs_pack(const void *w, size_t rb, int rows, int64_t n, void *panel) {
    lb_pack(LB_IQ4_XS, w, rb, rows, n, panel);
}
static void q2_K_tile(int64_t n, const void *panel, const void *const *x, float *out) { lb_tile(LB_Q2_K, n, panel, x, out); }
static void q3_K_tile(int64_t n, const void *panel, const void *const *x, float *out) { lb_tile(LB_Q3_K, n, panel, x, out); }
static void iq4_xs_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    lb_tile(LB_IQ4_XS, n, panel, x, out);
}

const nx_gemm_ops nx_gemm_q2_K_avx512 = {LB_MR, LB_NR, NULL, NULL, lb_panel_bytes, q2_K_pack, q2_K_tile};
const nx_gemm_ops nx_gemm_q3_K_avx512 = {LB_MR, LB_NR, NULL, NULL, lb_panel_bytes, q3_K_pack, q3_K_tile};
const nx_gemm_ops nx_gemm_iq4_xs_avx512 = {LB_MR, LB_NR, NULL, NULL, lb_panel_bytes, iq4_xs_pack, iq4_xs_tile};
