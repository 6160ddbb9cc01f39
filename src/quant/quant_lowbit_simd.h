/* quant_lowbit_simd.h - what quant_lowbit_avx512.c (the 1-row kernels) and gemm_lowbit_avx512.c
 * (the GEMM micro-kernels) share for q2_K, q3_K and iq4_xs: the decoded form of one super-block
 * of one weight row.  The GEMM stores it in its panel and repeats the 1-row kernel's float
 * operations on it (see the top of quant_lowbit_avx512.c). */
#ifndef NX_QUANT_LOWBIT_SIMD_H
#define NX_QUANT_LOWBIT_SIMD_H

#include <stdint.h>

enum { LB_Q2_K = 0, LB_Q3_K = 1, LB_IQ4_XS = 2 };

/* One super-block of one weight row, decoded (640 bytes, 64-byte aligned fields). */
typedef struct {
    _Alignas(64) uint8_t q[4][64]; /* codes of group g (iq4_xs: |value|), elements 64g.. in order */
    _Alignas(64) int16_t sc[4][32]; /* scale of the sub-block of each int16 maddubs lane */
    _Alignas(64) int16_t c16[16];   /* q2_K: min per bsums lane; q3_K: -4 * scale per bsums lane */
    uint64_t neg[4];                /* iq4_xs: bit l of neg[g] = element 64g + l is negative */
    float d, dmin;
} nx_lb_panel_row;

_Static_assert(sizeof(nx_lb_panel_row) == 640, "lowbit panel row size");

/* Fills *out from super-block ib of weight row w; kind = LB_*.  (AVX-512 only.) */
void nx_lb_decode_avx512(int kind, const void *w, int64_t ib, nx_lb_panel_row *out);

#endif
