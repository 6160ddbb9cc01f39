/* srv_request.c - request lifetime and the stop-string bookkeeping (see srv_request.h). */
#include "server/srv_request.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

nx_srv_req *nx_srv_req_new(void) {
    nx_srv_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    pthread_mutex_init(&r->mu, NULL);
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&r->cv, &ca);
    pthread_condattr_destroy(&ca);
    r->refs = 1;
    r->max_tokens = 1;
    r->id_slot = -1;
    r->n_probs = -1;
    r->stop_index = -1;
    r->slot_used = -1;
    return r;
}

nx_srv_req *nx_srv_req_clone(const nx_srv_req *t) {
    nx_srv_req *r = nx_srv_req_new();
    if (!r) return NULL;
    r->smp = t->smp;
    r->smp.logit_bias = NULL;
    r->smp.n_logit_bias = 0;
    r->smp.dry_breakers = r->smp.dry_breaker_lens = NULL;
    r->smp.n_dry_breakers = 0;
    r->max_tokens = t->max_tokens;
    r->ignore_eos = t->ignore_eos;
    r->stream = t->stream;
    r->chat = t->chat;
    r->include_usage = t->include_usage;
    r->no_cache = t->no_cache;
    r->id_slot = t->id_slot;
    r->n_probs = t->n_probs;
    r->stop_bytes = t->stop_bytes;
    bool ok = true;
    for (int i = 0; i < t->n_stop && ok; i++) {
        ok = (r->stop[i] = strdup(t->stop[i])) != NULL;
        r->stop_keep[i] = t->stop_keep[i];
        r->n_stop += ok;
    }
    if (ok && t->stop_ac) {
        nx_err err;
        ok = nx_srv_req_stops_build(r, &err);
    }
    if (ok && t->smp.n_logit_bias > 0) {
        r->logit_bias = malloc((size_t)t->smp.n_logit_bias * sizeof *r->logit_bias);
        if ((ok = r->logit_bias != NULL)) {
            memcpy(r->logit_bias, t->smp.logit_bias, (size_t)t->smp.n_logit_bias * sizeof *r->logit_bias);
            r->smp.logit_bias = r->logit_bias;
            r->smp.n_logit_bias = t->smp.n_logit_bias;
        }
    }
    for (int i = 0; i < t->n_dry_strs && ok; i++) r->n_dry_strs += (ok = (r->dry_strs[i] = strdup(t->dry_strs[i])) != NULL);
    if (ok && t->dry.n > 0) { /* the DRY breakers */
        int32_t n_tok = 0;
        for (int32_t i = 0; i < t->dry.n; i++) n_tok += t->dry.lens[i];
        r->dry.tokens = malloc((size_t)n_tok * sizeof *r->dry.tokens);
        r->dry.lens = malloc((size_t)t->dry.n * sizeof *r->dry.lens);
        if ((ok = r->dry.tokens && r->dry.lens)) {
            memcpy(r->dry.tokens, t->dry.tokens, (size_t)n_tok * sizeof *r->dry.tokens);
            memcpy(r->dry.lens, t->dry.lens, (size_t)t->dry.n * sizeof *r->dry.lens);
            r->dry.n = t->dry.n;
            r->smp.dry_breakers = r->dry.tokens;
            r->smp.dry_breaker_lens = r->dry.lens;
            r->smp.n_dry_breakers = r->dry.n;
        }
    }
    if (!ok) {
        nx_srv_req_unref(r);
        return NULL;
    }
    return r;
}

void nx_srv_req_ref(nx_srv_req *r) {
    pthread_mutex_lock(&r->mu);
    r->refs++;
    pthread_mutex_unlock(&r->mu);
}

void nx_srv_req_unref(nx_srv_req *r) {
    if (!r) return;
    pthread_mutex_lock(&r->mu);
    const int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0) return;
    for (int32_t k = 0; k < r->n_group; k++) nx_srv_req_unref(r->group[k]);
    free(r->group);
    free(r->prompt);
    free(r->forced);
    free(r->gen_prefix);
    nx_srv_tools_free(r->tools);
    free(r->logit_bias);
    nextn_dry_seqs_free(&r->dry);
    for (int i = 0; i < r->n_dry_strs; i++) free(r->dry_strs[i]);
    free(r->tokens);
    free(r->probs);
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    nx_stop_free(r->stop_ac);
    nx_buf_free(&r->text);
    pthread_cond_destroy(&r->cv);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

bool nx_srv_req_add_stop(nx_srv_req *r, const char *s, bool keep, int max_strings, int *status, nx_err *err) {
    const size_t l = strlen(s);
    if (l == 0) return true; /* an empty stop string never matches usefully: ignore */
    if (r->n_stop >= max_strings || r->n_stop >= NX_SRV_MAX_STOP + 1) {
        *status = 400;
        return nx_fail(err, "'stop' has more than %d strings", max_strings);
    }
    if (l > NX_SRV_MAX_STOP_BYTES - r->stop_bytes) {
        *status = 400;
        return nx_fail(err, "'stop' strings are longer than %u bytes together (the limit)",
                       (unsigned)NX_SRV_MAX_STOP_BYTES);
    }
    if (!(r->stop[r->n_stop] = strdup(s))) {
        *status = 500;
        return nx_fail(err, "out of memory (%s)", "stop");
    }
    r->stop_keep[r->n_stop++] = keep;
    r->stop_bytes += l;
    return true;
}

bool nx_srv_req_stops_build(nx_srv_req *r, nx_err *err) {
    nx_stop_free(r->stop_ac);
    r->stop_ac = NULL;
    if (r->n_stop == 0) return true;
    return nx_stop_build(&r->stop_ac, (const char *const *)r->stop, NULL, r->n_stop, err);
}

bool nx_srv_req_append_locked(nx_srv_req *r, const char *s, size_t n) {
    if (n == 0) return false;
    nx_err err;
    if (r->n_stop > 0 && !r->stop_ac && !nx_srv_req_stops_build(r, &err)) {
        nx_srv_req_finish_locked(r, NULL, err.msg);
        return true;
    }
    const size_t old = r->text.len;
    if (!nx_buf_append(&r->text, s, n, &err)) {
        nx_srv_req_finish_locked(r, NULL, "out of memory while collecting the generated text");
        return true;
    }
    if (!r->stop_ac) {
        r->safe_len = r->text.len;
        return false;
    }
    nx_stop_match m;
    if (nx_stop_feed(r->stop_ac, s, n, &m)) {
        const size_t end = old + m.end; /* the stop string is text[end - m.len, end) */
        const size_t cut = r->stop_keep[m.index] ? end : end - m.len;
        r->stop_index = m.index;
        r->text.len = cut;
        r->text.data[cut] = '\0';
        if (r->safe_len > cut) r->safe_len = cut; /* cannot happen: safe bytes never start a stop */
        return true;
    }
    r->safe_len = r->text.len - nx_stop_held(r->stop_ac);
    return false;
}

bool nx_srv_req_push_token_locked(nx_srv_req *r, int32_t tok, const nextn_logprob *lp) {
    if (r->n_tokens == r->cap_tokens) {
        const int32_t cap = r->cap_tokens ? 2 * r->cap_tokens : 64;
        int32_t *t = realloc(r->tokens, (size_t)cap * sizeof *t);
        if (!t) return false;
        r->tokens = t;
        if (r->n_probs >= 0) {
            nextn_logprob *p = realloc(r->probs, (size_t)cap * sizeof *p);
            if (!p) return false;
            r->probs = p;
        }
        r->cap_tokens = cap;
    }
    if (r->n_probs >= 0) {
        if (lp) r->probs[r->n_tokens] = *lp;
        else memset(&r->probs[r->n_tokens], 0, sizeof *r->probs);
        r->probs[r->n_tokens].token = tok;
    }
    r->tokens[r->n_tokens++] = tok;
    return true;
}

void nx_srv_req_finish_locked(nx_srv_req *r, const char *reason, const char *error) {
    r->done = true;
    r->finish_reason = error ? NULL : reason;
    if (error) {
        snprintf(r->error, sizeof r->error, "%s", error);
        if (!r->error_status) r->error_status = 500;
    }
    r->safe_len = r->text.len;
    pthread_cond_broadcast(&r->cv);
}

void nx_srv_req_fail_locked(nx_srv_req *r, int status, const char *error) {
    r->error_status = status;
    nx_srv_req_finish_locked(r, NULL, error);
}

bool nx_srv_req_wait_locked(nx_srv_req *r, double seconds) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    const long ns = (long)(seconds * 1e9);
    ts.tv_sec += ns / 1000000000L;
    ts.tv_nsec += ns % 1000000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return pthread_cond_timedwait(&r->cv, &r->mu, &ts) == 0;
}
