/* reduce16_avx512.h - horizontal sums of 16 vectors at once, in the lane order of
 * _mm512_reduce_add_ps (shared by matmul_f32_avx512.c and attn_avx512.c, whose results must be
 * bit-identical to the one-vector-at-a-time kernels).  Include only from *_avx512.c files. */
#ifndef NX_REDUCE16_AVX512_H
#define NX_REDUCE16_AVX512_H

#include <immintrin.h>

/* Horizontal sums of 16 vectors at once.  s[i] holds the partial of output 4 * (i % 4) + i / 4
 * (inputs in transposed order, so the result comes out in natural order); element o of the
 * result is, for that output's vector v:
 *     t3[j] = v[j] + v[j + 8]  (j < 8);   t6[j] = t3[j] + t3[j + 4]  (j < 4);
 *     (t6[0] + t6[2]) + (t6[1] + t6[3])
 * - the tree of _mm512_reduce_add_ps in nx_dot_f32_avx512 (float addition is commutative, so
 * which operand comes first does not matter). */
static inline __attribute__((always_inline)) __m512 nx_reduce16(const __m512 *s) {
    __m512 u[8], w[4];
    for (int p = 0; p < 8; p++) /* [a0..7 | b0..7] + [a8..15 | b8..15] */
        u[p] = _mm512_add_ps(_mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0x44),
                             _mm512_shuffle_f32x4(s[2 * p], s[2 * p + 1], 0xEE));
    for (int m = 0; m < 4; m++) /* 128-bit lane k of w[m]: t6 of input 4m + k */
        w[m] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * m], u[2 * m + 1], 0x88),
                             _mm512_shuffle_f32x4(u[2 * m], u[2 * m + 1], 0xDD));
    /* within each 128-bit lane q: (t6[0] + t6[2], t6[1] + t6[3]) of inputs q, 4+q | 8+q, 12+q */
    const __m512 z0 = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], 0x44), _mm512_shuffle_ps(w[0], w[1], 0xEE));
    const __m512 z1 = _mm512_add_ps(_mm512_shuffle_ps(w[2], w[3], 0x44), _mm512_shuffle_ps(w[2], w[3], 0xEE));
    /* element 4q + p: the sum of input 4p + q, i.e. of output 4q + p */
    return _mm512_add_ps(_mm512_shuffle_ps(z0, z1, 0x88), _mm512_shuffle_ps(z0, z1, 0xDD));
}

#endif
