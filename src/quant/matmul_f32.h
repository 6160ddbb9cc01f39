/* matmul_f32.h - f32 weights: 16 output rows at a time with one transposed reduction (used by
 * nx_matmul for NX_TYPE_F32 weights on AVX-512 CPUs, every batch size).
 *
 * Why.  For a small f32 model (the 5 M-parameter demo model: hidden 128, so most weight rows
 * are 128 floats = 4 iterations of the dot loop) the vec-dot path's fixed cost per output
 * element - an indirect call, the row-count dispatch, a horizontal reduction per activation row
 * and a scattered store - costs several times the multiply-adds, and it grows with the number
 * of activation rows: a 4-row speculative verify cost ~1.6x a 1-row decode although the weights
 * are streamed once.  Here the per-row partial sums of 16 weight rows are reduced together
 * (a transposed shuffle tree: ~3 shuffles/adds per output instead of ~8 + call overhead) and
 * stored as one vector, and the weight stream is prefetched ahead.
 *
 * Results are BIT-IDENTICAL to nx_dot_f32_avx512 (quant_avx512.c): each output element gets
 * the same two FMA chains (acc0: elements i..i+15 of every 32, plus a masked 16-element tail;
 * acc1: i+16..i+31), v = acc0 + acc1, then the same lane tree as its horizontal sum
 * (v[j] + v[j+8], then + the lane 4 further, then lanes (0+2) + (1+3)).  So a row's result does
 * not depend on the batch size, the 16-row grouping or the thread count; tests/test_matmul.c
 * checks it bit for bit.
 */
#ifndef NX_MATMUL_F32_H
#define NX_MATMUL_F32_H

#include <stdint.h>

/* Output rows per group (one zmm of results). */
#define NX_F32_GROUP 16

/* y[t * ldy + o] = dot(W row o, x row t) for o in [o0, o1) and t in [0, T); W is row-major
 * with `in` floats per row, x has T rows of `in` floats.  AVX-512 only. */
void nx_matmul_f32_avx512(const float *w, int64_t in, int64_t o0, int64_t o1, const float *x, int64_t T, float *y,
                          int64_t ldy);

#endif
