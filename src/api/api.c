/* api.c - the public API (include/nextn.h) as thin wrappers over the internal modules.
 *
 * Ownership: a nextn_model owns the nx_model (and through it the GGUF mapping) and the
 * tokenizer built from the same file; a nextn_context owns its nx_ctx and its thread pool.
 * nextn_tokenizer is the internal nx_tokenizer behind an opaque name (only ever cast back).
 * Internal errors (nx_err) are copied into the caller's nextn_error. */
#include "nextn.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "tokenizer/chat.h"
#include "base/common.h"
#include "forward/forward.h"
#include "model/model.h"
#include "sample/sample.h"
#include "base/threads.h"
#include "tokenizer/tokenizer.h"
#include "api/api_internal.h"

_Static_assert(NEXTN_ERROR_MAX == NX_ERR_MAX, "public and internal error buffers have the same size");

struct nextn_model {
    nx_model *model;
    nx_tokenizer *tok;          /* NULL when the file has no tokenizer */
    uint64_t file_bytes;
    uint64_t fingerprint;       /* nx_model_fingerprint, for state files */
};

struct nextn_context {
    nx_ctx *ctx;
    nx_pool *pool;
    const nextn_model *model;
    nextn_context_params params;
};

struct nextn_sampler {
    nx_sampler *s;
    nx_dist dist;               /* result of nextn_sampler_dist before it is copied out */
};

struct nextn_stream {
    nx_detok_stream st;
    nx_buf buf;
};

static bool fail(nextn_error *err, const char *msg) {
    if (err) snprintf(err->msg, sizeof err->msg, "%s", msg);
    return false;
}

static nx_tokenizer *tok_in(const nextn_tokenizer *t) { return (nx_tokenizer *)t; }

const char *nextn_version(void) { return "0.1.0"; }

/* ---- model ------------------------------------------------------------------------------- */

nextn_model_params nextn_model_default_params(void) {
    nextn_model_params p = {.load_mtp = false, .no_normalize = false, .progress = NULL, .progress_user = NULL,
                            .no_huge_reread = false};
    return p;
}

typedef struct progress_fwd {
    nextn_progress_fn fn;
    void *user;
} progress_fwd;

static void forward_progress(void *user, const nx_progress *p) {
    const progress_fwd *f = user;
    nextn_progress q = {p->item, p->n_items, p->bytes, p->total_bytes, p->name};
    f->fn(f->user, &q);
}

bool nextn_model_load(nextn_model **out, const char *path, const nextn_model_params *params, nextn_error *err) {
    *out = NULL;
    if (!path) return fail(err, "model path is NULL");
    nextn_model_params p = params ? *params : nextn_model_default_params();
    nx_err ie;
    nextn_model *m = nx_calloc(1, sizeof *m, "model handle", &ie);
    if (!m) return nx_api_pass(err, &ie);
    if (!nx_model_open(&m->model, path, p.load_mtp, &ie)) {
        free(m);
        return nx_api_pass(err, &ie);
    }
    struct stat st;
    m->file_bytes = stat(path, &st) == 0 ? (uint64_t)st.st_size : 0;
    if (p.progress) {
        progress_fwd f = {p.progress, p.progress_user};
        nx_gguf_prefetch(m->model->gguf, forward_progress, &f);
    }
    nx_model_prefault(m->model, !p.no_huge_reread);
    if (nx_gguf_find_kv(m->model->gguf, "tokenizer.ggml.model")) {
        if (!nx_tokenizer_from_gguf(&m->tok, m->model->gguf, &ie)) {
            nx_model_free(m->model);
            free(m);
            return nx_api_pass(err, &ie);
        }
        if (nx_tokenizer_n_vocab(m->tok) > m->model->hp.n_vocab) {
            snprintf(ie.msg, sizeof ie.msg, "%s: the tokenizer has %u tokens but the model's head has %u rows", path,
                     nx_tokenizer_n_vocab(m->tok), m->model->hp.n_vocab);
            nx_tokenizer_free(m->tok);
            nx_model_free(m->model);
            free(m);
            return nx_api_pass(err, &ie);
        }
        if (p.no_normalize) nx_tokenizer_set_nfc(m->tok, false);
    }
    m->fingerprint = nx_model_fingerprint(m->model);
    *out = m;
    return true;
}

void nextn_model_free(nextn_model *m) {
    if (!m) return;
    nx_tokenizer_free(m->tok);
    nx_model_free(m->model);
    free(m);
}

void nextn_model_get_info(const nextn_model *m, nextn_model_info *info) {
    const nx_hparams *hp = &m->model->hp;
    memset(info, 0, sizeof *info);
    info->n_vocab = (int32_t)hp->n_vocab;
    info->n_embd = (int32_t)hp->n_embd;
    info->n_layer = (int32_t)hp->n_layer;
    info->n_ctx_train = (int32_t)hp->n_ctx_train;
    info->has_mtp = hp->n_mtp > 0;
    info->has_tokenizer = m->tok != NULL;
    info->weight_bytes = m->model->weight_bytes;
    info->active_bytes = nx_model_active_bytes(m->model);
    info->n_expert = hp->moe ? (int32_t)hp->n_expert : 0;
    info->n_expert_used = hp->moe ? (int32_t)hp->n_expert_used : 0;
    info->file_bytes = m->file_bytes;
    info->huge_mapped_bytes = m->model->huge_bytes;
    info->huge_reread = m->model->huge_reread;
}

nextn_tokenizer *nextn_model_tokenizer(const nextn_model *m) { return (nextn_tokenizer *)m->tok; }

const nx_model *nx_api_model(const nextn_model *m) { return m->model; }
const nx_tokenizer *nx_api_tokenizer(const nextn_model *m) { return m->tok; }
uint64_t nx_api_model_fingerprint(const nextn_model *m) { return m->fingerprint; }
nx_ctx *nx_api_ctx(const nextn_context *c) { return c->ctx; }
const nextn_model *nx_api_ctx_model(const nextn_context *c) { return c->model; }

/* ---- context ----------------------------------------------------------------------------- */

bool nx_api_kv_types_ok(const nextn_model *m, const nextn_context_params *p, nextn_error *err) {
    for (int i = 0; i < 2; i++) {
        const int t = (int)(i ? p->kv_type_v : p->kv_type);
        const char *field = i ? "kv_type_v" : "kv_type";
        char msg[200];
        if (!nx_kv_type_valid(t)) {
            snprintf(msg, sizeof msg, "context: %s %d is not one of NEXTN_KV_F16, NEXTN_KV_F32, NEXTN_KV_Q8_0, "
                     "NEXTN_KV_Q4_0", field, t);
            return fail(err, msg);
        }
        const uint32_t D = m->model->hp.head_dim, blk = (uint32_t)nx_kv_type_block((nx_kv_type)t);
        if (D % blk) {
            snprintf(msg, sizeof msg, "context: %s %s needs the model's head_dim (%u) to be a multiple of %u", field,
                     nx_kv_type_name((nx_kv_type)t), D, blk);
            return fail(err, msg);
        }
    }
    return true;
}

_Static_assert(NEXTN_KV_F16 == (int)NX_KV_F16 && NEXTN_KV_F32 == (int)NX_KV_F32 && NEXTN_KV_Q8_0 == (int)NX_KV_Q8_0 &&
                   NEXTN_KV_Q4_0 == (int)NX_KV_Q4_0,
               "nextn_kv_type is nx_kv_type");
const char *const *nextn_kv_type_names(void) { return nx_kv_type_names(); }

nextn_context_params nextn_context_default_params(void) {
    nextn_context_params p = {.n_ctx = 4096, .n_seq = 1, .n_threads = 0, .kv_type = NEXTN_KV_F16, .n_snapshots = 0,
                             .kv_type_v = NEXTN_KV_F16};
    return p;
}

bool nextn_context_create(nextn_context **out, const nextn_model *model, const nextn_context_params *params,
                          nextn_error *err) {
    *out = NULL;
    if (!model) return fail(err, "context: model is NULL");
    nextn_context_params p = params ? *params : nextn_context_default_params();
    if (!nx_api_kv_types_ok(model, &p, err)) return false;
    nx_err ie;
    nextn_context *c = nx_calloc(1, sizeof *c, "context handle", &ie);
    if (!c) return nx_api_pass(err, &ie);
    c->model = model;
    c->params = p;
    if (!(c->pool = nx_pool_create(p.n_threads, &ie))) {
        free(c);
        return nx_api_pass(err, &ie);
    }
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = p.n_ctx;
    cp.n_seq = p.n_seq;
    cp.n_snapshots = p.n_snapshots;
    cp.kv_type = (nx_kv_type)p.kv_type;
    cp.kv_type_v = (nx_kv_type)p.kv_type_v;
    if (!nx_ctx_create(&c->ctx, model->model, &cp, c->pool, &ie)) {
        nx_pool_free(c->pool);
        free(c);
        return nx_api_pass(err, &ie);
    }
    *out = c;
    return true;
}

void nextn_context_free(nextn_context *c) {
    if (!c) return;
    nx_ctx_free(c->ctx);
    nx_pool_free(c->pool);
    free(c);
}

void nextn_context_memory(const nextn_context *c, nextn_memory *mem) {
    nx_ctx_memory m = nx_ctx_memory_usage(c->ctx);
    mem->weight_bytes = c->model->model->weight_bytes;
    mem->kv_bytes = m.kv_bytes;
    mem->state_bytes = m.state_bytes;
    mem->scratch_bytes = m.scratch_bytes;
}

int32_t nextn_n_ctx(const nextn_context *c) { return c->params.n_ctx; }
int32_t nextn_n_seq(const nextn_context *c) { return c->params.n_seq; }
int32_t nextn_n_threads(const nextn_context *c) { return nx_pool_size(c->pool); }

bool nextn_decode(nextn_context *c, const nextn_batch *batch, nextn_error *err) {
    if (!batch || batch->n_tokens <= 0 || !batch->token || !batch->pos)
        return fail(err, "decode: the batch needs n_tokens > 0 and token and pos arrays");
    nx_batch b = {.n_tokens = batch->n_tokens, .token = batch->token, .pos = batch->pos,
                  .seq_id = batch->seq_id, .logits = batch->logits};
    nx_err ie;
    if (!nx_forward(c->ctx, &b, &ie)) return nx_api_pass(err, &ie);
    return true;
}

const float *nextn_get_logits(const nextn_context *c, int32_t row) {
    if (row < 0 || row >= nx_ctx_n_rows(c->ctx)) return NULL;
    return nx_ctx_logits(c->ctx, row);
}

const float *nextn_get_hidden(const nextn_context *c, int32_t row) {
    if (row < 0 || row >= nx_ctx_n_rows(c->ctx)) return NULL;
    return nx_ctx_hidden(c->ctx) + (size_t)row * c->model->model->hp.n_embd;
}

int32_t nextn_n_past(const nextn_context *c, int32_t seq) {
    if (seq < 0 || seq >= c->params.n_seq) return -1;
    return nx_ctx_n_past(c->ctx, seq);
}

static bool check_seq(const nextn_context *c, int32_t seq, const char *what, nextn_error *err) {
    if (seq >= 0 && seq < c->params.n_seq) return true;
    if (err) snprintf(err->msg, sizeof err->msg, "%s: sequence %d is outside [0, %d) (n_seq)", what, seq, c->params.n_seq);
    return false;
}

bool nextn_seq_clear(nextn_context *c, int32_t seq, nextn_error *err) {
    nx_err ie;
    if (!check_seq(c, seq, "seq_clear", err)) return false;
    return nx_ctx_seq_clear(c->ctx, seq, &ie) || nx_api_pass(err, &ie);
}

bool nextn_seq_truncate(nextn_context *c, int32_t seq, int32_t from_pos, nextn_error *err) {
    nx_err ie;
    if (!check_seq(c, seq, "seq_truncate", err)) return false;
    return nx_ctx_seq_truncate(c->ctx, seq, from_pos, &ie) || nx_api_pass(err, &ie);
}

bool nextn_seq_copy(nextn_context *c, int32_t src, int32_t dst, nextn_error *err) {
    nx_err ie;
    if (!check_seq(c, src, "seq_copy source", err) || !check_seq(c, dst, "seq_copy destination", err)) return false;
    return nx_ctx_seq_copy(c->ctx, src, dst, &ie) || nx_api_pass(err, &ie);
}

/* ---- tokenizer --------------------------------------------------------------------------- */

int32_t nextn_token_bos(const nextn_tokenizer *t) { return nx_tokenizer_bos(tok_in(t)); }
int32_t nextn_token_eos(const nextn_tokenizer *t) { return nx_tokenizer_eos(tok_in(t)); }
bool nextn_token_is_eog(const nextn_tokenizer *t, int32_t id) { return nx_tokenizer_is_eog(tok_in(t), id); }
bool nextn_tokenizer_add_bos(const nextn_tokenizer *t) { return nx_tokenizer_add_bos(tok_in(t)); }
bool nextn_tokenizer_normalizes(const nextn_tokenizer *t) { return nx_tokenizer_nfc(tok_in(t)); }

bool nextn_tokenize(nextn_tokenizer *t, const char *text, size_t len, bool add_bos, bool parse_special,
                    int32_t *ids, int32_t cap, int32_t *n_out, nextn_error *err) {
    *n_out = 0;
    if (!t) return fail(err, "tokenize: no tokenizer");
    if (!text && len) return fail(err, "tokenize: text is NULL");
    nx_tokens v = {0};
    nx_err ie;
    if (!nx_tokenize(tok_in(t), text ? text : "", len, add_bos, parse_special, &v, &ie)) {
        nx_tokens_free(&v);
        return nx_api_pass(err, &ie);
    }
    if (v.n > (size_t)INT32_MAX) {
        nx_tokens_free(&v);
        return fail(err, "tokenize: more than 2^31 tokens");
    }
    *n_out = (int32_t)v.n;
    if (ids) {
        if ((size_t)cap < v.n) {
            if (err) snprintf(err->msg, sizeof err->msg, "tokenize: %zu tokens do not fit in a buffer of %d", v.n, cap);
            nx_tokens_free(&v);
            return false;
        }
        if (v.n) memcpy(ids, v.ids, v.n * sizeof *ids); /* v.ids is NULL for no tokens */
    }
    nx_tokens_free(&v);
    return true;
}

bool nextn_detokenize(const nextn_tokenizer *t, const int32_t *ids, int32_t n, bool special, char *buf, size_t cap,
                      size_t *len_out, nextn_error *err) {
    *len_out = 0;
    if (!t) return fail(err, "detokenize: no tokenizer");
    if (n < 0 || (n > 0 && !ids)) return fail(err, "detokenize: bad id array");
    nx_buf b = {0};
    nx_err ie;
    if (!nx_detokenize(tok_in(t), ids, (size_t)n, special, &b, &ie)) {
        nx_buf_free(&b);
        return nx_api_pass(err, &ie);
    }
    *len_out = b.len;
    bool ok = true;
    if (buf) {
        if (cap < b.len) {
            if (err) snprintf(err->msg, sizeof err->msg, "detokenize: %zu bytes do not fit in a buffer of %zu", b.len, cap);
            ok = false;
        } else if (b.len) {
            memcpy(buf, b.data, b.len);
        }
    }
    nx_buf_free(&b);
    return ok;
}

bool nextn_stream_create(nextn_stream **out, const nextn_tokenizer *t, bool special, nextn_error *err) {
    *out = NULL;
    if (!t) return fail(err, "stream: no tokenizer");
    nx_err ie;
    nextn_stream *s = nx_calloc(1, sizeof *s, "detokenizer stream", &ie);
    if (!s) return nx_api_pass(err, &ie);
    nx_detok_stream_init(&s->st, tok_in(t), special);
    *out = s;
    return true;
}

bool nextn_stream_push(nextn_stream *s, int32_t id, const char **text, size_t *len_out, nextn_error *err) {
    nx_err ie;
    s->buf.len = 0;
    if (s->buf.data) s->buf.data[0] = 0;
    if (!nx_detok_stream_push(&s->st, id, &s->buf, &ie)) return nx_api_pass(err, &ie);
    *text = s->buf.data ? s->buf.data : "";
    *len_out = s->buf.len;
    return true;
}

bool nextn_stream_flush(nextn_stream *s, const char **text, size_t *len_out, nextn_error *err) {
    nx_err ie;
    s->buf.len = 0;
    if (s->buf.data) s->buf.data[0] = 0;
    if (!nx_detok_stream_flush(&s->st, &s->buf, &ie)) return nx_api_pass(err, &ie);
    *text = s->buf.data ? s->buf.data : "";
    *len_out = s->buf.len;
    return true;
}

void nextn_stream_free(nextn_stream *s) {
    if (!s) return;
    nx_buf_free(&s->buf);
    free(s);
}

/* ---- chat ------------------------------------------------------------------------------------ */

bool nextn_chat_format_user(const nextn_model *model, const char *chat_format, const char *user_text, char *buf,
                            size_t cap, size_t *len_out, nextn_error *err) {
    *len_out = 0;
    if (!user_text) return fail(err, "chat: user text is NULL");
    nx_err ie;
    nx_chat_format fmt;
    if (!nx_chat_select(model->model->gguf, chat_format, &fmt, &ie)) return nx_api_pass(err, &ie);
    nx_chat_msg msg = {.role = "user", .content = user_text};
    nx_chat_opts opts = {.add_generation_prompt = true, .enable_thinking = true};
    nx_buf out = {0};
    if (!nx_chat_render(fmt, &msg, 1, &opts, &out, &ie)) {
        nx_buf_free(&out);
        return nx_api_pass(err, &ie);
    }
    *len_out = out.len;
    bool ok = true;
    if (buf) {
        if (cap < out.len) {
            if (err) snprintf(err->msg, sizeof err->msg, "chat: %zu bytes do not fit in a buffer of %zu", out.len, cap);
            ok = false;
        } else if (out.len) {
            memcpy(buf, out.data, out.len);
        }
    }
    nx_buf_free(&out);
    return ok;
}

/* ---- sampling ---------------------------------------------------------------------------- */

/* The public logit-bias entries are handed to the sampler as its own type. */
_Static_assert(sizeof(nextn_logit_bias) == sizeof(nx_logit_bias) &&
                   offsetof(nextn_logit_bias, token) == offsetof(nx_logit_bias, token) &&
                   offsetof(nextn_logit_bias, bias) == offsetof(nx_logit_bias, bias),
               "nextn_logit_bias and nx_logit_bias must have the same layout");

nextn_sampler_params nextn_sampler_default_params(void) {
    nx_sampler_params d = nx_sampler_default_params();
    nextn_sampler_params p = {
        .temp = d.temp, .top_k = d.top_k, .top_p = d.top_p, .min_p = d.min_p,
        .penalty_last_n = d.penalty_last_n, .penalty_repeat = d.penalty_repeat,
        .penalty_freq = d.penalty_freq, .penalty_present = d.penalty_present, .seed = d.seed,
        .typ_p = d.typ_p, .top_n_sigma = d.top_n_sigma, .xtc_probability = d.xtc_probability,
        .xtc_threshold = d.xtc_threshold, .dynatemp_range = d.dynatemp_range, .dynatemp_exponent = d.dynatemp_exponent,
        .dry_multiplier = d.dry_multiplier, .dry_base = d.dry_base, .dry_allowed_length = d.dry_allowed_length,
        .dry_penalty_last_n = d.dry_penalty_last_n,
        .logit_bias = NULL, .n_logit_bias = 0,
    };
    return p;
}

nx_sampler_params nx_api_sampler_params(const nextn_sampler_params *p) {
    nx_sampler_params ip = nx_sampler_default_params();
    ip.temp = p->temp;
    ip.top_k = p->top_k;
    ip.top_p = p->top_p;
    ip.min_p = p->min_p;
    ip.penalty_last_n = p->penalty_last_n;
    ip.penalty_repeat = p->penalty_repeat;
    ip.penalty_freq = p->penalty_freq;
    ip.penalty_present = p->penalty_present;
    ip.seed = p->seed;
    ip.typ_p = p->typ_p;
    ip.top_n_sigma = p->top_n_sigma;
    ip.xtc_probability = p->xtc_probability;
    ip.xtc_threshold = p->xtc_threshold;
    ip.dynatemp_range = p->dynatemp_range;
    ip.dynatemp_exponent = p->dynatemp_exponent;
    ip.dry_multiplier = p->dry_multiplier;
    ip.dry_base = p->dry_base;
    ip.dry_allowed_length = p->dry_allowed_length;
    ip.dry_penalty_last_n = p->dry_penalty_last_n;
    ip.dry_breakers = p->dry_breakers;
    ip.dry_breaker_lens = p->dry_breaker_lens;
    ip.n_dry_breakers = p->n_dry_breakers;
    memcpy(ip.samplers, p->samplers, sizeof ip.samplers);
    ip.logit_bias = (const nx_logit_bias *)p->logit_bias; /* same layout (checked above); copied by the sampler */
    ip.n_logit_bias = p->n_logit_bias;
    ip.ban = p->ban;
    ip.n_ban = p->n_ban;
    return ip;
}

bool nextn_sampler_create(nextn_sampler **out, const nextn_model *model, const nextn_sampler_params *params,
                          nextn_error *err) {
    *out = NULL;
    if (!model) return fail(err, "sampler: model is NULL");
    const nextn_sampler_params p = params ? *params : nextn_sampler_default_params();
    const nx_sampler_params ip = nx_api_sampler_params(&p);
    nx_err ie;
    nextn_sampler *s = nx_calloc(1, sizeof *s, "sampler handle", &ie);
    if (!s) return nx_api_pass(err, &ie);
    if (!nx_sampler_create(&s->s, (int32_t)model->model->hp.n_vocab, &ip, &ie) ||
        !nx_dist_init(&s->dist, (int32_t)model->model->hp.n_vocab, &ie)) {
        nx_sampler_free(s->s);
        free(s);
        return nx_api_pass(err, &ie);
    }
    *out = s;
    return true;
}

void nextn_sampler_free(nextn_sampler *s) {
    if (!s) return;
    nx_sampler_free(s->s);
    nx_dist_free(&s->dist);
    free(s);
}

bool nextn_sampler_sample(nextn_sampler *s, const float *logits, int32_t *token, nextn_error *err) {
    if (!logits) return fail(err, "sampler: logits row is NULL (were logits requested for that row?)");
    nx_err ie;
    return nx_sampler_sample(s->s, logits, token, &ie) || nx_api_pass(err, &ie);
}

bool nextn_sampler_dist(nextn_sampler *s, const float *logits, int32_t *ids, float *probs, int32_t cap,
                        int32_t *n_out, nextn_error *err) {
    *n_out = 0;
    if (!logits) return fail(err, "sampler: logits row is NULL (were logits requested for that row?)");
    if (!ids || !probs) return fail(err, "sampler: ids and probs must not be NULL");
    nx_err ie;
    if (!nx_sampler_dist(s->s, logits, &s->dist, &ie)) return nx_api_pass(err, &ie);
    *n_out = s->dist.n;
    if (cap < s->dist.n) {
        if (err) snprintf(err->msg, sizeof err->msg, "sampler: %d entries do not fit in a buffer of %d", s->dist.n, cap);
        return false;
    }
    memcpy(ids, s->dist.ids, (size_t)s->dist.n * sizeof *ids);
    memcpy(probs, s->dist.probs, (size_t)s->dist.n * sizeof *probs);
    return true;
}

bool nextn_sampler_logprobs(nextn_sampler *s, const float *logits, int32_t token, int32_t n_top, nextn_logprob *out,
                            nextn_error *err) {
    nx_err ie;
    if (!logits || !out) return fail(err, "logprobs: logits or out is NULL");
    out->token = token;
    return nx_sampler_logprobs(s->s, logits, token, n_top, &out->logprob, out->top_ids, out->top_logprobs, &out->n_top,
                               &ie) ||
           nx_api_pass(err, &ie);
}

bool nextn_sampler_accept(nextn_sampler *s, int32_t token, nextn_error *err) {
    nx_err ie;
    return nx_sampler_accept(s->s, token, &ie) || nx_api_pass(err, &ie);
}

void nextn_sampler_reset(nextn_sampler *s) { nx_sampler_reset(s->s); }
