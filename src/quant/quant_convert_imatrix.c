/* quant_convert_imatrix.c - the model-file quantisers with an importance matrix.
 *
 * With per-column importance weights qw (llama-quantize --imatrix: the mean squared activation
 * each input column saw), GGUF model files are made by quantisers that differ from the
 * reference ones (from_float) in their searches, not only in the error weights.  These are
 * those quantisers, operation for operation as ggml's ggml_quantize_chunk runs them with an
 * imatrix, so the bytes are identical (tests/test_quantize_imatrix.sh checks whole files
 * against llama-quantize --imatrix):
 *   - element weights w = qw * sqrt(sigma2 + x^2), sigma2 = mean(x^2) over the row (q4_0, q4_1,
 *     q5_0, q5_1) or super-block (q2_K: mean, q3_K/q4_K/q5_K/iq4_*: 2 x mean); q6_K uses qw as is;
 *   - q4_0/q5_0: symmetric fit (nx_fit_sym below) with nmax 8 / 16; q4_1/q5_1: the scale/min fit
 *     (nx_fit_scale_min) over 37 grids from nmax - 0.9 in steps of 0.05;
 *   - q4_K/q5_K/q2_K: the same scale/min fit per sub-block, then the sub-block scales and mins
 *     quantised by a positive weighted fit (fit_pos) with the sub-blocks' weight sums;
 *   - q3_K: symmetric fit per sub-block of 16 (nmax 4), the 16 scales by the symmetric fit with
 *     nmax 32; q6_K: symmetric fit (nmax 32) with qw, scales as without imatrix;
 *   - iq4_nl/iq4_xs: the non-linear grid search with the weights above.
 * q8_0 (and f16/bf16) ignore importance weights, as in ggml.  n is always one row: the
 * row-level sigma2 of the 32-element formats depends on it.
 *
 * Same floating-point rule as quant_convert.c: no FMA contraction, no -ffast-math.
 */
#include "quant/quant_impl.h"

#include <math.h>
#include <string.h>

#define EPS_ZERO 1e-15f /* a group whose largest |x| is below this is all zero */

/* Symmetric weighted fit of n values to codes l in [-nmax, nmax - 1] (stored as l + nmax in L):
 * the grid -nmax / max (max = the value of largest magnitude), then 18 grids
 * -(nmax + 0.1 is) / max, is = -9..9 without 0, keeping the least-squares scale of the grid
 * with the largest sumlx^2 / suml2.  Returns the scale (0 and L = 0 for an all-zero group). */
static float nx_fit_sym(int n, int nmax, const float *x, int8_t *L, const float *w) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < EPS_ZERO) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)-nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = nx_clampi(nx_round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -((float)nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            const int l = nx_clampi(nx_round_even(iscale * x[i]), -nmax, nmax - 1);
            sumlx += w[i] * x[i] * (float)l;
            suml2 += w[i] * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + nx_clampi(nx_round_even(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Weighted fit of n non-negative values (sub-block scales or mins) to codes in [0, nmax]:
 * the grid nmax / max and 8 grids (nmax + 0.1 is) / max (is = -4..4 without 0) by weighted
 * squared error; then the least-squares scale of the best grid's codes, improved by up to 5
 * passes of single-code moves that raise sumlx^2 / suml2.  Codes are uint8 (as stored), and
 * only the upper bound is clamped (inputs are >= 0 in practice; a negative one keeps the
 * wrapped code, as in the reference).  Returns the scale (0 for an all-zero input). */
static float fit_pos(int n, int nmax, const float *x, uint8_t *L, const float *w) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < EPS_ZERO) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = (float)nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)nx_round_even(iscale * x[i]);
    const float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        const float diff = x[i] - scale * (float)L[i];
        best_mse += w[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        const float iscale_is = (0.1f * (float)is + (float)nmax) / max;
        const float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = nx_round_even(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            const float diff = x[i] - scale_is * (float)l;
            mse += w[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nx_round_even(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += w[i] * x[i] * (float)l;
        suml2 += w[i] * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float slx = sumlx - w[i] * x[i] * (float)L[i];
            float sl2 = suml2 - w[i] * (float)L[i] * (float)L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = nx_round_even(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w[i] * x[i] * (float)new_l;
                    sl2 += w[i] * (float)new_l * (float)new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Sum of squares in order (the reference's sequential float sum). */
static float sum_sq(const float *x, int64_t n) {
    float s = 0;
    for (int64_t i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

/* w[i] = qw[i] * sqrt(sigma2 + x[i]^2) */
static void imatrix_weights(int n, const float *x, const float *qw, float sigma2, float *w) {
    for (int i = 0; i < n; i++) w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
}

/* ---- 32-element formats (sigma2 over the whole row) ------------------------------------------ */

/* q4_0 (nmax 8) / q5_0 (nmax 16): per block the symmetric fit; codes (l + nmax, >= 0) in L. */
static uint16_t fit_block_0(const float *x, const float *qw, float sigma2, int nmax, uint8_t *L) {
    float w[NX_QK];
    imatrix_weights(NX_QK, x, qw, sigma2, w);
    return nx_f32_to_f16(nx_fit_sym(NX_QK, nmax, x, (int8_t *)L, w));
}

void nx_from_float_w_q4_0(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q4_0 *y = dst;
    const float sigma2 = sum_sq(src, n) / (float)n;
    uint8_t L[NX_QK];
    for (int64_t b = 0; b < n / NX_QK; b++) {
        y[b].d = fit_block_0(src + b * NX_QK, qw + b * NX_QK, sigma2, 8, L);
        nx_pack_nibbles(L, y[b].qs, NULL);
    }
}

void nx_from_float_w_q5_0(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q5_0 *y = dst;
    const float sigma2 = sum_sq(src, n) / (float)n;
    uint8_t L[NX_QK];
    for (int64_t b = 0; b < n / NX_QK; b++) {
        y[b].d = fit_block_0(src + b * NX_QK, qw + b * NX_QK, sigma2, 16, L);
        nx_pack_nibbles(L, y[b].qs, y[b].qh);
    }
}

/* q4_1 (nmax 15) / q5_1 (nmax 31): per block the scale/min fit; codes in L. */
static void fit_block_1(const float *x, const float *qw, float sigma2, int nmax, uint16_t *d, uint16_t *m,
                        uint8_t *L) {
    float w[NX_QK], neg_min;
    uint8_t aux[NX_QK];
    imatrix_weights(NX_QK, x, qw, sigma2, w);
    const float scale = nx_fit_scale_min(NX_QK, nmax, x, w, L, &neg_min, aux, -0.9f, 0.05f, 36, false);
    *d = nx_f32_to_f16(scale);
    *m = nx_f32_to_f16(-neg_min);
}

void nx_from_float_w_q4_1(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q4_1 *y = dst;
    const float sigma2 = sum_sq(src, n) / (float)n;
    uint8_t L[NX_QK];
    for (int64_t b = 0; b < n / NX_QK; b++) {
        fit_block_1(src + b * NX_QK, qw + b * NX_QK, sigma2, 15, &y[b].d, &y[b].m, L);
        nx_pack_nibbles(L, y[b].qs, NULL);
    }
}

void nx_from_float_w_q5_1(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q5_1 *y = dst;
    const float sigma2 = sum_sq(src, n) / (float)n;
    uint8_t L[NX_QK];
    for (int64_t b = 0; b < n / NX_QK; b++) {
        fit_block_1(src + b * NX_QK, qw + b * NX_QK, sigma2, 31, &y[b].d, &y[b].m, L);
        nx_pack_nibbles(L, y[b].qs, y[b].qh);
    }
}

/* ---- K formats (sigma2 per super-block) ------------------------------------------------------ */

/* q4_K (nmax 15) / q5_K (nmax 31): sub-block fits, 6-bit scales and mins by fit_pos, codes
 * recomputed against the stored scales into L[256]. */
static void k4_superblock_w(const float *x, const float *qw, int nmax, uint16_t *d_out, uint16_t *dmin_out,
                            uint8_t *scales, uint8_t *L) {
    const float sigma2 = 2 * sum_sq(x, NX_QK_K) / NX_QK_K;
    float w[32], sw[8], sub_scale[8], sub_min[8];
    uint8_t aux[32], ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        imatrix_weights(32, x + 32 * j, qw + 32 * j, sigma2, w);
        float sumw = 0;
        for (int l = 0; l < 32; l++) sumw += w[l];
        sw[j] = sumw;
        sub_scale[j] = nx_fit_scale_min(32, nmax, x + 32 * j, w, L + 32 * j, &sub_min[j], aux, -0.9f, 0.05f, 36, false);
    }
    const float d_block = fit_pos(8, 63, sub_scale, ls, sw);
    const float m_block = fit_pos(8, 63, sub_min, lm, sw);
    for (int j = 0; j < 8; j++) {
        ls[j] = ls[j] < 63 ? ls[j] : 63; /* fit_pos caps at nmax: a no-op kept from q5_K's rule */
        lm[j] = lm[j] < 63 ? lm[j] : 63;
    }
    nx_pack_k4_scales(ls, lm, scales);
    *d_out = nx_f32_to_f16(d_block);
    *dmin_out = nx_f32_to_f16(m_block);
    nx_k4_codes(x, scales, *d_out, *dmin_out, nmax, L);
}

void nx_from_float_w_q4_K(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q4_K *y = dst;
    uint8_t L[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        k4_superblock_w(src + i * NX_QK_K, qw + i * NX_QK_K, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        nx_pack_k4_codes(L, y[i].qs, NULL);
    }
}

void nx_from_float_w_q5_K(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q5_K *y = dst;
    uint8_t L[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        k4_superblock_w(src + i * NX_QK_K, qw + i * NX_QK_K, 31, &y[i].d, &y[i].dmin, y[i].scales, L);
        nx_pack_k4_codes(L, y[i].qs, y[i].qh);
    }
}

void nx_from_float_w_q6_K(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q6_K *y = dst;
    int8_t L[NX_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = nx_fit_sym(16, 32, x + 16 * ib, L + 16 * ib, qw + i * NX_QK_K + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < EPS_ZERO) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = nx_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            const int s = nx_round_even(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        const float d_super = nx_f16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float d = d_super * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) L[16 * j + ii] = (int8_t)(nx_clampi(nx_round_even(x[16 * j + ii] / d), -32, 31) + 32);
        }
        for (int h = 0; h < 2; h++) {
            const int8_t *Lh = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((Lh[l] & 0xF) | ((Lh[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((Lh[l + 32] & 0xF) | ((Lh[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((Lh[l] >> 4) | ((Lh[l + 32] >> 4) << 2) | ((Lh[l + 64] >> 4) << 4) |
                                  ((Lh[l + 96] >> 4) << 6));
            }
        }
    }
}

static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++)
            qs[32 * h + l] = (uint8_t)(L[128 * h + l] | (L[128 * h + l + 32] << 2) | (L[128 * h + l + 64] << 4) |
                                       (L[128 * h + l + 96] << 6));
}

void nx_from_float_w_q2_K(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q2_K *y = dst;
    uint8_t L[NX_QK_K], aux[16], Ls[16], Lm[16];
    float w[16], sw[16], mins[16], scales[16];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        const float sigma2 = sum_sq(x, NX_QK_K) / NX_QK_K;
        for (int j = 0; j < 16; j++) {
            imatrix_weights(16, x + 16 * j, qw + i * NX_QK_K + 16 * j, sigma2, w);
            float s = 0;
            for (int l = 0; l < 16; l++) s += w[l];
            sw[j] = s;
            scales[j] = nx_fit_scale_min(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], aux, -0.9f, 0.05f, 36, false);
        }
        const float dm = fit_pos(16, 15, scales, Ls, sw);
        const float mm = fit_pos(16, 15, mins, Lm, sw);
        y[i].d = nx_f32_to_f16(dm);
        y[i].dmin = nx_f32_to_f16(mm);
        const float d_super = nx_f16_to_f32(y[i].d), m_super = nx_f16_to_f32(y[i].dmin);
        for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        for (int j = 0; j < 16; j++) {
            const float d = d_super * (float)(y[i].scales[j] & 0xF);
            if (!d) continue;
            const float m = m_super * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)nx_clampi(nx_round_even((x[16 * j + l] + m) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

void nx_from_float_w_q3_K(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_q3_K *y = dst;
    int8_t L[NX_QK_K], Ls[16];
    float w[16], sw[16], scales[16];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        const float sigma2 = 2 * sum_sq(x, NX_QK_K) / NX_QK_K;
        for (int j = 0; j < 16; j++) {
            imatrix_weights(16, x + 16 * j, qw + i * NX_QK_K + 16 * j, sigma2, w);
            float s = 0;
            for (int l = 0; l < 16; l++) s += w[l];
            sw[j] = s;
            scales[j] = nx_fit_sym(16, 4, x + 16 * j, L + 16 * j, w);
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        const float d_block = nx_fit_sym(16, 32, scales, Ls, sw);
        for (int j = 0; j < 16; j++) {
            const int l = Ls[j];
            if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
            else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
            y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
        }
        y[i].d = nx_f32_to_f16(d_block);
        const float d_super = nx_f16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const int lo = j < 8 ? y[i].scales[j] & 0xF : y[i].scales[j - 8] >> 4;
            const int sc = (lo | (((y[i].scales[8 + j % 4] >> (2 * (j / 4))) & 3) << 4)) - 32;
            const float d = d_super * (float)sc;
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(nx_clampi(nx_round_even(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* bit 2 of code j goes to hmask[j % 32], bit j / 32 */
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t L2[NX_QK_K];
        for (int j = 0; j < NX_QK_K; j++) {
            int l = L[j];
            if (l > 3) {
                y[i].hmask[j % 32] |= (uint8_t)(1u << (j / 32));
                l -= 4;
            }
            L2[j] = (uint8_t)l;
        }
        pack_2bit(L2, y[i].qs);
    }
}
