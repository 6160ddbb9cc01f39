/* gemm.h - register-blocked matrix product for large batches (prefill), used by nx_matmul.
 *
 * nx_matmul's vec-dot path dots one weight row against at most 4 activation rows per pass, which
 * is compute-bound for large T: every weight block is decoded T/4 times and the per-pass
 * overhead (scale gathering, reductions) is paid for every group of 4 rows.  The GEMM path
 * instead copies MR weight rows at a time into a small panel (decoded once into the layout the
 * micro-kernel wants) and multiplies it by NR activation rows at a time with MR x NR accumulators
 * held in registers.
 *
 * Results are BIT-IDENTICAL to the AVX-512 vec-dot kernels of the same type: every output
 * element is accumulated with exactly the same float operations in the same order (the per-block
 * integer dots are exact, so only their per-lane int32 values have to match, not how they are
 * formed).  A row's result therefore does not depend on the batch size or on whether it went
 * through the GEMM or the vec-dot path (tests/test_gemm.c checks this for every supported type).
 *
 * Work split: (activation block of TB rows) x (weight chunk of OB rows) items, handed out by an
 * atomic counter to the pool's threads; each output element is computed by exactly one item, so
 * the thread count does not change any bit.
 */
#ifndef NX_GEMM_H
#define NX_GEMM_H

#include "quant/matmul.h"

/* Micro-kernel set for one weight type (see gemm_avx512.c). */
typedef struct nx_gemm_ops {
    int mr, nr;                       /* weight rows x activation rows per micro-kernel call */
    /* Activation rows: either used as converted by matmul (act_row_bytes == NULL: rows of the
     * vec-dot type) or repacked once per matmul into rows of act_row_bytes(n) bytes. */
    size_t (*act_row_bytes)(int64_t n);
    void (*pack_act)(const void *xq, void *xp, int64_t n);
    /* Bytes of a panel of mr weight rows of n elements, and its packer: rows < mr are padded. */
    size_t (*panel_bytes)(int64_t n);
    void (*pack_panel)(const void *w, size_t row_bytes, int rows, int64_t n, void *panel);
    /* out[r * mr + m] = dot(weight row m of the panel, activation row x[r]) for r < nr, m < mr. */
    void (*tile)(int64_t n, const void *panel, const void *const *x, float *out);
} nx_gemm_ops;

/* The kernel set for `type` at `isa` (the type table's gemm entry at that level or a lower
 * one), or NULL (no GEMM path: use the vec-dot path). */
const nx_gemm_ops *nx_gemm_ops_for(uint32_t type, nx_isa isa);

/* Scratch bytes nx_gemm needs on top of the converted activations. */
size_t nx_gemm_scratch_bytes(const nx_gemm_ops *ops, int64_t n, int64_t T, int n_threads);

/* y[T][w->out] = x · Wᵀ, x = T activation rows in the vec-dot type (xrow bytes apart);
 * scratch: nx_gemm_scratch_bytes() bytes, 64-byte aligned. */
void nx_gemm(nx_pool *pool, const nx_gemm_ops *ops, const nx_weight *w, const void *xq, size_t xrow, int64_t T,
             float *y, void *scratch);

#endif
