/* gemm_avx512.c - AVX-512 VNNI micro-kernels of the GEMM path (see gemm.h) for q8_0 (against
 * q8_0 activations) and q4_K, q5_K, q6_K (against q8_K activations).
 *
 * Bit-identity with the vec-dot kernels (quant_avx512.c, quant_kquant_avx512.c).  Each output
 * element is accumulated exactly like the 1-row kernel does it:
 *  - q8_0: the prepared-activation kernel nx_dot_q8_0_prep_avx512: per octet of 8 blocks, 16
 *    int32 lanes (lane 2j+h = exact dot of the 16 codes of block j in dwords h, 2+h, 4+h, 6+h),
 *    converted and fmadd-ed with dw_j * dy_j into one 16-lane acc, octets in order, zero-padded
 *    blocks adding fma(0, 0, acc); result hsum256(lower + upper half of acc).  (The plain q8_0
 *    kernel, nx_dot_q8_0_avx512, sums differently; matmul never uses it at the AVX-512 level.)
 *  - q4_K / q5_K / q6_K: the prepared-activation kernels of quant_kprep_avx512.c: per step
 *    (q4_K / q5_K: two super-blocks, lane 8s + j = exact dot of sub-block j of super-block s of
 *    the pair; q6_K: one super-block, lane k = exact dot of codes 16k..16k+15, the chain started
 *    at -32 * bsums[k]), acc = fma(float(lane), ds * dy, acc), then for q4_K / q5_K
 *    acc = fnmadd(dm, yd, acc) (ds / dm: d * scale / dmin * min of the lane's sub-block, yd = dy
 *    * the sub-block's code sum); result hsum256(lower + upper half of acc).  (The kernels on
 *    plain q8_K rows, quant_kquant_avx512.c, sum differently; matmul never uses them at the
 *    AVX-512 level.)
 * If one of those kernels changes its float operations, the matching kernel here must follow
 * (tests/test_gemm.c compares them bit for bit).
 *
 * A panel is packed once per (activation block, weight chunk) and then used for a whole
 * activation block (q8_0: the octet transpose in registers; K formats: nx_kprep_decode, the 1-row
 * kernel's decoder); packing was ~5 % of a q8_0 pp512 (perf, 2026-12-06) before it was vectorised.
 */
#include "quant/gemm.h"

#include <immintrin.h>
#include <string.h>

#include "quant/quant_impl.h"
#include "quant/quant_simd_common.h" /* hsum256: the vec-dot kernels' reduction order */

/* ---- q8_0 ------------------------------------------------------------------------------------
 * Activations: the prepared layout of quant_avx512.c (nx_prep_q8_0_from_blocks), per octet of
 * 8 blocks (Q8_ACT_STEP bytes): 4 x 64 code bytes (vector q, qword slot j = codes 8q..8q+7 of
 * block j), 16 int32 corrections, 16 float scales (lane 2j+h = block j's).
 * Panel, per octet, per weight row m (Q8_W_STEP bytes): the 4 vectors of weight codes + 128 in
 * the same slot order, then 16 float dw (lane 2j+h = block j's scale); a missing block or row
 * has code 0 (stored 0x80) and scale 0, like the kernel's zero padding. */
#define Q8_MR 4
#define Q8_NR 2 /* activation rows per register block (pass) */
#define Q8_NC 4 /* activation rows per call: Q8_NC / Q8_NR passes over the panel */
#define Q8_ACT_STEP 384
#define Q8_W_STEP 320

static int64_t q8_steps(int64_t n) { return (n / NX_QK + 7) / 8; }

static size_t q8_0_act_row_bytes(int64_t n) { return (size_t)q8_steps(n) * Q8_ACT_STEP; }

static void q8_0_pack_act(const void *xq, void *xp, int64_t n) { nx_prep_q8_0_from_blocks(xq, xp, n); }

static size_t q8_0_panel_bytes(int64_t n) { return (size_t)q8_steps(n) * Q8_MR * Q8_W_STEP; }

/* Codes of blocks w[0] and w[1] (only the first `have` of them read, the others zero), + 128. */
static inline __m512i q8_pair_u(const nx_block_q8_0 *w, int have) {
    const __m256i lo = have > 0 ? _mm256_loadu_si256((const __m256i *)w[0].qs) : _mm256_setzero_si256();
    const __m256i hi = have > 1 ? _mm256_loadu_si256((const __m256i *)w[1].qs) : _mm256_setzero_si256();
    return _mm512_xor_si512(_mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1), _mm512_set1_epi8((char)0x80));
}

/* Per weight row and octet: the codes of blocks j = 0..7 (+ 128) transposed so that qword slot j
 * of vector q holds codes 8q..8q+7 of block j (two stages of qword permutes), then the scales. */
static void q8_0_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    const int64_t nb = n / NX_QK, steps = q8_steps(n);
    const __m512i i01 = _mm512_setr_epi64(0, 4, 8, 12, 1, 5, 9, 13), i23 = _mm512_setr_epi64(2, 6, 10, 14, 3, 7, 11, 15);
    for (int m = 0; m < Q8_MR; m++) {
        const nx_block_q8_0 *wr = (const nx_block_q8_0 *)((const char *)w + (size_t)m * row_bytes);
        for (int64_t s = 0; s < steps; s++) {
            char *p = (char *)panel + ((size_t)s * Q8_MR + (size_t)m) * Q8_W_STEP;
            const int cnt = m < rows ? (int)NX_MIN((int64_t)8, nb - 8 * s) : 0;
            const nx_block_q8_0 *wb = wr + 8 * s;
            const __m512i x0 = q8_pair_u(wb, NX_MIN(2, cnt)), x1 = q8_pair_u(wb + 2, NX_MAX(0, NX_MIN(2, cnt - 2)));
            const __m512i x2 = q8_pair_u(wb + 4, NX_MAX(0, NX_MIN(2, cnt - 4))), x3 = q8_pair_u(wb + 6, NX_MAX(0, cnt - 6));
            const __m512i a01 = _mm512_permutex2var_epi64(x0, i01, x1), a23 = _mm512_permutex2var_epi64(x0, i23, x1);
            const __m512i b01 = _mm512_permutex2var_epi64(x2, i01, x3), b23 = _mm512_permutex2var_epi64(x2, i23, x3);
            _mm512_store_si512(p, _mm512_shuffle_i64x2(a01, b01, 0x44));
            _mm512_store_si512(p + 64, _mm512_shuffle_i64x2(a01, b01, 0xEE));
            _mm512_store_si512(p + 128, _mm512_shuffle_i64x2(a23, b23, 0x44));
            _mm512_store_si512(p + 192, _mm512_shuffle_i64x2(a23, b23, 0xEE));
            float dw[16];
            for (int j = 0; j < 8; j++) dw[2 * j] = dw[2 * j + 1] = j < cnt ? _cvtsh_ss(wb[j].d) : 0.0f;
            memcpy(p + 256, dw, sizeof dw);
        }
    }
}

/* Keeps a loaded vector in a register: without it GCC folds a load that several dpbusd share
 * back into each of them as a memory operand, and spills the accumulators of a fully unrolled
 * tile (both measured: 1.2 dpbusd per cycle with one load each against 1.8 from registers on
 * the Intel VM, docs/notes/kernels-prefill.md).  Emits no instruction. */
#define IN_REG(v) __asm__("" : "+v"(v))
#define UNROLL _Pragma("GCC unroll 8")

/* One pass: Q8_MR x Q8_NR (weight row, activation row) pairs.  Per octet: Q8_MR + Q8_NR vector
 * loads per code quarter feed Q8_MR * Q8_NR dpbusd from registers; every pair's chain starts
 * at its activation row's corrections and sees the four quarters in order, then cvt, mul
 * (dw x dy) and fmadd into the pair's accumulator: the 1-row kernel's operations.  Leaves
 * sums[r * Q8_MR + m] = the accumulator of (weight row m, activation row r). */
ALWAYS_INLINE void q8_pass(int64_t n, const void *panel, const void *const *x, __m512 *sums) {
    const int64_t steps = q8_steps(n);
    __m512 acc[Q8_MR][Q8_NR];
    const char *xa[Q8_NR];
    UNROLL for (int r = 0; r < Q8_NR; r++) xa[r] = x[r];
    UNROLL for (int m = 0; m < Q8_MR; m++) UNROLL for (int r = 0; r < Q8_NR; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t s = 0; s < steps; s++) {
        const char *p = (const char *)panel + (size_t)s * Q8_MR * Q8_W_STEP;
        __m512i t[Q8_MR][Q8_NR];
        UNROLL for (int m = 0; m < Q8_MR; m++) UNROLL for (int r = 0; r < Q8_NR; r++) t[m][r] =
            _mm512_load_si512(xa[r] + 256);
        UNROLL for (int q = 0; q < 4; q++) {
            __m512i wv[Q8_MR], av[Q8_NR];
            UNROLL for (int m = 0; m < Q8_MR; m++) {
                wv[m] = _mm512_load_si512(p + m * Q8_W_STEP + 64 * q);
                IN_REG(wv[m]);
            }
            UNROLL for (int r = 0; r < Q8_NR; r++) {
                av[r] = _mm512_load_si512(xa[r] + 64 * q);
                IN_REG(av[r]);
            }
            UNROLL for (int m = 0; m < Q8_MR; m++) UNROLL for (int r = 0; r < Q8_NR; r++) t[m][r] =
                _mm512_dpbusd_epi32(t[m][r], wv[m], av[r]);
        }
        UNROLL for (int m = 0; m < Q8_MR; m++) {
            const __m512 dw = _mm512_load_ps(p + m * Q8_W_STEP + 256);
            UNROLL for (int r = 0; r < Q8_NR; r++) acc[m][r] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[m][r]), _mm512_mul_ps(dw, _mm512_load_ps(xa[r] + 320)), acc[m][r]);
        }
        UNROLL for (int r = 0; r < Q8_NR; r++) xa[r] += Q8_ACT_STEP;
    }
    UNROLL for (int r = 0; r < Q8_NR; r++) UNROLL for (int m = 0; m < Q8_MR; m++) sums[r * Q8_MR + m] = acc[m][r];
}

/* Q8_MR x Q8_NC outputs per call: Q8_NC / Q8_NR passes, then the sixteen horizontal sums as one
 * transposed hsum16 (the very additions of hsum256). */
static void q8_0_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    _Static_assert(Q8_MR * Q8_NC == 16 && Q8_NC % Q8_NR == 0, "hsum16 takes 16 sums");
    __m512 sums[16];
    for (int h = 0; h < Q8_NC / Q8_NR; h++) q8_pass(n, panel, x + h * Q8_NR, sums + h * Q8_NR * Q8_MR);
    _mm512_storeu_ps(out, hsum16(sums));
}

const nx_gemm_ops nx_gemm_q8_0_avx512 = {Q8_MR, Q8_NC, q8_0_act_row_bytes, q8_0_pack_act,
                                         q8_0_panel_bytes, q8_0_pack_panel, q8_0_tile};

/* ---- K formats ---------------------------------------------------------------------------------
 * Activations: the prepared layouts of quant_kprep_avx512.c (nx_prep_q8_K_from_blocks for q4_K /
 * q5_K: steps of two super-blocks, 640 bytes: 8 x 64 code bytes, 16 floats yd, 16 floats dy;
 * nx_prep_q8_K_q6_from_blocks for q6_K: steps of one super-block, 384 bytes: 4 x 64 code bytes,
 * 16 int32 corr, 16 copies of dy).
 * Panel, per step, per weight row m (KP_W_STEP bytes): the decoded code vectors in the same lane
 * order (8 or 4), ds[16], dm[16] (nx_kprep_decode: the very values the 1-row kernel has in its
 * registers); a missing row has zero codes and scales. */
#define KP_MR 4
#define KP_NR 2 /* activation rows per register block (pass) */
#define KP_NC 4 /* activation rows per call */
#define KP_W_STEP 640 /* 512 code bytes (q6_K: 256 used), ds, dm */

static size_t k4_act_row_bytes(int64_t n) { return nx_prep_q8_K_row_bytes(n); }
static size_t q6_act_row_bytes(int64_t n) { return nx_prep_q8_K_q6_row_bytes(n); }

static size_t k4_panel_bytes(int64_t n) { return (size_t)nx_kprep_steps(NX_TYPE_Q4_K, n) * KP_MR * KP_W_STEP; }
static size_t q6_panel_bytes(int64_t n) { return (size_t)nx_kprep_steps(NX_TYPE_Q6_K, n) * KP_MR * KP_W_STEP; }

static void kp_pack_panel(uint32_t type, const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    const int64_t ns = nx_kprep_steps(type, n);
    for (int64_t is = 0; is < ns; is++)
        for (int m = 0; m < KP_MR; m++) {
            uint8_t *p = (uint8_t *)panel + ((size_t)is * KP_MR + (size_t)m) * KP_W_STEP;
            if (m < rows) {
                if (type == NX_TYPE_Q6_K) memset(p + 256, 0, 256); /* q6_K fills 4 of the 8 code vectors */
                nx_kprep_decode(type, (const char *)w + (size_t)m * row_bytes, n, is, p, (float *)(p + 512),
                                (float *)(p + 576));
            } else memset(p, 0, KP_W_STEP);
        }
}

static void q4_K_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    kp_pack_panel(NX_TYPE_Q4_K, w, row_bytes, rows, n, panel);
}
static void q5_K_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    kp_pack_panel(NX_TYPE_Q5_K, w, row_bytes, rows, n, panel);
}
static void q6_K_pack_panel(const void *w, size_t row_bytes, int rows, int64_t n, void *panel) {
    kp_pack_panel(NX_TYPE_Q6_K, w, row_bytes, rows, n, panel);
}

/* six: q6_K (steps of one super-block, 4 code vectors, the chain starts at corr, no mins term)
 * rather than q4_K / q5_K (steps of two super-blocks, 8 code vectors from 0, then the mins term).
 * One pass: KP_MR x KP_NR pairs, operands in registers as in q8_pass; a lane's int32 is the
 * exact sum of its products whatever the order (the 1-row kernel's two chains of four included),
 * and the float operations per step and pair are the 1-row kernel's. */
ALWAYS_INLINE void kp_pass(bool six, int64_t n, const void *panel, const void *const *x, __m512 *sums) {
    const int64_t ns = nx_kprep_steps(six ? NX_TYPE_Q6_K : NX_TYPE_Q4_K, n);
    const size_t astep = six ? 384 : 640;
    const int nq = six ? 4 : 8;
    __m512 acc[KP_MR][KP_NR];
    const char *xa[KP_NR];
    UNROLL for (int r = 0; r < KP_NR; r++) xa[r] = x[r];
    UNROLL for (int m = 0; m < KP_MR; m++) UNROLL for (int r = 0; r < KP_NR; r++) acc[m][r] = _mm512_setzero_ps();
    for (int64_t is = 0; is < ns; is++) {
        const char *p = (const char *)panel + (size_t)is * KP_MR * KP_W_STEP;
        __m512i t[KP_MR][KP_NR];
        UNROLL for (int m = 0; m < KP_MR; m++) UNROLL for (int r = 0; r < KP_NR; r++) t[m][r] =
            six ? _mm512_load_si512(xa[r] + 256) : _mm512_setzero_si512();
        UNROLL for (int q = 0; q < nq; q++) {
            __m512i wv[KP_MR], av[KP_NR];
            UNROLL for (int m = 0; m < KP_MR; m++) {
                wv[m] = _mm512_load_si512(p + m * KP_W_STEP + 64 * q);
                IN_REG(wv[m]);
            }
            UNROLL for (int r = 0; r < KP_NR; r++) {
                av[r] = _mm512_load_si512(xa[r] + 64 * q);
                IN_REG(av[r]);
            }
            UNROLL for (int m = 0; m < KP_MR; m++) UNROLL for (int r = 0; r < KP_NR; r++) t[m][r] =
                _mm512_dpbusd_epi32(t[m][r], wv[m], av[r]);
        }
        UNROLL for (int m = 0; m < KP_MR; m++) {
            const __m512 ds = _mm512_load_ps(p + m * KP_W_STEP + 512);
            UNROLL for (int r = 0; r < KP_NR; r++) {
                acc[m][r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(t[m][r]),
                                            _mm512_mul_ps(ds, _mm512_load_ps(xa[r] + (six ? 320 : 576))), acc[m][r]);
                if (!six)
                    acc[m][r] = _mm512_fnmadd_ps(_mm512_load_ps(p + m * KP_W_STEP + 576), _mm512_load_ps(xa[r] + 512),
                                                 acc[m][r]);
            }
        }
        UNROLL for (int r = 0; r < KP_NR; r++) xa[r] += astep;
    }
    UNROLL for (int r = 0; r < KP_NR; r++) UNROLL for (int m = 0; m < KP_MR; m++) sums[r * KP_MR + m] = acc[m][r];
}

/* KP_MR x KP_NC outputs per call: KP_NC / KP_NR passes, then one hsum16 (as q8_0_tile). */
ALWAYS_INLINE void kp_tile(bool six, int64_t n, const void *panel, const void *const *x, float *out) {
    _Static_assert(KP_MR * KP_NC == 16 && KP_NC % KP_NR == 0, "hsum16 takes 16 sums");
    __m512 sums[16];
    for (int h = 0; h < KP_NC / KP_NR; h++) kp_pass(six, n, panel, x + h * KP_NR, sums + h * KP_NR * KP_MR);
    _mm512_storeu_ps(out, hsum16(sums));
}

static void k4_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    kp_tile(false, n, panel, x, out);
}
static void q6_tile(int64_t n, const void *panel, const void *const *x, float *out) {
    kp_tile(true, n, panel, x, out);
}

const nx_gemm_ops nx_gemm_q4_K_avx512 = {KP_MR, KP_NC, k4_act_row_bytes, nx_prep_q8_K_from_blocks,
                                        k4_panel_bytes, q4_K_pack_panel, k4_tile};
const nx_gemm_ops nx_gemm_q5_K_avx512 = {KP_MR, KP_NC, k4_act_row_bytes, nx_prep_q8_K_from_blocks,
                                        k4_panel_bytes, q5_K_pack_panel, k4_tile};
const nx_gemm_ops nx_gemm_q6_K_avx512 = {KP_MR, KP_NC, q6_act_row_bytes, nx_prep_q8_K_q6_from_blocks,
                                        q6_panel_bytes, q6_K_pack_panel, q6_tile};
