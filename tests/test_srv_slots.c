/* test_srv_slots.c - the server engine's slot files and slot table (srv_engine.h), driven
 * directly on the demo model, plain and speculative:
 *  - save a slot after a greedy request, stop the engine, start a new one, restore the file
 *    into a slot, continue the conversation there: the continuation is the uninterrupted
 *    generation's (one request of both lengths on a fresh engine), and all but the prompt's last
 *    token came from the file (no re-decoding); a file saved in plain mode restores into a
 *    speculative engine and the other way round;
 *  - erase empties a slot (the next request decodes its whole prompt, same output); an operation
 *    on a busy slot waits for its request to finish;
 *  - refusals: no such slot, an empty slot to save, a missing file (404), a file of another model
 *    or a truncated one (400, naming the file, never the server's path);
 *  - id_slot: a request bound to a slot runs there;
 *  - log-probabilities and token ids recorded per generated token (plain == speculative). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "nextn.h"
#include "server/srv_engine.h"
#include "convert/mkmodel.h"
#include "testutil.h"

static nextn_model *demo;

static int setup(void **state) {
    (void)state;
    demo = tu_demo_model(true);
    return demo ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nextn_model_free(demo);
    return 0;
}

static nx_srv_engine *start(bool spec) {
    nx_srv_engine_params p = {.n_slots = 2, .n_ctx = 256, .n_batch = 64, .n_threads = 1, .kv_type = NEXTN_KV_F16,
                              .max_queue = 8, .spec = spec, .spec_params = nextn_spec_default_params(),
                              .n_ckpt = 4, .ckpt_every = 0};
    p.spec_params.draft_max = 3;
    nx_srv_engine *e;
    nx_err err;
    if (!nx_srv_engine_start(&e, demo, &p, &err)) fail_msg("engine: %s", err.msg);
    return e;
}

typedef struct result {
    int32_t tok[256];
    int32_t n, n_cache;
    nextn_logprob lp[64];
} result;

static nx_srv_req *submit(nx_srv_engine *e, const int32_t *prompt, int32_t n, int32_t max_tokens, int32_t id_slot,
                          int32_t n_probs) {
    nx_srv_req *r = nx_srv_req_new();
    r->prompt = malloc((size_t)n * sizeof *r->prompt);
    memcpy(r->prompt, prompt, (size_t)n * sizeof *prompt);
    r->n_prompt = n;
    r->smp = nextn_sampler_default_params();
    r->smp.temp = 0.0f;
    r->max_tokens = max_tokens;
    r->ignore_eos = true;
    r->id_slot = id_slot;
    r->n_probs = n_probs;
    snprintf(r->id, sizeof r->id, "test");
    nx_err err;
    if (!nx_srv_engine_submit(e, r, &err)) fail_msg("submit: %s", err.msg);
    return r;
}

static void wait_result(nx_srv_req *r, result *out) {
    pthread_mutex_lock(&r->mu);
    while (!r->done) pthread_cond_wait(&r->cv, &r->mu);
    pthread_mutex_unlock(&r->mu);
    if (r->error[0]) fail_msg("request failed: %s", r->error);
    out->n = r->n_tokens;
    out->n_cache = r->n_cache;
    memcpy(out->tok, r->tokens, (size_t)r->n_tokens * sizeof *out->tok);
    if (r->probs) memcpy(out->lp, r->probs, (size_t)NX_MIN(r->n_tokens, 64) * sizeof *out->lp);
    nx_srv_req_unref(r);
}

static void run(nx_srv_engine *e, const int32_t *prompt, int32_t n, int32_t max_tokens, int32_t id_slot,
                result *out) {
    wait_result(submit(e, prompt, n, max_tokens, id_slot, -1), out);
}

static bool act(nx_srv_engine *e, int32_t slot, nx_srv_slot_action a, const char *path, nx_srv_slot_result *res,
                int *status, nx_err *err) {
    const char *name = strrchr(path, '/');
    return nx_srv_engine_slot_action(e, slot, a, path, name ? name + 1 : path, res, status, err);
}

enum { N1 = 12, N2 = 14 };

/* save in mode `save_spec`, restore and continue in mode `load_spec` */
static void save_restore(bool save_spec, bool load_spec) {
    int32_t prompt[256];
    const int32_t np = tu_demo_prompt(prompt, 40, 1);
    const char *path = tu_tmp_path("slot.bin");
    nx_err err;
    int status;
    nx_srv_slot_result res;
    result r1, r2, whole;

    nx_srv_engine *e = start(save_spec);
    run(e, prompt, np, N1, 1, &r1);
    assert_int_equal(r1.n, N1);
    assert_true(act(e, 1, NX_SRV_SLOT_SAVE, path, &res, &status, &err));
    assert_int_equal(status, 200);
    assert_int_equal(res.n_tokens, np + N1 - 1); /* the last generated token was never decoded */
    assert_true(res.n_bytes > 0);
    nx_srv_slot_info info[2];
    assert_true(nx_srv_engine_slots(e, info, &err));
    assert_false(info[1].processing);
    assert_true(info[1].has_req);
    assert_int_equal(info[1].n_tokens, np + N1 - 1);
    assert_int_equal(info[1].n_decoded, N1);
    assert_int_equal(info[1].max_tokens, N1);
    assert_false(info[0].has_req);
    assert_int_equal(info[0].n_tokens, 0);
    nx_srv_engine_free(e);

    e = start(load_spec);
    assert_true(act(e, 0, NX_SRV_SLOT_RESTORE, path, &res, &status, &err));
    assert_int_equal(res.n_tokens, np + N1 - 1);
    /* the sequence itself holds the file's positions (a speculative prefill resumes from the
     * sequence, so the continuation's text alone cannot tell a restore from a re-decode) */
    assert_true(nx_srv_engine_slots(e, info, &err));
    assert_int_equal(info[0].n_tokens, np + N1 - 1);
    memcpy(prompt + np, r1.tok, N1 * sizeof *prompt);
    run(e, prompt, np + N1, N2, 0, &r2);
    assert_int_equal(r2.n_cache, np + N1 - 1); /* everything from the file */
    nx_srv_engine_free(e);

    e = start(false);
    run(e, prompt, np, N1 + N2, -1, &whole);
    assert_int_equal(whole.n, N1 + N2);
    assert_memory_equal(whole.tok, r1.tok, N1 * sizeof(int32_t));
    assert_memory_equal(whole.tok + N1, r2.tok, N2 * sizeof(int32_t));
    nx_srv_engine_free(e);
    unlink(path);
}

static void test_plain(void **state) {
    (void)state;
    save_restore(false, false);
}

static void test_spec(void **state) {
    (void)state;
    save_restore(true, true);
}

static void test_cross(void **state) {
    (void)state;
    save_restore(false, true);
    save_restore(true, false);
}

static void test_erase_and_wait(void **state) {
    (void)state;
    int32_t prompt[64];
    const int32_t np = tu_demo_prompt(prompt, 40, 1);
    nx_err err;
    int status;
    nx_srv_slot_result res;
    result a, b;
    nx_srv_engine *e = start(false);
    run(e, prompt, np, 8, 0, &a);
    assert_true(act(e, 0, NX_SRV_SLOT_ERASE, "", &res, &status, &err));
    assert_int_equal(res.n_tokens, np + 7);
    run(e, prompt, np, 8, 0, &b);
    assert_int_equal(b.n_cache, 0); /* nothing left to reuse */
    assert_memory_equal(a.tok, b.tok, 8 * sizeof(int32_t));
    /* an erase of a busy slot waits for its request */
    nx_srv_req *r = submit(e, prompt, np, 60, 1, -1);
    for (;;) {
        pthread_mutex_lock(&r->mu);
        const int32_t g = r->n_gen;
        pthread_mutex_unlock(&r->mu);
        if (g > 0) break;
        usleep(1000);
    }
    assert_true(act(e, 1, NX_SRV_SLOT_ERASE, "", &res, &status, &err));
    pthread_mutex_lock(&r->mu);
    assert_true(r->done);
    assert_int_equal(r->n_gen, 60);
    pthread_mutex_unlock(&r->mu);
    assert_int_equal(res.n_tokens, np + 59);
    wait_result(r, &a);
    nx_srv_engine_free(e);
}

static void test_refusals(void **state) {
    (void)state;
    nx_err err;
    int status;
    nx_srv_slot_result res;
    nx_srv_engine *e = start(false);
    const char *path = tu_tmp_path("nothing.bin");
    assert_false(act(e, 2, NX_SRV_SLOT_SAVE, path, &res, &status, &err));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err.msg, "no slot 2"));
    assert_false(act(e, -1, NX_SRV_SLOT_ERASE, path, &res, &status, &err));
    assert_int_equal(status, 400);
    assert_false(act(e, 0, NX_SRV_SLOT_SAVE, path, &res, &status, &err));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err.msg, "holds no tokens"));
    assert_false(act(e, 0, NX_SRV_SLOT_RESTORE, path, &res, &status, &err));
    assert_int_equal(status, 404);
    assert_null(strstr(err.msg, "/")); /* the file's name only */

    /* a state file of another model (a tiny synthetic one) */
    const char *other = tu_tmp_path("other.gguf");
    nx_mk_options mo = {.preset = "tiny", .type = NX_TYPE_F32, .seed = 7, .mtp = false, .tie = -1};
    nx_pool *pool = nx_pool_create(1, &err);
    assert_non_null(pool);
    assert_true(nx_mkmodel_write(&mo, other, pool, &err));
    nx_pool_free(pool);
    nextn_model *m;
    nextn_context *c;
    nextn_state *st = NULL;
    nextn_error ne;
    assert_true(nextn_model_load(&m, other, NULL, &ne));
    assert_true(nextn_context_create(&c, m, &(nextn_context_params){.n_ctx = 64, .n_seq = 1, .n_threads = 1}, &ne));
    const int32_t ids[3] = {1, 2, 3}, pos[3] = {0, 1, 2};
    assert_true(nextn_decode(c, &(nextn_batch){3, ids, pos, NULL, NULL}, &ne));
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_FULL, &ne));
    assert_true(nextn_state_set_tokens(st, ids, 3, &ne));
    assert_true(nextn_state_save(st, path, &ne));
    nextn_state_free(st);
    nextn_context_free(c);
    nextn_model_free(m);
    unlink(other);
    assert_false(act(e, 0, NX_SRV_SLOT_RESTORE, path, &res, &status, &err));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err.msg, "another model"));
    assert_null(strstr(err.msg, "/"));

    /* a truncated file of this model */
    int32_t prompt[64];
    const int32_t np = tu_demo_prompt(prompt, 20, 1);
    result a;
    run(e, prompt, np, 4, 0, &a);
    assert_true(act(e, 0, NX_SRV_SLOT_SAVE, path, &res, &status, &err));
    assert_int_equal(truncate(path, (off_t)res.n_bytes / 2), 0);
    assert_false(act(e, 1, NX_SRV_SLOT_RESTORE, path, &res, &status, &err));
    assert_int_equal(status, 400);
    assert_non_null(strstr(err.msg, "truncated"));
    nx_srv_slot_info info[2];
    assert_true(nx_srv_engine_slots(e, info, &err));
    assert_int_equal(info[1].n_tokens, 0); /* the refused restore left the slot alone */
    unlink(path);
    nx_srv_engine_free(e);
}

/* Token ids and log-probabilities per generated token: speculative == plain. */
static void test_logprobs(void **state) {
    (void)state;
    int32_t prompt[64];
    const int32_t np = tu_demo_prompt(prompt, 30, 1);
    result a, b;
    nx_srv_engine *e = start(false);
    wait_result(submit(e, prompt, np, 20, -1, 3), &a);
    nx_srv_engine_free(e);
    e = start(true);
    wait_result(submit(e, prompt, np, 20, -1, 3), &b);
    nx_srv_engine_free(e);
    assert_int_equal(a.n, 20);
    assert_int_equal(b.n, 20);
    assert_memory_equal(a.tok, b.tok, 20 * sizeof(int32_t));
    for (int k = 0; k < 20; k++) {
        assert_int_equal(a.lp[k].token, a.tok[k]);
        assert_int_equal(a.lp[k].n_top, 3);
        assert_true(a.lp[k].logprob <= 0 && a.lp[k].logprob > -1e30f);
        assert_int_equal(a.lp[k].top_ids[0], a.tok[k]); /* greedy: the most likely one */
        assert_true(a.lp[k].logprob == b.lp[k].logprob);
        assert_int_equal(b.lp[k].n_top, 3);
        assert_memory_equal(a.lp[k].top_ids, b.lp[k].top_ids, 3 * sizeof(int32_t));
        assert_memory_equal(a.lp[k].top_logprobs, b.lp[k].top_logprobs, 3 * sizeof(float));
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain),        cmocka_unit_test(test_spec),     cmocka_unit_test(test_cross),
        cmocka_unit_test(test_erase_and_wait), cmocka_unit_test(test_refusals), cmocka_unit_test(test_logprobs),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
