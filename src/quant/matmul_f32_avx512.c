/* matmul_f32_avx512.c - f32 weight rows in groups of 16 with a transposed reduction
 * (see matmul_f32.h for why, and for the bit-identity contract with nx_dot_f32_avx512). */
#include "quant/matmul_f32.h"

#include "base/common.h"
#include "quant/reduce16_avx512.h"

#include <immintrin.h>

#define ALWAYS_INLINE static inline __attribute__((always_inline))

/* Activation rows per pass over a group's weight rows: 2 accumulators per row + 2 weight
 * vectors fit the 32 zmm registers up to 8 rows.  8 covers a verify of up to draft_max 7 in one
 * pass (with 4, a 5-row verify cost 1.62x a 1-row decode on the demo model against 1.26x for 4
 * rows).  The tile size does not change any result: each row has its own chains. */
#define TILE_ROWS 8

/* Prefetch distance in the weight stream: the rows of a group, and the groups of a chunk, lie
 * one after another, so the bytes wanted next are just ahead (a prefetch never faults, so
 * running past the end of the tensor is harmless).  Without it the demo model's decode waits
 * on L3 lines the hardware prefetcher requests too late. */
#define PREFETCH_AHEAD 4096

ALWAYS_INLINE __m512 load16(const float *p, int64_t i, int64_t n) {
    if (i + 16 <= n) return _mm512_loadu_ps(p + i);
    return _mm512_maskz_loadu_ps((__mmask16)((1u << (n - i)) - 1), p + i);
}

/* part[r] = acc0 + acc1 of weight row w against activation row r (r < nr): exactly the float
 * operations of quant_avx512.c plain_rows for f32 before its horizontal sum. */
ALWAYS_INLINE void row_partials(int nr, int64_t n, const float *w, const float *x, int64_t in, __m512 *part) {
    __m512 acc0[TILE_ROWS], acc1[TILE_ROWS];
    for (int r = 0; r < nr; r++) acc0[r] = acc1[r] = _mm512_setzero_ps();
    const char *pf = (const char *)w + PREFETCH_AHEAD;
    int64_t i = 0;
    for (; i + 32 <= n; i += 32, pf += 128) {
        _mm_prefetch(pf, _MM_HINT_T0);
        _mm_prefetch(pf + 64, _MM_HINT_T0);
        __m512 w0 = _mm512_loadu_ps(w + i), w1 = _mm512_loadu_ps(w + i + 16);
        /* Opaque to the compiler from here on: it would otherwise re-load the weights from
         * memory for every activation row (it does for 2 and 3 rows: a 3-row batch then cost
         * more than a 4-row one). */
        __asm__("" : "+v"(w0), "+v"(w1));
        for (int r = 0; r < nr; r++) {
            acc0[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + r * in + i), acc0[r]);
            acc1[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + r * in + i + 16), acc1[r]);
        }
    }
    for (; i < n; i += 16) {
        const __m512 w0 = load16(w, i, n);
        for (int r = 0; r < nr; r++) acc0[r] = _mm512_fmadd_ps(w0, load16(x + r * in, i, n), acc0[r]);
    }
    for (int r = 0; r < nr; r++) part[r] = _mm512_add_ps(acc0[r], acc1[r]);
}

/* Partials of the group's nout weight rows (rows >= nout: zero) against nr activation rows:
 * part[j * TILE_ROWS + r]. */
ALWAYS_INLINE void group_partials(int nr, int nout, int64_t in, const float *w, const float *x, __m512 *part) {
    for (int j = 0; j < nout; j++) row_partials(nr, in, w + (int64_t)j * in, x, in, part + j * TILE_ROWS);
    for (int j = nout; j < NX_F32_GROUP; j++)
        for (int r = 0; r < nr; r++) part[j * TILE_ROWS + r] = _mm512_setzero_ps();
}

void nx_matmul_f32_avx512(const float *w, int64_t in, int64_t o0, int64_t o1, const float *x, int64_t T, float *y,
                          int64_t ldy) {
    __m512 part[NX_F32_GROUP * TILE_ROWS];
    __m512 slot[NX_F32_GROUP];
    for (int64_t g = o0; g < o1; g += NX_F32_GROUP) {
        const int nout = (int)NX_MIN((int64_t)NX_F32_GROUP, o1 - g);
        const __mmask16 keep = (__mmask16)((1u << nout) - 1);
        const float *wg = w + g * in;
        for (int64_t t0 = 0; t0 < T; t0 += TILE_ROWS) {
            const int nr = (int)NX_MIN((int64_t)TILE_ROWS, T - t0);
            const float *xt = x + t0 * in;
            switch (nr) { /* constant row counts: the accumulators stay in registers */
            case 8: group_partials(8, nout, in, wg, xt, part); break;
            case 7: group_partials(7, nout, in, wg, xt, part); break;
            case 6: group_partials(6, nout, in, wg, xt, part); break;
            case 5: group_partials(5, nout, in, wg, xt, part); break;
            case 4: group_partials(4, nout, in, wg, xt, part); break;
            case 3: group_partials(3, nout, in, wg, xt, part); break;
            case 2: group_partials(2, nout, in, wg, xt, part); break;
            default: group_partials(1, nout, in, wg, xt, part); break;
            }
            for (int r = 0; r < nr; r++) {
                for (int i = 0; i < NX_F32_GROUP; i++) slot[i] = part[(4 * (i % 4) + i / 4) * TILE_ROWS + r];
                _mm512_mask_storeu_ps(y + (t0 + r) * ldy + g, keep, nx_reduce16(slot));
            }
        }
    }
}
