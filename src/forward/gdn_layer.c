/* gdn_layer.c - one Gated DeltaNet layer over a batch (reference §4): projections for all rows
 * at once, causal conv (parallel over channels), L2 norms, beta/decay, the delta-rule recurrence
 * with gated RMSNorm (parallel over value heads), output projection. */
#include <math.h>

#include "forward/ctx_internal.h"
#include "forward/ops.h"

typedef struct gdn_task {
    nx_ctx *c;
    const nx_layer *l;
    nx_gdn_rows rows;
} gdn_task;

static void range(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    int64_t per = (n + nth - 1) / nth;
    *b = NX_MIN(n, per * ith);
    *e = NX_MIN(n, *b + per);
}

static void conv_fn(void *p, int ith, int nth) {
    gdn_task *gt = p;
    const nx_hparams *hp = &gt->c->model->hp;
    const int C = (int)nx_hp_conv_dim(hp);
    /* chunks of 16 channels keep each thread's writes on its own cache lines */
    int64_t nchunk = (C + 15) / 16, b, e;
    range(nchunk, ith, nth, &b, &e);
    nx_gdn_conv(&gt->c->rs, gt->l->cache_index, &gt->rows, (int)hp->ssm_conv_kernel, C, gt->l->gdn.conv1d,
                gt->c->big0, gt->c->big1, (int)NX_MIN(C, b * 16), (int)NX_MIN(C, e * 16), gt->c->avx512);
}

/* L2-normalise q and k per key head (q also scaled by 1/sqrt(d)); beta = sigmoid(b);
 * g = a * softplus(alpha + dt_bias). */
static void gates_fn(void *p, int ith, int nth) {
    gdn_task *gt = p;
    nx_ctx *c = gt->c;
    const nx_hparams *hp = &c->model->hp;
    const int C = (int)nx_hp_conv_dim(hp), Hk = (int)hp->ssm_n_group, Hv = (int)hp->ssm_dt_rank;
    const int d = (int)hp->ssm_d_state;
    const float qscale = 1.0f / sqrtf((float)d);
    int64_t b, e;
    range(c->T, ith, nth, &b, &e);
    for (int64_t t = b; t < e; t++) {
        float *row = c->big1 + t * C;
        for (int g = 0; g < Hk; g++) {
            nx_l2norm_scale(row + (size_t)g * d, d, hp->eps, qscale);
            nx_l2norm_scale(row + (size_t)(Hk + g) * d, d, hp->eps, 1.0f);
        }
        float *beta = c->small0 + t * Hv, *alpha = c->small1 + t * Hv;
        for (int h = 0; h < Hv; h++) {
            beta[h] = nx_sigmoid(beta[h]);
            alpha[h] = gt->l->gdn.a[h] * nx_softplus(alpha[h] + gt->l->gdn.dt_bias[h]);
        }
    }
}

static void recur_fn(void *p, int ith, int nth) {
    gdn_task *gt = p;
    nx_ctx *c = gt->c;
    const nx_hparams *hp = &c->model->hp;
    const int Hv = (int)hp->ssm_dt_rank;
    int64_t b, e;
    range(Hv, ith, nth, &b, &e);
    if (b >= e) return;
    nx_gdn_recurrence(&c->rs, gt->l->cache_index, &gt->rows, (int)hp->ssm_n_group, Hv, (int)hp->ssm_d_state,
                      c->big1, (int)nx_hp_conv_dim(hp), c->small0, c->small1, c->mid0, gt->l->gdn.norm, hp->eps,
                      c->mid1, (int)b, (int)e, c->avx512);
}

bool nx_gdn_layer(nx_ctx *c, const nx_layer *l, nx_err *err) {
    const nx_gdn_weights *w = &l->gdn;
    if (!nx_matmul(c->pool, &c->mm, &w->qkv, c->a, c->T, c->big0, err) ||
        !nx_matmul(c->pool, &c->mm, &w->gate, c->a, c->T, c->mid0, err) ||
        !nx_matmul(c->pool, &c->mm, &w->beta, c->a, c->T, c->small0, err) ||
        !nx_matmul(c->pool, &c->mm, &w->alpha, c->a, c->T, c->small1, err))
        return false;
    gdn_task gt = {c, l, {c->T, c->seq, c->row_j, c->seq_T}};
    const nx_hparams *hp = &c->model->hp;
    const int64_t T = c->T, C = nx_hp_conv_dim(hp), d = hp->ssm_d_state;
    nx_ctx_run(c, conv_fn, &gt, T * C * (2 * (int64_t)hp->ssm_conv_kernel + 8));
    nx_ctx_run(c, gates_fn, &gt, T * (4 * (int64_t)nx_hp_key_dim(hp) + 40 * (int64_t)hp->ssm_dt_rank));
    nx_ctx_run(c, recur_fn, &gt, T * 4 * d * d * (int64_t)hp->ssm_dt_rank);
    return nx_matmul(c->pool, &c->mm, &w->out, c->mid1, c->T, c->m, err);
}
