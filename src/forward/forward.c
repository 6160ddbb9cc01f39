/* forward.c - the forward context: batch validation, scratch, the layer loop, outputs, and the
 * per-sequence memory operations (reference §3). */
#include "forward/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/ctx_internal.h"
#include "forward/ops.h"
#include "forward/attn_avx512.h"
#include "forward/ops_avx512.h"
#include "quant/quant.h"

nx_ctx_params nx_ctx_default_params(void) {
    nx_ctx_params p = {.n_ctx = 4096, .n_seq = 1, .n_snapshots = 0, .kv_type = NX_KV_F16};
    return p;
}

bool nx_ctx_create(nx_ctx **out, const nx_model *model, const nx_ctx_params *params, nx_pool *pool, nx_err *err) {
    *out = NULL;
    const nx_hparams *hp = &model->hp;
    if (!pool) return nx_fail(err, "context: a thread pool is required");
    if (params->n_ctx <= 0 || params->n_seq <= 0 || params->n_seq > 4096)
        return nx_fail(err, "context: n_ctx %d must be > 0 and n_seq %d in 1..4096", params->n_ctx, params->n_seq);
    if (params->kv_type != NX_KV_F16 && params->kv_type != NX_KV_F32)
        return nx_fail(err, "context: unknown KV cache type %d", (int)params->kv_type);
    nx_ctx *c = nx_calloc(1, sizeof *c, "context", err);
    if (!c) return false;
    c->model = model;
    c->pool = pool;
    c->params = *params;
    c->n_threads = nx_pool_size(pool);
    c->avx512 = nx_cpu_isa() >= NX_ISA_AVX512;
    const size_t conv_n = (size_t)(hp->ssm_conv_kernel - 1) * nx_hp_conv_dim(hp);
    if (!nx_kv_init(&c->kv, model->n_attn_layers, (int)nx_hp_kv_dim(hp), params->n_ctx, params->n_seq,
                    params->kv_type, err) ||
        !nx_rstate_init(&c->rs, model->n_gdn_layers, conv_n, (int)hp->ssm_dt_rank, (int)hp->ssm_d_state, params->n_seq,
                        params->n_snapshots, c->avx512, err))
        goto fail;
    c->seq_T = nx_calloc((size_t)params->n_seq, sizeof *c->seq_T, "context sequence counts", err);
    c->att_scratch = c->seq_T ? nx_alloc_aligned((size_t)c->n_threads * NX_ATTN_MAX_Q * (size_t)params->n_ctx * sizeof(float),
                                                 "attention scores", err) : NULL;
    if (!c->att_scratch) goto fail;
    *out = c;
    return true;
fail:
    nx_ctx_free(c);
    return false;
}

static void free_rows(nx_ctx *c) {
    float **bufs[] = {&c->x, &c->a, &c->m, &c->hidden, &c->big0, &c->big1, &c->mid0, &c->mid1, &c->mid2,
                      &c->small0, &c->small1, &c->rope_cs, &c->gather};
    for (size_t i = 0; i < NX_ARRAY_LEN(bufs); i++) {
        nx_free_aligned(*bufs[i]);
        *bufs[i] = NULL;
    }
    free(c->seq);
    free(c->row_j);
    free(c->out_row);
    c->seq = c->row_j = c->out_row = NULL;
    c->cap_T = 0;
    c->scratch_bytes = 0;
}

void nx_ctx_free(nx_ctx *c) {
    if (!c) return;
    free_rows(c);
    nx_free_aligned(c->logits);
    nx_free_aligned(c->att_scratch);
    free(c->seq_T);
    nx_kv_free(&c->kv);
    nx_rstate_free(&c->rs);
    nx_matmul_scratch_free(&c->mm);
    free(c);
}

/* Sizes every per-row buffer for T rows (only grows). */
static bool grow_rows(nx_ctx *c, int T, nx_err *err) {
    if (T <= c->cap_T) return true;
    const nx_hparams *hp = &c->model->hp;
    free_rows(c);
    const size_t E = hp->n_embd, C = nx_hp_conv_dim(hp), VD = nx_hp_value_dim(hp), KV = nx_hp_kv_dim(hp);
    const size_t HD = (size_t)hp->n_head * hp->head_dim, F = hp->n_ff, Hv = hp->ssm_dt_rank;
    const size_t big = NX_MAX(NX_MAX(C, 2 * HD), F), mid = NX_MAX(NX_MAX(VD, HD), KV), mid2 = NX_MAX(VD, KV);
    struct { float **p; size_t n; } bufs[] = {
        {&c->x, E}, {&c->a, E}, {&c->m, E}, {&c->hidden, E}, {&c->gather, E},
        {&c->big0, big}, {&c->big1, big}, {&c->mid0, mid}, {&c->mid1, mid}, {&c->mid2, mid2},
        {&c->small0, Hv}, {&c->small1, Hv}, {&c->rope_cs, hp->n_rot},
    };
    size_t total = 0;
    for (size_t i = 0; i < NX_ARRAY_LEN(bufs); i++) {
        size_t bytes = (size_t)T * bufs[i].n * sizeof(float);
        *bufs[i].p = nx_alloc_aligned(bytes, "activation scratch", err);
        if (!*bufs[i].p) goto fail;
        total += bytes;
    }
    c->seq = nx_malloc((size_t)T * sizeof *c->seq, "batch rows", err);
    c->row_j = c->seq ? nx_malloc((size_t)T * sizeof *c->row_j, "batch rows", err) : NULL;
    c->out_row = c->row_j ? nx_malloc((size_t)T * sizeof *c->out_row, "batch rows", err) : NULL;
    if (!c->out_row) goto fail;
    c->cap_T = T;
    c->scratch_bytes = total;
    return true;
fail:
    free_rows(c);
    return false;
}

static bool grow_logits(nx_ctx *c, int n, nx_err *err) {
    if (n <= c->cap_logits) return true;
    nx_free_aligned(c->logits);
    c->cap_logits = 0;
    c->logits = nx_alloc_aligned((size_t)n * c->model->hp.n_vocab * sizeof(float), "logits", err);
    if (!c->logits) return false;
    c->cap_logits = n;
    return true;
}

/* Checks the whole batch before anything is modified. */
static bool validate_batch(nx_ctx *c, const nx_batch *b, nx_err *err) {
    const nx_hparams *hp = &c->model->hp;
    if (b->n_tokens <= 0) return nx_fail(err, "batch: n_tokens = %d (must be > 0)", b->n_tokens);
    if (!b->token || !b->pos) return nx_fail(err, "batch: token and pos arrays are required");
    memset(c->seq_T, 0, (size_t)c->params.n_seq * sizeof *c->seq_T);
    for (int t = 0; t < b->n_tokens; t++) {
        const int32_t s = b->seq_id ? b->seq_id[t] : 0;
        if (s < 0 || s >= c->params.n_seq)
            return nx_fail(err, "batch row %d: sequence id %d out of range (context has %d sequences)", t, s,
                           c->params.n_seq);
        if (b->token[t] < 0 || (uint32_t)b->token[t] >= hp->n_vocab)
            return nx_fail(err, "batch row %d: token id %d out of range (vocabulary has %u tokens)", t, b->token[t],
                           hp->n_vocab);
        const int32_t want = c->kv.len[s] + c->seq_T[s];
        if (b->pos[t] != want)
            return nx_fail(err, "batch row %d: sequence %d position %d, expected %d (positions of a sequence must "
                           "continue it without gaps)", t, s, b->pos[t], want);
        if (b->pos[t] >= c->params.n_ctx)
            return nx_fail(err, "batch row %d: position %d exceeds the context size n_ctx = %d", t, b->pos[t],
                           c->params.n_ctx);
        c->seq[t] = s;
        c->row_j[t] = c->seq_T[s]++;
    }
    return true;
}

/* ---- threaded row helpers ----------------------------------------------------------------- */

static void split(int64_t n, int ith, int nth, int64_t *b, int64_t *e) {
    int64_t per = (n + nth - 1) / nth;
    *b = NX_MIN(n, per * ith);
    *e = NX_MIN(n, *b + per);
}

/* Below this many operations a task runs inline: a pool wake-up costs a few microseconds
 * (much more when the cores are shared), about what 30k multiply-adds take. */
#define NX_INLINE_WORK 30000

void nx_ctx_run(nx_ctx *c, nx_task_fn fn, void *arg, int64_t work) {
    if (work < NX_INLINE_WORK || c->n_threads == 1) fn(arg, 0, 1);
    else nx_pool_run(c->pool, fn, arg);
}

typedef struct norm_task {
    const float *x;
    const float *w;
    float *out;
    int64_t T, n;
    float eps;
} norm_task;

static void norm_rows_fn(void *p, int ith, int nth) {
    norm_task *nt = p;
    int64_t b, e;
    split(nt->T, ith, nth, &b, &e);
    for (int64_t t = b; t < e; t++) nx_rmsnorm(nt->x + t * nt->n, nt->w, nt->out + t * nt->n, nt->n, nt->eps);
}

static void norm_rows(nx_ctx *c, const float *x, const float *w, float *out, int64_t n) {
    norm_task nt = {x, w, out, c->T, n, c->model->hp.eps};
    nx_ctx_run(c, norm_rows_fn, &nt, 4 * (int64_t)c->T * n);
}

static void add_rows(nx_ctx *c, float *x, const float *m) {
    const int64_t n = (int64_t)c->T * c->model->hp.n_embd;
    for (int64_t i = 0; i < n; i++) x[i] += m[i];
}

typedef struct swiglu_task {
    float *g;
    const float *u;
    int64_t n;
    bool avx512;
} swiglu_task;

static void swiglu_fn(void *p, int ith, int nth) {
    swiglu_task *st = p;
    int64_t b, e;
    split(st->n, ith, nth, &b, &e);
    if (st->avx512) nx_ops_swiglu_avx512(st->g + b, st->u + b, e - b);
    else for (int64_t i = b; i < e; i++) st->g[i] = nx_silu(st->g[i]) * st->u[i];
}

static bool ffn(nx_ctx *c, const nx_layer *l, nx_err *err) {
    const int64_t F = c->model->hp.n_ff;
    if (!nx_matmul(c->pool, &c->mm, &l->ffn_gate, c->a, c->T, c->big0, err) ||
        !nx_matmul(c->pool, &c->mm, &l->ffn_up, c->a, c->T, c->big1, err))
        return false;
    swiglu_task st = {c->big0, c->big1, (int64_t)c->T * F, c->avx512};
    nx_ctx_run(c, swiglu_fn, &st, 8 * st.n);
    return nx_matmul(c->pool, &c->mm, &l->ffn_down, c->big0, c->T, c->m, err);
}

/* cos/sin of every rotary pair for every row (reference §5.3, §10: theta = pos * base^(-2p/R)
 * by repeated multiplication in float; text positions make IMROPE plain NeoX RoPE). */
static void rope_tables(nx_ctx *c) {
    const nx_hparams *hp = &c->model->hp;
    const int half = (int)hp->n_rot / 2;
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    for (int t = 0; t < c->T; t++) {
        float theta = (float)c->pos[t];
        float *cs = c->rope_cs + (size_t)t * hp->n_rot;
        for (int p = 0; p < half; p++) {
            cs[2 * p] = cosf(theta);
            cs[2 * p + 1] = sinf(theta);
            theta *= theta_scale;
        }
    }
}

bool nx_forward(nx_ctx *c, const nx_batch *b, nx_err *err) { return nx_forward_embd(c, b, NULL, err); }

bool nx_forward_embd(nx_ctx *c, const nx_batch *b, const float *embd, nx_err *err) {
    const nx_model *mdl = c->model;
    const nx_hparams *hp = &mdl->hp;
    c->T = 0;
    c->n_out = 0;
    if (!grow_rows(c, b->n_tokens > 0 ? b->n_tokens : 1, err)) return false;
    if (!validate_batch(c, b, err)) return false;
    const int T = b->n_tokens;
    const size_t E = hp->n_embd;
    c->T = T;
    c->pos = b->pos;

    int n_out = 0;
    for (int t = 0; t < T; t++) {
        bool want = b->logits ? b->logits[t] != 0 : t == T - 1;
        c->out_row[t] = want ? n_out++ : -1;
    }
    if (!grow_logits(c, n_out, err)) return false;

    if (embd)
        memcpy(c->x, embd, (size_t)T * E * sizeof(float));
    else
        for (int t = 0; t < T; t++)
            if (!nx_embed_row(&mdl->tok_embd, b->token[t], c->x + (size_t)t * E, err)) return false;
    rope_tables(c);

    for (uint32_t li = 0; li < hp->n_layer; li++) {
        const nx_layer *l = &mdl->layers[li];
        norm_rows(c, c->x, l->attn_norm, c->a, (int64_t)E);
        if (!(l->recurrent ? nx_gdn_layer(c, l, err) : nx_attn_layer(c, l, err)))
            return nx_fail_prefix(err, "layer %u", li);
        add_rows(c, c->x, c->m);
        norm_rows(c, c->x, l->post_norm, c->a, (int64_t)E);
        if (!ffn(c, l, err)) return nx_fail_prefix(err, "layer %u ffn", li);
        add_rows(c, c->x, c->m);
    }
    norm_rows(c, c->x, mdl->output_norm, c->hidden, (int64_t)E);

    /* commit the new positions: KV cells were written by the attention layers, the recurrent
     * state's slot 0 now holds the state after each sequence's last row */
    for (int s = 0; s < c->params.n_seq; s++)
        if (c->seq_T[s] > 0) {
            c->kv.len[s] += c->seq_T[s];
            nx_rstate_commit(&c->rs, s, c->seq_T[s]);
        }
    c->pos = NULL;

    if (n_out > 0) {
        const float *src = c->hidden;
        if (n_out != T) {
            for (int t = 0; t < T; t++)
                if (c->out_row[t] >= 0) memcpy(c->gather + (size_t)c->out_row[t] * E, c->hidden + (size_t)t * E,
                                                E * sizeof(float));
            src = c->gather;
        }
        if (!nx_matmul(c->pool, &c->mm, &mdl->output, src, n_out, c->logits, err))
            return nx_fail_prefix(err, "lm head");
    }
    c->n_out = n_out;
    return true;
}

const float *nx_ctx_logits(const nx_ctx *c, int32_t row) {
    if (row < 0 || row >= c->T || c->out_row[row] < 0) return NULL;
    return c->logits + (size_t)c->out_row[row] * c->model->hp.n_vocab;
}

const float *nx_ctx_hidden(const nx_ctx *c) { return c->hidden; }
int32_t nx_ctx_n_rows(const nx_ctx *c) { return c->T; }
const nx_model *nx_ctx_model(const nx_ctx *c) { return c->model; }
const nx_ctx_params *nx_ctx_params_of(const nx_ctx *c) { return &c->params; }
int nx_ctx_n_threads(const nx_ctx *c) { return c->n_threads; }

nx_ctx_memory nx_ctx_memory_usage(const nx_ctx *c) {
    nx_ctx_memory m = {nx_kv_bytes(&c->kv), nx_rstate_bytes(&c->rs),
                       c->scratch_bytes + (size_t)c->cap_logits * c->model->hp.n_vocab * sizeof(float) +
                           (size_t)c->n_threads * NX_ATTN_MAX_Q * (size_t)c->params.n_ctx * sizeof(float) + c->mm.cap};
    return m;
}

/* ---- per-sequence memory -------------------------------------------------------------------- */

static bool check_seq(const nx_ctx *c, int32_t seq, nx_err *err) {
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    return true;
}

int32_t nx_ctx_n_past(const nx_ctx *c, int32_t seq) {
    return seq >= 0 && seq < c->params.n_seq ? c->kv.len[seq] : 0;
}

bool nx_ctx_seq_clear(nx_ctx *c, int32_t seq, nx_err *err) {
    if (!check_seq(c, seq, err)) return false;
    c->kv.len[seq] = 0;
    nx_rstate_clear(&c->rs, seq);
    return true;
}

int32_t nx_ctx_seq_max_rollback(const nx_ctx *c, int32_t seq) {
    if (seq < 0 || seq >= c->params.n_seq) return 0;
    return c->model->n_gdn_layers > 0 ? nx_rstate_max_rollback(&c->rs, seq) : c->kv.len[seq];
}

bool nx_ctx_seq_rollback(nx_ctx *c, int32_t seq, int32_t r, nx_err *err) {
    if (!check_seq(c, seq, err)) return false;
    if (r < 0 || r > c->kv.len[seq])
        return nx_fail(err, "sequence %d: cannot roll back %d tokens (it has %d)", seq, r, c->kv.len[seq]);
    if (r == 0) return true;
    if (c->model->n_gdn_layers > 0 && !nx_rstate_rollback(&c->rs, seq, r, err)) return false;
    c->kv.len[seq] -= r;
    return true;
}

bool nx_ctx_seq_truncate(nx_ctx *c, int32_t seq, int32_t from_pos, nx_err *err) {
    if (!check_seq(c, seq, err)) return false;
    if (from_pos < 0) return nx_fail(err, "sequence %d: truncate position %d is negative", seq, from_pos);
    if (from_pos >= c->kv.len[seq]) return true;
    if (from_pos == 0) return nx_ctx_seq_clear(c, seq, err);
    return nx_ctx_seq_rollback(c, seq, c->kv.len[seq] - from_pos, err);
}

bool nx_ctx_seq_copy(nx_ctx *c, int32_t src, int32_t dst, nx_err *err) {
    if (!check_seq(c, src, err) || !check_seq(c, dst, err)) return false;
    if (src == dst) return true;
    if (!nx_kv_copy(&c->kv, src, dst, err)) return false;
    nx_rstate_copy(&c->rs, src, dst);
    return true;
}
