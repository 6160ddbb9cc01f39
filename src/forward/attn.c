/* attn.c - gated full-attention layer (reference §5): Q/gate interleaved per head, per-head
 * q/k RMSNorm, partial NeoX RoPE, GQA, causal softmax attention over the sequence's KV cells,
 * sigmoid output gate, output projection.  Parallel over (row, head) pairs. */
#include <math.h>
#include <string.h>

#include "forward/attn_avx512.h"
#include "forward/ctx_internal.h"
#include "forward/ops.h"
#include "forward/ops_avx512.h"
#include "quant/quant.h"

/* NeoX pairing on the first R dims: (p, p + R/2) rotated by the row's angle for pair p. */
static void rope_neox(float *x, const float *cs, int R) {
    const int half = R / 2;
    for (int p = 0; p < half; p++) {
        const float c = cs[2 * p], s = cs[2 * p + 1];
        const float x0 = x[p], x1 = x[p + half];
        x[p] = x0 * c - x1 * s;
        x[p + half] = x0 * s + x1 * c;
    }
}

typedef struct prep_task {
    nx_ctx *c;
    const nx_layer *l;
} prep_task;

/* q: norm + rope into mid0 [T][H*D]; k: norm + rope in place (mid1); then store K, V. */
static void prep_fn(void *p, int ith, int nth) {
    prep_task *pt = p;
    nx_ctx *c = pt->c;
    const nx_hparams *hp = &c->model->hp;
    const int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim, R = (int)hp->n_rot;
    const int HD = H * D, KV = Hkv * D;
    int64_t n = (int64_t)c->T, per = (n + nth - 1) / nth, b = NX_MIN(n, per * ith), e = NX_MIN(n, b + per);
    for (int64_t t = b; t < e; t++) {
        const float *cs = c->rope_cs + t * hp->n_rot;
        const float *qf = c->big0 + t * 2 * HD;
        float *q = c->mid0 + t * HD;
        for (int h = 0; h < H; h++) {
            nx_rmsnorm(qf + (size_t)h * 2 * D, pt->l->attn.q_norm, q + (size_t)h * D, D, hp->eps);
            rope_neox(q + (size_t)h * D, cs, R);
        }
        float *k = c->mid1 + t * KV;
        for (int g = 0; g < Hkv; g++) {
            nx_rmsnorm(k + (size_t)g * D, pt->l->attn.k_norm, k + (size_t)g * D, D, hp->eps);
            rope_neox(k + (size_t)g * D, cs, R);
        }
        nx_kv_store(&c->kv, pt->l->cache_index, c->seq[t], c->pos[t], k, c->mid2 + t * KV);
    }
}

static float dot_kv(const uint8_t *row, nx_kv_type type, const float *q, int D, bool simd) {
    if (simd) return type == NX_KV_F32 ? nx_ops_dot_f32_avx512((const float *)row, q, D)
                                       : nx_ops_dot_f16_avx512((const uint16_t *)row, q, D);
    if (type == NX_KV_F32) return nx_dot_f32((const float *)row, q, D);
    const uint16_t *r = (const uint16_t *)row;
    float acc = 0.0f;
    for (int i = 0; i < D; i++) acc += nx_f16_to_f32(r[i]) * q[i];
    return acc;
}

static void axpy_kv(float *y, float a, const uint8_t *row, nx_kv_type type, int D, bool simd) {
    if (simd) {
        if (type == NX_KV_F32) nx_ops_axpy_f32_avx512(y, a, (const float *)row, D);
        else nx_ops_axpy_f16_avx512(y, a, (const uint16_t *)row, D);
        return;
    }
    if (type == NX_KV_F32) {
        nx_axpy_f32(y, a, (const float *)row, D);
        return;
    }
    const uint16_t *r = (const uint16_t *)row;
    for (int i = 0; i < D; i++) y[i] += a * nx_f16_to_f32(r[i]);
}

/* Reference path (no AVX-512, or head_dim not a multiple of 16): one (row, head) at a time. */
static void attend_one_fn(void *p, int ith, int nth) {
    prep_task *pt = p;
    nx_ctx *c = pt->c;
    const nx_hparams *hp = &c->model->hp;
    const nx_kv_cache *kv = &c->kv;
    const int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim;
    const int HD = H * D, group = H / Hkv, layer = pt->l->cache_index;
    const float scale = 1.0f / sqrtf((float)D);
    float *scores = c->att_scratch + (size_t)ith * (size_t)c->params.n_ctx;
    int64_t n = (int64_t)c->T * H, per = (n + nth - 1) / nth, b = NX_MIN(n, per * ith), e = NX_MIN(n, b + per);
    for (int64_t item = b; item < e; item++) {
        const int t = (int)(item / H), h = (int)(item % H), g = h / group; /* grouped GQA (§5.4) */
        const int s = c->seq[t], n_keys = c->pos[t] + 1; /* causal: cells 0..pos of this sequence */
        const float *q = c->mid0 + (size_t)t * HD + (size_t)h * D;
        const uint8_t *kbase = kv->k + nx_kv_offset(kv, layer, s, 0) + (size_t)g * D * kv->elt;
        const uint8_t *vbase = kv->v + nx_kv_offset(kv, layer, s, 0) + (size_t)g * D * kv->elt;
        const size_t stride = (size_t)kv->kv_dim * kv->elt;
        float mx = -INFINITY;
        for (int k = 0; k < n_keys; k++) {
            scores[k] = dot_kv(kbase + (size_t)k * stride, kv->type, q, D, c->avx512) * scale;
            if (scores[k] > mx) mx = scores[k];
        }
        double sum = 0.0;
        if (c->avx512) nx_ops_exp_avx512(scores, scores, mx, n_keys);
        else for (int k = 0; k < n_keys; k++) scores[k] = expf(scores[k] - mx);
        for (int k = 0; k < n_keys; k++) sum += scores[k];
        const float inv = (float)(1.0 / sum);
        float *out = c->big1 + (size_t)t * HD + (size_t)h * D;
        memset(out, 0, (size_t)D * sizeof(float));
        for (int k = 0; k < n_keys; k++) axpy_kv(out, scores[k] * inv, vbase + (size_t)k * stride, kv->type, D, c->avx512);
        /* sigmoid output gate (§5.5): gate of head h follows its D query values in big0 */
        const float *gate = c->big0 + (size_t)t * 2 * HD + (size_t)h * 2 * D + D;
        if (c->avx512) nx_ops_mul_sigmoid_avx512(out, gate, D);
        else for (int i = 0; i < D; i++) out[i] *= nx_sigmoid(gate[i]);
    }
}

/* Work items of the AVX-512 path.  Rows are cut into chunks of consecutive rows of one
 * sequence (at most rows_per_chunk), heads into blocks of heads_per_block heads of one KV group;
 * an item is (chunk, KV group, head block) and its chunk rows x block heads are attended together
 * by nx_attend_avx512, which reads each K/V cell once for all of them.  A query's result does not
 * depend on the grouping (attn_avx512.h), so any partition gives the same bits. */
typedef struct attn_plan {
    int rows_per_chunk, heads_per_block, blocks_per_group, n_chunks;
} attn_plan;

static attn_plan plan_items(const nx_ctx *c, int nth) {
    const nx_hparams *hp = &c->model->hp;
    const int group = (int)(hp->n_head / hp->n_head_kv);
    attn_plan pl;
    pl.heads_per_block = NX_MIN(group, NX_ATTN_MAX_Q);
    pl.rows_per_chunk = NX_ATTN_MAX_Q / pl.heads_per_block;
    pl.n_chunks = 0;
    for (int t = 0, len = 0; t < c->T; t++) {
        len = (t > 0 && c->seq[t] == c->seq[t - 1] && len < pl.rows_per_chunk) ? len + 1 : 1;
        pl.n_chunks += len == 1;
    }
    if ((int64_t)pl.n_chunks * hp->n_head_kv < nth && group > 1) { /* too few items: one head per block */
        pl.heads_per_block = 1;
        pl.rows_per_chunk = NX_ATTN_MAX_Q;
        pl.n_chunks = 0;
        for (int t = 0, len = 0; t < c->T; t++) {
            len = (t > 0 && c->seq[t] == c->seq[t - 1] && len < pl.rows_per_chunk) ? len + 1 : 1;
            pl.n_chunks += len == 1;
        }
    }
    pl.blocks_per_group = (group + pl.heads_per_block - 1) / pl.heads_per_block;
    return pl;
}

typedef struct grouped_task {
    nx_ctx *c;
    const nx_layer *l;
    attn_plan plan;
} grouped_task;

static void attend_grouped_fn(void *p, int ith, int nth) {
    grouped_task *gt = p;
    nx_ctx *c = gt->c;
    const attn_plan *pl = &gt->plan;
    const nx_hparams *hp = &c->model->hp;
    const nx_kv_cache *kv = &c->kv;
    const int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim;
    const int HD = H * D, group = H / Hkv, layer = gt->l->cache_index, per_chunk = Hkv * pl->blocks_per_group;
    const float scale = 1.0f / sqrtf((float)D);
    float *scratch = c->att_scratch + (size_t)ith * NX_ATTN_MAX_Q * (size_t)c->params.n_ctx;
    const int64_t n = (int64_t)pl->n_chunks * per_chunk, per = (n + nth - 1) / nth;
    const int64_t b = NX_MIN(n, per * ith), e = NX_MIN(n, b + per);
    nx_attn_query qs[NX_ATTN_MAX_Q];
    int chunk = -1, t0 = 0, len = 0;
    for (int64_t item = b; item < e; item++) {
        const int want = (int)(item / per_chunk), rest = (int)(item % per_chunk);
        const int g = rest / pl->blocks_per_group, hb = rest % pl->blocks_per_group;
        while (chunk < want) { /* advance to chunk `want`: rows [t0, t0 + len) */
            t0 += len;
            len = 1;
            while (t0 + len < c->T && c->seq[t0 + len] == c->seq[t0] && len < pl->rows_per_chunk) len++;
            chunk++;
        }
        const int h0 = g * group + hb * pl->heads_per_block, h1 = NX_MIN(g * group + group, h0 + pl->heads_per_block);
        const int s = c->seq[t0];
        int nq = 0;
        for (int t = t0; t < t0 + len; t++)
            for (int h = h0; h < h1; h++, nq++) {
                qs[nq].q = c->mid0 + (size_t)t * HD + (size_t)h * D;
                qs[nq].n_keys = c->pos[t] + 1; /* causal: cells 0..pos of this sequence */
                qs[nq].scores = scratch + (size_t)nq * (size_t)c->params.n_ctx;
                qs[nq].out = c->big1 + (size_t)t * HD + (size_t)h * D;
            }
        const size_t base = nx_kv_offset(kv, layer, s, 0) + (size_t)g * D * kv->elt;
        nx_attend_avx512(kv->k + base, kv->v + base, kv->type == NX_KV_F16, (size_t)kv->kv_dim, D, scale, qs, nq);
        for (int t = t0, j = 0; t < t0 + len; t++) /* sigmoid output gate (§5.5): after the D query values */
            for (int h = h0; h < h1; h++, j++)
                nx_ops_mul_sigmoid_avx512(qs[j].out, c->big0 + (size_t)t * 2 * HD + (size_t)h * 2 * D + D, D);
    }
}

bool nx_attn_layer(nx_ctx *c, const nx_layer *l, nx_err *err) {
    if (!nx_matmul(c->pool, &c->mm, &l->attn.q, c->a, c->T, c->big0, err) ||
        !nx_matmul(c->pool, &c->mm, &l->attn.k, c->a, c->T, c->mid1, err) ||
        !nx_matmul(c->pool, &c->mm, &l->attn.v, c->a, c->T, c->mid2, err))
        return false;
    prep_task pt = {c, l};
    const nx_hparams *hp = &c->model->hp;
    const int64_t D = hp->head_dim, H = hp->n_head, kv = (int64_t)c->T * (c->pos[c->T - 1] + 1);
    nx_ctx_run(c, prep_fn, &pt, (int64_t)c->T * (H + hp->n_head_kv) * D * 8);
    if (c->avx512 && D % 16 == 0) {
        grouped_task gt = {c, l, plan_items(c, c->n_threads)};
        nx_ctx_run(c, attend_grouped_fn, &gt, kv * H * D * 4);
    } else {
        nx_ctx_run(c, attend_one_fn, &pt, kv * H * D * 4);
    }
    return nx_matmul(c->pool, &c->mm, &l->attn.o, c->big1, c->T, c->m, err);
}
