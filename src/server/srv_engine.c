/* srv_engine.c - slot scheduling and continuous batching for `nextn serve` (see srv_engine.h). */
#include "server/srv_engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef enum { SLOT_FREE = 0, SLOT_PREFILL, SLOT_GENERATE } slot_state;

typedef struct slot {
    slot_state state;
    nx_srv_req *req;        /* engine's reference while busy */
    int32_t n_fed;          /* prompt tokens decoded so far (plain mode) */
    int32_t last;           /* last sampled token, next to be decoded (plain mode) */
    int32_t row;            /* batch row whose logits this slot samples from, -1 none */
    nextn_sampler *smp;     /* plain mode */
    nextn_stream *detok;
} slot;

struct nx_srv_engine {
    const nextn_model *model;
    const nextn_tokenizer *tok;
    nx_srv_engine_params p;
    nextn_context *ctx;     /* plain mode: one sequence per slot */
    slot *slots;
    /* batch arrays, n_batch rows */
    int32_t *b_tok, *b_pos, *b_seq;
    int8_t *b_logits;
    nextn_spec *spec;       /* speculative mode: one generator, one sequence per slot */
    int32_t spec_stride;    /* tokens one sequence may emit per step */
    int32_t *spec_out;      /* [n_slots * spec_stride] tokens of one step */
    int32_t *spec_n_out, *spec_max; /* [n_slots] */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;     /* guards queue, stopping, n_busy */
    pthread_cond_t cv;      /* queue became non-empty or stopping */
    nx_srv_req **queue;     /* FIFO ring of max_queue entries */
    int q_head, q_len;
    int n_busy;
    bool stopping;
};

/* ---- request completion helpers ---------------------------------------------------------- */

static void slot_release(nx_srv_engine *e, slot *s) {
    nextn_sampler_free(s->smp);
    nextn_stream_free(s->detok);
    if (s->req) nx_srv_req_unref(s->req);
    nextn_error ignored;
    if (e->ctx) nextn_seq_clear(e->ctx, (int32_t)(s - e->slots), &ignored);
    if (e->spec) nextn_spec_seq_clear(e->spec, (int32_t)(s - e->slots), &ignored);
    memset(s, 0, sizeof *s);
    s->row = -1;
    pthread_mutex_lock(&e->mu);
    e->n_busy--;
    pthread_mutex_unlock(&e->mu);
}

static void slot_fail(nx_srv_engine *e, slot *s, const char *msg) {
    pthread_mutex_lock(&s->req->mu);
    if (!s->req->done) nx_srv_req_finish_locked(s->req, NULL, msg);
    pthread_mutex_unlock(&s->req->mu);
    slot_release(e, s);
}

/* Records one generated token; returns true when the request is finished (and releases the slot). */
static bool slot_emit(nx_srv_engine *e, slot *s, int32_t tok, int32_t n_past_after) {
    nx_srv_req *r = s->req;
    const char *piece = "";
    size_t n = 0;
    nextn_error derr;
    const bool eog = !r->ignore_eos && nextn_token_is_eog(e->tok, tok);
    const bool detok_ok = eog || nextn_stream_push(s->detok, tok, &piece, &n, &derr);

    pthread_mutex_lock(&r->mu);
    const char *reason = NULL;
    char msg[256] = "";
    if (r->n_gen == 0) r->t_first = nx_time_s();
    r->n_gen++;
    if (!detok_ok) {
        snprintf(msg, sizeof msg, "detokenizer: %s", derr.msg);
    } else if (eog) {
        reason = "stop";
    } else if (nx_srv_req_append_locked(r, piece, n)) {
        reason = r->done ? NULL : "stop"; /* done already set: append failed (out of memory) */
    } else if (r->n_gen >= r->max_tokens || n_past_after >= e->p.n_ctx) {
        reason = "length";
    }
    const bool finished = r->done || reason || msg[0];
    if (finished) {
        r->t_end = nx_time_s();
        if (!r->done) {
            if (reason) {
                /* the last piece may end in bytes held back for a stop string: release them */
                const char *tail = "";
                size_t tn = 0;
                if (strcmp(reason, "stop") != 0 && nextn_stream_flush(s->detok, &tail, &tn, &derr) && tn)
                    nx_srv_req_append_locked(r, tail, tn);
            }
            nx_srv_req_finish_locked(r, reason, msg[0] ? msg : NULL);
        }
    } else {
        pthread_cond_broadcast(&r->cv);
    }
    pthread_mutex_unlock(&r->mu);
    if (finished) slot_release(e, s);
    return finished;
}

/* ---- admission --------------------------------------------------------------------------- */

static bool slot_admit(nx_srv_engine *e, slot *s, nx_srv_req *r) {
    memset(s, 0, sizeof *s);
    s->req = r;
    s->row = -1;
    s->state = SLOT_PREFILL;
    pthread_mutex_lock(&r->mu);
    r->t_start = nx_time_s();
    const bool cancelled = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    if (cancelled) {
        slot_release(e, s);
        return false;
    }
    nextn_error err;
    if (!nextn_stream_create(&s->detok, e->tok, false, &err)) {
        slot_fail(e, s, err.msg);
        return false;
    }
    if (!e->p.spec) {
        if (!nextn_sampler_create(&s->smp, e->model, &r->smp, &err)) {
            slot_fail(e, s, err.msg);
            return false;
        }
        /* as llama.cpp's server: prompt tokens enter the penalty history */
        for (int32_t i = 0; i < r->n_prompt; i++) nextn_sampler_accept(s->smp, r->prompt[i], &err);
    }
    return true;
}

/* Moves queued requests into free slots. */
static void admit_queued(nx_srv_engine *e) {
    for (int i = 0; i < e->p.n_slots; i++) {
        if (e->slots[i].state != SLOT_FREE) continue;
        pthread_mutex_lock(&e->mu);
        nx_srv_req *r = NULL;
        if (e->q_len > 0) {
            r = e->queue[e->q_head];
            e->q_head = (e->q_head + 1) % e->p.max_queue;
            e->q_len--;
            e->n_busy++;
        }
        pthread_mutex_unlock(&e->mu);
        if (!r) return;
        slot_admit(e, &e->slots[i], r);
    }
}

/* Releases slots whose client went away. */
static void drop_cancelled(nx_srv_engine *e) {
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_FREE) continue;
        pthread_mutex_lock(&s->req->mu);
        const bool c = s->req->cancelled;
        if (c && !s->req->done) nx_srv_req_finish_locked(s->req, NULL, "cancelled by the client");
        pthread_mutex_unlock(&s->req->mu);
        if (c) slot_release(e, s);
    }
}

/* ---- one iteration ----------------------------------------------------------------------- */

/* Plain mode: one batch over every busy slot, then sampling. */
static void step_plain(nx_srv_engine *e) {
    int32_t n = 0;
    /* generating slots first: one row each, so prompts never starve ongoing generations */
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        s->row = -1;
        if (s->state != SLOT_GENERATE || n >= e->p.n_batch) continue;
        e->b_tok[n] = s->last;
        e->b_pos[n] = nextn_n_past(e->ctx, i);
        e->b_seq[n] = i;
        e->b_logits[n] = 1;
        s->row = n++;
    }
    for (int i = 0; i < e->p.n_slots && n < e->p.n_batch; i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_PREFILL) continue;
        const nx_srv_req *r = s->req;
        const int32_t take = NX_MIN(e->p.n_batch - n, r->n_prompt - s->n_fed);
        const int32_t pos0 = nextn_n_past(e->ctx, i);
        for (int32_t k = 0; k < take; k++) {
            e->b_tok[n] = r->prompt[s->n_fed + k];
            e->b_pos[n] = pos0 + k;
            e->b_seq[n] = i;
            e->b_logits[n] = 0;
            n++;
        }
        s->n_fed += take;
        if (s->n_fed == r->n_prompt) { /* prompt complete: its last row gives the first token */
            e->b_logits[n - 1] = 1;
            s->row = n - 1;
        }
    }
    if (n == 0) return;
    const nextn_batch batch = {n, e->b_tok, e->b_pos, e->b_seq, e->b_logits};
    nextn_error err;
    if (!nextn_decode(e->ctx, &batch, &err)) {
        /* a failed decode leaves the caches of the batch's sequences undefined: fail them all */
        for (int i = 0; i < e->p.n_slots; i++) {
            slot *s = &e->slots[i];
            if (s->state == SLOT_FREE) continue;
            bool in_batch = false;
            for (int32_t k = 0; k < n && !in_batch; k++) in_batch = e->b_seq[k] == i;
            if (in_batch) slot_fail(e, s, err.msg);
        }
        return;
    }
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_FREE || s->row < 0) continue;
        int32_t tok;
        if (!nextn_sampler_sample(s->smp, nextn_get_logits(e->ctx, s->row), &tok, &err) ||
            !nextn_sampler_accept(s->smp, tok, &err)) {
            slot_fail(e, s, err.msg);
            continue;
        }
        s->state = SLOT_GENERATE;
        s->last = tok;
        /* the token itself is decoded next iteration: it will occupy position n_past */
        slot_emit(e, s, tok, nextn_n_past(e->ctx, i) + 1);
    }
}

/* Speculative mode: the next part (at most n_batch tokens) of each admitted prompt (decoded
 * alone, with the slot's own sampler), then one step of the shared generator for every
 * generating slot: one draft pass per draft position and ONE verify batch over all of them.
 * A long prompt therefore delays the generating slots by one part per step, not by its whole
 * prefill. */
static void step_spec(nx_srv_engine *e) {
    nextn_error err;
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_PREFILL) continue;
        int32_t first;
        bool done;
        if (!nextn_spec_prefill_seq_part(e->spec, i, s->req->prompt, s->req->n_prompt, e->p.n_batch, &s->req->smp,
                                         &first, &done, &err)) {
            slot_fail(e, s, err.msg);
            continue;
        }
        if (!done) continue;
        s->state = SLOT_GENERATE;
        s->n_fed = s->req->n_prompt;
        slot_emit(e, s, first, s->n_fed + 1);
    }
    bool any = false;
    for (int i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        /* only the engine writes n_gen; a generating slot always has room for one token */
        e->spec_max[i] = s->state == SLOT_GENERATE ? NX_MIN(s->req->max_tokens - s->req->n_gen, e->spec_stride) : 0;
        any = any || e->spec_max[i] > 0;
    }
    if (!any) return;
    if (!nextn_spec_step_seqs(e->spec, e->spec_max, e->spec_out, e->spec_n_out, &err)) {
        /* the generator's caches of the stepped sequences are undefined now: fail them all */
        for (int i = 0; i < e->p.n_slots; i++)
            if (e->slots[i].state == SLOT_GENERATE) slot_fail(e, &e->slots[i], err.msg);
        return;
    }
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_GENERATE) continue;
        for (int32_t k = 0; k < e->spec_n_out[i]; k++) {
            s->n_fed++;
            if (slot_emit(e, s, e->spec_out[i * e->spec_stride + k], s->n_fed + 1)) break;
        }
    }
}

static bool any_busy(nx_srv_engine *e) {
    for (int i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state != SLOT_FREE) return true;
    return false;
}

static void *engine_main(void *arg) {
    nx_srv_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->q_len == 0 && !any_busy(e)) pthread_cond_wait(&e->cv, &e->mu);
        const bool stop = e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        admit_queued(e);
        drop_cancelled(e);
        if (e->p.spec)
            step_spec(e);
        else
            step_plain(e);
    }
    return NULL;
}

/* ---- public ------------------------------------------------------------------------------ */

bool nx_srv_engine_start(nx_srv_engine **out, const nextn_model *model, const nx_srv_engine_params *p,
                         nx_err *err) {
    *out = NULL;
    if (p->n_slots < 1 || p->n_ctx < 2 || p->n_batch < 1 || p->max_queue < 1)
        return nx_fail(err, "serve: bad engine parameters (slots %d, ctx %d, batch %d, queue %d)", p->n_slots,
                       p->n_ctx, p->n_batch, p->max_queue);
    const nextn_tokenizer *tok = nextn_model_tokenizer(model);
    if (!tok) return nx_fail(err, "serve: the model has no tokenizer (tokenizer.ggml.* keys)");
    nx_srv_engine *e = nx_calloc(1, sizeof *e, "serve engine", err);
    if (!e) return false;
    e->model = model;
    e->tok = tok;
    e->p = *p;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    bool ok = (e->slots = nx_calloc((size_t)p->n_slots, sizeof *e->slots, "serve slots", err)) &&
              (e->queue = nx_calloc((size_t)p->max_queue, sizeof *e->queue, "serve queue", err));
    for (int i = 0; ok && i < p->n_slots; i++) e->slots[i].row = -1;
    nextn_error nerr;
    if (ok && !p->spec) {
        nextn_context_params cp = nextn_context_default_params();
        cp.n_ctx = p->n_ctx;
        cp.n_seq = p->n_slots;
        cp.n_threads = p->n_threads;
        cp.kv_type = p->kv_type;
        if (!nextn_context_create(&e->ctx, model, &cp, &nerr)) ok = nx_fail(err, "serve: %s", nerr.msg);
        ok = ok && (e->b_tok = nx_calloc((size_t)p->n_batch, sizeof(int32_t), "serve batch", err)) &&
             (e->b_pos = nx_calloc((size_t)p->n_batch, sizeof(int32_t), "serve batch", err)) &&
             (e->b_seq = nx_calloc((size_t)p->n_batch, sizeof(int32_t), "serve batch", err)) &&
             (e->b_logits = nx_calloc((size_t)p->n_batch, 1, "serve batch", err));
    }
    if (ok && p->spec) {
        nextn_context_params cp = nextn_context_default_params();
        cp.n_ctx = p->n_ctx;
        cp.n_seq = p->n_slots;
        cp.n_threads = p->n_threads;
        cp.kv_type = p->kv_type;
        /* per-request samplers replace these defaults at each prefill */
        if (!nextn_spec_create(&e->spec, model, &cp, &p->spec_params, NULL, &nerr)) ok = nx_fail(err, "serve: %s", nerr.msg);
        if (ok) e->spec_stride = nextn_spec_max_step_tokens(e->spec);
        ok = ok &&
             (e->spec_out = nx_calloc((size_t)p->n_slots * e->spec_stride, sizeof(int32_t), "serve spec output", err)) &&
             (e->spec_n_out = nx_calloc((size_t)p->n_slots, sizeof(int32_t), "serve spec output", err)) &&
             (e->spec_max = nx_calloc((size_t)p->n_slots, sizeof(int32_t), "serve spec output", err));
    }
    if (ok) {
        if (pthread_create(&e->thread, NULL, engine_main, e) != 0)
            ok = nx_fail(err, "serve: cannot start the engine thread");
        else
            e->thread_started = true;
    }
    if (!ok) {
        nx_srv_engine_free(e);
        return false;
    }
    *out = e;
    return true;
}

bool nx_srv_engine_submit(nx_srv_engine *e, nx_srv_req *r, nx_err *err) {
    pthread_mutex_lock(&e->mu);
    bool ok = true;
    if (e->stopping) {
        ok = nx_fail(err, "server is shutting down");
    } else if (e->q_len >= e->p.max_queue) {
        ok = nx_fail(err, "server busy: %d requests already wait for a slot (--max-queue)", e->q_len);
    } else {
        nx_srv_req_ref(r);
        r->t_submit = nx_time_s();
        e->queue[(e->q_head + e->q_len) % e->p.max_queue] = r;
        e->q_len++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

void nx_srv_engine_load(nx_srv_engine *e, int *idle, int *busy, int *queued) {
    pthread_mutex_lock(&e->mu);
    *busy = e->n_busy;
    *idle = e->p.n_slots - e->n_busy;
    *queued = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

void nx_srv_engine_memory(nx_srv_engine *e, nextn_memory *mem) {
    memset(mem, 0, sizeof *mem);
    if (e->ctx) nextn_context_memory(e->ctx, mem);
    if (e->spec) nextn_spec_memory(e->spec, mem);
}

void nx_srv_engine_stop(nx_srv_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    e->thread_started = false;
    for (int i = 0; e->slots && i < e->p.n_slots; i++)
        if (e->slots[i].state != SLOT_FREE) slot_fail(e, &e->slots[i], "server is shutting down");
    for (;;) {
        pthread_mutex_lock(&e->mu);
        nx_srv_req *r = NULL;
        if (e->queue && e->q_len > 0) {
            r = e->queue[e->q_head];
            e->q_head = (e->q_head + 1) % e->p.max_queue;
            e->q_len--;
        }
        pthread_mutex_unlock(&e->mu);
        if (!r) break;
        pthread_mutex_lock(&r->mu);
        if (!r->done) nx_srv_req_finish_locked(r, NULL, "server is shutting down");
        pthread_mutex_unlock(&r->mu);
        nx_srv_req_unref(r);
    }
}

void nx_srv_engine_free(nx_srv_engine *e) {
    if (!e) return;
    nx_srv_engine_stop(e);
    nextn_context_free(e->ctx);
    nextn_spec_free(e->spec);
    free(e->slots);
    free(e->queue);
    free(e->b_tok);
    free(e->b_pos);
    free(e->b_seq);
    free(e->b_logits);
    free(e->spec_out);
    free(e->spec_n_out);
    free(e->spec_max);
    pthread_cond_destroy(&e->cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
