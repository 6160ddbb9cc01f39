/* mtp.h - the MTP (NextN) draft head: weights, loading, and its own attention-only KV cache.
 *
 * Per row (token x, position p, sequence s, previous hidden h), as llama.cpp's graph_mtp
 * (src/models/qwen35.cpp) computes it:
 *     x0   = eh_proj · [ rms(embed(x)) ⊙ enorm ; rms(h) ⊙ hnorm ]        (embedding first)
 *     x1   = x0 + ATTN_M(rms(x0) ⊙ attn_norm)       (MTP KV cache, RoPE position p)
 *     x2   = x1 + FFN_M(rms(x1) ⊙ post_attention_norm)
 *     hout = rms(x2) ⊙ head_norm                     (exported: chains the next draft step)
 *     logits = head · hout
 * h is always a POST-final-norm hidden: the trunk's (nx_ctx_hidden) for rows mirroring the
 * target, or the head's own hout for chained draft rows.
 *
 * Implementation: the block is run by the ordinary forward pass (forward.c) on a one-layer
 * "view" model whose only layer is the MTP block, whose final norm is head_norm and whose LM
 * head is the MTP head, fed with x0 through nx_batch.embd.  So the MTP context is an nx_ctx
 * with no recurrent layers and its own KV cache (kv_cache.h), with every guarantee of
 * nx_forward (batched rows, several sequences, positions continuing each sequence).
 *
 * Where the weights come from (nx_mtp_head_open):
 *   1. an explicit file (mtp_model): a full model with an MTP block, or an "mtp-only" file
 *      (token_embd, output_norm, output, blk.L.*; trunk tensors absent);
 *   2. the trunk model itself when it was loaded with its MTP block (nextn_predict_layers 1);
 *   3. a sibling file in the trunk's folder: "mtp-<trunk file name>", else the only mtp-*.gguf.
 * Shapes, vocabulary and norm epsilon are checked against the trunk, with errors naming both
 * files.  When there is none, *out is NULL and `notice` says why (plain decoding).
 */
#ifndef NX_MTP_H
#define NX_MTP_H

#include "base/common.h"
#include "forward/forward.h"
#include "model/model.h"
#include "base/threads.h"

typedef struct nx_mtp_head {
    nx_model view;          /* one-layer model: layers = &src->mtp.layer, head/norm of the MTP */
    const nx_model *src;    /* model holding the MTP weights (trunk, or owned_file) */
    nx_model *owned_file;   /* separately loaded MTP file, or NULL */
    char source[512];       /* where the weights came from, for messages */
    /* reduced draft vocabulary (nx_mtp_head_set_draft_vocab); n_draft_vocab 0 = the whole one */
    int32_t n_draft_vocab;  /* K */
    int32_t *draft_ids;     /* [K] token id of draft logit k, increasing */
    nx_weight draft_head;   /* {E, K}: rows draft_ids[] of the MTP head, repacked (owned) */
    void *draft_rows;       /* storage of draft_head */
} nx_mtp_head;

/* Builds a head from a model that has its MTP block bound (m->mtp.present).  `trunk` (may be
 * the same model) is what the head drafts for: its E and vocabulary must match. */
bool nx_mtp_head_from_model(nx_mtp_head *h, const nx_model *m, const nx_model *trunk, const char *where, nx_err *err);

/* Resolves the MTP source as described above.  trunk_path may be NULL (no sibling search);
 * mtp_path NULL = automatic.  On success with no MTP available, *out = NULL and notice holds a
 * one-line explanation.  An explicit mtp_path that is missing/broken/mismatched is an error. */
bool nx_mtp_head_open(nx_mtp_head **out, const nx_model *trunk, const char *trunk_path, const char *mtp_path,
                      char *notice, size_t notice_len, nx_err *err);
void nx_mtp_head_free(nx_mtp_head *h);

/* Restricts the head's logits to the K tokens ids[0..K) (distinct, in range, any order; see
 * draft_vocab.h for how they are chosen): their rows of the LM head are copied once into a
 * K x E matrix of the same type, so a draft pass reads K rows instead of n_vocab.  Contexts
 * created afterwards (nx_mtp_create) return K logits per row (nx_mtp_n_logits) whose token ids
 * are nx_mtp_logit_ids.  K == 0 goes back to the whole vocabulary.  Call before nx_mtp_create. */
bool nx_mtp_head_set_draft_vocab(nx_mtp_head *h, const int32_t *ids, int32_t K, nx_err *err);

/* Checks that an MTP model `m` fits `trunk` (E, vocabulary, attention geometry, eps). */
bool nx_mtp_check_compatible(const nx_model *m, const char *m_where, const nx_model *trunk, nx_err *err);

/* The sibling MTP file of a model: "mtp-<model file name>" in its folder, else the only
 * mtp-*.gguf there; *found = false if none.  Several candidates without the exact name is an
 * error (we would have to guess). */
bool nx_mtp_find_sibling(const char *trunk_path, char *out, size_t out_len, bool *found, nx_err *err);

/* Writes an mtp-only GGUF (the MTP block with the embeddings, final norm and head) with the MTP block of the model file src_path:
 * every key, token_embd, output_norm, output (if untied) and blk.L.*.  Used by tests and by
 * anyone who wants to ship the head separately. */
bool nx_mtp_extract(const char *src_path, const char *dst_path, nx_err *err);

/* ---- the MTP context -------------------------------------------------------------------- */
typedef struct nx_mtp nx_mtp;

/* n_ctx / n_seq mirror the target context's; kv_type / kv_type_v are the MTP K / V cache types. */
bool nx_mtp_create(nx_mtp **out, const nx_mtp_head *head, int32_t n_ctx, int32_t n_seq, nx_kv_type kv_type,
                   nx_kv_type kv_type_v, nx_pool *pool, nx_err *err);
void nx_mtp_free(nx_mtp *m);

/* One batched MTP pass: row i = (token[i], pos[i], seq_id[i], hprev rows h + i*E).  Positions
 * follow nx_forward's rule (each sequence continues its MTP cache).  logits[i] != 0 asks
 * logits for that row (NULL = none).  h may not alias the outputs. */
bool nx_mtp_forward(nx_mtp *m, int32_t n, const int32_t *token, const int32_t *pos, const int32_t *seq_id,
                    const float *h, const int8_t *logits, nx_err *err);
const float *nx_mtp_logits(const nx_mtp *m, int32_t row);   /* NULL unless asked; nx_mtp_n_logits floats */
int32_t nx_mtp_n_logits(const nx_mtp *m);                    /* n_vocab, or K with a draft vocabulary */
const int32_t *nx_mtp_logit_ids(const nx_mtp *m);            /* token id of each logit; NULL = identity */
const float *nx_mtp_hidden(const nx_mtp *m);                /* [n][E] hout of every row */
int32_t nx_mtp_n_past(const nx_mtp *m, int32_t seq);
bool nx_mtp_truncate(nx_mtp *m, int32_t seq, int32_t from_pos, nx_err *err); /* keep positions < from_pos */
bool nx_mtp_clear(nx_mtp *m, int32_t seq, nx_err *err);
int32_t nx_mtp_n_embd(const nx_mtp *m);
int32_t nx_mtp_n_vocab(const nx_mtp *m);
nx_ctx *nx_mtp_ctx(nx_mtp *m);                               /* the underlying one-layer context */

#endif
