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

static void test_seeded_determinism(void **state) {
    (void)state;
    float l[32];
    for (int i = 0; i < 32; i++) l[i] = (float)(i % 7) * 0.3f;
    nx_sampler_params p = plain(1.0f);
    p.seed = 1234;
    nx_sampler *a = make(32, p), *b = make(32, p);
    p.seed = 1235;
    nx_sampler *c = make(32, p);
    int32_t seq_a[200], differ = 0;
    nx_err err;
    for (int i = 0; i < 200; i++) {
        int32_t ta, tb, tc;
        assert_true(nx_sampler_sample(a, l, &ta, &err));
        assert_true(nx_sampler_sample(b, l, &tb, &err));
        assert_true(nx_sampler_sample(c, l, &tc, &err));
        assert_int_equal(ta, tb);
        differ += ta != tc;
        seq_a[i] = ta;
    }
    assert_true(differ > 50);
    nx_sampler_reset(a); /* reset replays the same sequence */
    for (int i = 0; i < 200; i++) {
        int32_t t;
        assert_true(nx_sampler_sample(a, l, &t, &err));
        assert_int_equal(t, seq_a[i]);
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

static void test_residual_exact(void **state) {
    (void)state;
    nx_sampler *s = make(5, plain(1.0f));
    nx_dist p, q, r;
    nx_err err;
    assert_true(nx_dist_init(&p, 5, &err) && nx_dist_init(&q, 5, &err) && nx_dist_init(&r, 5, &err));
    /* p = {0:.5, 1:.3, 2:.2}, q = {1:.6, 3:.4} -> max(0, p-q) = {0:.5, 2:.2} / .7 */
    p.n = 3;
    memcpy(p.ids, (int32_t[]){0, 1, 2}, 3 * sizeof(int32_t));
    memcpy(p.probs, (float[]){0.5f, 0.3f, 0.2f}, 3 * sizeof(float));
    q.n = 2;
    memcpy(q.ids, (int32_t[]){1, 3}, 2 * sizeof(int32_t));
    memcpy(q.probs, (float[]){0.6f, 0.4f}, 2 * sizeof(float));
    assert_true(nx_dist_residual(s, &p, &q, &r, &err));
    assert_int_equal(r.n, 2);
    assert_float_equal(nx_dist_prob(&r, 0), 0.5 / 0.7, 1e-6);
    assert_float_equal(nx_dist_prob(&r, 2), 0.2 / 0.7, 1e-6);
    /* p == q: residual is p */
    assert_true(nx_dist_residual(s, &p, &p, &r, &err));
    assert_int_equal(r.n, 3);
    assert_float_equal(nx_dist_prob(&r, 1), 0.3f, 1e-7);
    /* aliasing refused */
    assert_false(nx_dist_residual(s, &p, &q, &p, &err));
    nx_dist_free(&p);
    nx_dist_free(&q);
    nx_dist_free(&r);
    nx_sampler_free(s);
}

/* Draft from q, accept/reject against p: the output must follow p (chi-square). */
static void test_spec_accept_follows_p(void **state) {
    (void)state;
    const int V = 6;
    const float lp[6] = {1.0f, 0.5f, -0.5f, 2.0f, 0.0f, -INFINITY};
    const float lq[6] = {0.0f, 1.5f, 0.5f, 1.0f, -INFINITY, 1.0f}; /* q has mass where p has none */
    nx_sampler_params sp = plain(0.8f);
    sp.seed = 5;
    nx_sampler *s = make(V, sp);
    sp.seed = 6;
    nx_sampler *draft_s = make(V, sp);
    nx_dist p, q, scratch;
    nx_err err;
    assert_true(nx_dist_init(&p, V, &err) && nx_dist_init(&q, V, &err) && nx_dist_init(&scratch, V, &err));
    assert_true(nx_sampler_dist(s, lp, &p, &err));
    assert_true(nx_sampler_dist(draft_s, lq, &q, &err));
    const int keep[5] = {0, 1, 2, 3, 4};
    double want[6];
    ref_softmax(lp, keep, 5, 0.8, want, 6);
    long counts[6] = {0}, n_acc = 0;
    const long draws = 100000;
    for (long i = 0; i < draws; i++) {
        int32_t d = nx_sampler_draw(draft_s, &q), t;
        bool acc;
        assert_true(nx_sampler_spec_accept(s, &p, &q, d, &scratch, &t, &acc, &err));
        counts[t]++;
        n_acc += acc;
    }
    int df;
    double chi = chi_square(counts, want, 6, draws, &df);
    if (chi > chi999[df]) fail_msg("speculative chi-square %.2f > %.2f (df %d)", chi, chi999[df], df);
    /* acceptance rate = sum min(p, q) */
    double dp[6], dq[6], overlap = 0.0;
    dense_of(&p, dp, 6);
    dense_of(&q, dq, 6);
    for (int i = 0; i < 6; i++) overlap += fmin(dp[i], dq[i]);
    assert_float_equal((double)n_acc / draws, overlap, 0.01);
    /* a draft q cannot produce is a driver bug: clear error */
    assert_false(nx_sampler_spec_accept(s, &p, &q, 4, &scratch, &(int32_t){0}, &(bool){0}, &err));
    assert_non_null(strstr(err.msg, "draft token 4"));
    nx_dist_free(&p);
    nx_dist_free(&q);
    nx_dist_free(&scratch);
    nx_sampler_free(s);
    nx_sampler_free(draft_s);
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
        cmocka_unit_test(test_residual_exact),
        cmocka_unit_test(test_spec_accept_follows_p),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
