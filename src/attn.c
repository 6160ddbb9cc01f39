/* attn.c - gated full-attention layer (reference §5): Q/gate interleaved per head, per-head
 * q/k RMSNorm, partial NeoX RoPE, GQA, causal softmax attention over the sequence's KV cells,
 * sigmoid output gate, output projection.  Parallel over (row, head) pairs. */
#include <math.h>
#include <string.h>

#include "ctx_internal.h"
#include "ops.h"
#include "ops_avx512.h"
#include "quant.h"

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

static void attend_fn(void *p, int ith, int nth) {
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

bool nx_attn_layer(nx_ctx *c, const nx_layer *l, nx_err *err) {
    if (!nx_matmul(c->pool, &c->mm, &l->attn.q, c->a, c->T, c->big0, err) ||
        !nx_matmul(c->pool, &c->mm, &l->attn.k, c->a, c->T, c->mid1, err) ||
        !nx_matmul(c->pool, &c->mm, &l->attn.v, c->a, c->T, c->mid2, err))
        return false;
    prep_task pt = {c, l};
    const nx_hparams *hp = &c->model->hp;
    const int64_t D = hp->head_dim, H = hp->n_head, kv = (int64_t)c->T * (c->pos[c->T - 1] + 1);
    nx_ctx_run(c, prep_fn, &pt, (int64_t)c->T * (H + hp->n_head_kv) * D * 8);
    nx_ctx_run(c, attend_fn, &pt, kv * H * D * 4);
    return nx_matmul(c->pool, &c->mm, &l->attn.o, c->big1, c->T, c->m, err);
}
