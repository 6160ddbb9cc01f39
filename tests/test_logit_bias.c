/* test_logit_bias.c - the logit bias of the sampling chain (nextn_sampler_params.logit_bias).
 *  - hand-made rows: the distribution equals the softmax of (logits + bias) computed here in
 *    double (bans absent, duplicates adding up), greedy takes the biased argmax, top-k keeps the
 *    biased best, the bias comes before the penalties (a repeat penalty divides the biased
 *    logit: (l + b) / r, not l / r + b), log-probabilities see it, the caller's array is copied;
 *  - bad entries: token outside the vocabulary, NaN / +inf bias, a bias that bans every token
 *    with a finite logit; nx_sampler_all_banned on a small row;
 *  - the demo model: a bias that changes plain greedy output, then speculative decoding with the
 *    same bias gives plain's tokens (the draft head sees the bias too, so drafts are accepted);
 *    every token of the draft vocabulary banned (the drafter has nothing: it stops drafting
 *    instead of failing); seeded sampling never emits a banned token, plain or speculative. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn.h"
#include "sample/sample.h"
#include "testutil.h"

static nextn_model *demo;
static int32_t V;

static int setup(void **state) {
    (void)state;
    demo = tu_demo_model(false);
    if (!demo) return -1;
    nextn_model_info mi;
    nextn_model_get_info(demo, &mi);
    V = mi.n_vocab;
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nextn_model_free(demo);
    return 0;
}

static float *random_row(uint64_t seed) {
    float *row = malloc((size_t)V * sizeof *row);
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int32_t i = 0; i < V; i++) row[i] = tu_rng_normal(&r);
    return row;
}

static int32_t argmax_d(const double *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void test_dist(void **state) {
    (void)state;
    float *row = random_row(11);
    row[5] = 9.0f;  /* the unbiased argmax, banned below */
    row[6] = 8.5f;
    row[17] = 8.9f; /* second best: lowered by -1 (twice -0.5) */
    row[40] = 1.0f; /* raised by +8.0 to the top */
    nextn_logit_bias lb[] = {{5, -INFINITY}, {17, -0.5f}, {40, 8.0f}, {17, -0.5f}};
    double *want = malloc((size_t)V * sizeof *want);
    for (int32_t i = 0; i < V; i++) want[i] = row[i];
    want[5] = -INFINITY;
    want[17] -= 1.0;
    want[40] += 8.0;
    nextn_error err;
    nextn_sampler_params p = nextn_sampler_default_params();
    p.temp = 1.0f;
    p.top_k = 0;
    p.top_p = 1.0f;
    p.min_p = 0.0f;
    p.logit_bias = lb;
    p.n_logit_bias = 4;
    nextn_sampler *s;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    lb[2].bias = -100.0f; /* the sampler keeps its own copy */
    int32_t *ids = malloc((size_t)V * sizeof *ids), n;
    float *probs = malloc((size_t)V * sizeof *probs);
    assert_true(nextn_sampler_dist(s, row, ids, probs, V, &n, &err));
    assert_int_equal(n, V - 1); /* every finite token but the banned one */
    double mx = want[40], sum = 0;
    for (int32_t i = 0; i < V; i++) sum += exp(want[i] - mx);
    for (int32_t k = 0; k < n; k++) {
        assert_int_not_equal(ids[k], 5);
        assert_true(fabs(probs[k] - exp(want[ids[k]] - mx) / sum) < 1e-6);
    }
    /* log-probabilities see the bias */
    nextn_logprob lp;
    assert_true(nextn_sampler_logprobs(s, row, 5, 3, &lp, &err));
    assert_true(isinf(lp.logprob) && lp.logprob < 0);
    assert_int_equal(lp.top_ids[0], 40);
    assert_int_equal(lp.top_ids[1], 6);
    assert_int_equal(lp.top_ids[2], 17);
    assert_true(fabs(lp.top_logprobs[2] - (want[17] - mx - log(sum))) < 1e-5);
    nextn_sampler_free(s);

    /* greedy and top-k take the biased order */
    lb[2].bias = 8.0f;
    p.temp = 0.0f;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    int32_t tok;
    assert_true(nextn_sampler_sample(s, row, &tok, &err));
    assert_int_equal(tok, argmax_d(want, V));
    assert_int_equal(tok, 40);
    nextn_sampler_free(s);
    p.n_logit_bias = 3; /* 17 only once: 8.4 */
    p.temp = 0.7f;
    p.top_k = 2;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    assert_true(nextn_sampler_dist(s, row, ids, probs, V, &n, &err));
    assert_int_equal(n, 2);
    assert_int_equal(ids[0], 40);
    assert_int_equal(ids[1], 6);
    nextn_sampler_free(s);
    /* only the ban: greedy goes to the runner-up */
    p.n_logit_bias = 1;
    p.temp = 0.0f;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    assert_true(nextn_sampler_sample(s, row, &tok, &err));
    assert_int_equal(tok, 17);
    nextn_sampler_free(s);
    free(ids);
    free(probs);
    free(want);
    free(row);
}

/* The bias comes first: a repeat penalty r divides the biased logit, (l + b) / r. */
static void test_before_penalties(void **state) {
    (void)state;
    float *row = random_row(12);
    row[3] = 2.0f;
    row[4] = -1.0f;
    nextn_logit_bias lb[] = {{3, 2.0f}, {4, -1.0f}};
    nextn_sampler_params p = nextn_sampler_default_params();
    p.penalty_repeat = 2.0f;
    p.penalty_last_n = 8;
    p.logit_bias = lb;
    p.n_logit_bias = 2;
    nextn_sampler *s, *ref;
    nextn_error err;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    nextn_sampler_params p0 = nextn_sampler_default_params();
    assert_true(nextn_sampler_create(&ref, demo, &p0, &err));
    assert_true(nextn_sampler_accept(s, 3, &err));
    assert_true(nextn_sampler_accept(s, 4, &err));
    nextn_logprob a, b;
    assert_true(nextn_sampler_logprobs(s, row, 3, 0, &a, &err));
    /* the same row processed by hand, read back through an unbiased, unpenalised sampler */
    float *hand = malloc((size_t)V * sizeof *hand);
    memcpy(hand, row, (size_t)V * sizeof *hand);
    hand[3] = (2.0f + 2.0f) / 2.0f; /* positive: divided */
    hand[4] = (-1.0f - 1.0f) * 2.0f; /* non-positive: multiplied */
    assert_true(nextn_sampler_logprobs(ref, hand, 3, 0, &b, &err));
    assert_true(a.logprob == b.logprob);
    assert_true(nextn_sampler_logprobs(s, row, 4, 0, &a, &err));
    assert_true(nextn_sampler_logprobs(ref, hand, 4, 0, &b, &err));
    assert_true(a.logprob == b.logprob);
    /* penalty first would give 2 / 2 + 2 = 3 for token 3: not what the chain does */
    hand[3] = 3.0f;
    assert_true(nextn_sampler_logprobs(s, row, 3, 0, &a, &err));
    assert_true(nextn_sampler_logprobs(ref, hand, 3, 0, &b, &err));
    assert_true(a.logprob != b.logprob);
    nextn_sampler_free(s);
    nextn_sampler_free(ref);
    free(hand);
    free(row);
}

static void test_errors(void **state) {
    (void)state;
    nextn_sampler_params p = nextn_sampler_default_params();
    nextn_sampler *s = NULL;
    nextn_error err;
    nextn_logit_bias lb[] = {{V, 1.0f}};
    p.logit_bias = lb;
    p.n_logit_bias = 1;
    assert_false(nextn_sampler_create(&s, demo, &p, &err));
    assert_null(s);
    assert_non_null(strstr(err.msg, "logit_bias[0]: token 4096 is outside the vocabulary"));
    lb[0] = (nextn_logit_bias){-1, 1.0f};
    assert_false(nextn_sampler_create(&s, demo, &p, &err));
    assert_non_null(strstr(err.msg, "token -1"));
    lb[0] = (nextn_logit_bias){3, NAN};
    assert_false(nextn_sampler_create(&s, demo, &p, &err));
    assert_non_null(strstr(err.msg, "logit_bias[0] (token 3)"));
    lb[0] = (nextn_logit_bias){3, INFINITY};
    assert_false(nextn_sampler_create(&s, demo, &p, &err));
    assert_non_null(strstr(err.msg, "finite or -inf"));
    p.logit_bias = NULL;
    assert_false(nextn_sampler_create(&s, demo, &p, &err));
    assert_non_null(strstr(err.msg, "NULL pointer"));

    /* a row with two finite tokens, both banned: a clear error, not a crash */
    float *row = malloc((size_t)V * sizeof *row);
    for (int32_t i = 0; i < V; i++) row[i] = -INFINITY;
    row[8] = 1.0f;
    row[9] = 2.0f;
    nextn_logit_bias ban[] = {{8, -INFINITY}, {9, -INFINITY}, {10, -INFINITY}};
    p.logit_bias = ban;
    p.n_logit_bias = 3;
    for (int greedy = 0; greedy < 2; greedy++) {
        p.temp = greedy ? 0.0f : 1.0f;
        assert_true(nextn_sampler_create(&s, demo, &p, &err));
        int32_t tok;
        assert_false(nextn_sampler_sample(s, row, &tok, &err));
        assert_non_null(strstr(err.msg, "logit_bias bans every token that has a finite logit"));
        nextn_logprob lp;
        assert_false(nextn_sampler_logprobs(s, row, 8, 1, &lp, &err));
        row[11] = 0.0f; /* one left */
        assert_true(nextn_sampler_sample(s, row, &tok, &err));
        assert_int_equal(tok, 11);
        row[11] = -INFINITY;
        nextn_sampler_free(s);
    }
    /* a bias overflowing a logit to +inf */
    row[9] = 3.0e38f;
    nextn_logit_bias big[] = {{9, 3.0e38f}};
    p.logit_bias = big;
    p.n_logit_bias = 1;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    int32_t tok;
    assert_false(nextn_sampler_sample(s, row, &tok, &err));
    assert_non_null(strstr(err.msg, "+inf"));
    nextn_sampler_free(s);
    free(row);
}

/* nx_sampler_all_banned on a 6-token vocabulary. */
static void test_all_banned(void **state) {
    (void)state;
    nx_logit_bias lb[] = {{1, -INFINITY}, {2, 3.0f}, {4, -INFINITY}};
    nx_sampler_params p = nx_sampler_default_params();
    p.logit_bias = lb;
    p.n_logit_bias = 3;
    nx_sampler *s;
    nx_err err;
    assert_true(nx_sampler_create(&s, 6, &p, &err));
    float row[6] = {-INFINITY, 1.0f, -INFINITY, -INFINITY, 2.0f, -INFINITY};
    assert_true(nx_sampler_all_banned(s, row));
    row[2] = 0.0f; /* biased, not banned */
    assert_false(nx_sampler_all_banned(s, row));
    row[2] = -INFINITY;
    row[0] = 0.5f;
    assert_false(nx_sampler_all_banned(s, row));
    nx_sampler_free(s);
    p.n_logit_bias = 0;
    assert_true(nx_sampler_create(&s, 6, &p, &err));
    assert_false(nx_sampler_all_banned(s, row));
    nx_sampler_free(s);
}

/* ---- the demo model: plain and speculative ---------------------------------------------------- */

enum { NCTX = 256, GEN = 40 };

/* Plain decoding: GEN tokens after the prompt (prompt tokens in the penalty history, as the
 * generator puts them). */
static void plain(const int32_t *prompt, int32_t np, const nextn_sampler_params *smp, int32_t *out) {
    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = NCTX;
    cp.n_threads = 1;
    nextn_context *c;
    nextn_sampler *s;
    nextn_error err;
    assert_true(nextn_context_create(&c, demo, &cp, &err));
    assert_true(nextn_sampler_create(&s, demo, smp, &err));
    int32_t pos[NCTX];
    for (int32_t i = 0; i < np; i++) {
        pos[i] = i;
        assert_true(nextn_sampler_accept(s, prompt[i], &err));
    }
    nextn_batch b = {np, prompt, pos, NULL, NULL};
    assert_true(nextn_decode(c, &b, &err));
    for (int32_t g = 0, row = np - 1; g < GEN; g++, row = 0) {
        assert_true(nextn_sampler_sample(s, nextn_get_logits(c, row), &out[g], &err));
        assert_true(nextn_sampler_accept(s, out[g], &err));
        int32_t p = np + g;
        nextn_batch b1 = {1, &out[g], &p, NULL, NULL};
        assert_true(nextn_decode(c, &b1, &err));
    }
    nextn_sampler_free(s);
    nextn_context_free(c);
}

/* Speculative decoding (fixed draft length 3; draft_vocab: the head's vocabulary, 0 = the
 * automatic one) of GEN tokens on sequence 1 of 2; returns the drafts accepted. */
static int64_t spec(const int32_t *prompt, int32_t np, const nextn_sampler_params *smp, int32_t draft_vocab,
                    int32_t *out) {
    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = NCTX;
    cp.n_seq = 2;
    cp.n_threads = 1;
    nextn_spec_params sp = nextn_spec_default_params();
    sp.draft_max = 3;
    sp.adaptive = false;
    sp.draft_vocab = draft_vocab;
    nextn_spec *s;
    nextn_error err;
    assert_true(nextn_spec_create(&s, demo, &cp, &sp, NULL, &err));
    assert_true(nextn_spec_has_mtp(s));
    int32_t n = 0;
    if (!nextn_spec_prefill_seq(s, 1, prompt, np, smp, &out[n], &err)) fail_msg("prefill: %s", err.msg);
    n++;
    const int32_t stride = nextn_spec_max_step_tokens(s);
    int32_t step[2 * 8], n_out[2], max_out[2] = {0, 0};
    while (n < GEN) {
        max_out[1] = GEN - n;
        if (!nextn_spec_step_seqs(s, max_out, step, n_out, &err)) fail_msg("step: %s", err.msg);
        for (int32_t k = 0; k < n_out[1]; k++) out[n++] = step[stride + k];
    }
    nextn_spec_stats st;
    nextn_spec_get_stats(s, &st);
    nextn_spec_free(s);
    return st.accepted;
}

static bool contains(const int32_t *t, int32_t n, int32_t tok) {
    for (int32_t i = 0; i < n; i++)
        if (t[i] == tok) return true;
    return false;
}

static void test_spec_greedy(void **state) {
    (void)state;
    int32_t prompt[64];
    const int32_t np = tu_demo_prompt(prompt, 40, 1);
    nextn_sampler_params smp = nextn_sampler_default_params();
    smp.temp = 0.0f;
    int32_t base[GEN], want[GEN], got[GEN];
    plain(prompt, np, &smp, base);
    /* ban the most frequent token of the unbiased output and raise another one */
    int32_t ban = base[0], best = 0;
    for (int32_t i = 0; i < GEN; i++) {
        int32_t c = 0;
        for (int32_t j = 0; j < GEN; j++) c += base[j] == base[i];
        if (c > best) best = c, ban = base[i];
    }
    nextn_logit_bias lb[] = {{ban, -INFINITY}, {base[GEN / 2], 1.5f}};
    smp.logit_bias = lb;
    smp.n_logit_bias = 2;
    plain(prompt, np, &smp, want);
    assert_true(memcmp(base, want, sizeof base) != 0); /* the bias changes the output */
    assert_false(contains(want, GEN, ban));
    const int64_t acc = spec(prompt, np, &smp, 0, got);
    assert_memory_equal(got, want, sizeof want);
    assert_true(acc > GEN / 4); /* drafts are accepted: the draft head sees the bias */

    /* every token of a 64-token draft vocabulary (ids 0..63) banned: no draft at all */
    nextn_logit_bias all[64];
    for (int32_t i = 0; i < 64; i++) all[i] = (nextn_logit_bias){i, -INFINITY};
    smp.logit_bias = all;
    smp.n_logit_bias = 64;
    plain(prompt, np, &smp, want);
    assert_int_equal(spec(prompt, np, &smp, 64, got), 0);
    assert_memory_equal(got, want, sizeof want);
}

static void test_sampled(void **state) {
    (void)state;
    int32_t prompt[64];
    const int32_t np = tu_demo_prompt(prompt, 40, 1);
    nextn_sampler_params smp = nextn_sampler_default_params();
    smp.temp = 1.0f;
    smp.seed = 9;
    int32_t base[GEN], got[GEN];
    plain(prompt, np, &smp, base);
    nextn_logit_bias lb[8];
    int32_t n = 0;
    for (int32_t i = 0; i < GEN && n < 8; i++)
        if (!contains(base, i, base[i])) lb[n++] = (nextn_logit_bias){base[i], -INFINITY};
    smp.logit_bias = lb;
    smp.n_logit_bias = n;
    for (uint64_t seed = 1; seed <= 4; seed++) {
        smp.seed = seed;
        plain(prompt, np, &smp, got);
        for (int32_t k = 0; k < n; k++) assert_false(contains(got, GEN, lb[k].token));
        spec(prompt, np, &smp, 0, got);
        for (int32_t k = 0; k < n; k++) assert_false(contains(got, GEN, lb[k].token));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist),
        cmocka_unit_test(test_before_penalties),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_all_banned),
        cmocka_unit_test(test_spec_greedy),
        cmocka_unit_test(test_sampled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
