/* srv_engine.c - slot scheduling and continuous batching for `nextn serve` (see srv_engine.h). */
#include "server/srv_engine.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "nextn_internal.h"

/* SLOT_SHARE: a choice of a request with n > 1 waiting for the first choice's prompt state. */
typedef enum { SLOT_FREE = 0, SLOT_PREFILL, SLOT_GENERATE, SLOT_SHARE } slot_state;

/* A slot's prompt cache: what its sequence holds and the checkpoints into it (srv_engine.h). */
typedef struct ckpt {
    nextn_state *st;        /* in place (no attention cells) */
    int32_t pos;
} ckpt;

typedef struct slot_cache {
    int32_t *tok;           /* token history of the sequence: prompt, then every token generated */
    int32_t n_tok, cap_tok;
    int32_t n_held;         /* positions the sequence holds while the slot is free (tok[0..n_held)) */
    ckpt ck[NX_SRV_MAX_CKPT]; /* increasing pos */
    int n_ck;
    nextn_state *spare;     /* an evicted checkpoint's buffers, reused by the next one */
    int32_t next_every;     /* prefill: the next every-N checkpoint position */
    int32_t turn_stop;      /* prefill of a chat prompt: the position of its last <|im_start|> (where the
                             * reply's turn begins; the next turn's prompt renders the reply differently,
                             * without its think block, so the cache can only match up to here) */
    uint64_t used;          /* admission counter when last used (LRU among equal matches) */
    nx_srv_slot_info last;  /* the request it serves or served last (GET /slots) */
} slot_cache;

/* A slot operation or a GET /slots snapshot waiting for the engine thread (srv_engine.h).  It
 * lives on the caller's stack; the engine sets `done` last, under the engine's mutex. */
enum { OP_INFO = 3 };
typedef struct slot_op {
    int kind;               /* nx_srv_slot_action or OP_INFO */
    int32_t slot;
    const char *path, *name;
    nx_srv_slot_result *res;
    nx_srv_slot_info *info;
    bool done, ok;
    int status;
    nx_err err;
    struct slot_op *next;
} slot_op;

typedef struct slot {
    slot_state state;
    nx_srv_req *req;        /* engine's reference while busy */
    int32_t n_fed;          /* positions its sequence holds once the tokens emitted so far are decoded */
    nextn_stream *detok;
    nx_srv_req *lead;       /* SLOT_SHARE: the first choice of its request (own reference) */
} slot;

struct nx_srv_engine {
    const nextn_model *model;
    const nextn_tokenizer *tok;
    nx_srv_engine_params p;
    slot *slots;
    slot_cache *cache;      /* [n_slots], survives the requests (slot itself is reset per request) */
    uint64_t n_admitted;
    nx_srv_cache_stats cst; /* under mu */
    int32_t im_start;       /* the <|im_start|> token id, -1 if the vocabulary has none */
    nextn_spec *spec;       /* the generator (use_mtp false in plain mode), one sequence per slot */
    int32_t spec_stride;    /* tokens one sequence may emit per step */
    int32_t *spec_out;      /* [n_slots * spec_stride] tokens of one step */
    int32_t *spec_n_out, *spec_max; /* [n_slots] */
    nextn_state *share;     /* several choices: the prompt state copied into the other choices' slots */

    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;     /* guards queue, stopping, n_busy */
    pthread_cond_t cv;      /* queue became non-empty or stopping */
    nx_srv_req **queue;     /* FIFO ring of max_queue entries */
    int q_head, q_len;
    int n_busy;
    bool stopping;
    nx_srv_engine_stats st; /* totals (under mu) */
    slot_op *ops;           /* waiting slot operations, oldest first (under mu) */
    pthread_cond_t op_cv;   /* an operation finished */
};

/* ---- request completion helpers ---------------------------------------------------------- */

/* Adds a request that leaves its slot to the totals; engine thread (the only writer of the
 * counters read here). */
static void stats_add(nx_srv_engine *e, const nx_srv_req *r) {
    pthread_mutex_lock(&e->mu);
    nx_srv_engine_stats *st = &e->st;
    if (r->t_first > 0) {
        st->prompt_tokens += r->n_prompt - r->n_cache;
        st->prompt_seconds += r->t_first - r->t_start;
        st->predicted_tokens += r->n_gen;
        if (r->t_end >= r->t_first) st->predicted_seconds += r->t_end - r->t_first;
    }
    st->draft_tokens += r->draft_n;
    st->draft_accepted += r->draft_accepted;
    pthread_mutex_unlock(&e->mu);
}

static void cache_drop_from(slot_cache *c, int32_t pos);
static void cache_forget(nx_srv_engine *e, int32_t i);

/* Ends the slot's request.  keep: its sequence stays in the prompt cache (a request that
 * finished or was cancelled between iterations leaves a consistent sequence); else (a failed
 * decode, or a request that opted out of the cache) it is cleared. */
static void slot_release_ex(nx_srv_engine *e, slot *s, bool keep) {
    const int32_t i = (int32_t)(s - e->slots);
    slot_cache *c = &e->cache[i];
    nextn_stream_free(s->detok);
    keep = keep && !e->p.no_cache && s->req && !s->req->no_cache && s->state != SLOT_FREE && s->state != SLOT_SHARE;
    nx_srv_req_unref(s->lead);
    if (s->req) {
        stats_add(e, s->req);
        pthread_mutex_lock(&s->req->mu);
        c->last.n_decoded = s->req->n_gen;
        pthread_mutex_unlock(&s->req->mu);
        nx_srv_req_unref(s->req);
    }
    nextn_error ignored;
    if (keep) keep = nextn_spec_seq_keep(e->spec, i, &ignored);
    if (keep) {
        c->n_held = nextn_spec_seq_n_past(e->spec, i);
        if (c->n_held > c->n_tok) keep = false; /* never: every decoded token was recorded */
        cache_drop_from(c, c->n_held + 1);
    }
    if (!keep) cache_forget(e, i);
    memset(s, 0, sizeof *s);
    pthread_mutex_lock(&e->mu);
    e->n_busy--;
    pthread_mutex_unlock(&e->mu);
}

static void slot_release(nx_srv_engine *e, slot *s) { slot_release_ex(e, s, true); }

static void slot_fail(nx_srv_engine *e, slot *s, const char *msg) {
    pthread_mutex_lock(&s->req->mu);
    if (!s->req->done) nx_srv_req_finish_locked(s->req, NULL, msg);
    pthread_mutex_unlock(&s->req->mu);
    slot_release_ex(e, s, false);
}

/* ---- prompt cache ------------------------------------------------------------------------ */

/* Appends tokens to the slot's token history. */
static bool cache_push(slot_cache *c, const int32_t *t, int32_t n) {
    if (c->n_tok + n > c->cap_tok) {
        int32_t cap = c->cap_tok ? c->cap_tok : 256;
        while (cap < c->n_tok + n) cap *= 2;
        int32_t *p = realloc(c->tok, (size_t)cap * sizeof *p);
        if (!p) return false;
        c->tok = p;
        c->cap_tok = cap;
    }
    memcpy(c->tok + c->n_tok, t, (size_t)n * sizeof *t);
    c->n_tok += n;
    return true;
}

/* Drops the checkpoints at positions >= pos (their buffers go to the spare). */
static void cache_drop_from(slot_cache *c, int32_t pos) {
    while (c->n_ck > 0 && c->ck[c->n_ck - 1].pos >= pos) {
        ckpt *k = &c->ck[--c->n_ck];
        if (!c->spare) c->spare = k->st;
        else nextn_state_free(k->st);
        k->st = NULL;
    }
}

/* The sequence of slot i is empty: no tokens, no checkpoints. */
static void cache_forget(nx_srv_engine *e, int32_t i) {
    slot_cache *c = &e->cache[i];
    nextn_error ignored;
    nextn_spec_seq_clear(e->spec, i, &ignored);
    cache_drop_from(c, 0);
    c->n_tok = c->n_held = 0;
}

/* Takes an in-place checkpoint of slot i's sequence at its current position (unless one is
 * there already); the oldest goes when the slot has n_ckpt.  A failure only means no
 * checkpoint. */
static void cache_take(nx_srv_engine *e, int32_t i) {
    slot_cache *c = &e->cache[i];
    const int32_t pos = nextn_spec_seq_n_past(e->spec, i);
    if (e->p.n_ckpt <= 0 || pos <= 0 || (c->n_ck > 0 && c->ck[c->n_ck - 1].pos >= pos)) return;
    nextn_state *st = c->spare;
    c->spare = NULL;
    if (c->n_ck == e->p.n_ckpt) {
        if (!st) st = c->ck[0].st;
        else nextn_state_free(c->ck[0].st);
        memmove(c->ck, c->ck + 1, (size_t)(c->n_ck - 1) * sizeof *c->ck);
        c->n_ck--;
    }
    nextn_error err;
    const bool ok = nextn_spec_state_take(&st, e->spec, i, NEXTN_STATE_IN_PLACE, &err);
    if (!ok) {
        c->spare = st;
        return;
    }
    c->ck[c->n_ck++] = (ckpt){st, pos};
}

/* How much of prompt p (n tokens) slot i can reuse: *pos positions, from the sequence as it is
 * (*ck = -1) or from checkpoint *ck. */
static void cache_match(const nx_srv_engine *e, int32_t i, const int32_t *p, int32_t n, int32_t *pos, int *ck) {
    const slot_cache *c = &e->cache[i];
    *pos = 0;
    *ck = -1;
    int32_t lcp = 0;
    const int32_t m = NX_MIN(c->n_held, n);
    while (lcp < m && c->tok[lcp] == p[lcp]) lcp++;
    const int32_t lim = NX_MIN(lcp, n - 1); /* the last prompt token is always decoded */
    if (c->n_held <= lim) {
        *pos = c->n_held;
        return;
    }
    for (int k = c->n_ck - 1; k >= 0; k--)
        if (c->ck[k].pos <= lim) {
            *pos = c->ck[k].pos;
            *ck = k;
            return;
        }
}

/* The free slot for request r: the longest reusable prefix, then the least recently used. */
static int choose_slot(const nx_srv_engine *e, const nx_srv_req *r) {
    int best = -1;
    int32_t best_pos = -1;
    for (int i = 0; i < e->p.n_slots; i++) {
        if (e->slots[i].state != SLOT_FREE || (r->id_slot >= 0 && r->id_slot != i)) continue;
        int32_t pos = 0;
        int ck;
        if (!e->p.no_cache && !r->no_cache) cache_match(e, i, r->prompt, r->n_prompt, &pos, &ck);
        if (pos > best_pos || (pos == best_pos && e->cache[i].used < e->cache[best].used)) {
            best = i;
            best_pos = pos;
        }
    }
    return best;
}

/* Puts slot i's sequence at the longest reusable prefix of r's prompt; returns the positions
 * reused (0: the sequence starts empty). */
static int32_t cache_prepare(nx_srv_engine *e, int32_t i, nx_srv_req *r) {
    slot_cache *c = &e->cache[i];
    c->used = ++e->n_admitted;
    int32_t pos = 0;
    int ck = -1;
    if (!e->p.no_cache && !r->no_cache) cache_match(e, i, r->prompt, r->n_prompt, &pos, &ck);
    nextn_error err;
    if (pos > 0 && ck >= 0) {
        const bool ok = nextn_spec_state_restore(e->spec, i, c->ck[ck].st, &err);
        if (!ok) pos = 0;
        else {
            pthread_mutex_lock(&e->mu);
            e->cst.restores++;
            pthread_mutex_unlock(&e->mu);
        }
    }
    if (pos == 0) {
        cache_forget(e, i);
    } else {
        cache_drop_from(c, pos + 1);
        /* the end of the previous reply: where a later request that edits this one resumes */
        if (ck < 0) cache_take(e, i);
    }
    c->n_tok = pos;
    c->n_held = 0;
    c->next_every = e->p.ckpt_every > 0 ? (pos / e->p.ckpt_every + 1) * e->p.ckpt_every : INT32_MAX;
    c->turn_stop = -1;
    if (r->chat && e->im_start >= 0)
        for (int32_t k = r->n_prompt - 1; k > pos && c->turn_stop < 0; k--)
            if (r->prompt[k] == e->im_start) c->turn_stop = k;
    if (!cache_push(c, r->prompt + pos, r->n_prompt - pos)) {
        r->no_cache = true; /* out of memory for the history: this request runs uncached */
        cache_forget(e, i);
        pos = 0;
    }
    pthread_mutex_lock(&e->mu);
    e->cst.prompt_tokens += r->n_prompt;
    if (pos > 0) {
        e->cst.hits++;
        e->cst.reused_tokens += pos;
    }
    pthread_mutex_unlock(&e->mu);
    return pos;
}

/* The next prompt position of slot i at which a checkpoint is taken (beyond `at`): every
 * ckpt_every tokens and one before the prompt's end; INT32_MAX = none. */
static int32_t cache_next_stop(const nx_srv_engine *e, int32_t i, int32_t n_prompt, int32_t at) {
    if (e->p.no_cache || e->p.n_ckpt <= 0) return INT32_MAX;
    const slot_cache *c = &e->cache[i];
    int32_t stop = INT32_MAX;
    if (c->next_every > at) stop = c->next_every;
    if (c->turn_stop > at && c->turn_stop < stop) stop = c->turn_stop;
    if (n_prompt - 1 > at && n_prompt - 1 < stop) stop = n_prompt - 1;
    return stop < n_prompt ? stop : INT32_MAX;
}

/* After a prefill part reached position `at` of slot i's prompt: a checkpoint if it is a stop. */
static void cache_after_part(nx_srv_engine *e, int32_t i, int32_t n_prompt, int32_t at, int32_t stop) {
    slot_cache *c = &e->cache[i];
    if (at != stop || stop == INT32_MAX || e->slots[i].req->no_cache) return;
    cache_take(e, i);
    while (c->next_every <= at) c->next_every += e->p.ckpt_every;
    (void)n_prompt;
}

/* Records one generated token; returns true when the request is finished (and releases the slot). */
static bool slot_emit(nx_srv_engine *e, slot *s, int32_t tok, int32_t n_past_after, const nextn_logprob *lp) {
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
    } else if (!eog && r->n_probs >= 0 && !lp) {
        snprintf(msg, sizeof msg, "no log-probabilities for generated token %d", tok);
    } else if (!eog && !nx_srv_req_push_token_locked(r, tok, lp)) {
        snprintf(msg, sizeof msg, "out of memory recording the generated tokens");
    } else if (eog) {
        reason = "stop";
    } else if (nx_srv_req_append_locked(r, piece, n)) {
        reason = r->done ? NULL : "stop"; /* done already set: append failed (out of memory) */
    } else if (r->forced && r->n_gen >= r->n_forced) {
        reason = "stop"; /* tests: the forced text is the whole reply */
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
    }
    pthread_mutex_unlock(&r->mu);
    if (finished) slot_release(e, s);
    return finished;
}

/* After a step's tokens of slot s were emitted and its request goes on: wakes the request's
 * reader if it streams.  A non-streamed reply's reader waits for `done` only, which
 * nx_srv_req_finish_locked signals: waking it at every token cost a thread switch per token on
 * the decoding cores (on 2 cores 4-5x slower decoding than `nextn run`, docs/server.md).  The
 * wake comes after r->mu is released, so the reader does not block on the mutex at once. */
static void slot_wake(slot *s) {
    if (s->state != SLOT_FREE && s->req->stream) pthread_cond_broadcast(&s->req->cv);
}

/* ---- admission --------------------------------------------------------------------------- */

/* Marks r finished with an error unless it is already. */
static void req_fail(nx_srv_req *r, int status, const char *msg) {
    pthread_mutex_lock(&r->mu);
    if (!r->done) nx_srv_req_fail_locked(r, status, msg);
    pthread_mutex_unlock(&r->mu);
}

/* The part of admission shared by every choice: GET /slots' record, the detokenizer, the
 * log-probability setting (the sampler, r->smp, is passed at each prefill part; the generator
 * puts the prompt in its penalty history, as llama.cpp's server does). */
static bool slot_setup(nx_srv_engine *e, slot *s, nx_srv_req *r) {
    const int32_t i = (int32_t)(s - e->slots);
    nx_srv_slot_info *li = &e->cache[i].last;
    li->has_req = true;
    snprintf(li->id_task, sizeof li->id_task, "%s", r->id);
    li->smp = r->smp;
    li->smp.logit_bias = NULL;
    li->n_logit_bias = r->smp.n_logit_bias;
    li->max_tokens = r->max_tokens;
    li->stream = r->stream;
    li->ignore_eos = r->ignore_eos;
    li->n_decoded = 0;
    pthread_mutex_lock(&r->mu);
    r->slot_used = i;
    pthread_mutex_unlock(&r->mu);
    nextn_error err;
    if (!nextn_stream_create(&s->detok, e->tok, false, &err)) {
        slot_fail(e, s, err.msg);
        return false;
    }
    if (!nextn_spec_set_logprobs(e->spec, i, r->n_probs, &err)) {
        slot_fail(e, s, err.msg);
        return false;
    }
    return true;
}

/* The start of every admission: slot s takes r (the queue's reference becomes the slot's) in
 * `state`, with a reference to `lead` (the first choice whose prompt state s waits for) unless
 * NULL.  A request whose client went away meanwhile is finished (499), the slot is released and
 * false returned. */
static bool slot_claim(nx_srv_engine *e, slot *s, nx_srv_req *r, slot_state state, nx_srv_req *lead) {
    memset(s, 0, sizeof *s);
    s->req = r;
    s->state = state;
    if (lead) {
        nx_srv_req_ref(lead);
        s->lead = lead;
    }
    pthread_mutex_lock(&r->mu);
    r->t_start = nx_time_s();
    const bool cancelled = r->cancelled;
    if (cancelled && !r->done) nx_srv_req_fail_locked(r, 499, "cancelled by the client");
    pthread_mutex_unlock(&r->mu);
    if (cancelled) slot_release(e, s);
    return !cancelled;
}

/* Puts r into slot s and prepares its prompt cache (the slot stays free if the client went away). */
static bool slot_admit(nx_srv_engine *e, slot *s, nx_srv_req *r) {
    if (!slot_claim(e, s, r, SLOT_PREFILL, NULL)) return false;
    if (r->forced) r->no_cache = true; /* tests: the sequence holds sampled tokens, not the forced ones */
    const int32_t reused = cache_prepare(e, (int32_t)(s - e->slots), r);
    s->n_fed = reused;
    pthread_mutex_lock(&r->mu);
    r->n_cache = reused;
    pthread_mutex_unlock(&r->mu);
    return slot_setup(e, s, r);
}

/* Puts choice r (k >= 1 of a request with n > 1; the caller took the slot's reference) into slot
 * s: it waits (SLOT_SHARE) for the prompt state of the first choice `lead` (share_prompts). */
static void slot_admit_choice(nx_srv_engine *e, slot *s, nx_srv_req *r, nx_srv_req *lead) {
    const int32_t i = (int32_t)(s - e->slots);
    if (!slot_claim(e, s, r, SLOT_SHARE, lead)) return;
    e->cache[i].used = ++e->n_admitted;
    cache_forget(e, i); /* the sequence is replaced by the shared prompt state */
    slot_setup(e, s, r);
}

/* Slot i serves the first choice of a request whose other choices wait for its prompt state. */
static bool choices_waiting(const nx_srv_engine *e, int32_t i) {
    const nx_srv_req *r = e->slots[i].req;
    for (int32_t j = 0; r && r->n_group > 0 && j < e->p.n_slots; j++)
        if (e->slots[j].state == SLOT_SHARE && e->slots[j].lead == r) return true;
    return false;
}

static int32_t seq_n_past(const nx_srv_engine *e, int32_t i) {
    return nextn_spec_seq_n_past(e->spec, i);
}

/* Several choices: once a first choice has decoded its prompt but the last token, that state
 * (FULL: attention KV, recurrent state, in speculative mode the MTP KV and the driver's rows) is
 * copied into the slots of the other choices, which then decode the last prompt token
 * themselves - its logits give each choice its first token with its own sampler.  The prompt is
 * decoded once, plus one token per further choice. */
static void share_prompts(nx_srv_engine *e) {
    for (int32_t l = 0; l < e->p.n_slots; l++) {
        slot *ls = &e->slots[l];
        if (ls->state != SLOT_PREFILL || !choices_waiting(e, l)) continue;
        const nx_srv_req *lr = ls->req;
        const int32_t pos = lr->n_prompt - 1;
        if (seq_n_past(e, l) != pos) continue;
        nextn_error err = {0};
        bool ok = pos == 0 || nextn_spec_state_take(&e->share, e->spec, l, NEXTN_STATE_FULL, &err);
        for (int32_t j = 0; j < e->p.n_slots; j++) {
            slot *s = &e->slots[j];
            if (s->state != SLOT_SHARE || s->lead != lr) continue;
            nx_srv_req *r = s->req;
            bool sok = ok && (pos == 0 || nextn_spec_state_restore(e->spec, j, e->share, &err));
            /* a restored generator sequence takes its log-probability setting again */
            sok = sok && nextn_spec_set_logprobs(e->spec, j, r->n_probs, &err);
            if (!sok) {
                char msg[300];
                snprintf(msg, sizeof msg, "copying the prompt state to choice %d: %s", r->choice, err.msg);
                slot_fail(e, s, msg);
                continue;
            }
            slot_cache *c = &e->cache[j];
            c->n_tok = c->n_held = 0;
            if (!cache_push(c, r->prompt, r->n_prompt)) r->no_cache = true;
            c->next_every = e->p.ckpt_every > 0 ? (pos / e->p.ckpt_every + 1) * e->p.ckpt_every : INT32_MAX;
            c->turn_stop = -1;
            s->n_fed = pos;
            s->state = SLOT_PREFILL;
            nx_srv_req_unref(s->lead);
            s->lead = NULL;
            pthread_mutex_lock(&r->mu);
            r->n_cache = pos; /* taken from the first choice, not decoded */
            pthread_mutex_unlock(&r->mu);
        }
    }
}

/* Choices waiting for a first choice that is gone (failed, cancelled) fail with its error. */
static void drop_orphans(nx_srv_engine *e) {
    for (int32_t j = 0; j < e->p.n_slots; j++) {
        slot *s = &e->slots[j];
        if (s->state != SLOT_SHARE) continue;
        bool alive = false;
        for (int32_t l = 0; l < e->p.n_slots && !alive; l++)
            alive = e->slots[l].state == SLOT_PREFILL && e->slots[l].req == s->lead;
        if (alive) continue;
        char msg[256];
        pthread_mutex_lock(&s->lead->mu);
        const int status = s->lead->error[0] ? (s->lead->error_status ? s->lead->error_status : 500) : 500;
        snprintf(msg, sizeof msg, "%s", s->lead->error[0] ? s->lead->error : "the first choice ended before its prompt was shared");
        pthread_mutex_unlock(&s->lead->mu);
        req_fail(s->req, status, msg);
        slot_release_ex(e, s, false);
    }
}

/* Moves queued requests into free slots, in order, each into the one with the longest reusable
 * prefix; a request bound to a busy slot (id_slot) waits without holding up the others.  A
 * request with n > 1 choices is admitted when n slots are free (its first choice into the best
 * slot, the others into the least recently used ones); until then it holds up the requests
 * behind it, so that single requests cannot starve it. */
static void admit_queued(nx_srv_engine *e) {
    for (;;) {
        pthread_mutex_lock(&e->mu);
        nx_srv_req *r = NULL;
        int i = -1;
        for (int k = 0; k < e->q_len && i < 0; k++) {
            r = e->queue[(e->q_head + k) % e->p.max_queue];
            if (r->n_group > 0) {
                int n_free = 0;
                for (int j = 0; j < e->p.n_slots; j++) n_free += e->slots[j].state == SLOT_FREE;
                if (n_free < 1 + r->n_group || (i = choose_slot(e, r)) < 0) {
                    i = -1;
                    break;
                }
            } else if ((i = choose_slot(e, r)) < 0) {
                continue;
            }
            for (int j = k; j > 0; j--) /* close the gap: the entries before it move up one */
                e->queue[(e->q_head + j) % e->p.max_queue] = e->queue[(e->q_head + j - 1) % e->p.max_queue];
            e->q_head = (e->q_head + 1) % e->p.max_queue;
            e->q_len--;
            e->n_busy += 1 + r->n_group;
        }
        pthread_mutex_unlock(&e->mu);
        if (i < 0) return;
        slot_admit(e, &e->slots[i], r);
        /* the other choices (a failed first choice fails them in drop_orphans) */
        for (int32_t g = 0; g < r->n_group; g++) {
            int best = -1;
            for (int j = 0; j < e->p.n_slots; j++)
                if (e->slots[j].state == SLOT_FREE && j != i &&
                    (best < 0 || e->cache[j].used < e->cache[best].used))
                    best = j;
            nx_srv_req_ref(r->group[g]); /* the slot's reference */
            slot_admit_choice(e, &e->slots[best], r->group[g], r);
        }
    }
}

/* Releases slots whose client went away. */
static void drop_cancelled(nx_srv_engine *e) {
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state == SLOT_FREE) continue;
        pthread_mutex_lock(&s->req->mu);
        const bool c = s->req->cancelled;
        if (c && !s->req->done) nx_srv_req_fail_locked(s->req, 499, "cancelled by the client");
        pthread_mutex_unlock(&s->req->mu);
        if (c) slot_release(e, s);
    }
    drop_orphans(e);
}

/* ---- one iteration ----------------------------------------------------------------------- */

/* Tests (nx_server_params.test_force): the token slot s emits in place of the generated one.
 * Only the engine writes n_gen, and a request stops at n_forced tokens (slot_emit). */
static int32_t emitted_token(const slot *s, int32_t tok) {
    return s->req->forced && s->req->n_gen < s->req->n_forced ? s->req->forced[s->req->n_gen] : tok;
}

/* One iteration: the next part (at most n_batch tokens) of each admitted prompt (decoded alone,
 * with the request's sampler), then one step of the generator for every generating slot: in
 * plain mode one token each, in one batch; with --spec mtp one draft pass per draft position
 * and ONE verify batch over all of them.  A long prompt therefore delays the generating slots
 * by one part per step, not by its whole prefill. */
static void step(nx_srv_engine *e) {
    nextn_error err;
    for (int i = 0; i < e->p.n_slots; i++) {
        slot *s = &e->slots[i];
        if (s->state != SLOT_PREFILL) continue;
        int32_t first;
        bool done;
        const int32_t at = nextn_spec_seq_n_past(e->spec, i);
        const int32_t stop = cache_next_stop(e, i, s->req->n_prompt, at);
        int32_t rows = stop != INT32_MAX ? NX_MIN(e->p.n_batch, stop - at) : e->p.n_batch;
        /* a first choice whose other choices wait stops before the last prompt token (share_prompts) */
        if (choices_waiting(e, i)) rows = NX_MIN(rows, s->req->n_prompt - 1 - at);
        if (rows <= 0) continue;
        if (!nextn_spec_prefill_seq_part(e->spec, i, s->req->prompt, s->req->n_prompt, rows, &s->req->smp, &first,
                                         &done, &err)) {
            slot_fail(e, s, err.msg);
            continue;
        }
        if (!done) {
            cache_after_part(e, i, s->req->n_prompt, nextn_spec_seq_n_past(e->spec, i), stop);
            continue;
        }
        s->state = SLOT_GENERATE;
        s->n_fed = s->req->n_prompt;
        if (!cache_push(&e->cache[i], &first, 1)) s->req->no_cache = true;
        const nextn_logprob *lps = NULL;
        if (s->req->n_probs >= 0 && nextn_spec_last_logprobs(e->spec, i, &lps) != 1) lps = NULL;
        if (!slot_emit(e, s, emitted_token(s, first), s->n_fed + 1, lps)) slot_wake(s);
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
        /* every token of the step: the target holds them all but the last, emitted or not */
        if (!cache_push(&e->cache[i], e->spec_out + i * e->spec_stride, e->spec_n_out[i])) s->req->no_cache = true;
        /* written before the emitted tokens; the HTTP side reads them once the request is done */
        nextn_spec_seq_stats(e->spec, i, &s->req->draft_n, &s->req->draft_accepted);
        const nextn_logprob *lps = NULL;
        if (s->req->n_probs >= 0 && nextn_spec_last_logprobs(e->spec, i, &lps) != e->spec_n_out[i]) lps = NULL;
        bool finished = false;
        for (int32_t k = 0; k < e->spec_n_out[i] && !finished; k++) {
            s->n_fed++;
            finished = slot_emit(e, s, emitted_token(s, e->spec_out[i * e->spec_stride + k]), s->n_fed + 1,
                                 lps ? &lps[k] : NULL);
        }
        if (!finished) slot_wake(s); /* one wake for all the step's tokens */
    }
}

static bool any_busy(nx_srv_engine *e) {
    for (int i = 0; i < e->p.n_slots; i++)
        if (e->slots[i].state != SLOT_FREE) return true;
    return false;
}

/* ---- slot operations (srv_engine.h) ------------------------------------------------------- */

/* err's message with every occurrence of path replaced by name (a client sees file names, not
 * the server's directories). */
static void hide_path(nx_err *err, const char *path, const char *name) {
    char out[sizeof err->msg];
    size_t o = 0;
    const size_t pl = strlen(path), nl = strlen(name);
    for (const char *p = err->msg; *p && o + 1 < sizeof out;) {
        if (pl && strncmp(p, path, pl) == 0 && o + nl + 1 < sizeof out) {
            memcpy(out + o, name, nl);
            o += nl;
            p += pl;
        } else {
            out[o++] = *p++;
        }
    }
    out[o] = '\0';
    memcpy(err->msg, out, o + 1);
}

static bool op_fail(slot_op *o, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static bool op_fail(slot_op *o, int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(o->err.msg, sizeof o->err.msg, fmt, ap);
    va_end(ap);
    o->status = status;
    return false;
}

static bool slot_save(nx_srv_engine *e, slot_op *o) {
    const int32_t i = o->slot;
    slot_cache *c = &e->cache[i];
    const int32_t n = nextn_spec_seq_n_past(e->spec, i);
    if (n <= 0 || c->n_held != n || c->n_tok < n)
        return op_fail(o, 400, "slot %d holds no tokens to save (its prompt cache is empty)", i);
    struct stat sb;
    if (lstat(o->path, &sb) == 0 && !S_ISREG(sb.st_mode))
        return op_fail(o, 400, "slot file %s is %s; only a regular file is overwritten", o->name,
                       nx_file_kind(sb.st_mode));
    nextn_state *st = NULL;
    nextn_error ne;
    bool ok = nextn_spec_state_take(&st, e->spec, i, NEXTN_STATE_FULL, &ne) &&
              nextn_state_set_tokens(st, c->tok, n, &ne) && nextn_state_save(st, o->path, &ne);
    nextn_state_free(st);
    if (!ok) {
        op_fail(o, 500, "slot %d: %s", i, ne.msg);
        hide_path(&o->err, o->path, o->name);
        return false;
    }
    o->res->n_tokens = n;
    o->res->n_bytes = stat(o->path, &sb) == 0 ? (uint64_t)sb.st_size : 0;
    return true;
}

static bool slot_restore(nx_srv_engine *e, slot_op *o) {
    const int32_t i = o->slot;
    struct stat sb; /* lstat: a link is refused (400), not followed; nextn_state_load opens without blocking */
    if (lstat(o->path, &sb) != 0)
        return op_fail(o, errno == ENOENT ? 404 : 400, "slot file %s: %s", o->name, strerror(errno));
    if (!S_ISREG(sb.st_mode))
        return op_fail(o, 400, "slot file %s is %s; only a regular file is restored", o->name, nx_file_kind(sb.st_mode));
    nextn_state *st = NULL;
    nextn_error ne;
    if (!nextn_state_load(&st, e->model, o->path, &ne)) {
        op_fail(o, 400, "%s", ne.msg);
        hide_path(&o->err, o->path, o->name);
        return false;
    }
    int32_t n = 0;
    const int32_t *tok = nextn_state_tokens(st, &n);
    const int32_t pos = nextn_state_pos(st);
    bool ok = true;
    if (!tok || n != pos || n <= 0)
        ok = op_fail(o, 400, "slot file %s holds no token list for its %d positions (not saved by a server)", o->name,
                     pos);
    else if (pos >= e->p.n_ctx)
        ok = op_fail(o, 400, "slot file %s holds %d positions; a slot holds %d (server option -c)", o->name, pos,
                     e->p.n_ctx);
    else if (!nextn_spec_state_restore(e->spec, i, st, &ne))
        ok = op_fail(o, 400, "slot file %s: %s", o->name, ne.msg);
    if (ok) {
        slot_cache *c = &e->cache[i];
        cache_drop_from(c, 0);
        c->n_tok = c->n_held = 0;
        if (!cache_push(c, tok, n)) {
            cache_forget(e, i);
            ok = op_fail(o, 500, "out of memory restoring slot %d", i);
        } else {
            c->n_held = n;
            o->res->n_tokens = n;
            o->res->n_bytes = (uint64_t)sb.st_size;
        }
    }
    nextn_state_free(st);
    return ok;
}

static void slots_info(nx_srv_engine *e, nx_srv_slot_info *info) {
    for (int32_t i = 0; i < e->p.n_slots; i++) {
        const slot *s = &e->slots[i];
        nx_srv_slot_info *x = &info[i];
        *x = e->cache[i].last;
        x->id = i;
        x->processing = s->state != SLOT_FREE;
        x->n_ctx = e->p.n_ctx;
        x->n_tokens = nextn_spec_seq_n_past(e->spec, i);
        if (x->processing) {
            pthread_mutex_lock(&s->req->mu);
            x->n_decoded = s->req->n_gen;
            pthread_mutex_unlock(&s->req->mu);
        }
    }
}

static void run_op(nx_srv_engine *e, slot_op *o) {
    const double t0 = nx_time_s();
    o->ok = true;
    if (o->kind == OP_INFO) {
        slots_info(e, o->info);
    } else if (o->slot < 0 || o->slot >= e->p.n_slots) {
        o->ok = op_fail(o, 400, "no slot %d (the server has %d: 0..%d)", o->slot, e->p.n_slots, e->p.n_slots - 1);
    } else if (o->kind == NX_SRV_SLOT_SAVE) {
        o->ok = slot_save(e, o);
    } else if (o->kind == NX_SRV_SLOT_RESTORE) {
        o->ok = slot_restore(e, o);
    } else {
        o->res->n_tokens = e->cache[o->slot].n_held;
        cache_forget(e, o->slot);
    }
    if (o->res) o->res->ms = (nx_time_s() - t0) * 1e3;
}

/* Runs every waiting operation whose slot is free (the others wait for their slot). */
static void run_ops(nx_srv_engine *e) {
    for (;;) {
        pthread_mutex_lock(&e->mu);
        slot_op *o = NULL;
        for (slot_op **pp = &e->ops; *pp; pp = &(*pp)->next) {
            const slot_op *c = *pp;
            if (c->kind == OP_INFO || c->slot < 0 || c->slot >= e->p.n_slots || e->slots[c->slot].state == SLOT_FREE) {
                o = *pp;
                *pp = o->next;
                break;
            }
        }
        pthread_mutex_unlock(&e->mu);
        if (!o) return;
        run_op(e, o);
        pthread_mutex_lock(&e->mu);
        o->done = true;
        pthread_cond_broadcast(&e->op_cv);
        pthread_mutex_unlock(&e->mu);
    }
}

/* Queues o and waits until the engine has run it. */
static bool submit_op(nx_srv_engine *e, slot_op *o, nx_err *err) {
    pthread_mutex_lock(&e->mu);
    if (e->stopping) {
        pthread_mutex_unlock(&e->mu);
        o->status = 503;
        return nx_fail(err, "server is shutting down");
    }
    slot_op **pp = &e->ops;
    while (*pp) pp = &(*pp)->next;
    *pp = o;
    pthread_cond_signal(&e->cv);
    while (!o->done) pthread_cond_wait(&e->op_cv, &e->mu);
    pthread_mutex_unlock(&e->mu);
    if (!o->ok) *err = o->err;
    return o->ok;
}

bool nx_srv_engine_slot_action(nx_srv_engine *e, int32_t id_slot, nx_srv_slot_action action, const char *path,
                               const char *name, nx_srv_slot_result *res, int *status, nx_err *err) {
    memset(res, 0, sizeof *res);
    slot_op o = {.kind = (int)action, .slot = id_slot, .path = path ? path : "", .name = name ? name : "", .res = res};
    const bool ok = submit_op(e, &o, err);
    *status = ok ? 200 : o.status;
    return ok;
}

bool nx_srv_engine_slots(nx_srv_engine *e, nx_srv_slot_info *info, nx_err *err) {
    slot_op o = {.kind = OP_INFO, .info = info};
    return submit_op(e, &o, err);
}

int32_t nx_srv_engine_n_slots(const nx_srv_engine *e) { return e->p.n_slots; }
bool nx_srv_engine_is_spec(const nx_srv_engine *e) { return e->p.spec; }

static void *engine_main(void *arg) {
    nx_srv_engine *e = arg;
    for (;;) {
        pthread_mutex_lock(&e->mu);
        while (!e->stopping && e->q_len == 0 && !any_busy(e) && !e->ops) pthread_cond_wait(&e->cv, &e->mu);
        const bool stop = e->stopping;
        pthread_mutex_unlock(&e->mu);
        if (stop) break;
        run_ops(e);
        admit_queued(e);
        drop_cancelled(e);
        share_prompts(e);
        step(e);
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
    int32_t ims[2], n_ims = 0;
    nextn_error terr;
    e->im_start = nextn_tokenize((nextn_tokenizer *)tok, "<|im_start|>", 12, false, true, ims, 2, &n_ims, &terr) &&
                          n_ims == 1
                      ? ims[0]
                      : -1;
    e->p = *p;
    pthread_mutex_init(&e->mu, NULL);
    pthread_cond_init(&e->cv, NULL);
    pthread_cond_init(&e->op_cv, NULL);
    if (p->n_ckpt < 0 || p->n_ckpt > NX_SRV_MAX_CKPT || p->ckpt_every < 0) {
        free(e);
        return nx_fail(err, "serve: %d checkpoints per slot (0..%d), every %d tokens (>= 0)", p->n_ckpt, NX_SRV_MAX_CKPT,
                       p->ckpt_every);
    }
    bool ok = (e->slots = nx_calloc((size_t)p->n_slots, sizeof *e->slots, "serve slots", err)) &&
              (e->cache = nx_calloc((size_t)p->n_slots, sizeof *e->cache, "serve prompt cache", err)) &&
              (e->queue = nx_calloc((size_t)p->max_queue, sizeof *e->queue, "serve queue", err));
    nextn_error nerr;
    if (ok) {
        /* plain mode is the same generator with drafting off: no MTP head, no rollback slots */
        nextn_spec_params sp = p->spec_params;
        if (!p->spec) { /* the drafting parameters do not apply */
            sp = nextn_spec_default_params();
            sp.use_mtp = false;
        }
        nextn_context_params cp = nextn_context_default_params();
        cp.n_ctx = p->n_ctx;
        cp.n_seq = p->n_slots;
        cp.n_threads = p->n_threads;
        cp.kv_type = p->kv_type;
        cp.kv_type_v = p->kv_type_v;
        /* per-request samplers replace these defaults at each prefill */
        if (!nextn_spec_create(&e->spec, model, &cp, &sp, NULL, &nerr)) ok = nx_fail(err, "serve: %s", nerr.msg);
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
        for (int32_t g = 0; g < r->n_group; g++) r->group[g]->t_submit = r->t_submit;
        e->queue[(e->q_head + e->q_len) % e->p.max_queue] = r;
        e->q_len++;
        pthread_cond_signal(&e->cv);
    }
    pthread_mutex_unlock(&e->mu);
    return ok;
}

void nx_srv_engine_cancel(nx_srv_engine *e, nx_srv_req *r) {
    bool queued = false;
    pthread_mutex_lock(&e->mu);
    for (int i = 0; i < e->q_len && !queued; i++) {
        if (e->queue[(e->q_head + i) % e->p.max_queue] != r) continue;
        for (int k = i; k + 1 < e->q_len; k++)
            e->queue[(e->q_head + k) % e->p.max_queue] = e->queue[(e->q_head + k + 1) % e->p.max_queue];
        e->q_len--;
        queued = true;
    }
    pthread_mutex_unlock(&e->mu);
    pthread_mutex_lock(&r->mu);
    r->cancelled = true;
    if (queued && !r->done) nx_srv_req_fail_locked(r, 499, "cancelled by the client");
    pthread_mutex_unlock(&r->mu);
    /* the other choices of a queued request never reach the queue themselves */
    for (int32_t g = 0; queued && g < r->n_group; g++) req_fail(r->group[g], 499, "cancelled by the client");
    if (queued) nx_srv_req_unref(r); /* the queue's reference */
}

void nx_srv_engine_get_stats(nx_srv_engine *e, nx_srv_engine_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->st;
    st->n_slots = e->p.n_slots;
    st->busy = e->n_busy;
    st->queued = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

void nx_srv_engine_load(nx_srv_engine *e, int *idle, int *busy, int *queued) {
    pthread_mutex_lock(&e->mu);
    *busy = e->n_busy;
    *idle = e->p.n_slots - e->n_busy;
    *queued = e->q_len;
    pthread_mutex_unlock(&e->mu);
}

void nx_srv_engine_cache_stats(nx_srv_engine *e, nx_srv_cache_stats *st) {
    pthread_mutex_lock(&e->mu);
    *st = e->cst;
    pthread_mutex_unlock(&e->mu);
    st->n_ckpt = e->p.no_cache ? 0 : e->p.n_ckpt;
    st->ckpt_bytes = e->spec ? nextn_spec_state_size_for(e->spec, NEXTN_STATE_IN_PLACE, 0) : 0;
}

void nx_srv_engine_stop(nx_srv_engine *e) {
    if (!e) return;
    pthread_mutex_lock(&e->mu);
    e->stopping = true;
    pthread_cond_broadcast(&e->cv);
    pthread_mutex_unlock(&e->mu);
    if (e->thread_started) pthread_join(e->thread, NULL);
    e->thread_started = false;
    pthread_mutex_lock(&e->mu); /* operations nobody will run */
    for (slot_op *o = e->ops; o; o = o->next) {
        o->ok = false;
        o->status = 503;
        snprintf(o->err.msg, sizeof o->err.msg, "server is shutting down");
    }
    for (slot_op *o = e->ops, *next; o; o = next) {
        next = o->next;
        o->done = true;
    }
    e->ops = NULL;
    pthread_cond_broadcast(&e->op_cv);
    pthread_mutex_unlock(&e->mu);
    for (int i = 0; e->slots && i < e->p.n_slots; i++)
        if (e->slots[i].state != SLOT_FREE) {
            slot *s = &e->slots[i];
            pthread_mutex_lock(&s->req->mu);
            if (!s->req->done) nx_srv_req_fail_locked(s->req, 503, "server is shutting down");
            pthread_mutex_unlock(&s->req->mu);
            slot_release_ex(e, s, false);
        }
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
        req_fail(r, 503, "server is shutting down");
        for (int32_t g = 0; g < r->n_group; g++) req_fail(r->group[g], 503, "server is shutting down");
        nx_srv_req_unref(r);
    }
}

void nx_srv_engine_free(nx_srv_engine *e) {
    if (!e) return;
    nx_srv_engine_stop(e);
    for (int i = 0; e->cache && i < e->p.n_slots; i++) {
        slot_cache *c = &e->cache[i];
        for (int k = 0; k < c->n_ck; k++) nextn_state_free(c->ck[k].st);
        nextn_state_free(c->spare);
        free(c->tok);
    }
    free(e->cache);
    nextn_spec_free(e->spec);
    free(e->slots);
    free(e->queue);
    free(e->spec_out);
    free(e->spec_n_out);
    free(e->spec_max);
    nextn_state_free(e->share);
    pthread_cond_destroy(&e->cv);
    pthread_cond_destroy(&e->op_cv);
    pthread_mutex_destroy(&e->mu);
    free(e);
}
