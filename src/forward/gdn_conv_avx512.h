/* gdn_conv_avx512.h - the GDN causal conv1d (kernel 4) for 16 channels at a time (AVX-512).
 *
 * The conv state keeps, per channel, the last 3 inputs contiguously ([channel][3]) and the weights
 * are [channel][4], so 16 channels are 48 state / 64 weight floats that permutes split into one
 * vector per tap.  Per channel the float operations are exactly the scalar loop's in gdn.c
 * (acc = 0 + s0 w0, + s1 w1, + s2 w2, + x w3, separate multiplies and adds), so results are
 * bit-identical to it and do not depend on how rows or channels are grouped
 * (tests/test_gdn_conv.c). */
#ifndef NX_GDN_CONV_AVX512_H
#define NX_GDN_CONV_AVX512_H

#include <stddef.h>

/* Channels [c0, c1) ((c1 - c0) % 16 == 0) of n_rows rows in order: row t reads its window from
 * src[t] and writes the shifted window to dst[t] (may equal src[t], or be the next row's src),
 * y[t * C + c] = the conv output before SiLU.  x: [n_rows][C] inputs; w: [C][4]. */
void nx_gdn_conv4_avx512(const float *w, const float *const *src, float *const *dst, const float *x, float *y,
                         size_t C, int n_rows, int c0, int c1);

#endif
