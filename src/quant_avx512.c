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
#include "quant_impl.h"

#include <immintrin.h>
#include <stddef.h>
#include <string.h>

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

/* Calls the row-count-specialised helper for nr = 4, 3, 2 or 1. */
#define DISPATCH_ROWS(call4, call3, call2, call1)  \
    switch (nr) {                                  \
    case 4: call4; break;                          \
    case 3: call3; break;                          \
    case 2: call2; break;                          \
    default: call1; break;                         \
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

/* ---- q4_K / q5_K ---------------------------------------------------------------------------
 * A super-block is 4 groups of 64 elements; group g is one zmm of codes (bytes 0..31 =
 * sub-block 2g, 32..63 = sub-block 2g+1), matching 64 consecutive q8_K activation bytes.
 * maddubs gives 32 int16 lanes (lanes 0..15 sub-block 2g, 16..31 sub-block 2g+1); dpwssd
 * multiplies them by the matching 6-bit scale and accumulates in int32.  The min term uses
 * q8_K's bsums: lane k of the 16 bsums belongs to sub-block k/2. */

/* permutexvar index tables: lane i of group g picks scale 2g + i/16 */
static const uint16_t k4_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1},
    {2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5, 5},
    {6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7},
};
static const uint16_t k4_min_idx[16] = {0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7};

typedef struct {
    __m512i q[4];     /* codes of the 4 groups */
    __m512i sc[4];    /* int16 scales per maddubs lane, per group */
    __m256i m16;      /* int16 min per bsums lane */
    float d, dmin;
} k4block;

ALWAYS_INLINE k4block decode_k4(bool five, const void *w, int64_t ib, const __m512i *sidx, __m256i midx) {
    k4block b;
    const uint8_t *scales, *qs, *qh = NULL;
    uint16_t d, dmin;
    if (five) {
        const nx_block_q5_K *p = (const nx_block_q5_K *)w + ib;
        scales = p->scales, qs = p->qs, qh = p->qh, d = p->d, dmin = p->dmin;
    } else {
        const nx_block_q4_K *p = (const nx_block_q4_K *)w + ib;
        scales = p->scales, qs = p->qs, d = p->d, dmin = p->dmin;
    }
    uint8_t sc[8], m[8];
    nx_k4_unpack_scales(scales, sc, m);
    const __m512i sc16 = _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc)));
    const __m256i m16 = _mm256_castsi128_si256(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)m)));
    b.m16 = _mm256_permutexvar_epi16(midx, m16);
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    /* shift counts per 16-bit lane: 0 in the lower half (low nibbles), 4 in the upper half */
    const __m512i nibble_shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    __m512i qhz = _mm512_setzero_si512();
    if (five) qhz = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)qh));
    for (int g = 0; g < 4; g++) {
        /* the 32 code bytes in both halves (a load, no shuffle), then low nibbles below and high
         * nibbles above */
        const __m512i raw = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * g)));
        __m512i q = _mm512_and_si512(_mm512_srlv_epi16(raw, nibble_shift), low4);
        if (five) {
            /* bit 2g of qh[l] is bit 4 of element l of sub-block 2g, bit 2g+1 of sub-block 2g+1 */
            const __m512i sel = _mm512_inserti64x4(_mm512_set1_epi8((char)(1 << (2 * g))),
                                                   _mm256_set1_epi8((char)(1 << (2 * g + 1))), 1);
            q = _mm512_mask_add_epi8(q, _mm512_test_epi8_mask(qhz, sel), q, _mm512_set1_epi8(16));
        }
        b.q[g] = q;
        b.sc[g] = _mm512_permutexvar_epi16(sidx[g], sc16);
    }
    b.d = f16(d);
    b.dmin = f16(dmin);
    return b;
}

ALWAYS_INLINE void k4_rows(bool five, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    __m512i sidx[4];
    for (int g = 0; g < 4; g++) sidx[g] = _mm512_loadu_si512(k4_scale_idx[g]);
    const __m256i midx = _mm256_loadu_si256((const __m256i *)k4_min_idx);
    __m512 acc[ROWS];
    __m256 macc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        macc[r] = _mm256_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const k4block b = decode_k4(five, w, ib, sidx, midx);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            __m512i s02 = _mm512_setzero_si512(), s13 = _mm512_setzero_si512(); /* two chains */
            for (int g = 0; g < 4; g++) {
                const __m512i y = _mm512_loadu_si512(a->qs + 64 * g);
                const __m512i p = _mm512_maddubs_epi16(b.q[g], y);
                if (g & 1) s13 = _mm512_dpwssd_epi32(s13, p, b.sc[g]);
                else s02 = _mm512_dpwssd_epi32(s02, p, b.sc[g]);
            }
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(b.d * a->d), _mm512_cvtepi32_ps(_mm512_add_epi32(s02, s13)), acc[r]);
            const __m256i mm = _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), b.m16);
            macc[r] = _mm256_fmadd_ps(_mm256_set1_ps(b.dmin * a->d), _mm256_cvtepi32_ps(mm), macc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(acc[r]) - hsum256(macc[r]);
}

static void k4_dot(bool five, int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        if (five) {
            DISPATCH_ROWS(k4_rows(true, 4, n, out + r0, w, xg, xs), k4_rows(true, 3, n, out + r0, w, xg, xs),
                          k4_rows(true, 2, n, out + r0, w, xg, xs), k4_rows(true, 1, n, out + r0, w, xg, xs));
        } else {
            DISPATCH_ROWS(k4_rows(false, 4, n, out + r0, w, xg, xs), k4_rows(false, 3, n, out + r0, w, xg, xs),
                          k4_rows(false, 2, n, out + r0, w, xg, xs), k4_rows(false, 1, n, out + r0, w, xg, xs));
        }
    }
}

void nx_dot_q4_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    k4_dot(false, n, out, w, x, xs, nrows);
}
void nx_dot_q5_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    k4_dot(true, n, out, w, x, xs, nrows);
}

/* ---- q6_K ------------------------------------------------------------------------------------
 * Four zmm of unsigned 6-bit codes per super-block: zmm z = 2h + k2 (h = half of 128, k2 = 0
 * for elements +0..63, 1 for +64..127).  In zmm 2h: bytes 0..31 = ql[64h + l] low nibble |
 * (qh & 3) << 4, bytes 32..63 = ql[64h + 32 + l] low nibble | ((qh >> 2) & 3) << 4; zmm 2h+1
 * takes the high nibbles and qh bits 4..5 / 6..7.  maddubs lanes 8j..8j+7 of zmm z belong to
 * sub-block 4z + j.  The -32 offset is removed once per super-block with the bsums:
 * sum sc_j (q - 32) y = sum sc_j q y - 32 sum sc_j bsum_j. */
static const uint16_t q6_scale_idx[4][32] = {
    {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3},
    {4, 4, 4, 4, 4, 4, 4, 4, 5, 5, 5, 5, 5, 5, 5, 5, 6, 6, 6, 6, 6, 6, 6, 6, 7, 7, 7, 7, 7, 7, 7, 7},
    {8, 8, 8, 8, 8, 8, 8, 8, 9, 9, 9, 9, 9, 9, 9, 9, 10, 10, 10, 10, 10, 10, 10, 10, 11, 11, 11, 11, 11, 11, 11, 11},
    {12, 12, 12, 12, 12, 12, 12, 12, 13, 13, 13, 13, 13, 13, 13, 13,
     14, 14, 14, 14, 14, 14, 14, 14, 15, 15, 15, 15, 15, 15, 15, 15},
};

typedef struct {
    __m512i q[4];
    __m512i sc[4];
    __m256i sc16; /* the 16 scales as int16, for the bsums correction */
    float d;
} q6block;

ALWAYS_INLINE q6block decode_q6(const nx_block_q6_K *p, const __m512i *sidx) {
    q6block b;
    const __m512i low4 = _mm512_set1_epi8(0x0F), low2 = _mm512_set1_epi8(0x03);
    for (int h = 0; h < 2; h++) {
        const __m512i ql = _mm512_loadu_si512(p->ql + 64 * h);
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(p->qh + 32 * h));
        __m512i hi0 = _mm512_inserti64x4(_mm512_castsi256_si512(qh), _mm256_srli_epi16(qh, 2), 1);
        __m512i hi1 = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_srli_epi16(qh, 4)), _mm256_srli_epi16(qh, 6), 1);
        hi0 = _mm512_slli_epi16(_mm512_and_si512(hi0, low2), 4);
        hi1 = _mm512_slli_epi16(_mm512_and_si512(hi1, low2), 4);
        b.q[2 * h] = _mm512_or_si512(_mm512_and_si512(ql, low4), hi0);
        b.q[2 * h + 1] = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), low4), hi1);
    }
    b.sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)p->scales));
    const __m512i sc = _mm512_castsi256_si512(b.sc16);
    for (int z = 0; z < 4; z++) b.sc[z] = _mm512_permutexvar_epi16(sidx[z], sc);
    b.d = f16(p->d);
    return b;
}

ALWAYS_INLINE void q6_rows(int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    __m512i sidx[4];
    for (int z = 0; z < 4; z++) sidx[z] = _mm512_loadu_si512(q6_scale_idx[z]);
    __m512 acc[ROWS];
    const nx_block_q8_K *xr[ROWS];
    for (int r = 0; r < nr; r++) {
        acc[r] = _mm512_setzero_ps();
        xr[r] = act_row(x, xs, r);
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const q6block b = decode_q6((const nx_block_q6_K *)w + ib, sidx);
        for (int r = 0; r < nr; r++) {
            const nx_block_q8_K *a = xr[r] + ib;
            __m512i s02 = _mm512_setzero_si512(), s13 = _mm512_setzero_si512();
            for (int z = 0; z < 4; z++) {
                const __m512i p = _mm512_maddubs_epi16(b.q[z], _mm512_loadu_si512(a->qs + 64 * z));
                if (z & 1) s13 = _mm512_dpwssd_epi32(s13, p, b.sc[z]);
                else s02 = _mm512_dpwssd_epi32(s02, p, b.sc[z]);
            }
            /* offset correction, exact in int32 (|total| < 2^28) */
            const __m256i corr = _mm256_slli_epi32(
                _mm256_madd_epi16(_mm256_loadu_si256((const __m256i *)a->bsums), b.sc16), 5);
            const __m512i s = _mm512_sub_epi32(_mm512_add_epi32(s02, s13), _mm512_zextsi256_si512(corr));
            acc[r] = _mm512_fmadd_ps(_mm512_set1_ps(b.d * a->d), _mm512_cvtepi32_ps(s), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++) out[r] = _mm512_reduce_add_ps(acc[r]);
}

void nx_dot_q6_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        DISPATCH_ROWS(q6_rows(4, n, out + r0, w, xg, xs), q6_rows(3, n, out + r0, w, xg, xs),
                      q6_rows(2, n, out + r0, w, xg, xs), q6_rows(1, n, out + r0, w, xg, xs));
    }
}
