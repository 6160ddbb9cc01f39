/* matmul.h - Y = X · Wᵀ for a weight matrix in any nx_type, threaded.
 *
 * W is a GGUF matrix with ne = {in, out}: `out` rows of `in` elements each (row o = output
 * feature o).  X holds T activation rows of `in` floats; Y receives T rows of `out` floats.
 * The activations are converted once to the weight's vec-dot type, then output rows are split
 * across the pool; each weight row is dotted against up to NX_MATMUL_ROW_TILE activation rows
 * at a time so a weight block is read from memory once per tile.
 */
#ifndef NX_MATMUL_H
#define NX_MATMUL_H

#include "quant/quant.h"
#include "base/threads.h"

#define NX_MATMUL_ROW_TILE 8
/* From this many activation rows on, types with a GEMM kernel (gemm.h) use it. */
#define NX_GEMM_MIN_T 16

typedef struct nx_weight {
    const void *data;   /* row-major rows of `in` elements in `type` */
    uint32_t type;
    int64_t in, out;    /* ne0, ne1 */
    size_t row_bytes;
} nx_weight;

/* Scratch for the converted activations; owned by the caller (e.g. the forward context) and
 * grown on demand. */
typedef struct nx_matmul_scratch {
    void *buf;
    size_t cap;
} nx_matmul_scratch;

bool nx_weight_init(nx_weight *w, const void *data, uint32_t type, int64_t in, int64_t out, nx_err *err);
bool nx_matmul(nx_pool *pool, nx_matmul_scratch *scratch, const nx_weight *w,
               const float *x, int64_t T, float *y, nx_err *err);
/* nx_matmul with the kernels of level isa (at most nx_cpu_isa(): a higher one is lowered to it):
 * for tests and benchmarks that compare levels in one process (nx_matmul uses nx_cpu_isa()). */
bool nx_matmul_isa(nx_pool *pool, nx_matmul_scratch *scratch, const nx_weight *w, const float *x, int64_t T, float *y,
                   nx_isa isa, nx_err *err);
void nx_matmul_scratch_free(nx_matmul_scratch *s);

#endif
