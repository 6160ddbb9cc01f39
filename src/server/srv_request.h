/* srv_request.h - one generation request, shared between the HTTP thread that parsed it (and
 * streams or returns its result) and the engine thread that decodes it.
 *
 * Ownership: reference counted.  The HTTP side creates it (1 reference), the engine takes a
 * second one when the request is queued; each side drops its reference when done with it, and
 * the last one frees it.  Everything under "set before submit" is immutable afterwards; the
 * fields under "shared" are read and written only with `mu` held.  The engine appends text and
 * broadcasts `cv`; the HTTP side waits on `cv` for new text or `done`.
 */
#ifndef NX_SRV_REQUEST_H
#define NX_SRV_REQUEST_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "nextn.h"
#include "nextn_internal.h"
#include "server/srv_tools.h"

#define NX_SRV_MAX_STOP 16 /* stop strings per request (the server may add one: </tool_call>) */
#define NX_SRV_MAX_STOP_BYTES NX_STOP_MAX_BYTES /* all of a request's stop strings together */
#define NX_SRV_MAX_DRY 16   /* DRY sequence breakers per request */

typedef struct nx_srv_req {
    /* ---- set before submit ---- */
    int32_t *prompt;            /* prompt token ids (owned) */
    int32_t n_prompt;
    nextn_sampler_params smp;
    int32_t max_tokens;         /* generated tokens at most (>= 1) */
    bool ignore_eos;
    char *stop[NX_SRV_MAX_STOP]; /* owned, non-empty strings */
    bool stop_keep[NX_SRV_MAX_STOP]; /* the text ends after this stop string instead of before it */
    int n_stop;
    size_t stop_bytes;          /* all stop strings together (<= NX_SRV_MAX_STOP_BYTES) */
    bool stream;
    bool chat;                  /* chat.completion response shape */
    bool include_usage;         /* stream_options.include_usage */
    bool no_cache;              /* "cache_prompt": false - decode the whole prompt, keep nothing */
    int32_t id_slot;            /* the slot to run in (llama-server's id_slot); -1: any free one */
    bool exceeds_ctx;           /* parsing: refused because the prompt does not fit a slot */
    nextn_logit_bias *logit_bias; /* owned; smp.logit_bias points here (smp.n_logit_bias entries) */
    nextn_dry_seqs dry;         /* owned DRY breaker sequences; smp.dry_breakers points here */
    char *dry_strs[NX_SRV_MAX_DRY]; /* owned: the breaker strings (generation_settings) */
    int n_dry_strs;
    int32_t n_probs;            /* -1: no log-probabilities; else each generated token's, with this
                                 * many (<= NEXTN_MAX_TOP_LOGPROBS) most likely alternatives */
    char id[48];                /* "cmpl-..." / "chatcmpl-..." (the same for every choice of a request) */
    int32_t n_choices;          /* OpenAI "n": choices asked for (1 ..the slot count) */
    int32_t choice;             /* its index among the request's choices (OpenAI "n"); 0 for the first */
    /* OpenAI "n" > 1: the first choice carries the others (own references; each parsed from the
     * same body, seed + k) and is queued alone; the engine admits them as a group (all n slots
     * at once), decodes the prompt once in the first choice's slot and copies its state into
     * the others' (srv_engine.h "Several choices") */
    struct nx_srv_req **group;
    int32_t n_group;
    int64_t created;            /* unix seconds */
    /* tool calls in the output (chat; see srv_tools.h): NULL = the text is plain content */
    nx_srv_tools *tools;
    char *gen_prefix;           /* text the prompt already opened the reply with (a forced tool call);
                                 * the reply's content is gen_prefix + text (owned, NULL = none) */
    /* tests only (nx_server_params.test_force): the tokens to emit instead of sampling, then
     * EOG; NULL = sample */
    int32_t *forced;
    int32_t n_forced;

    /* ---- shared (mu) ---- */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int refs;
    nx_buf text;                /* generated text; stop strings are cut off when found */
    size_t safe_len;            /* bytes of text that can no longer become part of a stop string */
    nx_stop *stop_ac;           /* the automaton over stop[] (sample/stop.h), fed each new piece
                                 * once: its state is the text's end (built by nx_srv_req_stops_build) */
    int32_t n_gen;              /* tokens generated */
    int32_t *tokens;            /* the generated token ids but a final end-of-generation token */
    nextn_logprob *probs;       /* [n_tokens] their log-probabilities (n_probs >= 0), else NULL */
    int32_t n_tokens, cap_tokens;
    int32_t n_cache;            /* prompt tokens taken from the prompt cache instead of decoded */
    int32_t slot_used;          /* the slot that ran it (-1 before admission) */
    int64_t draft_n, draft_accepted; /* speculative mode: draft tokens verified / accepted */
    bool done;                  /* no more text will come */
    bool cancelled;             /* the client went away: the engine drops the request */
    const char *finish_reason;  /* "stop" or "length" once done (NULL on error) */
    int stop_index;             /* the stop string that ended the text, -1 none */
    char error[256];            /* non-empty: the request failed (done is set too) */
    int error_status;           /* its HTTP status: 500 failed, 503 server stopping, 499 cancelled */
    double t_submit, t_start, t_first, t_end; /* nx_time_s(): queued, admitted, first token, done */
} nx_srv_req;

/* A new request with 1 reference and empty shared state; NULL on out-of-memory.  Its condition
 * variable runs on CLOCK_MONOTONIC (nx_srv_req_wait_locked). */
nx_srv_req *nx_srv_req_new(void);
/* A new request with t's settings (everything "set before submit" but the prompt, the id and
 * tool-call state: sampling and logit bias, limits, stop strings, flags); NULL on out-of-memory. */
nx_srv_req *nx_srv_req_clone(const nx_srv_req *t);
void nx_srv_req_ref(nx_srv_req *r);
/* Drops a reference; frees the request when it was the last. */
void nx_srv_req_unref(nx_srv_req *r);

/* Adds a stop string (ignored when empty); keep: the text ends after it rather than before.
 * Status 400 past NX_SRV_MAX_STOP strings (max_strings: the count allowed, NX_SRV_MAX_STOP for a
 * client's, one more for the server's own) or NX_SRV_MAX_STOP_BYTES bytes, 500 out of memory;
 * the message names `stop`. */
bool nx_srv_req_add_stop(nx_srv_req *r, const char *s, bool keep, int max_strings, int *status, nx_err *err);
/* Builds the stop-string automaton once all stop strings are in (parsing; before submit).
 * False on out-of-memory. */
bool nx_srv_req_stops_build(nx_srv_req *r, nx_err *err);
/* Engine side, with r->mu held: appends generated text and updates safe_len; when a stop
 * string appears, cuts the text at its start (or after it: stop_keep) and returns true (the
 * request is then finished with reason "stop").  Costs O(n) whatever the stop strings (the
 * automaton is advanced by the new bytes only); the first stop string to end in the text wins,
 * the longest of those ending at the same byte (stop.h). */
bool nx_srv_req_append_locked(nx_srv_req *r, const char *s, size_t n);
/* Engine side, with r->mu held: marks the request finished (reason or error message; an error
 * has status 500) and releases all remaining text to the reader. */
/* Engine side, with r->mu held: records a generated token (and its log-probabilities when the
 * request asked for them; lp may be NULL otherwise).  False on out of memory. */
bool nx_srv_req_push_token_locked(nx_srv_req *r, int32_t tok, const nextn_logprob *lp);
/* Engine side, with r->mu held: marks the request finished (reason or error message) and
 * releases all remaining text to the reader. */
void nx_srv_req_finish_locked(nx_srv_req *r, const char *reason, const char *error);
/* The same for an error with its HTTP status (503 stopping, 499 cancelled by the client). */
void nx_srv_req_fail_locked(nx_srv_req *r, int status, const char *error);
/* With r->mu held: waits on r->cv at most `seconds`; returns false on time-out. */
bool nx_srv_req_wait_locked(nx_srv_req *r, double seconds);

#endif
