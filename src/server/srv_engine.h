/* srv_engine.h - the decoding engine behind `nextn serve`: one thread, n_slots parallel
 * sequences, continuous batching.
 *
 * One generation path: the engine owns one nextn_spec with one sequence per slot; plain mode is
 * that generator with drafting off (use_mtp false: no MTP head, no rollback slots), --spec mtp
 * the same with the MTP head.  A newly admitted slot's prompt is decoded on its own, in parts of
 * at most n_batch tokens (nextn_spec_prefill_seq_part, with the request's sampler), one part per
 * iteration; every iteration then advances all generating slots together
 * (nextn_spec_step_seqs): one batch with one row per slot in plain mode; with --spec mtp one MTP
 * draft pass per draft position and ONE verify batch over all slots' [last, drafts] rows
 * (exact: greedy output == plain, sampled output follows the target distribution per request).
 * Requests wait in a FIFO queue while all slots are busy.  A finished slot's sequence is kept
 * for the prompt cache or cleared for the next request.
 *
 * Prompt cache (on unless no_cache; a request opts out with "cache_prompt": false): a slot keeps
 * its sequence after a request (the tokens it holds: prompt + reply, less the last token) and up
 * to n_ckpt in-place checkpoints (nextn_state, NEXTN_STATE_IN_PLACE: the recurrent state, and
 * in speculative mode the driver's rows; attention and MTP cells stay in the sequence) taken at
 * the position a request starts decoding from (the end of the previous reply), every
 * ckpt_every prompt tokens, and one token before the end of each prompt.  A new request goes to
 * the free slot with the longest reusable prefix: the sequence itself when all it holds is a
 * prefix of the prompt, else the latest checkpoint at or before the shared prefix (at most
 * prompt length - 1: the last prompt token is always decoded, its logits give the first
 * token); only the rest is decoded.  Among equal matches the least recently used slot is
 * taken.  Restoring a checkpoint drops those beyond it; when a slot has n_ckpt, the oldest
 * goes.  Output is identical with and without the cache (the state restored is bit-identical
 * to the one decoding the prefix gives, docs/forward.md).
 *
 * Several choices (OpenAI "n" > 1): the first choice is queued carrying the others
 * (nx_srv_req.group) and admitted when 1 + n_group slots are free (it holds up the requests
 * behind it meanwhile).  The first choice decodes its prompt (prompt cache as usual) up to the
 * last token; that FULL state is copied into the other choices' slots, and every choice decodes
 * the last prompt token itself with its own sampler (choice k: seed + k), so each choice
 * equals the n = 1 request with its seed and the prompt is decoded once (+ 1 token per further
 * choice).  Choices waiting for a first choice that failed or was cancelled fail with its error.
 *
 * Threading: the engine thread owns every nextn object it creates; other threads only call
 * submit / load / stop, which take the engine's mutex, and talk to requests through their own
 * mutex (srv_request.h).
 */
#ifndef NX_SRV_ENGINE_H
#define NX_SRV_ENGINE_H

#include "nextn_internal.h"
#include "nextn.h"
#include "server/srv_request.h"

typedef struct nx_srv_engine_params {
    int32_t n_slots;        /* parallel sequences (>= 1) */
    int32_t n_ctx;          /* positions per slot */
    int32_t n_batch;        /* rows per decode call at most */
    int32_t n_threads;      /* <= 0: default */
    nextn_kv_type kv_type;      /* K cache type */
    nextn_kv_type kv_type_v;    /* V cache type */
    int32_t max_queue;      /* requests waiting for a slot at most (beyond: submit fails) */
    bool spec;              /* speculative decoding with the MTP head */
    nextn_spec_params spec_params;
    /* prompt cache (see "Prompt cache" above) */
    bool no_cache;          /* true: every request decodes its whole prompt */
    int32_t n_ckpt;         /* in-place checkpoints per slot at most (0..NX_SRV_MAX_CKPT) */
    int32_t ckpt_every;     /* a checkpoint every this many prompt tokens (0: only at prompt ends) */
} nx_srv_engine_params;

#define NX_SRV_MAX_CKPT 64

typedef struct nx_srv_engine nx_srv_engine;

/* Creates the context(s) and starts the engine thread.  The model must outlive the engine. */
bool nx_srv_engine_start(nx_srv_engine **out, const nextn_model *model, const nx_srv_engine_params *p,
                         nx_err *err);
/* Queues a request (takes its own reference).  Fails when the queue is full or the engine
 * is stopping; the message says which. */
bool nx_srv_engine_submit(nx_srv_engine *e, nx_srv_req *r, nx_err *err);
/* The client of r went away: a queued r leaves the queue at once (finished with status 499), a
 * running one is dropped by the engine at its next iteration.  r must have been submitted. */
void nx_srv_engine_cancel(nx_srv_engine *e, nx_srv_req *r);
/* Slot and queue occupancy, for /health. */
void nx_srv_engine_load(nx_srv_engine *e, int *idle, int *busy, int *queued);
/* Prompt cache: bytes of one checkpoint (the recurrent state, and in speculative mode the
 * driver's rows) and the totals so far. */
typedef struct nx_srv_cache_stats {
    uint64_t ckpt_bytes;        /* one checkpoint */
    int32_t n_ckpt;             /* per slot at most */
    int64_t hits;               /* requests that reused > 0 prompt tokens */
    int64_t reused_tokens;      /* prompt tokens not decoded thanks to the cache */
    int64_t prompt_tokens;      /* prompt tokens of all admitted requests */
    int64_t restores;           /* checkpoints restored */
} nx_srv_cache_stats;
void nx_srv_engine_cache_stats(nx_srv_engine *e, nx_srv_cache_stats *st);

/* Totals since the start over the requests that left a slot (for GET /metrics; the prompt
 * cache's are nx_srv_engine_cache_stats). */
typedef struct nx_srv_engine_stats {
    int64_t prompt_tokens;       /* prompt tokens decoded (those reused from the prompt cache excluded) */
    double prompt_seconds;       /* admission to first token, summed */
    int64_t predicted_tokens;    /* tokens generated */
    double predicted_seconds;    /* first token to the last, summed */
    int64_t draft_tokens;        /* speculative mode: draft tokens verified */
    int64_t draft_accepted;      /* ... and accepted */
    int32_t n_slots, busy, queued; /* now */
} nx_srv_engine_stats;
void nx_srv_engine_get_stats(nx_srv_engine *e, nx_srv_engine_stats *st);
/* ---- slots (llama-server's GET /slots and POST /slots/{id}?action=save|restore|erase) ----
 * Run by the engine thread between iterations, before admission; the caller blocks until done.
 * save / restore / erase wait while the slot serves a request (as llama-server defers them).
 *   save:    the slot's sequence (what its prompt cache holds: prompt and reply but the last
 *            token) as a FULL state with its tokens, to `path` (nextn_state_save: the attention
 *            KV, the recurrent state and, in speculative mode, the MTP KV and the driver's rows);
 *   restore: the file's state into the slot (its checkpoints dropped), so a request whose
 *            prompt starts with the file's tokens continues from it; a file of another model,
 *            format version or KV type, or one longer than a slot, is refused;
 *   erase:   the slot's sequence and checkpoints are dropped.
 * n_tokens: tokens saved / restored / erased; n_bytes: the file's size. */
typedef enum { NX_SRV_SLOT_SAVE, NX_SRV_SLOT_RESTORE, NX_SRV_SLOT_ERASE } nx_srv_slot_action;
typedef struct nx_srv_slot_result {
    int32_t n_tokens;
    uint64_t n_bytes;
    double ms;
} nx_srv_slot_result;
/* On failure *status is the HTTP status (400: no such slot, a bad or foreign file; 404: no
 * such file; 500: cannot write; 503: stopping) and err says why, naming the file by `name`. */
bool nx_srv_engine_slot_action(nx_srv_engine *e, int32_t id_slot, nx_srv_slot_action action, const char *path,
                               const char *name, nx_srv_slot_result *res, int *status, nx_err *err);

/* One slot as GET /slots shows it: the request it serves, or the last one it served. */
typedef struct nx_srv_slot_info {
    int32_t id;
    bool processing;
    int32_t n_ctx;
    int32_t n_tokens;           /* positions its sequence holds */
    bool has_req;               /* the fields below describe a request */
    char id_task[48];           /* that request's id */
    nextn_sampler_params smp;   /* its sampling (logit_bias not kept: NULL) */
    int32_t n_logit_bias;
    int32_t max_tokens;
    bool stream, ignore_eos;
    int32_t n_decoded;          /* tokens generated so far */
} nx_srv_slot_info;
/* Fills info[0 .. n_slots) (the caller's array of nx_srv_engine_n_slots entries). */
bool nx_srv_engine_slots(nx_srv_engine *e, nx_srv_slot_info *info, nx_err *err);
int32_t nx_srv_engine_n_slots(const nx_srv_engine *e);
bool nx_srv_engine_is_spec(const nx_srv_engine *e);
/* Stops the thread and fails every unfinished request with status 503 ("server is shutting
 * down"); later submits fail.  The engine stays allocated (other threads may still call
 * submit / load) until nx_srv_engine_free.  NULL is allowed. */
void nx_srv_engine_stop(nx_srv_engine *e);
/* Frees a stopped engine (stops it first if needed).  NULL is allowed. */
void nx_srv_engine_free(nx_srv_engine *e);

#endif
