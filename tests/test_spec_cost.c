/* test_spec_cost.c - the adaptive draft length's decision (src/spec/spec_cost.h): acceptance
 * counts per draft position, the per-sequence plan and the probe spacing, against values
 * derived by hand.
 *
 * Costs in the plan cases (unless stated): a draft pass 0.1, a verify of r rows 1 + 0.1 (r - 1),
 * so N drafts for one sequence cost 0.1 N + 1 + 0.1 N = 1 + 0.2 N against 1 for plain. */
#include <math.h>
#include <string.h>

#include "testutil.h"

#include "spec/spec_cost.h"

enum { MAXR = 64 };

static double verify_tab[MAXR + 1];

static void linear_verify(double per_row) {
    for (int r = 1; r <= MAXR; r++) verify_tab[r] = 1.0 + per_row * (r - 1);
}

/* One sequence with the given per-position rates (n of them), cap n. */
static int32_t plan1(const double *rates, int32_t n, double pass, double margin, double *rate) {
    int32_t cap = n, N = -1;
    nx_spec_plan_in in = {.n_seq = 1, .cap = &cap, .rates = rates, .stride = n, .t_pass0 = pass, .t_pass = pass,
                          .verify = verify_tab, .max_rows = MAXR, .margin = margin};
    const int32_t top = nx_spec_plan(&in, &N, rate);
    assert_int_equal(top, N);
    return N;
}

static void test_acc_counts(void **state) {
    (void)state;
    nx_spec_acc a;
    memset(&a, 0, sizeof a);
    /* 3 drafts, first 1 accepted: position 1 success, position 2 failure, position 3 untouched */
    nx_spec_acc_add(&a, 3, 1, 0.5);
    assert_true(a.succ[0] == 1.0 && a.trials[0] == 1.0);
    assert_true(a.succ[1] == 0.0 && a.trials[1] == 1.0);
    assert_true(a.succ[2] == 0.0 && a.trials[2] == 0.0);
    /* all 2 accepted: positions 1, 2 decay (x0.5) then gain a success; position 3 keeps its 0 */
    nx_spec_acc_add(&a, 2, 2, 0.5);
    assert_true(a.succ[0] == 1.5 && a.trials[0] == 1.5);
    assert_true(a.succ[1] == 1.0 && a.trials[1] == 1.5);
    assert_true(a.trials[2] == 0.0);
    /* 1 draft rejected: only position 1 decays and gains a trial; position 2 keeps (1, 1.5) */
    nx_spec_acc_add(&a, 1, 0, 0.5);
    assert_true(a.succ[0] == 0.75 && a.trials[0] == 1.75);
    assert_true(a.succ[1] == 1.0 && a.trials[1] == 1.5);
    /* no drafts: nothing */
    nx_spec_acc_add(&a, 0, 0, 0.5);
    assert_true(a.succ[0] == 0.75 && a.trials[0] == 1.75);
    /* pooled: (0.75 + 1 + 2 * 0.5) / (1.75 + 1.5 + 2) = 2.75 / 5.25 */
    assert_true(fabs(nx_spec_acc_pooled(&a, 0.5, 2.0) - 2.75 / 5.25) < 1e-12);
    /* rates: (succ + w prior + opt) / (trials + w + opt), w = 1, prior 0.4, opt 1 */
    double r[3];
    nx_spec_acc_rates(&a, 0.4, 1.0, 1.0, 3, r);
    assert_true(fabs(r[0] - (0.75 + 0.4 + 1.0) / (1.75 + 2.0)) < 1e-12);
    assert_true(fabs(r[1] - (1.0 + 0.4 + 1.0) / (1.5 + 2.0)) < 1e-12);
    assert_true(fabs(r[2] - (0.0 + 0.4 + 1.0) / 2.0) < 1e-12);
}

static void test_plan_one_sequence(void **state) {
    (void)state;
    linear_verify(0.1);
    double rate;
    /* a = 0.9: N = 1: 1.9 / 1.2 = 1.583; N = 2: 2.71 / 1.4 = 1.936; N = 3: 3.439 / 1.6 = 2.149 */
    const double high[3] = {0.9, 0.9, 0.9};
    assert_int_equal(plan1(high, 3, 0.1, 1.03, &rate), 3);
    assert_true(fabs(rate - 3.439 / 1.6) < 1e-9);
    /* a = 0.3: N = 1: 1.3 / 1.2 = 1.083 (> 1.03); N = 2: 1.39 / 1.4 = 0.993 */
    const double mid[3] = {0.3, 0.3, 0.3};
    assert_int_equal(plan1(mid, 3, 0.1, 1.03, NULL), 1);
    /* per position: 0.3, 0.5, 0.5: N = 1: 1.083; N = 2: 1.45 / 1.4 = 1.036; N = 3: 1.525 / 1.6 =
     * 0.953 -> 1 (a gain that is not the product of the rates would give 2.3 / 1.6 -> 3) */
    const double falling[3] = {0.3, 0.5, 0.5};
    assert_int_equal(plan1(falling, 3, 0.1, 1.03, NULL), 1);
    /* 0.5, 1, 1: N = 1: 1.25; N = 2: 2.0 / 1.4 = 1.43; N = 3: 2.5 / 1.6 = 1.5625 -> 3 */
    const double rising[3] = {0.5, 1.0, 1.0};
    assert_int_equal(plan1(rising, 3, 0.1, 1.03, NULL), 3);
    /* nothing accepted: plain, at the rate of plain decoding */
    const double zero[3] = {0.0, 0.0, 0.0};
    assert_int_equal(plan1(zero, 3, 0.1, 1.03, &rate), 0);
    assert_true(rate == 1.0);
    /* a = 0.15: N = 1: 1.15 / 1.2 = 0.958 -> plain */
    const double low[3] = {0.15, 0.15, 0.15};
    assert_int_equal(plan1(low, 3, 0.1, 1.03, NULL), 0);
    /* the margin: draft passes 0.05, a = 0.17: N = 1: 1.17 / 1.15 = 1.0174 - drafts without a
     * margin, not with 3 % */
    const double edge[1] = {0.17};
    assert_int_equal(plan1(edge, 1, 0.05, 1.0, NULL), 1);
    assert_int_equal(plan1(edge, 1, 0.05, 1.03, NULL), 0);
    /* a verify whose extra rows are dear (q4_K-like, +45 % per row) at a = 0.5: N = 1:
     * 1.5 / 1.55 < 1.03 -> plain; the same acceptance at +5 % per row: 1.5 / 1.15 -> drafts */
    const double half[3] = {0.5, 0.5, 0.5};
    linear_verify(0.45);
    assert_int_equal(plan1(half, 3, 0.1, 1.03, NULL), 0);
    linear_verify(0.05);
    assert_true(plan1(half, 3, 0.1, 1.03, NULL) >= 1);
    /* the cap: a = 0.9 with a cap of 2 */
    linear_verify(0.1);
    int32_t cap = 2, N;
    nx_spec_plan_in in = {.n_seq = 1, .cap = &cap, .rates = high, .stride = 3, .t_pass0 = 0.1, .t_pass = 0.1,
                          .verify = verify_tab, .max_rows = MAXR, .margin = 1.03};
    assert_int_equal(nx_spec_plan(&in, &N, NULL), 2);
    assert_int_equal(N, 2);
    cap = 0;
    assert_int_equal(nx_spec_plan(&in, &N, NULL), 0);
    assert_int_equal(N, 0);
}

/* Sequences of one batch with different acceptance get different draft lengths. */
static void test_plan_per_sequence(void **state) {
    (void)state;
    linear_verify(0.1);
    /* seq 0 accepts 90 %, seq 1 nothing: {3, 0}: tokens 2 + 2.439, rows 5, cost 0.3 + 1.4 =
     * 2.611 per unit; the same N for both ({3, 3}: 8 rows, cost 2.0) would give 2.22, plain 2 / 1.1 */
    const double rates[2 * 3] = {0.9, 0.9, 0.9, 0.0, 0.0, 0.0};
    int32_t cap[2] = {3, 3}, N[2];
    double rate;
    nx_spec_plan_in in = {.n_seq = 2, .cap = cap, .rates = rates, .stride = 3, .t_pass0 = 0.1, .t_pass = 0.1,
                          .verify = verify_tab, .max_rows = MAXR, .margin = 1.03};
    assert_int_equal(nx_spec_plan(&in, N, &rate), 3);
    assert_int_equal(N[0], 3);
    assert_int_equal(N[1], 0);
    assert_true(fabs(rate - 4.439 / 1.7) < 1e-9);
    /* mirrored */
    const double rates2[2 * 3] = {0.0, 0.0, 0.0, 0.9, 0.9, 0.9};
    in.rates = rates2;
    assert_int_equal(nx_spec_plan(&in, N, NULL), 3);
    assert_int_equal(N[0], 0);
    assert_int_equal(N[1], 3);
    /* 0.9 and 0.5 (a draft pass shared by both): seq 1's first draft gains 0.5 for one verify row
     * (+0.1): {3, 1}: 2 + 2.439 + 0.5 = 4.939 over 0.3 + 1.5 = 2.744; {3, 2}: 5.189 / 1.9 = 2.731;
     * {3, 0}: 2.611; {3, 3}: 5.314 / 2.0 = 2.657 */
    const double rates3[2 * 3] = {0.9, 0.9, 0.9, 0.5, 0.5, 0.5};
    in.rates = rates3;
    assert_int_equal(nx_spec_plan(&in, N, NULL), 3);
    assert_int_equal(N[0], 3);
    assert_int_equal(N[1], 1);
    /* caps per sequence: seq 0 may take only 1 */
    cap[0] = 1;
    in.rates = rates;
    assert_int_equal(nx_spec_plan(&in, N, NULL), 1);
    assert_int_equal(N[0], 1);
    assert_int_equal(N[1], 0);
    /* four sequences, none accepts: all plain */
    const double none[4 * 2] = {0};
    int32_t cap4[4] = {2, 2, 2, 2}, N4[4];
    nx_spec_plan_in in4 = {.n_seq = 4, .cap = cap4, .rates = none, .stride = 2, .t_pass0 = 0.1, .t_pass = 0.1,
                           .verify = verify_tab, .max_rows = MAXR, .margin = 1.03};
    assert_int_equal(nx_spec_plan(&in4, N4, NULL), 0);
    for (int i = 0; i < 4; i++) assert_int_equal(N4[i], 0);
}

/* First run length at which a probe is due (searching 1 .. 5000). */
static int32_t first_due(int32_t interval, double extra, double plain, double budget, int32_t gap_max) {
    for (int32_t run = 1; run <= 5000; run++)
        if (nx_spec_probe_due(run, interval, extra, plain, budget, gap_max)) return run;
    return -1;
}

/* The probe spacing: the caller's doubling interval, stretched to ceil(extra / (budget plain))
 * plain steps so that probes cost at most `budget` of the plain time, capped at gap_max. */
static void test_probe_spacing(void **state) {
    (void)state;
    /* an accepted probe (interval 1): the next follows at once, whatever it costs */
    assert_int_equal(first_due(1, 5.0, 1.0, 0.01, 1024), 1);
    /* cheap probes: the interval alone (0.02 / (0.01 * 1) = 2 < 8) */
    assert_int_equal(first_due(8, 0.02, 1.0, 0.01, 1024), 8);
    /* a probe costing 0.35 plain steps more: 35 steps apart (1 % of the plain time) */
    assert_int_equal(first_due(4, 0.35, 1.0, 0.01, 1024), 35);
    assert_int_equal(first_due(4, 0.0035, 0.01, 0.01, 1024), 35); /* the same in other units */
    /* the MoE case: an MTP pass writing 16 backlog rows through most experts, 1.6 plain steps
     * (plain step 0.045 s, probe 0.072 s more): 160 steps apart */
    assert_int_equal(first_due(4, 0.072, 0.045, 0.01, 1024), 160);
    /* a 2 % budget halves the spacing; the doubled interval wins when it is longer */
    assert_int_equal(first_due(4, 0.35, 1.0, 0.02, 1024), 18);
    assert_int_equal(first_due(64, 0.35, 1.0, 0.01, 1024), 64);
    /* capped at gap_max */
    assert_int_equal(first_due(4, 100.0, 1.0, 0.01, 1024), 1024);
    assert_int_equal(first_due(4, 1e300, 1e-300, 0.01, 300), 300);
    /* nothing measured (extra or plain 0): the interval alone */
    assert_int_equal(first_due(4, 0.0, 1.0, 0.01, 1024), 4);
    assert_int_equal(first_due(16, 0.5, 0.0, 0.01, 1024), 16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_acc_counts),
        cmocka_unit_test(test_plan_one_sequence),
        cmocka_unit_test(test_plan_per_sequence),
        cmocka_unit_test(test_probe_spacing),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
