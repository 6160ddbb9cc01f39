/* seq_ckpt.h - rolling a sequence back further than its snapshot slots allow.
 *
 * nx_ctx_seq_rollback (forward.h) is O(1) but limited: at most R = n_snapshots tokens, and only
 * tokens of the last batch.  Anything further ("to an arbitrary earlier position") needs the
 * recurrent state at some earlier point: a checkpoint.  A checkpoint copies the CURRENT
 * recurrent state (conv + delta, every GDN layer) of one sequence and remembers its position;
 * attention KV needs no copy (cells < pos stay valid as long as the sequence is not rewound
 * below pos, which nx_ctx_seq_rewind checks).
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
    int32_t seq;
    int32_t pos;       /* positions decoded when saved (the state is "after token pos-1") */
    size_t conv_n, ssm_n;
    int n_layer;
    float *conv;       /* [n_layer][conv_n] */
    float *ssm;        /* [n_layer][ssm_n] */
} nx_seq_ckpt;

typedef enum nx_rewind_kind {
    NX_REWIND_NONE = 0,
    NX_REWIND_SNAPSHOT,
    NX_REWIND_REDECODE,
    NX_REWIND_CLEAR,
} nx_rewind_kind;

const char *nx_rewind_kind_name(nx_rewind_kind k);

/* Saves (or overwrites) a checkpoint of seq's current state.  ck must be zeroed before first use. */
bool nx_seq_ckpt_save(nx_seq_ckpt *ck, const nx_ctx *ctx, int32_t seq, nx_err *err);
void nx_seq_ckpt_free(nx_seq_ckpt *ck);

/* See above.  ckpt may be NULL (then only NONE / SNAPSHOT / CLEAR are possible). */
bool nx_ctx_seq_rewind(nx_ctx *ctx, int32_t seq, int32_t to_pos, const nx_seq_ckpt *ckpt, const int32_t *tokens,
                       nx_rewind_kind *how, nx_err *err);

#endif
