/* gdn_layer.c - one Gated DeltaNet layer over a batch: projections for all rows at once, causal
 * conv (parallel over channels), L2 norms, beta/decay, the delta-rule recurrence with gated
 * RMSNorm (parallel over value heads), output projection.  The layer's math follows llama.cpp's
 * qwen35 graph (src/models/qwen35.cpp, build_layer_attn_linear) and the Gated DeltaNet paper
 * (Yang et al. 2024, arXiv:2412.06464). */
#include <math.h>

#include "forward/layer.h"
#include "forward/ops.h"

typedef struct gdn_task {
    const nx_fwd *f;
    const nx_rstate *rs;
    const nx_layer *l;
    nx_gdn_recur recur;
} gdn_task;

static void conv_fn(void *p, int ith, int nth) {
    const gdn_task *gt = p;
    const nx_fwd *f = gt->f;
    const nx_hparams *hp = f->hp;
    const int C = (int)nx_hp_conv_dim(hp);
    /* chunks of 16 channels keep each thread's writes on its own cache lines */
    int64_t nchunk = (C + 15) / 16, b, e;
    nx_task_range(nchunk, ith, nth, &b, &e);
    nx_gdn_conv(gt->rs, gt->l->cache_index, &f->rows, (int)hp->ssm_conv_kernel, C, gt->l->gdn.conv1d,
                f->gdn.qkv_in, f->gdn.qkv, (int)NX_MIN(C, b * 16), (int)NX_MIN(C, e * 16), f->avx512);
}

/* L2-normalise q and k per key head (q also scaled by 1/sqrt(d)); beta = sigmoid(b);
 * g = a * softplus(alpha + dt_bias). */
static void gates_fn(void *p, int ith, int nth) {
    const gdn_task *gt = p;
    const nx_fwd *f = gt->f;
    const nx_hparams *hp = f->hp;
    const int C = (int)nx_hp_conv_dim(hp), Hk = (int)hp->ssm_n_group, Hv = (int)hp->ssm_dt_rank;
    const int d = (int)hp->ssm_d_state;
    const float qscale = 1.0f / sqrtf((float)d);
    int64_t b, e;
    nx_task_range(f->rows.T, ith, nth, &b, &e);
    for (int64_t t = b; t < e; t++) {
        float *row = f->gdn.qkv + t * C;
        for (int g = 0; g < Hk; g++) {
            nx_l2norm_scale(row + (size_t)g * d, d, hp->eps, qscale);
            nx_l2norm_scale(row + (size_t)(Hk + g) * d, d, hp->eps, 1.0f);
        }
        float *beta = f->gdn.beta + t * Hv, *alpha = f->gdn.g + t * Hv;
        for (int h = 0; h < Hv; h++) {
            beta[h] = nx_sigmoid(beta[h]);
            alpha[h] = gt->l->gdn.a[h] * nx_softplus(alpha[h] + gt->l->gdn.dt_bias[h]);
        }
    }
}

static void recur_fn(void *p, int ith, int nth) {
    const gdn_task *gt = p;
    int64_t b, e;
    nx_task_range(gt->recur.Hv, ith, nth, &b, &e);
    if (b >= e) return;
    nx_gdn_recurrence(&gt->recur, (int)b, (int)e);
}

bool nx_gdn_layer(nx_fwd *f, const nx_rstate *rs, const nx_layer *l, nx_err *err) {
    const nx_gdn_weights *w = &l->gdn;
    const nx_gdn_buf *buf = &f->gdn;
    const int T = f->rows.T;
    const nx_weight *pw[] = {&w->qkv, &w->gate, &w->beta, &w->alpha};
    float *const py[] = {buf->qkv_in, buf->z, buf->beta, buf->g};
    if (!nx_fwd_matmuls(f, f->in, T, 4, pw, py, err)) return false;
    const nx_hparams *hp = f->hp;
    gdn_task gt = {f, rs, l,
                   {.rs = rs, .layer = l->cache_index, .rows = &f->rows, .Hk = (int)hp->ssm_n_group,
                    .Hv = (int)hp->ssm_dt_rank, .d = (int)hp->ssm_d_state, .qkv = buf->qkv,
                    .C = (int)nx_hp_conv_dim(hp), .beta = buf->beta, .g = buf->g, .z = buf->z, .norm_w = w->norm,
                    .eps = hp->eps, .out = buf->rec, .avx512 = f->avx512}};
    const int64_t C = nx_hp_conv_dim(hp), d = hp->ssm_d_state;
    nx_fwd_run(f, conv_fn, &gt, T * C * (2 * (int64_t)hp->ssm_conv_kernel + 8));
    nx_fwd_run(f, gates_fn, &gt, T * (4 * (int64_t)nx_hp_key_dim(hp) + 40 * (int64_t)hp->ssm_dt_rank));
    nx_fwd_run(f, recur_fn, &gt, T * 4 * d * d * (int64_t)hp->ssm_dt_rank);
    return nx_matmul(f->pool, &f->mm, &w->out, buf->rec, T, f->out, err);
}
