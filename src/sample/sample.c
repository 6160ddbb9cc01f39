/* sample.c - the sampling chain (see sample.h for the exact semantics).
 *
 * Cost per token on a vocabulary of V: one vectorisable pass to validate the row, a copy only
 * when a logit bias or penalties are active (they work on the copy; the caller's logits stay
 * untouched; a bias that bans tokens costs one more pass, to check something is left), then
 *   - top-k: one pass keeping a k-entry min-heap of the best logits; blocks of 64 logits whose
 *     maximum cannot beat the heap's worst are skipped after a vectorisable max;
 *   - no top-k: the candidates are all finite tokens; top-p selects the best 256 (quickselect,
 *     then a sort of those only) and grows the prefix 16-fold until it holds p of the mass;
 *     min-p filters in one pass and sorts only the survivors.
 * No full sort of the vocabulary happens when top-k is set.
 */
#include "sample/sample.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* One candidate token. */
typedef struct nx_cand {
    float logit;
    int32_t id;
} nx_cand;

struct nx_sampler {
    nx_sampler_params params;
    int32_t n_vocab;
    float *work;            /* [n_vocab] biased / penalised copy of the logits (only when needed) */
    const float *row;       /* the row the chain reads: the caller's logits, or `work` */
    nx_logit_bias *bias;    /* [n_bias] merged logit bias, increasing token ids */
    int32_t n_bias, n_ban;  /* entries; entries at -inf, counting the bans below */
    int32_t *ban;           /* [n_eog_ban] params.ban, increasing ids, not in bias as -inf */
    int32_t n_eog_ban;
    nx_cand *cand;          /* [n_vocab] current candidate set */
    int32_t *hist;          /* accepted tokens, oldest first */
    int32_t n_hist, cap_hist;
    int32_t *win;           /* [penalty window] scratch for counting */
    int32_t cap_win;
    nx_dist own;            /* the distribution nx_sampler_sample draws from */
    struct typ_ent *typ;    /* [n_vocab] typical-p scratch (only with typ_p < 1) */
    int32_t *dry_tok, *dry_len, n_dry; /* own copy of the DRY breakers (params point here) */
    int32_t *dry_cnt;       /* [cap_dry] DRY scratch: repeat counts, then (token, length) pairs */
    int32_t cap_dry;
    int32_t *cpos;          /* [n_vocab] samplers order: token -> index in cand during a penalty
                             * step, else -1 (only with params.samplers set) */
    bool on_cand;           /* penalties / DRY adjust cand (via cpos) instead of work */
};

/* The logit a penalty step adjusts: the dense row, or (samplers order) the candidate's, NULL when
 * the token is no longer a candidate. */
static inline float *logit_of(nx_sampler *s, int32_t tok) {
    if (!s->on_cand) return &s->work[tok];
    return s->cpos[tok] >= 0 ? &s->cand[s->cpos[tok]].logit : NULL;
}

/* A candidate with its typical-p score |-log p - H|. */
typedef struct typ_ent {
    double score;
    nx_cand c;
} typ_ent;

/* ---- parameters -------------------------------------------------------------------------- */

nx_sampler_params nx_sampler_default_params(void) {
    nx_sampler_params p = {
        .temp = 0.80f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f, .min_keep = 0,
        .penalty_last_n = 64, .penalty_repeat = 1.0f, .penalty_freq = 0.0f,
        .penalty_present = 0.0f, .seed = 0,
        .typ_p = 1.0f, .top_n_sigma = -1.0f, .xtc_probability = 0.0f, .xtc_threshold = 0.1f,
        .dynatemp_range = 0.0f, .dynatemp_exponent = 1.0f,
        .dry_multiplier = 0.0f, .dry_base = 1.75f, .dry_allowed_length = 2, .dry_penalty_last_n = -1,
    };
    return p;
}

nx_sampler_params nx_sampler_greedy_params(void) {
    nx_sampler_params p = nx_sampler_default_params();
    p.temp = 0.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.penalty_last_n = 0;
    return p;
}

bool nx_sampler_params_check(const nx_sampler_params *p, nx_err *err) {
    if (!isfinite(p->temp)) return nx_fail(err, "sampler: temp must be a finite number, got %g", p->temp);
    if (!(p->top_p >= 0.0f && p->top_p <= 1.0f))
        return nx_fail(err, "sampler: top_p must be in [0, 1], got %g", p->top_p);
    if (!(p->min_p >= 0.0f && p->min_p <= 1.0f))
        return nx_fail(err, "sampler: min_p must be in [0, 1], got %g", p->min_p);
    if (p->min_keep < 0) return nx_fail(err, "sampler: min_keep must be >= 0, got %d", p->min_keep);
    if (!(p->typ_p >= 0.0f && p->typ_p <= 1.0f))
        return nx_fail(err, "sampler: typ_p must be in [0, 1], got %g", p->typ_p);
    if (!isfinite(p->top_n_sigma))
        return nx_fail(err, "sampler: top_n_sigma must be a finite number (<= 0: off), got %g", p->top_n_sigma);
    if (!(p->xtc_probability >= 0.0f && p->xtc_probability <= 1.0f))
        return nx_fail(err, "sampler: xtc_probability must be in [0, 1], got %g", p->xtc_probability);
    if (!(p->xtc_threshold >= 0.0f && p->xtc_threshold <= 1.0f))
        return nx_fail(err, "sampler: xtc_threshold must be in [0, 1] (> 0.5: off), got %g", p->xtc_threshold);
    if (!(p->dynatemp_range >= 0.0f) || !isfinite(p->dynatemp_range))
        return nx_fail(err, "sampler: dynatemp_range must be a finite number >= 0, got %g", p->dynatemp_range);
    if (!(p->dry_multiplier >= 0.0f) || !isfinite(p->dry_multiplier) || !isfinite(p->dry_base))
        return nx_fail(err, "sampler: dry_multiplier must be finite and >= 0 and dry_base finite, got %g and %g",
                       p->dry_multiplier, p->dry_base);
    if (p->dry_allowed_length < 0)
        return nx_fail(err, "sampler: dry_allowed_length must be >= 0, got %d", p->dry_allowed_length);
    if (p->dry_penalty_last_n < -1)
        return nx_fail(err, "sampler: dry_penalty_last_n must be >= -1 (-1 = whole history), got %d",
                       p->dry_penalty_last_n);
    if (p->n_dry_breakers < 0 || (p->n_dry_breakers > 0 && (!p->dry_breakers || !p->dry_breaker_lens)))
        return nx_fail(err, "sampler: %d DRY sequence breakers without their arrays", p->n_dry_breakers);
    for (int32_t i = 0; i < p->n_dry_breakers; i++)
        if (p->dry_breaker_lens[i] < 1 || p->dry_breaker_lens[i] > 64)
            return nx_fail(err, "sampler: DRY sequence breaker %d has %d tokens (1..64)", i, p->dry_breaker_lens[i]);
    if (!(p->dynatemp_exponent >= 0.0f) || !isfinite(p->dynatemp_exponent))
        return nx_fail(err, "sampler: dynatemp_exponent must be a finite number >= 0, got %g", p->dynatemp_exponent);
    if (p->penalty_last_n < -1)
        return nx_fail(err, "sampler: penalty_last_n must be >= -1 (-1 = whole history), got %d",
                       p->penalty_last_n);
    if (!(p->penalty_repeat > 0.0f) || !isfinite(p->penalty_repeat))
        return nx_fail(err, "sampler: repeat penalty must be a finite number > 0, got %g", p->penalty_repeat);
    if (!isfinite(p->penalty_freq))
        return nx_fail(err, "sampler: frequency penalty must be finite, got %g", p->penalty_freq);
    if (!isfinite(p->penalty_present))
        return nx_fail(err, "sampler: presence penalty must be finite, got %g", p->penalty_present);
    if (memchr(p->samplers, 0, sizeof p->samplers) == NULL)
        return nx_fail(err, "sampler: the samplers order is not a string of at most %zu letters", sizeof p->samplers - 1);
    for (const char *c = p->samplers; *c; c++) {
        if (!strchr("edskypmxt", *c))
            return nx_fail(err, "sampler: '%c' in the samplers order is not one of e d s k y p m x t", *c);
        if (strchr(c + 1, *c)) return nx_fail(err, "sampler: '%c' appears twice in the samplers order", *c);
    }
    if (p->n_ban < 0 || (p->n_ban > 0 && !p->ban))
        return nx_fail(err, "sampler: the ban list has %d entries and %s pointer", p->n_ban, p->ban ? "a" : "a NULL");
    if (p->n_logit_bias < 0 || (p->n_logit_bias > 0 && !p->logit_bias))
        return nx_fail(err, "sampler: logit_bias has %d entries and %s pointer", p->n_logit_bias,
                       p->logit_bias ? "a" : "a NULL");
    for (int32_t i = 0; i < p->n_logit_bias; i++) {
        const float b = p->logit_bias[i].bias;
        if (isnan(b) || b == INFINITY)
            return nx_fail(err, "sampler: logit_bias[%d] (token %d) is %g: a bias must be finite or -inf (ban)", i,
                           p->logit_bias[i].token, b);
    }
    return true;
}

static int cmp_bias(const void *a, const void *b) {
    const int32_t x = ((const nx_logit_bias *)a)->token, y = ((const nx_logit_bias *)b)->token;
    return (x > y) - (x < y);
}

static bool dry_active(const nx_sampler_params *p) {
    return p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0;
}

static bool penalties_active(const nx_sampler_params *p) {
    return p->penalty_last_n != 0 &&
           (p->penalty_repeat != 1.0f || p->penalty_freq != 0.0f || p->penalty_present != 0.0f);
}

/* ---- dist -------------------------------------------------------------------------------- */

bool nx_dist_init(nx_dist *d, int32_t n_vocab, nx_err *err) {
    memset(d, 0, sizeof *d);
    if (n_vocab <= 0) return nx_fail(err, "sampler: n_vocab must be > 0, got %d", n_vocab);
    d->ids = nx_malloc((size_t)n_vocab * sizeof *d->ids, "distribution ids", err);
    d->probs = nx_malloc((size_t)n_vocab * sizeof *d->probs, "distribution probs", err);
    if (!d->ids || !d->probs) {
        nx_dist_free(d);
        return false;
    }
    d->cap = n_vocab;
    return true;
}

void nx_dist_free(nx_dist *d) {
    if (!d) return;
    free(d->ids);
    free(d->probs);
    memset(d, 0, sizeof *d);
}

float nx_dist_prob(const nx_dist *d, int32_t id) {
    for (int32_t i = 0; i < d->n; i++)
        if (d->ids[i] == id) return d->probs[i];
    return 0.0f;
}

/* ---- sampler lifetime ------------------------------------------------------------------- */

void nx_sampler_free(nx_sampler *s) {
    if (!s) return;
    free(s->work);
    free(s->cand);
    free(s->hist);
    free(s->win);
    free(s->bias);
    free(s->ban);
    free(s->typ);
    free(s->dry_tok);
    free(s->dry_len);
    free(s->dry_cnt);
    free(s->cpos);
    nx_dist_free(&s->own);
    free(s);
}

bool nx_sampler_create(nx_sampler **out, int32_t n_vocab, const nx_sampler_params *p, nx_err *err) {
    *out = NULL;
    if (n_vocab <= 0) return nx_fail(err, "sampler: n_vocab must be > 0, got %d", n_vocab);
    if (!nx_sampler_params_check(p, err)) return false;
    nx_sampler *s = nx_calloc(1, sizeof *s, "sampler", err);
    if (!s) return false;
    s->params = *p;
    s->n_vocab = n_vocab;
    /* the logit bias: own copy, one entry per token (duplicates add up), increasing ids */
    s->params.logit_bias = NULL;
    s->params.n_logit_bias = 0;
    for (int32_t i = 0; i < p->n_logit_bias; i++)
        if (p->logit_bias[i].token < 0 || p->logit_bias[i].token >= n_vocab) {
            nx_fail(err, "sampler: logit_bias[%d]: token %d is outside the vocabulary [0, %d)", i,
                    p->logit_bias[i].token, n_vocab);
            nx_sampler_free(s);
            return false;
        }
    if (p->n_logit_bias > 0) {
        s->bias = nx_malloc((size_t)p->n_logit_bias * sizeof *s->bias, "sampler logit bias", err);
        if (!s->bias) {
            nx_sampler_free(s);
            return false;
        }
        memcpy(s->bias, p->logit_bias, (size_t)p->n_logit_bias * sizeof *s->bias);
        qsort(s->bias, (size_t)p->n_logit_bias, sizeof *s->bias, cmp_bias);
        int32_t n = 0;
        for (int32_t i = 0; i < p->n_logit_bias; i++) {
            if (n > 0 && s->bias[n - 1].token == s->bias[i].token) s->bias[n - 1].bias += s->bias[i].bias;
            else s->bias[n++] = s->bias[i];
        }
        for (int32_t i = 0; i < n; i++) s->n_ban += s->bias[i].bias == -INFINITY;
        s->n_bias = n;
        s->params.logit_bias = s->bias;
        s->params.n_logit_bias = n;
    }
    s->params.dry_breakers = s->params.dry_breaker_lens = NULL;
    s->params.n_dry_breakers = 0;
    if (p->n_dry_breakers > 0) {
        int32_t total = 0;
        for (int32_t i = 0; i < p->n_dry_breakers; i++) total += p->dry_breaker_lens[i];
        s->dry_tok = nx_malloc((size_t)total * sizeof *s->dry_tok, "sampler DRY breakers", err);
        s->dry_len = s->dry_tok ? nx_malloc((size_t)p->n_dry_breakers * sizeof *s->dry_len, "sampler DRY breakers", err)
                                : NULL;
        if (!s->dry_len) {
            nx_sampler_free(s);
            return false;
        }
        for (int32_t i = 0; i < total; i++)
            if (p->dry_breakers[i] < 0 || p->dry_breakers[i] >= n_vocab) {
                nx_fail(err, "sampler: a DRY sequence breaker holds token %d, outside the vocabulary [0, %d)",
                        p->dry_breakers[i], n_vocab);
                nx_sampler_free(s);
                return false;
            }
        memcpy(s->dry_tok, p->dry_breakers, (size_t)total * sizeof *s->dry_tok);
        memcpy(s->dry_len, p->dry_breaker_lens, (size_t)p->n_dry_breakers * sizeof *s->dry_len);
        s->n_dry = p->n_dry_breakers;
        s->params.dry_breakers = s->dry_tok;
        s->params.dry_breaker_lens = s->dry_len;
        s->params.n_dry_breakers = s->n_dry;
    }
    s->params.ban = NULL;
    s->params.n_ban = 0;
    if (p->n_ban > 0) {
        s->ban = nx_malloc((size_t)p->n_ban * sizeof *s->ban, "sampler bans", err);
        if (!s->ban) {
            nx_sampler_free(s);
            return false;
        }
        for (int32_t i = 0; i < p->n_ban; i++) {
            const int32_t t = p->ban[i];
            if (t < 0 || t >= n_vocab) {
                nx_fail(err, "sampler: ban[%d]: token %d is outside the vocabulary [0, %d)", i, t, n_vocab);
                nx_sampler_free(s);
                return false;
            }
            bool dup = false; /* a token banned twice, or already at -inf through logit_bias, once */
            for (int32_t k = 0; k < s->n_eog_ban && !dup; k++) dup = s->ban[k] == t;
            for (int32_t k = 0; k < s->n_bias && !dup; k++) dup = s->bias[k].token == t && s->bias[k].bias == -INFINITY;
            if (!dup) s->ban[s->n_eog_ban++] = t;
        }
        s->n_ban += s->n_eog_ban;
    }
    s->work = nx_malloc((size_t)n_vocab * sizeof *s->work, "sampler logits copy", err);
    s->cand = s->work ? nx_malloc((size_t)n_vocab * sizeof *s->cand, "sampler candidates", err) : NULL;
    if (p->samplers[0]) {
        s->cpos = s->cand ? nx_malloc((size_t)n_vocab * sizeof *s->cpos, "sampler order scratch", err) : NULL;
        if (!s->cpos) {
            nx_sampler_free(s);
            return false;
        }
        for (int32_t i = 0; i < n_vocab; i++) s->cpos[i] = -1;
    }
    if (s->cand && p->typ_p < 1.0f) s->typ = nx_malloc((size_t)n_vocab * sizeof *s->typ, "sampler typical-p", err);
    if (!s->cand || (p->typ_p < 1.0f && !s->typ) || !nx_dist_init(&s->own, n_vocab, err)) {
        nx_sampler_free(s);
        return false;
    }
    *out = s;
    return true;
}


void nx_sampler_reset(nx_sampler *s) { s->n_hist = 0; }

/* ---- penalty history -------------------------------------------------------------------- */

bool nx_sampler_accept(nx_sampler *s, int32_t token, nx_err *err) {
    if (token < 0 || token >= s->n_vocab)
        return nx_fail(err, "sampler: accepted token id %d is outside the vocabulary [0, %d)", token, s->n_vocab);
    if (s->params.penalty_last_n == 0 && !dry_active(&s->params)) {
        s->n_hist++; /* only the count matters (rollback bookkeeping) */
        return true;
    }
    if (s->n_hist == s->cap_hist) {
        int32_t cap = s->cap_hist ? 2 * s->cap_hist : 256;
        int32_t *h = realloc(s->hist, (size_t)cap * sizeof *h);
        if (!h) return nx_fail(err, "sampler: out of memory growing the token history to %d", cap);
        s->hist = h;
        s->cap_hist = cap;
    }
    s->hist[s->n_hist++] = token;
    return true;
}

void nx_sampler_rollback(nx_sampler *s, int32_t n) {
    if (n < 0) n = 0;
    s->n_hist = n >= s->n_hist ? 0 : s->n_hist - n;
}

int32_t nx_sampler_n_accepted(const nx_sampler *s) { return s->n_hist; }

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Applies the penalties to s->work for each distinct token of the window (the last
 * penalty_last_n accepted tokens), each once with its count in the window. */
static bool apply_penalties(nx_sampler *s, nx_err *err) {
    const nx_sampler_params *p = &s->params;
    if (!penalties_active(p) || s->n_hist == 0) return true;
    int32_t n = p->penalty_last_n < 0 ? s->n_hist : NX_MIN(p->penalty_last_n, s->n_hist);
    if (n > s->cap_win) {
        int32_t *w = realloc(s->win, (size_t)n * sizeof *w);
        if (!w) return nx_fail(err, "sampler: out of memory for a penalty window of %d tokens", n);
        s->win = w;
        s->cap_win = n;
    }
    memcpy(s->win, s->hist + (s->n_hist - n), (size_t)n * sizeof *s->win);
    qsort(s->win, (size_t)n, sizeof *s->win, cmp_i32);
    for (int32_t i = 0; i < n;) {
        int32_t tok = s->win[i], count = 0;
        while (i < n && s->win[i] == tok) { i++; count++; }
        float *lp = logit_of(s, tok);
        if (!lp) continue;
        float l = *lp;
        /* divide positive logits, multiply non-positive ones: the token always gets less likely */
        l = l <= 0.0f ? l * p->penalty_repeat : l / p->penalty_repeat;
        l -= (float)count * p->penalty_freq + p->penalty_present;
        *lp = l;
    }
    return true;
}

typedef struct dry_pair {
    int32_t token, len;
} dry_pair;

static int cmp_dry(const void *a, const void *b) {
    const dry_pair *x = a, *y = b;
    if (x->token != y->token) return (x->token > y->token) - (x->token < y->token);
    return (x->len < y->len) - (x->len > y->len); /* longest first */
}

/* The window DRY reads: the last dry_penalty_last_n accepted tokens (-1: all). */
static int32_t dry_window(const nx_sampler *s) {
    const int32_t n = s->params.dry_penalty_last_n;
    return n < 0 ? s->n_hist : NX_MIN(n, s->n_hist);
}

/* DRY on s->work (sample.h): h[-i] is the i-th token from the end of the window. */
static bool apply_dry(nx_sampler *s, nx_err *err) {
    const nx_sampler_params *p = &s->params;
    const int32_t N = dry_window(s), A = p->dry_allowed_length;
    if (N <= A) return true;
    const int32_t *h = s->hist + s->n_hist - 1;
    /* the repeat limit: back to the most recent breaker (the longest breaker ending there) */
    int32_t limit = N;
    for (int32_t i = 0; i < N; i++) {
        int32_t longest = -1;
        for (int32_t b = 0, off = 0; b < s->n_dry; off += s->dry_len[b++]) {
            const int32_t tail = s->dry_len[b] - 1;
            if (s->dry_tok[off] != h[-i] || tail <= longest || tail > i) continue;
            bool match = true;
            for (int32_t o = 0; o < tail && match; o++) match = s->dry_tok[off + 1 + o] == h[-(i - o - 1)];
            if (match) longest = tail;
        }
        if (longest >= 0) {
            limit = i - longest;
            break;
        }
    }
    if (limit < A) return true;
    if (s->cap_dry < 2 * N) {
        int32_t *c = realloc(s->dry_cnt, (size_t)2 * (size_t)N * sizeof *c);
        if (!c) return nx_fail(err, "sampler: out of memory for a DRY window of %d tokens", N);
        s->dry_cnt = c;
        s->cap_dry = 2 * N;
    }
    /* each earlier place k back where the window's suffix repeats (length L, capped at the
     * limit): the token after it, h[-(k - 1)], would extend the repeat */
    dry_pair *pairs = (dry_pair *)s->dry_cnt;
    int32_t np = 0;
    for (int32_t k = 1; k < N; k++) {
        int32_t len = 0;
        while (len + k < N && len < limit && h[-len] == h[-(len + k)]) len++;
        if (len >= A) pairs[np++] = (dry_pair){h[-(k - 1)], len};
    }
    if (np == 0) return true;
    qsort(pairs, (size_t)np, sizeof *pairs, cmp_dry);
    int max_exp = 0; /* keeps base^exp finite in float (log(FLT_MAX) = 88.72) */
    if (p->dry_base > 1.000001f) max_exp = (int)(88.7228391f / logf(p->dry_base));
    for (int32_t i = 0; i < np; i++) {
        if (i > 0 && pairs[i].token == pairs[i - 1].token) continue; /* its longest came first */
        bool single_breaker = false;
        for (int32_t b = 0, off = 0; b < s->n_dry && !single_breaker; off += s->dry_len[b++])
            single_breaker = s->dry_len[b] == 1 && s->dry_tok[off] == pairs[i].token;
        if (single_breaker) continue;
        int e = pairs[i].len - A;
        if (max_exp > 0 && e > max_exp) e = max_exp;
        float *lp = logit_of(s, pairs[i].token);
        if (lp) *lp -= p->dry_multiplier * powf(p->dry_base, (float)e);
    }
    return true;
}

/* Points s->row at the logits the chain reads: the caller's row, or - with a logit bias or
 * active penalties - s->work holding the row with the bias added, then the penalties applied.
 * Fails (naming the token) when a bias makes a logit +inf or bans every finite token. */
static bool prepare_row(nx_sampler *s, const float *logits, bool bans, bool penalize, nx_err *err) {
    const int32_t V = s->n_vocab;
    s->row = logits;
    s->on_cand = false;
    const bool pen = penalize && penalties_active(&s->params) && s->n_hist > 0;
    const bool dry = penalize && dry_active(&s->params) && dry_window(s) > s->params.dry_allowed_length;
    if (s->n_bias == 0 && !pen && !dry && !(bans && s->n_eog_ban)) return true;
    memcpy(s->work, logits, (size_t)V * sizeof *s->work);
    for (int32_t i = 0; i < s->n_bias; i++) {
        const int32_t t = s->bias[i].token;
        s->work[t] += s->bias[i].bias;
        if (s->work[t] == INFINITY)
            return nx_fail(err, "sampler: logit_bias %g makes the logit of token %d +inf", s->bias[i].bias, t);
    }
    if (pen && !apply_penalties(s, err)) return false;
    if (dry && !apply_dry(s, err)) return false;
    if (bans)
        for (int32_t i = 0; i < s->n_eog_ban; i++) s->work[s->ban[i]] = -INFINITY;
    s->row = s->work;
    if (s->n_ban > 0 && nx_sampler_all_banned(s, logits))
        return nx_fail(err, "sampler: logit_bias bans every token that has a finite logit (%d banned)", s->n_ban);
    return true;
}

bool nx_sampler_all_banned(const nx_sampler *s, const float *logits) {
    if (s->n_ban == 0) return false;
    int32_t finite = 0, banned = 0;
    for (int32_t i = 0; i < s->n_vocab; i++) finite += logits[i] > -INFINITY; /* NaN is not counted */
    for (int32_t i = 0; i < s->n_bias; i++)
        banned += s->bias[i].bias == -INFINITY && logits[s->bias[i].token] > -INFINITY;
    for (int32_t i = 0; i < s->n_eog_ban; i++) banned += logits[s->ban[i]] > -INFINITY;
    return finite == banned;
}

/* ---- selection ------------------------------------------------------------------------------ */

/* The canonical order: larger logit first, equal logits by lower id. */
static inline bool cand_better(nx_cand a, nx_cand b) {
    return a.logit > b.logit || (a.logit == b.logit && a.id < b.id);
}

static int cmp_cand(const void *pa, const void *pb) {
    nx_cand a = *(const nx_cand *)pa, b = *(const nx_cand *)pb;
    if (cand_better(a, b)) return -1;
    if (cand_better(b, a)) return 1;
    return 0;
}

/* Min-heap on "better": heap[0] is the worst of the kept entries. */
static void heap_sift_down(nx_cand *h, int32_t n, int32_t i) {
    for (;;) {
        int32_t l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && cand_better(h[w], h[l])) w = l;
        if (r < n && cand_better(h[w], h[r])) w = r;
        if (w == i) return;
        nx_cand t = h[i]; h[i] = h[w]; h[w] = t;
        i = w;
    }
}

static void heap_sift_up(nx_cand *h, int32_t i) {
    while (i > 0) {
        int32_t parent = (i - 1) / 2;
        if (!cand_better(h[parent], h[i])) return;
        nx_cand t = h[i]; h[i] = h[parent]; h[parent] = t;
        i = parent;
    }
}

/* Offers one candidate to a heap holding at most m entries (*n so far). */
static inline void heap_offer(nx_cand *h, int32_t *n, int32_t m, nx_cand c) {
    if (*n < m) {
        h[*n] = c;
        heap_sift_up(h, (*n)++);
    } else if (cand_better(c, h[0])) {
        h[0] = c;
        heap_sift_down(h, m, 0);
    }
}

/* Best m finite entries of a logit row, sorted, into out.  Returns how many (<= m). */
static int32_t select_top_row(const float *row, int32_t n_vocab, int32_t m, nx_cand *out) {
    enum { BLOCK = 64 };
    int32_t n = 0;
    for (int32_t b = 0; b < n_vocab; b += BLOCK) {
        int32_t e = NX_MIN(b + BLOCK, n_vocab);
        if (n == m) { /* heap full: skip the block if nothing in it can beat the worst kept */
            float bmax = -INFINITY;
            for (int32_t i = b; i < e; i++) bmax = row[i] > bmax ? row[i] : bmax;
            if (bmax < out[0].logit) continue;
        }
        for (int32_t i = b; i < e; i++) {
            float l = row[i];
            if (l == -INFINITY) continue;
            if (n == m && l < out[0].logit) continue; /* cannot beat the worst kept */
            heap_offer(out, &n, m, (nx_cand){l, i});
        }
    }
    qsort(out, (size_t)n, sizeof *out, cmp_cand);
    return n;
}

static inline void cand_swap(nx_cand *a, nx_cand *b) {
    nx_cand t = *a;
    *a = *b;
    *b = t;
}

/* Quickselect: permutes c[0..n) so that c[0..m) holds the m best entries (in no particular
 * order).  The order is total (ids are distinct), which the Hoare partition below relies on:
 * after it, everything in [lo, j] is better than or equal to the pivot, everything in [i, hi)
 * worse than or equal, and j < i. */
static void select_best(nx_cand *c, int32_t n, int32_t m) {
    int32_t lo = 0, hi = n;
    while (hi - lo > 16) {
        int32_t mid = lo + (hi - lo) / 2;
        /* median of three as the pivot: never the range's extreme, so both sides shrink */
        if (cand_better(c[mid], c[lo])) cand_swap(&c[mid], &c[lo]);
        if (cand_better(c[hi - 1], c[lo])) cand_swap(&c[hi - 1], &c[lo]);
        if (cand_better(c[hi - 1], c[mid])) cand_swap(&c[hi - 1], &c[mid]);
        nx_cand piv = c[mid]; /* c[lo] better than piv better than c[hi - 1] */
        int32_t i = lo, j = hi - 1;
        while (i <= j) {
            while (cand_better(c[i], piv)) i++;
            while (cand_better(piv, c[j])) j--;
            if (i <= j) {
                cand_swap(&c[i], &c[j]);
                i++;
                j--;
            }
        }
        if (m <= j) hi = j + 1;
        else if (m >= i) lo = i;
        else return; /* the boundary lies on the pivot itself */
    }
    /* small range: insertion sort puts everything in place */
    for (int32_t a = lo + 1; a < hi; a++) {
        nx_cand x = c[a];
        int32_t b = a - 1;
        while (b >= lo && cand_better(x, c[b])) {
            c[b + 1] = c[b];
            b--;
        }
        c[b + 1] = x;
    }
}

/* ---- the chain ------------------------------------------------------------------------------- */

/* Validates the row: no NaN or +inf, at least one finite logit.  The first loop has no early
 * exit so it vectorises; the second finds the culprit only when there is one. */
static bool check_row(const float *logits, int32_t n_vocab, nx_err *err) {
    int bad = 0, finite = 0;
    for (int32_t i = 0; i < n_vocab; i++) {
        float l = logits[i];
        bad |= (l != l) | (l == INFINITY);   /* NaN compares unequal to itself */
        finite |= l != -INFINITY;
    }
    if (bad) {
        for (int32_t i = 0; i < n_vocab; i++) {
            if (isnan(logits[i])) return nx_fail(err, "sampler: logit of token %d is NaN", i);
            if (logits[i] == INFINITY) return nx_fail(err, "sampler: logit of token %d is +inf", i);
        }
    }
    if (!finite) return nx_fail(err, "sampler: every logit is -inf (%d tokens): nothing to sample", n_vocab);
    return true;
}

int32_t nx_argmax(const float *logits, int32_t n) {
    /* two vectorisable passes: the maximum (and any NaN), then its first position */
    float mx = -INFINITY;
    int nan = 0;
    for (int32_t i = 0; i < n; i++) {
        float l = logits[i];
        nan |= l != l;
        mx = l > mx ? l : mx;
    }
    if (nan || mx == -INFINITY) return -1;
    for (int32_t i = 0; i < n; i++)
        if (logits[i] == mx) return i; /* the first: ties go to the lowest id */
    return -1;
}

/* Writes softmax(cand / temp) into out (same order). */
static void softmax_to_dist(const nx_cand *cand, int32_t n, float temp, nx_dist *out) {
    float max_l = cand[0].logit;
    for (int32_t i = 1; i < n; i++) max_l = NX_MAX(max_l, cand[i].logit);
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        float e = expf((cand[i].logit - max_l) / temp);
        out->ids[i] = cand[i].id;
        out->probs[i] = e;
        sum += e;
    }
    /* sum >= 1: the max entry contributes exp(0) */
    for (int32_t i = 0; i < n; i++) out->probs[i] = (float)(out->probs[i] / sum);
    out->n = n;
}

/* top-p on cand[0..*n): keeps the smallest descending prefix with cumulative probability
 * (softmax at temperature 1) >= top_p, at least min_keep.  Leaves cand sorted. */
static void apply_top_p(nx_sampler *s, int32_t *n, bool *sorted, int32_t min_keep) {
    float top_p = s->params.top_p;
    nx_cand *cand = s->cand;
    float max_l = cand[0].logit;
    for (int32_t i = 1; i < *n; i++) max_l = NX_MAX(max_l, cand[i].logit);
    double total = 0.0;
    for (int32_t i = 0; i < *n; i++) total += expf(cand[i].logit - max_l);

    /* Sort only a prefix: the best 256, then 16 times more while they hold less than p. */
    int32_t m = *sorted ? *n : NX_MIN(*n, 256);
    for (;;) {
        if (!*sorted) {
            if (m < *n) select_best(cand, *n, m);
            qsort(cand, (size_t)m, sizeof *cand, cmp_cand);
        }
        double cum = 0.0;
        int32_t keep = -1;
        for (int32_t i = 0; i < m; i++) {
            cum += expf(cand[i].logit - max_l) / total;
            if (cum >= top_p && i + 1 >= min_keep) {
                keep = i + 1;
                break;
            }
        }
        if (keep < 0 && m < *n) { /* the prefix did not reach p: a larger one */
            m = *n / 16 > m ? m * 16 : *n;
            m = NX_MIN(m, *n);
            continue;
        }
        if (keep < 0) keep = *n; /* rounding: p never reached, keep all */
        *n = keep;
        *sorted = true;
        return;
    }
}

/* min-p on cand[0..*n): keeps logit >= max + log(min_p), at least min_keep; sorts survivors. */
static void apply_min_p(nx_sampler *s, int32_t *n, bool *sorted, int32_t min_keep) {
    nx_cand *cand = s->cand;
    float max_l = cand[0].logit;
    if (!*sorted)
        for (int32_t i = 1; i < *n; i++) max_l = NX_MAX(max_l, cand[i].logit);
    float threshold = max_l + logf(s->params.min_p);
    if (*sorted) {
        int32_t i = 1; /* the best token always stays */
        while (i < *n && (cand[i].logit >= threshold || i < min_keep)) i++;
        *n = i;
        return;
    }
    int32_t kept = 0;
    for (int32_t i = 0; i < *n; i++)
        if (cand[i].logit >= threshold) cand[kept++] = cand[i];
    if (kept >= min_keep) {
        *n = kept;
        qsort(cand, (size_t)kept, sizeof *cand, cmp_cand);
        *sorted = true;
        return;
    }
    /* Too few survivors for min_keep: the first filtering pass compacted cand, so rebuild
     * the candidates from the penalised row and take the best min_keep. */
    int32_t total = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (s->row[i] != -INFINITY) cand[total++] = (nx_cand){s->row[i], i};
    qsort(cand, (size_t)total, sizeof *cand, cmp_cand);
    *n = NX_MIN(min_keep, total);
    *sorted = true;
}

static inline uint64_t position_key(uint64_t seed, int32_t k);
static inline uint64_t mix64(uint64_t z);

/* top-n-sigma: keeps cand[0..*n) with logit >= max - n * std, the statistics over every finite
 * logit of the row (llama.cpp applies it to the whole vocabulary, before top-k).  The maximum
 * stays, so *n >= 1.  Order kept. */
static void apply_top_n_sigma(nx_sampler *s, int32_t *n) {
    const float *row = s->row;
    double sum = 0.0, mx = -INFINITY;
    int64_t cnt = 0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (row[i] != -INFINITY) {
            sum += row[i];
            mx = row[i] > mx ? row[i] : mx;
            cnt++;
        }
    const double mean = sum / (double)cnt;
    double acc = 0.0;
    for (int32_t i = 0; i < s->n_vocab; i++)
        if (row[i] != -INFINITY) acc += ((double)row[i] - mean) * ((double)row[i] - mean);
    const double thr = mx - (double)s->params.top_n_sigma * sqrt(acc / (double)cnt);
    int32_t kept = 0;
    for (int32_t i = 0; i < *n; i++)
        if ((double)s->cand[i].logit >= thr) s->cand[kept++] = s->cand[i];
    *n = kept;
}

static int cmp_typ(const void *pa, const void *pb) {
    const typ_ent *a = pa, *b = pb;
    if (a->score != b->score) return a->score < b->score ? -1 : 1;
    return cmp_cand(&a->c, &b->c);
}

/* typical: the candidates by |-log p - H| (increasing), the shortest prefix whose mass exceeds
 * typ_p, at least min_keep.  Leaves cand in that (unsorted) order. */
static void apply_typical(nx_sampler *s, int32_t *n, bool *sorted, int32_t min_keep) {
    typ_ent *t = s->typ;
    /* the softmax: into t[].score first (probabilities), then the scores */
    float max_l = s->cand[0].logit;
    for (int32_t i = 1; i < *n; i++) max_l = NX_MAX(max_l, s->cand[i].logit);
    double sum = 0.0;
    for (int32_t i = 0; i < *n; i++) {
        t[i].c = s->cand[i];
        sum += (t[i].score = exp((double)s->cand[i].logit - max_l));
    }
    double h = 0.0;
    for (int32_t i = 0; i < *n; i++) {
        t[i].score /= sum;
        if (t[i].score > 0.0) h -= t[i].score * log(t[i].score);
    }
    for (int32_t i = 0; i < *n; i++) t[i].score = t[i].score > 0.0 ? fabs(-log(t[i].score) - h) : INFINITY;
    qsort(t, (size_t)*n, sizeof *t, cmp_typ);
    double cum = 0.0;
    int32_t keep = *n;
    for (int32_t i = 0; i < *n; i++) {
        cum += exp((double)t[i].c.logit - max_l) / sum;
        if (cum > s->params.typ_p && i + 1 >= min_keep) {
            keep = i + 1;
            break;
        }
    }
    for (int32_t i = 0; i < keep; i++) s->cand[i] = t[i].c;
    *n = keep;
    *sorted = false;
}

/* XTC's uniform in [0, 1) at position k: keyed like the draw's noise, on a stream of its own. */
static double xtc_uniform(uint64_t seed, int32_t k) {
    return (double)(mix64(position_key(seed, k) ^ 0x5854432d63686f6bULL) >> 11) * 0x1.0p-53;
}

/* XTC: removes the candidates with probability >= threshold but the least likely of them. */
static void apply_xtc(nx_sampler *s, int32_t *n, bool *sorted, int32_t min_keep) {
    const nx_sampler_params *p = &s->params;
    if (*n < 2 || xtc_uniform(p->seed, s->n_hist) > (double)p->xtc_probability) return;
    if (!*sorted) {
        qsort(s->cand, (size_t)*n, sizeof *s->cand, cmp_cand);
        *sorted = true;
    }
    float max_l = s->cand[0].logit;
    double sum = 0.0;
    for (int32_t i = 0; i < *n; i++) sum += exp((double)s->cand[i].logit - max_l);
    int32_t last = 0; /* the last of the leading run with p >= threshold */
    for (int32_t i = 0; i < *n; i++) {
        if (exp((double)s->cand[i].logit - max_l) / sum >= (double)p->xtc_threshold) last = i;
        else break;
    }
    if (last > 0 && *n - last >= min_keep) {
        memmove(s->cand, s->cand + last, (size_t)(*n - last) * sizeof *s->cand);
        *n -= last;
    }
}

/* The point mass on the best candidate (ties: lowest id). */
static void greedy_dist(const nx_cand *cand, int32_t n, nx_dist *out) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (cand_better(cand[i], cand[b])) b = i;
    out->ids[0] = cand[b].id;
    out->probs[0] = 1.0f;
    out->n = 1;
}

/* The dynamic temperature of cand[0..n) (sample.h), or temp when off or n < 2. */
static float dyn_temp(const nx_sampler_params *p, const nx_cand *cand, int32_t n) {
    if (!(p->dynatemp_range > 0.0f) || n < 2) return p->temp;
    double h = 0.0, sum = 0.0;
    float max_l = cand[0].logit;
    for (int32_t i = 1; i < n; i++) max_l = NX_MAX(max_l, cand[i].logit);
    for (int32_t i = 0; i < n; i++) sum += exp((double)cand[i].logit - max_l);
    for (int32_t i = 0; i < n; i++) {
        const double q = exp((double)cand[i].logit - max_l) / sum;
        if (q > 0.0) h -= q * log(q);
    }
    const double lo = fmax(0.0, (double)p->temp - p->dynatemp_range), hi = (double)p->temp + p->dynatemp_range;
    return (float)(lo + (hi - lo) * pow(h / log((double)n), (double)p->dynatemp_exponent));
}

/* A penalty step (penalties, DRY) on the candidates, in a samplers order. */
static bool penalize_cand(nx_sampler *s, int32_t n, bool dry, nx_err *err) {
    for (int32_t i = 0; i < n; i++) s->cpos[s->cand[i].id] = i;
    s->on_cand = true;
    bool ok = true;
    if (dry) {
        if (dry_active(&s->params) && dry_window(s) > s->params.dry_allowed_length) ok = apply_dry(s, err);
    } else {
        ok = apply_penalties(s, err);
    }
    s->on_cand = false;
    for (int32_t i = 0; i < n; i++) s->cpos[s->cand[i].id] = -1;
    return ok;
}

/* The chain in the order params.samplers gives (llama.cpp's letters; only those listed run),
 * each step on the candidates as llama.cpp's chain does: penalties and DRY adjust the candidates
 * left, temperature divides their logits (later steps see the scaled values; <= 0: the best
 * only), and the distribution is their softmax.  The logit bias and the bans come first. */
static bool dist_ordered(nx_sampler *s, const float *logits, nx_dist *out, nx_err *err) {
    const nx_sampler_params *p = &s->params;
    const int32_t V = s->n_vocab;
    if (!check_row(logits, V, err) || !prepare_row(s, logits, true, false, err)) return false;
    const int32_t min_keep = NX_MAX(1, p->min_keep);
    int32_t n = 0;
    for (int32_t i = 0; i < V; i++)
        if (s->row[i] != -INFINITY) s->cand[n++] = (nx_cand){s->row[i], i};
    bool sorted = false;
    for (const char *c = p->samplers; *c; c++) {
        switch (*c) {
        case 'e':
        case 'd':
            if (!penalize_cand(s, n, *c == 'd', err)) return false;
            sorted = false;
            break;
        case 's':
            if (p->top_n_sigma > 0.0f && n > 1) {
                double sum = 0.0, mx = -INFINITY, acc = 0.0;
                for (int32_t i = 0; i < n; i++) {
                    sum += s->cand[i].logit;
                    mx = fmax(mx, s->cand[i].logit);
                }
                const double mean = sum / n;
                for (int32_t i = 0; i < n; i++) acc += ((double)s->cand[i].logit - mean) * ((double)s->cand[i].logit - mean);
                const double thr = mx - (double)p->top_n_sigma * sqrt(acc / n);
                int32_t kept = 0;
                for (int32_t i = 0; i < n; i++)
                    if ((double)s->cand[i].logit >= thr) s->cand[kept++] = s->cand[i];
                n = kept;
            }
            break;
        case 'k':
            if (p->top_k > 0 && p->top_k < n) {
                select_best(s->cand, n, p->top_k);
                n = p->top_k;
                qsort(s->cand, (size_t)n, sizeof *s->cand, cmp_cand);
                sorted = true;
            }
            break;
        case 'y':
            if (p->typ_p < 1.0f) apply_typical(s, &n, &sorted, min_keep);
            break;
        case 'p':
            if (p->top_p < 1.0f) apply_top_p(s, &n, &sorted, min_keep);
            break;
        case 'm':
            if (p->min_p > 0.0f) apply_min_p(s, &n, &sorted, min_keep);
            break;
        case 'x':
            if (p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f) apply_xtc(s, &n, &sorted, min_keep);
            break;
        case 't': {
            const float t = dyn_temp(p, s->cand, n);
            if (t <= 0.0f) {
                int32_t b = 0;
                for (int32_t i = 1; i < n; i++)
                    if (cand_better(s->cand[i], s->cand[b])) b = i;
                s->cand[0] = s->cand[b];
                n = 1;
            } else {
                for (int32_t i = 0; i < n; i++) s->cand[i].logit /= t;
            }
            break;
        }
        default:
            break;
        }
    }
    if (!sorted) qsort(s->cand, (size_t)n, sizeof *s->cand, cmp_cand);
    softmax_to_dist(s->cand, n, 1.0f, out);
    return true;
}

bool nx_sampler_dist(nx_sampler *s, const float *logits, nx_dist *out, nx_err *err) {
    const nx_sampler_params *p = &s->params;
    const int32_t V = s->n_vocab;
    if (out->cap < V) return nx_fail(err, "sampler: distribution capacity %d is below the vocabulary size %d", out->cap, V);
    if (p->samplers[0]) return dist_ordered(s, logits, out, err);
    if (!check_row(logits, V, err) || !prepare_row(s, logits, true, true, err)) return false;
    const bool typical = p->typ_p < 1.0f, xtc = p->xtc_probability > 0.0f && p->xtc_threshold <= 0.5f,
               dyn = p->dynatemp_range > 0.0f;

    if (p->temp <= 0.0f && !typical && !xtc && !dyn) {
        /* greedy: point mass on the argmax, ties to the lowest id (every other filter keeps it) */
        out->ids[0] = nx_argmax(s->row, V);
        out->probs[0] = 1.0f;
        out->n = 1;
        return true;
    }

    const int32_t min_keep = NX_MAX(1, p->min_keep);
    int32_t n;
    bool sorted;
    if (p->top_k > 0 && p->top_k < V) {
        n = select_top_row(s->row, V, p->top_k, s->cand);
        sorted = true;
    } else {
        n = 0;
        for (int32_t i = 0; i < V; i++)
            if (s->row[i] != -INFINITY) s->cand[n++] = (nx_cand){s->row[i], i};
        sorted = false;
    }
    /* n >= 1: check_row found a finite logit, prepare_row checked that the bias left one, and
     * penalties keep finite logits finite.  top-n-sigma before top-k in llama.cpp's order: the
     * same set either way (both keep the largest logits). */
    if (p->top_n_sigma > 0.0f) apply_top_n_sigma(s, &n);
    if (typical) apply_typical(s, &n, &sorted, min_keep);
    if (p->top_p < 1.0f) apply_top_p(s, &n, &sorted, min_keep);
    if (p->min_p > 0.0f) apply_min_p(s, &n, &sorted, min_keep);
    if (xtc) apply_xtc(s, &n, &sorted, min_keep);
    if (!sorted && (typical || p->top_n_sigma > 0.0f)) { /* a truncation: the entries by probability */
        qsort(s->cand, (size_t)n, sizeof *s->cand, cmp_cand);
        sorted = true;
    }
    float temp = p->temp;
    if (dyn && n > 1) {
        double h = 0.0, sum = 0.0;
        float max_l = s->cand[0].logit;
        for (int32_t i = 1; i < n; i++) max_l = NX_MAX(max_l, s->cand[i].logit);
        for (int32_t i = 0; i < n; i++) sum += exp((double)s->cand[i].logit - max_l);
        for (int32_t i = 0; i < n; i++) {
            const double q = exp((double)s->cand[i].logit - max_l) / sum;
            if (q > 0.0) h -= q * log(q);
        }
        const double lo = fmax(0.0, (double)p->temp - p->dynatemp_range), hi = (double)p->temp + p->dynatemp_range;
        temp = (float)(lo + (hi - lo) * pow(h / log((double)n), (double)p->dynatemp_exponent));
    }
    if (temp <= 0.0f) greedy_dist(s->cand, n, out);
    else softmax_to_dist(s->cand, n, temp, out);
    return true;
}

/* ---- the draw: an exponential race on counter-based noise ---------------------------------- */

/* The splitmix64 output function: a bijective 64-bit mixer. */
static inline uint64_t mix64(uint64_t z) {
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The key of position k (tokens accepted since the last reset) under seed: every token's noise at
 * that position derives from it, and from nothing else. */
static inline uint64_t position_key(uint64_t seed, int32_t k) {
    return mix64(mix64(seed ^ 0x6a09e667f3bcc909ULL) + (uint64_t)(uint32_t)k * 0x9e3779b97f4a7c15ULL);
}

/* u(key, id) in (0, 1): 53 bits, centred in its cell, so never 0 or 1 (log finite). */
static inline double token_uniform(uint64_t key, int32_t id) {
    uint64_t h = mix64(key + ((uint64_t)(uint32_t)id + 1) * 0xd1b54a32d192ed03ULL);
    return ((double)(h >> 11) + 0.5) * 0x1.0p-53;
}

int32_t nx_sampler_draw(nx_sampler *s, const nx_dist *d) {
    if (d->n <= 0) return -1;
    if (d->n == 1) return d->ids[0];
    /* token = argmin_i E_i / p_i with E_i = -log u_i ~ Exp(1) i.i.d. (the exponential race, the
     * same as Gumbel-max argmax_i log p_i - log E_i): P(token = i) = p_i / sum p.  Ties (measure
     * zero) go to the lower id, so the result does not depend on the order of the entries.
     * Pruning: -log u >= 1 - u, so an entry with (1 - u) / p > best cannot win; the 0.999 margin
     * covers the rounding of log, so a pruned entry is always strictly worse and the result is
     * the unpruned argmin. */
    const uint64_t key = position_key(s->params.seed, s->n_hist);
    double best = INFINITY;
    int32_t best_id = -1;
    for (int32_t i = 0; i < d->n; i++) {
        const double p = d->probs[i];
        if (!(p > 0.0)) continue;
        const int32_t id = d->ids[i];
        const double u = token_uniform(key, id);
        if ((1.0 - u) * 0.999 > best * p) continue;
        const double r = -log(u) / p;
        if (r < best || (r == best && id < best_id)) {
            best = r;
            best_id = id;
        }
    }
    return best_id >= 0 ? best_id : d->ids[0]; /* every prob underflowed to 0 */
}

bool nx_sampler_sample(nx_sampler *s, const float *logits, int32_t *token, nx_err *err) {
    if (!nx_sampler_dist(s, logits, &s->own, err)) return false;
    *token = nx_sampler_draw(s, &s->own);
    return true;
}

/* ---- log-probabilities (reporting) ------------------------------------------------------------ */

bool nx_sampler_logprobs(nx_sampler *s, const float *logits, int32_t token, int32_t n_top, float *lp,
                         int32_t *top_ids, float *top_lp, int32_t *n_top_out, nx_err *err) {
    const int32_t V = s->n_vocab;
    if (token < 0 || token >= V) return nx_fail(err, "logprobs: token %d out of range (vocabulary %d)", token, V);
    if (n_top < 0 || n_top > NX_SAMPLER_MAX_TOP_LOGPROBS)
        return nx_fail(err, "logprobs: %d top entries asked (0..%d)", n_top, NX_SAMPLER_MAX_TOP_LOGPROBS);
    if (!check_row(logits, V, err) || !prepare_row(s, logits, false, true, err)) return false;
    const float *row = s->row;
    float mx = -INFINITY;
    for (int32_t i = 0; i < V; i++) mx = row[i] > mx ? row[i] : mx;
    double sum = 0.0;
    for (int32_t i = 0; i < V; i++) sum += exp((double)row[i] - mx);
    const double log_z = (double)mx + log(sum);
    *lp = (float)((double)row[token] - log_z);
    const int32_t n = n_top > 0 ? select_top_row(row, V, n_top, s->cand) : 0;
    for (int32_t i = 0; i < n; i++) {
        top_ids[i] = s->cand[i].id;
        top_lp[i] = (float)((double)s->cand[i].logit - log_z);
    }
    *n_top_out = n;
    return true;
}
