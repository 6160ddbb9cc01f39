/* quant_dot.c - scalar (reference) dot kernels: one weight row against nrows activation rows.
 *
 * These define what every SIMD kernel must compute (tests/test_quant_kernels.c compares them).
 * Structure shared by all quantised kernels: for each weight block, decode its codes once into
 * a small int8 array, then dot that against the matching block of each activation row in
 * integer arithmetic, and scale by the block scales in float.  Activation rows are processed
 * in groups of ROW_GROUP so the per-row accumulators stay in a fixed-size local array.
 *
 * Integer ranges (why int32 cannot overflow): a 32-element block product is at most
 * 32 * 31 * 128 (q5 codes times |int8|) < 2^17; a K super-block sums at most 16 sub-blocks of
 * 16 * 64 * 128 times a scale of at most 128, < 2^28.
 *
 * The plain-float kernels (f32/f16/bf16) accumulate in double: they are the accuracy reference.
 */
#include "quant/quant_impl.h"

#include <string.h>

#define ROW_GROUP 8

/* Activation row r of a multi-row call. */
static inline const void *act_row(const void *x, size_t stride, int r) {
    return (const char *)x + (size_t)r * stride;
}

/* ---- plain formats ---------------------------------------------------------------------- */

void nx_dot_f32_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const float *wr = w;
    for (int r = 0; r < nrows; r++) {
        const float *xr = act_row(x, xs, r);
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += (double)wr[i] * (double)xr[i];
        out[r] = (float)acc;
    }
}

void nx_dot_f16_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const uint16_t *wr = w;
    for (int r = 0; r < nrows; r++) {
        const uint16_t *xr = act_row(x, xs, r);
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += (double)nx_f16_to_f32(wr[i]) * (double)nx_f16_to_f32(xr[i]);
        out[r] = (float)acc;
    }
}

void nx_dot_bf16_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const uint16_t *wr = w;
    for (int r = 0; r < nrows; r++) {
        const uint16_t *xr = act_row(x, xs, r);
        double acc = 0;
        for (int64_t i = 0; i < n; i++) acc += (double)nx_bf16_to_f32(wr[i]) * (double)nx_bf16_to_f32(xr[i]);
        out[r] = (float)acc;
    }
}

/* ---- legacy 32-element formats ----------------------------------------------------------- */

static inline int dot32(const int8_t *a, const int8_t *b) {
    int s = 0;
    for (int j = 0; j < NX_QK; j++) s += a[j] * b[j];
    return s;
}

/* Decoded weight block: signed codes (offset already removed for the symmetric formats). */
static void decode_q4_0(const nx_block_q4_0 *b, int8_t *q) {
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)((b->qs[j] & 0xF) - 8);
        q[j + 16] = (int8_t)((b->qs[j] >> 4) - 8);
    }
}

static void decode_q5(const uint8_t *qs, const uint8_t *qh4, int offset, int8_t *q) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        q[j] = (int8_t)(((qs[j] & 0xF) | (((qh >> j) & 1) << 4)) - offset);
        q[j + 16] = (int8_t)(((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset);
    }
}

void nx_dot_q8_0_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q8_0 *wb = w;
    const int64_t nb = n / NX_QK;
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const float dw = nx_f16_to_f32(wb[ib].d);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_0 *xb = (const nx_block_q8_0 *)act_row(x, xs, r0 + r) + ib;
                acc[r] += (float)dot32(wb[ib].qs, xb->qs) * (dw * nx_f16_to_f32(xb->d));
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

void nx_dot_q4_0_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q4_0 *wb = w;
    const int64_t nb = n / NX_QK;
    int8_t q[NX_QK];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const float dw = nx_f16_to_f32(wb[ib].d);
            decode_q4_0(&wb[ib], q);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_0 *xb = (const nx_block_q8_0 *)act_row(x, xs, r0 + r) + ib;
                acc[r] += (float)dot32(q, xb->qs) * (dw * nx_f16_to_f32(xb->d));
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

void nx_dot_q5_0_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q5_0 *wb = w;
    const int64_t nb = n / NX_QK;
    int8_t q[NX_QK];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const float dw = nx_f16_to_f32(wb[ib].d);
            decode_q5(wb[ib].qs, wb[ib].qh, 16, q);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_0 *xb = (const nx_block_q8_0 *)act_row(x, xs, r0 + r) + ib;
                acc[r] += (float)dot32(q, xb->qs) * (dw * nx_f16_to_f32(xb->d));
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

/* q4_1 / q5_1 against q8_1: sum((d q + m) * dy y) = d dy sum(q y) + m * (dy sum(y)), and the
 * second factor is the q8_1 block's precomputed s. */
void nx_dot_q4_1_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q4_1 *wb = w;
    const int64_t nb = n / NX_QK;
    int8_t q[NX_QK];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const float dw = nx_f16_to_f32(wb[ib].d), mw = nx_f16_to_f32(wb[ib].m);
            for (int j = 0; j < 16; j++) {
                q[j] = (int8_t)(wb[ib].qs[j] & 0xF);
                q[j + 16] = (int8_t)(wb[ib].qs[j] >> 4);
            }
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_1 *xb = (const nx_block_q8_1 *)act_row(x, xs, r0 + r) + ib;
                acc[r] += (float)dot32(q, xb->qs) * (dw * nx_f16_to_f32(xb->d)) + mw * nx_f16_to_f32(xb->s);
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

void nx_dot_q5_1_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q5_1 *wb = w;
    const int64_t nb = n / NX_QK;
    int8_t q[NX_QK];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const float dw = nx_f16_to_f32(wb[ib].d), mw = nx_f16_to_f32(wb[ib].m);
            decode_q5(wb[ib].qs, wb[ib].qh, 0, q);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_1 *xb = (const nx_block_q8_1 *)act_row(x, xs, r0 + r) + ib;
                acc[r] += (float)dot32(q, xb->qs) * (dw * nx_f16_to_f32(xb->d)) + mw * nx_f16_to_f32(xb->s);
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

/* ---- K formats against q8_K ---------------------------------------------------------------
 * A q4_K/q5_K super-block is sum_j (d sc_j q - dmin m_j) * (dy y) over sub-blocks j of 32, i.e.
 * d dy sum_j sc_j sum(q y)  -  dmin dy sum_j m_j sum(y), and sum(y) over a sub-block of 32 is
 * the sum of two of q8_K's 16-element bsums. */

static void decode_k4(const uint8_t *qs, const uint8_t *qh, int8_t *q) {
    for (int g = 0; g < 4; g++) {
        for (int l = 0; l < 32; l++) {
            int lo = qs[32 * g + l] & 0xF, hi = qs[32 * g + l] >> 4;
            if (qh) {
                lo |= ((qh[l] >> (2 * g)) & 1) << 4;
                hi |= ((qh[l] >> (2 * g + 1)) & 1) << 4;
            }
            q[64 * g + l] = (int8_t)lo;
            q[64 * g + 32 + l] = (int8_t)hi;
        }
    }
}

static void dot_k4_rows(int64_t n, float *out, const void *w, size_t wsize, bool five_bit, const void *x,
                        size_t xs, int nrows) {
    const int64_t nb = n / NX_QK_K;
    int8_t q[NX_QK_K];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const uint8_t *blk = (const uint8_t *)w + (size_t)ib * wsize;
            uint16_t d16, dmin16;
            const uint8_t *scales, *qs, *qh;
            if (five_bit) {
                const nx_block_q5_K *b = (const nx_block_q5_K *)blk;
                d16 = b->d, dmin16 = b->dmin, scales = b->scales, qs = b->qs, qh = b->qh;
            } else {
                const nx_block_q4_K *b = (const nx_block_q4_K *)blk;
                d16 = b->d, dmin16 = b->dmin, scales = b->scales, qs = b->qs, qh = NULL;
            }
            uint8_t sc[8], m[8];
            for (int j = 0; j < 8; j++) nx_k4_scale_min(j, scales, &sc[j], &m[j]);
            decode_k4(qs, qh, q);
            const float d = nx_f16_to_f32(d16), dmin = nx_f16_to_f32(dmin16);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_K *xb = (const nx_block_q8_K *)act_row(x, xs, r0 + r) + ib;
                int32_t sumi = 0, summ = 0;
                for (int j = 0; j < 8; j++) {
                    int s = 0;
                    for (int l = 0; l < 32; l++) s += q[32 * j + l] * xb->qs[32 * j + l];
                    sumi += sc[j] * s;
                    summ += m[j] * (xb->bsums[2 * j] + xb->bsums[2 * j + 1]);
                }
                acc[r] += (d * xb->d) * (float)sumi - (dmin * xb->d) * (float)summ;
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}

void nx_dot_q4_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    dot_k4_rows(n, out, w, sizeof(nx_block_q4_K), false, x, xs, nrows);
}

void nx_dot_q5_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    dot_k4_rows(n, out, w, sizeof(nx_block_q5_K), true, x, xs, nrows);
}

/* q6_K: sum_j d sc_j (q - 32) * dy y over 16 sub-blocks of 16. */
void nx_dot_q6_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    const nx_block_q6_K *wb = w;
    const int64_t nb = n / NX_QK_K;
    int8_t q[NX_QK_K];
    for (int r0 = 0; r0 < nrows; r0 += ROW_GROUP) {
        const int nr = NX_MIN(ROW_GROUP, nrows - r0);
        float acc[ROW_GROUP] = {0};
        for (int64_t ib = 0; ib < nb; ib++) {
            const nx_block_q6_K *b = &wb[ib];
            for (int h = 0; h < 2; h++) {
                for (int l = 0; l < 32; l++) {
                    const uint8_t l0 = b->ql[64 * h + l], l1 = b->ql[64 * h + 32 + l], hb = b->qh[32 * h + l];
                    q[128 * h + l] = (int8_t)(((l0 & 0xF) | ((hb & 3) << 4)) - 32);
                    q[128 * h + 32 + l] = (int8_t)(((l1 & 0xF) | (((hb >> 2) & 3) << 4)) - 32);
                    q[128 * h + 64 + l] = (int8_t)(((l0 >> 4) | (((hb >> 4) & 3) << 4)) - 32);
                    q[128 * h + 96 + l] = (int8_t)(((l1 >> 4) | (((hb >> 6) & 3) << 4)) - 32);
                }
            }
            const float d = nx_f16_to_f32(b->d);
            for (int r = 0; r < nr; r++) {
                const nx_block_q8_K *xb = (const nx_block_q8_K *)act_row(x, xs, r0 + r) + ib;
                int32_t sumi = 0;
                for (int j = 0; j < 16; j++) {
                    int s = 0;
                    for (int l = 0; l < 16; l++) s += q[16 * j + l] * xb->qs[16 * j + l];
                    sumi += b->scales[j] * s;
                }
                acc[r] += (d * xb->d) * (float)sumi;
            }
        }
        memcpy(out + r0, acc, (size_t)nr * sizeof(float));
    }
}
