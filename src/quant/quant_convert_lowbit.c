/* quant_convert_lowbit.c - float <-> block conversion for q2_K, q3_K, iq4_nl and iq4_xs.
 *
 * As in quant_convert.c: to_float repeats the GGUF reference dequantisation operation for
 * operation (bit-identical to ggml's), and from_float is the quantiser GGUF model files are made
 * with when no importance matrix is given (ggml_quantize_chunk without imatrix, i.e. what
 * llama-quantize writes), byte-identical to it (tests/test_quant_fixtures.c checks both against
 * ggml's own output).  For q2_K / q3_K that is the reference quantiser; for iq4_nl it is the
 * model-file search (7 trial scales either side), not ggml's separate row reference (which
 * tries none); iq4_xs runs the same search per sub-block of 32.
 *
 * Same floating-point rule as quant_convert.c: no FMA contraction, no -ffast-math.
 */
#include "quant/quant_impl.h"

#include <math.h>
#include <string.h>

/* Packs 256 2-bit codes (low two bits of L) into qs[64] in the q2_K / q3_K order. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 32; l++)
            qs[32 * h + l] = (uint8_t)(L[128 * h + l] | (L[128 * h + l + 32] << 2) | (L[128 * h + l + 64] << 4) |
                                       (L[128 * h + l + 96] << 6));
}

/* ---- q2_K ------------------------------------------------------------------------------------ */

void nx_from_float_q2_K(const float *src, void *dst, int64_t n) {
    nx_block_q2_K *y = dst;
    uint8_t L[NX_QK_K], aux[16];
    float weights[16], mins[16], scales[16];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 16; j++) {
            for (int l = 0; l < 16; l++) weights[l] = fabsf(x[16 * j + l]);
            scales[j] = nx_fit_scale_min(16, 3, x + 16 * j, weights, L + 16 * j, &mins[j], aux, -0.5f, 0.1f, 15, true);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        if (max_scale > 0) {
            const float iscale = 15.f / max_scale;
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)nx_round_even(iscale * scales[j]);
            y[i].d = nx_f32_to_f16(max_scale / 15.f);
        } else {
            memset(y[i].scales, 0, sizeof y[i].scales);
            y[i].d = nx_f32_to_f16(0.f);
        }
        if (max_min > 0) {
            const float iscale = 15.f / max_min;
            for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(nx_round_even(iscale * mins[j]) << 4);
            y[i].dmin = nx_f32_to_f16(max_min / 15.f);
        } else {
            y[i].dmin = nx_f32_to_f16(0.f);
        }
        for (int j = 0; j < 16; j++) {
            const float d = nx_f16_to_f32(y[i].d) * (float)(y[i].scales[j] & 0xF);
            if (!d) continue; /* keep the codes of the fit */
            const float dm = nx_f16_to_f32(y[i].dmin) * (float)(y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)nx_clampi(nx_round_even((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

void nx_to_float_q2_K(const void *src, float *dst, int64_t n) {
    const nx_block_q2_K *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_f16_to_f32(x[i].d), dmin = nx_f16_to_f32(x[i].dmin);
        float *y = dst + i * NX_QK_K;
        for (int e = 0; e < NX_QK_K; e++) {
            const uint8_t sc = x[i].scales[e / 16];
            const float dl = d * (float)(sc & 0xF), ml = dmin * (float)(sc >> 4);
            const int q = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            y[e] = dl * (float)q - ml;
        }
    }
}

/* ---- q3_K ------------------------------------------------------------------------------------ */

/* The reference's symmetric fit of one sub-block of 16 to signed codes in [-nmax, nmax - 1]
 * (weights x^2), refined by up to 5 passes of single-code moves that raise sumlx^2 / suml2.
 * L receives the codes + nmax; returns the scale. */
static float fit_q3(const float *x, int8_t *L) {
    const int n = 16, nmax = 4;
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        const float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < 1e-15f) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    const float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        const int l = nx_clampi(nx_round_even(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        const float w = x[i] * x[i];
        sumlx += w * x[i] * (float)l;
        suml2 += w * (float)l * (float)l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            const float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * (float)L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * (float)L[i] * (float)L[i];
                const int new_l = nx_clampi(nx_round_even(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * (float)new_l;
                    sl2 += w * (float)new_l * (float)new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

void nx_from_float_q3_K(const float *src, void *dst, int64_t n) {
    nx_block_q3_K *y = dst;
    int8_t L[NX_QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        float max_scale = 0, amax = 0;
        for (int j = 0; j < 16; j++) {
            scales[j] = fit_q3(x + 16 * j, L + 16 * j);
            const float a = fabsf(scales[j]);
            if (a > amax) {
                amax = a;
                max_scale = scales[j];
            }
        }
        memset(y[i].scales, 0, sizeof y[i].scales);
        if (max_scale) {
            const float iscale = -32.f / max_scale;
            for (int j = 0; j < 16; j++) {
                const int l = nx_clampi((int8_t)nx_round_even(iscale * scales[j]), -32, 31) + 32;
                if (j < 8) y[i].scales[j] = (uint8_t)(l & 0xF);
                else y[i].scales[j - 8] |= (uint8_t)((l & 0xF) << 4);
                y[i].scales[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
            }
            y[i].d = nx_f32_to_f16(1 / iscale);
        } else {
            y[i].d = nx_f32_to_f16(0.f);
        }
        uint8_t s[16];
        nx_q3_unpack_scales(y[i].scales, s);
        for (int j = 0; j < 16; j++) {
            const float d = nx_f16_to_f32(y[i].d) * (float)((int)s[j] - 32);
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(nx_clampi(nx_round_even(x[16 * j + l] / d), -4, 3) + 4);
        }
        memset(y[i].hmask, 0, sizeof y[i].hmask);
        uint8_t low[NX_QK_K];
        for (int e = 0; e < NX_QK_K; e++) {
            if (L[e] > 3) y[i].hmask[e % 32] |= (uint8_t)(1u << (e / 32));
            low[e] = (uint8_t)(L[e] & 3);
        }
        pack_2bit(low, y[i].qs);
    }
}

void nx_to_float_q3_K(const void *src, float *dst, int64_t n) {
    const nx_block_q3_K *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        uint8_t s[16];
        nx_q3_unpack_scales(x[i].scales, s);
        float *y = dst + i * NX_QK_K;
        for (int e = 0; e < NX_QK_K; e++) {
            const float dl = d * (float)((int)s[e / 16] - 32);
            const int lo = (x[i].qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
            const int hi = (x[i].hmask[e % 32] >> (e / 32)) & 1;
            y[e] = dl * (float)(lo - (hi ? 0 : 4));
        }
    }
}

/* ---- iq4_nl / iq4_xs ------------------------------------------------------------------------- */

/* Index of the table value nearest to v; on a tie between two neighbours the upper one (the
 * reference's bisection and comparison, repeated exactly). */
static inline int iq4_index(float v) {
    const int8_t *val = nx_iq4nl_values;
    if (v <= val[0]) return 0;
    if (v >= val[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        const int mid = (lo + hi) / 2;
        if (v < val[mid]) hi = mid;
        else lo = mid;
    }
    return v - val[hi - 1] < val[hi] - v ? hi - 1 : hi;
}

#define IQ4_NTRY 7

/* The scale search of one sub-block of 32 (error weights w: x^2 without an importance matrix):
 * start at d = max / -127 and try the
 * 2 * IQ4_NTRY + 1 grids (itry - 127) / max, keeping the weighted least-squares scale with the
 * largest sumqx^2 / sumq2.  L receives the codes of the starting grid.  Returns the scale (0 for
 * an all-(near-)zero sub-block, whose codes are left as they were). */
static float iq4_fit(const float *xb, const float *w, uint8_t *L) {
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        const float ax = fabsf(xb[j]);
        if (ax > amax) {
            amax = ax;
            max = xb[j];
        }
    }
    if (amax < 1e-15f) return 0;
    const float v0 = (float)nx_iq4nl_values[0];
    float d = -max / v0;
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        const int l = iq4_index(id * xb[j]);
        L[j] = (uint8_t)l;
        const float q = nx_iq4nl_values[l];
        sumqx += w[j] * q * xb[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -IQ4_NTRY; itry <= IQ4_NTRY; itry++) {
        id = (float)(itry + nx_iq4nl_values[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            const float q = nx_iq4nl_values[iq4_index(id * xb[j])];
            sumqx += w[j] * q * xb[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void iq4_pack(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[16 + j] << 4));
}

/* Error weights of a sub-block of 32 of a super-block x of `size` elements: x^2 without an
 * importance matrix, qw * sqrt(sigma2 + x^2) with one (sigma2 = 2 mean(x^2) over the super-block). */
static void iq4_weights(const float *x, int size, const float *qw, int ib, float *w) {
    const float *xb = x + 32 * ib;
    if (!qw) {
        for (int j = 0; j < 32; j++) w[j] = xb[j] * xb[j];
        return;
    }
    float sigma2 = 0;
    for (int j = 0; j < size; j++) sigma2 += x[j] * x[j];
    sigma2 *= 2.f / (float)size;
    for (int j = 0; j < 32; j++) w[j] = qw[32 * ib + j] * sqrtf(sigma2 + xb[j] * xb[j]);
}

static void iq4_nl_row(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_iq4_nl *y = dst;
    uint8_t L[32] = {0}; /* carried across blocks like the reference's (always rewritten below) */
    float w[32];
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float *x = src + i * NX_QK;
        iq4_weights(x, NX_QK, qw ? qw + i * NX_QK : NULL, 0, w);
        const float d = iq4_fit(x, w, L);
        y[i].d = nx_f32_to_f16(d);
        const float id = d ? 1 / d : 0;
        for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(id * x[j]);
        iq4_pack(L, y[i].qs);
    }
}

void nx_from_float_iq4_nl(const float *src, void *dst, int64_t n) { iq4_nl_row(src, dst, n, NULL); }
void nx_from_float_w_iq4_nl(const float *src, void *dst, int64_t n, const float *qw) { iq4_nl_row(src, dst, n, qw); }

void nx_to_float_iq4_nl(const void *src, float *dst, int64_t n) {
    const nx_block_iq4_nl *x = src;
    for (int64_t i = 0; i < n / NX_QK; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        float *y = dst + i * NX_QK;
        for (int j = 0; j < 16; j++) {
            y[j] = d * (float)nx_iq4nl_values[x[i].qs[j] & 0xF];
            y[j + 16] = d * (float)nx_iq4nl_values[x[i].qs[j] >> 4];
        }
    }
}

static void iq4_xs_row(const float *src, void *dst, int64_t n, const float *qw) {
    nx_block_iq4_xs *y = dst;
    uint8_t L[32];
    float scales[8], w[32];
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float *x = src + i * NX_QK_K;
        float max_scale = 0, amax_scale = 0;
        for (int ib = 0; ib < 8; ib++) {
            iq4_weights(x, NX_QK_K, qw ? qw + i * NX_QK_K : NULL, ib, w);
            scales[ib] = iq4_fit(x + 32 * ib, w, L);
            const float a = fabsf(scales[ib]);
            if (a > amax_scale) {
                amax_scale = a;
                max_scale = scales[ib];
            }
        }
        const float d = -max_scale / 32;
        y[i].d = nx_f32_to_f16(d);
        y[i].scales_h = 0;
        const float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < 8; ib++) {
            int l = nx_clampi(nx_round_even(id * scales[ib]), -32, 31);
            const float dl = d * (float)l;
            const float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(idl * x[32 * ib + j]);
            iq4_pack(L, y[i].qs + 16 * ib);
            l += 32;
            if (ib % 2 == 0) y[i].scales_l[ib / 2] = (uint8_t)(l & 0xF);
            else y[i].scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            y[i].scales_h |= (uint16_t)((l >> 4) << (2 * ib));
        }
    }
}

void nx_from_float_iq4_xs(const float *src, void *dst, int64_t n) { iq4_xs_row(src, dst, n, NULL); }
void nx_from_float_w_iq4_xs(const float *src, void *dst, int64_t n, const float *qw) { iq4_xs_row(src, dst, n, qw); }

/* The 6-bit scale of sub-block ib of an iq4_xs block (value ls - 32). */
static inline int iq4_xs_ls(const nx_block_iq4_xs *b, int ib) {
    return ((b->scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | (((b->scales_h >> (2 * ib)) & 3) << 4);
}

void nx_to_float_iq4_xs(const void *src, float *dst, int64_t n) {
    const nx_block_iq4_xs *x = src;
    for (int64_t i = 0; i < n / NX_QK_K; i++) {
        const float d = nx_f16_to_f32(x[i].d);
        for (int ib = 0; ib < 8; ib++) {
            const float dl = d * (float)(iq4_xs_ls(&x[i], ib) - 32);
            const uint8_t *qs = x[i].qs + 16 * ib;
            float *y = dst + i * NX_QK_K + 32 * ib;
            for (int j = 0; j < 16; j++) {
                y[j] = dl * (float)nx_iq4nl_values[qs[j] & 0xF];
                y[j + 16] = dl * (float)nx_iq4nl_values[qs[j] >> 4];
            }
        }
    }
}
