/* attn_avx512.c - several queries of one KV head at once (see attn_avx512.h for the contract). */
#include "forward/attn_avx512.h"

#include <math.h>
#include <stdint.h>

#include "forward/ops_avx512.h"
#include "model/model.h"
#include "quant/reduce16_avx512.h"

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* 16 values of the cell at byte `cell`, starting at element `i` (a multiple of 16), as floats.
 * Q8_0 block (34 bytes): f16 scale d, 32 int8 q; value = q * d.  Q4_0 block (18 bytes): f16 d, 16
 * bytes whose low nibbles are elements 0..15 and high nibbles 16..31; value = (nibble - 8) * d.
 * Both are one exact int-to-float conversion and one rounding multiply, as in ggml's to_float. */
ALWAYS_INLINE __m512 load_cell(const uint8_t *base, nx_kv_type t, size_t cell, int i) {
    const uint8_t *p = base + cell;
    switch (t) {
    case NX_KV_F16: return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(p + 2 * (size_t)i)));
    case NX_KV_Q8_0: {
        const uint8_t *b = p + (size_t)(i / 32) * 34;
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)b));
        const __m512i q = _mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(b + 2 + (i % 32))));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(q), d);
    }
    case NX_KV_Q4_0: {
        const uint8_t *b = p + (size_t)(i / 32) * 18;
        const __m512 d = _mm512_set1_ps(_cvtsh_ss(*(const uint16_t *)b));
        __m128i q = _mm_loadu_si128((const __m128i *)(b + 2));
        if (i % 32) q = _mm_srli_epi16(q, 4);
        q = _mm_and_si128(q, _mm_set1_epi8(0x0f));
        const __m512i x = _mm512_sub_epi32(_mm512_cvtepu8_epi32(q), _mm512_set1_epi32(8));
        return _mm512_mul_ps(_mm512_cvtepi32_ps(x), d);
    }
    default: return _mm512_loadu_ps((const float *)(p + 4 * (size_t)i));
    }
}

/* acc0 + acc1 of one K cell against q: the two chains of nx_ops_dot_*_avx512 before their
 * horizontal sum (elements i..i+15 of every 32 in acc0, i+16..i+31 in acc1, a last 16 in acc0). */
ALWAYS_INLINE __m512 cell_partial(const uint8_t *k, nx_kv_type t, size_t cell, const float *q, int D) {
    __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
    int i = 0;
    for (; i + 32 <= D; i += 32) {
        acc0 = _mm512_fmadd_ps(load_cell(k, t, cell, i), _mm512_loadu_ps(q + i), acc0);
        acc1 = _mm512_fmadd_ps(load_cell(k, t, cell, i + 16), _mm512_loadu_ps(q + i + 16), acc1);
    }
    if (i < D) acc0 = _mm512_fmadd_ps(load_cell(k, t, cell, i), _mm512_loadu_ps(q + i), acc0);
    return _mm512_add_ps(acc0, acc1);
}

/* Scores of every query, 16 cells at a time (the block stays in L1 while each query uses it);
 * mx[j] = the largest score of query j.  A quantized block is dequantised once into kbuf (the
 * exact floats load_cell gives) and every query reads those: the same bits, one conversion per
 * cell instead of one per query. */
ALWAYS_INLINE void all_scores(const uint8_t *k, nx_kv_type t, size_t stride, int D, float scale,
                              const nx_attn_query *qs, int nq, int kmax, float *mx, float *kbuf) {
    __m512 vmax[NX_ATTN_MAX_Q], part[16];
    const __m512 vscale = _mm512_set1_ps(scale);
    const bool quant = t == NX_KV_Q8_0 || t == NX_KV_Q4_0; /* then kbuf holds 16 x D floats */
    for (int j = 0; j < nq; j++) vmax[j] = _mm512_set1_ps(-INFINITY);
    for (int c0 = 0; c0 < kmax; c0 += 16) {
        const uint8_t *kb = k;
        size_t kcell = stride, kc0 = (size_t)c0 * stride;
        nx_kv_type kt = t;
        if (quant) {
            const int ncell = kmax - c0 < 16 ? kmax - c0 : 16;
            for (int c = 0; c < ncell; c++)
                for (int i = 0; i < D; i += 16)
                    _mm512_store_ps(kbuf + (size_t)c * D + i, load_cell(k, t, (size_t)(c0 + c) * stride, i));
            kb = (const uint8_t *)kbuf;
            kcell = (size_t)D * sizeof(float);
            kc0 = 0;
            kt = NX_KV_F32;
        }
        for (int j = 0; j < nq; j++) {
            const int nc = qs[j].n_keys - c0 < 16 ? qs[j].n_keys - c0 : 16;
            if (nc <= 0) continue;
            for (int i = 0; i < 16; i++) { /* slot i holds cell c0 + 4 (i % 4) + i / 4 (nx_reduce16's order) */
                const int c = 4 * (i % 4) + i / 4;
                part[i] = c < nc ? cell_partial(kb, kt, kc0 + (size_t)c * kcell, qs[j].q, D) : _mm512_setzero_ps();
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
ALWAYS_INLINE void v_block(int nj, int nv, const uint8_t *v, nx_kv_type t, size_t stride, int d0, const nx_attn_query *qs,
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
        for (int i = 0; i < nv; i++) x[i] = load_cell(v, t, (size_t)c * stride, d0 + 16 * i);
        for (int j = 0; j < nj; j++) {
            const __m512 a = _mm512_set1_ps(qs[j].scores[c] * inv[j]);
            for (int i = 0; i < nv; i++) acc[j][i] = _mm512_fmadd_ps(a, x[i], acc[j][i]);
        }
    }
    for (; c < kmax; c++) {
        for (int i = 0; i < nv; i++) x[i] = load_cell(v, t, (size_t)c * stride, d0 + 16 * i);
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
ALWAYS_INLINE void v_block_any(int nj, int nv, const uint8_t *v, nx_kv_type t, size_t stride, int d0, const nx_attn_query *qs,
                        const float *inv) {
#define NX_V_CASE(J, V) \
    case 4 * (J - 1) + (V - 1): v_block(J, V, v, t, stride, d0, qs, inv); break
    switch (4 * (nj - 1) + (nv - 1)) {
        NX_V_CASE(1, 1); NX_V_CASE(1, 2); NX_V_CASE(1, 3); NX_V_CASE(1, 4);
        NX_V_CASE(2, 1); NX_V_CASE(2, 2); NX_V_CASE(2, 3); NX_V_CASE(2, 4);
        NX_V_CASE(3, 1); NX_V_CASE(3, 2); NX_V_CASE(3, 3); NX_V_CASE(3, 4);
        NX_V_CASE(4, 1); NX_V_CASE(4, 2); NX_V_CASE(4, 3); NX_V_CASE(4, 4);
    default: break;
    }
#undef NX_V_CASE
}

/* The values phase over all D, for the nq queries (at most 4 at a time, 64 dims at a time). */
ALWAYS_INLINE void all_values(const uint8_t *v, nx_kv_type t, size_t stride, int D, const nx_attn_query *qs, int nq,
                              const float *inv) {
    for (int d0 = 0; d0 < D; d0 += 64) {
        const int nv = (D - d0) / 16 < 4 ? (D - d0) / 16 : 4;
        for (int j0 = 0; j0 < nq; j0 += 4) v_block_any(nq - j0 < 4 ? nq - j0 : 4, nv, v, t, stride, d0, qs + j0, inv + j0);
    }
}

/* One instance of each phase per cache type, so the type is a constant inside the loops. */
#define NX_SCORES(NAME, T, KBUF_N)                                                                            \
    static void NAME(const uint8_t *k, size_t stride, int D, float scale, const nx_attn_query *qs, int nq, int kmax, \
                     float *mx) {                                                                                \
        float kbuf[KBUF_N] __attribute__((aligned(64)));                                                         \
        all_scores(k, T, stride, D, scale, qs, nq, kmax, mx, kbuf);                                             \
    }
#define NX_VALUES(NAME, T)                                                                                       \
    static void NAME(const uint8_t *v, size_t stride, int D, const nx_attn_query *qs, int nq, const float *inv) { \
        all_values(v, T, stride, D, qs, nq, inv);                                                                 \
    }
NX_SCORES(scores_f32, NX_KV_F32, 16)
NX_SCORES(scores_f16, NX_KV_F16, 16)
NX_SCORES(scores_q8_0, NX_KV_Q8_0, 16 * NX_MAX_HEAD_DIM)
NX_SCORES(scores_q4_0, NX_KV_Q4_0, 16 * NX_MAX_HEAD_DIM)
NX_VALUES(values_f32, NX_KV_F32)
NX_VALUES(values_f16, NX_KV_F16)
NX_VALUES(values_q8_0, NX_KV_Q8_0)
NX_VALUES(values_q4_0, NX_KV_Q4_0)

void nx_attend_avx512(const uint8_t *k, nx_kv_type tk, size_t stride_k, const uint8_t *v, nx_kv_type tv,
                      size_t stride_v, int D, float scale, nx_attn_query *qs, int nq) {
    float mx[NX_ATTN_MAX_Q], inv[NX_ATTN_MAX_Q];
    int kmax = 0;
    for (int j = 0; j < nq; j++) kmax = qs[j].n_keys > kmax ? qs[j].n_keys : kmax;
    switch (tk) {
    case NX_KV_F16: scores_f16(k, stride_k, D, scale, qs, nq, kmax, mx); break;
    case NX_KV_Q8_0: scores_q8_0(k, stride_k, D, scale, qs, nq, kmax, mx); break;
    case NX_KV_Q4_0: scores_q4_0(k, stride_k, D, scale, qs, nq, kmax, mx); break;
    default: scores_f32(k, stride_k, D, scale, qs, nq, kmax, mx); break;
    }
    for (int j = 0; j < nq; j++) {
        nx_ops_exp_avx512(qs[j].scores, qs[j].scores, mx[j], qs[j].n_keys);
        double sum = 0.0;
        for (int c = 0; c < qs[j].n_keys; c++) sum += qs[j].scores[c];
        inv[j] = (float)(1.0 / sum);
    }
    switch (tv) {
    case NX_KV_F16: values_f16(v, stride_v, D, qs, nq, inv); break;
    case NX_KV_Q8_0: values_q8_0(v, stride_v, D, qs, nq, inv); break;
    case NX_KV_Q4_0: values_q4_0(v, stride_v, D, qs, nq, inv); break;
    default: values_f32(v, stride_v, D, qs, nq, inv); break;
    }
}
