/* ctx_internal.h - the forward context's fields, shared by forward.c, attn.c and gdn_layer.c.
 * Not part of the public API (see forward.h). */
#ifndef NX_CTX_INTERNAL_H
#define NX_CTX_INTERNAL_H

#include "forward/forward.h"
#include "forward/gdn.h"
#include "forward/kv_cache.h"
#include "quant/matmul.h"

struct nx_ctx {
    const nx_model *model;
    nx_pool *pool;
    nx_ctx_params params;
    nx_kv_cache kv;
    nx_rstate rs;
    nx_matmul_scratch mm;

    /* current batch (valid during and after nx_forward) */
    int T;                  /* rows */
    int cap_T;              /* rows the scratch below is sized for */
    const int32_t *pos;     /* the caller's arrays, during nx_forward only */
    int32_t *seq;           /* [cap_T] sequence of each row */
    int32_t *row_j;         /* [cap_T] index of the row within its sequence in this batch */
    int32_t *seq_T;         /* [n_seq] rows of each sequence in this batch */
    int32_t *out_row;       /* [cap_T] logits row index or -1 */
    int n_out;

    /* activations, [cap_T][...] each */
    float *x;               /* residual stream [E] */
    float *a;               /* normed input of the mixer / FFN [E] */
    float *m;               /* mixer / FFN output [E] */
    float *hidden;          /* post-final-norm hidden [E] (exported) */
    float *big0, *big1;     /* [max(conv_dim, 2*H*D, F)] */
    float *mid0, *mid1;     /* [max(value_dim, H*D, kv_dim)] */
    float *mid2;            /* [max(value_dim, kv_dim)] */
    float *small0, *small1; /* [Hv] */
    float *rope_cs;         /* [cap_T][R/2][2] cos, sin per row and rotary pair */
    float *gather;          /* [cap_T][E] hidden rows that want logits, contiguous */
    float *logits;          /* [cap_T][V] grown lazily to n_out rows */
    int cap_logits;
    float *att_scratch;     /* [n_threads][NX_ATTN_MAX_Q][n_ctx] attention scores (attn_avx512.h) */
    int n_threads;
    bool avx512;            /* use the *_avx512 kernels (CPU checked at creation) */
    size_t scratch_bytes;
};

/* Runs fn on the pool, or inline on the calling thread when `work` (a rough count of
 * floating-point operations) is too small to pay for waking the workers. */
void nx_ctx_run(nx_ctx *ctx, nx_task_fn fn, void *arg, int64_t work);

bool nx_attn_layer(nx_ctx *ctx, const nx_layer *l, nx_err *err);
bool nx_gdn_layer(nx_ctx *ctx, const nx_layer *l, nx_err *err);

#endif
