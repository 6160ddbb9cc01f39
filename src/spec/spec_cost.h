/* spec_cost.h - the adaptive draft length's decision: acceptance statistics and the choice of
 * per-sequence draft lengths from them and from pass costs (pure functions; the driver in
 * spec.c measures and calls them).
 *
 * Model of a step.  Sequence i drafts N_i tokens.  Its draft j (1-based) is accepted with the
 * conditional probability a_ij = P(draft j accepted | drafts 1..j-1 accepted), so the step emits
 * 1 + sum_{j <= N_i} prod_{l <= j} a_il tokens for it in expectation (the first rejected draft
 * is replaced by the target's token; full acceptance adds the bonus token).  The step costs
 * t_pass0 + (L - 1) t_pass for the draft passes (L = max N_i; all drafting sequences share each
 * pass, one row each; none when L = 0) plus verify(R) for one target batch of R = sum (N_i + 1)
 * rows.  The plan maximises expected tokens per expected second; plain decoding (all N_i = 0:
 * no MTP work) wins unless a plan beats it by `margin` (the estimates are noisy).
 *
 * Search: for each L, the drafts (i, j <= min(L, cap_i)) are added in decreasing order of their
 * marginal gain prod_{l <= j} a_il (ties: lower sequence, then lower position).  Along one
 * sequence the gains do not increase, so every prefix of that order is a valid plan, and for a
 * given number of rows it is the one with the most expected tokens; the best prefix over all L
 * is the plan.  With one sequence this is the exhaustive search over N = 0..cap.
 *
 * The output of the driver never depends on the plan (docs/mtp.md "Sampling"), only its speed. */
#ifndef NX_SPEC_COST_H
#define NX_SPEC_COST_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Draft tokens per step at most (draft_max's limit; snapshot slots cost memory per slot): the
 * driver's draft buffer and the cost model's per-position counts. */
#define NX_SPEC_MAX_DRAFT 16

/* Decayed acceptance counts of one sequence, per draft position (0-based j = draft j + 1). */
typedef struct nx_spec_acc {
    double succ[NX_SPEC_MAX_DRAFT];   /* drafts at position j accepted */
    double trials[NX_SPEC_MAX_DRAFT]; /* drafts at position j verified with 1..j-1 accepted */
} nx_spec_acc;

/* Records a verified step: n_draft drafts, the first k accepted (k <= n_draft).  The counts of
 * the positions the step reached (1..k, and k + 1 if k < n_draft) are first multiplied by decay
 * (0 < decay <= 1), so old evidence fades; positions 1..k gain a success, position k + 1 a
 * failure.  Positions not reached keep their counts: a run of short drafts does not erase
 * what longer ones measured.  n_draft 0 changes nothing. */
void nx_spec_acc_add(nx_spec_acc *a, int32_t n_draft, int32_t k, double decay);

/* Pooled rate of a: (sum succ + w p) / (sum trials + w), i.e. p when a holds nothing. */
double nx_spec_acc_pooled(const nx_spec_acc *a, double p, double w);

/* rates[j] (j < n) = the conditional acceptance of draft position j + 1, shrunk towards
 * `prior` with weight w (in trials), with `opt` extra successes in as many trials:
 * (succ_j + w prior + opt) / (trials_j + w + opt).  The optimism fades with the evidence; it
 * keeps a sequence whose first drafts were rejected from settling on short drafts (or plain)
 * before it has seen much. */
void nx_spec_acc_rates(const nx_spec_acc *a, double prior, double w, double opt, int32_t n, double *rates);

typedef struct nx_spec_plan_in {
    int32_t n_seq;          /* sequences in the step (>= 1) */
    const int32_t *cap;     /* [n_seq] most drafts sequence i may take (0 = none) */
    const double *rates;    /* [n_seq * stride]: rates[i * stride + j] = a_i,j+1 in [0, 1] */
    int32_t stride;         /* >= max cap, <= NX_SPEC_MAX_DRAFT */
    double t_pass0;         /* cost of the first draft pass (> 0) */
    double t_pass;          /* cost of each further pass (> 0) */
    const double *verify;   /* verify[r] = cost of a verify of r rows, r = 1 .. max_rows */
    int32_t max_rows;       /* >= n_seq + sum cap */
    double margin;          /* a plan must beat plain decoding by this factor (e.g. 1.03) */
} nx_spec_plan_in;

/* Writes the draft lengths N[i] (0 .. cap_i) of the plan and returns max N (0: plain).
 * *rate (NULL = not wanted) receives the plan's expected tokens per unit of cost. */
int32_t nx_spec_plan(const nx_spec_plan_in *in, int32_t *N, double *rate);

/* Probes.  A sequence whose plan is plain drafts one token every so many plain steps (a probe),
 * to notice when its acceptance comes back.  A probe step costs `extra` more than a plain step
 * (its MTP passes, including the backlog rows they write, and its verify row); `plain` is the
 * cost of a plain step per sequence.  The probe is due after `run` plain steps when
 *   interval <= 1 (the previous probe was accepted: another follows at once), or
 *   run >= max(interval, min(ceil(extra / (budget * plain)), gap_max)),
 * i.e. the doubling schedule of the caller (`interval`), stretched so that probes take at most
 * `budget` of the plain decoding time (up to gap_max steps apart).  extra <= 0 or plain <= 0
 * (nothing measured): the schedule alone. */
bool nx_spec_probe_due(int32_t run, int32_t interval, double extra, double plain, double budget, int32_t gap_max);

#endif
