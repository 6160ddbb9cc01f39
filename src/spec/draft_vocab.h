/* draft_vocab.h - the token list of a reduced-vocabulary MTP draft head (API field draft_vocab = K).
 *
 * The MTP head may compute its logits over only K tokens (mtp.h, nx_mtp_head_set_draft_vocab):
 * the draft then never proposes a token outside the list, the target still verifies over the
 * whole vocabulary, so the output is unchanged (greedy) or follows the same distribution
 * (sampling: the draft distribution q is the MTP softmax over the K tokens, 0 elsewhere).
 * Which K tokens: the K most frequent in a frequency file written by `nextn draft-vocab`
 * (tokenising a text with the model's tokenizer), or without a file the K lowest ids (in a
 * byte-level BPE vocabulary the id is the merge rank, and earlier merges joined more frequent
 * pairs of the tokenizer's own training text; the special tokens, at the end, are left out).
 *
 * File format (text, one record a line, '\n' line ends):
 *     nextn-draft-vocab 1
 *     n_vocab <V>                    tokens of the tokenizer the counts were made with
 *     fingerprint <16 hex digits>    nx_draft_vocab_fingerprint of that tokenizer, or "none"
 *     tokens <N>                     tokens counted
 *     source <free text>             what was counted (informative)
 *     <id> <count>                   ... most frequent first, ties by lower id; ids that never
 *                                    occurred are not listed; each id at most once
 * Lines starting with '#' are comments.  A file made for another vocabulary (V or fingerprint
 * differ) is refused with an error naming both.  When K exceeds the listed ids, the rest are
 * the unlisted ids in increasing order (the same order as the fallback).
 */
#ifndef NX_DRAFT_VOCAB_H
#define NX_DRAFT_VOCAB_H

#include <stdio.h>

#include "base/common.h"
#include "tokenizer/tokenizer.h"

/* FNV-1a 64 over every token's length and text, in id order (0 for t == NULL). */
uint64_t nx_draft_vocab_fingerprint(const nx_tokenizer *t);

/* Writes counts[0..n_vocab) as a frequency file (format above). */
bool nx_draft_vocab_save(const char *path, const uint64_t *counts, uint32_t n_vocab, uint64_t fingerprint,
                         const char *source, nx_err *err);

/* Chooses the K draft tokens for a model with n_vocab tokens and the given tokenizer
 * fingerprint (0 = the model has no tokenizer: only V is checked): from the file at `path`, or
 * the K lowest ids when path is NULL.  ids[0..K) receives them in increasing id order.
 * Errors: K out of 1..n_vocab, unreadable or malformed file (naming the line), a file made for
 * another vocabulary. */
bool nx_draft_vocab_select(const char *path, uint32_t n_vocab, uint64_t fingerprint, int32_t K, int32_t *ids,
                           nx_err *err);
/* The frequency file found automatically beside a model: "<path minus .gguf>.draft-vocab.txt"
 * (models/nextn-demo.gguf -> models/nextn-demo.draft-vocab.txt).  *found false (and true
 * returned) when there is none; false only when the name would not fit in out. */
bool nx_draft_vocab_sibling(const char *model_path, char *out, size_t out_len, bool *found, nx_err *err);

/* K used with an automatically found file: a quarter of the vocabulary (rounded up).  On the
 * demo model (V = 4096) K = 1024 made a draft step 0.28x the whole-vocabulary one and cost
 * ~2.5 points of acceptance (docs/mtp.md). */
int32_t nx_draft_vocab_auto_k(uint32_t n_vocab);

/* The automatic draft vocabulary, for a caller that set neither a size nor a file: with a
 * frequency file beside the model (nx_draft_vocab_sibling), its nx_draft_vocab_auto_k(n_vocab)
 * most frequent tokens - *K = that, file = the file's path; else *K = 0 (whole vocabulary).
 * model_path may be NULL (no file).  False only when the path does not fit in file. */
bool nx_draft_vocab_auto(const char *model_path, uint32_t n_vocab, char *file, size_t file_len, int32_t *K,
                         nx_err *err);
/* Prefixes err for a failure to use the automatically found file (says how to do without it);
 * returns false. */
bool nx_draft_vocab_auto_failed(nx_err *err);

/* K used when no frequency file is given or found: the V/4 lowest ids (merge rank) for a
 * vocabulary of NX_DRAFT_VOCAB_RANK_MIN_V tokens or more, else 0 (the whole vocabulary).  On the
 * demo model (V = 4096, 16 held-out prompts x 128 tokens, greedy, draft-max 3) the V/4 lowest
 * ids kept 99 % of the frequency file's tokens per verify step (V/8: 81 %, V/16: 39 %: the 256
 * byte tokens fill the list); on a large vocabulary a quarter holds far more than the byte
 * tokens, and the draft head's output layer is most of a draft step (docs/mtp.md). */
#define NX_DRAFT_VOCAB_RANK_MIN_V 32768u
int32_t nx_draft_vocab_default_k(uint32_t n_vocab);

/* The same from an open stream (f NULL = the lowest ids); `name` names it in messages. */
bool nx_draft_vocab_select_stream(FILE *f, const char *name, uint32_t n_vocab, uint64_t fingerprint, int32_t K,
                                  int32_t *ids, nx_err *err);

#endif
