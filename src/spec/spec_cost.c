/* spec_cost.c - the adaptive draft length's decision (see spec_cost.h for the model). */
#include "spec/spec_cost.h"

#include <math.h>

void nx_spec_acc_add(nx_spec_acc *a, int32_t n_draft, int32_t k, double decay) {
    if (n_draft <= 0) return;
    if (n_draft > NX_SPEC_MAX_DRAFT) n_draft = NX_SPEC_MAX_DRAFT;
    if (k > n_draft) k = n_draft;
    const int32_t reached = k < n_draft ? k + 1 : n_draft;
    for (int32_t j = 0; j < reached; j++) {
        a->succ[j] = decay * a->succ[j] + (j < k ? 1.0 : 0.0);
        a->trials[j] = decay * a->trials[j] + 1.0;
    }
}

double nx_spec_acc_pooled(const nx_spec_acc *a, double p, double w) {
    double s = 0.0, t = 0.0;
    for (int32_t j = 0; j < NX_SPEC_MAX_DRAFT; j++) {
        s += a->succ[j];
        t += a->trials[j];
    }
    return (s + w * p) / (t + w);
}

void nx_spec_acc_rates(const nx_spec_acc *a, double prior, double w, double opt, int32_t n, double *rates) {
    for (int32_t j = 0; j < n && j < NX_SPEC_MAX_DRAFT; j++)
        rates[j] = (a->succ[j] + w * prior + opt) / (a->trials[j] + w + opt);
}

/* Marginal gain of sequence i's next draft (position n + 1): prod_{l <= n + 1} a_il. */
static double gain(const nx_spec_plan_in *in, int32_t i, int32_t n) {
    double g = 1.0;
    for (int32_t l = 0; l <= n; l++) g *= in->rates[(size_t)i * (size_t)in->stride + (size_t)l];
    return g;
}

/* The sequence whose next draft (below min(L, cap)) gains most, or -1; ties to the lower one. */
static int32_t next_best(const nx_spec_plan_in *in, const int32_t *N, int32_t L, double *g_out) {
    int32_t best = -1;
    double bg = -1.0;
    for (int32_t i = 0; i < in->n_seq; i++) {
        const int32_t lim = in->cap[i] < L ? in->cap[i] : L;
        if (N[i] >= lim) continue;
        const double g = gain(in, i, N[i]);
        if (g > bg) {
            bg = g;
            best = i;
        }
    }
    *g_out = bg;
    return best;
}

int32_t nx_spec_plan(const nx_spec_plan_in *in, int32_t *N, double *rate) {
    int32_t max_cap = 0;
    for (int32_t i = 0; i < in->n_seq; i++) {
        N[i] = 0;
        if (in->cap[i] > max_cap) max_cap = in->cap[i];
    }
    if (max_cap > in->stride) max_cap = in->stride;
    const double plain = (double)in->n_seq / in->verify[in->n_seq];
    double best_rate = plain * in->margin;
    int32_t best_L = 0, best_adds = 0;
    for (int32_t L = 1; L <= max_cap; L++) {
        double tokens = (double)in->n_seq, g;
        int32_t adds = 0, top = 0, i;
        while ((i = next_best(in, N, L, &g)) >= 0) {
            N[i]++;
            adds++;
            tokens += g;
            if (N[i] > top) top = N[i];
            const int32_t rows = in->n_seq + adds;
            if (rows > in->max_rows) break;
            const double r = tokens / (in->t_pass0 + (top - 1) * in->t_pass + in->verify[rows]);
            if (r > best_rate) {
                best_rate = r;
                best_L = L;
                best_adds = adds;
            }
        }
        for (int32_t s = 0; s < in->n_seq; s++) N[s] = 0;
    }
    /* replay the best prefix */
    int32_t top = 0;
    for (int32_t a = 0; a < best_adds; a++) {
        double g;
        const int32_t i = next_best(in, N, best_L, &g);
        N[i]++;
        if (N[i] > top) top = N[i];
    }
    if (rate) *rate = best_adds ? best_rate : plain;
    return top;
}

bool nx_spec_probe_due(int32_t run, int32_t interval, double extra, double plain, double budget, int32_t gap_max) {
    if (interval <= 1) return run >= 1;
    int32_t gap = interval;
    if (extra > 0.0 && plain > 0.0 && budget > 0.0) {
        const double floor_gap = ceil(extra / (budget * plain));
        const int32_t f = floor_gap >= (double)gap_max ? gap_max : (int32_t)floor_gap;
        if (f > gap) gap = f;
    }
    return run >= gap;
}
