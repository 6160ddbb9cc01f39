/* quant_convert.c - float <-> block-format conversion for every computable nx_type.
 *
 * to_float is exact dequantisation: the same float operations, in the same order, as the GGUF
 * reference (ggml's dequantize_row_*), so our output is bit-identical to ggml's for the same
 * blocks (tests/test_quant_fixtures.c checks this against ggml's own output).
 *
 * from_float is the reference quantiser.  It follows the published GGUF reference algorithms
 * (round-to-nearest per block for the legacy formats, the weighted scale/min search for the
 * K formats) operation for operation, so it produces the same bytes as ggml's reference
 * quantiser; the fixture test reports, per format, whether it does.  These run on weights
 * (offline) and on activations (once per matmul, in matmul.c), never in the inner dot loops.
 *
 * Floating-point note: this file must not be compiled with FMA contraction (-ffp-contract=fast
 * plus -mfma) or -ffast-math, or the results would drift from the reference in the last bit.
 * The project builds it in ISO C11 mode (contraction off) for the baseline ISA.
 */
#include "quant/quant_impl.h"

#include <float.h>
#include <math.h>
#include <string.h>

/* ------------------------------------------------------------------------------------------
 * Plain formats
 * ------------------------------------------------------------------------------------------ */

void nx_to_float_f32(const void *src, float *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }
void nx_from_float_f32(const float *src, void *dst, int64_t n) { memcpy(dst, src, (size_t)n * sizeof(float)); }

void nx_to_float_f16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = nx_f16_to_f32(s[i]);
}
void nx_from_float_f16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = nx_f32_to_f16(src[i]);
}

void nx_to_float_bf16(const void *src, float *dst, int64_t n) {
    const uint16_t *s = src;
    for (int64_t i = 0; i < n; i++) dst[i] = nx_bf16_to_f32(s[i]);
}
void nx_from_float_bf16(const float *src, void *dst, int64_t n) {
    uint16_t *d = dst;
    for (int64_t i = 0; i < n; i++) d[i] = nx_f32_to_bf16(src[i]);
}

/* ------------------------------------------------------------------------------------------
 * Legacy 32-element formats
 * ------------------------------------------------------------------------------------------ */

/* Signed absolute maximum of a block: the element with the largest |v| (first one on ties). */
static float signed_absmax(const float *x, int n) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    return max;
}

/* Symmetric formats: d = max / -2^(bits-1), so the extreme element maps to q = 0 and every
 * other to q = trunc(x/d + 2^(bits-1) + 0.5) clamped to the top code.  Shared by q4_0 and
 * q5_0; `half` is 8 or 16.  Writes the codes (0..2*half-1) to q[32]. */
static float symmetric_codes(const float *x, int half, uint8_t *q) {
    const float max = signed_absmax(x, NX_QK);
    const float d = max / (float)-half;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    const float bias = (float)half + 0.5f;
    for (int j = 0; j < NX_QK; j++) {
        int v = (int8_t)(x[j] * id + bias); /* in [0, 2*half] by construction */
        q[j] = (uint8_t)(v < 2 * half - 1 ? v : 2 * half - 1);
    }
    return d;
}

/* Asymmetric formats: d = (max - min) / (2^bits - 1), q = trunc((x - min)/d + 0.5).  Shared by
 * q4_1 and q5_1 (nmax = 15 / 31).  *min_out receives the block minimum. */
static float asymmetric_codes(const float *x, int nmax, uint8_t *q, float *min_out) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < NX_QK; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / (float)nmax;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < NX_QK; j++) {
        int v = (int8_t)((x[j] - min) * id + 0.5f);
        q[j] = (uint8_t)(v < nmax ? v : nmax);
    }
    *min_out = min;
    return d;
}

void nx_pack_nibbles(const uint8_t q[NX_QK], uint8_t qs[NX_QK / 2], uint8_t *qh) {
    uint32_t h = 0;
    for (int j = 0; j < NX_QK / 2; j++) {
        qs[j] = (uint8_t)((q[j] & 0xF) | ((q[j + 16] & 0xF) << 4));
        h |= (uint32_t)((q[j] >> 4) & 1) << j;
        h |= (uint32_t)((q[j + 16] >> 4) & 1) << (j + 16);
    }
    if (qh) memcpy(qh, &h, 4);
}

void nx_from_float_q4_0(const float *src, void *dst, int64_t n) {
    nx_block_q4_0 *y = dst;
    uint8_t q[NX_QK];
    for (int64_t i = 0; i < n / NX_QK; i++) {
        y[i].d = nx_f32_to_f16(symmetric_codes(src + i * NX_QK, 8, q));
        nx_pack_nibbles(q, y[i].qs, NULL);
    }
}

void nx_to_float_q4_0(const void *src, float *dst, int64_t n) {
    const nx_block_q4_0 *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        float *y = dst + i * NX_QK;
        for (int j = 0; j < NX_QK / 2; j++) {
            y[j] = (float)((x[i].qs[j] & 0xF) - 8) * d;
            y[j + 16] = (float)((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

void nx_from_float_q4_1(const float *src, void *dst, int64_t n) {
    nx_block_q4_1 *y = dst;
    uint8_t q[NX_QK];
    for (int64_t i = 0; i < n / NX_QK; i++) {
        float min;
        float d = asymmetric_codes(src + i * NX_QK, 15, q, &min);
        y[i].d = nx_f32_to_f16(d);
        y[i].m = nx_f32_to_f16(min);
        nx_pack_nibbles(q, y[i].qs, NULL);
    }
}

void nx_to_float_q4_1(const void *src, float *dst, int64_t n) {
    const nx_block_q4_1 *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d), m = nx_f16_to_f32(x[i].m);
        float *y = dst + i * NX_QK;
        for (int j = 0; j < NX_QK / 2; j++) {
            y[j] = (float)(x[i].qs[j] & 0xF) * d + m;
            y[j + 16] = (float)(x[i].qs[j] >> 4) * d + m;
        }
    }
}

void nx_from_float_q5_0(const float *src, void *dst, int64_t n) {
    nx_block_q5_0 *y = dst;
    uint8_t q[NX_QK];
    for (int64_t i = 0; i < n / NX_QK; i++) {
        y[i].d = nx_f32_to_f16(symmetric_codes(src + i * NX_QK, 16, q));
        nx_pack_nibbles(q, y[i].qs, y[i].qh);
    }
}

/* The 5-bit code of element j (0..31) of a q5 block. */
static inline int q5_code(const uint8_t *qs, uint32_t qh, int j) {
    int lo = j < 16 ? (qs[j] & 0xF) : (qs[j - 16] >> 4);
    return lo | (int)(((qh >> j) & 1u) << 4);
}

void nx_to_float_q5_0(const void *src, float *dst, int64_t n) {
    const nx_block_q5_0 *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < NX_QK; j++) dst[i * NX_QK + j] = (float)(q5_code(x[i].qs, qh, j) - 16) * d;
    }
}

void nx_from_float_q5_1(const float *src, void *dst, int64_t n) {
    nx_block_q5_1 *y = dst;
    uint8_t q[NX_QK];
    for (int64_t i = 0; i < n / NX_QK; i++) {
        float min;
        float d = asymmetric_codes(src + i * NX_QK, 31, q, &min);
        y[i].d = nx_f32_to_f16(d);
        y[i].m = nx_f32_to_f16(min);
        nx_pack_nibbles(q, y[i].qs, y[i].qh);
    }
}

void nx_to_float_q5_1(const void *src, float *dst, int64_t n) {
    const nx_block_q5_1 *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d), m = nx_f16_to_f32(x[i].m);
        uint32_t qh;
        memcpy(&qh, x[i].qh, 4);
        for (int j = 0; j < NX_QK; j++) dst[i * NX_QK + j] = (float)q5_code(x[i].qs, qh, j) * d + m;
    }
}

/* q8_0 / q8_1: d = amax / 127, q = round-half-away(x / d).  Returns d, codes in q. */
static float q8_codes(const float *x, int8_t *q) {
    float amax = 0.0f;
    for (int j = 0; j < NX_QK; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    for (int j = 0; j < NX_QK; j++) q[j] = (int8_t)roundf(x[j] * id);
    return d;
}

void nx_from_float_q8_0_scalar(const float *src, void *dst, int64_t n) {
    nx_block_q8_0 *y = dst;
    for (int64_t i = 0; i < n / NX_QK; i++) y[i].d = nx_f32_to_f16(q8_codes(src + i * NX_QK, y[i].qs));
}

/* Activation quantisers: the AVX-512 versions give bit-identical blocks (quant_convert_avx512.c);
 * short rows (one block at a time) skip the ISA query. */
void nx_from_float_q8_0(const float *src, void *dst, int64_t n) {
#if defined(NX_HAVE_X86_KERNELS)
    if (n >= 8 * NX_QK && nx_cpu_isa() >= NX_ISA_AVX512) {
        nx_from_float_q8_0_avx512(src, dst, n);
        return;
    }
#endif
    nx_from_float_q8_0_scalar(src, dst, n);
}

void nx_to_float_q8_0(const void *src, float *dst, int64_t n) {
    const nx_block_q8_0 *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        for (int j = 0; j < NX_QK; j++) dst[i * NX_QK + j] = (float)x[i].qs[j] * d;
    }
}

void nx_from_float_q8_1(const float *src, void *dst, int64_t n) {
    nx_block_q8_1 *y = dst;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = q8_codes(src + i * NX_QK, y[i].qs);
        int sum = 0;
        for (int j = 0; j < NX_QK; j++) sum += y[i].qs[j];
        y[i].d = nx_f32_to_f16(d);
        y[i].s = nx_f32_to_f16((float)sum * d);
    }
}

void nx_to_float_q8_1(const void *src, float *dst, int64_t n) {
    const nx_block_q8_1 *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        for (int j = 0; j < NX_QK; j++) dst[i * NX_QK + j] = (float)x[i].qs[j] * d;
    }
}

/* ------------------------------------------------------------------------------------------
 * K formats (256-element super-blocks)
 * ------------------------------------------------------------------------------------------ */

/* Scale/min search for one sub-block of an asymmetric K format (q4_K: nmax 15, q5_K: 31).
 * Model x ~ scale * L + min with min <= 0, L in [0, nmax], error weighted by w.  Starts from
 * the plain min/max grid, then tries nstep+1 alternative grids (nmax + rmin + rdelta*is
 * steps over the range) and keeps the weighted-least-squares fit with the lowest error
 * (error: w * diff^2, or w * |diff| with use_mad as q2_K asks).
 * Returns the scale; *neg_min receives -min (>= 0).  aux: scratch of n codes. */
float nx_fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *aux,
                       float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0];
    float sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max == min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.0f;
    }
    float iscale = (float)nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        int l = nx_round_even(iscale * (x[i] - min));
        L[i] = (uint8_t)(l < 0 ? 0 : l > nmax ? nmax : l);
        float diff = scale * L[i] + min - x[i];
        best_error += w[i] * (use_mad ? fabsf(diff) : diff * diff);
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * (float)is + (float)nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = nx_round_even(iscale * (x[i] - min));
            l = l < 0 ? 0 : l > nmax ? nmax : l;
            aux[i] = (uint8_t)l;
            sum_l += w[i] * (float)l;
            sum_l2 += w[i] * (float)l * (float)l;
            sum_xl += w[i] * (float)l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * aux[i] + this_min - x[i];
                err += w[i] * (use_mad ? fabsf(diff) : diff * diff);
            }
            if (err < best_error) {
                memcpy(L, aux, (size_t)n);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

void nx_pack_k4_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t scales[NX_K_SCALE_SIZE]) {
    memset(scales, 0, NX_K_SCALE_SIZE);
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            scales[j] = ls[j];
            scales[j + 4] = lm[j];
        } else {
            scales[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            scales[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            scales[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Common part of the q4_K / q5_K quantisers: fits the 8 sub-blocks, quantises their scales
 * and mins to 6 bits against fp16 super-scales, then recomputes the codes L[256] against the
 * quantised scales.  nmax 15 or 31; the search parameters are those of the GGUF reference. */
static void quantize_k4_superblock(const float *x, int nmax, float rmin, int nstep, uint16_t *d_out,
                                   uint16_t *dmin_out, uint8_t *scales, uint8_t *L) {
    float sub_scale[8], sub_min[8];
    float weights[32];
    uint8_t aux[32];
    float max_scale = 0, max_min = 0;
    for (int j = 0; j < 8; j++) {
        const float *xs = x + 32 * j;
        float sum_x2 = 0;
        for (int l = 0; l < 32; l++) sum_x2 += xs[l] * xs[l];
        float av_x = sqrtf(sum_x2 / 32);
        for (int l = 0; l < 32; l++) weights[l] = av_x + fabsf(xs[l]);
        sub_scale[j] = nx_fit_scale_min(32, nmax, xs, weights, L + 32 * j, &sub_min[j], aux, rmin, 0.1f, nstep, false);
        if (sub_scale[j] > max_scale) max_scale = sub_scale[j];
        if (sub_min[j] > max_min) max_min = sub_min[j];
    }
    float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
    float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
    uint8_t ls[8], lm[8];
    for (int j = 0; j < 8; j++) {
        /* the reference stores the rounded value in a uint8_t before clamping to 63 */
        uint8_t s = (uint8_t)nx_round_even(inv_scale * sub_scale[j]);
        uint8_t m = (uint8_t)nx_round_even(inv_min * sub_min[j]);
        ls[j] = s < 63 ? s : 63;
        lm[j] = m < 63 ? m : 63;
    }
    nx_pack_k4_scales(ls, lm, scales);
    *d_out = nx_f32_to_f16(max_scale / 63.f);
    *dmin_out = nx_f32_to_f16(max_min / 63.f);
    nx_k4_codes(x, scales, *d_out, *dmin_out, nmax, L);
}

void nx_k4_codes(const float *x, const uint8_t scales[NX_K_SCALE_SIZE], uint16_t d16, uint16_t dmin16, int nmax,
                 uint8_t L[NX_QK_K]) {
    const float d_super = nx_f16_to_f32(d16), dmin_super = nx_f16_to_f32(dmin16);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        nx_k4_scale_min(j, scales, &sc, &m);
        const float d = d_super * sc;
        if (!d) continue; /* keep the codes of the fit */
        const float dm = dmin_super * m;
        for (int i = 0; i < 32; i++) L[32 * j + i] = (uint8_t)nx_clampi(nx_round_even((x[32 * j + i] + dm) / d), 0, nmax);
    }
}

void nx_pack_k4_codes(const uint8_t L[NX_QK_K], uint8_t qs[NX_QK_K / 2], uint8_t *qh) {
    if (qh) memset(qh, 0, NX_QK_K / 8);
    for (int g = 0; g < 4; g++)
        for (int l = 0; l < 32; l++) {
            const int lo = L[64 * g + l], hi = L[64 * g + 32 + l];
            qs[32 * g + l] = (uint8_t)((lo & 0xF) | ((hi & 0xF) << 4));
            if (qh) qh[l] |= (uint8_t)(((lo >> 4) << (2 * g)) | ((hi >> 4) << (2 * g + 1)));
        }
}

void nx_from_float_q4_K(const float *src, void *dst, int64_t n) {
    nx_block_q4_K *y = dst;
    uint8_t L[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        quantize_k4_superblock(src + i * NX_QK_K, 15, -1.0f, 20, &y[i].d, &y[i].dmin, y[i].scales, L);
        nx_pack_k4_codes(L, y[i].qs, NULL);
    }
}

void nx_to_float_q4_K(const void *src, float *dst, int64_t n) {
    const nx_block_q4_K *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_f16_to_f32(x[i].d), dmin = nx_f16_to_f32(x[i].dmin);
        float *y = dst + i * NX_QK_K;
        for (int g = 0; g < 4; g++) {
            uint8_t sc, m;
            nx_k4_scale_min(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            nx_k4_scale_min(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t *q = x[i].qs + 32 * g;
            for (int l = 0; l < 32; l++) y[64 * g + l] = d1 * (float)(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; l++) y[64 * g + 32 + l] = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

void nx_from_float_q5_K(const float *src, void *dst, int64_t n) {
    nx_block_q5_K *y = dst;
    uint8_t L[NX_QK_K];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        quantize_k4_superblock(src + i * NX_QK_K, 31, -0.5f, 15, &y[i].d, &y[i].dmin, y[i].scales, L);
        nx_pack_k4_codes(L, y[i].qs, y[i].qh);
    }
}

void nx_to_float_q5_K(const void *src, float *dst, int64_t n) {
    const nx_block_q5_K *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_f16_to_f32(x[i].d), dmin = nx_f16_to_f32(x[i].dmin);
        float *y = dst + i * NX_QK_K;
        for (int g = 0; g < 4; g++) {
            uint8_t sc, m;
            nx_k4_scale_min(2 * g, x[i].scales, &sc, &m);
            const float d1 = d * sc, m1 = dmin * m;
            nx_k4_scale_min(2 * g + 1, x[i].scales, &sc, &m);
            const float d2 = d * sc, m2 = dmin * m;
            const uint8_t *q = x[i].qs + 32 * g;
            for (int l = 0; l < 32; l++) {
                int lo = (q[l] & 0xF) | (((x[i].qh[l] >> (2 * g)) & 1) << 4);
                int hi = (q[l] >> 4) | (((x[i].qh[l] >> (2 * g + 1)) & 1) << 4);
                y[64 * g + l] = d1 * (float)lo - m1;
                y[64 * g + 32 + l] = d2 * (float)hi - m2;
            }
        }
    }
}

/* Symmetric scale search for one q6_K sub-block of 16 (codes L in [0, 63] = l + 32): the
 * reference's weighted (w = x^2) search over 19 candidate grids around nmax = 32. */
static float fit_scale_q6(const float *x, int8_t *L) {
    const int n = 16, nmax = 32;
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = nx_round_even(iscale * x[i]);
        l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
        L[i] = (int8_t)(l + nmax);
        float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * (float)is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = nx_round_even(iscale * x[i]);
            l = l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l;
            float w = x[i] * x[i];
            sumlx += w * x[i] * (float)l;
            suml2 += w * (float)l * (float)l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) {
                int l = nx_round_even(iscale * x[i]);
                L[i] = (int8_t)(nmax + (l < -nmax ? -nmax : l > nmax - 1 ? nmax - 1 : l));
            }
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

void nx_from_float_q6_K(const float *src, void *dst, int64_t n) {
    nx_block_q6_K *y = dst;
    int8_t L[NX_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = fit_scale_q6(x + 16 * ib, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < 1e-15f) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        const float iscale = -128.f / max_scale;
        y[i].d = nx_f32_to_f16(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int s = nx_round_even(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        const float d_super = nx_f16_to_f32(y[i].d);
        for (int j = 0; j < 16; j++) {
            const float d = d_super * y[i].scales[j];
            if (!d) continue;
            for (int ii = 0; ii < 16; ii++) {
                int l = nx_round_even(x[16 * j + ii] / d);
                l = l < -32 ? -32 : l > 31 ? 31 : l;
                L[16 * j + ii] = (int8_t)(l + 32);
            }
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

/* The 6-bit code (0..63) of element e (0..255) of a q6_K block. */
static inline int q6_code(const nx_block_q6_K *b, int e) {
    const int h = e / 128, r = e % 128, k = r / 32, l = r % 32;
    const uint8_t lq = b->ql[64 * h + 32 * (k & 1) + l];
    const int lo = (k < 2) ? (lq & 0xF) : (lq >> 4);
    const int hi = (b->qh[32 * h + l] >> (2 * k)) & 3;
    return lo | (hi << 4);
}

void nx_to_float_q6_K(const void *src, float *dst, int64_t n) {
    const nx_block_q6_K *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        for (int e = 0; e < NX_QK_K; e++) {
            /* (d * scale) * q, in this order, as the reference */
            dst[i * NX_QK_K + e] = d * (float)x[i].scales[e / 16] * (float)(q6_code(&x[i], e) - 32);
        }
    }
}

void nx_from_float_q8_K(const float *src, void *dst, int64_t n) {
#if defined(NX_HAVE_X86_KERNELS)
    if (nx_cpu_isa() >= NX_ISA_AVX512) {
        nx_from_float_q8_K_avx512(src, dst, n);
        return;
    }
#endif
    nx_from_float_q8_K_scalar(src, dst, n);
}

void nx_from_float_q8_K_scalar(const float *src, void *dst, int64_t n) {
    nx_block_q8_K *y = dst;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        float max = 0, amax = 0;
        for (int j = 0; j < NX_QK_K; j++) {
            if (fabsf(x[j]) > amax) {
                amax = fabsf(x[j]);
                max = x[j];
            }
        }
        if (!amax) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        /* -127/max (not -128) so that the extreme element is -127 and never -128 */
        const float iscale = -127.f / max;
        for (int j = 0; j < NX_QK_K; j++) {
            int v = nx_round_even(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
        }
        for (int j = 0; j < 16; j++) {
            int sum = 0;
            for (int k = 0; k < 16; k++) sum += y[i].qs[16 * j + k];
            y[i].bsums[j] = (int16_t)sum;
        }
        y[i].d = 1 / iscale;
    }
}

void nx_to_float_q8_K(const void *src, float *dst, int64_t n) {
    const nx_block_q8_K *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++)
        for (int j = 0; j < NX_QK_K; j++) dst[i * NX_QK_K + j] = x[i].d * (float)x[i].qs[j];
}
