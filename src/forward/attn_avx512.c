/* attn_avx512.c - several queries of one KV head at once (see attn_avx512.h for the contract). */
#include "forward/attn_avx512.h"

#include <math.h>
#include <stdint.h>

#include "forward/ops_avx512.h"
#include "quant/reduce16_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* 16 values of a cell starting at element `off`, as floats. */
ALWAYS_INLINE __m512 load_cell(const void *base, bool f16, size_t off) {
    if (f16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)base + off)));
    return _mm512_loadu_ps((const float *)base + off);
}

/* acc0 + acc1 of one K cell against q: the two chains of nx_ops_dot_*_avx512 before their
 * horizontal sum (elements i..i+15 of every 32 in acc0, i+16..i+31 in acc1, a last 16 in acc0). */
ALWAYS_INLINE __m512 cell_partial(const void *k, bool f16, size_t off, const float *q, int D) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= D; i += 32) {
        acc0 = _mm512_fmadd_ps(load_cell(k, f16, off + (size_t)i), _mm512_loadu_ps(q + i), acc0);
        acc1 = _mm512_fmadd_ps(load_cell(k, f16, off + (size_t)i + 16), _mm512_loadu_ps(q + i + 16), acc1);
    }
    if (i < D) acc0 = _mm512_fmadd_ps(load_cell(k, f16, off + (size_t)i), _mm512_loadu_ps(q + i), acc0);
    return _mm512_add_ps(acc0, acc1);
}

/* Scores of every query, 16 cells at a time (the block stays in L1 while each query uses it);
 * mx[j] = the largest score of query j. */
static void all_scores(const void *k, bool f16, size_t stride, int D, float scale, const nx_attn_query *qs, int nq,
                       int kmax, float *mx) {
    __m512 vmax[NX_ATTN_MAX_Q], part[16];
    const __m512 vscale = _mm512_set1_ps(scale);
    for (int j = 0; j < nq; j++) vmax[j] = _mm512_set1_ps(-INFINITY);
    for (int c0 = 0; c0 < kmax; c0 += 16) {
        for (int j = 0; j < nq; j++) {
            const int nc = qs[j].n_keys - c0 < 16 ? qs[j].n_keys - c0 : 16;
            if (nc <= 0) continue;
            for (int i = 0; i < 16; i++) { /* slot i holds cell c0 + 4 (i % 4) + i / 4 (nx_reduce16's order) */
                const int c = 4 * (i % 4) + i / 4;
                part[i] = c < nc ? cell_partial(k, f16, (size_t)(c0 + c) * stride, qs[j].q, D) : _mm512_setzero_ps();
            }
            const __mmask16 m = (__mmask16)((1u << nc) - 1);
            const __m512 s = _mm512_mul_ps(nx_reduce16(part), vscale);
            _mm512_mask_storeu_ps(qs[j].scores + c0, m, s);
            vmax[j] = _mm512_mask_max_ps(vmax[j], m, vmax[j], s);
        }
    }
    for (int j = 0; j < nq; j++) mx[j] = _mm512_reduce_max_ps(vmax[j]);
}

/* out[d0 .. d0 + 16 nv) of nj queries (constants 1..4, so the accumulators stay in registers):
 * cells below every query's n_keys first, then the few cells only some queries see. */
ALWAYS_INLINE void v_block(int nj, int nv, const void *v, bool f16, size_t stride, int d0, const nx_attn_query *qs,
                           const float *inv) {
    __m512 acc[4][4], x[4];
    int kmin = qs[0].n_keys, kmax = qs[0].n_keys;
    for (int j = 0; j < nj; j++) {
        kmin = qs[j].n_keys < kmin ? qs[j].n_keys : kmin;
        kmax = qs[j].n_keys > kmax ? qs[j].n_keys : kmax;
        for (int i = 0; i < nv; i++) acc[j][i] = _mm512_setzero_ps();
    }
    int c = 0;
    for (; c < kmin; c++) {
        for (int i = 0; i < nv; i++) x[i] = load_cell(v, f16, (size_t)c * stride + (size_t)(d0 + 16 * i));
        for (int j = 0; j < nj; j++) {
            const __m512 a = _mm512_set1_ps(qs[j].scores[c] * inv[j]);
            for (int i = 0; i < nv; i++) acc[j][i] = _mm512_fmadd_ps(a, x[i], acc[j][i]);
        }
    }
    for (; c < kmax; c++) {
        for (int i = 0; i < nv; i++) x[i] = load_cell(v, f16, (size_t)c * stride + (size_t)(d0 + 16 * i));
        for (int j = 0; j < nj; j++) {
            if (c >= qs[j].n_keys) continue;
            const __m512 a = _mm512_set1_ps(qs[j].scores[c] * inv[j]);
            for (int i = 0; i < nv; i++) acc[j][i] = _mm512_fmadd_ps(a, x[i], acc[j][i]);
        }
    }
    for (int j = 0; j < nj; j++)
        for (int i = 0; i < nv; i++) _mm512_storeu_ps(qs[j].out + d0 + 16 * i, acc[j][i]);
}

/* One v_block with run-time nj, nv in 1..4 turned into compile-time ones. */
static void v_block_any(int nj, int nv, const void *v, bool f16, size_t stride, int d0, const nx_attn_query *qs,
                        const float *inv) {
#define NX_V_CASE(J, V) \
    case 4 * (J - 1) + (V - 1): v_block(J, V, v, f16, stride, d0, qs, inv); break
    switch (4 * (nj - 1) + (nv - 1)) {
        NX_V_CASE(1, 1); NX_V_CASE(1, 2); NX_V_CASE(1, 3); NX_V_CASE(1, 4);
        NX_V_CASE(2, 1); NX_V_CASE(2, 2); NX_V_CASE(2, 3); NX_V_CASE(2, 4);
        NX_V_CASE(3, 1); NX_V_CASE(3, 2); NX_V_CASE(3, 3); NX_V_CASE(3, 4);
        NX_V_CASE(4, 1); NX_V_CASE(4, 2); NX_V_CASE(4, 3); NX_V_CASE(4, 4);
    default: break;
    }
#undef NX_V_CASE
}

void nx_attend_avx512(const void *k, const void *v, bool f16, size_t stride, int D, float scale, nx_attn_query *qs,
                      int nq) {
    float mx[NX_ATTN_MAX_Q], inv[NX_ATTN_MAX_Q];
    int kmax = 0;
    for (int j = 0; j < nq; j++) kmax = qs[j].n_keys > kmax ? qs[j].n_keys : kmax;
    all_scores(k, f16, stride, D, scale, qs, nq, kmax, mx);
    for (int j = 0; j < nq; j++) {
        nx_ops_exp_avx512(qs[j].scores, qs[j].scores, mx[j], qs[j].n_keys);
        double sum = 0.0;
        for (int c = 0; c < qs[j].n_keys; c++) sum += qs[j].scores[c];
        inv[j] = (float)(1.0 / sum);
    }
    for (int d0 = 0; d0 < D; d0 += 64) {
        const int nv = (D - d0) / 16 < 4 ? (D - d0) / 16 : 4;
        for (int j0 = 0; j0 < nq; j0 += 4)
            v_block_any(nq - j0 < 4 ? nq - j0 : 4, nv, v, f16, stride, d0, qs + j0, inv + j0);
    }
}
