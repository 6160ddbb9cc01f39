/* ctx_internal.h - the forward context's fields (forward.c, seq_ckpt.c; white-box tests).
 * Not part of the public API (see forward.h).  The layers do not see it (layer.h). */
#ifndef NX_CTX_INTERNAL_H
#define NX_CTX_INTERNAL_H

#include "forward/forward.h"
#include "forward/gdn.h"
#include "forward/kv_cache.h"
#include "forward/layer.h"

struct nx_ctx {
    const nx_model *model;
    nx_ctx_params params;
    nx_kv_cache kv;
    nx_rstate rs;
    nx_fwd run;             /* what the layers see: batch rows, scratch, pool, matmul scratch */

    /* current batch (valid during and after nx_forward) */
    int T;                  /* rows */
    int cap_T;              /* rows the scratch below is sized for */
    int32_t *seq;           /* [cap_T] sequence of each row */
    int32_t *row_j;         /* [cap_T] index of the row within its sequence in this batch */
    int32_t *seq_T;         /* [n_seq] rows of each sequence in this batch */
    int32_t *out_row;       /* [cap_T] logits row index or -1 */
    int n_out;

    /* activations, [cap_T][...] each */
    float *x;               /* residual stream [E] */
    float *xn;              /* normed residual [E]: the layers' input (run.in) */
    float *y;               /* mixer / FFN output [E] (run.out) */
    float *hidden;          /* post-final-norm hidden [E] (exported) */
    float *wide[2];         /* [max(conv_dim, 2*H*D, F)]: attn q_gate, att; gdn qkv_in, qkv; ffn gate, up */
    float *narrow[3];       /* [max(value_dim, H*D, kv_dim)] x2, [max(value_dim, kv_dim)]: attn q, k, v;
                             * gdn z, rec */
    float *per_head[2];     /* [Hv]: gdn beta, g */
    float *rope_cs;         /* [cap_T][R/2][2] cos, sin per row and rotary pair */
    float *gather;          /* [cap_T][E] hidden rows that want logits, contiguous */
    float *logits;          /* [cap_T][V] grown lazily to n_out rows */
    int cap_logits;
    size_t scratch_bytes;
};

#endif
