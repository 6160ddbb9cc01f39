/* test_rewind.c - rolling back after a speculative verify batch, and rewinding further through a
 * checkpoint (src/seq_ckpt.c).
 *   (b) for every r <= R: verify [last, d1..dR] + rollback r  ==  decoding only the kept tokens
 *       (recurrent state of every GDN layer, attention KV length, and the logits of the next
 *       token), within 2e-5 absolute (batched vs single-row matmuls may differ in the last bits);
 *   rewinding beyond R restores a checkpoint and re-decodes, and says so. 
 * Every test runs on `tiny` (qwen35) and on `tiny-moe` (qwen35moe).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/forward.h"
#include "forward/seq_ckpt.h"

#define TOL 2e-5

typedef tu_tiny fixture;

static int setup(void **state) {
    *state = tu_tiny_new("tiny", 21, false, 1);
    return 0;
}

static int setup_moe(void **state) {
    *state = tu_tiny_new("tiny-moe", 21, false, 1);
    return 0;
}

static nx_ctx *make_ctx(fixture *f, int n_snap) { return tu_tiny_ctx(f, 64, 1, n_snap, NX_KV_F32); }
static void decode(nx_ctx *c, const int32_t *tokens, int n) { tu_decode(c, 0, tokens, n); }
static double state_diff(const nx_ctx *a, const nx_ctx *b) { return tu_state_diff(a, 0, b, 0); }

/* next-token logits after feeding `tok` to both contexts */
static double next_logits_diff(fixture *f, nx_ctx *a, nx_ctx *b, int32_t tok) {
    decode(a, &tok, 1);
    decode(b, &tok, 1);
    return tu_max_abs_diff(nx_ctx_logits(a, 0), nx_ctx_logits(b, 0), f->model.hp.n_vocab);
}

static void test_verify_rollback_every_r(void **state) {
    fixture *f = *state;
    enum { R = 6, P = 9 };
    int32_t prompt[P], verify[1 + R];
    for (int i = 0; i < P; i++) prompt[i] = (int32_t)(i * 37 % 500);
    for (int i = 0; i <= R; i++) verify[i] = (int32_t)(100 + i * 13);
    double worst = 0;
    for (int r = 0; r <= R; r++) {
        nx_ctx *a = make_ctx(f, R), *b = make_ctx(f, R);
        decode(a, prompt, P);
        decode(b, prompt, P);
        decode(a, verify, 1 + R);          /* [last, d1..dR] in one batch */
        nx_err err;
        assert_int_equal(nx_ctx_seq_max_rollback(a, 0), R);
        if (!nx_ctx_seq_rollback(a, 0, r, &err)) fail_msg("r=%d: %s", r, err.msg);
        decode(b, verify, 1 + R - r);      /* only the kept tokens */
        assert_int_equal(nx_ctx_n_past(a, 0), nx_ctx_n_past(b, 0));
        worst = fmax(worst, state_diff(a, b));
        worst = fmax(worst, next_logits_diff(f, a, b, 77));
        worst = fmax(worst, state_diff(a, b));
        nx_ctx_free(a);
        nx_ctx_free(b);
    }
    printf("verify + rollback r (0..%d) vs kept tokens only: max abs diff %.3g\n", R, worst);
    assert_true(worst < TOL);
}

/* Two successive partial rollbacks add up; beyond the slots it is an error and nothing changes. */
static void test_rollback_limits(void **state) {
    fixture *f = *state;
    nx_ctx *a = make_ctx(f, 3);
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    decode(a, t, 8);
    nx_err err;
    assert_false(nx_ctx_seq_rollback(a, 0, 4, &err));
    assert_non_null(strstr(err.msg, "snapshots cover 3"));
    assert_int_equal(nx_ctx_n_past(a, 0), 8);
    assert_true(nx_ctx_seq_rollback(a, 0, 1, &err));
    assert_true(nx_ctx_seq_rollback(a, 0, 2, &err));
    assert_false(nx_ctx_seq_rollback(a, 0, 1, &err));
    assert_int_equal(nx_ctx_n_past(a, 0), 5);
    nx_ctx_free(a);
}

static void test_rewind_checkpoint(void **state) {
    fixture *f = *state;
    enum { N = 40 };
    int32_t toks[N];
    for (int i = 0; i < N; i++) toks[i] = (int32_t)((i * 91 + 7) % 509);
    nx_ctx *a = make_ctx(f, 2);
    nx_err err;
    nx_seq_ckpt ck = {0};
    decode(a, toks, 12);
    if (!nx_seq_ckpt_save(&ck, a, 0, &err)) fail_msg("%s", err.msg);
    assert_int_equal(ck.pos, 12);
    for (int p = 12; p < 36; p += 4) decode(a, toks + p, 4);
    nx_rewind_kind how;
    /* 1 token: a snapshot slot, O(1) */
    assert_true(nx_ctx_seq_rewind(a, 0, 35, &ck, toks, &how, &err));
    assert_int_equal(how, NX_REWIND_SNAPSHOT);
    /* 15 more: beyond the slots -> checkpoint + re-decode of 12..19 */
    if (!nx_ctx_seq_rewind(a, 0, 20, &ck, toks, &how, &err)) fail_msg("%s", err.msg);
    assert_int_equal(how, NX_REWIND_REDECODE);
    assert_string_equal(nx_rewind_kind_name(how), "checkpoint+redecode");
    assert_int_equal(nx_ctx_n_past(a, 0), 20);
    nx_ctx *b = make_ctx(f, 2);
    decode(b, toks, 20);
    double d = state_diff(a, b);
    d = fmax(d, next_logits_diff(f, a, b, toks[20]));
    printf("rewind through checkpoint vs straight decode: max abs diff %.3g\n", d);
    assert_true(d < TOL);
    /* before the checkpoint: error, nothing changes */
    int32_t before = nx_ctx_n_past(a, 0);
    assert_false(nx_ctx_seq_rewind(a, 0, 5, &ck, toks, &how, &err));
    assert_non_null(strstr(err.msg, "cannot restore position 5"));
    assert_int_equal(nx_ctx_n_past(a, 0), before);
    /* no checkpoint at all: error naming the limit */
    assert_false(nx_ctx_seq_rewind(a, 0, 13, NULL, toks, &how, &err));
    assert_non_null(strstr(err.msg, "no checkpoint"));
    /* to 0: clear */
    assert_true(nx_ctx_seq_rewind(a, 0, 0, NULL, NULL, &how, &err));
    assert_int_equal(how, NX_REWIND_CLEAR);
    assert_int_equal(nx_ctx_n_past(a, 0), 0);
    /* forward of nothing */
    assert_true(nx_ctx_seq_rewind(a, 0, 3, NULL, NULL, &how, &err));
    assert_int_equal(how, NX_REWIND_NONE);
    nx_seq_ckpt_free(&ck);
    nx_ctx_free(a);
    nx_ctx_free(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_verify_rollback_every_r),
        cmocka_unit_test(test_rollback_limits),
        cmocka_unit_test(test_rewind_checkpoint),
    };
    const struct CMUnitTest moe_tests[] = {
        cmocka_unit_test(test_verify_rollback_every_r),
        cmocka_unit_test(test_rollback_limits),
        cmocka_unit_test(test_rewind_checkpoint),
    };
    int rc = cmocka_run_group_tests_name("qwen35 (tiny)", tests, setup, tu_tiny_teardown);
    return rc + cmocka_run_group_tests_name("qwen35moe (tiny-moe)", moe_tests, setup_moe, tu_tiny_teardown);
}
