/* quant_kprep_avx512.c - q4_K, q5_K, q6_K against PREPARED q8_K activations (AVX-512 VNNI).
 * What matmul uses below NX_GEMM_MIN_T rows (decode and speculative verify); gemm_avx512.c
 * mirrors its float operations for larger batches.
 *
 * Why: the kernels on plain q8_K rows (quant_kquant_avx512.c) need 8 multiply instructions per
 * super-block and row (4 maddubs + 4 dpwssd with the sub-block scales as int16); a 4-row
 * verify was compute-bound.  Here the sub-block scales are applied in float per lane, so the
 * integer work per super-block and row is 4 dpbusd (256 8-bit products), and the float work per
 * row is one conversion, one multiply and one FMA per 16 lanes (+ one FMA for the q4_K / q5_K
 * mins).  The weight decode (codes in lane order, per-lane float scales) is done once per
 * weight super-block for all the activation rows of a group.
 *
 * Lanes.  A dpbusd chain leaves in each int32 lane the exact dot of the codes the lane saw; a
 * lane must see codes of one sub-block only, so that one float scale applies.
 *   q4_K / q5_K (8 sub-blocks of 32): the kernel works on PAIRS of super-blocks (a "step", 512
 *   codes): lane 8s + j (s = 0, 1: super-block 2P + s of pair P; j = sub-block) of code vector
 *   v (v = 0..7) holds elements 32j + 4v .. 32j + 4v + 3 of that super-block, so after 8 dpbusd
 *   lane 8s + j is the dot of the whole sub-block (32 codes).  Per pair and row the float work
 *   is then one conversion, multiply, FMA and mins FMA for 16 sub-blocks (two super-blocks),
 *   half of what one super-block per 16 lanes costs.  When the row has an odd number of
 *   super-blocks the last pair's second half is zero (codes, scales, dy).
 *   q6_K (16 sub-blocks of 16): one super-block per step; lane k of vector q (q = 0..3) holds
 *   elements 16k + 4q .. 16k + 4q + 3.
 * Decode: q4_K / q5_K take the packed code bytes as 128-bit chunks of the two super-blocks
 * (vshufi64x2: chunk p of F = qs dwords 8p..8p+3, of S = 8p+4..8p+7), then per vector one
 * vpermt2d over the pair, a per-lane shift (which nibble) and a mask; q5_K's fifth bit is a
 * dword permute of both qh arrays and a per-lane rotate bringing bit j of every byte to bit 4.
 * q6_K: a vpermt2d of ql, shift and mask, and a vpermd of qh with a rotate for bits 4..5.
 * (tests/test_quant_kernels.c spells the decoded layouts out independently.)
 *
 * Prepared activation row of n elements (nb = n / 256 super-blocks):
 *   q4_K / q5_K: ceil(nb / 2) steps of KP4_STEP = 640 bytes:
 *     [0, 512)    codes: vector v (64 bytes), dword lane 8s + j = codes 32j+4v .. 32j+4v+3 of
 *                 super-block 2P + s
 *     [512, 576)  float yd[16], lane 8s + j = dy_s * float(bsums[2j] + bsums[2j+1]) (the sum of
 *                 sub-block j's 32 codes: exact in float)
 *     [576, 640)  float dy, lane 8s + j = dy_s
 *   q6_K: nb steps of KP6_STEP = 384 bytes: codes [0, 256) (vector q, lane k = codes
 *     16k+4q .. 16k+4q+3), int32 corr[16] = -32 * bsums[k] at 256, 16 copies of dy at 320.
 * Codes, dy and bsums are exactly nx_from_float_q8_K's; nx_prep_q8_K_from_blocks /
 * nx_prep_q8_K_q6_from_blocks make the same layouts from q8_K blocks (the GEMM path reads them).
 *
 * Float operations (the definition; gemm_avx512.c repeats them exactly and tests/test_gemm.c
 * checks bit for bit): per row one 16-lane accumulator acc, +0 at the start; per step in
 * order, with L = the int32 lane (q6_K: the chain starts at corr, so L = sum (q - 32) y exactly):
 *   q4_K / q5_K: acc = fma(float(L), ds * dy, acc); acc = fnmadd(dm, yd, acc)
 *   q6_K:        acc = fma(float(L), ds * dy, acc)
 * where ds = d * float(sc of the lane's sub-block) and dm = dmin * float(min of it), float
 * products rounded once (computed once per weight step); result hsum256(lower 8 lanes + upper
 * 8 lanes).  The same instructions run for every row of a group, so row t of a batch equals the
 * row alone.
 */
#include "quant/quant_simd_common.h"

#define KP4_STEP 640 /* q4_K / q5_K: bytes per pair of super-blocks */
#define KP6_STEP 384 /* q6_K: bytes per super-block */
/* activation rows per pass over the weights (the matmul tile is 8) */
#define KROWS 8

static int64_t k4_steps(int64_t n) { return (n / NX_QK_K + 1) / 2; }

size_t nx_prep_q8_K_row_bytes(int64_t n) { return (size_t)k4_steps(n) * KP4_STEP; }
size_t nx_prep_q8_K_q6_row_bytes(int64_t n) { return (size_t)(n / NX_QK_K) * KP6_STEP; }

/* ---- activations -------------------------------------------------------------------------- */

/* One step of the q4_K / q5_K layout from q8_K blocks x0 and x1 (x1 NULL: the zero half). */
static void prep_pair(const nx_block_q8_K *x0, const nx_block_q8_K *x1, char *p) {
    memset(p, 0, KP4_STEP);
    float yd[16] = {0}, dy[16] = {0};
    for (int s = 0; s < 2; s++) {
        const nx_block_q8_K *x = s ? x1 : x0;
        if (!x) continue;
        for (int v = 0; v < 8; v++)
            for (int j = 0; j < 8; j++) memcpy(p + 64 * v + 4 * (8 * s + j), x->qs + 32 * j + 4 * v, 4);
        for (int j = 0; j < 8; j++) {
            yd[8 * s + j] = x->d * (float)((int32_t)x->bsums[2 * j] + (int32_t)x->bsums[2 * j + 1]);
            dy[8 * s + j] = x->d;
        }
    }
    memcpy(p + 512, yd, sizeof yd);
    memcpy(p + 576, dy, sizeof dy);
}

/* One step of the q6_K layout from a q8_K block. */
static void prep_six(const nx_block_q8_K *x, char *p) {
    for (int q = 0; q < 4; q++)
        for (int k = 0; k < 16; k++) memcpy(p + 64 * q + 4 * k, x->qs + 16 * k + 4 * q, 4);
    int32_t corr[16];
    for (int k = 0; k < 16; k++) corr[k] = -32 * (int32_t)x->bsums[k];
    memcpy(p + 256, corr, sizeof corr);
    _mm512_storeu_ps((float *)(p + 320), _mm512_set1_ps(x->d));
}

void nx_prep_q8_K_from_blocks(const void *xq, void *dst, int64_t n) {
    const nx_block_q8_K *x = xq;
    const int64_t nb = n / NX_QK_K;
    for (int64_t ib = 0; ib < nb; ib += 2)
        prep_pair(x + ib, ib + 1 < nb ? x + ib + 1 : NULL, (char *)dst + (size_t)(ib / 2) * KP4_STEP);
}

void nx_prep_q8_K_q6_from_blocks(const void *xq, void *dst, int64_t n) {
    const nx_block_q8_K *x = xq;
    for (int64_t ib = 0; ib < n / NX_QK_K; ib++) prep_six(x + ib, (char *)dst + (size_t)ib * KP6_STEP);
}

void nx_prepare_q8_K_avx512(const float *src, void *dst, int64_t n) {
    const int64_t nb = n / NX_QK_K;
    nx_block_q8_K blk[2];
    for (int64_t ib = 0; ib < nb; ib += 2) {
        const bool two = ib + 1 < nb;
        nx_from_float_q8_K_avx512(src + ib * NX_QK_K, blk, two ? 2 * NX_QK_K : NX_QK_K);
        prep_pair(&blk[0], two ? &blk[1] : NULL, (char *)dst + (size_t)(ib / 2) * KP4_STEP);
    }
}

void nx_prepare_q8_K_q6_avx512(const float *src, void *dst, int64_t n) {
    nx_block_q8_K blk;
    for (int64_t ib = 0; ib < n / NX_QK_K; ib++) {
        nx_from_float_q8_K_avx512(src + ib * NX_QK_K, &blk, NX_QK_K);
        prep_six(&blk, (char *)dst + (size_t)ib * KP6_STEP);
    }
}

/* ---- weights -------------------------------------------------------------------------------- */

/* One decoded weight step: codes in lane order (q6_K uses v[0..3]), float scales per lane. */
typedef struct {
    __m512i v[8];
    __m512 ds; /* d * sc of the lane's sub-block */
    __m512 dm; /* dmin * min of it (q4_K / q5_K) */
} kpstep;

#define KP_Q4 0
#define KP_Q5 1
#define KP_Q6 2

/* Index tables (see the header).  q4_K / q5_K, lane l = 8s + j: the F / S dword of vector v
 * (v < 4: F, else S, with v' = v % 4) is 16s + 4(j / 2) + v'; the nibble is j % 2; q5_K's qh
 * dword (of the two qh arrays side by side) is 8s + v, rotated right by (j - 4) mod 32.
 * q6_K (group k = 8h + 2c + s: half h of 128, quarter c of 32, s = 16-element half of it;
 * element l = 16s + 4q + u of that quarter): ql byte 64h + 32 (c & 1) + l, low nibble for c < 2,
 * high for c >= 2, i.e. ql dword 16h + 8 (c & 1) + 4s + q; its bits 4..5 are bits 2c..2c+1 of
 * qh byte 32h + l, qh dword 8h + 4s + q, rotated right by (2c - 4) mod 32. */
static const uint32_t k4_src[4][16] = {
    {0, 0, 4, 4, 8, 8, 12, 12, 16, 16, 20, 20, 24, 24, 28, 28},
    {1, 1, 5, 5, 9, 9, 13, 13, 17, 17, 21, 21, 25, 25, 29, 29},
    {2, 2, 6, 6, 10, 10, 14, 14, 18, 18, 22, 22, 26, 26, 30, 30},
    {3, 3, 7, 7, 11, 11, 15, 15, 19, 19, 23, 23, 27, 27, 31, 31},
};
static const uint32_t k4_shr[16] = {0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4};
static const uint32_t k5_hbase[16] = {0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8};
static const uint32_t k5_rot[16] = {28, 29, 30, 31, 0, 1, 2, 3, 28, 29, 30, 31, 0, 1, 2, 3};

static const uint32_t q6_src[4][16] = {
    {0, 4, 8, 12, 0, 4, 8, 12, 16, 20, 24, 28, 16, 20, 24, 28},
    {1, 5, 9, 13, 1, 5, 9, 13, 17, 21, 25, 29, 17, 21, 25, 29},
    {2, 6, 10, 14, 2, 6, 10, 14, 18, 22, 26, 30, 18, 22, 26, 30},
    {3, 7, 11, 15, 3, 7, 11, 15, 19, 23, 27, 31, 19, 23, 27, 31},
};
static const uint32_t q6_hsrc[4][16] = {
    {0, 4, 0, 4, 0, 4, 0, 4, 8, 12, 8, 12, 8, 12, 8, 12},
    {1, 5, 1, 5, 1, 5, 1, 5, 9, 13, 9, 13, 9, 13, 9, 13},
    {2, 6, 2, 6, 2, 6, 2, 6, 10, 14, 10, 14, 10, 14, 10, 14},
    {3, 7, 3, 7, 3, 7, 3, 7, 11, 15, 11, 15, 11, 15, 11, 15},
};
static const uint32_t q6_shr[16] = {0, 0, 0, 0, 4, 4, 4, 4, 0, 0, 0, 0, 4, 4, 4, 4};
static const uint32_t q6_rot[16] = {28, 28, 30, 30, 0, 0, 2, 2, 28, 28, 30, 30, 0, 0, 2, 2};

/* The tables as registers, loaded once per kernel call. */
typedef struct {
    __m512i src[4], hsrc[4], shr, rot;
} kp_regs;

ALWAYS_INLINE kp_regs load_regs(int kind) {
    kp_regs r;
    for (int q = 0; q < 4; q++) {
        r.src[q] = _mm512_loadu_si512(kind == KP_Q6 ? q6_src[q] : k4_src[q]);
        r.hsrc[q] = kind == KP_Q6 ? _mm512_loadu_si512(q6_hsrc[q])
                                  : _mm512_add_epi32(_mm512_loadu_si512(k5_hbase), _mm512_set1_epi32(q));
    }
    r.shr = _mm512_loadu_si512(kind == KP_Q6 ? q6_shr : k4_shr);
    r.rot = _mm512_loadu_si512(kind == KP_Q6 ? q6_rot : k5_rot);
    return r;
}

/* vpternlog immediate for A | (B & C) (truth tables A = 0xF0, B = 0xCC, C = 0xAA) */
#define TERN_A_OR_B_AND_C 0xF8
/* (A & B) | C */
#define TERN_A_AND_B_OR_C 0xEA

/* q6_K super-block ib. */
ALWAYS_INLINE kpstep decode_six(const void *w, int64_t ib, const kp_regs *rg) {
    kpstep b;
    const __m512i low4 = _mm512_set1_epi8(0x0F);
    const nx_block_q6_K *p = (const nx_block_q6_K *)w + ib;
    prefetch_ahead(p, (int)sizeof *p);
    const __m512i ql0 = _mm512_loadu_si512(p->ql), ql1 = _mm512_loadu_si512(p->ql + 64);
    const __m512i qh = _mm512_loadu_si512(p->qh);
    const __m512i bits45 = _mm512_set1_epi8(0x30);
    for (int q = 0; q < 4; q++) {
        const __m512i lo =
            _mm512_and_si512(_mm512_srlv_epi32(_mm512_permutex2var_epi32(ql0, rg->src[q], ql1), rg->shr), low4);
        const __m512i hi = _mm512_rorv_epi32(_mm512_permutexvar_epi32(rg->hsrc[q], qh), rg->rot);
        b.v[q] = _mm512_ternarylogic_epi32(lo, hi, bits45, TERN_A_OR_B_AND_C);
    }
    for (int q = 4; q < 8; q++) b.v[q] = _mm512_setzero_si512();
    const __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)p->scales)));
    b.ds = _mm512_mul_ps(_mm512_set1_ps(f16(p->d)), sc);
    b.dm = _mm512_setzero_ps();
    return b;
}

/* The scales and mins of two q4_K / q5_K blocks (bytes 0..15 of each: d, dmin, scales[12]; the
 * second in the upper 128-bit lane of r) as 16-byte lanes {sc0..sc7, m0..m7}.  With s = scales:
 * sc_j = s[j] & 63, m_j = s[j+4] & 63 (j < 4); sc_j = (s[j+4] & 15) | (s[j-4] >> 6) << 4,
 * m_j = (s[j+4] >> 4) | (s[j] >> 6) << 4 (j >= 4).  Byte shuffles of r, r >> 4 and r >> 2 (16-bit
 * shifts: the bits pulled in from the next byte are masked off). */
ALWAYS_INLINE __m256i k4_scm_pair(__m256i r) {
    /* byte i of the output lane <- byte of r (scales start at byte 4); -1: zero */
    const __m256i ilo = _mm256_setr_epi8(4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15, /* */
                                         4, 5, 6, 7, 12, 13, 14, 15, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m256i ihi = _mm256_setr_epi8(-1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11, /* */
                                         -1, -1, -1, -1, 4, 5, 6, 7, -1, -1, -1, -1, 8, 9, 10, 11);
    const __m256i mlo = _mm256_setr_epi8(63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0, /* */
                                         63, 63, 63, 63, 15, 15, 15, 15, 63, 63, 63, 63, 0, 0, 0, 0);
    const __m256i m4 = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15, /* */
                                        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 15, 15, 15, 15);
    const __m256i lo = _mm256_and_si256(_mm256_shuffle_epi8(r, ilo), mlo);
    const __m256i lo4 = _mm256_ternarylogic_epi32(_mm256_shuffle_epi8(_mm256_srli_epi16(r, 4), ilo), m4, lo,
                                                  TERN_A_AND_B_OR_C);
    return _mm256_ternarylogic_epi32(_mm256_shuffle_epi8(_mm256_srli_epi16(r, 2), ihi), _mm256_set1_epi8(0x30), lo4,
                                     TERN_A_AND_B_OR_C);
}

/* q4_K / q5_K super-blocks 2P, 2P+1 (ib = 2P); two = false: only 2P, the second half zero
 * (nothing of super-block 2P+1 is read).  q4_K's high-nibble lanes (odd j) keep the nibble in
 * place (code * 16, masked) and carry ds / 16 instead (exact: a power of two, far from the
 * subnormal range since d >= 2^-24 when nonzero), which saves a shift per vector. */
ALWAYS_INLINE kpstep decode_pair(int kind, const void *w, int64_t ib, bool two, const kp_regs *rg) {
    kpstep b;
    const size_t bsz = kind == KP_Q5 ? sizeof(nx_block_q5_K) : sizeof(nx_block_q4_K);
    const char *p0 = (const char *)w + (size_t)ib * bsz, *p1 = p0 + bsz;
    /* both block types: d, dmin, scales[12] first; then q5_K's qh[32]; then qs[128] */
    const size_t qs_off = kind == KP_Q5 ? offsetof(nx_block_q5_K, qs) : offsetof(nx_block_q4_K, qs);
    prefetch_ahead(p0, (int)(two ? 2 * bsz : bsz));
    const __m512i r00 = _mm512_loadu_si512(p0 + qs_off), r01 = _mm512_loadu_si512(p0 + qs_off + 64);
    const __m512i r10 = two ? _mm512_loadu_si512(p1 + qs_off) : _mm512_setzero_si512();
    const __m512i r11 = two ? _mm512_loadu_si512(p1 + qs_off + 64) : _mm512_setzero_si512();
    const __m512i f0 = _mm512_shuffle_i64x2(r00, r01, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i s0 = _mm512_shuffle_i64x2(r00, r01, _MM_SHUFFLE(3, 1, 3, 1));
    const __m512i f1 = _mm512_shuffle_i64x2(r10, r11, _MM_SHUFFLE(2, 0, 2, 0));
    const __m512i s1 = _mm512_shuffle_i64x2(r10, r11, _MM_SHUFFLE(3, 1, 3, 1));
    __m512i qh = _mm512_setzero_si512();
    if (kind == KP_Q5) {
        const __m256i h0 = _mm256_loadu_si256((const __m256i *)(p0 + offsetof(nx_block_q5_K, qh)));
        const __m256i h1 = two ? _mm256_loadu_si256((const __m256i *)(p1 + offsetof(nx_block_q5_K, qh)))
                               : _mm256_setzero_si256();
        qh = _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1);
    }
    const __m512i low4 = _mm512_set1_epi8(0x0F), bit4 = _mm512_set1_epi8(0x10);
    /* q4_K: lanes of even j take the low nibble, of odd j the high one in place */
    const __m512i nib = _mm512_mask_blend_epi32(0xAAAA, low4, _mm512_set1_epi8((char)0xF0));
    for (int v = 0; v < 8; v++) {
        const __m512i pk = v < 4 ? _mm512_permutex2var_epi32(f0, rg->src[v], f1)
                                 : _mm512_permutex2var_epi32(s0, rg->src[v - 4], s1);
        if (kind == KP_Q4) {
            b.v[v] = _mm512_and_si512(pk, nib);
        } else {
            const __m512i hidx = v < 4 ? rg->hsrc[v] : _mm512_add_epi32(rg->hsrc[v - 4], _mm512_set1_epi32(4));
            const __m512i hb = _mm512_rorv_epi32(_mm512_permutexvar_epi32(hidx, qh), rg->rot);
            b.v[v] = _mm512_ternarylogic_epi32(_mm512_and_si512(_mm512_srlv_epi32(pk, rg->shr), low4), hb, bit4,
                                               TERN_A_OR_B_AND_C);
        }
    }
    /* scales and mins: lane 0 of r = bytes 0..15 of block 2P, lane 1 of block 2P+1 */
    const __m128i head0 = _mm_loadu_si128((const __m128i *)p0);
    const __m128i head1 = two ? _mm_loadu_si128((const __m128i *)p1) : _mm_setzero_si128();
    const __m256i r = _mm256_inserti128_si256(_mm256_castsi128_si256(head0), head1, 1);
    /* [sc of 2P | sc of 2P+1 | m of 2P | m of 2P+1] */
    const __m256i scm = _mm256_permute4x64_epi64(k4_scm_pair(r), _MM_SHUFFLE(3, 1, 2, 0));
    __m512 sc = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_castsi256_si128(scm)));
    const __m512 mn = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm256_extracti128_si256(scm, 1)));
    if (kind == KP_Q4) sc = _mm512_mul_ps(sc, _mm512_mask_blend_ps(0xAAAA, _mm512_set1_ps(1.0f), _mm512_set1_ps(0.0625f)));
    /* d, dmin of 2P in halves 0, 1; of 2P+1 in halves 8, 9 */
    const __m512 dfl = _mm512_cvtph_ps(r);
    const __m512i id = _mm512_setr_epi32(0, 0, 0, 0, 0, 0, 0, 0, 8, 8, 8, 8, 8, 8, 8, 8);
    const __m512i imn = _mm512_add_epi32(id, _mm512_set1_epi32(1));
    b.ds = _mm512_mul_ps(_mm512_permutexvar_ps(id, dfl), sc);
    b.dm = _mm512_mul_ps(_mm512_permutexvar_ps(imn, dfl), mn);
    return b;
}

size_t nx_kprep_step_bytes(uint32_t type) { return type == NX_TYPE_Q6_K ? KP6_STEP : KP4_STEP; }
int64_t nx_kprep_steps(uint32_t type, int64_t n) { return type == NX_TYPE_Q6_K ? n / NX_QK_K : k4_steps(n); }

void nx_kprep_decode(uint32_t type, const void *w, int64_t n, int64_t step, uint8_t codes[512], float ds[16],
                     float dm[16]) {
    const int kind = type == NX_TYPE_Q6_K ? KP_Q6 : type == NX_TYPE_Q5_K ? KP_Q5 : KP_Q4;
    const kp_regs rg = load_regs(kind);
    kpstep b;
    if (kind == KP_Q6) b = decode_six(w, step, &rg);
    else if (2 * step + 1 < n / NX_QK_K) b = decode_pair(kind, w, 2 * step, true, &rg);
    else b = decode_pair(kind, w, 2 * step, false, &rg);
    for (int v = 0; v < (kind == KP_Q6 ? 4 : 8); v++) _mm512_storeu_si512(codes + 64 * v, b.v[v]);
    _mm512_storeu_ps(ds, b.ds);
    _mm512_storeu_ps(dm, b.dm);
}

/* ---- the kernel --------------------------------------------------------------------------- */

/* One step for nr rows: acc[r] per the float definition in the header. */
ALWAYS_INLINE void kp_step(int kind, int nr, const kpstep *b, const char *const *xr, size_t off, __m512 *acc) {
    for (int r = 0; r < nr; r++) {
        const char *a = xr[r] + off;
        if (kind == KP_Q6) {
            __m512i t = _mm512_loadu_si512(a + 256);
            t = _mm512_dpbusd_epi32(t, b->v[0], _mm512_loadu_si512(a));
            t = _mm512_dpbusd_epi32(t, b->v[1], _mm512_loadu_si512(a + 64));
            t = _mm512_dpbusd_epi32(t, b->v[2], _mm512_loadu_si512(a + 128));
            t = _mm512_dpbusd_epi32(t, b->v[3], _mm512_loadu_si512(a + 192));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(b->ds, _mm512_loadu_ps((const float *)(a + 320))),
                                     acc[r]);
        } else {
            __m512i t = _mm512_dpbusd_epi32(_mm512_setzero_si512(), b->v[0], _mm512_loadu_si512(a));
            for (int v = 1; v < 8; v++) t = _mm512_dpbusd_epi32(t, b->v[v], _mm512_loadu_si512(a + 64 * v));
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t), _mm512_mul_ps(b->ds, _mm512_loadu_ps((const float *)(a + 576))),
                                     acc[r]);
            acc[r] = _mm512_fnmadd_ps(b->dm, _mm512_loadu_ps((const float *)(a + 512)), acc[r]);
        }
    }
}

/* acc += the steps of weight row w against the prepared activation row xr, in step order: the
 * float operations of kp_rows for one row. */
ALWAYS_INLINE __m512 kp_one(int kind, int64_t nb, const void *w, const char *xr, const kp_regs *rg) {
    __m512 acc = _mm512_setzero_ps();
    const char *const xa[1] = {xr};
    if (kind == KP_Q6) {
        for (int64_t ib = 0; ib < nb; ib++) {
            const kpstep b = decode_six(w, ib, rg);
            kp_step(kind, 1, &b, xa, (size_t)ib * KP6_STEP, &acc);
        }
    } else {
        int64_t ib = 0;
        for (; ib + 1 < nb; ib += 2) {
            const kpstep b = decode_pair(kind, w, ib, true, rg);
            kp_step(kind, 1, &b, xa, (size_t)(ib / 2) * KP4_STEP, &acc);
        }
        if (ib < nb) {
            const kpstep b = decode_pair(kind, w, ib, false, rg);
            kp_step(kind, 1, &b, xa, (size_t)(ib / 2) * KP4_STEP, &acc);
        }
    }
    return acc;
}

/* Several weight rows against one activation row (decode): rows in address order (the weight
 * stream and its prefetch are those of one-row calls), each row's accumulator exactly as
 * kp_rows(nr = 1) makes it, and the horizontal sums four rows at a time (hsum256_x4 = hsum256 of
 * the lower + upper halves, bit for bit).  What it saves per row: the call, the table loads and
 * the serial horizontal sum at the end of every row, which the out-of-order window could not
 * hide on short rows (4 super-blocks). */
ALWAYS_INLINE void kp_wrows_nb(int kind, int64_t nb, float *out, const void *w, size_t ws, const void *x, int nw) {
    const kp_regs rg = load_regs(kind);
    int m = 0;
    for (; m + 4 <= nw; m += 4) {
        __m512 acc[4];
        for (int i = 0; i < 4; i++) acc[i] = kp_one(kind, nb, (const char *)w + (size_t)(m + i) * ws, x, &rg);
        hsum256_x4(acc, out + m);
    }
    if (m < nw) {
        __m512 acc[4];
        for (int i = 0; i < 4; i++)
            acc[i] = m + i < nw ? kp_one(kind, nb, (const char *)w + (size_t)(m + i) * ws, x, &rg) : _mm512_setzero_ps();
        float o4[4];
        hsum256_x4(acc, o4);
        for (int i = 0; m + i < nw; i++) out[m + i] = o4[i];
    }
}

/* rows of 1024 elements (most of a decoded token's matrices in the 0.8B shape) and of 512 (the
 * down projection of a qwen35moe expert, 2 super-blocks: one step) with a constant step count:
 * the compiler unrolls the row.  Same operations in the same order as the loop, so the same
 * bits.  512: two-thread streaming of q4_K rows 43.8 -> 47.6 GB/s (bench_dot --cols 512,
 * median of 5 alternated pairs); rows of 2048 (8 super-blocks) gained nothing and stay in the
 * loop. */
ALWAYS_INLINE void kp_wrows(int kind, int64_t n, float *out, const void *w, size_t ws, const void *x, int nw) {
    if (n == 4 * NX_QK_K) kp_wrows_nb(kind, 4, out, w, ws, x, nw);
    else if (n == 2 * NX_QK_K) kp_wrows_nb(kind, 2, out, w, ws, x, nw);
    else kp_wrows_nb(kind, n / NX_QK_K, out, w, ws, x, nw);
}

/* acc[r] (r < nr) = the steps of weight row w against the prepared activation rows xr[r], in
 * step order, per the float definition in the header; each weight step decoded once. */
ALWAYS_INLINE void kp_acc(int kind, int nr, int64_t nb, const void *w, const char *const *xr, const kp_regs *rg,
                          __m512 *acc) {
    for (int r = 0; r < nr; r++) acc[r] = _mm512_setzero_ps();
    if (kind == KP_Q6) {
        for (int64_t ib = 0; ib < nb; ib++) {
            const kpstep b = decode_six(w, ib, rg);
            kp_step(kind, nr, &b, xr, (size_t)ib * KP6_STEP, acc);
        }
    } else {
        int64_t ib = 0;
        for (; ib + 1 < nb; ib += 2) {
            const kpstep b = decode_pair(kind, w, ib, true, rg);
            kp_step(kind, nr, &b, xr, (size_t)(ib / 2) * KP4_STEP, acc);
        }
        if (ib < nb) {
            const kpstep b = decode_pair(kind, w, ib, false, rg);
            kp_step(kind, nr, &b, xr, (size_t)(ib / 2) * KP4_STEP, acc);
        }
    }
}

/* out[r * os] = the horizontal sum of acc[r] (r < nr): hsum256 of the lower + upper 8 lanes,
 * for several rows by hsum256_x4 (the same additions). */
ALWAYS_INLINE void kp_store(int nr, __m512 *acc, float *out, size_t os) {
    if (nr == 1) {
        out[0] = hsum256(_mm256_add_ps(_mm512_castps512_ps256(acc[0]), _mm512_extractf32x8_ps(acc[0], 1)));
        return;
    }
    for (int r = nr; r < KROWS; r++) acc[r] = _mm512_setzero_ps();
    for (int r = 0; r < nr; r += 4) {
        float o4[4];
        hsum256_x4(acc + r, o4);
        for (int i = 0; i < 4 && r + i < nr; i++) out[(size_t)(r + i) * os] = o4[i];
    }
}

ALWAYS_INLINE void kp_rows(int kind, int nr, int64_t n, float *out, const void *w, const void *x, size_t xs) {
    const kp_regs rg = load_regs(kind);
    const char *xr[KROWS];
    __m512 acc[KROWS];
    for (int r = 0; r < nr; r++) xr[r] = act_row(x, xs, r);
    kp_acc(kind, nr, n / NX_QK_K, w, xr, &rg, acc);
    kp_store(nr, acc, out, 1);
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

/* A tile: nw weight rows (in address order) against nr activation rows, in one call.  Every
 * (weight row, activation row) accumulator is made by kp_acc exactly as kp_rows makes it and
 * reduced by hsum16 (= hsum256 of lower + upper, as kp_store), so each result is bit-identical
 * to the one-row kernel.  What the call saves: the tables are loaded once per call, and the
 * horizontal sums are taken for G = 16 / nr weight rows at a time (sixteen sums in 15 additions
 * and 30 shuffles) off the accumulators' dependency chains, instead of a serial hsum per weight
 * row at the end of its chain. */
ALWAYS_INLINE void kp_tile_nb(int kind, int nr, int64_t nb, float *out, size_t os, const void *w, size_t ws, int nw,
                              const void *x, size_t xs) {
    const kp_regs rg = load_regs(kind);
    const char *xr[KROWS];
    for (int r = 0; r < nr; r++) xr[r] = act_row(x, xs, r);
    const int G = 16 / nr; /* weight rows per reduction; slot r * G + i = activation row r, weight row m0 + i */
    __m512 slot[16];
    for (int i = nr * G; i < 16; i++) slot[i] = _mm512_setzero_ps();
    for (int m0 = 0; m0 < nw; m0 += G) {
        const int g = NX_MIN(G, nw - m0);
        for (int i = 0; i < g; i++) {
            __m512 acc[KROWS];
            kp_acc(kind, nr, nb, (const char *)w + (size_t)(m0 + i) * ws, xr, &rg, acc);
            for (int r = 0; r < nr; r++) slot[r * G + i] = acc[r];
        }
        for (int i = g; i < G; i++)
            for (int r = 0; r < nr; r++) slot[r * G + i] = _mm512_setzero_ps();
        float res[16];
        _mm512_storeu_ps(res, hsum16(slot));
        if (g == G)
            for (int r = 0; r < nr; r++) memcpy(out + (size_t)r * os + m0, res + r * G, sizeof(float) * G);
        else
            for (int r = 0; r < nr; r++)
                for (int i = 0; i < g; i++) out[(size_t)r * os + m0 + i] = res[r * G + i];
    }
}

/* rows of 1024 elements with a constant step count (the compiler unrolls the row) */
ALWAYS_INLINE void kp_tile_n(int kind, int nr, int64_t n, float *out, size_t os, const void *w, size_t ws, int nw,
                             const void *x, size_t xs) {
    if (n == 4 * NX_QK_K) kp_tile_nb(kind, nr, 4, out, os, w, ws, nw, x, xs);
    else kp_tile_nb(kind, nr, n / NX_QK_K, out, os, w, ws, nw, x, xs);
}

#define KT_CASE(kind, k) \
    case k: kp_tile_n(kind, k, n, out + (size_t)r0 * os, os, w, ws, nw, xg, xs); break;

ALWAYS_INLINE void kp_tile(int kind, int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                           size_t xs, int nrows) {
    for (int r0 = 0; r0 < nrows; r0 += KROWS) {
        const int nr = NX_MIN(KROWS, nrows - r0);
        const void *xg = act_row(x, xs, r0);
        switch (nr) {
            KT_CASE(kind, 8)
            KT_CASE(kind, 7)
            KT_CASE(kind, 6)
            KT_CASE(kind, 5)
            KT_CASE(kind, 4)
            KT_CASE(kind, 3)
            KT_CASE(kind, 2)
        default: kp_tile_n(kind, 1, n, out + (size_t)r0 * os, os, w, ws, nw, xg, xs); break;
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

void nx_dot_w_q4_K_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw) {
    kp_wrows(KP_Q4, n, out, w, ws, x, nw);
}
void nx_dot_w_q5_K_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw) {
    kp_wrows(KP_Q5, n, out, w, ws, x, nw);
}
void nx_dot_w_q6_K_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw) {
    kp_wrows(KP_Q6, n, out, w, ws, x, nw);
}

void nx_dot_t_q4_K_prep_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                               size_t xs, int nrows) {
    kp_tile(KP_Q4, n, out, os, w, ws, nw, x, xs, nrows);
}
void nx_dot_t_q5_K_prep_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                               size_t xs, int nrows) {
    kp_tile(KP_Q5, n, out, os, w, ws, nw, x, xs, nrows);
}
void nx_dot_t_q6_K_prep_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                               size_t xs, int nrows) {
    kp_tile(KP_Q6, n, out, os, w, ws, nw, x, xs, nrows);
}
