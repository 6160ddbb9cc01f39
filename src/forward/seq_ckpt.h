/* seq_ckpt.h - checkpoints of one sequence's state, and rolling back beyond the snapshot slots.
 *
 * A checkpoint (nx_seq_ckpt) holds a sequence's state at a position pos ("after token pos-1"):
 *   - the recurrent state of every GDN layer (conv + delta), materialised: a checkpoint taken
 *     while replay rows are pending (after a rollback) holds the current state
 *     (nx_rstate_ssm_current), bit-identical to having stopped there;
 *   - with_kv: the attention K/V cells [0, pos) of every attention layer, as stored (cache type).
 * A checkpoint with KV restores into any sequence of any context over the same model with the
 * same KV type (nx_seq_ckpt_restore copies the cells).  One without KV ("in place") restores
 * only into the sequence it was taken from, while that sequence still holds positions
 * [0, pos) with the same tokens: its attention cells are reused (truncated to pos) and only
 * the recurrent state is copied back.  The library cannot see tokens; keeping that promise is
 * the caller's part (the server compares token lists).  Attention KV can be cut to any
 * prefix, the recurrent state exists only at the checkpoint's position: to reach a position
 * q > pos, restore and decode tokens pos..q-1 (nx_ctx_seq_rewind does that).
 *
 * nx_ctx_seq_rewind(ctx, seq, to_pos, ckpt, tokens) brings seq back to to_pos and reports how:
 *   NX_REWIND_NONE      to_pos >= n_past: nothing to do;
 *   NX_REWIND_SNAPSHOT  within the snapshot slots: O(1) slot select (nx_ctx_seq_rollback);
 *   NX_REWIND_REDECODE  restore the checkpoint (ckpt->pos <= to_pos) and re-decode the tokens
 *                       at positions ckpt->pos .. to_pos-1 (tokens[] is indexed by position);
 *                       afterwards the context's outputs (hidden rows, last row's logits) are
 *                       those of the last re-decoded chunk;
 *   NX_REWIND_CLEAR     to_pos == 0.
 * Anything else (no usable checkpoint) is an error and nothing changes.
 */
#ifndef NX_SEQ_CKPT_H
#define NX_SEQ_CKPT_H

#include "forward/forward.h"

typedef struct nx_seq_ckpt {
    int32_t seq;       /* the sequence it was taken from */
    int32_t pos;       /* positions decoded when taken (the state is "after token pos-1") */
    size_t conv_n, ssm_n;
    int n_layer;       /* GDN layers (0 in a context without recurrent layers, e.g. the MTP's) */
    float *conv;       /* [n_layer][conv_n] */
    float *ssm;        /* [n_layer][ssm_n] */
    bool has_kv;       /* k, v hold cells [0, pos) */
    int kv_layers, kv_dim;
    nx_kv_type kv_type_k, kv_type_v;
    size_t kv_cap_k, kv_cap_v; /* bytes allocated for k and for v */
    uint8_t *k, *v;    /* [kv_layers][pos][kv_dim] in kv_type_k / kv_type_v */
} nx_seq_ckpt;

typedef enum nx_rewind_kind {
    NX_REWIND_NONE = 0,
    NX_REWIND_SNAPSHOT,
    NX_REWIND_REDECODE,
    NX_REWIND_CLEAR,
} nx_rewind_kind;

const char *nx_rewind_kind_name(nx_rewind_kind k);

/* Takes (or overwrites, reusing its buffers) a checkpoint of seq's current state, with the
 * attention cells when with_kv.  ck must be zeroed before first use.  The context is not
 * changed. */
bool nx_seq_ckpt_take(nx_seq_ckpt *ck, const nx_ctx *ctx, int32_t seq, bool with_kv, nx_err *err);
/* The same without KV (an in-place checkpoint). */
bool nx_seq_ckpt_save(nx_seq_ckpt *ck, const nx_ctx *ctx, int32_t seq, nx_err *err);
/* Puts seq in the checkpoint's state: n_past becomes ck->pos, the recurrent state is the
 * checkpoint's (no snapshots to roll back to afterwards).  With KV: any sequence (its cells
 * are replaced).  Without: only ck->seq, and only while it holds >= ck->pos positions (cells
 * beyond are dropped).  Shapes and KV type must match the context.  On error nothing changes. */
bool nx_seq_ckpt_restore(nx_ctx *ctx, int32_t seq, const nx_seq_ckpt *ck, nx_err *err);
/* Checks that the checkpoint's shapes fit ctx (layers, state sizes, KV geometry and type). */
bool nx_seq_ckpt_fits(const nx_ctx *ctx, const nx_seq_ckpt *ck, nx_err *err);
/* Bytes a checkpoint of ctx at position pos occupies (recurrent state + cells when with_kv). */
size_t nx_seq_ckpt_bytes_for(const nx_ctx *ctx, int32_t pos, bool with_kv);
/* Bytes this checkpoint uses for its content (recurrent state + cells [0, pos) if any). */
size_t nx_seq_ckpt_bytes(const nx_seq_ckpt *ck);
void nx_seq_ckpt_free(nx_seq_ckpt *ck);

/* See above.  ckpt may be NULL (then only NONE / SNAPSHOT / CLEAR are possible). */
bool nx_ctx_seq_rewind(nx_ctx *ctx, int32_t seq, int32_t to_pos, const nx_seq_ckpt *ckpt, const int32_t *tokens,
                       nx_rewind_kind *how, nx_err *err);

#endif
