/* spec.h - MTP speculative decoding driver (the scheme of llama.cpp's common/speculative.cpp MTP
 * draft, with exact speculative sampling).
 *
 * One driver serves n_seq sequences of a target context (forward.h) and, optionally, an MTP
 * context (mtp.h) with the same n_ctx / n_seq.  Without MTP it is plain decoding through the
 * same code path (one row per sequence per step).
 *
 * Per sequence it keeps: id_last (the last emitted token, not yet in the target cache), the
 * sampler (penalty history = emitted tokens), pending_h (the post-norm target hidden of the
 * position before id_last) and the "mirror backlog": (token, hidden) rows that still have to be
 * written into the MTP cache.  Invariant before a step, with n_past = target positions:
 *     MTP cache positions + backlog rows == n_past - base (unless stale, below), and the MTP
 *     row for target position p pairs x_p with h_{p-1}
 * (h_{-1} = zeros), each h the TRUE target hidden (never a draft's).
 *
 * A step (nx_spec_step):
 *   1. draft length N from the cost model (or draft_max), capped by max_out - 1 and n_ctx;
 *   2. draft: MTP pass 0 = the backlog rows + (id_last, n_past, pending_h) -> q_1, d_1; pass j =
 *      (d_j, n_past + j, hout of pass j-1) -> q_{j+1}, d_{j+1} (d = the sampler's draw from q at
 *      the draft's position: argmax when greedy); stop early when the draft's top
 *      probability < draft_p_min; drop drafts shorter than draft_min; all drafting sequences
 *      share each pass (one row each).  Afterwards the MTP cache is cut back to n_past + 1: the
 *      row (id_last, pending_h) at n_past is a true mirror row and stays;
 *   3. verify [id_last, d_1..d_N] of every sequence in ONE target batch (logits + hidden rows);
 *   4. accept: row i draws the token of its position from the target distribution p exactly as
 *      plain decoding does (argmax when greedy; at T > 0 the draw's noise is a function of the
 *      seed and the position, sample.h, the same noise the draft was drawn with); d_{i+1} is
 *      accepted iff it is that token; the first mismatch emits the target's token, full
 *      acceptance the bonus row's;  k accepted drafts + 1 new token are emitted.  So the output
 *      is plain decoding's, greedy and sampled, whatever N, timing or threads;
 *   5. roll back the target N - k positions (O(1) snapshot slot, forward.h), append the mirror
 *      rows (d_i, h_{i-1}) i = 1..k to the backlog, pending_h = h_k, id_last = new token.
 * The backlog is written by the next drafting pass.  While not drafting (plain steps) it keeps
 * the last 64 rows; when older rows are dropped the MTP cache is "stale": the next drafting
 * pass clears it and re-seeds it with the last 16 rows, numbering MTP positions from the first
 * of them (MTP position = target position - base).  RoPE is relative, so attention inside the
 * window is unchanged; only older context is lost (draft quality, never correctness).  So plain
 * stretches cost no MTP work at all.
 *
 * Cost model (adaptive; the decision is spec_cost.h): EMA of the MTP pass time (one row per
 * sequence; pass 0 while drafting continuously apart; catch-up passes after plain stretches not
 * sampled) and of the verify time by total rows, and per sequence decayed acceptance counts per
 * draft position.  Each step plans a draft length N_i per sequence (0..its cap) maximising
 * expected tokens per second, all N_i = 0 being plain decoding (no MTP work at all but the
 * backlog); speculation must win by 3% (the estimates are noisy; samples are clipped at twice
 * the estimate, see ema() in spec.c).  The first step drafts one token to measure.  While a
 * sequence's plan is plain, a one-draft probe runs every `probe` of its plain steps (4 at first,
 * doubling up to 128 after each rejected probe; an accepted one is followed by another at once)
 * so a change in acceptance is noticed; a probe writes at most 16 backlog rows.  The plan changes
 * the work, never the tokens.
 *
 * Oracle mode (benchmarks only): the caller supplies the target's own continuation (from a
 * plain run of the same prompt and sampler); the MTP passes still run and are timed,
 * but their tokens are replaced by the known continuation, so acceptance is 100% and the
 * measured speed is the ceiling of the real draft/verify costs.
 */
#ifndef NX_SPEC_H
#define NX_SPEC_H

#include "forward/forward.h"
#include "forward/seq_ckpt.h"
#include "spec/mtp.h"
#include "sample/sample.h"

typedef struct nx_spec_params {
    int32_t draft_max;          /* N: at most this many drafts per step (<= target n_snapshots). default 3 */
    int32_t draft_min;          /* drafts shorter than this are dropped.                        default 0 */
    float draft_p_min;          /* stop drafting when the draft's top probability < this.      default 0 */
    bool adaptive;              /* the cost model picks N each step (else always draft_max).   default true */
    nx_sampler_params sampling; /* target sampler; drafts use the same settings (and history) */
    bool penalize_prompt;       /* prompt tokens enter the penalty history (like `nextn run`). default false */
} nx_spec_params;

nx_spec_params nx_spec_default_params(void);

typedef struct nx_spec_stats {
    int64_t steps;              /* nx_spec_step calls x active sequences */
    int64_t spec_steps;         /* of those, steps that verified >= 1 draft */
    int64_t drafted, accepted;  /* draft tokens verified / accepted */
    int64_t emitted;            /* tokens emitted by steps (prefill's first token excluded) */
    int64_t mtp_rows, verify_rows;
    double t_draft, t_verify, t_accept; /* seconds: MTP passes, target passes, sampling/acceptance */
    double t_prefill;
} nx_spec_stats;

typedef struct nx_spec nx_spec;

/* target must have n_snapshots >= draft_max (when mtp != NULL); mtp may be NULL (plain).
 * Both must outlive the driver.  Sequences must be empty (n_past 0) at nx_spec_prefill. */
bool nx_spec_create(nx_spec **out, nx_ctx *target, nx_mtp *mtp, const nx_spec_params *p, nx_err *err);
void nx_spec_free(nx_spec *s);

/* Decodes the prompts of sequences 0..n_seq-1 (n_prompt[s] >= 1) in batched chunks, mirrors
 * them into the MTP cache, samples each sequence's first token into first[s] and activates
 * them.  Other sequences are inactive. */
bool nx_spec_prefill(nx_spec *s, int32_t n_seq, const int32_t *const *prompt, const int32_t *n_prompt,
                     int32_t *first, nx_err *err);
/* Continuous batching (the server): decodes the prompt of one inactive, empty sequence while
 * the others keep their state, samples its first token and activates it.  sampling != NULL
 * gives the sequence its own sampler (temperature, seed, penalties); NULL keeps the one it has
 * (reset: history cleared, re-seeded).  Draft and verify batches then mix sequences with
 * different samplers; greedy and sampled sequences may share a step. */
bool nx_spec_prefill_seq(nx_spec *s, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                         const nx_sampler_params *sampling, int32_t *first, nx_err *err);
/* The same in parts, so that a long prompt does not hold up the other sequences (a server runs
 * a part, then a step of the others, and so on): decodes the next at most max_rows tokens of
 * the prompt.  The first call for a sequence checks it and installs the sampler as
 * nx_spec_prefill_seq does; later calls continue where the last one stopped and must pass the
 * same prompt.  *done becomes true with the last part: *first is then sampled and the sequence
 * is active.  The result equals nx_spec_prefill_seq's whatever the part sizes.  After a failed
 * part, nx_spec_seq_clear the sequence before reusing it. */
bool nx_spec_prefill_seq_part(nx_spec *s, int32_t seq, const int32_t *prompt, int32_t n_prompt, int32_t max_rows,
                              const nx_sampler_params *sampling, int32_t *first, bool *done, nx_err *err);
/* Draft tokens verified / accepted for sequence seq since its prefill (0 for a bad seq). */
void nx_spec_seq_stats(const nx_spec *s, int32_t seq, int64_t *drafted, int64_t *accepted);
/* Deactivates a sequence and empties its target and MTP caches (a finished request). */
bool nx_spec_seq_clear(nx_spec *s, int32_t seq, nx_err *err);

/* One step for every active sequence.  out[s * (D + 1) ...] receives n_out[s] tokens, where D =
 * draft_max, or 0 when the driver has no MTP context
 * (0 for inactive sequences).  max_out[s] (NULL = unlimited) caps what a sequence may emit. */
bool nx_spec_step(nx_spec *s, const int32_t *max_out, int32_t *out, int32_t *n_out, nx_err *err);

/* A finished sequence (EOS / length) is deactivated by the caller. */
void nx_spec_set_active(nx_spec *s, int32_t seq, bool active);
bool nx_spec_active(const nx_spec *s, int32_t seq);

/* Checks the bookkeeping invariant of every active sequence (MTP positions + backlog rows ==
 * target positions); false with a message naming the sequence otherwise.  For tests. */
bool nx_spec_check(const nx_spec *s, nx_err *err);

const nx_spec_stats *nx_spec_get_stats(const nx_spec *s);
void nx_spec_reset_stats(nx_spec *s);
/* Tests: the cost model (and the t_draft / t_verify stats) take the seconds of each MTP pass
 * and each verify batch from fn instead of the clock, so its decisions are deterministic.
 * rows = rows of the batch; rows_per_seq = the most rows one sequence has in it (verify) or 1
 * (an MTP pass, whose rows beyond one per sequence are backlog rows).  fn NULL = the clock. */
typedef enum nx_spec_cost_kind { NX_SPEC_COST_DRAFT, NX_SPEC_COST_VERIFY } nx_spec_cost_kind;
typedef double (*nx_spec_cost_fn)(void *user, nx_spec_cost_kind kind, int32_t rows, int32_t rows_per_seq);
void nx_spec_set_cost_fn(nx_spec *s, nx_spec_cost_fn fn, void *user);

/* ---- sequence state (checkpoints) -------------------------------------------------------------
 * The state of one sequence at its position pos = target n_past: the target's checkpoint
 * (recurrent state, attention cells with_kv), the MTP cache (cells [0, mtp.pos) with_kv, else
 * only its length) and the driver's per-sequence rows: pending_h (the target hidden of pos - 1),
 * the mirror backlog and the MTP numbering (base, stale).  Samplers, id_last and drafts are not
 * part of it: a restored sequence is inactive and continues with a prefill whose prompt starts
 * with the pos tokens it holds (nx_spec_prefill_seq / _part decode only the rest, and put the
 * whole prompt in the penalty history).  Continuing a restored state gives exactly the rows
 * that decoding the whole prompt would have (the backlog is written into the MTP cache first),
 * so greedy output, drafts and acceptance are those of an uninterrupted run.
 * Without KV (in place) a state restores only into the sequence it came from while that
 * sequence holds the same first pos tokens; its MTP cells are reused when the driver has not
 * cleared that MTP cache since (else the MTP cache restarts from the backlog: drafts may
 * differ for a while, output does not).  A state without an MTP part restores into a driver
 * with MTP the same way. */
typedef struct nx_spec_seq_state {
    nx_seq_ckpt tgt;            /* target context at pos = tgt.pos */
    bool has_mtp;               /* taken from a driver with an MTP context */
    nx_seq_ckpt mtp;            /* MTP context (no recurrent layers): cells [0, mtp.pos) */
    uint64_t mtp_epoch;         /* in place: usable while the sequence's MTP epoch is this */
    int32_t base;               /* MTP position = target position - base */
    bool stale;                 /* backlog rows were dropped: the MTP cache is re-seeded */
    int32_t E;
    int32_t n_mir, cap_mir;
    int32_t *mir_tok;           /* [n_mir] backlog rows: target positions pos - n_mir .. pos - 1 */
    float *mir_h;               /* [n_mir][E] */
    float *pending_h;           /* [E] */
} nx_spec_seq_state;

/* Takes (or overwrites; zero st before first use) the state of seq; the driver is unchanged. */
bool nx_spec_seq_take(nx_spec_seq_state *st, const nx_spec *s, int32_t seq, bool with_kv, nx_err *err);
/* Puts seq (any sequence with a state with KV; only the same one without) in the state: inactive,
 * holding st->tgt.pos positions, to be continued by a prefill.  On error nothing changes. */
bool nx_spec_seq_restore(nx_spec *s, int32_t seq, const nx_spec_seq_state *st, nx_err *err);
/* Ends seq's generation but keeps its caches: it holds n_past positions (the last emitted
 * token is not among them) and a later prefill continues them. */
bool nx_spec_seq_keep(nx_spec *s, int32_t seq, nx_err *err);
/* Positions a kept / restored (inactive) sequence holds for its next prefill; 0 otherwise. */
int32_t nx_spec_seq_resume_pos(const nx_spec *s, int32_t seq);
size_t nx_spec_seq_state_bytes(const nx_spec_seq_state *st);
/* Bytes a state at position pos takes (the backlog at its largest). */
size_t nx_spec_seq_state_bytes_for(const nx_spec *s, int32_t pos, bool with_kv);
void nx_spec_seq_state_free(nx_spec_seq_state *st);

/* ---- log-probabilities of emitted tokens --------------------------------------------------------
 * With nx_spec_set_logprobs(s, seq, n_top >= 0), every token seq emits (the prefill's first and
 * each step's) gets its log-probability and the n_top most likely tokens from the TARGET row
 * that decided it, under the sequence's sampler penalties at that point (nx_sampler_logprobs):
 * the same numbers plain decoding gives for the same token, whatever was drafted.  n_top -1 =
 * off (default; a cleared sequence keeps its setting).  nx_spec_last_logprobs returns the
 * entries of the last prefill / step of seq, in emission order (n_out of them). */
typedef struct nx_spec_logprob {
    int32_t token;
    float lp;
    int32_t n_top;
    int32_t top_ids[NX_SAMPLER_MAX_TOP_LOGPROBS];
    float top_lp[NX_SAMPLER_MAX_TOP_LOGPROBS];
} nx_spec_logprob;
bool nx_spec_set_logprobs(nx_spec *s, int32_t seq, int32_t n_top, nx_err *err);
int32_t nx_spec_last_logprobs(const nx_spec *s, int32_t seq, const nx_spec_logprob **lp);

/* The draft tokens seq verified in the last step (after draft_min); *drafts points into the
 * driver, valid until the next step.  For tests and reports. */
int32_t nx_spec_last_drafts(const nx_spec *s, int32_t seq, const int32_t **drafts);

#endif
