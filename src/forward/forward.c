/* forward.c - the forward context: batch validation, scratch, the layer loop, outputs, and the
 * per-sequence memory operations.  Per layer: x += mixer(rmsnorm(x) * attn_norm), then
 * x += FFN(rmsnorm(x) * post_norm); the exported hidden is rmsnorm(x) * output_norm, the vector
 * the LM head reads (llama.cpp src/models/qwen35.cpp, llama_model_qwen35::graph). */
#include "forward/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "forward/attn_avx512.h"
#include "forward/ctx_internal.h"
#include "forward/layer.h"
#include "forward/ops.h"
#include "forward/ops_avx512.h"
#include "quant/quant.h"

nx_ctx_params nx_ctx_default_params(void) {
    nx_ctx_params p = {.n_ctx = 4096, .n_seq = 1, .n_snapshots = 0, .kv_type = NX_KV_F16, .kv_type_v = NX_KV_F16};
    return p;
}

bool nx_ctx_create(nx_ctx **out, const nx_model *model, const nx_ctx_params *params, nx_pool *pool, nx_err *err) {
    *out = NULL;
    const nx_hparams *hp = &model->hp;
    if (!pool) return nx_fail(err, "context: a thread pool is required");
    if (params->n_ctx <= 0 || params->n_seq <= 0 || params->n_seq > 4096)
        return nx_fail(err, "context: n_ctx %d must be > 0 and n_seq %d in 1..4096", params->n_ctx, params->n_seq);
    if (!nx_kv_type_valid((int)params->kv_type) || !nx_kv_type_valid((int)params->kv_type_v))
        return nx_fail(err, "context: unknown KV cache type (kv_type %d, kv_type_v %d)", (int)params->kv_type,
                       (int)params->kv_type_v);
    for (int i = 0; i < 2; i++) {
        const nx_kv_type t = i ? params->kv_type_v : params->kv_type;
        if (hp->head_dim % (uint32_t)nx_kv_type_block(t))
            return nx_fail(err, "context: %s %s needs head_dim a multiple of %d (the model's is %u)",
                           i ? "kv_type_v" : "kv_type", nx_kv_type_name(t), nx_kv_type_block(t), hp->head_dim);
    }
    nx_ctx *c = nx_calloc(1, sizeof *c, "context", err);
    if (!c) return false;
    c->model = model;
    c->params = *params;
    nx_fwd *f = &c->run;
    f->hp = hp;
    f->pool = pool;
    f->n_threads = nx_pool_size(pool);
    f->n_ctx = params->n_ctx;
    f->avx512 = nx_cpu_isa() >= NX_ISA_AVX512;
    const size_t conv_n = (size_t)(hp->ssm_conv_kernel - 1) * nx_hp_conv_dim(hp);
    if (!nx_kv_init(&c->kv, model->n_attn_layers, (int)nx_hp_kv_dim(hp), params->n_ctx, params->n_seq,
                    params->kv_type, params->kv_type_v, err) ||
        !nx_rstate_init(&c->rs, model->n_gdn_layers, conv_n, (int)hp->ssm_dt_rank, (int)hp->ssm_d_state, params->n_seq,
                        params->n_snapshots, f->avx512, err))
        goto fail;
    c->seq_T = nx_calloc((size_t)params->n_seq, sizeof *c->seq_T, "context sequence counts", err);
    f->att_scores = c->seq_T ? nx_alloc_aligned((size_t)f->n_threads * NX_ATTN_MAX_Q * (size_t)params->n_ctx * sizeof(float),
                                                "attention scores", err) : NULL;
    if (!f->att_scores) goto fail;
    *out = c;
    return true;
fail:
    nx_ctx_free(c);
    return false;
}

static void free_rows(nx_ctx *c) {
    float **bufs[] = {&c->x, &c->xn, &c->y, &c->hidden, &c->wide[0], &c->wide[1], &c->narrow[0], &c->narrow[1],
                      &c->narrow[2], &c->per_head[0], &c->per_head[1], &c->rope_cs, &c->gather};
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
    nx_free_aligned(c->run.att_scores);
    free(c->seq_T);
    nx_kv_free(&c->kv);
    nx_rstate_free(&c->rs);
    nx_matmul_scratch_free(&c->run.mm);
    nx_mm_groups_scratch_free(&c->run.mmg);
    nx_moe_scratch_free(&c->run.moe);
    free(c);
}

/* Sizes every per-row buffer for T rows (only grows) and points the layers' views at them. */
static bool grow_rows(nx_ctx *c, int T, nx_err *err) {
    if (T <= c->cap_T) return true;
    const nx_hparams *hp = &c->model->hp;
    free_rows(c);
    const size_t E = hp->n_embd, C = nx_hp_conv_dim(hp), VD = nx_hp_value_dim(hp), KV = nx_hp_kv_dim(hp);
    const size_t HD = (size_t)hp->n_head * hp->head_dim, F = hp->n_ff, Hv = hp->ssm_dt_rank;
    const size_t wide = NX_MAX(NX_MAX(C, 2 * HD), F), narrow = NX_MAX(NX_MAX(VD, HD), KV), narrow2 = NX_MAX(VD, KV);
    struct { float **p; size_t n; } bufs[] = {
        {&c->x, E}, {&c->xn, E}, {&c->y, E}, {&c->hidden, E}, {&c->gather, E},
        {&c->wide[0], wide}, {&c->wide[1], wide}, {&c->narrow[0], narrow}, {&c->narrow[1], narrow},
        {&c->narrow[2], narrow2}, {&c->per_head[0], Hv}, {&c->per_head[1], Hv}, {&c->rope_cs, hp->n_rot},
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
    nx_fwd *f = &c->run;
    f->in = c->xn;
    f->out = c->y;
    f->rope_cs = c->rope_cs;
    f->attn = (nx_attn_buf){.q_gate = c->wide[0], .att = c->wide[1], .q = c->narrow[0], .k = c->narrow[1],
                            .v = c->narrow[2]};
    f->gdn = (nx_gdn_buf){.qkv_in = c->wide[0], .qkv = c->wide[1], .z = c->narrow[0], .rec = c->narrow[1],
                          .beta = c->per_head[0], .g = c->per_head[1]};
    f->ffn = (nx_ffn_buf){.gate = c->wide[0], .up = c->wide[1]};
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
        const int32_t want = nx_kv_len(&c->kv, s) + c->seq_T[s];
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
    nx_task_range(nt->T, ith, nth, &b, &e);
    for (int64_t t = b; t < e; t++) nx_rmsnorm(nt->x + t * nt->n, nt->w, nt->out + t * nt->n, nt->n, nt->eps);
}

static void norm_rows(const nx_fwd *f, const float *x, const float *w, float *out, int64_t n) {
    norm_task nt = {x, w, out, f->rows.T, n, f->hp->eps};
    nx_fwd_run(f, norm_rows_fn, &nt, 4 * (int64_t)f->rows.T * n);
}

static void add_rows(const nx_fwd *f, float *x, const float *y) {
    const int64_t n = (int64_t)f->rows.T * f->hp->n_embd;
    for (int64_t i = 0; i < n; i++) x[i] += y[i];
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
    nx_task_range(st->n, ith, nth, &b, &e);
    if (st->avx512) nx_ops_swiglu_avx512(st->g + b, st->u + b, e - b);
    else for (int64_t i = b; i < e; i++) st->g[i] = nx_silu(st->g[i]) * st->u[i];
}

/* SwiGLU FFN: out = down(silu(gate(in)) * up(in)); qwen35moe: the mixture of experts (moe.h). */
static bool ffn(nx_fwd *f, const nx_layer *l, nx_err *err) {
    if (l->is_moe) return nx_moe_ffn(f->pool, &f->moe, f->hp, &l->moe, f->in, f->rows.T, f->out, err);
    const int T = f->rows.T;
    const nx_ffn_buf *b = &f->ffn;
    const nx_weight *w[] = {&l->ffn_gate, &l->ffn_up};
    float *const y[] = {b->gate, b->up};
    if (!nx_fwd_matmuls(f, f->in, T, 2, w, y, err)) return false;
    swiglu_task st = {b->gate, b->up, (int64_t)T * f->hp->n_ff, f->avx512};
    nx_fwd_run(f, swiglu_fn, &st, 8 * st.n);
    return nx_matmul(f->pool, &f->mm, &l->ffn_down, b->gate, T, f->out, err);
}

/* cos/sin of every rotary pair for every row: theta_p = pos * base^(-2p/R), by repeated
 * multiplication with base^(-2/R) in float as ggml's rope does.  For text every IMROPE section
 * (t, h, w) carries the token position, so IMROPE is plain NeoX RoPE here. */
static void rope_tables(nx_ctx *c, const int32_t *pos) {
    const nx_hparams *hp = &c->model->hp;
    const int half = (int)hp->n_rot / 2;
    const float theta_scale = powf(hp->rope_base, -2.0f / (float)hp->n_rot);
    for (int t = 0; t < c->T; t++) {
        float theta = (float)pos[t];
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
    nx_fwd *f = &c->run;
    f->rows = (nx_gdn_rows){T, c->seq, c->row_j, c->seq_T};
    f->pos = b->pos;

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
    rope_tables(c, b->pos);

    for (uint32_t li = 0; li < hp->n_layer; li++) {
        const nx_layer *l = &mdl->layers[li];
        norm_rows(f, c->x, l->attn_norm, c->xn, (int64_t)E);
        if (!(l->recurrent ? nx_gdn_layer(f, &c->rs, l, err) : nx_attn_layer(f, &c->kv, l, err)))
            return nx_fail_prefix(err, "layer %u", li);
        add_rows(f, c->x, c->y);
        norm_rows(f, c->x, l->post_norm, c->xn, (int64_t)E);
        if (!ffn(f, l, err)) return nx_fail_prefix(err, "layer %u ffn", li);
        add_rows(f, c->x, c->y);
    }
    norm_rows(f, c->x, mdl->output_norm, c->hidden, (int64_t)E);

    /* commit the new positions: KV cells were written by the attention layers, the recurrent
     * state's slot 0 now holds the state after each sequence's last row */
    for (int s = 0; s < c->params.n_seq; s++)
        if (c->seq_T[s] > 0) {
            nx_kv_commit(&c->kv, s, c->seq_T[s]);
            nx_rstate_commit(&c->rs, s, c->seq_T[s]);
        }
    f->pos = NULL;

    if (n_out > 0) {
        const float *src = c->hidden;
        if (n_out != T) {
            for (int t = 0; t < T; t++)
                if (c->out_row[t] >= 0) memcpy(c->gather + (size_t)c->out_row[t] * E, c->hidden + (size_t)t * E,
                                                E * sizeof(float));
            src = c->gather;
        }
        if (!nx_matmul(f->pool, &f->mm, &mdl->output, src, n_out, c->logits, err))
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
int nx_ctx_n_threads(const nx_ctx *c) { return c->run.n_threads; }

nx_ctx_memory nx_ctx_memory_usage(const nx_ctx *c) {
    nx_ctx_memory m = {nx_kv_bytes(&c->kv), nx_rstate_bytes(&c->rs),
                       c->scratch_bytes + (size_t)c->cap_logits * c->model->hp.n_vocab * sizeof(float) +
                           (size_t)c->run.n_threads * NX_ATTN_MAX_Q * (size_t)c->params.n_ctx * sizeof(float) +
                           c->run.mm.cap + nx_mm_groups_scratch_bytes(&c->run.mmg) +
                           nx_moe_scratch_bytes(&c->run.moe)};
    return m;
}

/* ---- per-sequence memory -------------------------------------------------------------------- */

static bool check_seq(const nx_ctx *c, int32_t seq, nx_err *err) {
    if (seq < 0 || seq >= c->params.n_seq)
        return nx_fail(err, "sequence id %d out of range (context has %d sequences)", seq, c->params.n_seq);
    return true;
}

int32_t nx_ctx_n_past(const nx_ctx *c, int32_t seq) {
    return seq >= 0 && seq < c->params.n_seq ? nx_kv_len(&c->kv, seq) : 0;
}

bool nx_ctx_seq_clear(nx_ctx *c, int32_t seq, nx_err *err) {
    if (!check_seq(c, seq, err)) return false;
    nx_kv_truncate(&c->kv, seq, 0);
    nx_rstate_clear(&c->rs, seq);
    return true;
}

int32_t nx_ctx_seq_max_rollback(const nx_ctx *c, int32_t seq) {
    if (seq < 0 || seq >= c->params.n_seq) return 0;
    return c->model->n_gdn_layers > 0 ? nx_rstate_max_rollback(&c->rs, seq) : nx_kv_len(&c->kv, seq);
}

bool nx_ctx_seq_rollback(nx_ctx *c, int32_t seq, int32_t r, nx_err *err) {
    if (!check_seq(c, seq, err)) return false;
    const int32_t n_past = nx_kv_len(&c->kv, seq);
    if (r < 0 || r > n_past) return nx_fail(err, "sequence %d: cannot roll back %d tokens (it has %d)", seq, r, n_past);
    if (r == 0) return true;
    if (c->model->n_gdn_layers > 0 && !nx_rstate_rollback(&c->rs, seq, r, err)) return false;
    nx_kv_truncate(&c->kv, seq, n_past - r);
    return true;
}

bool nx_ctx_seq_truncate(nx_ctx *c, int32_t seq, int32_t from_pos, nx_err *err) {
    if (!check_seq(c, seq, err)) return false;
    if (from_pos < 0) return nx_fail(err, "sequence %d: truncate position %d is negative", seq, from_pos);
    const int32_t n_past = nx_kv_len(&c->kv, seq);
    if (from_pos >= n_past) return true;
    if (from_pos == 0) return nx_ctx_seq_clear(c, seq, err);
    return nx_ctx_seq_rollback(c, seq, n_past - from_pos, err);
}

bool nx_ctx_seq_copy(nx_ctx *c, int32_t src, int32_t dst, nx_err *err) {
    if (!check_seq(c, src, err) || !check_seq(c, dst, err)) return false;
    if (src == dst) return true;
    if (!nx_kv_copy(&c->kv, src, dst, err)) return false;
    nx_rstate_copy(&c->rs, src, dst);
    return true;
}
