/* nextn.h - the public C API of nextn, a CPU inference engine for Qwen3.5 hybrid models.
 *
 * Everything is reached through opaque handles:
 *   nextn_model      weights (mmapped GGUF) + tokenizer; immutable, shareable by contexts
 *   nextn_context    per-sequence caches (attention KV, recurrent state) + a thread pool
 *   nextn_sampler    sampling chain + RNG + penalty history (one per sequence)
 *   nextn_tokenizer  owned by its model (nextn_model_tokenizer)
 *   nextn_stream     streaming detokenizer: emits whole UTF-8 characters only
 *
 * Errors: a fallible function returns bool (true = success) and takes a `nextn_error *` last
 * (may be NULL); on failure msg names the file / field / limit involved.  Nothing in the
 * library prints or exits.  There is no global state: handles are independent, a context or
 * sampler must not be used from two threads at once; a model may be shared by contexts on
 * different threads, but nextn_tokenize must not run on the same tokenizer from two threads at
 * once (it keeps a word cache); detokenizing is safe concurrently.
 *
 * Typical generation loop:
 *     nextn_model_load(&m, "model.gguf", NULL, &e);
 *     nextn_context_create(&c, m, NULL, &e);
 *     nextn_tokenize(nextn_model_tokenizer(m), text, len, true, false, ids, cap, &n, &e);
 *     nextn_decode(c, &(nextn_batch){.n_tokens = n, .token = ids, .pos = pos}, &e);  // logits of last row
 *     nextn_sampler_sample(s, nextn_get_logits(c, n - 1), &tok, &e); ...
 */
#ifndef NEXTN_H
#define NEXTN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define NEXTN_ERROR_MAX 1024

typedef struct nextn_error {
    char msg[NEXTN_ERROR_MAX];
} nextn_error;

typedef struct nextn_model nextn_model;
typedef struct nextn_context nextn_context;
typedef struct nextn_sampler nextn_sampler;
typedef struct nextn_tokenizer nextn_tokenizer;
typedef struct nextn_stream nextn_stream;

const char *nextn_version(void);

/* ---- model ------------------------------------------------------------------------------- */

/* Progress of a long operation: item (1-based, the one in progress) of n_items, bytes of
 * total_bytes done so far, the current item's name (may be NULL). */
typedef struct nextn_progress {
    uint64_t item, n_items;
    uint64_t bytes, total_bytes;
    const char *name;
} nextn_progress;
typedef void (*nextn_progress_fn)(void *user, const nextn_progress *p);

typedef struct nextn_model_params {
    bool load_mtp;             /* bind the MTP block when the file has one (default false) */
    nextn_progress_fn progress; /* when set and the weights are not in the page cache (less than 90%
                                * resident), loading reads them once, in file order, calling this
                                * after every 64 MiB (item = tensor, bytes of the tensor data) -
                                * instead of faulting them in during the first decode.  NULL
                                * (default): the file is only mapped. */
    void *progress_user;
    bool no_normalize;         /* tokenizer: skip the vocabulary's Unicode normalisation (NFC; see
                                * nextn_tokenizer_normalizes) and tokenize the bytes as given, as
                                * llama.cpp does (default false) */
    bool no_huge_reread;       /* leave the page cache as it is.  By default (false), when less than
                                * half of a file of 64 MiB or more comes out mapped with 2 MiB entries
                                * after loading (its cache was filled in 4 KiB pages, e.g. by read(2)),
                                * loading drops the cached pages only this model maps and reads them
                                * again through its mapping, in 2 MiB pages (weights read through 4
                                * KiB entries decoded 1.5-2.3x slower:
                                * docs/notes/page-cache-page-size.md).  Set it to skip that second read of the
                                * file (a slow disk, a page cache to keep as it is);
                                * nextn_model_info.huge_mapped_bytes shows what decode gets */
} nextn_model_params;

typedef struct nextn_model_info {
    int32_t n_vocab;           /* rows of the LM head (logits per row) */
    int32_t n_embd;            /* hidden size (floats per hidden row) */
    int32_t n_layer;           /* trunk layers */
    int32_t n_ctx_train;
    bool has_mtp;              /* the file has an MTP block */
    bool has_tokenizer;
    uint64_t weight_bytes;     /* bytes of the trunk weights */
    uint64_t active_bytes;     /* of which one token's forward pass reads (mixture of experts: k of the
                                  n experts of each layer; = weight_bytes for dense models) */
    int32_t n_expert, n_expert_used; /* experts per layer and routed per token (0 for dense models) */
    uint64_t file_bytes;
    uint64_t huge_mapped_bytes; /* bytes of the model file's mapping mapped with 2 MiB entries, measured
                                 * once at the end of nextn_model_load (Linux: FilePmdMapped of
                                 * /proc/self/smaps); 0 when none are, and where unknown (no smaps) */
    bool huge_reread;          /* loading dropped the cached file and read it again to get 2 MiB
                                * entries (never with nextn_model_params.no_huge_reread) */
} nextn_model_info;

nextn_model_params nextn_model_default_params(void);
/* params may be NULL (defaults). */
bool nextn_model_load(nextn_model **out, const char *path, const nextn_model_params *params, nextn_error *err);
void nextn_model_free(nextn_model *model);
void nextn_model_get_info(const nextn_model *model, nextn_model_info *info);
/* The model's tokenizer, or NULL when the file has no tokenizer.ggml.* keys.  Owned by the model. */
nextn_tokenizer *nextn_model_tokenizer(const nextn_model *model);

/* ---- context ----------------------------------------------------------------------------- */

/* Attention cache element types.  Q8_0 / Q4_0 store each position's K (or V) row in blocks of 32
 * values with one f16 scale (ggml's q8_0 / q4_0 layouts: 8.5 / 4.5 bits per value) and need the
 * model's head_dim to be a multiple of 32. */
typedef enum nextn_kv_type { NEXTN_KV_F16 = 0, NEXTN_KV_F32 = 1, NEXTN_KV_Q8_0 = 2, NEXTN_KV_Q4_0 = 3 } nextn_kv_type;

typedef struct nextn_context_params {
    int32_t n_ctx;             /* positions per sequence (default 4096) */
    int32_t n_seq;             /* sequences (default 1) */
    int32_t n_threads;         /* <= 0: NEXTN_THREADS or the number of CPUs */
    nextn_kv_type kv_type;     /* attention K cache type (default F16) */
    int32_t n_snapshots;       /* recurrent-state snapshots per sequence (default 0): after a batch,
                                * truncating up to this many of its last tokens is O(1) */
    nextn_kv_type kv_type_v;   /* attention V cache type (default F16) */
} nextn_context_params;

typedef struct nextn_memory {
    uint64_t weight_bytes;     /* mmapped trunk weights */
    uint64_t kv_bytes;         /* attention K+V of all sequences */
    uint64_t state_bytes;      /* recurrent conv + delta state of all sequences */
    uint64_t scratch_bytes;    /* activations at the largest batch so far */
} nextn_memory;

nextn_context_params nextn_context_default_params(void);
/* params may be NULL (defaults).  The model must outlive the context. */
bool nextn_context_create(nextn_context **out, const nextn_model *model, const nextn_context_params *params,
                          nextn_error *err);
void nextn_context_free(nextn_context *ctx);
void nextn_context_memory(const nextn_context *ctx, nextn_memory *mem);
int32_t nextn_n_ctx(const nextn_context *ctx);
int32_t nextn_n_seq(const nextn_context *ctx);
int32_t nextn_n_threads(const nextn_context *ctx);

/* A batch: row i is token[i] of sequence seq_id[i] at position pos[i].  The rows of a sequence
 * come in increasing position order and continue it exactly (the first has pos ==
 * nextn_n_past(ctx, seq)).  seq_id NULL: all rows belong to sequence 0.  logits NULL: logits
 * of the last row only; else non-zero entries select the rows whose logits are computed. */
typedef struct nextn_batch {
    int32_t n_tokens;
    const int32_t *token;
    const int32_t *pos;
    const int32_t *seq_id;
    const int8_t *logits;
} nextn_batch;

bool nextn_decode(nextn_context *ctx, const nextn_batch *batch, nextn_error *err);
/* Outputs of the last decode, valid until the next decode (no copy):
 * logits: n_vocab floats of row `row`, NULL if that row's logits were not requested or out of range;
 * hidden: n_embd floats, the post-final-norm hidden state of row `row` (every row has one). */
const float *nextn_get_logits(const nextn_context *ctx, int32_t row);
const float *nextn_get_hidden(const nextn_context *ctx, int32_t row);

/* Per-sequence memory. */
int32_t nextn_n_past(const nextn_context *ctx, int32_t seq);
bool nextn_seq_clear(nextn_context *ctx, int32_t seq, nextn_error *err);
/* Keep positions < from_pos of seq.  A recurrent model cannot forget tokens by itself: besides
 * from_pos == 0 (clear) and from_pos >= n_past (no-op), truncation drops at most n_snapshots of
 * the tokens of the sequence's last batch (fewer than that batch had); otherwise an error says
 * so and nothing changes. */
bool nextn_seq_truncate(nextn_context *ctx, int32_t seq, int32_t from_pos, nextn_error *err);
bool nextn_seq_copy(nextn_context *ctx, int32_t src, int32_t dst, nextn_error *err);

/* ---- tokenizer --------------------------------------------------------------------------- */

int32_t nextn_token_bos(const nextn_tokenizer *tok);     /* -1 if none */
int32_t nextn_token_eos(const nextn_tokenizer *tok);     /* -1 if none */
bool nextn_token_is_eog(const nextn_tokenizer *tok, int32_t id);
bool nextn_tokenizer_add_bos(const nextn_tokenizer *tok);
/* Whether nextn_tokenize puts the text between added tokens into Unicode NFC first, as the
 * model's original tokenizer does: the GGUF key tokenizer.ggml.normalizer.nfc when present, else
 * true for the qwen2 / qwen35 pre-tokenizers; false with nextn_model_params.no_normalize. */
bool nextn_tokenizer_normalizes(const nextn_tokenizer *tok);

/* Tokenizes text into ids[0..cap).  *n_out receives the number of tokens; ids == NULL only
 * counts them; when cap is too small the call fails and *n_out says how many are needed.  add_bos: prepend BOS when the
 * vocabulary asks for it; parse_special: recognise control tokens written in the text. */
bool nextn_tokenize(nextn_tokenizer *tok, const char *text, size_t len, bool add_bos, bool parse_special,
                    int32_t *ids, int32_t cap, int32_t *n_out, nextn_error *err);
/* Bytes of ids into buf[0..cap) (not NUL-terminated); *len_out receives the length; buf ==
 * NULL only measures; when cap is too small the call fails and *len_out is the needed length.
 * special: render control tokens. */
bool nextn_detokenize(const nextn_tokenizer *tok, const int32_t *ids, int32_t n, bool special,
                      char *buf, size_t cap, size_t *len_out, nextn_error *err);

/* Streaming detokenizer: push one token, get the newly complete UTF-8 text (pointer valid
 * until the next push/flush/free; *len_out bytes, also NUL-terminated). */
bool nextn_stream_create(nextn_stream **out, const nextn_tokenizer *tok, bool special, nextn_error *err);
bool nextn_stream_push(nextn_stream *s, int32_t id, const char **text, size_t *len_out, nextn_error *err);
bool nextn_stream_flush(nextn_stream *s, const char **text, size_t *len_out, nextn_error *err);
void nextn_stream_free(nextn_stream *s);

/* ---- chat ----------------------------------------------------------------------------------- */

/* Formats one user message followed by the assistant generation prompt (thinking on, the
 * template's default).  chat_format: NULL = recognise the model's tokenizer.chat_template
 * (Qwen ChatML); "chatml" = use ChatML whatever the file says.  Output as for nextn_detokenize
 * (buf == NULL only measures).  Fails with a clear error when the model has no usable template
 * and no format is forced. */
bool nextn_chat_format_user(const nextn_model *model, const char *chat_format, const char *user_text, char *buf,
                            size_t cap, size_t *len_out, nextn_error *err);

/* ---- sampling ---------------------------------------------------------------------------- */
/* Chain (llama.cpp's order): logit bias -> penalties -> top-k -> top-p -> min-p -> temperature
 * -> draw.  temp <= 0 is greedy (argmax, ties to the lowest id).
 * Logit bias: each entry adds `bias` to its token's logit (entries for one token add up);
 * -INFINITY bans the token.  Everything after it - penalties, filters, greedy, the
 * log-probabilities, and with speculative decoding the draft distribution as well as the
 * target's - sees the biased logits. */
typedef struct nextn_logit_bias {
    int32_t token;
    float bias;                /* finite, or -INFINITY (ban) */
} nextn_logit_bias;

typedef struct nextn_sampler_params {
    float temp;                /* default 0.8 */
    int32_t top_k;             /* default 40, <= 0 off */
    float top_p;               /* default 0.95, 1 off */
    float min_p;               /* default 0.05, 0 off */
    int32_t penalty_last_n;    /* default 64, 0 off, -1 whole history */
    float penalty_repeat;      /* default 1.0 (off) */
    float penalty_freq;        /* default 0 */
    float penalty_present;     /* default 0 */
    uint64_t seed;             /* default 0 */
    const nextn_logit_bias *logit_bias; /* n_logit_bias entries (default none); copied when a
                                         * sampler or a generator's sequence is set up */
    int32_t n_logit_bias;
} nextn_sampler_params;

nextn_sampler_params nextn_sampler_default_params(void);
bool nextn_sampler_create(nextn_sampler **out, const nextn_model *model, const nextn_sampler_params *params,
                          nextn_error *err);
void nextn_sampler_free(nextn_sampler *s);
/* Samples from one row of n_vocab logits (e.g. nextn_get_logits).  Fails on NaN / +inf logits
 * or when every logit is -inf.  The draw is a function of (seed, the number of tokens accepted
 * since creation or reset, the distribution): accept each sampled token before sampling the
 * next one (sampling again without accepting gives the same token).  So a seeded generation is
 * reproducible, and speculative decoding (nextn_spec_*) emits the same tokens as this loop. */
bool nextn_sampler_sample(nextn_sampler *s, const float *logits, int32_t *token, nextn_error *err);
/* The distribution sample() draws from, after the whole chain: n entries (ids[i], probs[i]),
 * probabilities summing to 1, sorted by descending probability whenever a truncation (top-k,
 * top-p, min-p) or greedy is active.  ids/probs need room for n_vocab entries in the worst case
 * (no truncation); cap smaller than the result fails and *n_out says how many are needed. */
bool nextn_sampler_dist(nextn_sampler *s, const float *logits, int32_t *ids, float *probs, int32_t cap,
                        int32_t *n_out, nextn_error *err);
/* Log-probabilities for reporting (OpenAI "logprobs"): the log-softmax at temperature 1 over the
 * whole vocabulary of the logits after the sampler's logit bias and penalties (repeat / frequency / presence
 * over its history so far; not top-k / top-p / min-p, not the temperature).  Call it before
 * nextn_sampler_accept(token).  out->top_ids / top_logprobs: the n_top (<= 20) most likely
 * tokens, most likely first, equal logits by lower id.  A token at -inf gets -inf.  No random
 * numbers are used and the sampler does not change. */
#define NEXTN_MAX_TOP_LOGPROBS 20
typedef struct nextn_logprob {
    int32_t token;
    float logprob;
    int32_t n_top;
    int32_t top_ids[NEXTN_MAX_TOP_LOGPROBS];
    float top_logprobs[NEXTN_MAX_TOP_LOGPROBS];
} nextn_logprob;
bool nextn_sampler_logprobs(nextn_sampler *s, const float *logits, int32_t token, int32_t n_top, nextn_logprob *out,
                            nextn_error *err);
/* Records a token in the penalty history (generated tokens; prompt tokens if wanted) and moves
 * the sampler to the next position. */
bool nextn_sampler_accept(nextn_sampler *s, int32_t token, nextn_error *err);
/* Clears the history: back to the first position (the same draws again). */
void nextn_sampler_reset(nextn_sampler *s);

/* ---- speculative decoding with the MTP head ---------------------------------------------
 * A nextn_spec owns a target context (with recurrent snapshot slots for O(1) rollback), the
 * MTP head's context and a sampler per sequence, for one sequence (or several, below).  Each
 * step drafts up to draft_max tokens with the MTP head, verifies them in one target batch and
 * emits 1 .. draft_max + 1 tokens.  The output is identical to plain decoding with the same
 * sampler (nextn_sampler_sample + accept per token, prompt tokens accepted first when
 * penalize_prompt), greedy and seeded sampling alike, whatever the draft length, the adaptive
 * choices or the thread count.  Where the MTP weights come from: mtp_model if given, else the
 * model file's own MTP block, else a sibling mtp-*.gguf in the model's folder; when there is
 * none (or use_mtp is false) the generator decodes plainly and nextn_spec_notice() says why.
 * See docs/mtp.md. */
typedef struct nextn_spec nextn_spec;

#define NEXTN_DRAFT_VOCAB_ALL (-1)

typedef struct nextn_spec_params {
    bool use_mtp;              /* default true; false = plain decoding through the same calls */
    const char *mtp_model;     /* MTP GGUF (mtp-only or full), NULL = automatic */
    int32_t draft_max;         /* default 3 (1..16) */
    int32_t draft_min;         /* drafts shorter than this are dropped (default 0) */
    float draft_p_min;         /* stop drafting below this top probability (default 0) */
    bool adaptive;             /* online cost model chooses the draft length (default true) */
    bool penalize_prompt;      /* prompt tokens enter the sampler's penalty history (default true) */
    int32_t draft_vocab;       /* K > 0: the MTP head's logits cover only K tokens; 0 (default) =
                                * automatic: when "<model minus .gguf>.draft-vocab.txt" sits beside
                                * the model file, the V/4 most frequent tokens in it, else all;
                                * NEXTN_DRAFT_VOCAB_ALL = always the whole vocabulary */
    const char *draft_vocab_file; /* frequency file (`nextn draft-vocab`) choosing the K tokens;
                                   * NULL = the K lowest ids.  Needs draft_vocab > 0. */
} nextn_spec_params;

typedef struct nextn_spec_stats {
    int64_t steps;             /* generation steps */
    int64_t spec_steps;        /* steps that verified at least one draft */
    int64_t drafted, accepted; /* draft tokens verified / accepted */
    int64_t emitted;           /* tokens emitted by steps (the prefill's first token excluded) */
    double t_draft, t_verify, t_accept; /* seconds in MTP passes, target passes, acceptance */
} nextn_spec_stats;

nextn_spec_params nextn_spec_default_params(void);
/* params / smp may be NULL (defaults).  The model must outlive the generator. */
bool nextn_spec_create(nextn_spec **out, const nextn_model *model, const nextn_context_params *cp,
                       const nextn_spec_params *params, const nextn_sampler_params *smp, nextn_error *err);
void nextn_spec_free(nextn_spec *s);
bool nextn_spec_has_mtp(const nextn_spec *s);
const char *nextn_spec_notice(const nextn_spec *s);     /* why decoding is plain ("" if it is not) */
const char *nextn_spec_mtp_source(const nextn_spec *s); /* file the MTP weights came from ("" if none) */
/* Tokens the draft head scores (0 = the whole vocabulary) and, in *file (may be NULL), the
 * frequency file that chose them (NULL = the lowest ids or the whole vocabulary). */
int32_t nextn_spec_draft_vocab(const nextn_spec *s, const char **file);
int32_t nextn_spec_max_step_tokens(const nextn_spec *s); /* room `out` needs in nextn_spec_step */
/* Decodes the prompt (n >= 1 tokens, empty sequence) and samples the first token. */
bool nextn_spec_prefill(nextn_spec *s, const int32_t *ids, int32_t n, int32_t *first, nextn_error *err);
/* One step: *n_out tokens (1 .. min(max_out, max_step_tokens)) into out. */
bool nextn_spec_step(nextn_spec *s, int32_t max_out, int32_t *out, int32_t *n_out, nextn_error *err);
/* Several sequences (continuous batching, e.g. a server's slots): create with cp->n_seq = S > 1.
 * A sequence joins with nextn_spec_prefill_seq (while the others keep generating; smp gives it
 * its own sampler, NULL = the creation-time one), every nextn_spec_step_seqs advances all
 * active sequences in one draft pass per draft position and ONE verify batch (out: S x
 * max_step_tokens tokens, sequence s at out + s * max_step_tokens, n_out[s] of them; max_out[s]
 * >= 1 for every active sequence), and nextn_spec_seq_clear ends one and frees its caches for
 * the next.  nextn_spec_step needs S == 1. */
int32_t nextn_spec_n_seq(const nextn_spec *s);
bool nextn_spec_prefill_seq(nextn_spec *s, int32_t seq, const int32_t *ids, int32_t n, const nextn_sampler_params *smp,
                            int32_t *first, nextn_error *err);
/* The prompt in parts of at most max_rows tokens (call again until *done; same prompt each
 * time), so a long prompt does not stall the other sequences; equal to nextn_spec_prefill_seq. */
bool nextn_spec_prefill_seq_part(nextn_spec *s, int32_t seq, const int32_t *ids, int32_t n, int32_t max_rows,
                                 const nextn_sampler_params *smp, int32_t *first, bool *done, nextn_error *err);
bool nextn_spec_step_seqs(nextn_spec *s, const int32_t *max_out, int32_t *out, int32_t *n_out, nextn_error *err);
bool nextn_spec_seq_clear(nextn_spec *s, int32_t seq, nextn_error *err);
void nextn_spec_get_stats(const nextn_spec *s, nextn_spec_stats *stats);
/* Log-probabilities of the tokens seq emits (n_top >= 0 turns them on, -1 off; off by
 * default): each emitted token's entry is computed from the target row that decided it with the
 * sequence's penalties at that point (nextn_sampler_logprobs), so the numbers equal plain
 * decoding's whatever was drafted.  nextn_spec_last_logprobs: the entries of seq's last prefill
 * or step, one per emitted token in order (pointer valid until the next call on s). */
bool nextn_spec_set_logprobs(nextn_spec *s, int32_t seq, int32_t n_top, nextn_error *err);
int32_t nextn_spec_last_logprobs(const nextn_spec *s, int32_t seq, const nextn_logprob **out);
/* Draft tokens verified / accepted for one sequence since its prefill (0 for a bad seq). */
void nextn_spec_seq_stats(const nextn_spec *s, int32_t seq, int64_t *drafted, int64_t *accepted);
/* Memory of the target context (KV, recurrent state with its snapshot slots, scratch). */
void nextn_spec_memory(const nextn_spec *s, nextn_memory *mem);

/* ---- sequence state: checkpoints, copies, files -------------------------------------------
 * A nextn_state is one sequence's state at a position pos (its nextn_n_past when taken):
 *   - the recurrent state (conv + delta) of every Gated DeltaNet layer at pos;
 *   - NEXTN_STATE_FULL: the attention K/V cells [0, pos) of every attention layer;
 *   - taken from a speculative generator: also the MTP head's cache (cells [0, pos) for FULL)
 *     and the driver's per-sequence rows (the hidden row of position pos - 1 and the rows
 *     still to be mirrored into the MTP cache).
 * Samplers (RNG, penalty history) are not part of it, nor is the last sampled token: a state
 * stands for the pos tokens decoded.
 *
 * Kinds:
 *   NEXTN_STATE_FULL      restores into any sequence of any context or generator over the same
 *                         model with the same kv_type (pos < its n_ctx); can be saved to a file.
 *                         Size: the recurrent state + pos x the KV of one position.
 *   NEXTN_STATE_IN_PLACE  no attention cells: restores only into the sequence it was taken
 *                         from, while that sequence still holds the same first pos tokens (its
 *                         cells beyond pos are dropped).  The attention KV can be cut to any
 *                         prefix, the recurrent state exists only where a state was taken: this
 *                         is what a prompt cache keeps, a few per sequence.  The library cannot
 *                         see tokens: that the sequence still holds the same ones is the
 *                         caller's promise.  Size: the recurrent state (+ the driver's rows).
 *
 * Continuing after a restore: a context's sequence continues at pos (nextn_decode with
 * positions pos, pos + 1, ...).  A generator's sequence is left inactive; the next
 * nextn_spec_prefill_seq / _part for it must pass the whole token list - the pos tokens it
 * holds, then at least one more (restore a state taken at most at len - 1 for a list of len
 * tokens): only the new tokens are decoded, all of them enter the penalty history, and the
 * sequence then generates exactly as if the whole list had been prefilled (greedy tokens,
 * drafts and acceptance alike).  nextn_spec_seq_keep ends a generation but keeps the caches
 * for the same purpose (a multi-turn chat continues without any copy).
 *
 * Files: nextn_state_save writes a FULL state (and its tokens, if set) in nextn's own
 * versioned format (docs/forward.md, "Sequence state files"): magic, version, a fingerprint of
 * the model (GGUF tensor table, hyper-parameters, samples of the weights) and of the MTP
 * weights, KV type, sizes, the sections, a checksum.  nextn_state_load refuses a file of
 * another model, another format version, a truncated or corrupted file, naming the file and
 * what differs.  A state from a generator restores into a plain context (the MTP part is not
 * used) and the other way round (the MTP cache restarts at pos: drafts may differ for a while,
 * the output does not).
 *
 * Typical use (a conversation kept across turns, or a prompt cache):
 *     nextn_state *st = NULL;
 *     nextn_state_take(&st, ctx, 0, NEXTN_STATE_IN_PLACE, &e);   // after the system prompt
 *     ...                                                          // later, same prefix:
 *     nextn_state_restore(ctx, 0, st, &e);  // n_past = nextn_state_pos(st); decode the rest
 */
typedef struct nextn_state nextn_state;

typedef enum nextn_state_kind {
    NEXTN_STATE_FULL = 0,
    NEXTN_STATE_IN_PLACE = 1,
} nextn_state_kind;

/* Takes the state of seq.  *st NULL: a new state is allocated; else *st is overwritten (its
 * buffers reused).  The context / generator is not changed. */
bool nextn_state_take(nextn_state **st, const nextn_context *ctx, int32_t seq, nextn_state_kind kind,
                      nextn_error *err);
bool nextn_spec_state_take(nextn_state **st, const nextn_spec *s, int32_t seq, nextn_state_kind kind,
                           nextn_error *err);
/* Puts seq in the state (n_past = nextn_state_pos).  On error nothing changes. */
bool nextn_state_restore(nextn_context *ctx, int32_t seq, const nextn_state *st, nextn_error *err);
bool nextn_spec_state_restore(nextn_spec *s, int32_t seq, const nextn_state *st, nextn_error *err);
/* Ends seq's generation and keeps its caches: it holds nextn_spec_seq_n_past positions (the
 * last emitted token is not among them); the next prefill of seq continues them (see above). */
bool nextn_spec_seq_keep(nextn_spec *s, int32_t seq, nextn_error *err);
/* Positions seq holds in the generator's caches. */
int32_t nextn_spec_seq_n_past(const nextn_spec *s, int32_t seq);
void nextn_state_free(nextn_state *st);

int32_t nextn_state_pos(const nextn_state *st);
nextn_state_kind nextn_state_kind_of(const nextn_state *st);
bool nextn_state_has_mtp(const nextn_state *st);       /* taken from a generator with an MTP head */
uint64_t nextn_state_size(const nextn_state *st);      /* bytes of its content */
/* Bytes a state of this kind at position pos takes (for planning a cache's memory). */
uint64_t nextn_state_size_for(const nextn_context *ctx, nextn_state_kind kind, int32_t pos);
uint64_t nextn_spec_state_size_for(const nextn_spec *s, nextn_state_kind kind, int32_t pos);
/* The token ids the state stands for (n == its pos), kept with it and written to its file. */
bool nextn_state_set_tokens(nextn_state *st, const int32_t *tokens, int32_t n, nextn_error *err);
/* NULL (and *n = 0) when none were set. */
const int32_t *nextn_state_tokens(const nextn_state *st, int32_t *n);

/* Writes a FULL state to path (atomically: a temporary file renamed into place). */
bool nextn_state_save(const nextn_state *st, const char *path, nextn_error *err);
/* Reads a state file written for `model` (see above for what is refused). */
bool nextn_state_load(nextn_state **out, const nextn_model *model, const char *path, nextn_error *err);

#ifdef __cplusplus
}
#endif

#endif
