/* sample.h - turning a row of logits into a token: penalties, top-k, top-p, min-p, temperature,
 * and a seeded draw whose randomness is a function of (seed, position) only.
 *
 * Order of operations (llama.cpp's default chain in common/sampling.cpp):
 *     logit bias -> penalties -> top-k -> top-p -> min-p -> temperature -> draw
 *   - logit bias adds a fixed amount to chosen tokens' logits (entries for the same token add
 *     up); -inf bans a token.  It comes first, as llama.cpp puts it before the configurable
 *     samplers, so the penalties, the filters and the reported log-probabilities all see the
 *     biased logits.
 *   - penalties (repeat / frequency / presence) use the counts of each token among the last
 *     `penalty_last_n` accepted tokens; repeat divides a positive logit and multiplies a
 *     non-positive one (so a penalty always lowers the token); then
 *     logit -= count * freq + (count > 0) * presence.
 *   - top-k keeps the k largest logits (k <= 0: off).
 *   - top-p keeps the smallest prefix, by descending probability (softmax of the logits left,
 *     before temperature), whose cumulative probability reaches p (p >= 1: off).
 *   - min-p keeps tokens with probability >= min_p * p_max, i.e. logit >= max + log(min_p)
 *     (min_p <= 0: off).  Like top-p it looks at the logits before temperature.
 *   - temperature divides the logits; temp <= 0 means greedy: the distribution is a point
 *     mass on the largest (penalised) logit, ties going to the lowest token id.
 *   Every filter keeps at least max(1, min_keep) tokens.
 *
 * The further samplers (llama.cpp's, in its default order: src/llama-sampler.cpp, common/
 * sampling.cpp; tested against it on the same logits, tests/fixtures/samplers/).  With them the
 * chain is
 *     logit bias -> penalties -> DRY -> top-n-sigma -> top-k -> typical -> top-p -> min-p -> XTC ->
 *     temperature (dynamic) -> draw
 *   - DRY (dry_multiplier != 0, dry_base >= 1, dry_penalty_last_n != 0; after the penalties, on
 *     the whole row): over the last N = dry_penalty_last_n accepted tokens (-1: all), the
 *     repeat limit is the distance back to the most recent sequence breaker (a breaker
 *     sequence whose tokens end there; the longest one at the first position found, as llama.cpp
 *     scans); for each earlier position where the window's suffix of length L <= that limit
 *     repeats, the token that followed it would extend the repeat; a token whose longest such
 *     L >= dry_allowed_length (and that is not a one-token breaker) loses
 *     dry_multiplier * dry_base^(L - dry_allowed_length) (the exponent capped so the power stays
 *     finite in float).
 *   - top-n-sigma (n > 0) keeps the tokens whose logit is >= max - n * std, max, mean and std over
 *     every finite logit of the (penalised) row.  llama.cpp leaves the others in its array at -inf;
 *     here they leave the candidate set, which differs only where dynamic temperature follows with
 *     no filter in between (its maximum entropy log(n) counts them in llama.cpp).
 *   - typical (typ_p < 1): softmax of the candidates (temperature 1), entropy H; candidates ordered
 *     by |-log p - H| (ties: the canonical order), the shortest prefix whose mass exceeds typ_p,
 *     at least min_keep.
 *   - XTC (xtc_probability > 0, xtc_threshold <= 0.5, at least 2 candidates): with probability
 *     xtc_probability - decided by a uniform keyed on (seed, position) like the draw, so that a
 *     speculative verify makes the same decision as plain decoding - the candidates with
 *     probability (softmax at temperature 1) >= xtc_threshold are removed, except the least
 *     likely of them; nothing happens when fewer than two reach the threshold or when fewer than
 *     min_keep would remain.
 *   - dynamic temperature (dynatemp_range > 0, at least 2 candidates): the temperature is
 *     lo + (hi - lo) * (H / log n)^exponent with lo = max(0, temp - range), hi = temp + range, H
 *     the entropy of the candidates' softmax (temperature 1), n their count; a temperature <= 0
 *     is greedy over the candidates.
 *   Samplers order (params.samplers set): the listed steps only, in that order, each on the
 *   candidates left as llama.cpp's chain does - penalties and DRY adjust the candidates'
 *   logits, temperature divides them (steps after it see the scaled logits; <= 0 keeps the best
 *   only), and the distribution is the softmax of what is left.  The logit bias and bans come
 *   first; the log-probabilities (nx_sampler_logprobs) are still those after bias and penalties.
 *   temp <= 0 is greedy over the candidates the filters leave; without typical, XTC and dynamic
 *   temperature that is the argmax of the penalised row (every other filter keeps it).  Tokens whose logit is -inf are never
 *   candidates (they have probability 0).  Ties in logit are always ordered by lower id first,
 *   so results do not depend on the selection algorithm.
 *
 * The draw (nx_sampler_draw) is an exponential race on counter-based noise: at position k (the
 * number of tokens accepted since creation or reset) every token id i has a uniform u(seed, k, i)
 * in (0, 1), computed by hashing the three (no RNG state), and the token is
 * argmin_i -log(u_i) / p_i - distributed exactly as p (it is Gumbel-max: argmax log p_i + g_i
 * with g_i = -log(-log u_i) standard Gumbel).  So the token drawn at a position is a function
 * of (seed, position, distribution) alone: drawing twice without accepting gives the same
 * token, and two distributions drawn at the same position share their noise.  The speculative
 * driver relies on that: a draft is the draw from the draft distribution q at its position, and
 * it is accepted iff the target's draw from p at that position is the same token, so the
 * emitted tokens are exactly plain decoding's, whatever the draft length (docs/mtp.md
 * "Sampling").
 *
 * State: a sampler owns its seed and the penalty history; there is no global state, so samplers
 * of different sequences are independent.  A sampler is not thread-safe; use one per sequence
 * (or per thread).
 */
#ifndef NX_SAMPLE_H
#define NX_SAMPLE_H

#include "base/common.h"

/* One logit-bias entry (the same layout as the public nextn_logit_bias). */
typedef struct nx_logit_bias {
    int32_t  token;
    float    bias;             /* finite, or -INFINITY: banned */
} nx_logit_bias;

typedef struct nx_sampler_params {
    float    temp;             /* <= 0: greedy.                          default 0.8 */
    int32_t  top_k;            /* <= 0: off.                             default 40 */
    float    top_p;            /* in [0, 1]; 1: off.                     default 0.95 */
    float    min_p;            /* in [0, 1]; 0: off.                     default 0.05 */
    int32_t  min_keep;         /* every filter keeps >= max(1, min_keep) default 0 */
    int32_t  penalty_last_n;   /* window of accepted tokens; 0: off.     default 64 */
    float    penalty_repeat;   /* > 0; 1: off.                           default 1.0 */
    float    penalty_freq;     /* 0: off.                                default 0.0 */
    float    penalty_present;  /* 0: off.                                default 0.0 */
    uint64_t seed;             /* RNG seed.                              default 0 */
    /* llama.cpp's further samplers (its semantics; "The further samplers" above) */
    float    typ_p;            /* locally typical, in [0, 1]; 1: off.    default 1 */
    float    top_n_sigma;      /* keep logit >= max - n * std; <= 0: off. default -1 */
    float    xtc_probability;  /* XTC's chance per position, [0, 1]; 0: off. default 0 */
    float    xtc_threshold;    /* XTC's probability threshold; > 0.5: off. default 0.1 */
    float    dynatemp_range;   /* dynamic temperature: temp +- range; 0: off. default 0 */
    float    dynatemp_exponent;/* entropy -> temperature exponent, >= 0. default 1 */
    float    dry_multiplier;   /* DRY; 0: off.                           default 0 */
    float    dry_base;         /* DRY; < 1: off.                         default 1.75 */
    int32_t  dry_allowed_length; /* DRY: repeats longer than this pay.   default 2 */
    int32_t  dry_penalty_last_n; /* DRY window; 0: off, -1: whole history. default -1 */
    const int32_t *dry_breakers; /* DRY sequence breakers as token sequences, concatenated:
                                  * sequence i is dry_breaker_lens[i] (>= 1) ids; copied.
                                  * (Strings become sequences in the API: nextn_dry_breakers.) */
    const int32_t *dry_breaker_lens;
    int32_t  n_dry_breakers;   /* default none */
    char     samplers[16];     /* "" (default): the order above; else llama.cpp's letters
                                * (e penalties, d DRY, s top-n-sigma, k top-k, y typical, p top-p,
                                * m min-p, x XTC, t temperature), each at most once, run in that
                                * order and only those ("Samplers order" below) */
    const nx_logit_bias *logit_bias; /* n_logit_bias entries, copied by nx_sampler_create;
                                      * default none */
    int32_t  n_logit_bias;
    const int32_t *ban;        /* n_ban token ids whose logit is -inf for sampling (copied), applied
                                * after logit_bias; unlike a -inf logit_bias entry they do not
                                * change nx_sampler_logprobs (llama-server's ignore_eos: its end-of-
                                * generation bans, whose n_probs are those of the raw logits).
                                * default none */
    int32_t  n_ban;
} nx_sampler_params;

/* llama.cpp's defaults (see above). */
nx_sampler_params nx_sampler_default_params(void);
/* Greedy: temp 0, every filter and penalty off. */
nx_sampler_params nx_sampler_greedy_params(void);

/* A processed distribution: n entries (ids[i], probs[i]) with probs summing to 1 (within float
 * rounding) and every prob > 0 except possibly through underflow.  Entries are sorted by
 * descending probability, ties by lower id, whenever a truncation (top-k / top-p / min-p) or
 * greedy is active; with no truncation the entries are all finite-logit tokens in id order
 * (sorting the whole vocabulary for every token would cost more than the draw).
 * Storage is owned by the nx_dist (capacity n_vocab), so a caller can keep p and q at once. */
typedef struct nx_dist {
    int32_t  n;
    int32_t  cap;
    int32_t *ids;
    float   *probs;
} nx_dist;

bool nx_dist_init(nx_dist *d, int32_t n_vocab, nx_err *err);
void nx_dist_free(nx_dist *d);
/* Probability of token id in d (0 if absent).  O(n). */
float nx_dist_prob(const nx_dist *d, int32_t id);

typedef struct nx_sampler nx_sampler;

/* Checks the parameters (errors name the field and the allowed range; logit-bias token ids
 * are checked against the vocabulary by nx_sampler_create). */
bool nx_sampler_params_check(const nx_sampler_params *p, nx_err *err);
/* Copies the logit-bias entries (merged per token, ordered by id): p->logit_bias need not
 * outlive the call. */
bool nx_sampler_create(nx_sampler **out, int32_t n_vocab, const nx_sampler_params *p, nx_err *err);
void nx_sampler_free(nx_sampler *s);
/* True when the logit bias bans (-inf) every token whose logit in the row is finite, i.e.
 * nx_sampler_dist would fail on it.  O(1) without bans, else one pass over the row.  A
 * speculative driver stops drafting there instead of failing (a reduced draft vocabulary can
 * leave only banned tokens). */
bool nx_sampler_all_banned(const nx_sampler *s, const float *logits);

/* Forgets the penalty history: back to position 0 (the draws replay from the start). */
void nx_sampler_reset(nx_sampler *s);

/* Penalty history and position.  `accept` records a token (prompt tokens too, if the caller wants
 * them penalised, as llama-cli does) and advances the position the next draw uses; `rollback`
 * forgets the last n accepted tokens, restoring the window and the position exactly as they were
 * (for speculative decoding).  Accept fails only on a bad id or OOM. */
bool    nx_sampler_accept(nx_sampler *s, int32_t token, nx_err *err);
void    nx_sampler_rollback(nx_sampler *s, int32_t n);
int32_t nx_sampler_n_accepted(const nx_sampler *s);

/* Runs the chain on one row of n_vocab logits (not modified) and writes the final
 * distribution.  Fails with a clear message when a logit is NaN or +inf, when every logit
 * is -inf, or when the logit bias bans every token left or makes a logit +inf. */
bool nx_sampler_dist(nx_sampler *s, const float *logits, nx_dist *out, nx_err *err);

/* Draws a token from a distribution at the sampler's position (the exponential race above):
 * a function of (seed, position, the set of (id, prob) entries), not of their order; never an
 * entry of probability 0 unless all are.  Consumes nothing: call accept to move on. */
int32_t nx_sampler_draw(nx_sampler *s, const nx_dist *d);

/* dist + draw. */
bool nx_sampler_sample(nx_sampler *s, const float *logits, int32_t *token, nx_err *err);

/* Plain argmax with ties to the lowest id; -1 if every logit is -inf or the row has a NaN. */
int32_t nx_argmax(const float *logits, int32_t n);

/* Log-probabilities for reporting (OpenAI logprobs): log-softmax at temperature 1 over the whole
 * vocabulary of the logits after this sampler's logit bias and penalties (repeat / frequency /
 * presence over its current history; no top-k / top-p / min-p, no temperature).  Call before accepting
 * `token`: *lp = its log-probability; top_ids / top_lp (n_top <= NX_SAMPLER_MAX_TOP_LOGPROBS
 * entries) the most likely tokens, by decreasing probability, equal logits by lower id; *n_top_out
 * of them (fewer only when fewer tokens are finite).  A token at -inf has *lp = -inf.  Uses no
 * random numbers and does not change the sampler's state. */
#define NX_SAMPLER_MAX_TOP_LOGPROBS 20
bool nx_sampler_logprobs(nx_sampler *s, const float *logits, int32_t token, int32_t n_top, float *lp,
                         int32_t *top_ids, float *top_lp, int32_t *n_top_out, nx_err *err);

#endif
