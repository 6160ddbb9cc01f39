/* quant_avx512.c - AVX-512 (F/BW/VL/DQ + VNNI) dot kernels; same contract and results (up to
 * float summation order) as the scalar kernels in quant_dot.c.  Compiled with the AVX-512 flags;
 * only called after nx_cpu_isa() reported NX_ISA_AVX512.
 *
 * Shape of every kernel (DEFINE_DOT, quant_simd_common.h): activation rows are taken in groups
 * of up to 4 (ROWS); for each group a helper specialised for the exact row count (always_inline
 * with a constant, so the per-row accumulators live in registers) walks the weight row once,
 * decodes each weight block into registers, and reuses it for every row of the group.
 *
 * Integer dots.  VNNI dpbusd multiplies unsigned by signed bytes.  Signed weights (q8_0, and
 * q4_0/q5_0 after removing their offset) go in as |w| with the sign moved onto the activation:
 * y' = (w < 0 ? -y : y), which needs y != -128 - true of every activation row produced by
 * from_float (q8_0/q8_K codes are in [-127, 127]).  Unsigned weights (q4_1, q5_1, K formats)
 * go in directly.  K formats use maddubs (u8 x s8 -> pairs in int16; no saturation since
 * 2 * 63 * 128 < 32767) and dpwssd to multiply by the int16 sub-block scales and accumulate.
 */
#include "quant/quant_simd_common.h"

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


DEFINE_DOT(nx_dot_f32_avx512, plain_rows, 0)
DEFINE_DOT(nx_dot_f16_avx512, plain_rows, 1)
DEFINE_DOT(nx_dot_bf16_avx512, plain_rows, 2)

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

DEFINE_DOT(nx_dot_q8_0_avx512, legacy_rows, 0)
DEFINE_DOT(nx_dot_q4_0_avx512, legacy_rows, 1)
DEFINE_DOT(nx_dot_q5_0_avx512, legacy_rows, 2)
DEFINE_DOT(nx_dot_q4_1_avx512, legacy_rows, 3)
DEFINE_DOT(nx_dot_q5_1_avx512, legacy_rows, 4)

/* ---- q8_0 on prepared activations -----------------------------------------------------------
 * The decode-critical kernel.  The plain q8_0 kernel above spends most of its time on per-row
 * sign handling and per-block int->float work; this one needs, per OCTET (8 weight blocks, 256
 * codes) and activation row, four 512-bit dpbusd, one conversion, one multiply and one FMA.
 *
 * Octet lanes.  The 8 blocks of an octet (34-byte blocks, codes 8-byte aligned nowhere in
 * particular) are loaded and transposed once for all activation rows into four vectors
 * V0..V3: qword slot j (j = 0..7) of Vq holds qword q (codes 8q..8q+7) of block j, so int32
 * lane 2j+h of Vq is dword 2q+h of block j.  Chaining the 4 dpbusd into one accumulator leaves
 * in lane 2j+h the exact partial dot of the 16 codes of block j in dwords h, 2+h, 4+h, 6+h:
 * two exact integers per block, where a plain layout would give 8 partial dots of 4 codes per
 * block, each needing a conversion and an FMA.  The transpose costs 4
 * inserts + 8 shuffles per octet, shared by all rows.
 *
 * Prepared activation row of n elements (nb = n / 32 blocks, no = ceil(nb / 8) octets), per
 * octet o, 384 bytes (PREP_OCT):
 *   [0, 256)    codes: 4 x 64 bytes, vector q, bytes 8j..8j+7 = codes 8q..8q+7 of block 8o+j
 *   [256, 320)  corr: int32 lane 2j+h = -128 * (sum of the 16 codes of block 8o+j that lane
 *               2j+h of the four vectors sees)
 *   [320, 384)  dy: float lane 2j+h = block 8o+j's fp16 scale, as float
 * Blocks past nb are zero (codes, corr, scale).  Codes and scales are exactly
 * nx_from_float_q8_0's (prepare calls it); nx_prep_q8_0_from_blocks makes the same layout from
 * q8_0 blocks (the GEMM path, gemm_avx512.c, reads exactly this layout).
 *
 * The offset trick.  dpbusd multiplies unsigned by signed bytes.  The signed weight codes w
 * become unsigned with u = w ^ 0x80 = w + 128 (0..255; -128 -> 0), and then, for each lane,
 * sum(u * y) = sum(w * y) + 128 * sum(y).  Starting the dpbusd chain at the lane's corr =
 * -128 * sum(y) leaves exactly sum(w * y): no per-row sign work, and corr depends only on the
 * activation row.  (Activation codes may even be -128 here.)  |lane| <= 16 * 128 * 128 = 2^18,
 * so the conversion to float is exact.
 *
 * Float operations (the definition; gemm_avx512.c repeats them exactly, tests/test_gemm.c
 * checks bit for bit): per row, one 16-lane accumulator acc, +0 at the start; for each octet
 * in order, acc = fma(float(lane), dw * dy, acc) lane-wise, with dw * dy the float product of
 * the lane's block's weight and activation scales; the result is hsum256(lower 8 lanes + upper
 * 8 lanes).  A zero-padded block adds fma(0, 0, acc) = acc (acc is never -0).  The same
 * instructions run for every row of a group, so row t of a batch equals the row alone.
 *
 * Scales: the 16 weight scales of 16 blocks are picked out of the lines their codes come from
 * (q8_0_scales16: word permutes; a masked gather for a partial group) and converted at once;
 * each octet's lane-wise dw is one vpermps of them, shared by all rows; dy is already expanded
 * in the activation row.
 *
 * Memory: the weight stream is the only traffic that misses the caches; a software prefetch
 * PREP_PF bytes ahead (about one 4096-element row) keeps enough lines in flight for a single
 * core to approach its streaming read bandwidth (measured: the hardware prefetchers alone reach
 * ~65 % of it).  Prefetches past the end of the weights are harmless hints. */

#define PREP_PF 4096
#define PREP_OCT 384

static inline int64_t prep_octets(int64_t n) { return (n / NX_QK + 7) / 8; }

size_t nx_prep_q8_0_row_bytes(int64_t n) { return (size_t)(PREP_OCT * prep_octets(n)); }

/* One octet of the prepared layout from cnt (1..8) q8_0 blocks; blocks cnt..7 are zero. */
static void prep_octet(const nx_block_q8_0 *x, int cnt, char *p) {
    _Alignas(64) float dy[16];
    for (int j = 0; j < 8; j++) {
        for (int q = 0; q < 4; q++) {
            if (j < cnt) memcpy(p + 64 * q + 8 * j, x[j].qs + 8 * q, 8);
            else memset(p + 64 * q + 8 * j, 0, 8);
        }
        dy[2 * j] = dy[2 * j + 1] = j < cnt ? f16(x[j].d) : 0.0f;
    }
    /* lane sums of the 16 codes each lane sees (dpbusd with unsigned 1s), times -128 */
    __m512i s = _mm512_setzero_si512();
    for (int q = 0; q < 4; q++) s = _mm512_dpbusd_epi32(s, _mm512_set1_epi8(1), _mm512_loadu_si512(p + 64 * q));
    _mm512_storeu_si512(p + 256, _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_slli_epi32(s, 7)));
    memcpy(p + 320, dy, sizeof dy);
}

void nx_prep_q8_0_from_blocks(const void *xq, void *dst, int64_t n) {
    const nx_block_q8_0 *x = xq;
    const int64_t nb = n / NX_QK, no = prep_octets(n);
    for (int64_t o = 0; o < no; o++)
        prep_octet(x + 8 * o, (int)NX_MIN((int64_t)8, nb - 8 * o), (char *)dst + (size_t)o * PREP_OCT);
}

void nx_prepare_q8_0_avx512(const float *src, void *dst, int64_t n) {
    const int64_t nb = n / NX_QK, no = prep_octets(n);
    nx_block_q8_0 blk[8];
    for (int64_t o = 0; o < no; o++) {
        const int cnt = (int)NX_MIN((int64_t)8, nb - 8 * o);
        nx_from_float_q8_0_avx512(src + 256 * o, blk, (int64_t)cnt * NX_QK);
        prep_octet(blk, cnt, (char *)dst + (size_t)o * PREP_OCT);
    }
}

/* The 16 (or cnt < 16) fp16 weight scales of blocks w[0..cnt) as floats (0 past cnt).
 * A whole group (cnt = 16, 544 bytes): block k's scale is the word at byte 34k, so the 512-bit
 * vector of bytes 64j..64j+63 holds the scales of blocks 2j (word 2j) and 2j+1 (word 2j+17);
 * four two-source word permutes pick blocks 4p..4p+3 out of vectors 2p and 2p+1 (words 4p, 4p+17
 * of the first, 4p+2, 4p+19 of the second).  The eight loads hit the lines the codes are read
 * from.  A vpgatherdd here cost ~40 % of the in-cache kernel time on AMD Zen (bench_dot, q8_0,
 * rows of 1024).  A partial group keeps a masked gather (it never reads past block cnt - 1). */
ALWAYS_INLINE __m512 q8_0_scales16(const nx_block_q8_0 *w, int cnt) {
    _Static_assert(sizeof(nx_block_q8_0) == 34 && offsetof(nx_block_q8_0, d) == 0, "scale offsets");
    if (cnt >= 16) {
        /* word indices 4p + 17i for output word 4p + i (two words per dword, low first) */
#define W2(a, b) ((a) | (b) << 16)
        const __m512i idx = _mm512_setr_epi32(W2(0, 17), W2(34, 51), W2(4, 21), W2(38, 55), W2(8, 25), W2(42, 59),
                                              W2(12, 29), W2(46, 63), 0, 0, 0, 0, 0, 0, 0, 0);
#undef W2
        const char *b = (const char *)w;
        __m512i s = _mm512_setzero_si512();
        for (int p = 0; p < 4; p++)
            s = _mm512_or_si512(s, _mm512_maskz_permutex2var_epi16((__mmask32)(0xFu << (4 * p)),
                                                                    _mm512_loadu_si512(b + 128 * p), idx,
                                                                    _mm512_loadu_si512(b + 128 * p + 64)));
        return _mm512_cvtph_ps(_mm512_castsi512_si256(s));
    }
    const __m512i offs = _mm512_setr_epi32(0, 34, 68, 102, 136, 170, 204, 238, 272, 306, 340, 374, 408, 442, 476, 510);
    /* dword gathers read 2 bytes past each scale: still inside the block */
    const __m512i g = _mm512_mask_i32gather_epi32(_mm512_setzero_si512(), (__mmask16)((1u << cnt) - 1), offs, w, 1);
    return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(g));
}

/* Codes of blocks w[0] and w[1], + 128 (unsigned), as one 512-bit vector; only the first
 * `have` (0..2) blocks are read, the others count as zero codes. */
ALWAYS_INLINE __m512i q8_0_pair_u(const nx_block_q8_0 *w, int have) {
    const __m256i lo = have > 0 ? _mm256_loadu_si256((const __m256i *)w[0].qs) : _mm256_setzero_si256();
    const __m256i hi = have > 1 ? _mm256_loadu_si256((const __m256i *)w[1].qs) : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8((char)0x80));
}

/* One octet (cnt <= 8 blocks at w; a missing block reads as zero codes, exactly like the
 * zero-padded copy it replaces: its activation codes and scales are zero too) against nr rows;
 * x[r] points at the row's octet, dw is the lane-wise weight scale (lane 2j+h = scale of block j). */
ALWAYS_INLINE void q8_0_octet_rows(int nr, int cnt, const nx_block_q8_0 *w, __m512 dw, const char *const *x,
                                   __m512 *acc) {
    const __m512i x0 = q8_0_pair_u(w, NX_MIN(2, cnt)), x1 = q8_0_pair_u(w + 2, NX_MAX(0, NX_MIN(2, cnt - 2)));
    const __m512i x2 = q8_0_pair_u(w + 4, NX_MAX(0, NX_MIN(2, cnt - 4))), x3 = q8_0_pair_u(w + 6, NX_MAX(0, cnt - 6));
    /* stage 1: qwords 0,1 (a01) and 2,3 (a23) of blocks 0..3, slot order block-minor */
    const __m512i i01 = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13), i23 = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
    const __m512i a01 = _mm512_permutex2var_epi64(x0, i01, x1), a23 = _mm512_permutex2var_epi64(x0, i23, x1);
    const __m512i b01 = _mm512_permutex2var_epi64(x2, i01, x3), b23 = _mm512_permutex2var_epi64(x2, i23, x3);
    /* stage 2: Vq = qword q of blocks 0..3 (from a) then 4..7 (from b) */
    const __m512i v0 = _mm512_shuffle_i64x2(a01, b01, 0x44), v1 = _mm512_shuffle_i64x2(a01, b01, 0xEE);
    const __m512i v2 = _mm512_shuffle_i64x2(a23, b23, 0x44), v3 = _mm512_shuffle_i64x2(a23, b23, 0xEE);
    for (int r = 0; r < nr; r++) {
        const char *p = x[r];
        __m512i t = _mm512_loadu_si512(p + 256);
        t = _mm512_dpbusd_epi32(t, v0, _mm512_loadu_si512(p));
        t = _mm512_dpbusd_epi32(t, v1, _mm512_loadu_si512(p + 64));
        t = _mm512_dpbusd_epi32(t, v2, _mm512_loadu_si512(p + 128));
        t = _mm512_dpbusd_epi32(t, v3, _mm512_loadu_si512(p + 192));
        acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(dw, _mm512_loadu_ps((const float *)(p + 320))),
                                 acc[r]);
    }
}

/* The accumulators of nr activation rows xr[0..nr) against one weight row of nb blocks (the
 * float definition above); every q8_0 prepared kernel builds a row's accumulator here. */
ALWAYS_INLINE void q8_0_prep_acc(int nr, int64_t nb, const nx_block_q8_0 *wb, const char *const *xr, __m512 *acc) {
    const char *xo[ROWS];
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    /* lane 2j+h takes block j's scale: octet 0 of a 16-block group uses lanes 0..7, octet 1 8..15 */
    const __m512i e0 = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i e1 = _mm512_add_epi32(e0, _mm512_set1_epi32(8));
    int64_t g = 0;
    for (; g + 16 <= nb; g += 16) { /* whole groups of 16 blocks: 2 octets */
        const char *pf = (const char *)(wb + g) + PREP_PF;
        for (int l = 0; l < 544; l += 64) _mm_prefetch(pf + l, _MM_HINT_T0);
        const __m512 dw16 = q8_0_scales16(wb + g, 16);
        for (int r = 0; r < nr; r++) xo[r] = xr[r] + (size_t)(g / 8) * PREP_OCT;
        q8_0_octet_rows(nr, 8, wb + g, _mm512_permutexvar_ps(e0, dw16), xo, acc);
        for (int r = 0; r < nr; r++) xo[r] += PREP_OCT;
        q8_0_octet_rows(nr, 8, wb + g + 8, _mm512_permutexvar_ps(e1, dw16), xo, acc);
    }
    if (g + 8 <= nb) { /* a whole octet left */
        for (int r = 0; r < nr; r++) xo[r] = xr[r] + (size_t)(g / 8) * PREP_OCT;
        q8_0_octet_rows(nr, 8, wb + g, _mm512_permutexvar_ps(e0, q8_0_scales16(wb + g, 8)), xo, acc);
        g += 8;
    }
    if (g < nb) { /* a partial octet: the missing blocks read as zero codes and scales (they add nothing) */
        const int cnt = (int)(nb - g);
        for (int r = 0; r < nr; r++) xo[r] = xr[r] + (size_t)(g / 8) * PREP_OCT;
        q8_0_octet_rows(nr, cnt, wb + g, _mm512_permutexvar_ps(e0, q8_0_scales16(wb + g, cnt)), xo, acc);
    }
}

ALWAYS_INLINE void q8_0_prep_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    (void)kind;
    const char *xr[ROWS];
    __m512 acc[ROWS];
    for (int r = 0; r < nr; r++) xr[r] = act_row(x, xs, r);
    q8_0_prep_acc(nr, n / NX_QK, w, xr, acc);
    for (int r = 0; r < nr; r++)
        out[r] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1)));
}

DEFINE_DOT(nx_dot_q8_0_prep_avx512, q8_0_prep_rows, 0) /* kind unused: one format */

/* Several weight rows against one activation row (decode, nx_vec_dot_w_fn): rows in address
 * order, so the weight stream and its prefetch are exactly those of back-to-back one-row calls
 * (no interleaved streams: a tile of weight rows sharing the activation loads was slower from
 * memory); each row's accumulator is q8_0_prep_acc's with nr = 1, and the horizontal sums are
 * taken four rows at a time (hsum256_x4, bit for bit hsum256).  What it saves per row: the call
 * and the serial horizontal sum that ends every row, which the out-of-order window cannot hide
 * behind the next row's start on rows of 1024 (32 blocks). */
ALWAYS_INLINE void q8_0_prep_wrows(int64_t nb, float *out, const nx_block_q8_0 *w, size_t ws, const char *x, int nw) {
    int m = 0;
    __m512 acc[4];
    for (; m + 4 <= nw; m += 4) {
        for (int i = 0; i < 4; i++)
            q8_0_prep_acc(1, nb, (const nx_block_q8_0 *)((const char *)w + (size_t)(m + i) * ws), &x, &acc[i]);
        hsum256_x4(acc, out + m);
    }
    if (m < nw) {
        for (int i = 0; i < 4; i++) {
            if (m + i < nw)
                q8_0_prep_acc(1, nb, (const nx_block_q8_0 *)((const char *)w + (size_t)(m + i) * ws), &x, &acc[i]);
            else
                acc[i] = _mm512_setzero_ps();
        }
        float o4[4];
        hsum256_x4(acc, o4);
        for (int i = 0; m + i < nw; i++) out[m + i] = o4[i];
    }
}

void nx_dot_w_q8_0_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw) {
    /* rows of 1024 (most of a decoded token's matrices): a constant block count, the compiler
     * unrolls the row */
    if (n == 1024) q8_0_prep_wrows(1024 / NX_QK, out, w, ws, x, nw);
    else q8_0_prep_wrows(n / NX_QK, out, w, ws, x, nw);
}
