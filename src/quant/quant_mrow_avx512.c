/* quant_mrow_avx512.c - multi-weight-row kernels for ONE activation row (decode): several
 * consecutive weight rows per call, sharing the activation loads and the call / loop overhead
 * that a one-row call pays per output (a 1024-element q8_0 row is only 4 octets of work).
 *
 * Contract (quant.h, nx_vec_dot_w_fn): out[m] = dot(weight row m, x) for m < nw, and every
 * out[m] is bit-identical to the kernel of the same table entry run on that weight row alone
 * (nrows = 1).  The kernels here are the tile walkers the one-row kernels run themselves
 * (q8_0: q8_0_octet_avx512.h), instantiated for several weight rows, so each output goes
 * through the same float operations in the same order (tests/test_matmul.c checks it bit for
 * bit, and that a row's result is the same in a 1-row and a k-row product). */
#include "quant/q8_0_octet_avx512.h"

void nx_dot_w_q8_0_prep_avx512(int64_t n, float *out, const void *w, size_t ws, const void *x, int nw) {
    int m0 = 0;
    for (; m0 + Q8_0_TILE_W <= nw; m0 += Q8_0_TILE_W)
        q8_0_prep_tile(Q8_0_TILE_W, 1, n, out + m0, (const char *)w + (size_t)m0 * ws, ws, x, 0);
    const void *wr = (const char *)w + (size_t)m0 * ws;
    switch (nw - m0) {
    case 3: q8_0_prep_tile(3, 1, n, out + m0, wr, ws, x, 0); break;
    case 2: q8_0_prep_tile(2, 1, n, out + m0, wr, ws, x, 0); break;
    case 1: q8_0_prep_tile(1, 1, n, out + m0, wr, ws, x, 0); break;
    default: break;
    }
}
