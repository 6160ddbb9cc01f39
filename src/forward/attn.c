/* attn.c - gated full-attention layer, as llama.cpp's qwen35 graph computes it
 * (src/models/qwen35.cpp, build_layer_attn): the q projection holds per head D query values then
 * D gate values; per-head RMSNorm of q and k before RoPE; partial NeoX RoPE on the first n_rot
 * dims; grouped-query attention (query head h reads KV head h / (H/Hkv)); causal softmax over
 * the sequence's KV cells with scale 1/sqrt(D); output times sigmoid(gate); output projection.
 * Parallel over (row, head) pairs. */
#include <math.h>
#include <string.h>

#include "forward/attn_avx512.h"
#include "forward/layer.h"
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
    const nx_fwd *f;
    nx_kv_cache *kv;
    const nx_layer *l;
} prep_task;

/* q: norm + rope from q_gate into q; k: norm + rope in place; then store K, V. */
static void prep_fn(void *p, int ith, int nth) {
    const prep_task *pt = p;
    const nx_fwd *f = pt->f;
    const nx_attn_buf *buf = &f->attn;
    const nx_hparams *hp = f->hp;
    const int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim, R = (int)hp->n_rot;
    const int HD = H * D, KV = Hkv * D;
    int64_t b, e;
    nx_task_range(f->rows.T, ith, nth, &b, &e);
    for (int64_t t = b; t < e; t++) {
        const float *cs = f->rope_cs + t * hp->n_rot;
        const float *qf = buf->q_gate + t * 2 * HD;
        float *q = buf->q + t * HD;
        for (int h = 0; h < H; h++) {
            nx_rmsnorm(qf + (size_t)h * 2 * D, pt->l->attn.q_norm, q + (size_t)h * D, D, hp->eps);
            rope_neox(q + (size_t)h * D, cs, R);
        }
        float *k = buf->k + t * KV;
        for (int g = 0; g < Hkv; g++) {
            nx_rmsnorm(k + (size_t)g * D, pt->l->attn.k_norm, k + (size_t)g * D, D, hp->eps);
            rope_neox(k + (size_t)g * D, cs, R);
        }
        nx_kv_store(pt->kv, pt->l->cache_index, f->rows.seq[t], f->pos[t], k, buf->v + t * KV);
    }
}

/* One head's D values of a cell in the kernels' input form: F32 and F16 rows are read in place
 * (*f16 tells which); a quantized row is dequantised into tmp (the type's to_float), so the
 * result equals that over an F32 cache holding the dequantised values. */
static const void *cell_row(const uint8_t *row, nx_kv_type type, int D, float *tmp, bool *f16) {
    *f16 = type == NX_KV_F16;
    if (type == NX_KV_F16 || type == NX_KV_F32) return row;
    nx_kv_type_to_float(type, row, tmp, D);
    return tmp;
}

static float dot_kv(const void *row, bool f16, const float *q, int D, bool simd) {
    if (simd) return f16 ? nx_ops_dot_f16_avx512((const uint16_t *)row, q, D) : nx_ops_dot_f32_avx512((const float *)row, q, D);
    if (!f16) return nx_dot_f32((const float *)row, q, D);
    const uint16_t *r = (const uint16_t *)row;
    float acc = 0.0f;
    for (int i = 0; i < D; i++) acc += nx_f16_to_f32(r[i]) * q[i];
    return acc;
}

static void axpy_kv(float *y, float a, const void *row, bool f16, int D, bool simd) {
    if (simd) {
        if (f16) nx_ops_axpy_f16_avx512(y, a, (const uint16_t *)row, D);
        else nx_ops_axpy_f32_avx512(y, a, (const float *)row, D);
        return;
    }
    if (!f16) {
        nx_axpy_f32(y, a, (const float *)row, D);
        return;
    }
    const uint16_t *r = (const uint16_t *)row;
    for (int i = 0; i < D; i++) y[i] += a * nx_f16_to_f32(r[i]);
}

/* Reference path (no AVX-512, or head_dim not a multiple of 16): one (row, head) at a time. */
static void attend_one_fn(void *p, int ith, int nth) {
    const prep_task *pt = p;
    const nx_fwd *f = pt->f;
    const nx_attn_buf *buf = &f->attn;
    const nx_hparams *hp = f->hp;
    const nx_kv_cache *kv = pt->kv;
    const bool simd = f->avx512;
    const int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim;
    const int HD = H * D, group = H / Hkv, layer = pt->l->cache_index;
    const float scale = 1.0f / sqrtf((float)D);
    float *scores = f->att_scores + (size_t)ith * (size_t)f->n_ctx;
    float tmp[NX_MAX_HEAD_DIM] __attribute__((aligned(64))); /* one dequantised cell head */
    int64_t b, e;
    nx_task_range((int64_t)f->rows.T * H, ith, nth, &b, &e);
    for (int64_t item = b; item < e; item++) {
        const int t = (int)(item / H), h = (int)(item % H), g = h / group; /* consecutive query heads share a KV head */
        const int s = f->rows.seq[t], n_keys = f->pos[t] + 1; /* causal: cells 0..pos of this sequence */
        const float *q = buf->q + (size_t)t * HD + (size_t)h * D;
        const uint8_t *kbase = kv->k + nx_kv_offset_k(kv, layer, s, 0) + nx_kv_type_bytes(kv->type_k, (size_t)g * D);
        const uint8_t *vbase = kv->v + nx_kv_offset_v(kv, layer, s, 0) + nx_kv_type_bytes(kv->type_v, (size_t)g * D);
        float mx = -INFINITY;
        bool f16;
        for (int k = 0; k < n_keys; k++) {
            const void *row = cell_row(kbase + (size_t)k * kv->row_k, kv->type_k, D, tmp, &f16);
            scores[k] = dot_kv(row, f16, q, D, simd) * scale;
            if (scores[k] > mx) mx = scores[k];
        }
        double sum = 0.0;
        if (simd) nx_ops_exp_avx512(scores, scores, mx, n_keys);
        else for (int k = 0; k < n_keys; k++) scores[k] = expf(scores[k] - mx);
        for (int k = 0; k < n_keys; k++) sum += scores[k];
        const float inv = (float)(1.0 / sum);
        float *out = buf->att + (size_t)t * HD + (size_t)h * D;
        memset(out, 0, (size_t)D * sizeof(float));
        for (int k = 0; k < n_keys; k++) {
            const void *row = cell_row(vbase + (size_t)k * kv->row_v, kv->type_v, D, tmp, &f16);
            axpy_kv(out, scores[k] * inv, row, f16, D, simd);
        }
        /* sigmoid output gate: the gate of head h follows its D query values in q_gate */
        const float *gate = buf->q_gate + (size_t)t * 2 * HD + (size_t)h * 2 * D + D;
        if (simd) nx_ops_mul_sigmoid_avx512(out, gate, D);
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

static attn_plan plan_items(const nx_fwd *f, int nth) {
    const nx_hparams *hp = f->hp;
    const int T = f->rows.T;
    const int32_t *seq = f->rows.seq;
    const int group = (int)(hp->n_head / hp->n_head_kv);
    attn_plan pl;
    pl.heads_per_block = NX_MIN(group, NX_ATTN_MAX_Q);
    pl.rows_per_chunk = NX_ATTN_MAX_Q / pl.heads_per_block;
    pl.n_chunks = 0;
    for (int t = 0, len = 0; t < T; t++) {
        len = (t > 0 && seq[t] == seq[t - 1] && len < pl.rows_per_chunk) ? len + 1 : 1;
        pl.n_chunks += len == 1;
    }
    if ((int64_t)pl.n_chunks * hp->n_head_kv < nth && group > 1) { /* too few items: one head per block */
        pl.heads_per_block = 1;
        pl.rows_per_chunk = NX_ATTN_MAX_Q;
        pl.n_chunks = 0;
        for (int t = 0, len = 0; t < T; t++) {
            len = (t > 0 && seq[t] == seq[t - 1] && len < pl.rows_per_chunk) ? len + 1 : 1;
            pl.n_chunks += len == 1;
        }
    }
    pl.blocks_per_group = (group + pl.heads_per_block - 1) / pl.heads_per_block;
    return pl;
}

typedef struct grouped_task {
    const nx_fwd *f;
    const nx_kv_cache *kv;
    const nx_layer *l;
    attn_plan plan;
} grouped_task;

static void attend_grouped_fn(void *p, int ith, int nth) {
    const grouped_task *gt = p;
    const nx_fwd *f = gt->f;
    const nx_attn_buf *buf = &f->attn;
    const int T = f->rows.T;
    const int32_t *seq = f->rows.seq;
    const attn_plan *pl = &gt->plan;
    const nx_hparams *hp = f->hp;
    const nx_kv_cache *kv = gt->kv;
    const int H = (int)hp->n_head, Hkv = (int)hp->n_head_kv, D = (int)hp->head_dim;
    const int HD = H * D, group = H / Hkv, layer = gt->l->cache_index, per_chunk = Hkv * pl->blocks_per_group;
    const float scale = 1.0f / sqrtf((float)D);
    float *scratch = f->att_scores + (size_t)ith * NX_ATTN_MAX_Q * (size_t)f->n_ctx;
    int64_t b, e;
    nx_task_range((int64_t)pl->n_chunks * per_chunk, ith, nth, &b, &e);
    nx_attn_query qs[NX_ATTN_MAX_Q];
    int chunk = -1, t0 = 0, len = 0;
    for (int64_t item = b; item < e; item++) {
        const int want = (int)(item / per_chunk), rest = (int)(item % per_chunk);
        const int g = rest / pl->blocks_per_group, hb = rest % pl->blocks_per_group;
        while (chunk < want) { /* advance to chunk `want`: rows [t0, t0 + len) */
            t0 += len;
            len = 1;
            while (t0 + len < T && seq[t0 + len] == seq[t0] && len < pl->rows_per_chunk) len++;
            chunk++;
        }
        const int h0 = g * group + hb * pl->heads_per_block, h1 = NX_MIN(g * group + group, h0 + pl->heads_per_block);
        const int s = seq[t0];
        int nq = 0;
        for (int t = t0; t < t0 + len; t++)
            for (int h = h0; h < h1; h++, nq++) {
                qs[nq].q = buf->q + (size_t)t * HD + (size_t)h * D;
                qs[nq].n_keys = f->pos[t] + 1; /* causal: cells 0..pos of this sequence */
                qs[nq].scores = scratch + (size_t)nq * (size_t)f->n_ctx;
                qs[nq].out = buf->att + (size_t)t * HD + (size_t)h * D;
            }
        const uint8_t *kb = kv->k + nx_kv_offset_k(kv, layer, s, 0) + nx_kv_type_bytes(kv->type_k, (size_t)g * D);
        const uint8_t *vb = kv->v + nx_kv_offset_v(kv, layer, s, 0) + nx_kv_type_bytes(kv->type_v, (size_t)g * D);
        nx_attend_avx512(kb, kv->type_k, kv->row_k, vb, kv->type_v, kv->row_v, D, scale, qs, nq);
        for (int t = t0, j = 0; t < t0 + len; t++) /* sigmoid output gate: after the D query values */
            for (int h = h0; h < h1; h++, j++)
                nx_ops_mul_sigmoid_avx512(qs[j].out, buf->q_gate + (size_t)t * 2 * HD + (size_t)h * 2 * D + D, D);
    }
}

bool nx_attn_layer(nx_fwd *f, nx_kv_cache *kv, const nx_layer *l, nx_err *err) {
    const nx_attn_buf *buf = &f->attn;
    const int T = f->rows.T;
    const nx_weight *pw[] = {&l->attn.q, &l->attn.k, &l->attn.v};
    float *const py[] = {buf->q_gate, buf->k, buf->v};
    if (!nx_fwd_matmuls(f, f->in, T, 3, pw, py, err)) return false;
    prep_task pt = {f, kv, l};
    const nx_hparams *hp = f->hp;
    const int64_t D = hp->head_dim, H = hp->n_head, cells = (int64_t)T * (f->pos[T - 1] + 1);
    nx_fwd_run(f, prep_fn, &pt, (int64_t)T * (H + hp->n_head_kv) * D * 8);
    if (f->avx512 && D % 16 == 0) {
        grouped_task gt = {f, kv, l, plan_items(f, f->n_threads)};
        nx_fwd_run(f, attend_grouped_fn, &gt, cells * H * D * 4);
    } else {
        nx_fwd_run(f, attend_one_fn, &pt, cells * H * D * 4);
    }
    return nx_matmul(f->pool, &f->mm, &l->attn.o, buf->att, T, f->out, err);
}
