/* quant_simd_common.h - what the SIMD kernel files share (quant_avx2.c; quant_avx512.c: plain
 * and legacy formats; quant_kquant_avx512.c: K formats; gemm_avx512.c): the row-group shape of
 * every dot kernel, the horizontal sum, the weight-stream prefetch.
 * Include only from *_avx2.c / *_avx512.c files: they are compiled with the ISA flags these
 * helpers need (AVX + F16C at least). */
#ifndef NX_QUANT_SIMD_COMMON_H
#define NX_QUANT_SIMD_COMMON_H

#include "quant/quant_impl.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

/* activation rows handled together by one pass over a weight row */
#define ROWS 4
#define ALWAYS_INLINE static inline __attribute__((always_inline))

static inline float f16(uint16_t h) { return _cvtsh_ss(h); }

static inline const void *act_row(const void *x, size_t stride, int r) {
    return (const char *)x + (size_t)r * stride;
}

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

#ifdef __AVX512F__
/* out[i] = hsum256(lower 8 + upper 8 lanes of a[i]) for i < 4, bit for bit: the same additions
 * with the same operands in the same order, for four rows at once (the lanes of a row's partial
 * sums side by side).  hsum256(v) = ((v0 + v4) + (v2 + v6)) + ((v1 + v5) + (v3 + v7)). */
static inline __attribute__((always_inline)) void hsum256_x4(const __m512 *a, float out[4]) {
    /* v = lower 8 + upper 8: [vA | vB], [vC | vD] */
    const __m512 vab = _mm512_add_ps(_mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a[0], a[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 vcd = _mm512_add_ps(_mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm512_shuffle_f32x4(a[2], a[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* s_i = v_i + v_{i+4}: 128-bit chunk r = row r */
    const __m512 sv = _mm512_add_ps(_mm512_shuffle_f32x4(vab, vcd, _MM_SHUFFLE(2, 0, 2, 0)),
                                    _mm512_shuffle_f32x4(vab, vcd, _MM_SHUFFLE(3, 1, 3, 1)));
    /* lane 0 / 1 of a chunk: s0 + s2, s1 + s3; then lane 0: (s0 + s2) + (s1 + s3) */
    const __m512 t = _mm512_add_ps(sv, _mm512_shuffle_ps(sv, sv, _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 u = _mm512_add_ps(t, _mm512_movehdup_ps(t));
    const __m512i pick = _mm512_setr_epi32(0, 4, 8, 12, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0);
    _mm_storeu_ps(out, _mm512_castps512_ps128(_mm512_permutexvar_ps(pick, u)));
}
#endif

/* Defines the kernel `name` (an nx_vec_dot_fn).  Every dot kernel has this shape: activation
 * rows in groups of up to ROWS, each group handled by
 *     rows_fn(kind, nr, n, out, w, x, xs)
 * with `kind` (the format within the family the helper serves) and `nr` (the group's row count)
 * compile-time constants, so the helper, always_inline, keeps its per-row accumulators in
 * registers, walks the weight row once and reuses each decoded weight block for every row. */
#define DEFINE_DOT(name, rows_fn, kind)                                                        \
    void name(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {     \
        for (int r0 = 0; r0 < nrows; r0 += ROWS) {                                             \
            const void *xg = act_row(x, xs, r0);                                               \
            switch (NX_MIN(ROWS, nrows - r0)) {                                                \
            case 4: rows_fn(kind, 4, n, out + r0, w, xg, xs); break;                           \
            case 3: rows_fn(kind, 3, n, out + r0, w, xg, xs); break;                           \
            case 2: rows_fn(kind, 2, n, out + r0, w, xg, xs); break;                           \
            default: rows_fn(kind, 1, n, out + r0, w, xg, xs); break;                          \
            }                                                                                  \
        }                                                                                      \
    }

/* ---- weight-stream prefetch (K-format kernels) ------------------------------------------------
 * A K-format kernel walks one weight row front to back, and nx_matmul hands it the rows of a
 * chunk in address order, so the bytes wanted next are always just ahead.  Measured on the
 * 2-core AVX-512 VM: without help the hardware prefetcher keeps too few lines in flight while
 * the core is busy decoding, and the kernel time is about compute time + streaming time (the
 * two do not overlap); prefetching a few KB ahead makes them overlap (q4_K 1 row 49 % -> 80 %
 * of the streaming read).  A prefetch never faults, so running past the end of the row (into
 * the next row, or past the tensor at the very end) is harmless.  With 4 KiB-mapped weights 2, 4
 * and 8 KB ahead measured the same within noise; with the weights in 2 MiB pages (the loader sees
 * to it, model_load.c) 8 KB is faster than 4 KB on every K-quant file (docs/notes/q4k-kernel.md,
 * "Prefetch distance": decode +5-8 % at two threads, +1-6 % at one; 12 and 16 KB no better than
 * 8).  The non-temporal hint was slower. */
#define K_PREFETCH_AHEAD 8192

/* Prefetches the block of `bytes` (a constant after inlining) that lies K_PREFETCH_AHEAD
 * beyond `block`: ceil(bytes / 64) lines at 64-byte steps.  Consecutive prefetched addresses,
 * also across blocks, are then at most 64 bytes apart, so no cache line is skipped. */
ALWAYS_INLINE void prefetch_ahead(const void *block, int bytes) {
    const char *p = (const char *)block + K_PREFETCH_AHEAD;
    for (int off = 0; off < bytes; off += 64) _mm_prefetch(p + off, _MM_HINT_T0);
}

#endif
