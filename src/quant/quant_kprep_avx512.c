/* quant_kprep_avx512.c - q4_K, q5_K, q6_K against PREPARED q8_K activations (AVX-512 VNNI):
 * per super-block (256 codes) and activation row, four 512-bit dpbusd, one conversion, one
 * multiply and one FMA (+ one FMA for the q4_K / q5_K mins).  What matmul uses below
 * NX_GEMM_MIN_T rows (decode and speculative verify); gemm_avx512.c mirrors its float
 * operations for larger batches.
 *
 * Why: the kernels on plain q8_K rows (quant_kquant_avx512.c) need 8 multiply instructions per
 * super-block and row (4 maddubs + 4 dpwssd with the sub-block scales as int16); a 4-row
 * verify was compute-bound at ~1.4-1.75x a 1-row decode.  Here the sub-block scales are applied
 * in float per lane, so the integer work per row is 4 dpbusd.
 *
 * Lanes.  The 256 codes of a super-block are 16 groups of 16 (group k = elements 16k..16k+15:
 * exactly a q6_K sub-block, half a q4_K / q5_K sub-block, and q8_K's bsums[k]).  The weight
 * codes are decoded (unsigned: q4_K 0..15, q5_K 0..31, q6_K 0..63 before its -32) into four
 * vectors V0..V3 with dword lane k of Vq = codes 16k+4q .. 16k+4q+3; the prepared activation row
 * holds its codes in the same order, so a dpbusd chain over q leaves in lane k the exact dot of
 * group k's 16 codes (|lane| < 2^18: exact in float).  The decode is a dword permute of the
 * packed code bytes (vpermt2d) plus a per-lane shift and mask (nibbles); q5_K's fifth bit and
 * q6_K's two high bits come from a dword permute of qh and a per-lane rotate that brings each
 * lane's bit(s) to bits 4(..5) of every byte.
 *
 * Prepared activation row of n elements (nb = n / 256 super-blocks), per super-block 384 bytes
 * (KPREP_SB):
 *   [0, 256)    codes: vector q (64 bytes), dword lane k = codes 16k+4q .. 16k+4q+3
 *   [256, 320)  q4_K / q5_K: float yd[16], lane k = dy * float(bsums[k])
 *               q6_K:        int32 corr[16], lane k = -32 * bsums[k]
 *   [320, 384)  float dy, 16 copies
 * Codes, dy and bsums are exactly nx_from_float_q8_K's; nx_prep_q8_K_from_blocks makes the same
 * layout from q8_K blocks (the GEMM path reads exactly this layout).
 *
 * Float operations (the definition; gemm_avx512.c repeats them exactly and tests/test_gemm.c
 * checks bit for bit): per row one 16-lane accumulator acc, +0 at the start; per super-block in
 * order, with L = the int32 lane (q6_K: the chain starts at corr, so L = sum (q - 32) y exactly):
 *   q4_K / q5_K: acc = fma(float(L), ds * dy, acc); acc = fnmadd(dm, yd, acc)
 *   q6_K:        acc = fma(float(L), ds * dy, acc)
 * where ds = d * float(sc of lane k's sub-block) and dm = dmin * float(min of it), float
 * products rounded once (computed once per weight super-block); result hsum256(lower 8 lanes +
 * upper 8 lanes).  The same instructions run for every row of a group, so row t of a batch
 * equals the row alone.
 */
#include "quant/quant_simd_common.h"

#define KPREP_SB 384
/* activation rows per pass over the weights (the matmul tile is 8) */
#define KROWS 8

size_t nx_prep_q8_K_row_bytes(int64_t n) { return (size_t)(n / NX_QK_K) * KPREP_SB; }

/* ---- activations -------------------------------------------------------------------------- */

/* One super-block of the prepared layout from a q8_K block; six: the q6_K variant (corr). */
static void prep_sb(const nx_block_q8_K *x, bool six, char *p) {
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 16; k++) memcpy(p + 64 * q + 4 * k, x->qs + 16 * k + 4 * q, 4);
    if (six) {
        int32_t corr[16];
        for (int k = 0; k < 16; k++) corr[k] = -32 * (int32_t)x->bsums[k];
        memcpy(p + 256, corr, sizeof corr);
    } else {
        /* dy * float(bsum): one rounded product per lane (vectorised, the same IEEE operation) */
        const __m512 bs = _mm512_cvtepi32_ps(_mm512_cvtepi16_epi32(_mm256_loadu_si256((const __m256i *)x->bsums)));
        _mm512_storeu_ps((float *)(p + 256), _mm512_mul_ps(_mm512_set1_ps(x->d), bs));
    }
    _mm512_storeu_ps((float *)(p + 320), _mm512_set1_ps(x->d));
}

static void prep_from_blocks(const void *xq, void *dst, int64_t n, bool six) {
    const nx_block_q8_K *x = xq;
    for (int64_t ib = 0; ib < n / NX_QK_K; ib++) prep_sb(x + ib, six, (char *)dst + (size_t)ib * KPREP_SB);
}

static void prepare(const float *src, void *dst, int64_t n, bool six) {
    nx_block_q8_K blk;
    for (int64_t ib = 0; ib < n / NX_QK_K; ib++) {
        nx_from_float_q8_K_avx512(src + ib * NX_QK_K, &blk, NX_QK_K);
        prep_sb(&blk, six, (char *)dst + (size_t)ib * KPREP_SB);
    }
}

void nx_prep_q8_K_from_blocks(const void *xq, void *dst, int64_t n) { prep_from_blocks(xq, dst, n, false); }
void nx_prep_q8_K_q6_from_blocks(const void *xq, void *dst, int64_t n) { prep_from_blocks(xq, dst, n, true); }
void nx_prepare_q8_K_avx512(const float *src, void *dst, int64_t n) { prepare(src, dst, n, false); }
void nx_prepare_q8_K_q6_avx512(const float *src, void *dst, int64_t n) { prepare(src, dst, n, true); }

/* ---- weights -------------------------------------------------------------------------------- */

/* The decoded weight super-block: codes in lane order, float scales per lane. */
typedef struct {
    __m512i v[4];
    __m512 ds; /* d * sc of lane k's sub-block */
    __m512 dm; /* dmin * min of it (q4_K / q5_K) */
} kpblock;

#define KP_Q4 0
#define KP_Q5 1
#define KP_Q6 2

/* Index tables, per q: the source dword of lane k and the lane's shift / rotate counts.
 * q4_K / q5_K (group k = half h = k % 2 of sub-block sb = k / 2; element l = 16h + 4q + u of
 * the sub-block): qs byte 32 * (sb / 2) + l, low nibble for even sb, high for odd; as a dword of
 * the 128 qs bytes (raw0 = bytes 0..63 -> 0..15, raw1 -> 16..31): 16 (sb >= 4) + 8 (sb % 4 >= 2)
 * + 4h + q.  q5_K's bit 4 of that element is bit sb of qh[l], qh dword 4h + q; rotating the
 * dword right by (sb - 4) mod 32 moves bit sb of every byte to bit 4 of the same byte.
 * q6_K (group k = 8h + 2c + s: half h of 128, quarter c of 32, s = 16-element half of it;
 * element l = 16s + 4q + u of that quarter): ql byte 64h + 32 (c & 1) + l, low nibble for c < 2,
 * high for c >= 2, i.e. ql dword 16h + 8 (c & 1) + 4s + q; its bits 4..5 are bits 2c..2c+1 of
 * qh byte 32h + l, qh dword 8h + 4s + q, rotated right by (2c - 4) mod 32.
 * (tests/test_quant_kernels.c spells the decoded layout out independently.) */
typedef struct {
    uint32_t src[4][16];  /* dword index into the code bytes (permutex2var: 16.. = second source) */
    uint32_t hsrc[4][16]; /* dword index into qh (q5_K, q6_K) */
    uint32_t shr[16];     /* 0 or 4: which nibble */
    uint32_t rot[16];     /* right rotation bringing the lane's qh bit(s) to bit 4 of every byte */
} kp_tables;

static const kp_tables kp_tab_k4 = {
    {{0, 4, 0, 4, 8, 12, 8, 12, 16, 20, 16, 20, 24, 28, 24, 28},
     {1, 5, 1, 5, 9, 13, 9, 13, 17, 21, 17, 21, 25, 29, 25, 29},
     {2, 6, 2, 6, 10, 14, 10, 14, 18, 22, 18, 22, 26, 30, 26, 30},
     {3, 7, 3, 7, 11, 15, 11, 15, 19, 23, 19, 23, 27, 31, 27, 31}},
    {{0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4},
     {1, 5, 1, 5, 1, 5, 1, 5, 1, 5, 1, 5, 1, 5, 1, 5},
     {2, 6, 2, 6, 2, 6, 2, 6, 2, 6, 2, 6, 2, 6, 2, 6},
     {3, 7, 3, 7, 3, 7, 3, 7, 3, 7, 3, 7, 3, 7, 3, 7}},
    {0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4, 0, 0, 4, 4},
    {28, 28, 29, 29, 30, 30, 31, 31, 0, 0, 1, 1, 2, 2, 3, 3},
};

static const kp_tables kp_tab_q6 = {
    {{0, 4, 8, 12, 0, 4, 8, 12, 16, 20, 24, 28, 16, 20, 24, 28},
     {1, 5, 9, 13, 1, 5, 9, 13, 17, 21, 25, 29, 17, 21, 25, 29},
     {2, 6, 10, 14, 2, 6, 10, 14, 18, 22, 26, 30, 18, 22, 26, 30},
     {3, 7, 11, 15, 3, 7, 11, 15, 19, 23, 27, 31, 19, 23, 27, 31}},
    {{0, 4, 0, 4, 0, 4, 0, 4, 8, 12, 8, 12, 8, 12, 8, 12},
     {1, 5, 1, 5, 1, 5, 1, 5, 9, 13, 9, 13, 9, 13, 9, 13},
     {2, 6, 2, 6, 2, 6, 2, 6, 10, 14, 10, 14, 10, 14, 10, 14},
     {3, 7, 3, 7, 3, 7, 3, 7, 11, 15, 11, 15, 11, 15, 11, 15}},
    {0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4},
    {28, 28, 30, 30, 0, 0, 2, 2, 28, 28, 30, 30, 0, 0, 2, 2},
};

/* The tables as registers, loaded once per kernel call. */
typedef struct {
    __m512i src[4], hsrc[4], shr, rot;
} kp_regs;

ALWAYS_INLINE kp_regs load_regs(int kind) {
    const kp_tables *t = kind == KP_Q6 ? &kp_tab_q6 : &kp_tab_k4;
    kp_regs r;
    for (int q = 0; q < 4; q++) {
        r.src[q] = _mm512_loadu_si512(t->src[q]);
        r.hsrc[q] = _mm512_loadu_si512(t->hsrc[q]);
    }
    r.shr = _mm512_loadu_si512(t->shr);
    r.rot = _mm512_loadu_si512(t->rot);
    return r;
}

/* The 8 scales and 8 mins of a q4_K / q5_K block as 16 bytes {sc0..sc7, m0..m7}, in registers
 * (the bit surgery of nx_k4_unpack_scales on two 64-bit words; a byte array would cost a
 * store-forwarding stall per super-block): ab = scale bytes 0..7, c = bytes 8..11; lo = ab &
 * 0x3F.. is sc0..3 | m0..3; hi = (nibbles of c: low ones in bytes 0..3, high ones in 4..7) | (top
 * two bits of every byte of ab at bits 4..5) is sc4..7 | m4..7; a 32-bit interleave orders them. */
ALWAYS_INLINE __m128i k4_scm_bytes(const uint8_t *scales) {
    uint64_t ab;
    uint32_t c;
    memcpy(&ab, scales, 8);
    memcpy(&c, scales + 8, 4);
    const uint64_t lo = ab & 0x3F3F3F3F3F3F3F3Full;
    const uint64_t cn = (uint64_t)(c & 0x0F0F0F0Fu) | ((uint64_t)((c >> 4) & 0x0F0F0F0Fu) << 32);
    const uint64_t hi = cn | ((ab >> 2) & 0x3030303030303030ull);
    return _mm_unpacklo_epi32(_mm_cvtsi64_si128((long long)lo), _mm_cvtsi64_si128((long long)hi));
}

/* vpternlog immediate for A | (B & C) (truth tables A = 0xF0, B = 0xCC, C = 0xAA) */
#define TERN_A_OR_B_AND_C 0xF8

ALWAYS_INLINE kpblock decode_kp(int kind, const void *w, int64_t ib, const kp_regs *rg) {
    kpblock b;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    if (kind == KP_Q6) {
        const nx_block_q6_K *p = (const nx_block_q6_K *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        const __m512i ql0 = _mm512_loadu_si512(p->ql), ql1 = _mm512_loadu_si512(p->ql + 64);
        const __m512i qh = _mm512_loadu_si512(p->qh);
        const __m512i bits45 = _mm512_set1_epi8(0x30);
        for (int q = 0; q < 4; q++) {
            const __m512i lo = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(ql0, rg->src[q], ql1), rg->shr),
                                                low4);
            const __m512i hi = _mm512_rorv_epi32(_mm512_permutexvar_epi32(rg->hsrc[q], qh), rg->rot);
            b.v[q] = _mm512_ternarylogic_epi32(lo, hi, bits45, TERN_A_OR_B_AND_C);
        }
        const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p->scales)));
        b.ds = _mm512_mul_ps(_mm512_set1_ps(f16(p->d)), sc);
        b.dm = _mm512_setzero_ps();
        return b;
    }
    const uint8_t *scales, *qs;
    uint16_t d, dmin;
    __m512i qhz = _mm512_setzero_si512();
    if (kind == KP_Q5) {
        const nx_block_q5_K *p = (const nx_block_q5_K *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        scales = p->scales, qs = p->qs, d = p->d, dmin = p->dmin;
        qhz = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)p->qh));
    } else {
        const nx_block_q4_K *p = (const nx_block_q4_K *)w + ib;
        prefetch_ahead(p, (int)sizeof *p);
        scales = p->scales, qs = p->qs, d = p->d, dmin = p->dmin;
    }
    const __m512i raw0 = _mm512_loadu_si512(qs), raw1 = _mm512_loadu_si512(qs + 64);
    const __m512i bit4 = _mm512_set1_epi8(0x10);
    for (int q = 0; q < 4; q++) {
        b.v[q] = _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(raw0, rg->src[q], raw1), rg->shr), low4);
        if (kind == KP_Q5) {
            const __m512i hb = _mm512_rorv_epi32(_mm512_permutexvar_epi32(rg->hsrc[q], qhz), rg->rot);
            b.v[q] = _mm512_ternarylogic_epi32(b.v[q], hb, bit4, TERN_A_OR_B_AND_C);
        }
    }
    /* the 8 scales and 8 mins as floats [sc0..sc7, m0..m7], then per lane (sub-block k / 2) */
    const __m512 f = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(k4_scm_bytes(scales)));
    const __m512i isc = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
    const __m512i imn = _mm512_add_epi32(isc, _mm512_set1_epi32(8));
    b.ds = _mm512_mul_ps(_mm512_set1_ps(f16(d)), _mm512_permutexvar_ps(isc, f));
    b.dm = _mm512_mul_ps(_mm512_set1_ps(f16(dmin)), _mm512_permutexvar_ps(imn, f));
    return b;
}

void nx_kprep_decode(uint32_t type, const void *w, int64_t ib, uint8_t codes[256], float ds[16], float dm[16]) {
    const int kind = type == NX_TYPE_Q6_K ? KP_Q6 : type == NX_TYPE_Q5_K ? KP_Q5 : KP_Q4;
    const kp_regs rg = load_regs(kind);
    const kpblock b = decode_kp(kind, w, ib, &rg);
    for (int q = 0; q < 4; q++) _mm512_storeu_si512(codes + 64 * q, b.v[q]);
    _mm512_storeu_ps(ds, b.ds);
    _mm512_storeu_ps(dm, b.dm);
}

/* ---- the kernel --------------------------------------------------------------------------- */

ALWAYS_INLINE void kp_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const int64_t nb = n / NX_QK_K;
    const kp_regs rg = load_regs(kind);
    const char *xr[KROWS];
    __m512 acc[KROWS];
    for (int r = 0; r < nr; r++) {
        xr[r] = act_row(x, xs, r);
        acc[r] = _mm512_setzero_ps();
    }
    for (int64_t ib = 0; ib < nb; ib++) {
        const kpblock b = decode_kp(kind, w, ib, &rg);
        for (int r = 0; r < nr; r++) {
            const char *a = xr[r] + (size_t)ib * KPREP_SB;
            __m512i t = kind == KP_Q6 ? _mm512_loadu_si512(a + 256) : _mm512_setzero_si512();
            t = _mm512_dpbusd_epi32(t, b.v[0], _mm512_loadu_si512(a));
            t = _mm512_dpbusd_epi32(t, b.v[1], _mm512_loadu_si512(a + 64));
            t = _mm512_dpbusd_epi32(t, b.v[2], _mm512_loadu_si512(a + 128));
            t = _mm512_dpbusd_epi32(t, b.v[3], _mm512_loadu_si512(a + 192));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(b.ds, _mm512_loadu_ps((const float *)(a + 320))),
                                     acc[r]);
            if (kind != KP_Q6) acc[r] = _mm512_fnmadd_ps(b.dm, _mm512_loadu_ps((const float *)(a + 256)), acc[r]);
        }
    }
    for (int r = 0; r < nr; r++)
        out[r] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[r]), _mm512_extractf32x8_ps(acc[r], 1)));
}

#define KP_CASE(kind, k) \
    case k: kp_rows(kind, k, n, out + r0, w, xg, xs); break;

ALWAYS_INLINE void kp_dot(int kind, int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += KROWS) {
        const int nr = NX_MIN(KROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        switch (nr) {
            KP_CASE(kind, 8)
            KP_CASE(kind, 7)
            KP_CASE(kind, 6)
            KP_CASE(kind, 5)
            KP_CASE(kind, 4)
            KP_CASE(kind, 3)
            KP_CASE(kind, 2)
        default: kp_rows(kind, 1, n, out + r0, w, xg, xs); break;
        }
    }
}

void nx_dot_q4_K_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    kp_dot(KP_Q4, n, out, w, x, xs, nrows);
}
void nx_dot_q5_K_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    kp_dot(KP_Q5, n, out, w, x, xs, nrows);
}
void nx_dot_q6_K_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows) {
    kp_dot(KP_Q6, n, out, w, x, xs, nrows);
}
