/* test_forward_cache.c - per-sequence memory: recurrent snapshot slots and O(1) rollback,
 * truncate-then-redecode == never decoded, sequence copy, memory accounting.  The `tiny`
 * preset in memory (F32 weights). 
 * Every test runs on `tiny` (qwen35) and on `tiny-moe` (qwen35moe).
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "forward/attn_avx512.h"
#include "forward/ctx_internal.h"
#include "forward/forward.h"
#include "forward/seq_ckpt.h"
#include "convert/mkmodel.h"
#include "quant/quant.h"

typedef tu_tiny fixture;

static int setup(void **state) {
    *state = tu_tiny_new("tiny", 5, false, 1);
    return 0;
}

static int setup_moe(void **state) {
    *state = tu_tiny_new("tiny-moe", 5, false, 1);
    return 0;
}

static nx_ctx *make_ctx(fixture *f, int n_seq, int n_snap) { return tu_tiny_ctx(f, 48, n_seq, n_snap, NX_KV_F16); }

static const int32_t P[8] = {3, 77, 140, 9, 300, 12, 45, 500};
static const int32_t Q[4] = {8, 250, 31, 199};
static const int32_t U[3] = {60, 61, 62};

/* After a k-token verify batch, rolling back r tokens selects the slot that equals decoding only
 * the kept tokens; the next decode then matches too.  Every r in 0..R, k = 4, R = 3. */
static void test_snapshot_rollback_equals_kept_tokens(void **state) {
    fixture *f = *state;
    const int V = (int)f->model.hp.n_vocab;
    for (int r = 0; r <= 3; r++) {
        nx_ctx *spec = make_ctx(f, 1, 3), *plain = make_ctx(f, 1, 0);
        tu_decode(spec, 0, P, 8);
        tu_decode(spec, 0, Q, 4);
        assert_int_equal(nx_ctx_seq_max_rollback(spec, 0), 3);
        nx_err err;
        if (!nx_ctx_seq_rollback(spec, 0, r, &err)) fail_msg("r=%d: %s", r, err.msg);
        assert_int_equal(spec->rs.cur[0], r); /* O(1): only the slot index moved */
        assert_int_equal(nx_ctx_n_past(spec, 0), 12 - r);
        tu_decode(plain, 0, P, 8);
        tu_decode(plain, 0, Q, 4 - r);
        double sd = tu_state_diff(spec, 0, plain, 0);
        if (sd > 1e-6) fail_msg("r=%d: state differs by %g", r, sd);
        /* continue both with the same tokens: identical logits */
        tu_decode(spec, 0, U, 3);
        float *ls = malloc(3 * (size_t)V * sizeof(float));
        for (int i = 0; i < 3; i++) memcpy(ls + (size_t)i * V, nx_ctx_logits(spec, i), (size_t)V * sizeof(float));
        tu_decode(plain, 0, U, 3);
        for (int i = 0; i < 3; i++) assert_true(tu_max_abs_diff(ls + (size_t)i * V, nx_ctx_logits(plain, i), (size_t)V) < 1e-4);
        assert_int_equal(spec->rs.cur[0], 0);
        free(ls);
        nx_ctx_free(spec);
        nx_ctx_free(plain);
    }
}

/* Rollback after a rollback (cumulative), and rollback starting from a non-zero slot. */
static void test_rollback_chain_and_reading_from_a_snapshot_slot(void **state) {
    fixture *f = *state;
    nx_ctx *spec = make_ctx(f, 1, 3), *plain = make_ctx(f, 1, 0);
    nx_err err;
    tu_decode(spec, 0, P, 8);
    tu_decode(spec, 0, Q, 4);
    assert_true(nx_ctx_seq_rollback(spec, 0, 1, &err));
    assert_true(nx_ctx_seq_rollback(spec, 0, 1, &err));       /* total 2 */
    assert_false(nx_ctx_seq_rollback(spec, 0, 2, &err));      /* total 4 > R */
    assert_non_null(strstr(err.msg, "cannot roll the recurrent state back 2 tokens"));
    assert_int_equal(nx_ctx_n_past(spec, 0), 10);              /* failed rollback changed nothing */
    /* the next batch reads slot 2 and writes snapshots, including into slot 2 itself */
    tu_decode(spec, 0, U, 3);
    assert_true(nx_ctx_seq_rollback(spec, 0, 2, &err));
    tu_decode(plain, 0, P, 8);
    tu_decode(plain, 0, Q, 2);
    tu_decode(plain, 0, U, 1);
    assert_true(tu_state_diff(spec, 0, plain, 0) < 1e-6);
    nx_ctx_free(spec);
    nx_ctx_free(plain);
}

static void test_rollback_limits(void **state) {
    fixture *f = *state;
    nx_ctx *c = make_ctx(f, 1, 3);
    nx_err err;
    tu_decode(c, 0, P, 2);
    /* a 2-row batch keeps only 1 earlier state: rollback 2 would need the pre-batch state */
    assert_int_equal(nx_ctx_seq_max_rollback(c, 0), 1);
    assert_false(nx_ctx_seq_rollback(c, 0, 2, &err));
    assert_true(nx_ctx_seq_rollback(c, 0, 1, &err));
    assert_false(nx_ctx_seq_rollback(c, 0, -1, &err));
    nx_ctx_free(c);
    nx_ctx *none = make_ctx(f, 1, 0);
    tu_decode(none, 0, P, 5);
    assert_int_equal(nx_ctx_seq_max_rollback(none, 0), 0);
    assert_false(nx_ctx_seq_rollback(none, 0, 1, &err));
    assert_non_null(strstr(err.msg, "0 snapshot slots"));
    nx_ctx_free(none);
}

/* truncate then re-decode different tokens == never having decoded the dropped ones */
static void test_truncate_then_redecode_equals_never_decoded(void **state) {
    fixture *f = *state;
    const int V = (int)f->model.hp.n_vocab, E = (int)f->model.hp.n_embd;
    nx_ctx *a = make_ctx(f, 1, 3), *b = make_ctx(f, 1, 0);
    nx_err err;
    tu_decode(a, 0, P, 8);
    tu_decode(a, 0, Q, 4);
    assert_true(nx_ctx_seq_truncate(a, 0, 10, &err)); /* drops Q[2], Q[3] */
    assert_true(nx_ctx_seq_truncate(a, 0, 10, &err)); /* no-op */
    tu_decode(a, 0, U, 3);
    tu_decode(b, 0, P, 8);
    tu_decode(b, 0, Q, 2);
    tu_decode(b, 0, U, 3);
    for (int i = 0; i < 3; i++) assert_true(tu_max_abs_diff(nx_ctx_logits(a, i), nx_ctx_logits(b, i), (size_t)V) < 1e-4);
    assert_true(tu_max_abs_diff(nx_ctx_hidden(a), nx_ctx_hidden(b), 3 * (size_t)E) < 1e-5);
    /* truncate to 0 is a full reset */
    assert_true(nx_ctx_seq_truncate(a, 0, 0, &err));
    assert_int_equal(nx_ctx_n_past(a, 0), 0);
    nx_ctx *fresh = make_ctx(f, 1, 0);
    tu_decode(a, 0, U, 3);
    tu_decode(fresh, 0, U, 3);
    for (int i = 0; i < 3; i++) assert_true(tu_max_abs_diff(nx_ctx_logits(a, i), nx_ctx_logits(fresh, i), (size_t)V) < 1e-5);
    /* truncating further back than any snapshot is refused, not silently wrong */
    tu_decode(a, 0, P, 8);
    assert_false(nx_ctx_seq_truncate(a, 0, 2, &err));
    assert_non_null(strstr(err.msg, "cannot roll"));
    nx_ctx_free(a);
    nx_ctx_free(b);
    nx_ctx_free(fresh);
}

static void test_copy_sequence(void **state) {
    fixture *f = *state;
    const int V = (int)f->model.hp.n_vocab;
    nx_ctx *c = make_ctx(f, 3, 1);
    nx_err err;
    tu_decode(c, 0, P, 8);
    tu_decode(c, 2, Q, 4); /* junk in the destination first */
    assert_true(nx_ctx_seq_copy(c, 0, 2, &err));
    assert_int_equal(nx_ctx_n_past(c, 2), 8);
    assert_int_equal(nx_ctx_seq_max_rollback(c, 2), 0);
    float *l0 = malloc((size_t)V * sizeof(float));
    tu_decode(c, 0, U, 1);
    memcpy(l0, nx_ctx_logits(c, 0), (size_t)V * sizeof(float));
    tu_decode(c, 2, U, 1);
    assert_true(tu_max_abs_diff(l0, nx_ctx_logits(c, 0), (size_t)V) < 1e-6);
    /* copy from a rolled-back sequence copies its current (snapshot) slot */
    tu_decode(c, 0, Q, 2);
    assert_true(nx_ctx_seq_rollback(c, 0, 1, &err));
    assert_true(nx_ctx_seq_copy(c, 0, 1, &err));
    tu_decode(c, 0, U + 1, 1);
    memcpy(l0, nx_ctx_logits(c, 0), (size_t)V * sizeof(float));
    tu_decode(c, 1, U + 1, 1);
    assert_true(tu_max_abs_diff(l0, nx_ctx_logits(c, 0), (size_t)V) < 1e-6);
    assert_false(nx_ctx_seq_copy(c, 0, 3, &err));
    free(l0);
    nx_ctx_free(c);
}

/* Long batches: the fused delta-rule kernel takes a sequence's rows in groups (at most
 * NX_GDN_MAX_STEPS = 65 steps each; the recorded rows after the anchor one group of their own)
 * and stores only the states needed.  A 100-row batch of seq 0 interleaved with 5 rows of seq 1
 * must leave, after every allowed rollback, exactly the state of decoding the kept tokens one at
 * a time, for R = 3 (groups of 65, 31 and 4 steps) and R = 20 (65, 14 and 21 steps). */
static void test_long_batch_snapshots_across_fused_groups(void **state) {
    fixture *f = *state;
    enum { NA = 100, NB = 5 };
    int32_t A[NA], B[NB], tok[NA + NB], pos[NA + NB], sid[NA + NB];
    int8_t lg[NA + NB];
    for (int i = 0; i < NA; i++) A[i] = (i * 37 + 11) % 500;
    for (int i = 0; i < NB; i++) B[i] = (i * 53 + 7) % 500;
    const int Rs[2] = {3, 20}, rs_[2][4] = {{0, 1, 3, -1}, {0, 15, 17, 20}};
    for (int ri = 0; ri < 2; ri++)
        for (int k = 0; k < 4 && rs_[ri][k] >= 0; k++) {
            const int R = Rs[ri], r = rs_[ri][k];
            nx_ctx *spec = tu_tiny_ctx(f, 128, 2, R, NX_KV_F16), *plain = tu_tiny_ctx(f, 128, 2, 0, NX_KV_F16);
            int T = 0;
            for (int i = 0; i < NA; i++) {
                tok[T] = A[i]; pos[T] = i; sid[T] = 0; lg[T] = 0; T++;
                if (i % 7 == 3 && i / 7 < NB) { tok[T] = B[i / 7]; pos[T] = i / 7; sid[T] = 1; lg[T] = 0; T++; }
            }
            assert_int_equal(T, NA + NB);
            nx_batch b = {T, tok, pos, sid, lg};
            nx_err err;
            if (!nx_forward(spec, &b, &err)) fail_msg("%s", err.msg);
            if (!nx_ctx_seq_rollback(spec, 0, r, &err)) fail_msg("R=%d r=%d: %s", R, r, err.msg);
            for (int i = 0; i < NA - r; i++) tu_decode(plain, 0, A + i, 1);
            for (int i = 0; i < NB; i++) tu_decode(plain, 1, B + i, 1);
            /* batched rows and single rows share every kernel's float order: exactly equal */
            double d0 = tu_state_diff(spec, 0, plain, 0), d1 = tu_state_diff(spec, 1, plain, 1);
            if (d0 != 0.0 || d1 != 0.0) fail_msg("R=%d r=%d: state differs by %g / %g", R, r, d0, d1);
            nx_ctx_free(spec);
            nx_ctx_free(plain);
        }
}

/* A checkpoint taken while replay rows are pending (after a rollback) holds the rolled-back
 * state; restoring it after more decoding gives exactly the state of decoding the kept tokens,
 * and decoding on from there matches too. */
static void test_checkpoint_after_rollback(void **state) {
    fixture *f = *state;
    const int V = (int)f->model.hp.n_vocab;
    nx_ctx *spec = make_ctx(f, 1, 3), *plain = make_ctx(f, 1, 0);
    nx_err err;
    tu_decode(spec, 0, P, 8);
    tu_decode(spec, 0, Q, 4);
    assert_true(nx_ctx_seq_rollback(spec, 0, 2, &err));
    nx_seq_ckpt ck = {0};
    if (!nx_seq_ckpt_save(&ck, spec, 0, &err)) fail_msg("%s", err.msg);
    tu_decode(spec, 0, U, 3);
    nx_rewind_kind how;
    if (!nx_ctx_seq_rewind(spec, 0, 10, &ck, NULL, &how, &err)) fail_msg("%s", err.msg);
    assert_int_equal(how, NX_REWIND_REDECODE);
    tu_decode(plain, 0, P, 8);
    tu_decode(plain, 0, Q, 2);
    double sd = tu_state_diff(spec, 0, plain, 0);
    if (sd != 0.0) fail_msg("restored state differs by %g", sd);
    tu_decode(spec, 0, U, 2);
    float *ls = malloc(2 * (size_t)V * sizeof(float));
    for (int i = 0; i < 2; i++) memcpy(ls + (size_t)i * V, nx_ctx_logits(spec, i), (size_t)V * sizeof(float));
    tu_decode(plain, 0, U, 2);
    for (int i = 0; i < 2; i++) assert_true(tu_max_abs_diff(ls + (size_t)i * V, nx_ctx_logits(plain, i), (size_t)V) == 0.0);
    free(ls);
    nx_seq_ckpt_free(&ck);
    nx_ctx_free(spec);
    nx_ctx_free(plain);
}

static void test_memory_is_sized_from_n_ctx_and_n_seq(void **state) {
    fixture *f = *state;
    const nx_hparams *hp = &f->model.hp;
    nx_ctx *c = make_ctx(f, 2, 3);
    nx_ctx_memory m = nx_ctx_memory_usage(c);
    size_t kv = 2u * (size_t)f->model.n_attn_layers * 2 * 48 * nx_hp_kv_dim(hp) * 2; /* K+V, 2 seqs, F16 */
    assert_int_equal(m.kv_bytes, kv);
    /* conv: 4 slots; delta state: one plane + 2 x (3 + 1) replay rows of (k, delta, decay) per head */
    const size_t d = hp->ssm_d_state, hv = hp->ssm_dt_rank;
    size_t st = (size_t)f->model.n_gdn_layers * 2 /* seqs */ *
                (4 * (hp->ssm_conv_kernel - 1) * nx_hp_conv_dim(hp) + d * d * hv + 2 * 4 * hv * (2 * d + 1)) *
                sizeof(float);
    assert_int_equal(m.state_bytes, st);
    /* the attention score scratch (NX_ATTN_MAX_Q rows of n_ctx per thread) is counted */
    assert_true(m.scratch_bytes >= (size_t)nx_ctx_n_threads(c) * NX_ATTN_MAX_Q * 48 * sizeof(float));
    nx_ctx_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_snapshot_rollback_equals_kept_tokens),
        cmocka_unit_test(test_rollback_chain_and_reading_from_a_snapshot_slot),
        cmocka_unit_test(test_rollback_limits),
        cmocka_unit_test(test_truncate_then_redecode_equals_never_decoded),
        cmocka_unit_test(test_copy_sequence),
        cmocka_unit_test(test_memory_is_sized_from_n_ctx_and_n_seq),
        cmocka_unit_test(test_long_batch_snapshots_across_fused_groups),
        cmocka_unit_test(test_checkpoint_after_rollback),
    };
    const struct CMUnitTest moe_tests[] = {
        cmocka_unit_test(test_snapshot_rollback_equals_kept_tokens),
        cmocka_unit_test(test_rollback_chain_and_reading_from_a_snapshot_slot),
        cmocka_unit_test(test_rollback_limits),
        cmocka_unit_test(test_truncate_then_redecode_equals_never_decoded),
        cmocka_unit_test(test_copy_sequence),
        cmocka_unit_test(test_memory_is_sized_from_n_ctx_and_n_seq),
        cmocka_unit_test(test_long_batch_snapshots_across_fused_groups),
        cmocka_unit_test(test_checkpoint_after_rollback),
    };
    int rc = cmocka_run_group_tests_name("qwen35 (tiny)", tests, setup, tu_tiny_teardown);
    return rc + cmocka_run_group_tests_name("qwen35moe (tiny-moe)", moe_tests, setup_moe, tu_tiny_teardown);
}
