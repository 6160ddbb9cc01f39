/* test_sample.c - the sampling chain against distributions computed independently here. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sample/sample.h"
#include "testutil.h"

/* ---- independent references ---------------------------------------------------------------- */

/* softmax(l / temp) over the ids in keep[] (others 0), into probs[n] (dense). */
static void ref_softmax(const float *l, const int *keep, int n_keep, double temp, double *probs, int n) {
    for (int i = 0; i < n; i++) probs[i] = 0.0;
    double mx = -INFINITY, sum = 0.0;
    for (int k = 0; k < n_keep; k++) mx = fmax(mx, l[keep[k]]);
    for (int k = 0; k < n_keep; k++) sum += exp((l[keep[k]] - mx) / temp);
    for (int k = 0; k < n_keep; k++) probs[keep[k]] = exp((l[keep[k]] - mx) / temp) / sum;
}

static void dense_of(const nx_dist *d, double *probs, int n) {
    for (int i = 0; i < n; i++) probs[i] = 0.0;
    for (int i = 0; i < d->n; i++) {
        assert_true(d->ids[i] >= 0 && d->ids[i] < n);
        probs[d->ids[i]] += d->probs[i];
    }
}

static nx_sampler *make(int n_vocab, nx_sampler_params p) {
    nx_sampler *s;
    nx_err err;
    if (!nx_sampler_create(&s, n_vocab, &p, &err)) fail_msg("%s", err.msg);
    return s;
}

static nx_sampler_params plain(float temp) { /* every filter off */
    nx_sampler_params p = nx_sampler_default_params();
    p.temp = temp;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    return p;
}

/* The set of ids in a dist, as a sorted string like "0,1,3". */
static const char *id_set(const nx_dist *d) {
    static char buf[4096];
    int present[64] = {0};
    for (int i = 0; i < d->n; i++) {
        assert_true(d->ids[i] < 64);
        present[d->ids[i]] = 1;
    }
    buf[0] = 0;
    for (int i = 0; i < 64; i++)
        if (present[i]) snprintf(buf + strlen(buf), sizeof buf - strlen(buf), "%s%d", buf[0] ? "," : "", i);
    return buf;
}

static const char *chain_set(nx_sampler_params p, const float *logits, int n) {
    nx_sampler *s = make(n, p);
    nx_dist d;
    nx_err err;
    assert_true(nx_dist_init(&d, n, &err));
    if (!nx_sampler_dist(s, logits, &d, &err)) fail_msg("%s", err.msg);
    const char *r = id_set(&d);
    nx_dist_free(&d);
    nx_sampler_free(s);
    return r;
}

/* ---- tests ------------------------------------------------------------------------------------ */

static void test_defaults_match_llama(void **state) {
    (void)state;
    nx_sampler_params p = nx_sampler_default_params();
    assert_float_equal(p.temp, 0.8f, 0);
    assert_int_equal(p.top_k, 40);
    assert_float_equal(p.top_p, 0.95f, 0);
    assert_float_equal(p.min_p, 0.05f, 0);
    assert_int_equal(p.penalty_last_n, 64);
    assert_float_equal(p.penalty_repeat, 1.0f, 0);
    assert_float_equal(p.penalty_freq, 0.0f, 0);
    assert_float_equal(p.penalty_present, 0.0f, 0);
}

static void test_temperature_exact(void **state) {
    (void)state;
    const float l[5] = {1.0f, 2.0f, 3.0f, 0.5f, -2.0f};
    const int all[5] = {0, 1, 2, 3, 4};
    const float temps[3] = {0.5f, 1.0f, 1.7f};
    for (int t = 0; t < 3; t++) {
        nx_sampler *s = make(5, plain(temps[t]));
        nx_dist d;
        nx_err err;
        assert_true(nx_dist_init(&d, 5, &err));
        assert_true(nx_sampler_dist(s, l, &d, &err));
        assert_int_equal(d.n, 5);
        double got[5], want[5];
        dense_of(&d, got, 5);
        ref_softmax(l, all, 5, temps[t], want, 5);
        for (int i = 0; i < 5; i++) assert_float_equal(got[i], want[i], 1e-6);
        nx_dist_free(&d);
        nx_sampler_free(s);
    }
}

static void test_top_k_set(void **state) {
    (void)state;
    const float l[8] = {0.1f, 5.0f, -3.0f, 4.0f, 4.5f, -INFINITY, 2.0f, 4.0f};
    nx_sampler_params p = plain(1.0f);
    p.top_k = 3;
    assert_string_equal(chain_set(p, l, 8), "1,3,4");  /* tie 3 vs 7 at 4.0: lower id wins */
    p.top_k = 1;
    assert_string_equal(chain_set(p, l, 8), "1");
    p.top_k = 7;                                         /* more than the finite tokens */
    assert_string_equal(chain_set(p, l, 8), "0,1,2,3,4,6,7");
    /* the kept probabilities are the softmax over the kept set */
    p.top_k = 3;
    p.temp = 0.7f;
    nx_sampler *s = make(8, p);
    nx_dist d;
    nx_err err;
    assert_true(nx_dist_init(&d, 8, &err));
    assert_true(nx_sampler_dist(s, l, &d, &err));
    const int keep[3] = {1, 3, 4};
    double got[8], want[8];
    dense_of(&d, got, 8);
    ref_softmax(l, keep, 3, 0.7, want, 8);
    for (int i = 0; i < 8; i++) assert_float_equal(got[i], want[i], 1e-6);
    /* sorted by descending probability */
    assert_int_equal(d.ids[0], 1);
    assert_int_equal(d.ids[1], 4);
    assert_int_equal(d.ids[2], 3);
    nx_dist_free(&d);
    nx_sampler_free(s);
}

static void test_top_p_set(void **state) {
    (void)state;
    /* probabilities 0.5, 0.3, 0.15, 0.05 (ids shuffled) */
    const float l[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    nx_sampler_params p = plain(1.0f);
    p.top_p = 0.45f;
    assert_string_equal(chain_set(p, l, 4), "1");
    p.top_p = 0.75f;
    assert_string_equal(chain_set(p, l, 4), "1,3");
    p.top_p = 0.9f;
    assert_string_equal(chain_set(p, l, 4), "0,1,3");
    p.top_p = 0.99f;
    assert_string_equal(chain_set(p, l, 4), "0,1,2,3");
    p.top_p = 0.0f;                                      /* keeps at least one */
    assert_string_equal(chain_set(p, l, 4), "1");
    p.top_p = 0.45f;
    p.min_keep = 3;
    assert_string_equal(chain_set(p, l, 4), "0,1,3");
    /* top-p is computed before temperature: a high temperature does not widen the set */
    p.min_keep = 0;
    p.top_p = 0.75f;
    p.temp = 5.0f;
    assert_string_equal(chain_set(p, l, 4), "1,3");
}

/* Large vocabularies without top-k: exercises the prefix-growing top-p (quickselect of 256,
 * 4096, ... then a sort of the prefix) against a brute-force insertion sort, with and without
 * tied logits, for small and large p. */
static void test_top_p_large(void **state) {
    (void)state;
    const int sizes[3] = {300, 1500, 5000};
    const float tps[4] = {0.05f, 0.5f, 0.9f, 0.999f};
    int max_keep = 0;
    for (int si = 0; si < 3; si++) {
        for (int ties = 0; ties < 2; ties++) {
            const int V = sizes[si];
            float *l = malloc(V * sizeof *l);
            int *order = malloc(V * sizeof *order);
            tu_rng r;
            tu_rng_seed(&r, 7 + si + 10 * ties);
            for (int i = 0; i < V; i++) {
                l[i] = 0.3f * tu_rng_normal(&r); /* flat: p = 0.9 needs thousands of tokens */
                if (ties) l[i] = roundf(l[i] * 10.0f) / 10.0f;
            }
            for (int i = 0; i < V; i++) order[i] = i;
            for (int i = 1; i < V; i++) { /* insertion sort, descending logit, ties lower id */
                int x = order[i], j = i - 1;
                while (j >= 0 && (l[order[j]] < l[x] || (l[order[j]] == l[x] && order[j] > x))) {
                    order[j + 1] = order[j];
                    j--;
                }
                order[j + 1] = x;
            }
            for (int t = 0; t < 4; t++) {
                nx_sampler_params p = plain(1.0f);
                p.top_p = tps[t];
                nx_sampler *s = make(V, p);
                nx_dist d;
                nx_err err;
                assert_true(nx_dist_init(&d, V, &err));
                assert_true(nx_sampler_dist(s, l, &d, &err));
                double mx = l[order[0]], tot = 0.0;
                for (int i = 0; i < V; i++) tot += exp(l[i] - mx);
                double cum = 0.0;
                int keep = V;
                for (int i = 0; i < V; i++) {
                    cum += exp(l[order[i]] - mx) / tot;
                    if (cum >= tps[t]) { keep = i + 1; break; }
                }
                /* the float sums may put the cut one token away when cum lands on p */
                if (abs(d.n - keep) > 1) fail_msg("V %d ties %d p %g: kept %d, want %d", V, ties, tps[t], d.n, keep);
                for (int i = 0; i < d.n && i < keep; i++) assert_int_equal(d.ids[i], order[i]);
                max_keep = keep > max_keep ? keep : max_keep;
                nx_dist_free(&d);
                nx_sampler_free(s);
            }
            free(order);
            free(l);
        }
    }
    assert_true(max_keep > 4096); /* the largest prefix step was exercised */
}

static void test_min_p_set(void **state) {
    (void)state;
    const float l[4] = {logf(0.15f), logf(0.5f), logf(0.05f), logf(0.3f)};
    nx_sampler_params p = plain(1.0f);
    p.min_p = 0.2f;   /* threshold 0.1: drops 0.05 */
    assert_string_equal(chain_set(p, l, 4), "0,1,3");
    p.min_p = 0.5f;   /* threshold 0.25 */
    assert_string_equal(chain_set(p, l, 4), "1,3");
    p.min_p = 1.0f;   /* only the max */
    assert_string_equal(chain_set(p, l, 4), "1");
    p.min_keep = 2;
    assert_string_equal(chain_set(p, l, 4), "1,3");
    /* sorted path (after top-k) gives the same sets */
    p.min_keep = 0;
    p.top_k = 4;
    p.min_p = 0.2f;
    assert_string_equal(chain_set(p, l, 4), "0,1,3");
    p.min_p = 1.0f;
    p.min_keep = 3;
    assert_string_equal(chain_set(p, l, 4), "0,1,3");
}

/* Full default-style chain on a known distribution: top-k, then top-p, then min-p, then temp. */
static void test_chain_order(void **state) {
    (void)state;
    /* probs 0.4 0.25 0.15 0.1 0.06 0.04 */
    const float l[6] = {logf(0.06f), logf(0.4f), logf(0.1f), logf(0.25f), logf(0.04f), logf(0.15f)};
    nx_sampler_params p = plain(0.6f);
    p.top_k = 5;      /* drops 0.04 (id 4); renormalised over 0.96 */
    p.top_p = 0.85f;  /* cum 0.4/0.96=.417, .677, .833, .938 -> keeps 4: ids 1,3,5,2 */
    p.min_p = 0.3f;   /* threshold 0.3 * 0.4 = 0.12: drops 0.1 (id 2) */
    assert_string_equal(chain_set(p, l, 6), "1,3,5");
    nx_sampler *s = make(6, p);
    nx_dist d;
    nx_err err;
    assert_true(nx_dist_init(&d, 6, &err));
    assert_true(nx_sampler_dist(s, l, &d, &err));
    const int keep[3] = {1, 3, 5};
    double got[6], want[6];
    dense_of(&d, got, 6);
    ref_softmax(l, keep, 3, 0.6, want, 6);
    for (int i = 0; i < 6; i++) assert_float_equal(got[i], want[i], 1e-6);
    nx_dist_free(&d);
    nx_sampler_free(s);
}

static void test_penalties(void **state) {
    (void)state;
    const float l[5] = {2.0f, -1.0f, 0.5f, 3.0f, 0.0f};
    nx_sampler_params p = plain(1.0f);
    p.penalty_repeat = 2.0f;
    p.penalty_freq = 0.5f;
    p.penalty_present = 1.0f;
    p.penalty_last_n = 64;
    nx_sampler *s = make(5, p);
    nx_err err;
    const int hist[4] = {0, 1, 1, 4};
    for (int i = 0; i < 4; i++) assert_true(nx_sampler_accept(s, hist[i], &err));
    nx_dist d;
    assert_true(nx_dist_init(&d, 5, &err));
    assert_true(nx_sampler_dist(s, l, &d, &err));
    /* by hand: id0 2/2 - 0.5 - 1 = -0.5; id1 -1*2 - 1.0 - 1 = -4; id4 0*2 - 0.5 - 1 = -1.5 */
    const float pen[5] = {-0.5f, -4.0f, 0.5f, 3.0f, -1.5f};
    const int all[5] = {0, 1, 2, 3, 4};
    double got[5], want[5];
    dense_of(&d, got, 5);
    ref_softmax(pen, all, 5, 1.0, want, 5);
    for (int i = 0; i < 5; i++) assert_float_equal(got[i], want[i], 1e-6);
    /* the caller's logits are not modified */
    assert_float_equal(l[0], 2.0f, 0);

    /* window: only the last 2 accepted tokens (1, 4) count */
    nx_sampler_free(s);
    p.penalty_last_n = 2;
    s = make(5, p);
    for (int i = 0; i < 4; i++) assert_true(nx_sampler_accept(s, hist[i], &err));
    assert_true(nx_sampler_dist(s, l, &d, &err));
    const float pen2[5] = {2.0f, -1.0f * 2 - 0.5f - 1.0f, 0.5f, 3.0f, -1.5f};
    dense_of(&d, got, 5);
    ref_softmax(pen2, all, 5, 1.0, want, 5);
    for (int i = 0; i < 5; i++) assert_float_equal(got[i], want[i], 1e-6);

    /* rollback of 2 restores the window (0, 1) exactly */
    nx_sampler_rollback(s, 2);
    assert_int_equal(nx_sampler_n_accepted(s), 2);
    assert_true(nx_sampler_dist(s, l, &d, &err));
    const float pen3[5] = {2.0f / 2 - 0.5f - 1.0f, -1.0f * 2 - 0.5f - 1.0f, 0.5f, 3.0f, 0.0f};
    dense_of(&d, got, 5);
    ref_softmax(pen3, all, 5, 1.0, want, 5);
    for (int i = 0; i < 5; i++) assert_float_equal(got[i], want[i], 1e-6);

    /* greedy respects penalties: the max (id 3) repeated drops below id 0 */
    nx_sampler_free(s);
    nx_sampler_params g = nx_sampler_greedy_params();
    g.penalty_last_n = 8;
    g.penalty_repeat = 4.0f; /* 3/4 = 0.75 < 2 */
    s = make(5, g);
    int32_t tok;
    assert_true(nx_sampler_sample(s, l, &tok, &err));
    assert_int_equal(tok, 3);
    assert_true(nx_sampler_accept(s, 3, &err));
    assert_true(nx_sampler_sample(s, l, &tok, &err));
    assert_int_equal(tok, 0);
    /* bad ids are refused with the range */
    assert_false(nx_sampler_accept(s, 5, &err));
    assert_non_null(strstr(err.msg, "[0, 5)"));
    nx_dist_free(&d);
    nx_sampler_free(s);
}

/* The draw is a function of (seed, position, distribution): the position is the number of
 * accepted tokens, whatever they were; drawing again without accepting, or after a rollback,
 * gives the same token; another seed gives other tokens. */
static void test_seeded_determinism(void **state) {
    (void)state;
    float l[32];
    for (int i = 0; i < 32; i++) l[i] = (float)(i % 7) * 0.3f;
    nx_sampler_params p = plain(1.0f);
    p.seed = 1234;
    nx_sampler *a = make(32, p), *b = make(32, p);
    p.seed = 1235;
    nx_sampler *c = make(32, p);
    int32_t seq_a[200], differ = 0, repeats = 0;
    nx_err err;
    for (int i = 0; i < 200; i++) {
        int32_t ta, ta2, tb, tc;
        assert_true(nx_sampler_sample(a, l, &ta, &err));
        assert_true(nx_sampler_sample(a, l, &ta2, &err));
        assert_int_equal(ta, ta2); /* nothing consumed */
        assert_true(nx_sampler_sample(b, l, &tb, &err));
        assert_true(nx_sampler_sample(c, l, &tc, &err));
        assert_int_equal(ta, tb);
        differ += ta != tc;
        repeats += i > 0 && ta == seq_a[i - 1];
        seq_a[i] = ta;
        assert_true(nx_sampler_accept(a, ta, &err));
        assert_true(nx_sampler_accept(b, (tb + 1 + i) % 32, &err)); /* other history, same position */
        assert_true(nx_sampler_accept(c, tc, &err));
    }
    assert_true(differ > 100);
    assert_true(repeats < 60); /* positions advance: not the same token every time */
    nx_sampler_rollback(a, 50); /* back to position 150: the same draws again */
    for (int i = 150; i < 200; i++) {
        int32_t t;
        assert_true(nx_sampler_sample(a, l, &t, &err));
        assert_int_equal(t, seq_a[i]);
        assert_true(nx_sampler_accept(a, t, &err));
    }
    nx_sampler_reset(a); /* reset replays the same sequence */
    for (int i = 0; i < 200; i++) {
        int32_t t;
        assert_true(nx_sampler_sample(a, l, &t, &err));
        assert_int_equal(t, seq_a[i]);
        assert_true(nx_sampler_accept(a, t, &err));
    }
    nx_sampler_free(a);
    nx_sampler_free(b);
    nx_sampler_free(c);
}

/* Pearson chi-square of counts against expected probabilities over the support. */
static double chi_square(const long *counts, const double *probs, int n, long draws, int *df) {
    double chi = 0.0;
    *df = -1;
    for (int i = 0; i < n; i++) {
        if (probs[i] <= 0.0) {
            assert_int_equal(counts[i], 0); /* never draws outside the support */
            continue;
        }
        double e = probs[i] * (double)draws;
        chi += (counts[i] - e) * (counts[i] - e) / e;
        (*df)++;
    }
    return chi;
}

/* 0.999 quantiles of chi-square, df 1..10 */
static const double chi999[11] = {0, 10.83, 13.82, 16.27, 18.47, 20.52, 22.46, 24.32, 26.12, 27.88, 29.59};

static void test_chi_square_follows_processed_dist(void **state) {
    (void)state;
    const float l[10] = {1.0f, 0.2f, 2.5f, -1.0f, 0.7f, 1.9f, -INFINITY, 0.0f, 2.2f, -0.3f};
    nx_sampler_params p = plain(0.9f);
    p.top_k = 7;         /* drops -1.0, -0.3 and the -inf */
    p.min_p = 0.1f;      /* threshold 2.5 + ln 0.1 = 0.197: drops 0.0 */
    p.seed = 42;
    nx_sampler *s = make(10, p);
    const int keep[6] = {0, 1, 2, 4, 5, 8};
    double want[10];
    ref_softmax(l, keep, 6, 0.9, want, 10);
    long counts[10] = {0};
    const long draws = 100000;
    nx_err err;
    for (long i = 0; i < draws; i++) {
        int32_t t;
        assert_true(nx_sampler_sample(s, l, &t, &err));
        assert_true(nx_sampler_accept(s, t, &err)); /* next position */
        counts[t]++;
    }
    int df;
    double chi = chi_square(counts, want, 10, draws, &df);
    assert_int_equal(df, 5);
    if (chi > chi999[df]) fail_msg("chi-square %.2f > %.2f (df %d)", chi, chi999[df], df);
    nx_sampler_free(s);

    /* the test is able to fail: sampling at temperature 1 is rejected against the 0.9 table */
    p.temp = 1.0f;
    s = make(10, p);
    memset(counts, 0, sizeof counts);
    for (long i = 0; i < draws; i++) {
        int32_t t;
        assert_true(nx_sampler_sample(s, l, &t, &err));
        assert_true(nx_sampler_accept(s, t, &err)); /* next position */
        counts[t]++;
    }
    chi = chi_square(counts, want, 10, draws, &df);
    assert_true(chi > chi999[df]);
    nx_sampler_free(s);
}

static void test_greedy_ties(void **state) {
    (void)state;
    const float l[6] = {1.0f, 3.0f, -INFINITY, 3.0f, 2.0f, 3.0f};
    assert_int_equal(nx_argmax(l, 6), 1);
    nx_sampler *s = make(6, nx_sampler_greedy_params());
    int32_t t;
    nx_err err;
    assert_true(nx_sampler_sample(s, l, &t, &err));
    assert_int_equal(t, 1);
    nx_dist d;
    assert_true(nx_dist_init(&d, 6, &err));
    assert_true(nx_sampler_dist(s, l, &d, &err));
    assert_int_equal(d.n, 1);
    assert_int_equal(d.ids[0], 1);
    assert_float_equal(d.probs[0], 1.0f, 0);
    /* temp <= 0 is greedy even with the other filters on (llama.cpp's temp 0) */
    nx_sampler_params p = nx_sampler_default_params();
    p.temp = 0.0f;
    nx_sampler *s2 = make(6, p);
    assert_true(nx_sampler_sample(s2, l, &t, &err));
    assert_int_equal(t, 1);
    /* top-k with ties keeps the lowest ids */
    p = plain(1.0f);
    p.top_k = 2;
    assert_string_equal(chain_set(p, l, 6), "1,3");
    nx_dist_free(&d);
    nx_sampler_free(s);
    nx_sampler_free(s2);
}

static void test_degenerate_inputs(void **state) {
    (void)state;
    float l[4] = {-INFINITY, -INFINITY, -INFINITY, -INFINITY};
    nx_sampler *s = make(4, nx_sampler_default_params());
    int32_t t;
    nx_err err;
    assert_false(nx_sampler_sample(s, l, &t, &err));
    assert_non_null(strstr(err.msg, "-inf"));
    l[2] = NAN;
    assert_false(nx_sampler_sample(s, l, &t, &err));
    assert_non_null(strstr(err.msg, "token 2 is NaN"));
    l[2] = INFINITY;
    assert_false(nx_sampler_sample(s, l, &t, &err));
    assert_non_null(strstr(err.msg, "+inf"));
    assert_int_equal(nx_argmax((float[]){-INFINITY, -INFINITY}, 2), -1);
    assert_int_equal(nx_argmax((float[]){1.0f, NAN}, 2), -1);
    /* one finite token among -inf: always that token */
    float one[4] = {-INFINITY, -INFINITY, 0.3f, -INFINITY};
    for (int i = 0; i < 20; i++) {
        assert_true(nx_sampler_sample(s, one, &t, &err));
        assert_int_equal(t, 2);
    }
    nx_sampler_free(s);

    /* bad parameters name the field */
    nx_sampler_params p = nx_sampler_default_params();
    p.top_p = 1.5f;
    assert_false(nx_sampler_params_check(&p, &err));
    assert_non_null(strstr(err.msg, "top_p"));
    p = nx_sampler_default_params();
    p.min_p = -0.1f;
    assert_false(nx_sampler_create(&s, 4, &p, &err));
    assert_null(s);
    assert_non_null(strstr(err.msg, "min_p"));
    p = nx_sampler_default_params();
    p.penalty_repeat = 0.0f;
    assert_false(nx_sampler_params_check(&p, &err));
    assert_non_null(strstr(err.msg, "repeat"));
    p = nx_sampler_default_params();
    p.temp = NAN;
    assert_false(nx_sampler_params_check(&p, &err));
    assert_non_null(strstr(err.msg, "temp"));
    p = nx_sampler_default_params();
    assert_false(nx_sampler_create(&s, 0, &p, &err));
    assert_non_null(strstr(err.msg, "n_vocab"));
}

/* Real vocabulary size with top-k: the kept set is the brute-force top 40. */
static void test_big_vocab_top_k(void **state) {
    (void)state;
    const int V = 248320;
    float *l = malloc((size_t)V * sizeof *l);
    tu_rng r;
    tu_rng_seed(&r, 99);
    for (int i = 0; i < V; i++) l[i] = 3.0f * tu_rng_normal(&r);
    nx_sampler_params p = nx_sampler_default_params();
    p.min_p = 0.0f;
    p.top_p = 1.0f;
    nx_sampler *s = make(V, p);
    nx_dist d;
    nx_err err;
    assert_true(nx_dist_init(&d, V, &err));
    double t0 = nx_time_s();
    for (int rep = 0; rep < 10; rep++) assert_true(nx_sampler_dist(s, l, &d, &err));
    double per = (nx_time_s() - t0) / 10;
    printf("# dist on V=%d with top-k 40: %.3f ms\n", V, per * 1e3);
    assert_int_equal(d.n, 40);
    /* every kept logit >= every dropped logit */
    float min_kept = INFINITY;
    char *kept = calloc((size_t)V, 1);
    for (int i = 0; i < 40; i++) {
        min_kept = fminf(min_kept, l[d.ids[i]]);
        kept[d.ids[i]] = 1;
        if (i) assert_true(d.probs[i] <= d.probs[i - 1]);
    }
    for (int i = 0; i < V; i++)
        if (!kept[i]) assert_true(l[i] <= min_kept);
    free(kept);
    nx_dist_free(&d);
    nx_sampler_free(s);
    free(l);
}

static void set_dist(nx_dist *d, const double *p, int n) {
    d->n = 0;
    for (int i = 0; i < n; i++)
        if (p[i] > 0) {
            d->ids[d->n] = i;
            d->probs[d->n++] = (float)p[i];
        }
}

/* The draw does not depend on the order of the entries (ties by id, exact pruning): a
 * distribution and its permutations give the same token at every position; an entry of
 * probability 0 is never drawn. */
static void test_draw_order_independent(void **state) {
    (void)state;
    enum { V = 64, POS = 3000 };
    nx_err err;
    nx_dist d, r;
    assert_true(nx_dist_init(&d, V, &err) && nx_dist_init(&r, V, &err));
    tu_rng rng;
    tu_rng_seed(&rng, 3);
    double w[V], sum = 0;
    for (int i = 0; i < V; i++) sum += w[i] = i == 17 ? 0.0 : exp(2.0 * tu_rng_normal(&rng));
    for (int i = 0; i < V; i++) w[i] /= sum;
    set_dist(&d, w, V);
    d.ids[d.n] = 17; /* an explicit zero entry */
    d.probs[d.n++] = 0.0f;
    r.n = d.n;
    for (int i = 0; i < d.n; i++) { /* reversed, then a few random swaps */
        r.ids[i] = d.ids[d.n - 1 - i];
        r.probs[i] = d.probs[d.n - 1 - i];
    }
    for (int k = 0; k < 50; k++) {
        int i = (int)(tu_rng_u64(&rng) % (uint64_t)r.n), j = (int)(tu_rng_u64(&rng) % (uint64_t)r.n);
        int32_t ti = r.ids[i];
        float pi = r.probs[i];
        r.ids[i] = r.ids[j];
        r.probs[i] = r.probs[j];
        r.ids[j] = ti;
        r.probs[j] = pi;
    }
    nx_sampler_params p = plain(1.0f);
    p.seed = 77;
    nx_sampler *s = make(V, p);
    int distinct = 0;
    char seen[V] = {0};
    for (int k = 0; k < POS; k++) {
        int32_t a = nx_sampler_draw(s, &d), b = nx_sampler_draw(s, &r);
        assert_int_equal(a, b);
        assert_true(a != 17);
        distinct += !seen[a];
        seen[a] = 1;
        assert_true(nx_sampler_accept(s, a, &err));
    }
    assert_true(distinct > 40);
    nx_dist_free(&d);
    nx_dist_free(&r);
    nx_sampler_free(s);
}

/* Two distributions drawn at the same position share their noise (the speculative driver's
 * draft and target draws): each still follows its own distribution (chi-square), they agree
 * with the probability of the exponential-race coupling, derived by hand:
 *     P(x = y = i) = P(E_j > E_i max(p_j/p_i, q_j/q_i) for all j != i) = 1 / sum_j max(p_j/p_i, q_j/q_i)
 * (E i.i.d. Exp(1)), here 0.4666 (independent noise would give sum p q = 0.1535, the best
 * coupling sum min(p, q) = 0.5); and consecutive positions are independent (chi-square of
 * the pairs). */
static void test_shared_noise_coupling(void **state) {
    (void)state;
    enum { V = 6, POS = 200000 };
    const double p[V] = {0.30, 0.25, 0.20, 0.15, 0.07, 0.03};
    const double q[V] = {0.05, 0.10, 0.40, 0.05, 0.35, 0.05};
    nx_err err;
    nx_dist P, Q;
    assert_true(nx_dist_init(&P, V, &err) && nx_dist_init(&Q, V, &err));
    set_dist(&P, p, V);
    set_dist(&Q, q, V);
    nx_sampler_params sp = plain(1.0f);
    sp.seed = 2024;
    sp.penalty_last_n = 0; /* only the position advances */
    nx_sampler *s = make(V, sp);
    long cx[V] = {0}, cy[V] = {0}, pairs[V * V] = {0}, same = 0;
    int32_t prev = -1;
    for (long k = 0; k < POS; k++) {
        int32_t x = nx_sampler_draw(s, &P), y = nx_sampler_draw(s, &Q);
        cx[x]++;
        cy[y]++;
        same += x == y;
        if (prev >= 0 && k % 2 == 1) pairs[prev * V + x]++;
        prev = x;
        assert_true(nx_sampler_accept(s, x, &err));
    }
    int df;
    double chi = chi_square(cx, p, V, POS, &df);
    if (chi > chi999[df]) fail_msg("target draws: chi-square %.2f > %.2f (df %d)", chi, chi999[df], df);
    chi = chi_square(cy, q, V, POS, &df);
    if (chi > chi999[df]) fail_msg("draft draws: chi-square %.2f > %.2f (df %d)", chi, chi999[df], df);
    double want = 0.0;
    for (int i = 0; i < V; i++) {
        double m = 0.0;
        for (int j = 0; j < V; j++) m += fmax(p[j] / p[i], q[j] / q[i]);
        want += 1.0 / m;
    }
    printf("shared noise: P(x = y) %.4f, exponential-race coupling %.4f\n", (double)same / POS, want);
    assert_float_equal((double)same / POS, want, 0.005); /* sd 0.0011 */
    double pp[V * V], chi_pairs = 0.0;
    for (int i = 0; i < V; i++)
        for (int j = 0; j < V; j++) pp[i * V + j] = p[i] * p[j];
    for (int i = 0; i < V * V; i++) {
        double e = pp[i] * (POS / 2);
        chi_pairs += (pairs[i] - e) * (pairs[i] - e) / e;
    }
    printf("consecutive positions: chi-square %.2f (df 35, 0.1%% critical 66.62)\n", chi_pairs);
    assert_true(chi_pairs < 66.62);
    nx_dist_free(&P);
    nx_dist_free(&Q);
    nx_sampler_free(s);
}

/* ---- llama.cpp's further samplers on the same logits (tests/fixtures/samplers/README.md) ------ */

static void set_param(nx_sampler_params *p, const char *key, float v) {
    if (strcmp(key, "temp") == 0) p->temp = v;
    else if (strcmp(key, "top_k") == 0) p->top_k = (int32_t)v;
    else if (strcmp(key, "top_p") == 0) p->top_p = v;
    else if (strcmp(key, "min_p") == 0) p->min_p = v;
    else if (strcmp(key, "typ_p") == 0) p->typ_p = v;
    else if (strcmp(key, "top_n_sigma") == 0) p->top_n_sigma = v;
    else if (strcmp(key, "xtc_probability") == 0) p->xtc_probability = v;
    else if (strcmp(key, "xtc_threshold") == 0) p->xtc_threshold = v;
    else if (strcmp(key, "dynatemp_range") == 0) p->dynatemp_range = v;
    else if (strcmp(key, "dynatemp_exponent") == 0) p->dynatemp_exponent = v;
    else if (strcmp(key, "min_keep") == 0) p->min_keep = (int32_t)v;
    else if (strcmp(key, "penalty_last_n") == 0) p->penalty_last_n = (int32_t)v;
    else if (strcmp(key, "repeat_penalty") == 0) p->penalty_repeat = v;
    else if (strcmp(key, "frequency_penalty") == 0) p->penalty_freq = v;
    else if (strcmp(key, "presence_penalty") == 0) p->penalty_present = v;
    else if (strcmp(key, "dry_multiplier") == 0) p->dry_multiplier = v;
    else if (strcmp(key, "dry_base") == 0) p->dry_base = v;
    else if (strcmp(key, "dry_allowed_length") == 0) p->dry_allowed_length = (int32_t)v;
    else if (strcmp(key, "dry_penalty_last_n") == 0) p->dry_penalty_last_n = (int32_t)v;
    else fail_msg("fixture: unknown parameter '%s'", key);
}

/* Each case of llama.txt: our chain with the same parameters keeps the same tokens, with the
 * probabilities llama.cpp's dist sampler would draw from (within float rounding). */
static void test_llama_fixtures(void **state) {
    (void)state;
    size_t len = 0;
    char *text = tu_read_file(tu_src_path("tests/fixtures/samplers/llama.txt"), &len);
    assert_non_null(text);
    int n_cases = 0;
    char *save = NULL, name[128] = "";
    nx_sampler_params p = nx_sampler_default_params();
    float logits[256];
    int n = 0;
    int32_t hist[512], brk[64], brk_len[16];
    int n_hist = 0, n_brk = 0, n_brk_tok = 0;
    for (char *line = strtok_r(text, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        if (strncmp(line, "case ", 5) == 0) {
            snprintf(name, sizeof name, "%s", line + 5);
            p = nx_sampler_default_params();
            p.penalty_last_n = 0;
            p.seed = 1234;
            n_hist = n_brk = n_brk_tok = 0;
        } else if (strncmp(line, "history", 7) == 0) {
            for (char *c = line + 7, *e = NULL;; c = e) {
                const long t = strtol(c, &e, 10);
                if (e == c) break;
                assert_true(n_hist < 512);
                hist[n_hist++] = (int32_t)t;
            }
        } else if (strncmp(line, "breakers", 8) == 0) {
            for (char *c = line + 8, *e = NULL;; c = e) {
                const long t = strtol(c, &e, 10);
                if (e == c) break;
                assert_true(n_brk_tok < 64 && n_brk < 16);
                if (c[0] == ' ') brk_len[n_brk++] = 0; /* a new sequence after a blank */
                brk[n_brk_tok++] = (int32_t)t;
                brk_len[n_brk - 1]++;
                if (*e == ',') e++;
            }
            p.dry_breakers = brk;
            p.dry_breaker_lens = brk_len;
            p.n_dry_breakers = n_brk;
        } else if (strncmp(line, "params", 6) == 0) {
            char *sv = NULL;
            for (char *kv = strtok_r(line + 6, " ", &sv); kv; kv = strtok_r(NULL, " ", &sv)) {
                char *eq = strchr(kv, '=');
                assert_non_null(eq);
                *eq = '\0';
                if (strcmp(kv, "order") == 0) snprintf(p.samplers, sizeof p.samplers, "%s", eq + 1);
                else set_param(&p, kv, strtof(eq + 1, NULL));
            }
        } else if (strncmp(line, "logits", 6) == 0) {
            n = 0;
            for (char *c = line + 6, *e = NULL;; c = e) {
                const float v = strtof(c, &e);
                if (e == c) break;
                assert_true(n < 256);
                logits[n++] = v;
            }
        } else if (strncmp(line, "probs", 5) == 0) {
            double want[256] = {0}, got[256];
            int n_want = 0;
            for (char *c = line + 5, *e = NULL;; c = e) {
                const long id = strtol(c, &e, 10);
                if (e == c) break;
                assert_true(*e == ':' && id >= 0 && id < n);
                want[id] = strtod(e + 1, &e);
                n_want++;
            }
            nx_sampler *s = make(n, p);
            nx_dist d;
            nx_err err;
            assert_true(nx_dist_init(&d, n, &err));
            for (int i = 0; i < n_hist; i++) assert_true(nx_sampler_accept(s, hist[i], &err));
            if (!nx_sampler_dist(s, logits, &d, &err)) fail_msg("%s: %s", name, err.msg);
            dense_of(&d, got, n);
            int n_got = 0;
            for (int i = 0; i < n; i++) n_got += got[i] > 0.0;
            if (n_got != n_want) fail_msg("%s: %d tokens kept, llama.cpp keeps %d", name, n_got, n_want);
            for (int i = 0; i < n; i++)
                if ((want[i] > 0.0) != (got[i] > 0.0) || fabs(want[i] - got[i]) > 2e-6 + 1e-5 * want[i])
                    fail_msg("%s: token %d: p = %.9g, llama.cpp %.9g", name, i, got[i], want[i]);
            nx_dist_free(&d);
            nx_sampler_free(s);
            n_cases++;
        }
    }
    free(text);
    assert_true(n_cases >= 35);
}

/* XTC's coin: a function of (seed, position) - the same decision when a position is sampled
 * again (a speculative verify) - and taken with the asked probability. */
static void test_xtc_coin(void **state) {
    (void)state;
    const float logits[6] = {3.0f, 2.9f, 2.8f, 0.0f, -1.0f, -2.0f}; /* three tokens above 0.1 */
    nx_sampler_params p = plain(1.0f);
    p.xtc_probability = 0.3f;
    p.xtc_threshold = 0.1f;
    p.seed = 77;
    nx_sampler *s = make(6, p), *t = make(6, p);
    nx_dist d, e;
    nx_err err;
    assert_true(nx_dist_init(&d, 6, &err) && nx_dist_init(&e, 6, &err));
    int applied = 0;
    const int N = 4000;
    for (int k = 0; k < N; k++) {
        assert_true(nx_sampler_dist(s, logits, &d, &err));
        const bool cut = nx_dist_prob(&d, 0) == 0.0f;
        if (cut) assert_string_equal(id_set(&d), "2,3,4,5"); /* the least likely above the threshold stays */
        else assert_int_equal(d.n, 6);
        applied += cut;
        assert_true(nx_sampler_dist(s, logits, &e, &err)); /* again at the same position: the same */
        assert_int_equal(nx_dist_prob(&e, 0) == 0.0f, cut);
        if (k % 3 == 0) { /* another sampler on the same seed, accepted differently, agrees per position */
            assert_true(nx_sampler_dist(t, logits, &e, &err));
            assert_int_equal(nx_dist_prob(&e, 0) == 0.0f, cut);
        }
        assert_true(nx_sampler_accept(s, k % 6, &err));
        if (k % 3 == 2) {
            for (int j = 0; j < 3; j++) assert_true(nx_sampler_accept(t, 5 - (k + j) % 6, &err));
        }
    }
    /* 0.3 +- 4.5 sigma (sigma = 0.0072 at N = 4000) */
    assert_true(fabs((double)applied / N - 0.3) < 0.033);
    nx_dist_free(&d);
    nx_dist_free(&e);
    nx_sampler_free(s);
    nx_sampler_free(t);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_match_llama),
        cmocka_unit_test(test_temperature_exact),
        cmocka_unit_test(test_top_k_set),
        cmocka_unit_test(test_top_p_set),
        cmocka_unit_test(test_top_p_large),
        cmocka_unit_test(test_min_p_set),
        cmocka_unit_test(test_chain_order),
        cmocka_unit_test(test_penalties),
        cmocka_unit_test(test_seeded_determinism),
        cmocka_unit_test(test_chi_square_follows_processed_dist),
        cmocka_unit_test(test_greedy_ties),
        cmocka_unit_test(test_degenerate_inputs),
        cmocka_unit_test(test_big_vocab_top_k),
        cmocka_unit_test(test_draw_order_independent),
        cmocka_unit_test(test_shared_noise_coupling),
        cmocka_unit_test(test_llama_fixtures),
        cmocka_unit_test(test_xtc_coin),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
