/* attn_avx512.h - softmax attention of several queries over one KV head (AVX-512).
 *
 * Why.  A k-row speculative verify has k query rows of one sequence, and with grouped-query
 * attention H / Hkv query heads share each KV head.  Attending them one at a time re-reads and
 * re-converts every K and V cell per query and pays one horizontal reduction per key and query.
 * Here the queries of one KV head are handled together: scores come 16 keys at a time through one
 * transposed reduction (reduce16_avx512.h), and each V cell is converted once per block of queries
 * whose output vectors stay in registers.
 *
 * Contract (what tests/test_attn_kernel.c checks bit for bit): every query's output is exactly
 * what the one-query path in attn.c computes with the ops_avx512.h kernels -
 *     score[c] = nx_ops_dot_*_avx512(K cell c, q, D) * scale       for c < n_keys,
 *     mx = max score;  e[c] = nx_ops_exp_avx512(score - mx);  sum = double sum of e in cell order,
 *     out = sum over c in cell order of fma(e[c] * (float)(1 / sum), V cell c, out), out from 0 -
 * so a query's result does not depend on which other queries share the call, i.e. a verify row
 * stays bit-identical to a 1-row decode.
 */
#ifndef NX_ATTN_AVX512_H
#define NX_ATTN_AVX512_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "forward/kv_cache.h"

/* Queries per call (the callers' scratch holds this many score arrays per thread). */
#define NX_ATTN_MAX_Q 8

typedef struct nx_attn_query {
    const float *q; /* D values (normed, rotated) */
    int n_keys;     /* attends to cells 0 .. n_keys - 1 (>= 1) */
    float *scores;  /* scratch of >= n_keys floats */
    float *out;     /* D floats: the attention output before the gate */
} nx_attn_query;

/* k, v: cell 0 of one KV head, in cache types tk / tv (kv_cache.h); cell c starts c * stride_k
 * (stride_v) bytes further.  A Q8_0 / Q4_0 cell is read block by block and each 16 values are
 * dequantised exactly as the type's to_float does, so the result equals, bit for bit, the result
 * over an F32 cache holding the dequantised values (the kernels above see the same floats).
 * Requires D % 16 == 0 (D % 32 == 0 for the quantized types) and 1 <= nq <= NX_ATTN_MAX_Q.  Reads
 * cells below the largest n_keys only. */
void nx_attend_avx512(const uint8_t *k, nx_kv_type tk, size_t stride_k, const uint8_t *v, nx_kv_type tv,
                      size_t stride_v, int D, float scale, nx_attn_query *qs, int nq);

#endif
