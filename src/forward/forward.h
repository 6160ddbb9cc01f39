/* forward.h - batched forward pass of the qwen35 trunk, and the per-sequence memory it uses.
 *
 * A context (nx_ctx) binds a model to caches sized for n_ctx positions x n_seq sequences and to
 * scratch buffers that grow with the largest batch seen (no allocation per token).  One call to
 * nx_forward() evaluates a batch of T rows; row i is token[i] of sequence seq_id[i] at position
 * pos[i].  Rows of different sequences may be interleaved in any order; the rows of one sequence
 * must appear in increasing position order and continue that sequence exactly: the first row
 * of sequence s has pos == nx_ctx_n_past(ctx, s), the next pos+1, and so on.
 *
 * Outputs, valid until the next nx_forward / nx_ctx_free (pointers into the context, no copy):
 *   nx_ctx_logits(ctx, i)  n_vocab floats for row i if the batch asked logits for it, else NULL;
 *   nx_ctx_hidden(ctx)     [T][E] post-final-norm hidden state of EVERY row (the MTP input).
 *
 * Recurrent (Gated DeltaNet) state keeps 1 + n_snapshots slots per sequence (see gdn.h): after
 * a batch of T rows of a sequence, the state after each of its last min(T, 1 + n_snapshots)
 * tokens is kept, so dropping r < T of those tokens again (nx_ctx_seq_rollback) is O(1).
 */
#ifndef NX_FORWARD_H
#define NX_FORWARD_H

#include "base/common.h"
#include "forward/kv_cache.h"
#include "model/model.h"
#include "base/threads.h"

typedef struct nx_batch {
    int32_t n_tokens;
    const int32_t *token;   /* [n_tokens] */
    const int32_t *pos;     /* [n_tokens] */
    const int32_t *seq_id;  /* [n_tokens]; NULL = all rows sequence 0 */
    const int8_t *logits;   /* [n_tokens] non-zero = compute logits for that row; NULL = last row only */
} nx_batch;

typedef struct nx_ctx_params {
    int32_t n_ctx;          /* positions per sequence (KV cells) */
    int32_t n_seq;          /* sequences */
    int32_t n_snapshots;    /* R: extra recurrent-state slots per sequence for rollback (0 = none) */
    nx_kv_type kv_type;     /* attention K cache type: NX_KV_F16 (default), F32, Q8_0, Q4_0 */
    nx_kv_type kv_type_v;   /* attention V cache type (the same choices; default F16).  Q8_0 / Q4_0
                             * need head_dim % 32 == 0 */
} nx_ctx_params;

typedef struct nx_ctx nx_ctx;

typedef struct nx_ctx_memory {
    size_t kv_bytes;        /* attention K+V for all layers and sequences */
    size_t state_bytes;     /* recurrent conv + delta state, all slots */
    size_t scratch_bytes;   /* activation scratch at the largest batch so far */
} nx_ctx_memory;

nx_ctx_params nx_ctx_default_params(void); /* n_ctx 4096, n_seq 1, n_snapshots 0, F16 KV */

/* The pool may be shared by several contexts (not concurrently); the model must outlive the ctx. */
bool nx_ctx_create(nx_ctx **out, const nx_model *model, const nx_ctx_params *params, nx_pool *pool, nx_err *err);
void nx_ctx_free(nx_ctx *ctx);

/* Evaluates the batch.  Invalid batches are rejected before anything changes.  A failure after
 * validation (only out-of-memory growing scratch) leaves the batch's sequences undefined: clear
 * them (nx_ctx_seq_clear) before reuse. */
bool nx_forward(nx_ctx *ctx, const nx_batch *batch, nx_err *err);
/* Same, but row t's input is embd[t*E .. t*E+E) instead of the embedding of token[t] (token[]
 * is still validated).  The MTP head (mtp.h) feeds its eh_proj output this way. */
bool nx_forward_embd(nx_ctx *ctx, const nx_batch *batch, const float *embd, nx_err *err);

const float *nx_ctx_logits(const nx_ctx *ctx, int32_t row);
const float *nx_ctx_hidden(const nx_ctx *ctx);
int32_t nx_ctx_n_rows(const nx_ctx *ctx);                 /* T of the last batch */
const nx_model *nx_ctx_model(const nx_ctx *ctx);
const nx_ctx_params *nx_ctx_params_of(const nx_ctx *ctx);
int nx_ctx_n_threads(const nx_ctx *ctx); /* threads of the context's pool */
nx_ctx_memory nx_ctx_memory_usage(const nx_ctx *ctx);

/* ---- per-sequence memory ----------------------------------------------------------------- */
int32_t nx_ctx_n_past(const nx_ctx *ctx, int32_t seq);    /* positions decoded so far */
/* Forget everything of seq. */
bool nx_ctx_seq_clear(nx_ctx *ctx, int32_t seq, nx_err *err);
/* Drop the last r decoded positions of seq: attention KV is truncated and the recurrent state
 * selects the snapshot slot holding the state after the kept tokens (O(1), no copy).  Possible
 * when r < the number of rows the last batch of seq had and r <= n_snapshots (cumulative over
 * successive rollbacks); otherwise an error says so and nothing changes. */
bool nx_ctx_seq_rollback(nx_ctx *ctx, int32_t seq, int32_t r, nx_err *err);
/* Keep positions < from_pos: no-op if from_pos >= n_past, clear if from_pos == 0, else a
 * rollback of n_past - from_pos (same limits). */
bool nx_ctx_seq_truncate(nx_ctx *ctx, int32_t seq, int32_t from_pos, nx_err *err);
/* dst becomes a copy of src's current state (KV and current recurrent slot; dst has no
 * snapshots to roll back to afterwards). */
bool nx_ctx_seq_copy(nx_ctx *ctx, int32_t src, int32_t dst, nx_err *err);
/* How many positions seq can currently roll back in O(1). */
int32_t nx_ctx_seq_max_rollback(const nx_ctx *ctx, int32_t seq);

#endif
