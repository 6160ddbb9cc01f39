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
#include "quant_simd_common.h"

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

/* ---- q8_0 on prepared activations -----------------------------------------------------------
 * The decode-critical kernel.  The plain q8_0 kernel above spends most of its time on per-row
 * sign handling (abs, sign mask, masked negate), per-block int->float work at 256 bits and
 * scale gathering; this one needs, per pair of weight blocks and activation row, one 512-bit
 * dpbusd, one conversion, one permute and one FMA.
 *
 * Prepared activation row of n elements (nb = n / 32 blocks, np = ceil(nb / 2) block pairs,
 * nb16 = nb rounded up to a multiple of 16):
 *   [0, 64 np)            codes: block b's 32 int8 codes at byte 32 b (zero padding)
 *   [64 np, 128 np)       corr: one int32 per group of 4 codes, -128 * (sum of the 4 codes)
 *   [128 np, +4 nb16)     scale: block b's fp16 scale, as float (zero padding)
 * Codes and scales are exactly nx_from_float_q8_0's (prepare calls it).
 *
 * The offset trick.  dpbusd multiplies unsigned by signed bytes.  The signed weight codes w
 * become unsigned with u = w ^ 0x80 = w + 128 (0..255; -128 -> 0), and then, for each group of
 * 4 codes, sum(u * y) = sum(w * y) + 128 * sum(y).  Starting dpbusd's accumulator at the
 * group's corr = -128 * sum(y) leaves exactly sum(w * y) in each int32 lane: no per-row sign
 * work at all, and corr depends only on the activation row, so the matmul computes it once per
 * row and every weight row reuses it.  (Activation codes may even be -128 here.)  Each lane
 * is an exact partial dot of 4 codes of one block - lanes 0-7 the pair's first block, 8-15
 * its second - small enough (|.| < 2^17) to convert to float exactly; it is scaled by its
 * block's dw * dy and accumulated.  Keeping the correction per lane (not per block) matters:
 * the lanes' float rounding errors then scale with the true partial products.
 *
 * Bit-identical to the plain kernel above (and so to the GEMM path, gemm_avx512.c): the int32
 * lanes are the same exact partial dots, each is converted and fmadd-ed with the same float
 * dw * dy, even blocks into the lower half of one accumulator (the plain kernel's acc0), odd
 * blocks into the upper half (acc1), and the result is hsum256(lower + upper).  A missing odd
 * last block adds 0 * 0 to the upper half, which leaves it unchanged.  One FMA chain per row
 * (latency 4 cycles per block pair) is far from the bound: the kernel streams weights from
 * memory.  tests/test_quant_kernels.c checks the bit-identity.
 *
 * Scales: the 16 weight scales of a group of 16 blocks are gathered (one vpgatherdd at the
 * 34-byte block stride, fp16 in the low half of each dword) and converted at once, multiplied
 * by the row's 16 float dy into s16; the pair k's per-lane scale is a vpermps of s16.
 *
 * Memory: the weight stream is the only traffic that misses the caches; a software prefetch
 * PREP_PF bytes ahead (about one 4096-element row) keeps enough lines in flight for a single
 * core to approach its streaming read bandwidth (measured: the hardware prefetchers alone reach
 * ~65 % of it with this kernel).  Prefetches past the end of the weights are harmless hints. */

#define PREP_PF 4096

static inline int64_t prep_pairs(int64_t n) { return (n / NX_QK + 1) / 2; }

size_t nx_prep_q8_0_row_bytes(int64_t n) {
    const int64_t nb = n / NX_QK;
    return (size_t)(128 * prep_pairs(n) + 4 * ((nb + 15) & ~(int64_t)15));
}

/* Quantises one block of 32 floats exactly like nx_from_float_q8_0 (quant_convert.c):
 * amax = fmaxf over |x| (NaNs ignored), d = amax / 127, id = d ? 1 / d : 0, code =
 * roundf(x * id), scale = fp16(d).  The same IEEE operations, vectorised:
 *  - max_ps(|x|, acc) returns acc when |x| is NaN, like fmaxf;
 *  - roundf (halves away from zero) = truncate, then add sign(t) where |t - trunc(t)| >= 0.5
 *    (that difference is exact);
 *  - codes are truncated from int32 to bytes (vpmovdb), as the scalar (int8_t) cast does on
 *    x86 (a NaN product gives 0x80000000 -> 0 in both);
 *  - fp16(d) with F16C round-to-nearest-even = nx_f32_to_f16 (tested against each other in
 *    test_quant.c).
 * tests/test_quant_kernels.c compares the prepared codes and scales with from_float's. */
ALWAYS_INLINE __m128i q8_round_codes16(__m512 x, __m512 id) {
    const __m512 t = _mm512_mul_ps(x, id);
    __m512 r = _mm512_roundscale_ps(t, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    const __mmask16 up = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_sub_ps(t, r)), _mm512_set1_ps(0.5f), _CMP_GE_OQ);
    const __m512 one = _mm512_castsi512_ps(_mm512_or_si512(
        _mm512_and_si512(_mm512_castps_si512(t), _mm512_set1_epi32((int)0x80000000u)),
        _mm512_castps_si512(_mm512_set1_ps(1.0f))));
    r = _mm512_mask_add_ps(r, up, r, one);
    return _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(r));
}

void nx_prepare_q8_0_avx512(const float *src, void *dst, int64_t n) {
    const int64_t nb = n / NX_QK, np = prep_pairs(n), nb16 = (nb + 15) & ~(int64_t)15;
    int8_t *codes = dst;
    int32_t *corr = (int32_t *)((char *)dst + 64 * np);
    float *scale = (float *)((char *)dst + 128 * np);
    for (int64_t b = 0; b < nb; b++) {
        const __m512 x0 = _mm512_loadu_ps(src + b * NX_QK), x1 = _mm512_loadu_ps(src + b * NX_QK + 16);
        const __m512 m = _mm512_max_ps(_mm512_abs_ps(x1), _mm512_max_ps(_mm512_abs_ps(x0), _mm512_setzero_ps()));
        const float amax = _mm512_reduce_max_ps(m);
        const float d = amax / 127.0f;
        const float id = d != 0.0f ? 1.0f / d : 0.0f;
        const __m512 idv = _mm512_set1_ps(id);
        const __m256i q = _mm256_set_m128i(q8_round_codes16(x1, idv), q8_round_codes16(x0, idv));
        _mm256_storeu_si256((__m256i *)(codes + b * NX_QK), q);
        /* sum of each group of 4 codes (dpbusd with 1s), times -128 */
        const __m256i s4 = _mm256_dpbusd_epi32(_mm256_setzero_si256(), _mm256_set1_epi8(1), q);
        _mm256_storeu_si256((__m256i *)(corr + b * 8), _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(s4, 7)));
        scale[b] = _cvtsh_ss(_cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT));
    }
    if (nb & 1) { /* the missing second block of the last pair */
        memset(codes + nb * NX_QK, 0, NX_QK);
        memset(corr + nb * 8, 0, 8 * sizeof(int32_t));
    }
    for (int64_t b = nb; b < nb16; b++) scale[b] = 0.0f;
}

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

/* Codes of blocks w[0] and w[1] (or w[0] and zeros) as one 512-bit vector. */
ALWAYS_INLINE __m512i q8_0_pair(const nx_block_q8_0 *w, bool both) {
    const __m256i lo = _mm256_loadu_si256((const __m256i *)w[0].qs);
    if (!both) return _mm512_zextsi256_si512(lo);
    return _mm512_inserti64x4(_mm512_castsi256_si512(lo), _mm256_loadu_si256((const __m256i *)w[1].qs), 1);
}

typedef struct {
    const int8_t *codes;
    const int32_t *corr;
    const float *scale;
} prep_row;

/* One block pair (pair index p of the row, position k in its group of 16 blocks) against nr
 * rows.  idx selects s16 lanes 2k (x8) and 2k+1 (x8).  A missing second block (odd nb) has
 * zero codes on both sides and a zero scale, so its lanes add nothing. */
ALWAYS_INLINE void q8_0_pair_rows(int nr, __m512i wq, const prep_row *x, int64_t p, const __m512 *s16, __m512i idx,
                                  __m512 *acc) {
    const __m512i wu = _mm512_xor_si512(wq, _mm512_set1_epi8((char)0x80));
    for (int r = 0; r < nr; r++) {
        const __m512i d = _mm512_dpbusd_epi32(_mm512_loadu_si512(x[r].corr + 16 * p), wu,
                                              _mm512_loadu_si512(x[r].codes + 64 * p));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(d), _mm512_permutexvar_ps(idx, s16[r]), acc[r]);
    }
}

ALWAYS_INLINE void q8_0_prep_rows(int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK, np = prep_pairs(n);
    const nx_block_q8_0 *wb = w;
    prep_row xr[ROWS];
    __m512 acc[ROWS];
    for (int r = 0; r < nr; r++) {
        const char *row = act_row(x, xs, r);
        xr[r].codes = (const int8_t *)row;
        xr[r].corr = (const int32_t *)(row + 64 * np);
        xr[r].scale = (const float *)(row + 128 * np);
        acc[r] = _mm512_setzero_ps();
    }
    const __m512i idx0 = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1);
    const __m512i two = _mm512_set1_epi32(2);
    int64_t g = 0;
    for (; g + 16 <= nb; g += 16) { /* whole groups of 16 blocks: 8 pairs, unrolled */
        const __m512 dw = q8_0_scales16(wb + g, 16);
        __m512 s16[ROWS];
        for (int r = 0; r < nr; r++) s16[r] = _mm512_mul_ps(dw, _mm512_loadu_ps(xr[r].scale + g));
        __m512i idx = idx0;
#pragma GCC unroll 4
        for (int k = 0; k < 8; k += 2) {
            _mm_prefetch((const char *)(wb + g + 2 * k) + PREP_PF, _MM_HINT_T0);
            _mm_prefetch((const char *)(wb + g + 2 * k) + PREP_PF + 64, _MM_HINT_T0);
            q8_0_pair_rows(nr, q8_0_pair(wb + g + 2 * k, true), xr, g / 2 + k, s16, idx, acc);
            idx = _mm512_add_epi32(idx, two);
            q8_0_pair_rows(nr, q8_0_pair(wb + g + 2 * k + 2, true), xr, g / 2 + k + 1, s16, idx, acc);
            idx = _mm512_add_epi32(idx, two);
        }
    }
    if (g < nb) { /* last partial group */
        const int cnt = (int)(nb - g);
        const __m512 dw = q8_0_scales16(wb + g, cnt);
        __m512 s16[ROWS];
        for (int r = 0; r < nr; r++) s16[r] = _mm512_mul_ps(dw, _mm512_loadu_ps(xr[r].scale + g));
        __m512i idx = idx0;
        for (int k = 0; 2 * k < cnt; k++) {
            q8_0_pair_rows(nr, q8_0_pair(wb + g + 2 * k, 2 * k + 1 < cnt), xr, g / 2 + k, s16, idx, acc);
            idx = _mm512_add_epi32(idx, two);
        }
    }
    /* lower half: even blocks, upper half: odd blocks - the plain kernel's acc0 / acc1 */
    for (int r = 0; r < nr; r++)
        out[r] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1)));
}

void nx_dot_q8_0_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += ROWS) {
        const int nr = NX_MIN(ROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        DISPATCH_ROWS(q8_0_prep_rows(4, n, out + r0, w, xg, xs), q8_0_prep_rows(3, n, out + r0, w, xg, xs),
                      q8_0_prep_rows(2, n, out + r0, w, xg, xs), q8_0_prep_rows(1, n, out + r0, w, xg, xs));
    }
}
