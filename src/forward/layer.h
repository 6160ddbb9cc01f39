/* layer.h - what a layer of the forward pass works on: the batch's rows, the activation scratch
 * named by what each layer kind keeps in it, and the means to run a task on the pool.
 *
 * The context (forward.c, ctx_internal.h) owns one nx_fwd and the caches and runs the layer
 * loop; a layer (attn.c, gdn_layer.c, the FFN in forward.c) sees only the nx_fwd and the cache it
 * owns (nx_kv_cache or nx_rstate), never the context.  Reads `in`, writes `out`, may use its own
 * kind's scratch; the scratch of different kinds shares memory (one layer runs at a time), so a
 * layer must not expect anything in it from an earlier layer.
 */
#ifndef NX_LAYER_H
#define NX_LAYER_H

#include "base/common.h"
#include "base/threads.h"
#include "forward/gdn.h"
#include "forward/kv_cache.h"
#include "forward/moe.h"
#include "model/model.h"
#include "quant/matmul.h"

/* Scratch of a gated-attention layer, per row (H query heads, Hkv KV heads of D values). */
typedef struct nx_attn_buf {
    float *q_gate; /* [2*H*D] the q projection: per head D query values, then D gate values */
    float *q;      /* [H*D] queries after per-head RMSNorm and RoPE */
    float *k;      /* [Hkv*D] keys (normed and rotated in place, then stored in the cache) */
    float *v;      /* [Hkv*D] values */
    float *att;    /* [H*D] gated attention output, the input of the output projection */
} nx_attn_buf;

/* Scratch of a Gated DeltaNet layer, per row (C = conv_dim, VD = value_dim, Hv value heads). */
typedef struct nx_gdn_buf {
    float *qkv_in; /* [C] the qkv projection, input of the causal conv */
    float *qkv;    /* [C] after conv + SiLU; q and k then L2-normed in place (q also scaled) */
    float *z;      /* [VD] output-gate projection */
    float *beta;   /* [Hv] beta projection, then sigmoid(beta) in place */
    float *g;      /* [Hv] alpha projection, then the log decay a * softplus(alpha + dt_bias) */
    float *rec;    /* [VD] delta-rule output after the gated RMSNorm */
} nx_gdn_buf;

/* Scratch of the SwiGLU FFN, per row (F = n_ff). */
typedef struct nx_ffn_buf {
    float *gate;   /* [F] gate projection, then silu(gate) * up in place */
    float *up;     /* [F] up projection */
} nx_ffn_buf;

typedef struct nx_fwd {
    const nx_hparams *hp;
    nx_pool *pool;
    nx_matmul_scratch mm;
    nx_mm_groups_scratch mmg; /* nx_fwd_matmuls' */
    int n_threads;
    int n_ctx;              /* KV cells per sequence (sizes att_scores) */
    bool avx512;            /* use the *_avx512 kernels (CPU checked at context creation) */

    /* the batch being evaluated (valid during nx_forward): rows.T rows, for row t its sequence
     * rows.seq[t], its index within that sequence rows.j[t], rows per sequence rows.seq_T[] */
    nx_gdn_rows rows;
    const int32_t *pos;     /* [T] position of each row */
    const float *rope_cs;   /* [T][n_rot/2][2] cos, sin per row and rotary pair */

    const float *in;        /* [T][E] the normed residual: input of the mixer / FFN */
    float *out;             /* [T][E] their output, added to the residual by the caller */
    nx_attn_buf attn;
    nx_gdn_buf gdn;
    nx_ffn_buf ffn;
    nx_moe_scratch moe;     /* the mixture-of-experts FFN's own scratch (qwen35moe), grown with the batch */
    float *att_scores;      /* [n_threads][NX_ATTN_MAX_Q][n_ctx] attention scores (attn_avx512.h) */
} nx_fwd;

/* Below this many operations a task runs inline: a pool wake-up costs a few microseconds
 * (much more when the cores are shared), about what 30k multiply-adds take. */
#define NX_INLINE_WORK 30000

/* Runs fn on the pool, or inline on the calling thread when `work` (a rough count of
 * floating-point operations) is too small to pay for waking the workers. */
static inline void nx_fwd_run(const nx_fwd *f, nx_task_fn fn, void *arg, int64_t work) {
    if (work < NX_INLINE_WORK || f->n_threads == 1) fn(arg, 0, 1);
    else nx_pool_run(f->pool, fn, arg);
}

/* y_i = x · W_iᵀ for n (<= NX_FWD_MAX_MATMULS) weights that read the same T rows x: one pool
 * hand-off for all their output rows and one conversion of x per activation layout when the
 * rows take the dot kernels (nx_matmul_groups); bit-identical to n nx_matmul calls (layer.c). */
#define NX_FWD_MAX_MATMULS 4
bool nx_fwd_matmuls(nx_fwd *f, const float *x, int T, int n, const nx_weight *const *w, float *const *y, nx_err *err);

/* One attention layer over the batch: appends the rows' K/V to their sequences' cells of kv
 * (layer l->cache_index); the caller commits the new lengths after the last layer. */
bool nx_attn_layer(nx_fwd *f, nx_kv_cache *kv, const nx_layer *l, nx_err *err);
/* One Gated DeltaNet layer over the batch: updates rs (layer l->cache_index); the caller
 * commits the slots after the last layer. */
bool nx_gdn_layer(nx_fwd *f, const nx_rstate *rs, const nx_layer *l, nx_err *err);

#endif
