/* test_logprobs.c - log-probabilities for reporting (nextn_sampler_logprobs, nextn_spec_*_logprobs)
 * through the public API.
 *  - a hand-made row: the log-softmax at temperature 1 of the penalised logits, computed here in
 *    double from the documented penalty rule, with the top entries in order (ties to the lower
 *    id), -inf tokens, bad arguments; the sampler's state and RNG are unchanged by the call;
 *  - the demo model: a speculative generator (fixed draft length, penalties on) reports for every
 *    emitted token exactly (bit for bit) what plain decoding with the same sampler reports for
 *    the same prefix - greedy, and sampled (plain teacher-forced with the emitted tokens). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn.h"
#include "testutil.h"

static nextn_model *demo;

static int setup(void **state) {
    (void)state;
    demo = tu_demo_model(false);
    return demo ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nextn_model_free(demo);
    return 0;
}

static void test_row(void **state) {
    (void)state;
    nextn_model_info mi;
    nextn_model_get_info(demo, &mi);
    const int32_t V = mi.n_vocab;
    float *row = malloc((size_t)V * sizeof *row);
    double *pen = malloc((size_t)V * sizeof *pen);
    tu_rng r;
    tu_rng_seed(&r, 5);
    for (int32_t i = 0; i < V; i++) row[i] = 3.0f * tu_rng_normal(&r);
    row[7] = row[9] = 30.0f; /* a tie at the top: 7 before 9 */
    row[11] = -INFINITY;
    row[12] = -2.5f;         /* negative logit, penalised by multiplication */
    nextn_sampler_params p = nextn_sampler_default_params();
    p.penalty_repeat = 1.25f;
    p.penalty_freq = 0.5f;
    p.penalty_present = 0.25f;
    p.penalty_last_n = 4;
    nextn_sampler *s, *twin;
    nextn_error err;
    assert_true(nextn_sampler_create(&s, demo, &p, &err));
    assert_true(nextn_sampler_create(&twin, demo, &p, &err));
    /* history 9, 12, 3, 9, 9: the window (last 4) holds 12, 3, 9, 9 */
    const int32_t hist[] = {9, 12, 3, 9, 9};
    for (int i = 0; i < 5; i++) {
        assert_true(nextn_sampler_accept(s, hist[i], &err));
        assert_true(nextn_sampler_accept(twin, hist[i], &err));
    }
    for (int32_t i = 0; i < V; i++) pen[i] = row[i];
    const int32_t win_tok[] = {12, 3, 9}, win_cnt[] = {1, 1, 2};
    for (int k = 0; k < 3; k++) {
        double l = pen[win_tok[k]];
        l = l <= 0 ? l * 1.25 : l / 1.25;
        pen[win_tok[k]] = l - win_cnt[k] * 0.5 - 0.25;
    }
    double mx = -INFINITY, sum = 0;
    for (int32_t i = 0; i < V; i++) mx = fmax(mx, pen[i]);
    for (int32_t i = 0; i < V; i++) sum += exp(pen[i] - mx);
    const double lz = mx + log(sum);
    nextn_logprob lp;
    for (int32_t tok = 0; tok < 20; tok++) {
        assert_true(nextn_sampler_logprobs(s, row, tok, 5, &lp, &err));
        assert_int_equal(lp.token, tok);
        if (tok == 11) {
            assert_true(isinf(lp.logprob) && lp.logprob < 0);
        } else {
            assert_true(fabs(lp.logprob - (pen[tok] - lz)) < 1e-5);
        }
    }
    /* the top 5 by hand */
    int32_t want[5];
    for (int k = 0; k < 5; k++) {
        int32_t b = -1;
        for (int32_t i = 0; i < V; i++) {
            bool used = false;
            for (int j = 0; j < k; j++) used = used || want[j] == i;
            if (!used && (b < 0 || pen[i] > pen[b])) b = i;
        }
        want[k] = b;
    }
    assert_int_equal(lp.n_top, 5);
    assert_int_equal(want[0], 7); /* 9 was penalised below 7 */
    for (int k = 0; k < 5; k++) {
        assert_int_equal(lp.top_ids[k], want[k]);
        assert_true(fabs(lp.top_logprobs[k] - (pen[want[k]] - lz)) < 1e-5);
    }
    /* without penalties the tie orders 7 before 9 */
    nextn_sampler *plain;
    nextn_sampler_params p0 = nextn_sampler_default_params();
    assert_true(nextn_sampler_create(&plain, demo, &p0, &err));
    assert_true(nextn_sampler_logprobs(plain, row, 0, 2, &lp, &err));
    assert_int_equal(lp.top_ids[0], 7);
    assert_int_equal(lp.top_ids[1], 9);
    assert_true(lp.top_logprobs[0] == lp.top_logprobs[1]);
    /* the call changed nothing: s and its twin sample the same tokens */
    p.temp = 1.0f;
    for (int i = 0; i < 20; i++) {
        int32_t a, b;
        assert_true(nextn_sampler_sample(s, row, &a, &err));
        assert_true(nextn_sampler_sample(twin, row, &b, &err));
        assert_int_equal(a, b);
    }
    /* bad arguments */
    assert_false(nextn_sampler_logprobs(s, row, V, 0, &lp, &err));
    assert_non_null(strstr(err.msg, "out of range"));
    assert_false(nextn_sampler_logprobs(s, row, 0, 21, &lp, &err));
    assert_non_null(strstr(err.msg, "top entries"));
    row[3] = NAN;
    assert_false(nextn_sampler_logprobs(s, row, 0, 1, &lp, &err));
    assert_non_null(strstr(err.msg, "NaN"));
    nextn_sampler_free(s);
    nextn_sampler_free(twin);
    nextn_sampler_free(plain);
    free(row);
    free(pen);
}

enum { NCTX = 256, GEN = 48, TOP = 4 };

/* Plain decoding teacher-forced with toks[0..n): the logprobs of each token under smp (prompt
 * tokens in the penalty history, as the generator puts them). */
static void plain_logprobs(const int32_t *prompt, int32_t np, const int32_t *toks, int32_t n,
                           const nextn_sampler_params *smp, nextn_logprob *out) {
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
    int32_t row = np - 1;
    for (int32_t g = 0; g < n; g++) {
        assert_true(nextn_sampler_logprobs(s, nextn_get_logits(c, row), toks[g], TOP, &out[g], &err));
        assert_true(nextn_sampler_accept(s, toks[g], &err));
        int32_t p = np + g;
        nextn_batch b1 = {1, &toks[g], &p, NULL, NULL};
        assert_true(nextn_decode(c, &b1, &err));
        row = 0;
    }
    nextn_sampler_free(s);
    nextn_context_free(c);
}

static void spec_vs_plain(const nextn_sampler_params *smp) {
    int32_t prompt[64];
    const int32_t np = tu_demo_prompt(prompt, 40, 1);
    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = NCTX;
    cp.n_seq = 2;
    cp.n_threads = 1;
    nextn_spec_params sp = nextn_spec_default_params();
    sp.draft_max = 3;
    sp.adaptive = false;
    nextn_spec *s;
    nextn_error err;
    assert_true(nextn_spec_create(&s, demo, &cp, &sp, smp, &err));
    assert_true(nextn_spec_has_mtp(s));
    assert_true(nextn_spec_set_logprobs(s, 1, TOP, &err));
    int32_t toks[GEN + 8], n = 0, first, multi = 0;
    static nextn_logprob got[GEN + 8], want[GEN + 8];
    const nextn_logprob *lp;
    assert_true(nextn_spec_prefill_seq(s, 1, prompt, np, smp, &first, &err));
    assert_int_equal(nextn_spec_last_logprobs(s, 1, &lp), 1);
    assert_int_equal(lp[0].token, first);
    got[n] = lp[0];
    toks[n++] = first;
    const int32_t stride = nextn_spec_max_step_tokens(s);
    int32_t out[2 * 4], n_out[2], max_out[2] = {1, GEN};
    while (n < GEN) {
        max_out[1] = GEN - n;
        assert_true(nextn_spec_step_seqs(s, max_out, out, n_out, &err));
        assert_int_equal(nextn_spec_last_logprobs(s, 1, &lp), n_out[1]);
        multi += n_out[1] > 1;
        for (int32_t k = 0; k < n_out[1]; k++) {
            assert_int_equal(lp[k].token, out[stride + k]);
            got[n] = lp[k];
            toks[n++] = out[stride + k];
        }
    }
    assert_true(multi > 3); /* drafts were accepted: tokens came from verify rows past the first */
    /* sequence 0 did not ask */
    assert_int_equal(nextn_spec_last_logprobs(s, 0, &lp), 0);
    plain_logprobs(prompt, np, toks, n, smp, want);
    for (int32_t g = 0; g < n; g++) {
        if (memcmp(&got[g], &want[g], sizeof got[g]) != 0)
            fail_msg("token %d (%d): spec logprob %.9g top0 %d, plain %.9g top0 %d", g, toks[g], got[g].logprob,
                     got[g].top_ids[0], want[g].logprob, want[g].top_ids[0]);
    }
    assert_true(nextn_spec_set_logprobs(s, 1, -1, &err));
    assert_false(nextn_spec_set_logprobs(s, 1, 21, &err));
    nextn_spec_free(s);
}

static void test_spec_greedy(void **state) {
    (void)state;
    nextn_sampler_params smp = nextn_sampler_default_params();
    smp.temp = 0.0f;
    smp.penalty_repeat = 1.3f;
    spec_vs_plain(&smp);
}

static void test_spec_sampled(void **state) {
    (void)state;
    nextn_sampler_params smp = nextn_sampler_default_params();
    smp.temp = 0.9f;
    smp.seed = 3;
    smp.penalty_present = 0.4f;
    spec_vs_plain(&smp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_row),
        cmocka_unit_test(test_spec_greedy),
        cmocka_unit_test(test_spec_sampled),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
