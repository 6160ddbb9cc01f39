/* quant_impl.h - internal declarations shared by quant.c (the type table) and the files that
 * implement its entries: quant_convert.c (to/from float), quant_dot.c (scalar dots),
 * quant_avx2.c and quant_avx512.c (SIMD dots).  Not for use outside the quant*.c files and
 * their tests; the rest of the engine goes through nx_type_get() / nx_vec_dot_for().
 */
#ifndef NX_QUANT_IMPL_H
#define NX_QUANT_IMPL_H

#include "quant/quant.h"
#include "quant/quant_blocks.h"

#include <string.h>

/* ---- rounding and packing rules shared by the quantisers (quant_convert*.c) ---- */

/* Nearest integer, ties to even, for |v| < 2^22: adding 1.5 * 2^23 pushes the fraction out of
 * the mantissa under the default rounding mode and leaves the integer in the low bits. */
static inline int nx_round_even(float v) {
    float t = v + 12582912.0f;
    uint32_t u;
    memcpy(&u, &t, sizeof u);
    return (int)(u & 0x007FFFFFu) - 0x00400000;
}

static inline int nx_clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* Packs the 32 codes q[] of a q4_0/q4_1/q5_0/q5_1 block as nibbles (element j low, j + 16 high)
 * and, where qh is not NULL (5-bit codes), bit 4 of each code into the 4-byte qh field. */
void nx_pack_nibbles(const uint8_t q[NX_QK], uint8_t qs[NX_QK / 2], uint8_t *qh);

/* The codes L[256] (0..nmax) of a q4_K/q5_K super-block x against its stored scales field and
 * fp16 super-scales d / dmin: round((x + dmin * m_j) / (d * sc_j)), clamped; a sub-block whose
 * scale is 0 keeps the codes already in L. */
void nx_k4_codes(const float *x, const uint8_t scales[NX_K_SCALE_SIZE], uint16_t d, uint16_t dmin, int nmax,
                 uint8_t L[NX_QK_K]);
/* Packs the codes L[256] of a q4_K (qh NULL, codes 0..15) or q5_K (codes 0..31, bit 4 into
 * qh[32]) super-block: 64-element group g holds element l in the low nibble of qs[32g + l] and
 * element 32 + l in the high one. */
void nx_pack_k4_codes(const uint8_t L[NX_QK_K], uint8_t qs[NX_QK_K / 2], uint8_t *qh);

/* Packs the eight 6-bit scales ls[] and mins lm[] of a q4_K/q5_K super-block into its 12-byte
 * scales field (inverse of nx_k4_scale_min). */
void nx_pack_k4_scales(const uint8_t ls[8], const uint8_t lm[8], uint8_t scales[NX_K_SCALE_SIZE]);

/* ---- to_float / from_float (quant_convert.c) ---- */
void nx_to_float_f32(const void *src, float *dst, int64_t n);
void nx_from_float_f32(const float *src, void *dst, int64_t n);
void nx_to_float_f16(const void *src, float *dst, int64_t n);
void nx_from_float_f16(const float *src, void *dst, int64_t n);
void nx_to_float_bf16(const void *src, float *dst, int64_t n);
void nx_from_float_bf16(const float *src, void *dst, int64_t n);
void nx_to_float_q4_0(const void *src, float *dst, int64_t n);
void nx_from_float_q4_0(const float *src, void *dst, int64_t n);
void nx_to_float_q4_1(const void *src, float *dst, int64_t n);
void nx_from_float_q4_1(const float *src, void *dst, int64_t n);
void nx_to_float_q5_0(const void *src, float *dst, int64_t n);
void nx_from_float_q5_0(const float *src, void *dst, int64_t n);
void nx_to_float_q5_1(const void *src, float *dst, int64_t n);
void nx_from_float_q5_1(const float *src, void *dst, int64_t n);
void nx_to_float_q8_0(const void *src, float *dst, int64_t n);
void nx_from_float_q8_0(const float *src, void *dst, int64_t n);
void nx_to_float_q8_1(const void *src, float *dst, int64_t n);
void nx_from_float_q8_1(const float *src, void *dst, int64_t n);
void nx_to_float_q4_K(const void *src, float *dst, int64_t n);
void nx_from_float_q4_K(const float *src, void *dst, int64_t n);
void nx_to_float_q5_K(const void *src, float *dst, int64_t n);
void nx_from_float_q5_K(const float *src, void *dst, int64_t n);
void nx_to_float_q6_K(const void *src, float *dst, int64_t n);
void nx_from_float_q6_K(const float *src, void *dst, int64_t n);
void nx_to_float_q8_K(const void *src, float *dst, int64_t n);
void nx_from_float_q8_K(const float *src, void *dst, int64_t n);
void nx_to_float_q2_K(const void *src, float *dst, int64_t n); /* quant_convert_lowbit.c */
void nx_from_float_q2_K(const float *src, void *dst, int64_t n);
void nx_to_float_q3_K(const void *src, float *dst, int64_t n);
void nx_from_float_q3_K(const float *src, void *dst, int64_t n);
void nx_to_float_iq4_nl(const void *src, float *dst, int64_t n);
void nx_from_float_iq4_nl(const float *src, void *dst, int64_t n);
void nx_to_float_iq4_xs(const void *src, float *dst, int64_t n);
void nx_from_float_iq4_xs(const float *src, void *dst, int64_t n);
/* the weighted scale/min search of the asymmetric K formats (quant_convert.c) */
/* with an importance matrix, one row (quant_convert_imatrix.c, iq4_* in quant_convert_lowbit.c) */
void nx_from_float_w_q4_0(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q4_1(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q5_0(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q5_1(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q2_K(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q3_K(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q4_K(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q5_K(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_q6_K(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_iq4_nl(const float *src, void *dst, int64_t n, const float *qw);
void nx_from_float_w_iq4_xs(const float *src, void *dst, int64_t n, const float *qw);
float nx_fit_scale_min(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min, uint8_t *aux,
                       float rmin, float rdelta, int nstep, bool use_mad);
/* the scalar references of the two activation quantisers (nx_from_float_q8_0 / q8_K pick the
 * bit-identical AVX-512 versions when the CPU has them) */
void nx_from_float_q8_0_scalar(const float *src, void *dst, int64_t n);
void nx_from_float_q8_K_scalar(const float *src, void *dst, int64_t n);

/* ---- dot kernels with the nx_vec_dot_fn signature: quant_dot.c (scalar), quant_avx2.c,
 * quant_avx512.c.  A kernel missing at some ISA is simply not declared there. ---- */
void nx_dot_f32_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_f16_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_bf16_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_0_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_1_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_0_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_1_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q8_0_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q6_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q2_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q3_K_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_iq4_nl_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_iq4_xs_scalar(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);

#if defined(__x86_64__)
#define NX_HAVE_X86_KERNELS 1
void nx_dot_f32_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_f16_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_bf16_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_0_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_1_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_0_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_1_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q8_0_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_K_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_K_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q6_K_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_f32_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_f16_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_bf16_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_0_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_1_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_0_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_1_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q8_0_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q4_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q6_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
/* q8_0 on prepared activations (layout in quant_avx512.c) */
void nx_dot_q8_0_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
/* the same against ONE activation row for nw consecutive weight rows (nx_vec_dot_w_fn) */
void nx_dot_w_q8_0_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw);
void nx_prepare_q8_0_avx512(const float *src, void *dst, int64_t n);
size_t nx_prep_q8_0_row_bytes(int64_t n);
/* the prepared layout from q8_0 blocks (used by the GEMM path and tests) */
void nx_prep_q8_0_from_blocks(const void *xq, void *dst, int64_t n);
/* q4_K / q5_K / q6_K on prepared q8_K activations (layouts in quant_kprep_avx512.c: q4_K / q5_K
 * in steps of two super-blocks with dy * bsums per sub-block, q6_K in steps of one super-block
 * with -32 * bsums) */
void nx_dot_q4_K_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q5_K_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q6_K_prep_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
/* the same against ONE activation row for nw consecutive weight rows (nx_vec_dot_w_fn) */
void nx_dot_w_q4_K_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw);
void nx_dot_w_q5_K_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw);
void nx_dot_w_q6_K_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw);
/* nw consecutive weight rows against nrows activation rows (nx_vec_dot_tile_fn) */
void nx_dot_t_q4_K_prep_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                               size_t xs, int nrows);
void nx_dot_t_q5_K_prep_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                               size_t xs, int nrows);
void nx_dot_t_q6_K_prep_avx512(int64_t n, float *out, size_t os, const void *w, size_t ws, int nw, const void *x,
                               size_t xs, int nrows);
void nx_prepare_q8_K_avx512(const float *src, void *dst, int64_t n);
void nx_prepare_q8_K_q6_avx512(const float *src, void *dst, int64_t n);
size_t nx_prep_q8_K_row_bytes(int64_t n);
size_t nx_prep_q8_K_q6_row_bytes(int64_t n);
/* the prepared layouts from q8_K blocks (the GEMM path and tests) */
void nx_prep_q8_K_from_blocks(const void *xq, void *dst, int64_t n);
void nx_prep_q8_K_q6_from_blocks(const void *xq, void *dst, int64_t n);
/* Step `step` of a q4_K / q5_K / q6_K weight row of n elements decoded as the prepared kernel
 * sees it: codes in lane order (q4_K / q5_K: 8 vectors of 64 bytes covering super-blocks 2*step
 * and 2*step+1, the second zero past the row's end; q6_K: 4 vectors, super-block `step`),
 * unsigned; ds / dm per lane (dm = 0 for q6_K).  nx_kprep_steps: steps per row;
 * nx_kprep_step_bytes: prepared activation bytes per step.  The GEMM panels are made of these. */
void nx_kprep_decode(uint32_t type, const void *w, int64_t n, int64_t step, uint8_t codes[512], float ds[16],
                     float dm[16]);
int64_t nx_kprep_steps(uint32_t type, int64_t n);
size_t nx_kprep_step_bytes(uint32_t type);
void nx_from_float_q8_0_avx512(const float *src, void *dst, int64_t n); /* quant_convert_avx512.c */
/* lowbit formats (quant_lowbit_avx2.c, quant_lowbit_avx512.c) */
void nx_dot_q2_K_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q3_K_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_iq4_nl_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_iq4_xs_avx2(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q2_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_q3_K_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_iq4_nl_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
void nx_dot_iq4_xs_avx512(int64_t n, float *out, const void *w, const void *x, size_t xs, int nrows);
/* GEMM micro-kernel sets (gemm_avx512.c, gemm_lowbit_avx512.c) */
extern const struct nx_gemm_ops nx_gemm_q8_0_avx512, nx_gemm_q4_K_avx512, nx_gemm_q5_K_avx512, nx_gemm_q6_K_avx512;
extern const struct nx_gemm_ops nx_gemm_q2_K_avx512, nx_gemm_q3_K_avx512, nx_gemm_iq4_xs_avx512;
void nx_from_float_q8_K_avx512(const float *src, void *dst, int64_t n);
#endif

#endif
