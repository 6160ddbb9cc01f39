/* quant_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI) dot kernels; same contract and results (up to
 * float summation order) as the scalar kernels in quant_dot.c.  Compiled with the AVX-512 flags;
 * only called after nx_cpu_isa() reported NX_ISA_AVX512.
 *
 * Shape of every kernel: activation rows are taken in groups of up to 4 (ROWS); for each group
 * a helper specialised for the exact row count (always_inline with a constant, so the per-row
 * accumulators live in registers) walks the weight row once, decodes each weight block into
 * registers, and reuses it for every row of the group.
 *
 * Integer dots.  VNNI dpbusd multiplies unsigned by signed bytes.  Signed weights (q8_0, and
 * q4_0/q5_0 after removing their offset) go in as |w| with the sign moved onto the activation:
 * y' = (w < 0 ? -y : y), which needs y != -128 - true of every activation row produced by
 * from_float (q8_0/q8_K codes are in [-127, 127]).  Unsigned weights (q4_1, q5_1, K formats)
 * go in directly.  K formats use maddubs (u8 x s8 -> pairs in int16; no saturation since
 * 2 * 63 * 128 < 32767) and dpwssd to multiply by the int16 sub-block scales and accumulate.
 */
#include "quant_avx512_common.h"

/* ---- plain formats ------------------------------------------------------------------------ */

/* 16 floats of row data starting at element i, masked past n. */
ALWAYS_INLINE __m512 load16_f32(const float *p, int64_t i, int64_t n) {
    if (i + 16 <= n) return _mm512_loadu_ps(p + i);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), p + i);
}
ALWAYS_INLINE __m512 load16_f16(const uint16_t *p, int64_t i, int64_t n) {
    __m256i v = i + 16 <= n ? _mm256_loadu_si256((const __m256i *)(p + i))
                            : _mm256_maskz_loadu_epi16((__mmask16)((1u << (n - i)) - 1), p + i);
    return _mm512_cvtph_ps(v);
}
ALWAYS_INLINE __m512 load16_bf16(const uint16_t *p, int64_t i, int64_t n) {
    __m256i v = i + 16 <= n ? _mm256_loadu_si256((const __m256i *)(p + i))
                            : _mm256_maskz_loadu_epi16((__mmask16)((1u << (n - i)) - 1), p + i);
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

/* kind: 0 = f32, 1 = f16, 2 = bf16 (a constant after inlining) */
ALWAYS_INLINE __m512 load16(int kind, const void *p, int64_t i, int64_t n) {
    if (kind == 0) return load16_f32(p, i, n);
    if (kind == 1) return load16_f16(p, i, n);
    return load16_bf16(p, i, n);
}

ALWAYS_INLINE void plain_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    __m512 acc0[ROWS], acc1[ROWS];
    const void *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc0[r] = acc1[r] = _mm512_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    int64_t i = 0;
    for (; i + 32 <= n; i += 32) { /* two independent chains hide the FMA latency */
        const __m512 w0 = load16(kind, w, i, n), w1 = load16(kind, w, i + 16, n);
        for (int r = 0; r < nr; r++) {
            acc0[r] = _mm512_fmadd_ps(w0, load16(kind, xr[r], i, n), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(w1, load16(kind, xr[r], i + 16, n), acc1[r]);
        }
    }
    for (; i < n; i += 16) {
        const __m512 w0 = load16(kind, w, i, n);
        for (int r = 0; r < nr; r++) acc0[r] = _mm512_fmadd_ps(w0, load16(kind, xr[r], i, n), acc0[r]);
    }
    for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(_mm512_add_ps(acc0[r], acc1[r]));
}


static void plain_dot(int kind, int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        if (kind == 0) {
            DISPATCH_ROWS(plain_rows(0, 4, n, out + r0, w, xg, xs), plain_rows(0, 3, n, out + r0, w, xg, xs),
                          plain_rows(0, 2, n, out + r0, w, xg, xs), plain_rows(0, 1, n, out + r0, w, xg, xs));
        } else if (kind == 1) {
            DISPATCH_ROWS(plain_rows(1, 4, n, out + r0, w, xg, xs), plain_rows(1, 3, n, out + r0, w, xg, xs),
                          plain_rows(1, 2, n, out + r0, w, xg, xs), plain_rows(1, 1, n, out + r0, w, xg, xs));
        } else {
            DISPATCH_ROWS(plain_rows(2, 4, n, out + r0, w, xg, xs), plain_rows(2, 3, n, out + r0, w, xg, xs),
                          plain_rows(2, 2, n, out + r0, w, xg, xs), plain_rows(2, 1, n, out + r0, w, xg, xs));
        }
    }
}

void nx_dot_f32_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    plain_dot(0, n, out, w, x, xs, nrows);
}
void nx_dot_f16_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    plain_dot(1, n, out, w, x, xs, nrows);
}
void nx_dot_bf16_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    plain_dot(2, n, out, w, x, xs, nrows);
}

/* ---- legacy 32-element formats ---------------------------------------------------------------
 * The fp16 block scales are converted outside the inner loop: for a chunk of up to CHUNK
 * blocks, the weight scales and each row's activation scales are gathered into small arrays,
 * converted 16 at a time, and multiplied into one float per (row, block); the inner loop then
 * only broadcasts that float from memory (no per-block scalar conversions, which compete for
 * the shuffle port with the integer work).  q4_1/q5_1's min term m * s is summed per chunk the
 * same way. */
#define CHUNK 64

/* A decoded weight block: its 32 codes as bytes. */
typedef struct {
    __m256i q;     /* signed formats: |code|; unsigned formats: code */
    __mmask32 neg; /* signed formats: lanes whose code is negative */
} wblock;

/* kind: 0 = q8_0, 1 = q4_0, 2 = q5_0 (signed, against q8_0); 3 = q4_1, 4 = q5_1 (unsigned,
 * against q8_1) */
static inline size_t legacy_wsize(int kind) {
    static const size_t sizes[5] = {sizeof(nx_block_q8_0), sizeof(nx_block_q4_0), sizeof(nx_block_q5_0),
                                    sizeof(nx_block_q4_1), sizeof(nx_block_q5_1)};
    return sizes[kind];
}

ALWAYS_INLINE wblock decode_legacy(int kind, const void *w, int64_t ib) {
    wblock b;
    if (kind == 0) {
        const nx_block_q8_0 *p = (const nx_block_q8_0 *)w + ib;
        const __m256i v = _mm256_loadu_si256((const __m256i *)p->qs);
        b.q = _mm256_abs_epi8(v); /* -128 -> 0x80, read as unsigned 128 by dpbusd: correct */
        b.neg = _mm256_movepi8_mask(v);
        return b;
    }
    const uint8_t *qs;
    uint32_t qh = 0;
    if (kind == 1) {
        qs = ((const nx_block_q4_0 *)w + ib)->qs;
    } else if (kind == 2) {
        qs = ((const nx_block_q5_0 *)w + ib)->qs;
        memcpy(&qh, ((const nx_block_q5_0 *)w + ib)->qh, 4);
    } else if (kind == 3) {
        qs = ((const nx_block_q4_1 *)w + ib)->qs;
    } else {
        qs = ((const nx_block_q5_1 *)w + ib)->qs;
        memcpy(&qh, ((const nx_block_q5_1 *)w + ib)->qh, 4);
    }
    const __m128i raw = _mm_loadu_si128((const __m128i *)qs);
    /* elements 0..15 are the low nibbles, 16..31 the high nibbles */
    __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(raw, 4), raw), _mm256_set1_epi8(0x0F));
    if (kind == 2 || kind == 4) q = _mm256_mask_add_epi8(q, (__mmask32)qh, q, _mm256_set1_epi8(16)); /* bit 4 */
    if (kind == 1 || kind == 2) {
        const __m256i v = _mm256_sub_epi8(q, _mm256_set1_epi8(kind == 1 ? 8 : 16));
        b.q = _mm256_abs_epi8(v);
        b.neg = _mm256_movepi8_mask(v);
    } else {
        b.q = q;
        b.neg = 0;
    }
    return b;
}

/* sum over the block of code * y, as 8 int32 lanes converted to float */
ALWAYS_INLINE __m256 block_dot(int kind, const wblock *b, const int8_t *yq) {
    __m256i y = _mm256_loadu_si256((const __m256i *)yq);
    if (kind <= 2) y = _mm256_mask_sub_epi8(y, b->neg, _mm256_setzero_si256(), y);
    return _mm256_cvtepi32_ps(_mm256_dpbusd_epi32(_mm256_setzero_si256(), b->q, y));
}

/* The scale gathering below reads a weight block's d (and m) as the first uint16_t(s) of the
 * block, and an activation block's d / s at these offsets. */
_Static_assert(offsetof(nx_block_q8_0, d) == 0 && offsetof(nx_block_q4_0, d) == 0 &&
                   offsetof(nx_block_q5_0, d) == 0 && offsetof(nx_block_q4_1, m) == 2 &&
                   offsetof(nx_block_q5_1, m) == 2 && offsetof(nx_block_q8_1, d) == 0 &&
                   offsetof(nx_block_q8_1, s) == 2,
               "scale field offsets");

ALWAYS_INLINE void legacy_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK;
    const size_t wsize = legacy_wsize(kind);
    const size_t xblock = kind <= 2 ? sizeof(nx_block_q8_0) : sizeof(nx_block_q8_1);
    const size_t qs_off = kind <= 2 ? offsetof(nx_block_q8_0, qs) : offsetof(nx_block_q8_1, qs);
    __m256 acc0[ROWS], acc1[ROWS];
    __m512 macc[ROWS];
    const char *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc0[r] = acc1[r] = _mm256_setzero_ps();
        macc[r] = _mm512_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    _Alignas(64) uint16_t hw[CHUNK], hm[CHUNK], hy[CHUNK];
    _Alignas(64) float scale[ROWS][CHUNK];
    for (int64_t c0 = 0; c0 < nb; c0 += CHUNK) {
        const int cn = (int)NX_MIN((int64_t)CHUNK, nb - c0);
        const int cv = (cn + 15) & ~15; /* converted length: whole vectors, zero-padded */
        /* weight scale (d) and min (m): both formats start with d, q4_1/q5_1 have m next */
        const char *wc = (const char *)w + (size_t)c0 * wsize;
        for (int b = 0; b < cn; b++) memcpy(&hw[b], wc + (size_t)b * wsize, 2);
        if (kind >= 3)
            for (int b = 0; b < cn; b++) memcpy(&hm[b], wc + (size_t)b * wsize + 2, 2);
        for (int b = cn; b < cv; b++) hw[b] = hm[b] = 0;
        for (int r = 0; r < nr; r++) {
            const char *xc = xr[r] + (size_t)c0 * xblock;
            for (int b = 0; b < cn; b++) memcpy(&hy[b], xc + (size_t)b * xblock, 2);
            for (int b = cn; b < cv; b++) hy[b] = 0;
            for (int b = 0; b < cv; b += 16) {
                const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(hw + b)));
                const __m512 dy = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(hy + b)));
                _mm512_store_ps(scale[r] + b, _mm512_mul_ps(dw, dy));
            }
            if (kind >= 3) {
                /* min term: sum over blocks of m_w * s_y (s is the q8_1 block's second half) */
                for (int b = 0; b < cn; b++) memcpy(&hy[b], xc + (size_t)b * xblock + 2, 2);
                for (int b = 0; b < cv; b += 16)
                    macc[r] = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(hm + b))),
                                              _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(hy + b))), macc[r]);
            }
        }
        int b = 0;
        for (; b + 2 <= cn; b += 2) { /* two blocks per step: two independent FMA chains */
            const wblock w0 = decode_legacy(kind, w, c0 + b), w1 = decode_legacy(kind, w, c0 + b + 1);
            for (int r = 0; r < nr; r++) {
                const int8_t *y0 = (const int8_t *)(xr[r] + (size_t)(c0 + b) * xblock + qs_off);
                acc0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[r][b]), block_dot(kind, &w0, y0), acc0[r]);
                acc1[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[r][b + 1]), block_dot(kind, &w1, y0 + xblock),
                                          acc1[r]);
            }
        }
        for (; b < cn; b++) {
            const wblock w0 = decode_legacy(kind, w, c0 + b);
            for (int r = 0; r < nr; r++) {
                const int8_t *y0 = (const int8_t *)(xr[r] + (size_t)(c0 + b) * xblock + qs_off);
                acc0[r] = _mm256_fmadd_ps(_mm256_broadcast_ss(&scale[r][b]), block_dot(kind, &w0, y0), acc0[r]);
            }
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum256(_mm256_add_ps(acc0[r], acc1[r])) + (kind >= 3 ? _mm512_reduce_add_ps(macc[r]) : 0.0f);
}

static void legacy_dot(int kind, int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        switch (kind) {
        case 0:
            DISPATCH_ROWS(legacy_rows(0, 4, n, out + r0, w, xg, xs), legacy_rows(0, 3, n, out + r0, w, xg, xs),
                          legacy_rows(0, 2, n, out + r0, w, xg, xs), legacy_rows(0, 1, n, out + r0, w, xg, xs));
            break;
        case 1:
            DISPATCH_ROWS(legacy_rows(1, 4, n, out + r0, w, xg, xs), legacy_rows(1, 3, n, out + r0, w, xg, xs),
                          legacy_rows(1, 2, n, out + r0, w, xg, xs), legacy_rows(1, 1, n, out + r0, w, xg, xs));
            break;
        case 2:
            DISPATCH_ROWS(legacy_rows(2, 4, n, out + r0, w, xg, xs), legacy_rows(2, 3, n, out + r0, w, xg, xs),
                          legacy_rows(2, 2, n, out + r0, w, xg, xs), legacy_rows(2, 1, n, out + r0, w, xg, xs));
            break;
        case 3:
            DISPATCH_ROWS(legacy_rows(3, 4, n, out + r0, w, xg, xs), legacy_rows(3, 3, n, out + r0, w, xg, xs),
                          legacy_rows(3, 2, n, out + r0, w, xg, xs), legacy_rows(3, 1, n, out + r0, w, xg, xs));
            break;
        default:
            DISPATCH_ROWS(legacy_rows(4, 4, n, out + r0, w, xg, xs), legacy_rows(4, 3, n, out + r0, w, xg, xs),
                          legacy_rows(4, 2, n, out + r0, w, xg, xs), legacy_rows(4, 1, n, out + r0, w, xg, xs));
            break;
        }
    }
}

void nx_dot_q8_0_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    legacy_dot(0, n, out, w, x, xs, nrows);
}
void nx_dot_q4_0_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    legacy_dot(1, n, out, w, x, xs, nrows);
}
void nx_dot_q5_0_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    legacy_dot(2, n, out, w, x, xs, nrows);
}
void nx_dot_q4_1_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    legacy_dot(3, n, out, w, x, xs, nrows);
}
void nx_dot_q5_1_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    legacy_dot(4, n, out, w, x, xs, nrows);
}
