/* quant_dot_lowbit.c - scalar (reference) dot kernels for q2_K, q3_K, iq4_xs (against q8_K) and
 * iq4_nl (against q8_0): the definition the SIMD kernels in quant_lowbit_avx2.c /
 * quant_lowbit_avx512.c must match up to float summation order (tests/test_quant_kernels.c).
 * Same shape as quant_dot.c: each weight block is decoded once into signed or unsigned codes,
 * dotted in integers against up to ROW_GROUP activation rows, scaled in float per block.
 *
 * Integer ranges: a q2_K/q3_K super-block sums 16 sub-blocks of 16 * 7 * 128 times a scale of
 * at most 32 (< 2^23); an iq4_xs super-block 8 sub-blocks of 32 * 127 * 127 times |ls - 32| <= 32
 * (< 2^28); the q2_K min term 16 * 15 * 16 * 128 (< 2^19).  All fit int32.
 */
#include "quant/quant_impl.h"

#include <string.h>

#define ROW_GROUP 8

static inline const void *act_row(const void *x, size_t stride, int r) {
    return (const char *)x + (size_t)r * stride;
}

/* The 2-bit codes of a q2_K / q3_K block (element e at q[e]). */
static void decode_2bit(const uint8_t *qs, uint8_t *q) {
    for (int e = 0; e < NX_QK_K; e++) q[e] = (qs[32 * (e / 128) + e % 32] >> (2 * ((e % 128) / 32))) & 3;
}

/* q2_K: sum_j (d sc_j q - dmin m_j) dy y = d dy sum_j sc_j sum(q y) - dmin dy sum_j m_j bsum_j. */
void nx_dot_q2_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q2_K *wb = w;
    const int64_t nb = n / NX_QK_K;
    uint8_t q[NX_QK_K];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const nx_block_q2_K *b = &wb[ib];
            decode_2bit(b->qs, q);
            const float d = nx_f16_to_f32(b->d), dmin = nx_f16_to_f32(b->dmin);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_K *xb = (const nx_block_q8_K *)act_row(x, xs, r0 + r) + ib;
                int32_t sumi = 0, summ = 0;
                for (int j = 0; j < 16; j++) {
                    int s = 0;
                    for (int l = 0; l < 16; l++) s += q[16 * j + l] * xb->qs[16 * j + l];
                    sumi += (b->scales[j] & 0xF) * s;
                    summ += (b->scales[j] >> 4) * xb->bsums[j];
                }
                acc[r] += (d * xb->d) * (float)sumi - (dmin * xb->d) * (float)summ;
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

/* q3_K: sum_j d (s_j - 32) (q - 4) dy y over 16 sub-blocks of 16. */
void nx_dot_q3_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q3_K *wb = w;
    const int64_t nb = n / NX_QK_K;
    uint8_t q[NX_QK_K];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const nx_block_q3_K *b = &wb[ib];
            decode_2bit(b->qs, q);
            for (int e = 0; e < NX_QK_K; e++) q[e] |= (uint8_t)(((b->hmask[e % 32] >> (e / 32)) & 1) << 2);
            uint8_t s[16];
            nx_q3_unpack_scales(b->scales, s);
            const float d = nx_f16_to_f32(b->d);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_K *xb = (const nx_block_q8_K *)act_row(x, xs, r0 + r) + ib;
                int32_t sumi = 0;
                for (int j = 0; j < 16; j++) {
                    int t = 0;
                    for (int l = 0; l < 16; l++) t += (q[16 * j + l] - 4) * xb->qs[16 * j + l];
                    sumi += ((int)s[j] - 32) * t;
                }
                acc[r] += (d * xb->d) * (float)sumi;
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

/* The 32 values of an iq4 sub-block from its 16 bytes of nibbles. */
static void decode_iq4(const uint8_t *qs, int8_t *v) {
    for (int j = 0; j < 16; j++) {
        v[j] = nx_iq4nl_values[qs[j] & 0xF];
        v[j + 16] = nx_iq4nl_values[qs[j] >> 4];
    }
}

/* iq4_xs: sum_j d (ls_j - 32) v dy y over 8 sub-blocks of 32. */
void nx_dot_iq4_xs_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_iq4_xs *wb = w;
    const int64_t nb = n / NX_QK_K;
    int8_t v[NX_QK_K];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const nx_block_iq4_xs *b = &wb[ib];
            int ls[8];
            for (int j = 0; j < 8; j++) {
                decode_iq4(b->qs + 16 * j, v + 32 * j);
                ls[j] = (((b->scales_l[j / 2] >> (4 * (j % 2))) & 0xF) | (((b->scales_h >> (2 * j)) & 3) << 4)) - 32;
            }
            const float d = nx_f16_to_f32(b->d);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_K *xb = (const nx_block_q8_K *)act_row(x, xs, r0 + r) + ib;
                int32_t sumi = 0;
                for (int j = 0; j < 8; j++) {
                    int t = 0;
                    for (int l = 0; l < 32; l++) t += v[32 * j + l] * xb->qs[32 * j + l];
                    sumi += ls[j] * t;
                }
                acc[r] += (d * xb->d) * (float)sumi;
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

/* iq4_nl against q8_0: per block (float)sum(v y) * (dw * dy), as q4_0. */
void nx_dot_iq4_nl_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_iq4_nl *wb = w;
    const int64_t nb = n / NX_QK;
    int8_t v[NX_QK];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const float dw = nx_f16_to_f32(wb[ib].d);
            decode_iq4(wb[ib].qs, v);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_0 *xb = (const nx_block_q8_0 *)act_row(x, xs, r0 + r) + ib;
                int t = 0;
                for (int l = 0; l < NX_QK; l++) t += v[l] * xb->qs[l];
                acc[r] += (float)t * (dw * nx_f16_to_f32(xb->d));
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}
