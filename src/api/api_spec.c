/* api_spec.c - the public speculative-decoding API (include/nextn.h) over spec.c / mtp.c. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/api_internal.h"
#include "spec/draft_vocab.h"
#include "forward/forward.h"
#include "spec/mtp.h"
#include "nextn.h"
#include "spec/spec.h"
#include "spec/spec_cost.h"
#include "base/threads.h"

_Static_assert(NEXTN_SPEC_MAX_DRAFT == NX_SPEC_MAX_DRAFT, "the public draft limit is the driver's");

struct nextn_spec {
    const nextn_model *model;
    uint64_t mtp_fingerprint;  /* of the model holding the MTP weights (0 = no MTP) */
    nx_pool *pool;
    nx_ctx *ctx;
    nx_mtp_head *head;
    nx_mtp *mtp;
    nx_spec *drv;
    int32_t stride;
    int32_t n_seq;
    int32_t draft_vocab;       /* K of the head (0 = whole vocabulary) */
    char dv_file[1024];        /* the frequency file that chose them ("" = none) */
    char notice[256];
};

nextn_spec_params nextn_spec_default_params(void) {
    nextn_spec_params p = {.use_mtp = true, .mtp_model = NULL, .draft_max = 3, .draft_min = 0, .draft_p_min = 0.0f,
                           .adaptive = true, .penalize_prompt = true};
    return p;
}

void nextn_spec_free(nextn_spec *s) {
    if (!s) return;
    nx_spec_free(s->drv);
    nx_mtp_free(s->mtp);
    nx_mtp_head_free(s->head);
    nx_ctx_free(s->ctx);
    nx_pool_free(s->pool);
    free(s);
}

bool nextn_spec_create(nextn_spec **out, const nextn_model *model, const nextn_context_params *cp,
                       const nextn_spec_params *params, const nextn_sampler_params *smp, nextn_error *err) {
    *out = NULL;
    nx_err ie;
    if (!model) {
        if (err) snprintf(err->msg, sizeof err->msg, "spec: model is NULL");
        return false;
    }
    const nx_model *m = nx_api_model(model);
    nextn_context_params c = cp ? *cp : nextn_context_default_params();
    nextn_spec_params p = params ? *params : nextn_spec_default_params();
    nextn_sampler_params sm = smp ? *smp : nextn_sampler_default_params();
    if (!nx_api_kv_types_ok(model, &c, err)) return false;
    if (c.n_seq < 1 || c.n_seq > 256) {
        if (err) snprintf(err->msg, sizeof err->msg, "spec: n_seq %d out of range (1..256)", c.n_seq);
        return false;
    }
    if (p.draft_max < 1 || p.draft_max > NEXTN_SPEC_MAX_DRAFT) {
        if (err) snprintf(err->msg, sizeof err->msg, "draft_max %d out of range (1..%d)", p.draft_max, NEXTN_SPEC_MAX_DRAFT);
        return false;
    }
    nextn_spec *s = nx_calloc(1, sizeof *s, "speculative generator", &ie);
    if (!s) return nx_api_pass(err, &ie);
    if (!p.use_mtp) {
        snprintf(s->notice, sizeof s->notice, "use_mtp false: plain decoding");
    } else {
        const char *path = m->gguf ? m->gguf->path : NULL;
        const char *mtp_path = p.mtp_model;
        /* the file has an MTP block that was not bound at load time: bind it from the same file */
        if (!mtp_path && !m->mtp.present && m->hp.n_mtp == 1) mtp_path = path;
        if (!nx_mtp_head_open(&s->head, m, path, mtp_path, s->notice, sizeof s->notice, &ie)) goto fail;
    }
    if (p.draft_vocab == 0 && !p.draft_vocab_file && s->head) {
        int32_t K;
        if (!nx_draft_vocab_auto(m->gguf ? m->gguf->path : NULL, m->hp.n_vocab, s->dv_file, sizeof s->dv_file, &K, &ie))
            goto fail;
        if (K > 0) {
            p.draft_vocab = K;
            p.draft_vocab_file = s->dv_file;
        } else {
            p.draft_vocab = nx_draft_vocab_default_k(m->hp.n_vocab); /* merge rank, large vocabularies */
        }
    }
    if (p.draft_vocab == NEXTN_DRAFT_VOCAB_ALL) p.draft_vocab = 0;
    if (p.draft_vocab_file && p.draft_vocab <= 0) {
        nx_fail(&ie, "draft_vocab_file %s needs draft_vocab K (how many tokens to keep)", p.draft_vocab_file);
        goto fail;
    }
    if (p.draft_vocab < 0 || (uint32_t)p.draft_vocab > m->hp.n_vocab) {
        nx_fail(&ie, "draft_vocab %d out of range (1..%u, the model's vocabulary)", p.draft_vocab, m->hp.n_vocab);
        goto fail;
    }
    if (s->head && p.draft_vocab > 0) {
        int32_t *ids = nx_malloc((size_t)p.draft_vocab * sizeof *ids, "draft vocabulary", &ie);
        bool ok = ids && nx_draft_vocab_select(p.draft_vocab_file, m->hp.n_vocab,
                                               nx_draft_vocab_fingerprint(nx_api_tokenizer(model)), p.draft_vocab,
                                               ids, &ie) &&
                  nx_mtp_head_set_draft_vocab(s->head, ids, p.draft_vocab, &ie);
        if (!ok && p.draft_vocab_file == s->dv_file)
            nx_draft_vocab_auto_failed(&ie);
        free(ids);
        if (!ok) goto fail;
        s->draft_vocab = p.draft_vocab;
        if (p.draft_vocab_file && p.draft_vocab_file != s->dv_file)
            snprintf(s->dv_file, sizeof s->dv_file, "%s", p.draft_vocab_file);
        else if (!p.draft_vocab_file)
            s->dv_file[0] = '\0';
    } else {
        s->dv_file[0] = '\0';
    }
    s->pool = nx_pool_create(c.n_threads, &ie);
    if (!s->pool) goto fail;
    nx_ctx_params xp = nx_ctx_default_params();
    xp.n_ctx = c.n_ctx;
    xp.n_seq = c.n_seq;
    xp.n_snapshots = s->head ? p.draft_max : 0;
    xp.kv_type = (nx_kv_type)c.kv_type;
    xp.kv_type_v = (nx_kv_type)c.kv_type_v;
    if (!nx_ctx_create(&s->ctx, m, &xp, s->pool, &ie)) goto fail;
    if (s->head && !nx_mtp_create(&s->mtp, s->head, c.n_ctx, c.n_seq, xp.kv_type, xp.kv_type_v, s->pool, &ie)) goto fail;
    nx_spec_params sp = nx_spec_default_params();
    sp.draft_max = p.draft_max;
    sp.draft_min = p.draft_min;
    sp.draft_p_min = p.draft_p_min;
    sp.adaptive = p.adaptive;
    sp.penalize_prompt = p.penalize_prompt;
    sp.sampling = nx_api_sampler_params(&sm);
    if (!nx_spec_create(&s->drv, s->ctx, s->mtp, &sp, &ie)) goto fail;
    s->stride = (s->mtp ? p.draft_max : 0) + 1;
    s->model = model;
    if (s->head)
        s->mtp_fingerprint = s->head->src == m ? nx_api_model_fingerprint(model) : nx_model_fingerprint(s->head->src);
    s->n_seq = c.n_seq;
    *out = s;
    return true;
fail:
    nextn_spec_free(s);
    return nx_api_pass(err, &ie);
}

bool nextn_spec_has_mtp(const nextn_spec *s) { return s->mtp != NULL; }
const char *nextn_spec_notice(const nextn_spec *s) { return s->notice; }
const char *nextn_spec_mtp_source(const nextn_spec *s) { return s->head ? s->head->source : ""; }

int32_t nextn_spec_draft_vocab(const nextn_spec *s, const char **file) {
    if (file) *file = s->draft_vocab > 0 && s->dv_file[0] ? s->dv_file : NULL;
    return s->draft_vocab;
}
int32_t nextn_spec_max_step_tokens(const nextn_spec *s) { return s->stride; }

bool nextn_spec_prefill(nextn_spec *s, const int32_t *ids, int32_t n, int32_t *first, nextn_error *err) {
    nx_err ie;
    const int32_t *pr = ids;
    if (!nx_spec_prefill(s->drv, 1, &pr, &n, first, &ie)) return nx_api_pass(err, &ie);
    nx_spec_reset_stats(s->drv);
    return true;
}

bool nextn_spec_step(nextn_spec *s, int32_t max_out, int32_t *out, int32_t *n_out, nextn_error *err) {
    nx_err ie;
    if (s->n_seq != 1) {
        if (err) snprintf(err->msg, sizeof err->msg, "spec: %d sequences: use nextn_spec_step_seqs", s->n_seq);
        return false;
    }
    if (!nx_spec_step(s->drv, &max_out, out, n_out, &ie)) return nx_api_pass(err, &ie);
    return true;
}

int32_t nextn_spec_n_seq(const nextn_spec *s) { return s->n_seq; }

bool nextn_spec_prefill_seq(nextn_spec *s, int32_t seq, const int32_t *ids, int32_t n, const nextn_sampler_params *smp,
                            int32_t *first, nextn_error *err) {
    nx_err ie;
    nx_sampler_params p;
    if (smp) p = nx_api_sampler_params(smp);
    if (!nx_spec_prefill_seq(s->drv, seq, ids, n, smp ? &p : NULL, first, &ie)) return nx_api_pass(err, &ie);
    return true;
}

bool nextn_spec_prefill_seq_part(nextn_spec *s, int32_t seq, const int32_t *ids, int32_t n, int32_t max_rows,
                                 const nextn_sampler_params *smp, int32_t *first, bool *done, nextn_error *err) {
    nx_err ie;
    nx_sampler_params p;
    if (smp) p = nx_api_sampler_params(smp);
    if (!nx_spec_prefill_seq_part(s->drv, seq, ids, n, max_rows, smp ? &p : NULL, first, done, &ie)) return nx_api_pass(err, &ie);
    return true;
}

bool nextn_spec_step_seqs(nextn_spec *s, const int32_t *max_out, int32_t *out, int32_t *n_out, nextn_error *err) {
    nx_err ie;
    if (!nx_spec_step(s->drv, max_out, out, n_out, &ie)) return nx_api_pass(err, &ie);
    return true;
}

bool nextn_spec_seq_clear(nextn_spec *s, int32_t seq, nextn_error *err) {
    nx_err ie;
    if (!nx_spec_seq_clear(s->drv, seq, &ie)) return nx_api_pass(err, &ie);
    return true;
}

void nextn_spec_seq_stats(const nextn_spec *s, int32_t seq, int64_t *drafted, int64_t *accepted) {
    nx_spec_seq_stats(s->drv, seq, drafted, accepted);
}

void nextn_spec_get_stats(const nextn_spec *s, nextn_spec_stats *st) {
    const nx_spec_stats *x = nx_spec_get_stats(s->drv);
    st->steps = x->steps;
    st->spec_steps = x->spec_steps;
    st->drafted = x->drafted;
    st->accepted = x->accepted;
    st->emitted = x->emitted;
    st->t_draft = x->t_draft;
    st->t_verify = x->t_verify;
    st->t_accept = x->t_accept;
}

void nextn_spec_memory(const nextn_spec *s, nextn_memory *mem) {
    nx_ctx_memory cm = nx_ctx_memory_usage(s->ctx);
    memset(mem, 0, sizeof *mem);
    mem->weight_bytes = nx_ctx_model(s->ctx)->weight_bytes;
    mem->kv_bytes = cm.kv_bytes;
    mem->state_bytes = cm.state_bytes;
    mem->scratch_bytes = cm.scratch_bytes;
    if (s->mtp) {
        nx_ctx_memory mm = nx_ctx_memory_usage(nx_mtp_ctx(s->mtp));
        mem->kv_bytes += mm.kv_bytes;
        mem->scratch_bytes += mm.scratch_bytes;
    }
}

nx_spec *nx_api_spec_driver(const nextn_spec *s) { return s->drv; }
nx_ctx *nx_api_spec_ctx(const nextn_spec *s) { return s->ctx; }
const nextn_model *nx_api_spec_model(const nextn_spec *s) { return s->model; }
uint64_t nx_api_spec_mtp_fingerprint(const nextn_spec *s) { return s->mtp ? s->mtp_fingerprint : 0; }

_Static_assert(sizeof(nextn_logprob) == sizeof(nx_spec_logprob) && NEXTN_MAX_TOP_LOGPROBS == NX_SAMPLER_MAX_TOP_LOGPROBS,
               "nextn_logprob mirrors nx_spec_logprob");

bool nextn_spec_set_logprobs(nextn_spec *s, int32_t seq, int32_t n_top, nextn_error *err) {
    nx_err ie;
    if (!nx_spec_set_logprobs(s->drv, seq, n_top, &ie)) return nx_api_pass(err, &ie);
    return true;
}

int32_t nextn_spec_last_logprobs(const nextn_spec *s, int32_t seq, const nextn_logprob **out) {
    const nx_spec_logprob *lp;
    const int32_t n = nx_spec_last_logprobs(s->drv, seq, &lp);
    *out = (const nextn_logprob *)lp;
    return n;
}
