/* q8_0_octet_avx512.h - the q8_0 kernel on prepared activations (layout and float operations in
 * quant_avx512.c, "q8_0 on prepared activations") as one tile walker shared by the dot kernel
 * (one weight row against up to ROWS activation rows, quant_avx512.c) and the multi-weight-row
 * kernel (several weight rows against one activation row, quant_mrow_avx512.c).  Both run this
 * code, so every (weight row, activation row) pair goes through the same float operations in the
 * same order whatever the tile shape: the result of a pair is bit-identical in both kernels.
 * Include only from *_avx512.c files. */
#ifndef NX_Q8_0_OCTET_AVX512_H
#define NX_Q8_0_OCTET_AVX512_H

#include "quant/quant_simd_common.h"

#define PREP_PF 4096
#define PREP_OCT 384

/* The 16 (or cnt < 16) fp16 weight scales of blocks w[0..cnt) as floats (0 past cnt). */
ALWAYS_INLINE __m512 q8_0_scales16(const nx_block_q8_0 *w, int cnt) {
    const __m512i offs = _mm512_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238, 272, 306, 340, 374, 408, 442, 476, 510);
    _Static_assert(sizeof(nx_block_q8_0) == 34 && offsetof(nx_block_q8_0, d) == 0, "gather offsets");
    /* dword gathers read 2 bytes past each scale: still inside the block */
    const __m512i g = cnt >= 16 ? _mm512_i32gather_epi32(offs, w, 1)
                                : _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)((1u << cnt) - 1),
                                                              offs, w, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* Codes of blocks w[0] and w[1], + 128 (unsigned), as one 512-bit vector; only the first
 * `have` (0..2) blocks are read, the others count as zero codes. */
ALWAYS_INLINE __m512i q8_0_pair_u(const nx_block_q8_0 *w, int have) {
    const __m256i lo = have > 0 ? _mm256_loadu_si256((const __m256i *)w[0].qs) : _mm256_setzero_si256();
    const __m256i hi = have > 1 ? _mm256_loadu_si256((const __m256i *)w[1].qs) : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8((char)0x80));
}

/* The octet's weight codes transposed into V0..V3 (cnt <= 8 blocks at w; a missing block reads
 * as zero codes, exactly like the zero-padded copy it replaces: its activation codes and scales
 * are zero too). */
ALWAYS_INLINE void q8_0_octet_codes(const nx_block_q8_0 *w, int cnt, __m512i *v) {
    const __m512i x0 = q8_0_pair_u(w, NX_MIN(2, cnt)), x1 = q8_0_pair_u(w + 2, NX_MAX(0, NX_MIN(2, cnt - 2)));
    const __m512i x2 = q8_0_pair_u(w + 4, NX_MAX(0, NX_MIN(2, cnt - 4))), x3 = q8_0_pair_u(w + 6, NX_MAX(0, cnt - 6));
    /* stage 1: qwords 0,1 (a01) and 2,3 (a23) of blocks 0..3, slot order block-minor */
    const __m512i i01 = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13), i23 = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i a01 = _mm512_permutex2var_epi64(x0, i01, x1), a23 = _mm512_permutex2var_epi64(x0, i23, x1);
    const __m512i b01 = _mm512_permutex2var_epi64(x2, i01, x3), b23 = _mm512_permutex2var_epi64(x2, i23, x3);
    /* stage 2: Vq = qword q of blocks 0..3 (from a) then 4..7 (from b) */
    v[0] = _mm512_shuffle_i64x2(a01, b01, 0x44);
    v[1] = _mm512_shuffle_i64x2(a01, b01, 0xEE);
    v[2] = _mm512_shuffle_i64x2(a23, b23, 0x44);
    v[3] = _mm512_shuffle_i64x2(a23, b23, 0xEE);
}

/* acc + float(lane dots of the octet's codes v with the activation octet at p) * (dw * dy):
 * THE float operation of the kernel, one per octet and (weight row, activation row). */
ALWAYS_INLINE __m512 q8_0_octet_fma(const __m512i *v, __m512 dw, const char *p, __m512 acc) {
    __m512i t = _mm512_loadu_si512(p + 256);
    t = _mm512_dpbusd_epi32(t, v[0], _mm512_loadu_si512(p));
    t = _mm512_dpbusd_epi32(t, v[1], _mm512_loadu_si512(p + 64));
    t = _mm512_dpbusd_epi32(t, v[2], _mm512_loadu_si512(p + 128));
    t = _mm512_dpbusd_epi32(t, v[3], _mm512_loadu_si512(p + 192));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_loadu_ps((const float *)(p + 320))), acc);
}

/* Weight rows per tile of the multi-weight-row kernel. */
#define Q8_0_TILE_W 4

/* out[m * nr + r] = dot(weight row m, activation row r) for m < nm (<= Q8_0_TILE_W), r < nr
 * (<= ROWS; nm * nr <= 8 keeps the accumulators in registers): weight rows ws bytes apart,
 * prepared activation rows xs bytes apart.  Per pair: acc = +0; for each octet in order, acc =
 * q8_0_octet_fma(...); result hsum256(lower 8 lanes + upper 8 lanes). */
ALWAYS_INLINE void q8_0_prep_tile(int nm, int nr, int64_t n, float *out, const void *w, size_t ws, const void *x,
                                  size_t xs) {
    const int64_t nb = n / NX_QK;
    const nx_block_q8_0 *wb[Q8_0_TILE_W];
    const char *xr[ROWS], *xo[ROWS];
    __m512 acc[Q8_0_TILE_W][ROWS];
    for (int m = 0; m < nm; m++) wb[m] = (const nx_block_q8_0 *)((const char *)w + (size_t)m * ws);
    for (int r = 0; r < nr; r++) xr[r] = act_row(x, xs, r);
    for (int m = 0; m < nm; m++)
        for (int r = 0; r < nr; r++) acc[m][r] = _mm512_setzero_ps();
    /* lane 2j+h takes block j's scale: octet 0 of a 16-block group uses lanes 0..7, octet 1 8..15 */
    const __m512i e0 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i e1 = _mm512_add_epi32(e0, _mm512_set1_epi32(8));
    /* prefetch distance: PREP_PF ahead in a one-row walk; a tile of nm > 1 rows walks nm weight
     * streams side by side, so each prefetches the same offset of its row two tiles further
     * (2 nm rows on).  The lines fetched must tile each stream exactly: measured on 1024-element
     * rows from memory, one tile ahead ran at 0.97x the one-row walk, two tiles 1.0x, and an
     * offset that left gaps (one tile + 1 KB) at 0.5x. */
    const size_t pf_ahead = nm > 1 ? 2 * (size_t)nm * ws : PREP_PF;
    __m512i v[4];
    int64_t g = 0;
    for (; g + 16 <= nb; g += 16) { /* whole groups of 16 blocks: 2 octets */
        __m512 dw16[Q8_0_TILE_W];
        for (int m = 0; m < nm; m++) {
            const char *pf = (const char *)(wb[m] + g) + pf_ahead;
            for (int l = 0; l < 544; l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
            dw16[m] = q8_0_scales16(wb[m] + g, 16);
        }
        for (int r = 0; r < nr; r++) xo[r] = xr[r] + (size_t)(g / 8) * PREP_OCT;
        for (int m = 0; m < nm; m++) {
            q8_0_octet_codes(wb[m] + g, 8, v);
            const __m512 dw = _mm512_permutexvar_ps(e0, dw16[m]);
            for (int r = 0; r < nr; r++) acc[m][r] = q8_0_octet_fma(v, dw, xo[r], acc[m][r]);
        }
        for (int r = 0; r < nr; r++) xo[r] += PREP_OCT;
        for (int m = 0; m < nm; m++) {
            q8_0_octet_codes(wb[m] + g + 8, 8, v);
            const __m512 dw = _mm512_permutexvar_ps(e1, dw16[m]);
            for (int r = 0; r < nr; r++) acc[m][r] = q8_0_octet_fma(v, dw, xo[r], acc[m][r]);
        }
    }
    if (g + 8 <= nb) { /* a whole octet left */
        for (int r = 0; r < nr; r++) xo[r] = xr[r] + (size_t)(g / 8) * PREP_OCT;
        for (int m = 0; m < nm; m++) {
            q8_0_octet_codes(wb[m] + g, 8, v);
            const __m512 dw = _mm512_permutexvar_ps(e0, q8_0_scales16(wb[m] + g, 8));
            for (int r = 0; r < nr; r++) acc[m][r] = q8_0_octet_fma(v, dw, xo[r], acc[m][r]);
        }
        g += 8;
    }
    if (g < nb) { /* a partial octet: the missing blocks read as zero codes and scales (they add nothing) */
        const int cnt = (int)(nb - g);
        for (int r = 0; r < nr; r++) xo[r] = xr[r] + (size_t)(g / 8) * PREP_OCT;
        for (int m = 0; m < nm; m++) {
            q8_0_octet_codes(wb[m] + g, cnt, v);
            const __m512 dw = _mm512_permutexvar_ps(e0, q8_0_scales16(wb[m] + g, cnt));
            for (int r = 0; r < nr; r++) acc[m][r] = q8_0_octet_fma(v, dw, xo[r], acc[m][r]);
        }
    }
    for (int m = 0; m < nm; m++)
        for (int r = 0; r < nr; r++)
            out[m * nr + r] =
                hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[m][r]), _mm512_extractf32x8_ps(acc[m][r], 1)));
}

#endif
