/* spec.c - MTP speculative decoding driver (see spec.h for the data flow and invariants). */
#include "spec/spec.h"
#include "spec/spec_oracle.h"
#include "spec/spec_cost.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define MIRROR_CAP 64         /* backlog rows kept while not drafting (older ones are dropped) */
#define RESEED_ROWS 16        /* rows a stale MTP cache is re-seeded with */
#define PREFILL_CHUNK 512
#define PROBE_FIRST 4         /* plain steps before the first one-draft probe of a sequence */
#define PROBE_MIN 16          /* plain steps between one-draft probes, after an accepted probe */
#define PROBE_MAX 128         /* ... and at most, after rejected probes (doubling) */
#define PROBE_BUDGET 0.01     /* probes take at most this share of the plain decoding time ... */
#define PROBE_GAP_MAX 1024    /* ... unless that would space them more than this many steps */
#define PROBE_BUDGET_RANDOM 0.0025 /* ... and this share for a head that looks clearly random */
#define CONF_MIN 0.05         /* see seq_state.confident */
#define CONF_RANDOM 0.0125    /* see seq_state.top_max */

typedef struct seq_state {
    bool active;
    int32_t id_last;          /* last emitted token, not yet decoded by the target */
    float *pending_h;         /* [E] target hidden of position n_past - 1 (zeros at start) */
    float *chain_h;           /* [E] MTP hout of the previous draft pass */
    int32_t n_mir;            /* mirror backlog rows */
    int32_t base;             /* MTP position = target position - base (see stale) */
    bool stale;               /* backlog rows were dropped: the MTP cache has a gap and is rebuilt
                               * from the last RESEED_ROWS rows at the next drafting pass, with
                               * base = the target position of the first of them.  RoPE is
                               * relative, so renumbered positions attend exactly as before;
                               * only the older context is lost (draft quality, not correctness). */
    int32_t *mir_tok;         /* [mir_cap] */
    float *mir_h;             /* [mir_cap][E] */
    nx_sampler *smp;
    bool greedy;              /* this sequence's sampler has temperature 0 */
    int32_t draft[NX_SPEC_MAX_DRAFT];
    int32_t n_draft;
    int32_t cap;              /* draft length allowed this step */
    bool drafting;            /* still drafting in this step */
    bool ran_mtp;             /* pass 0 ran this step: the MTP holds (id_last, pending_h) at n_past */
    int32_t row;              /* row of this sequence in the current batch */
    int32_t *oracle;
    int32_t n_oracle;
    bool prefilling;          /* nx_spec_prefill_seq_part started and has not finished the prompt */
    int64_t drafted, accepted; /* draft tokens verified / accepted since the sequence's prefill */
    int32_t pf_next;          /* ... prompt tokens decoded so far */
    int32_t resume;           /* > 0: inactive, its caches hold positions [0, resume) (restored from a
                               * state or kept after generating); the next prefill continues them */
    uint64_t mtp_epoch;       /* changes whenever the driver clears the sequence's MTP cache: an
                               * in-place state restores the MTP cells only within one epoch */
    int32_t lp_top;           /* log-probabilities of emitted tokens: top entries (-1 = off) */
    int32_t lp_n;             /* ... recorded by the last prefill / step */
    nx_spec_logprob *lp;      /* [draft_max + 1] */
    /* cost model, per sequence */
    nx_spec_acc acc;          /* decayed acceptance counts per draft position */
    int32_t plain_run;        /* steps planned plain since this sequence last drafted */
    int32_t probe;            /* plain steps between one-draft probes (PROBE_MIN .. PROBE_MAX) */
    bool probing;             /* this step's draft is a probe */
    bool confident;           /* a first draft was accepted, or its MTP softmax had a top
                               * probability >= CONF_MIN: the head is not random, so probes after
                               * rejected drafts are not stretched to the probe budget */
    double top_max;           /* largest MTP softmax top probability of its first-position drafts while
                               * not confident.  Below CONF_RANDOM with a first draft verified and none
                               * accepted, the head looks clearly random (a random head's top is ~4-16
                               * over the number of draft candidates: 0.001-0.004 of 4096; the trained
                               * demo head's weakest first drafts 0.025-0.05): the sequence stops
                               * drafting after its first rejected draft and probes within
                               * PROBE_BUDGET_RANDOM of the plain time */
} seq_state;

struct nx_spec {
    nx_ctx *tgt;
    nx_mtp *mtp;
    nx_spec_params p;
    int32_t n_seq, E, V, n_ctx, mir_cap;
    seq_state *seq;
    nx_dist pd;               /* target distribution of the row being accepted */
    nx_dist qd;               /* draft distribution of the draft being chosen (T > 0) */
    float *dfull;             /* [V] draft logits scattered to token ids when the MTP head has a
                               * reduced vocabulary; the other ids stay -inf for good */
    /* batch scratch */
    int32_t cap_rows;
    int32_t *b_tok, *b_pos, *b_seq;
    int8_t *b_lg;
    float *b_h;
    /* cost model */
    double t_pass;            /* EMA seconds of one MTP draft pass with one row per sequence */
    int32_t n_pass;           /* samples so far (see ema) */
    double t_pass0;           /* EMA seconds of pass 0 while drafting continuously: it also writes
                               * the previous step's accepted rows (<= draft_max + 1 per sequence) */
    int32_t n_pass0;
    double t_probe;           /* EMA seconds of the MTP passes of a step in which only probes draft
                               * (with the backlog rows they write) */
    int32_t n_probe;
    int32_t max_rows;         /* rows of the largest verify: n_seq * (draft_max + 1) */
    double *t_ver;            /* [max_rows + 1] EMA seconds of a verify of n rows (all sequences) */
    int32_t *n_ver;           /* [max_rows + 1] samples so far */
    double *ver_est;          /* [max_rows + 1] scratch: est_verify of each row count */
    double *rates;            /* [n_seq * draft_max] scratch: conditional acceptance per position */
    int32_t *plan_cap, *plan_n; /* [n_seq] scratch of the plan */
    double acc_succ, acc_trials; /* decayed counts of all sequences: the prior of a new sequence */
    int32_t explore_run;      /* drafting steps since one drafted more than the model chose */
    bool cpu_clock;           /* cost samples in this thread's CPU seconds (one-thread pool), else wall */
    nx_spec_cost_fn cost_fn;  /* tests: synthetic pass costs instead of the clock (NULL = clock) */
    void *cost_user;
    uint64_t epoch_next;      /* last MTP epoch handed out (seq_state.mtp_epoch) */
    nx_spec_stats st;
};

nx_spec_params nx_spec_default_params(void) {
    nx_spec_params p = {.draft_max = 3, .draft_min = 0, .draft_p_min = 0.0f, .adaptive = true,
                        .sampling = nx_sampler_greedy_params()};
    return p;
}

static void free_seq(seq_state *q) {
    nx_free_aligned(q->pending_h);
    nx_free_aligned(q->chain_h);
    nx_free_aligned(q->mir_h);
    free(q->mir_tok);
    nx_sampler_free(q->smp);
    free(q->oracle);
    free(q->lp);
}

void nx_spec_free(nx_spec *s) {
    if (!s) return;
    if (s->seq)
        for (int i = 0; i < s->n_seq; i++) free_seq(&s->seq[i]);
    free(s->seq);
    nx_dist_free(&s->pd);
    nx_dist_free(&s->qd);
    nx_free_aligned(s->dfull);
    free(s->b_tok);
    free(s->b_pos);
    free(s->b_seq);
    free(s->b_lg);
    nx_free_aligned(s->b_h);
    free(s->t_ver);
    free(s->n_ver);
    free(s->ver_est);
    free(s->rates);
    free(s->plan_cap);
    free(s->plan_n);
    free(s);
}

bool nx_spec_create(nx_spec **out, nx_ctx *target, nx_mtp *mtp, const nx_spec_params *p, nx_err *err) {
    *out = NULL;
    const nx_ctx_params *cp = nx_ctx_params_of(target);
    const nx_hparams *hp = &nx_ctx_model(target)->hp;
    if (p->draft_max < 0 || p->draft_max > NX_SPEC_MAX_DRAFT)
        return nx_fail(err, "draft_max %d out of range (0..%d)", p->draft_max, NX_SPEC_MAX_DRAFT);
    if (p->draft_min < 0 || p->draft_min > p->draft_max)
        return nx_fail(err, "draft_min %d out of range (0..draft_max = %d)", p->draft_min, p->draft_max);
    if (!(p->draft_p_min >= 0.0f && p->draft_p_min <= 1.0f))
        return nx_fail(err, "draft_p_min %g out of range (0..1)", (double)p->draft_p_min);
    if (!nx_sampler_params_check(&p->sampling, err)) return false;
    if (mtp) {
        if (cp->n_snapshots < p->draft_max)
            return nx_fail(err, "speculative decoding: the target context has %d recurrent snapshot slots, draft_max %d "
                           "needs %d", cp->n_snapshots, p->draft_max, p->draft_max);
        if (nx_ctx_params_of(nx_mtp_ctx(mtp))->n_seq < cp->n_seq || nx_ctx_params_of(nx_mtp_ctx(mtp))->n_ctx < cp->n_ctx)
            return nx_fail(err, "speculative decoding: the MTP context is smaller than the target context");
        if (nx_mtp_n_embd(mtp) != (int32_t)hp->n_embd || nx_mtp_n_vocab(mtp) != (int32_t)hp->n_vocab)
            return nx_fail(err, "speculative decoding: MTP and target sizes differ");
    }
    nx_spec *s = nx_calloc(1, sizeof *s, "speculative driver", err);
    if (!s) return false;
    s->tgt = target;
    s->cpu_clock = nx_ctx_n_threads(target) == 1;
    s->mtp = mtp;
    s->p = *p;
    if (!mtp) s->p.draft_max = 0;
    s->n_seq = cp->n_seq;
    s->E = (int32_t)hp->n_embd;
    s->V = (int32_t)hp->n_vocab;
    s->n_ctx = cp->n_ctx;
    s->mir_cap = MIRROR_CAP + s->p.draft_max + 2;
    const size_t E = (size_t)s->E;
    s->seq = nx_calloc((size_t)s->n_seq, sizeof *s->seq, "speculative driver", err);
    if (!s->seq || !nx_dist_init(&s->pd, s->V, err) || !nx_dist_init(&s->qd, s->V, err)) goto fail;
    for (int i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        nx_sampler_params sp = p->sampling;
        sp.seed = p->sampling.seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL; /* independent streams */
        q->pending_h = nx_alloc_aligned(E * sizeof(float), "pending hidden", err);
        q->chain_h = q->pending_h ? nx_alloc_aligned(E * sizeof(float), "draft hidden", err) : NULL;
        q->mir_h = q->chain_h ? nx_alloc_aligned((size_t)s->mir_cap * E * sizeof(float), "mirror rows", err) : NULL;
        q->mir_tok = q->mir_h ? nx_malloc((size_t)s->mir_cap * sizeof *q->mir_tok, "mirror rows", err) : NULL;
        if (!q->mir_tok || !nx_sampler_create(&q->smp, s->V, &sp, err)) goto fail;
        q->greedy = sp.temp <= 0.0f;
        q->probe = PROBE_FIRST;
        memset(q->pending_h, 0, E * sizeof(float));
    }
    s->cap_rows = NX_MAX(PREFILL_CHUNK, s->n_seq * (s->mir_cap + 1));
    s->b_tok = nx_malloc((size_t)s->cap_rows * sizeof(int32_t), "batch", err);
    s->b_pos = s->b_tok ? nx_malloc((size_t)s->cap_rows * sizeof(int32_t), "batch", err) : NULL;
    s->b_seq = s->b_pos ? nx_malloc((size_t)s->cap_rows * sizeof(int32_t), "batch", err) : NULL;
    s->b_lg = s->b_seq ? nx_malloc((size_t)s->cap_rows, "batch", err) : NULL;
    s->b_h = s->b_lg ? nx_alloc_aligned((size_t)s->cap_rows * E * sizeof(float), "batch", err) : NULL;
    if (!s->b_h) goto fail;
    if (mtp && nx_mtp_logit_ids(mtp)) {
        s->dfull = nx_alloc_aligned((size_t)s->V * sizeof(float), "draft logits", err);
        if (!s->dfull) goto fail;
        for (int32_t i = 0; i < s->V; i++) s->dfull[i] = -INFINITY;
    }
    s->max_rows = s->n_seq * (s->p.draft_max + 1);
    s->t_ver = nx_calloc((size_t)s->max_rows + 1, sizeof *s->t_ver, "cost model", err);
    s->n_ver = s->t_ver ? nx_calloc((size_t)s->max_rows + 1, sizeof *s->n_ver, "cost model", err) : NULL;
    s->ver_est = s->n_ver ? nx_calloc((size_t)s->max_rows + 1, sizeof *s->ver_est, "cost model", err) : NULL;
    s->rates = s->ver_est ? nx_calloc((size_t)s->n_seq * (size_t)NX_MAX(s->p.draft_max, 1), sizeof *s->rates,
                                      "cost model", err) : NULL;
    s->plan_cap = s->rates ? nx_calloc((size_t)s->n_seq, sizeof *s->plan_cap, "cost model", err) : NULL;
    s->plan_n = s->plan_cap ? nx_calloc((size_t)s->n_seq, sizeof *s->plan_n, "cost model", err) : NULL;
    if (!s->plan_n) goto fail;
    *out = s;
    return true;
fail:
    nx_spec_free(s);
    return false;
}

void nx_spec_set_active(nx_spec *s, int32_t seq, bool active) {
    if (seq >= 0 && seq < s->n_seq) s->seq[seq].active = active;
}
bool nx_spec_active(const nx_spec *s, int32_t seq) { return seq >= 0 && seq < s->n_seq && s->seq[seq].active; }
const nx_spec_stats *nx_spec_get_stats(const nx_spec *s) { return &s->st; }
void nx_spec_reset_stats(nx_spec *s) { memset(&s->st, 0, sizeof s->st); }
void nx_spec_set_cost_fn(nx_spec *s, nx_spec_cost_fn fn, void *user) {
    s->cost_fn = fn;
    s->cost_user = user;
}
int32_t nx_spec_last_drafts(const nx_spec *s, int32_t seq, const int32_t **drafts) {
    if (seq < 0 || seq >= s->n_seq) {
        *drafts = NULL;
        return 0;
    }
    *drafts = s->seq[seq].draft;
    return s->seq[seq].n_draft;
}

bool nx_spec_check(const nx_spec *s, nx_err *err) {
    for (int32_t i = 0; i < s->n_seq; i++) {
        const seq_state *q = &s->seq[i];
        if (!q->active || !s->mtp) continue;
        int32_t t = nx_ctx_n_past(s->tgt, i), m = nx_mtp_n_past(s->mtp, i);
        if (q->stale ? q->n_mir > s->mir_cap : m + q->n_mir != t - q->base)
            return nx_fail(err, "sequence %d: MTP cache %d + backlog %d != target positions %d - base %d", i, m,
                           q->n_mir, t, q->base);
    }
    return true;
}

bool nx_spec_set_oracle(nx_spec *s, int32_t seq, const int32_t *tokens, int32_t n, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "oracle: sequence %d out of range", seq);
    seq_state *q = &s->seq[seq];
    free(q->oracle);
    q->oracle = nx_malloc((size_t)NX_MAX(n, 1) * sizeof *q->oracle, "oracle tokens", err);
    if (!q->oracle) return false;
    memcpy(q->oracle, tokens, (size_t)n * sizeof *tokens);
    q->n_oracle = n;
    return true;
}

/* ---- log-probabilities of emitted tokens (nx_spec_set_logprobs) ------------------------------ */

/* Records the log-probabilities of tok, about to be accepted, from its target logits row: the
 * sampler's history is then exactly the tokens before it, as in plain decoding. */
static bool record_lp(seq_state *q, const float *logits, int32_t tok, nx_err *err) {
    if (q->lp_top < 0 || !q->lp) return true;
    nx_spec_logprob *e = &q->lp[q->lp_n++];
    e->token = tok;
    return nx_sampler_logprobs(q->smp, logits, tok, q->lp_top, &e->lp, e->top_ids, e->top_lp, &e->n_top, err);
}

bool nx_spec_set_logprobs(nx_spec *s, int32_t seq, int32_t n_top, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "logprobs: sequence %d out of range (0..%d)", seq, s->n_seq - 1);
    if (n_top > NX_SAMPLER_MAX_TOP_LOGPROBS)
        return nx_fail(err, "logprobs: %d top entries (at most %d)", n_top, NX_SAMPLER_MAX_TOP_LOGPROBS);
    seq_state *q = &s->seq[seq];
    if (n_top >= 0 && !q->lp) {
        q->lp = nx_calloc((size_t)s->p.draft_max + 1, sizeof *q->lp, "logprobs", err);
        if (!q->lp) return false;
    }
    q->lp_top = n_top < 0 ? -1 : n_top;
    q->lp_n = 0;
    return true;
}

int32_t nx_spec_last_logprobs(const nx_spec *s, int32_t seq, const nx_spec_logprob **lp) {
    const bool ok = seq >= 0 && seq < s->n_seq && s->seq[seq].lp && s->seq[seq].lp_top >= 0;
    *lp = ok ? s->seq[seq].lp : NULL;
    return ok ? s->seq[seq].lp_n : 0;
}

/* ---- prefill -------------------------------------------------------------------------------- */

/* MTP pass over the target batch just decoded: same tokens/positions, hidden shifted by one
 * row within each sequence, the first row of a sequence gets its pending_h.  Updates pending_h. */
static bool mirror_batch(nx_spec *s, int32_t n, nx_err *err) {
    const size_t E = (size_t)s->E;
    const float *hid = nx_ctx_hidden(s->tgt);
    for (int32_t t = 0; t < n; t++) {
        seq_state *q = &s->seq[s->b_seq[t]];
        memcpy(s->b_h + (size_t)t * E, q->pending_h, E * sizeof(float));
        memcpy(q->pending_h, hid + (size_t)t * E, E * sizeof(float));
        s->b_pos[t] -= q->base; /* MTP position (base > 0 only in a continued sequence) */
    }
    if (!s->mtp) return true;
    memset(s->b_lg, 0, (size_t)n);
    s->st.mtp_rows += n;
    return nx_mtp_forward(s->mtp, n, s->b_tok, s->b_pos, s->b_seq, s->b_h, s->b_lg, err);
}

/* Forgets everything the driver keeps for sequence i (not its caches).  keep_cache: the
 * sequence continues its caches (a resumed prefill): pending_h, the backlog and the MTP
 * numbering stay. */
static void reset_seq(nx_spec *s, seq_state *q, bool keep_cache) {
    q->active = false;
    q->n_draft = 0;
    q->prefilling = false;
    q->pf_next = 0;
    q->drafted = q->accepted = 0;
    memset(&q->acc, 0, sizeof q->acc);
    q->plain_run = 0;
    q->probe = PROBE_FIRST;
    q->probing = false;
    q->confident = false;
    q->top_max = 0.0;
    nx_sampler_reset(q->smp);
    if (keep_cache) return;
    q->resume = 0;
    q->n_mir = 0;
    q->base = 0;
    q->stale = false;
    memset(q->pending_h, 0, (size_t)s->E * sizeof(float));
}

static bool check_prompt(const nx_spec *s, int32_t seq, int32_t n_prompt, nx_err *err) {
    if (n_prompt <= 0) return nx_fail(err, "prefill: sequence %d has an empty prompt", seq);
    if (n_prompt >= s->n_ctx)
        return nx_fail(err, "prefill: prompt of sequence %d has %d tokens, the context holds %d", seq, n_prompt,
                       s->n_ctx);
    const int32_t resume = s->seq[seq].resume;
    if (resume > 0) {
        if (nx_ctx_n_past(s->tgt, seq) != resume)
            return nx_fail(err, "prefill: sequence %d was left at position %d but holds %d", seq, resume,
                           nx_ctx_n_past(s->tgt, seq));
        if (n_prompt <= resume)
            return nx_fail(err, "prefill: sequence %d holds %d positions; its prompt (%d tokens) must continue them by "
                           "at least one token", seq, resume, n_prompt);
        return true;
    }
    if (nx_ctx_n_past(s->tgt, seq) != 0 || (s->mtp && nx_mtp_n_past(s->mtp, seq) != 0))
        return nx_fail(err, "prefill: sequence %d is not empty", seq);
    return true;
}

/* Decodes the prompts of sequences seqs[0..n) (reset, empty) in batched chunks, mirrors them
 * into the MTP cache, samples each one's first token into first[k] and activates it. */
static bool prefill_seqs(nx_spec *s, int32_t n, const int32_t *seqs, const int32_t *const *prompt,
                         const int32_t *n_prompt, int32_t *first, nx_err *err) {
    double t0 = nx_time_s();
    int32_t k = 0, pi = 0;
    while (k < n) {
        int32_t rows = 0;
        while (rows < PREFILL_CHUNK && k < n) {
            seq_state *q = &s->seq[seqs[k]];
            if (s->p.penalize_prompt && !nx_sampler_accept(q->smp, prompt[k][pi], err)) return false;
            s->b_tok[rows] = prompt[k][pi];
            s->b_pos[rows] = pi;
            s->b_seq[rows] = seqs[k];
            s->b_lg[rows] = pi == n_prompt[k] - 1;
            if (s->b_lg[rows]) q->row = k; /* which first[] slot this sequence fills */
            rows++;
            if (++pi == n_prompt[k]) {
                k++;
                pi = 0;
            }
        }
        nx_batch b = {rows, s->b_tok, s->b_pos, s->b_seq, s->b_lg};
        if (!nx_forward(s->tgt, &b, err)) return nx_fail_prefix(err, "prefill");
        for (int32_t t = 0; t < rows; t++) {
            if (!s->b_lg[t]) continue;
            seq_state *q = &s->seq[s->b_seq[t]];
            int32_t *f = &first[q->row];
            q->lp_n = 0;
            if (!nx_sampler_sample(q->smp, nx_ctx_logits(s->tgt, t), f, err) ||
                !record_lp(q, nx_ctx_logits(s->tgt, t), *f, err) || !nx_sampler_accept(q->smp, *f, err))
                return false;
            q->id_last = *f;
            q->active = true;
        }
        if (!mirror_batch(s, rows, err)) return nx_fail_prefix(err, "prefill MTP mirror");
    }
    s->st.t_prefill += nx_time_s() - t0;
    return true;
}

bool nx_spec_prefill(nx_spec *s, int32_t n_seq, const int32_t *const *prompt, const int32_t *n_prompt,
                     int32_t *first, nx_err *err) {
    if (n_seq <= 0 || n_seq > s->n_seq)
        return nx_fail(err, "prefill: %d sequences (the context has %d)", n_seq, s->n_seq);
    for (int32_t i = 0; i < n_seq; i++)
        if (!check_prompt(s, i, n_prompt[i], err)) return false;
    int32_t *seqs = nx_malloc((size_t)n_seq * sizeof *seqs, "prefill", err);
    if (!seqs) return false;
    for (int32_t i = 0; i < s->n_seq; i++) reset_seq(s, &s->seq[i], false);
    for (int32_t i = 0; i < n_seq; i++) seqs[i] = i;
    bool ok = prefill_seqs(s, n_seq, seqs, prompt, n_prompt, first, err);
    free(seqs);
    return ok;
}

/* Checks a sequence about to be prefilled alone and installs its sampler; a refusal leaves the
 * sequence as it was. */
static bool start_seq(nx_spec *s, int32_t seq, int32_t n_prompt, const nx_sampler_params *sampling, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "prefill: sequence %d out of range (0..%d)", seq, s->n_seq - 1);
    if (s->seq[seq].active) return nx_fail(err, "prefill: sequence %d is active", seq);
    if (!check_prompt(s, seq, n_prompt, err)) return false;
    seq_state *q = &s->seq[seq];
    if (sampling) {
        nx_sampler *smp;
        if (!nx_sampler_create(&smp, s->V, sampling, err)) return false;
        nx_sampler_free(q->smp);
        q->smp = smp;
        q->greedy = sampling->temp <= 0.0f;
    }
    reset_seq(s, q, q->resume > 0);
    return true;
}

bool nx_spec_prefill_seq(nx_spec *s, int32_t seq, const int32_t *prompt, int32_t n_prompt,
                         const nx_sampler_params *sampling, int32_t *first, nx_err *err) {
    if (seq >= 0 && seq < s->n_seq && s->seq[seq].prefilling)
        return nx_fail(err, "prefill: sequence %d is being prefilled in parts", seq);
    if (seq >= 0 && seq < s->n_seq && s->seq[seq].resume > 0) {
        bool done = false;
        return nx_spec_prefill_seq_part(s, seq, prompt, n_prompt, n_prompt, sampling, first, &done, err);
    }
    if (!start_seq(s, seq, n_prompt, sampling, err)) return false;
    return prefill_seqs(s, 1, &seq, &prompt, &n_prompt, first, err);
}

/* Writes sequence i's mirror backlog into its MTP cache (a stale cache is cleared and re-seeded
 * from the last RESEED_ROWS rows first, as a drafting pass does), so that rows decoded next can
 * be mirrored directly. */
static bool flush_backlog(nx_spec *s, int32_t i, nx_err *err) {
    seq_state *q = &s->seq[i];
    const size_t E = (size_t)s->E;
    if (!s->mtp) {
        q->n_mir = 0;
        q->stale = false;
        return true;
    }
    if (q->stale) {
        const int32_t drop = q->n_mir > RESEED_ROWS ? q->n_mir - RESEED_ROWS : 0;
        memmove(q->mir_tok, q->mir_tok + drop, (size_t)(q->n_mir - drop) * sizeof *q->mir_tok);
        memmove(q->mir_h, q->mir_h + (size_t)drop * E, (size_t)(q->n_mir - drop) * E * sizeof(float));
        q->n_mir -= drop;
        if (!nx_mtp_clear(s->mtp, i, err)) return false;
        q->mtp_epoch = ++s->epoch_next;
        q->base = nx_ctx_n_past(s->tgt, i) - q->n_mir;
        q->stale = false;
    }
    if (q->n_mir == 0) return true;
    const int32_t p0 = nx_ctx_n_past(s->tgt, i) - q->n_mir - q->base;
    for (int32_t r = 0; r < q->n_mir; r++) {
        s->b_tok[r] = q->mir_tok[r];
        s->b_pos[r] = p0 + r;
        s->b_seq[r] = i;
        s->b_lg[r] = 0;
    }
    memcpy(s->b_h, q->mir_h, (size_t)q->n_mir * E * sizeof(float));
    if (!nx_mtp_forward(s->mtp, q->n_mir, s->b_tok, s->b_pos, s->b_seq, s->b_h, s->b_lg, err))
        return nx_fail_prefix(err, "MTP backlog of sequence %d", i);
    s->st.mtp_rows += q->n_mir;
    q->n_mir = 0;
    return true;
}

/* Continues a sequence left at position q->resume: the prompt's first `resume` tokens enter the
 * penalty history (as a prefill from position 0 would have put them), the backlog goes into the
 * MTP cache, and the parts continue at `resume`. */
static bool resume_seq(nx_spec *s, int32_t seq, const int32_t *prompt, nx_err *err) {
    seq_state *q = &s->seq[seq];
    if (s->p.penalize_prompt)
        for (int32_t p = 0; p < q->resume; p++)
            if (!nx_sampler_accept(q->smp, prompt[p], err)) return false;
    if (!flush_backlog(s, seq, err)) return false;
    q->pf_next = q->resume;
    q->resume = 0;
    return true;
}

bool nx_spec_prefill_seq_part(nx_spec *s, int32_t seq, const int32_t *prompt, int32_t n_prompt, int32_t max_rows,
                              const nx_sampler_params *sampling, int32_t *first, bool *done, nx_err *err) {
    *done = false;
    if (max_rows < 1) return nx_fail(err, "prefill: %d rows per part (at least 1)", max_rows);
    if (seq < 0 || seq >= s->n_seq || !s->seq[seq].prefilling) {
        if (!start_seq(s, seq, n_prompt, sampling, err)) return false;
        seq_state *q = &s->seq[seq];
        q->prefilling = true;
        if (q->resume > 0 && !resume_seq(s, seq, prompt, err)) return false;
    }
    seq_state *q = &s->seq[seq];
    if (n_prompt <= q->pf_next || nx_ctx_n_past(s->tgt, seq) != q->pf_next)
        return nx_fail(err, "prefill: sequence %d has %d prompt tokens decoded, the prompt passed has %d (pass the "
                       "same prompt to every part)", seq, q->pf_next, n_prompt);
    const double t0 = nx_time_s();
    const int32_t end = NX_MIN(n_prompt, q->pf_next + max_rows);
    while (q->pf_next < end) {
        const int32_t rows = NX_MIN((int32_t)PREFILL_CHUNK, end - q->pf_next);
        for (int32_t r = 0; r < rows; r++) {
            const int32_t p = q->pf_next + r;
            if (s->p.penalize_prompt && !nx_sampler_accept(q->smp, prompt[p], err)) return false;
            s->b_tok[r] = prompt[p];
            s->b_pos[r] = p;
            s->b_seq[r] = seq;
            s->b_lg[r] = p == n_prompt - 1;
        }
        nx_batch b = {rows, s->b_tok, s->b_pos, s->b_seq, s->b_lg};
        if (!nx_forward(s->tgt, &b, err)) return nx_fail_prefix(err, "prefill");
        if (s->b_lg[rows - 1]) {
            q->lp_n = 0;
            if (!nx_sampler_sample(q->smp, nx_ctx_logits(s->tgt, rows - 1), first, err) ||
                !record_lp(q, nx_ctx_logits(s->tgt, rows - 1), *first, err) || !nx_sampler_accept(q->smp, *first, err))
                return false;
            q->id_last = *first;
        }
        if (!mirror_batch(s, rows, err)) return nx_fail_prefix(err, "prefill MTP mirror");
        q->pf_next += rows;
    }
    if (q->pf_next == n_prompt) {
        q->prefilling = false;
        q->pf_next = 0;
        q->active = true;
        *done = true;
    }
    s->st.t_prefill += nx_time_s() - t0;
    return true;
}

void nx_spec_seq_stats(const nx_spec *s, int32_t seq, int64_t *drafted, int64_t *accepted) {
    const bool ok = seq >= 0 && seq < s->n_seq;
    *drafted = ok ? s->seq[seq].drafted : 0;
    *accepted = ok ? s->seq[seq].accepted : 0;
}

bool nx_spec_seq_clear(nx_spec *s, int32_t seq, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "sequence %d out of range (0..%d)", seq, s->n_seq - 1);
    seq_state *q = &s->seq[seq];
    reset_seq(s, q, false);
    q->mtp_epoch = ++s->epoch_next;
    free(q->oracle);
    q->oracle = NULL;
    q->n_oracle = 0;
    if (!nx_ctx_seq_clear(s->tgt, seq, err)) return false;
    return !s->mtp || nx_mtp_clear(s->mtp, seq, err);
}

/* ---- cost model ---------------------------------------------------------------------------- */

static double est_verify_raw(const nx_spec *s, int n) {
    if (s->n_ver[n]) return s->t_ver[n];
    int lo = -1, hi = -1;
    for (int i = n - 1; i >= 1 && lo < 0; i--)
        if (s->n_ver[i]) lo = i;
    for (int i = n + 1; i <= s->max_rows && hi < 0; i++)
        if (s->n_ver[i]) hi = i;
    if (lo > 0 && hi > 0) return s->t_ver[lo] + (s->t_ver[hi] - s->t_ver[lo]) * (n - lo) / (hi - lo);
    int k = lo > 0 ? lo : hi;
    if (k < 0) return 0.0;
    /* one measured point: assume each extra row costs 10% of a one-row pass (a prior) */
    return s->t_ver[k] * (1.0 + 0.1 * (n - 1)) / (1.0 + 0.1 * (k - 1));
}

/* A verify of more rows never costs less than one of fewer (noise on a shared machine could
 * make the raw estimates say otherwise and lure the model into drafting), nor more than the
 * measured batches of m < n rows it could be split into (ceil(n/m) of them), and a verify of
 * n >= 2 rows costs no more than a measured one of more rows: both bound an estimate inflated
 * by noise (or by the slow first verify of a row count in a fresh context) for a row count that
 * is then no longer chosen, and so no longer re-measured.  Without the last bound one inflated
 * 3-row estimate raised the 4-row one with it (fewer rows never cost more), and the demo model
 * drafted 1 where 3 were best for the rest of the run. */
static double est_verify(const nx_spec *s, int n) {
    double t = est_verify_raw(s, 1), hi = t;
    for (int i = 2; i <= n; i++) {
        double r = est_verify_raw(s, i);
        for (int m = i + 1; m <= s->max_rows; m++)
            if (s->n_ver[m]) r = fmin(r, s->t_ver[m]);
        hi = fmax(hi, r);
        double c = hi;
        for (int m = 1; m < i; m++)
            if (s->n_ver[m]) c = fmin(c, s->t_ver[m] * (double)((i + m - 1) / m));
        /* the bound must not undercut fewer rows (a plain 1-row step above all): with stale
         * estimates (a 1-row cost measured under load, a 2-row one earlier) it could, and the
         * model then drafts on although nothing is accepted */
        t = fmax(t, c);
    }
    return t;
}

#define EXPLORE_EVERY 8
#define WARM_DRAFTS 1
#define EXPLORE_EXTRA 2
#define PLAN_MARGIN 1.03  /* speculation must beat plain decoding by 3 %: the estimates are noisy */
#define ACC_DECAY 0.97    /* acceptance counts fade by this per verified step */
#define ACC_W_SEQ 2.0     /* weight (trials) of all sequences' rate in one sequence's pooled rate */
#define ACC_W_POS 2.0     /* weight of a sequence's pooled rate in its per-position rates */
#define ACC_NONE 0.5      /* see plan_step */
#define ACC_NONE_TRIALS 3.0
#define ACC_OPT 1.0       /* optimism: one extra success in this many trials per position */

/* The cost model's clock (see the comment at the samples in draft_all). */
static double cost_clock(const nx_spec *s) { return s->cpu_clock ? nx_thread_time_s() : nx_time_s(); }

/* Sets q->cap of every active sequence (its hard cap on entry) to the draft length of this
 * step: draft_max when not adaptive; else the plan of spec_cost.h on the measured costs and
 * acceptance.  Decisions may read clocks: they change the work, never the tokens. */
static void plan_step(nx_spec *s) {
    if (!s->mtp || s->p.draft_max == 0) {
        for (int32_t i = 0; i < s->n_seq; i++) s->seq[i].cap = 0;
        return;
    }
    if (!s->p.adaptive) return;
    bool measured = false;
    for (int32_t r = 1; r <= s->max_rows; r++) measured = measured || s->n_ver[r];
    if (!s->n_pass || !measured) {
        /* nothing measured yet: one draft per sequence (the cheapest step that measures a draft
         * pass and a verify; with nothing accepted, a longer first step cost ~2 % of a 64-token
         * run on a q4_K file, whose multi-row verify is dear) */
        for (int32_t i = 0; i < s->n_seq; i++) s->seq[i].cap = NX_MIN(s->seq[i].cap, WARM_DRAFTS);
        return;
    }
    const int32_t D = s->p.draft_max;
    for (int32_t r = 1; r <= s->max_rows; r++) s->ver_est[r] = est_verify(s, r);
    /* all sequences' pooled rate, with a weak prior (a quarter of a success in half a trial),
     * is the prior of each sequence's pooled rate, which is the prior of its per-position rates */
    const double a_all = (s->acc_succ + 0.25) / (s->acc_trials + 0.5);
    int32_t n = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        if (!q->active) continue;
        const double a_seq = nx_spec_acc_pooled(&q->acc, a_all, ACC_W_SEQ);
        nx_spec_acc_rates(&q->acc, a_seq, ACC_W_POS, ACC_OPT, D, s->rates + (size_t)n * (size_t)D);
        s->plan_cap[n++] = q->cap;
    }
    if (n == 0) return;
    const double t0 = s->n_pass0 ? s->t_pass0 : s->t_pass;
    /* what a probe costs over a plain step: its MTP work (a one-row pass until a probe was
     * measured) and its verify row; and what a plain step costs per sequence */
    const double probe_extra = (s->n_probe ? s->t_probe : s->t_pass) + s->ver_est[n + 1] - s->ver_est[n];
    const double plain_cost = s->ver_est[n] / n;
    /* the plan's rows are those of the active sequences: verify costs by total rows */
    nx_spec_plan_in in = {.n_seq = n, .cap = s->plan_cap, .rates = s->rates, .stride = D, .t_pass0 = t0,
                          .t_pass = s->t_pass, .verify = s->ver_est, .max_rows = s->max_rows, .margin = PLAN_MARGIN};
    const int32_t top = nx_spec_plan(&in, s->plan_n, NULL);
    /* explore: a verify-cost estimate is only refreshed when its row count is used, so one that
     * noise or a cold first pass made too high would never recover; every EXPLORE_EVERY-th
     * drafting step drafts EXPLORE_EXTRA more.  On the demo model, exploring 1 more every 32
     * steps left the model at 1-2 drafts for most of a 128-token run where 3 were faster. */
    bool explore = false;
    if (top > 0 && top < D && ++s->explore_run >= EXPLORE_EVERY) {
        s->explore_run = 0;
        explore = true;
    }
    n = 0;
    for (int32_t i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        if (!q->active) continue;
        int32_t N = s->plan_n[n++];
        q->probing = false;
        /* nothing accepted lately (decayed successes of the first draft position below
         * ACC_NONE after at least ACC_NONE_TRIALS trials): plain but for probes, whatever the
         * cost estimates say.  Timing-free: the verify estimates of different row counts are
         * sampled at different times (the 2-row one only at probes), and under a changing load a
         * stale one made drafting look cheap with nothing accepted (13-47 of 63 steps drafted on
         * random weights in some runs).  A head that looks clearly random (seq_state.top_max)
         * gets no optimistic prior: plain after its first rejected draft */
        const bool random_like = !q->confident && q->acc.trials[0] > 0.0 && q->top_max < CONF_RANDOM;
        if (q->acc.trials[0] >= (random_like ? 1.0 : ACC_NONE_TRIALS) && q->acc.succ[0] < ACC_NONE) N = 0;
        if (N > 0) {
            q->plain_run = 0;
            if (explore) N = NX_MIN(q->cap, N + EXPLORE_EXTRA);
        } else if (q->cap > 0 &&
                   nx_spec_probe_due(++q->plain_run, q->probe, probe_extra, plain_cost,
                                     q->confident ? 0.0 : random_like ? PROBE_BUDGET_RANDOM : PROBE_BUDGET,
                                     PROBE_GAP_MAX)) {
            /* a one-draft probe every `probe` plain steps (stretched so that probes cost at most
             * PROBE_BUDGET of the plain time, PROBE_BUDGET_RANDOM for a head that looks clearly
             * random) notices a change in acceptance */
            q->plain_run = 0;
            q->probing = true;
            N = 1;
        }
        q->cap = N;
    }
}

/* Exponential moving average.  The second sample replaces the first when it is smaller: the
 * first pass of each kind carries one-time costs (scratch buffers growing, first-touch page
 * faults) that would otherwise linger in the estimate and, for row counts that are then no
 * longer chosen, never be corrected.  A sample is counted as at most twice the estimate: on a
 * shared machine a pass preempted for milliseconds (10x its cost) is common, and one such
 * spike would otherwise make an option look expensive for many steps, or for good if the
 * option is then not chosen again; a lasting slowdown still raises the estimate by 20 % per
 * sample. */
static void ema(double *v, int32_t *n, double x) {
    if (*n == 0) *v = x;
    else if (*n == 1) *v = fmin(*v, x);
    else *v = 0.8 * *v + 0.2 * fmin(x, 2.0 * *v);
    (*n)++;
}

/* ---- drafting ------------------------------------------------------------------------------- */

/* The top probability of the MTP softmax (temperature 1) of a logits row; entries of -inf (outside
 * a reduced draft vocabulary) have probability 0.  O(V): computed only until a sequence is
 * confident. */
static double draft_confidence(const nx_spec *s, const float *logits) {
    float mx = logits[0];
    for (int32_t i = 1; i < s->V; i++) mx = logits[i] > mx ? logits[i] : mx;
    if (!isfinite(mx)) return 0.0;
    double sum = 0.0;
    for (int32_t i = 0; i < s->V; i++)
        if (logits[i] > -INFINITY) sum += exp((double)(logits[i] - mx));
    return 1.0 / sum;
}

/* Chooses the next draft token of q from its MTP logits row (pass j).  Returns false with
 * *stop when drafting should end without a token. */
static bool pick_draft(nx_spec *s, seq_state *q, int32_t n_past, const float *logits, bool *stop, nx_err *err) {
    const int32_t j = q->n_draft;
    int32_t d;
    double top;
    *stop = false;
    if (j == 0 && !q->confident && s->p.adaptive) {
        const double top1 = draft_confidence(s, logits);
        q->top_max = fmax(q->top_max, top1);
        q->confident = top1 >= CONF_MIN;
    }
    if (q->oracle) {
        int32_t at = n_past + 1 + j;
        if (at >= q->n_oracle) {
            *stop = true;
            return true;
        }
        d = q->oracle[at];
        top = 1.0;
    } else if (nx_sampler_all_banned(q->smp, logits)) {
        /* the logit bias leaves no draft token (a reduced draft vocabulary of banned tokens):
         * the target row still decides this position */
        *stop = true;
        return true;
    } else if (q->greedy) {
        if (!nx_sampler_sample(q->smp, logits, &d, err)) return false;
        top = 1.0;
        if (s->p.draft_p_min > 0.0f) {
            /* confidence: softmax of the raw logits at temperature 1 (O(V): only when asked) */
            float mx = logits[0];
            for (int32_t i = 1; i < s->V; i++) mx = logits[i] > mx ? logits[i] : mx;
            double sum = 0.0;
            for (int32_t i = 0; i < s->V; i++) sum += exp((double)logits[i] - mx);
            top = exp((double)logits[d] - mx) / sum;
        }
    } else {
        /* the draw for this position uses the noise the target's draw will use (sample.h), so
         * the draft is accepted exactly when the target draws the same token */
        if (!nx_sampler_dist(q->smp, logits, &s->qd, err)) return false;
        d = nx_sampler_draw(q->smp, &s->qd);
        top = 0.0;
        for (int32_t i = 0; i < s->qd.n; i++) top = fmax(top, s->qd.probs[i]);
    }
    if (top < s->p.draft_p_min) {
        *stop = true;
        return true;
    }
    q->draft[q->n_draft++] = d;
    /* the next draft's distribution sees d in the penalty history, like the target will */
    return nx_sampler_accept(q->smp, d, err);
}

/* The MTP logits of a row over the whole vocabulary.  With a reduced draft vocabulary the K
 * logits are scattered to their token ids; every other id keeps -inf, i.e. probability 0 under
 * the sampler (sample.h), so q is the MTP softmax over the K tokens and 0 elsewhere (a token
 * outside them is never drafted; the target's draw is unaffected).  O(K). */
static const float *draft_logits(nx_spec *s, int32_t row) {
    const float *lg = nx_mtp_logits(s->mtp, row);
    const int32_t *ids = nx_mtp_logit_ids(s->mtp);
    if (!ids || !lg) return lg;
    const int32_t K = nx_mtp_n_logits(s->mtp);
    for (int32_t k = 0; k < K; k++) s->dfull[ids[k]] = lg[k];
    return s->dfull;
}

static bool draft_all(nx_spec *s, nx_err *err) {
    const size_t E = (size_t)s->E;
    bool any = false;
    for (int32_t i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        q->n_draft = 0;
        q->ran_mtp = false;
        q->drafting = q->active && q->cap > 0;
        any = any || q->drafting;
    }
    if (!s->mtp || !any) return true;
    bool probes_only = true;
    for (int32_t i = 0; i < s->n_seq; i++) probes_only = probes_only && (!s->seq[i].drafting || s->seq[i].probing);
    double probe_cost = 0.0;
    for (int32_t pass = 0;; pass++) {
        int32_t n = 0, n_drafting = 0, max_backlog = 0;
        for (int32_t i = 0; i < s->n_seq; i++) {
            seq_state *q = &s->seq[i];
            if (pass == 0 && q->drafting) {
                /* a probe writes at most RESEED_ROWS backlog rows: a catch-up of up to 64 rows
                 * would cost a probe several draft passes (draft quality only, as for stale) */
                if (q->probing && q->n_mir > RESEED_ROWS) q->stale = true;
                if (q->stale) {
                    /* rebuild from the most recent rows only */
                    const int32_t drop = q->n_mir > RESEED_ROWS ? q->n_mir - RESEED_ROWS : 0;
                    memmove(q->mir_tok, q->mir_tok + drop, (size_t)(q->n_mir - drop) * sizeof *q->mir_tok);
                    memmove(q->mir_h, q->mir_h + (size_t)drop * E, (size_t)(q->n_mir - drop) * E * sizeof(float));
                    q->n_mir -= drop;
                    if (!nx_mtp_clear(s->mtp, i, err)) return false;
                    q->mtp_epoch = ++s->epoch_next;
                    q->base = nx_ctx_n_past(s->tgt, i) - q->n_mir;
                    q->stale = false;
                }
                /* the backlog first: target positions n_past - n_mir .. n_past - 1 */
                int32_t p0 = nx_ctx_n_past(s->tgt, i) - q->n_mir - q->base;
                max_backlog = NX_MAX(max_backlog, q->n_mir);
                for (int32_t r = 0; r < q->n_mir; r++, n++) {
                    s->b_tok[n] = q->mir_tok[r];
                    s->b_pos[n] = p0 + r;
                    s->b_seq[n] = i;
                    s->b_lg[n] = 0;
                    memcpy(s->b_h + (size_t)n * E, q->mir_h + (size_t)r * E, E * sizeof(float));
                }
                q->n_mir = 0;
            }
            if (!q->drafting) continue;
            const int32_t n_past = nx_ctx_n_past(s->tgt, i);
            s->b_tok[n] = pass == 0 ? q->id_last : q->draft[pass - 1];
            s->b_pos[n] = n_past + pass - q->base;
            s->b_seq[n] = i;
            s->b_lg[n] = 1;
            memcpy(s->b_h + (size_t)n * E, pass == 0 ? q->pending_h : q->chain_h, E * sizeof(float));
            q->row = n++;
            n_drafting++;
            q->ran_mtp = true;
        }
        if (n == 0) break;
        double t0 = nx_time_s(), c0 = cost_clock(s);
        if (!nx_mtp_forward(s->mtp, n, s->b_tok, s->b_pos, s->b_seq, s->b_h, s->b_lg, err))
            return nx_fail_prefix(err, "draft");
        s->st.mtp_rows += n;
        bool more = false;
        for (int32_t i = 0; i < s->n_seq; i++) {
            seq_state *q = &s->seq[i];
            if (!q->drafting) continue;
            bool stop;
            if (!pick_draft(s, q, nx_ctx_n_past(s->tgt, i), draft_logits(s, q->row), &stop, err)) return false;
            memcpy(q->chain_h, nx_mtp_hidden(s->mtp) + (size_t)q->row * E, E * sizeof(float));
            if (stop || q->n_draft >= q->cap) q->drafting = false;
            more = more || q->drafting;
        }
        double dt = nx_time_s() - t0, cdt = cost_clock(s) - c0;
        if (s->cost_fn) dt = cdt = s->cost_fn(s->cost_user, NX_SPEC_COST_DRAFT, n, 1);
        s->st.t_draft += dt;
        probe_cost += cdt;
        /* Cost model samples.  With a one-thread pool they are CPU seconds of this thread (the
         * stats stay wall-clock): on a shared machine a pass preempted for a few milliseconds is
         * common, and wall-clock samples made the longer (more often preempted) verifies look
         * expensive, so the model drafted less than it should; preemption does not depend on the
         * draft length.  With more threads the driver thread's CPU time misses the workers'
         * share (and its waits), and in 1 of 8 `-t 2` runs on the demo model the model then went
         * plain for most of the run; there the samples stay wall-clock.  A pass with one row per
         * sequence is a plain draft pass.  Pass 0
         * also writes the backlog: while drafting continuously that is the previous step's
         * accepted rows (a real cost of drafting, kept apart); after a plain stretch it is a
         * catch-up of up to MIRROR_CAP rows, caused by the plain steps and not representative
         * of drafting, so it is not sampled (sampling it made plain stretches look like
         * expensive drafting and kept the model in plain mode). */
        if (n == n_drafting || s->n_pass == 0) ema(&s->t_pass, &s->n_pass, cdt);
        else if (pass == 0 && max_backlog <= s->p.draft_max + 1) ema(&s->t_pass0, &s->n_pass0, cdt);
        if (!more) break;
    }
    if (probes_only) ema(&s->t_probe, &s->n_probe, probe_cost);
    for (int32_t i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        if (!q->ran_mtp) continue;
        /* forget the draft rows; (id_last, pending_h) at n_past is a true mirror row and stays */
        if (!nx_mtp_truncate(s->mtp, i, nx_ctx_n_past(s->tgt, i) + 1 - q->base, err)) return false;
        nx_sampler_rollback(q->smp, q->n_draft);
        if (q->n_draft < s->p.draft_min) q->n_draft = 0;
    }
    return true;
}

/* ---- a step -------------------------------------------------------------------------------- */

/* Appends a backlog row.  When the backlog is full the MTP cache becomes stale: it will be
 * re-seeded from the last RESEED_ROWS rows only, so all older rows are dropped at once (one
 * short move per mir_cap - RESEED_ROWS plain steps instead of a whole-backlog move per step). */
static void push_mirror(nx_spec *s, seq_state *q, int32_t tok, const float *h) {
    const size_t E = (size_t)s->E;
    if (q->n_mir == s->mir_cap) {
        const int32_t keep = NX_MIN(RESEED_ROWS, s->mir_cap) - 1, drop = q->n_mir - keep;
        memmove(q->mir_tok, q->mir_tok + drop, (size_t)keep * sizeof *q->mir_tok);
        memmove(q->mir_h, q->mir_h + (size_t)drop * E, (size_t)keep * E * sizeof(float));
        q->n_mir = keep;
        q->stale = true;
    }
    q->mir_tok[q->n_mir] = tok;
    memcpy(q->mir_h + (size_t)q->n_mir * E, h, E * sizeof(float));
    q->n_mir++;
}

static bool accept_seq(nx_spec *s, int32_t i, int32_t *out, int32_t *n_out, nx_err *err) {
    seq_state *q = &s->seq[i];
    const size_t E = (size_t)s->E;
    int32_t k = 0, tok = -1;
    bool rejected = false;
    q->lp_n = 0;
    /* Row k draws the token of its position exactly as plain decoding does (target distribution
     * p, the noise of that position); the draft is accepted iff it is that token.  Greedy and
     * sampled alike, so the emitted tokens are plain decoding's whatever the draft length. */
    for (;; k++) {
        const float *lg = nx_ctx_logits(s->tgt, q->row + k);
        if (!nx_sampler_dist(q->smp, lg, &s->pd, err)) return false;
        tok = nx_sampler_draw(q->smp, &s->pd);
        if (k == q->n_draft) break; /* the bonus token after the last draft */
        if (tok != q->draft[k]) {
            rejected = true;
            break;
        }
        if (!record_lp(q, lg, tok, err) || !nx_sampler_accept(q->smp, tok, err)) return false;
        out[k] = tok;
    }
    if (!record_lp(q, nx_ctx_logits(s->tgt, q->row + k), tok, err) || !nx_sampler_accept(q->smp, tok, err)) return false;
    out[k] = tok;
    *n_out = k + 1;
    /* acceptance statistics: k successes out of k (+1 if a draft was rejected) trials */
    if (q->n_draft > 0) {
        s->acc_succ = ACC_DECAY * s->acc_succ + k;
        s->acc_trials = ACC_DECAY * s->acc_trials + k + (rejected ? 1 : 0);
        nx_spec_acc_add(&q->acc, q->n_draft, k, ACC_DECAY);
        if (k > 0) q->confident = true;
        /* an accepted probe is followed by another at once (while the plan stays plain), so
         * that a sequence whose acceptance came back re-learns it in a few steps; a rejected
         * one doubles the interval */
        if (q->probing) q->probe = k > 0 ? 1 : NX_MIN(PROBE_MAX, NX_MAX(PROBE_FIRST, 2 * q->probe));
        q->probing = false;
        s->st.spec_steps++;
        s->st.drafted += q->n_draft;
        s->st.accepted += k;
        q->drafted += q->n_draft;
        q->accepted += k;
    }
    /* target: keep [id_last, d1..dk] */
    if (!nx_ctx_seq_rollback(s->tgt, i, q->n_draft - k, err)) return nx_fail_prefix(err, "verify rollback");
    /* MTP backlog: rows (x_p, h_{p-1}) for the newly kept positions not yet in the MTP cache */
    const float *hid = nx_ctx_hidden(s->tgt) + (size_t)q->row * E;
    if (!s->mtp) {
        memcpy(q->pending_h, hid, E * sizeof(float));
        q->id_last = tok;
        return true;
    }
    if (!q->ran_mtp) push_mirror(s, q, q->id_last, q->pending_h);
    for (int32_t r = 0; r < k; r++) push_mirror(s, q, q->draft[r], hid + (size_t)r * E);
    memcpy(q->pending_h, hid + (size_t)k * E, E * sizeof(float));
    q->id_last = tok;
    return true;
}

bool nx_spec_step(nx_spec *s, const int32_t *max_out, int32_t *out, int32_t *n_out, nx_err *err) {
    const int32_t stride = s->p.draft_max + 1;
    bool any = false;
    for (int32_t i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        n_out[i] = 0;
        if (!q->active) continue;
        const int32_t room = s->n_ctx - 1 - nx_ctx_n_past(s->tgt, i);
        if (room < 0) return nx_fail(err, "sequence %d: the context (n_ctx = %d) is full", i, s->n_ctx);
        if (max_out && max_out[i] <= 0) return nx_fail(err, "sequence %d: max_out %d must be >= 1", i, max_out[i]);
        q->cap = NX_MIN(s->p.draft_max, room);
        if (max_out) q->cap = NX_MIN(q->cap, max_out[i] - 1);
        any = true;
    }
    if (!any) return true;
    plan_step(s);
    if (!draft_all(s, err)) return false;

    /* verify: [id_last, d1..dN] of every active sequence, one batch, logits on every row */
    int32_t n = 0;
    int32_t rows_per_seq = 1; /* for the test hook's cost function */
    for (int32_t i = 0; i < s->n_seq; i++) {
        seq_state *q = &s->seq[i];
        if (!q->active) continue;
        const int32_t n_past = nx_ctx_n_past(s->tgt, i);
        q->row = n;
        for (int32_t j = 0; j <= q->n_draft; j++, n++) {
            s->b_tok[n] = j == 0 ? q->id_last : q->draft[j - 1];
            s->b_pos[n] = n_past + j;
            s->b_seq[n] = i;
            s->b_lg[n] = 1;
        }
        rows_per_seq = NX_MAX(rows_per_seq, q->n_draft + 1);
    }
    double t0 = nx_time_s(), c0 = cost_clock(s);
    nx_batch b = {n, s->b_tok, s->b_pos, s->b_seq, s->b_lg};
    if (!nx_forward(s->tgt, &b, err)) return nx_fail_prefix(err, "verify");
    double t1 = nx_time_s(), cdt = cost_clock(s) - c0;
    if (s->cost_fn) {
        cdt = s->cost_fn(s->cost_user, NX_SPEC_COST_VERIFY, n, rows_per_seq);
        t0 = t1 - cdt;
    }
    s->st.t_verify += t1 - t0;
    s->st.verify_rows += n;
    ema(&s->t_ver[n], &s->n_ver[n], cdt);

    for (int32_t i = 0; i < s->n_seq; i++) {
        if (!s->seq[i].active) continue;
        if (!accept_seq(s, i, out + (size_t)i * stride, &n_out[i], err)) return false;
        s->st.steps++;
        s->st.emitted += n_out[i];
    }
    s->st.t_accept += nx_time_s() - t1;
    nx_err inv;
    NX_ASSERT(nx_spec_check(s, &inv), "%s", inv.msg);
    return true;
}

/* ---- sequence state (checkpoints) ------------------------------------------------------------ */

void nx_spec_seq_state_free(nx_spec_seq_state *st) {
    nx_seq_ckpt_free(&st->tgt);
    nx_seq_ckpt_free(&st->mtp);
    free(st->mir_tok);
    nx_free_aligned(st->mir_h);
    nx_free_aligned(st->pending_h);
    memset(st, 0, sizeof *st);
}

size_t nx_spec_seq_state_bytes(const nx_spec_seq_state *st) {
    size_t b = nx_seq_ckpt_bytes(&st->tgt) + (st->has_mtp ? nx_seq_ckpt_bytes(&st->mtp) : 0);
    return b + (size_t)st->E * sizeof(float) + (size_t)st->n_mir * ((size_t)st->E * sizeof(float) + sizeof(int32_t));
}

size_t nx_spec_seq_state_bytes_for(const nx_spec *s, int32_t pos, bool with_kv) {
    size_t b = nx_seq_ckpt_bytes_for(s->tgt, pos, with_kv) + (size_t)s->E * sizeof(float);
    if (s->mtp) {
        b += nx_seq_ckpt_bytes_for(nx_mtp_ctx(s->mtp), pos, with_kv);
        b += (size_t)s->mir_cap * ((size_t)s->E * sizeof(float) + sizeof(int32_t));
    }
    return b;
}

bool nx_spec_seq_take(nx_spec_seq_state *st, const nx_spec *s, int32_t seq, bool with_kv, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "state: sequence %d out of range (0..%d)", seq, s->n_seq - 1);
    const seq_state *q = &s->seq[seq];
    const size_t E = (size_t)s->E;
    if (st->E != s->E || !st->pending_h) {
        nx_free_aligned(st->pending_h);
        st->pending_h = nx_alloc_aligned(E * sizeof(float), "state", err);
        if (!st->pending_h) return false;
        st->E = s->E;
    }
    if (q->n_mir > st->cap_mir) {
        free(st->mir_tok);
        nx_free_aligned(st->mir_h);
        st->cap_mir = 0;
        st->mir_tok = nx_malloc((size_t)q->n_mir * sizeof *st->mir_tok, "state backlog", err);
        st->mir_h = st->mir_tok ? nx_alloc_aligned((size_t)q->n_mir * E * sizeof(float), "state backlog", err) : NULL;
        if (!st->mir_h) return false;
        st->cap_mir = q->n_mir;
    }
    if (!nx_seq_ckpt_take(&st->tgt, s->tgt, seq, with_kv, err)) return false;
    st->has_mtp = s->mtp != NULL;
    if (s->mtp && !nx_seq_ckpt_take(&st->mtp, nx_mtp_ctx(s->mtp), seq, with_kv, err)) return false;
    st->mtp_epoch = q->mtp_epoch;
    st->base = q->base;
    st->stale = q->stale;
    st->n_mir = q->n_mir;
    memcpy(st->pending_h, q->pending_h, E * sizeof(float));
    if (q->n_mir > 0) {
        memcpy(st->mir_tok, q->mir_tok, (size_t)q->n_mir * sizeof *q->mir_tok);
        memcpy(st->mir_h, q->mir_h, (size_t)q->n_mir * E * sizeof(float));
    }
    return true;
}

bool nx_spec_seq_restore(nx_spec *s, int32_t seq, const nx_spec_seq_state *st, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "restore: sequence %d out of range (0..%d)", seq, s->n_seq - 1);
    if (st->pending_h && st->E != s->E)
        return nx_fail(err, "restore: the state has hidden rows of %d values, the model %d", st->E, s->E);
    if (st->n_mir < 0 || (st->n_mir > 0 && (!st->mir_tok || !st->mir_h)) || st->base < 0 ||
        st->n_mir + st->base > st->tgt.pos)
        return nx_fail(err, "restore: inconsistent MTP backlog (%d rows, base %d, position %d)", st->n_mir, st->base,
                       st->tgt.pos);
    for (int32_t r = 0; r < st->n_mir; r++)
        if (st->mir_tok[r] < 0 || st->mir_tok[r] >= s->V)
            return nx_fail(err, "restore: backlog token %d out of range (vocabulary %d)", st->mir_tok[r], s->V);
    seq_state *q = &s->seq[seq];
    /* The MTP cells of the state can be used when it carries them, or in place within one epoch;
     * otherwise the MTP cache restarts at the state's position (draft quality, not output). */
    const bool mtp_kv = s->mtp && st->has_mtp && st->mtp.has_kv;
    const bool mtp_in_place = s->mtp && st->has_mtp && !st->mtp.has_kv && seq == st->tgt.seq &&
                              st->mtp_epoch == q->mtp_epoch && nx_mtp_n_past(s->mtp, seq) >= st->mtp.pos;
    if (mtp_kv && !nx_seq_ckpt_fits(nx_mtp_ctx(s->mtp), &st->mtp, err)) return nx_fail_prefix(err, "restore MTP cache");
    if ((mtp_kv || mtp_in_place) && st->mtp.pos + st->n_mir + st->base != st->tgt.pos && !st->stale)
        return nx_fail(err, "restore: MTP cache %d + backlog %d != position %d - base %d", st->mtp.pos, st->n_mir,
                       st->tgt.pos, st->base);
    if (!nx_seq_ckpt_restore(s->tgt, seq, &st->tgt, err)) return false;
    reset_seq(s, q, false);
    if (st->pending_h) memcpy(q->pending_h, st->pending_h, (size_t)s->E * sizeof(float));
    /* backlog: at most mir_cap rows (the newest); dropping rows makes the MTP cache stale */
    const int32_t keep = NX_MIN(st->n_mir, s->mir_cap), skip = st->n_mir - keep;
    if (keep > 0) {
        memcpy(q->mir_tok, st->mir_tok + skip, (size_t)keep * sizeof *q->mir_tok);
        memcpy(q->mir_h, st->mir_h + (size_t)skip * (size_t)s->E, (size_t)keep * (size_t)s->E * sizeof(float));
    }
    q->n_mir = keep;
    q->base = st->base;
    q->stale = st->stale || skip > 0;
    if (s->mtp) {
        if (mtp_kv || mtp_in_place) {
            if (!nx_seq_ckpt_restore(nx_mtp_ctx(s->mtp), seq, &st->mtp, err)) return false;
            if (mtp_kv) q->mtp_epoch = ++s->epoch_next;
        } else {
            if (!nx_mtp_clear(s->mtp, seq, err)) return false;
            q->mtp_epoch = ++s->epoch_next;
            /* rebuilt from the backlog at the next flush, numbered from its first row */
            q->stale = false;
            q->base = st->tgt.pos - q->n_mir;
        }
    }
    q->resume = st->tgt.pos;
    return true;
}

bool nx_spec_seq_keep(nx_spec *s, int32_t seq, nx_err *err) {
    if (seq < 0 || seq >= s->n_seq) return nx_fail(err, "keep: sequence %d out of range (0..%d)", seq, s->n_seq - 1);
    seq_state *q = &s->seq[seq];
    q->active = false;
    q->prefilling = false;
    q->pf_next = 0;
    q->n_draft = 0;
    q->resume = nx_ctx_n_past(s->tgt, seq);
    return true;
}

int32_t nx_spec_seq_resume_pos(const nx_spec *s, int32_t seq) {
    return seq >= 0 && seq < s->n_seq ? s->seq[seq].resume : 0;
}
