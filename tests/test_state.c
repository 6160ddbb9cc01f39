/* test_state.c - sequence states (include/nextn.h "sequence state") through the public API only.
 *
 * Plain contexts (tiny synthetic model, F32 weights): a state taken mid-generation and restored
 * into another sequence, into a fresh context, and through a file continues with bit-identical
 * logits and tokens; an in-place state restores after the sequence went on (its cells cut back);
 * a state taken right after a rollback (replay rows pending) holds the rolled-back state.
 * Speculative generators (the trained demo model, whose MTP head accepts most drafts, so a
 * wrong MTP cache or hidden row shows in the tokens per step): restoring a state and prefilling
 * the whole token list generates exactly what prefilling the list from scratch does - the same
 * tokens AND the same tokens per step (drafts accepted) - into another sequence, a fresh
 * generator, in place, through a file and after nextn_spec_seq_keep; greedy equals plain.
 * Errors: a file of another model, truncated, corrupted, wrong magic / version, trailing bytes;
 * an in-place state into another sequence or a shorter one; KV type mismatch. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn.h"
#include "testutil.h"

enum { VOCAB_TINY = 512, NCTX = 256, GEN = 24, MAXT = 512, DRAFT = 3 };

static char tiny_path[512], other_path[512];
static nextn_model *tiny, *other, *demo;

static int make_model(const char *bin, const char *path, int seed) {
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "\"%s\" mkmodel --preset tiny --type f32 --seed %d -o \"%s\" >/dev/null", bin, seed, path);
    return system(cmd) == 0 ? 0 : -1;
}

static int setup(void **state) {
    (void)state;
    const char *bin = getenv("NEXTN");
    if (!bin) {
        fprintf(stderr, "test_state: $NEXTN (the nextn binary) is not set\n");
        return -1;
    }
    snprintf(tiny_path, sizeof tiny_path, "%s", tu_tmp_path("state-tiny.gguf"));
    snprintf(other_path, sizeof other_path, "%s", tu_tmp_path("state-other.gguf"));
    if (make_model(bin, tiny_path, 3) || make_model(bin, other_path, 4)) return -1;
    nextn_error err;
    if (!nextn_model_load(&tiny, tiny_path, NULL, &err) || !nextn_model_load(&other, other_path, NULL, &err) ||
        !nextn_model_load(&demo, tu_src_path("models/nextn-demo.gguf"), NULL, &err)) {
        fprintf(stderr, "test_state: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nextn_model_free(tiny);
    nextn_model_free(other);
    nextn_model_free(demo);
    remove(tiny_path);
    remove(other_path);
    return 0;
}

static nextn_context *make_ctx_kv(const nextn_model *m, int32_t n_ctx, int32_t n_seq, nextn_kv_type kv,
                                  nextn_kv_type kv_v, int32_t snaps) {
    nextn_context_params p = nextn_context_default_params();
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    p.n_threads = 2;
    p.kv_type = kv;
    p.kv_type_v = kv_v;
    p.n_snapshots = snaps;
    nextn_context *c;
    nextn_error err;
    if (!nextn_context_create(&c, m, &p, &err)) fail_msg("%s", err.msg);
    return c;
}

static nextn_context *make_ctx(const nextn_model *m, int32_t n_ctx, int32_t n_seq, nextn_kv_type kv, int32_t snaps) {
    return make_ctx_kv(m, n_ctx, n_seq, kv, kv, snaps);
}

static int32_t argmax(const float *x, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static int32_t last_rows; /* rows of the last decode: its last row has the logits */

/* Decodes toks[0..n) into seq starting at its n_past (one batch). */
static void decode(nextn_context *c, int32_t seq, const int32_t *toks, int32_t n) {
    int32_t pos[MAXT], sid[MAXT];
    const int32_t p0 = nextn_n_past(c, seq);
    for (int32_t i = 0; i < n; i++) {
        pos[i] = p0 + i;
        sid[i] = seq;
    }
    nextn_error err;
    nextn_batch b = {n, toks, pos, sid, NULL};
    if (!nextn_decode(c, &b, &err)) fail_msg("%s", err.msg);
    last_rows = n;
}

/* Greedy: the last decode's last row gives the next token, which is decoded in turn; gen
 * tokens and the logits rows that chose them into out / lg. */
static void greedy(nextn_context *c, int32_t seq, int32_t gen, int32_t *out, float *lg) {
    for (int32_t g = 0; g < gen; g++) {
        const float *l = nextn_get_logits(c, last_rows - 1);
        assert_non_null(l);
        memcpy(lg + (size_t)g * VOCAB_TINY, l, VOCAB_TINY * sizeof(float));
        out[g] = argmax(l, VOCAB_TINY);
        decode(c, seq, &out[g], 1);
    }
}

static void random_tokens(int32_t *t, int32_t n, uint64_t seed) {
    tu_rng r;
    tu_rng_seed(&r, seed);
    for (int32_t i = 0; i < n; i++) t[i] = (int32_t)(tu_rng_u64(&r) % 500);
}

/* Plain: take FULL after prompt + 8 generated; restore into another sequence, a fresh
 * context (other n_ctx) and through a file; each continues bit-identically. */
static void test_plain_full(void **state) {
    (void)state;
    enum { NP = 40, PRE = 8 };
    int32_t prompt[NP];
    random_tokens(prompt, NP, 11);
    static float ref_lg[GEN * VOCAB_TINY], lg[GEN * VOCAB_TINY];
    int32_t ref[GEN], got[GEN];
    nextn_error err;

    /* uninterrupted: prompt (last row logits), then one token at a time */
    nextn_context *c = make_ctx(tiny, NCTX, 2, NEXTN_KV_F16, 0);
    decode(c, 0, prompt, NP - 1);
    decode(c, 0, prompt + NP - 1, 1);
    greedy(c, 0, GEN, ref, ref_lg);

    /* again in seq 0 up to PRE tokens, then a state */
    nextn_seq_clear(c, 0, &err);
    decode(c, 0, prompt, NP - 1);
    decode(c, 0, prompt + NP - 1, 1);
    greedy(c, 0, PRE, got, lg);
    nextn_state *st = NULL;
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_FULL, &err));
    assert_int_equal(nextn_state_pos(st), NP + PRE);
    assert_int_equal(nextn_state_kind_of(st), NEXTN_STATE_FULL);
    assert_true(nextn_state_size(st) > 0);
    assert_int_equal(nextn_state_size(st), nextn_state_size_for(c, NEXTN_STATE_FULL, NP + PRE));
    assert_true(nextn_state_size_for(c, NEXTN_STATE_IN_PLACE, NP + PRE) < nextn_state_size(st));
    /* the state holds the position after PRE decoded tokens: continuing means the logits of
     * the last decoded row, which a restored sequence does not have - so decode the last
     * generated token again from a state taken one position earlier */
    nextn_seq_clear(c, 0, &err);
    decode(c, 0, prompt, NP);
    int32_t hist[NP + GEN];
    memcpy(hist, prompt, sizeof prompt);
    memcpy(hist + NP, ref, sizeof ref);
    decode(c, 0, hist + NP, PRE - 1); /* positions NP .. NP+PRE-2 */
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_FULL, &err));
    assert_int_equal(nextn_state_pos(st), NP + PRE - 1);
    assert_true(nextn_state_set_tokens(st, hist, NP + PRE - 1, &err));
    assert_false(nextn_state_set_tokens(st, hist, NP, &err));
    assert_non_null(strstr(err.msg, "tokens given"));

    /* (a) another sequence of the same context; seq 0 goes on meanwhile */
    decode(c, 0, hist + NP + PRE - 1, 5);
    assert_true(nextn_state_restore(c, 1, st, &err));
    assert_int_equal(nextn_n_past(c, 1), NP + PRE - 1);
    decode(c, 1, hist + NP + PRE - 1, 1);
    greedy(c, 1, GEN - PRE, got, lg);
    assert_memory_equal(got, ref + PRE, (GEN - PRE) * sizeof(int32_t));
    assert_memory_equal(lg, ref_lg + (size_t)PRE * VOCAB_TINY, (size_t)(GEN - PRE) * VOCAB_TINY * sizeof(float));

    /* (b) a fresh context with another n_ctx and one sequence */
    nextn_context *c2 = make_ctx(tiny, 128, 1, NEXTN_KV_F16, 2);
    assert_true(nextn_state_restore(c2, 0, st, &err));
    decode(c2, 0, hist + NP + PRE - 1, 1);
    greedy(c2, 0, GEN - PRE, got, lg);
    assert_memory_equal(got, ref + PRE, (GEN - PRE) * sizeof(int32_t));
    assert_memory_equal(lg, ref_lg + (size_t)PRE * VOCAB_TINY, (size_t)(GEN - PRE) * VOCAB_TINY * sizeof(float));
    nextn_context_free(c2);

    /* (c) a file, loaded into a fresh context */
    const char *path = tu_tmp_path("state.nxs");
    assert_true(nextn_state_save(st, path, &err));
    nextn_state *ld = NULL;
    if (!nextn_state_load(&ld, tiny, path, &err)) fail_msg("%s", err.msg);
    int32_t nt;
    const int32_t *tk = nextn_state_tokens(ld, &nt);
    assert_int_equal(nt, NP + PRE - 1);
    assert_memory_equal(tk, hist, (size_t)nt * sizeof(int32_t));
    assert_int_equal(nextn_state_size(ld), nextn_state_size(st));
    c2 = make_ctx(tiny, NCTX, 1, NEXTN_KV_F16, 0);
    assert_true(nextn_state_restore(c2, 0, ld, &err));
    decode(c2, 0, hist + NP + PRE - 1, 1);
    greedy(c2, 0, GEN - PRE, got, lg);
    assert_memory_equal(got, ref + PRE, (GEN - PRE) * sizeof(int32_t));
    assert_memory_equal(lg, ref_lg + (size_t)PRE * VOCAB_TINY, (size_t)(GEN - PRE) * VOCAB_TINY * sizeof(float));
    nextn_context_free(c2);

    /* KV type must match; another model's context refuses it */
    c2 = make_ctx(tiny, NCTX, 1, NEXTN_KV_F32, 0);
    assert_false(nextn_state_restore(c2, 0, ld, &err));
    assert_non_null(strstr(err.msg, "cache type"));
    assert_int_equal(nextn_n_past(c2, 0), 0);
    nextn_context_free(c2);
    c2 = make_ctx(other, NCTX, 1, NEXTN_KV_F16, 0);
    assert_false(nextn_state_restore(c2, 0, ld, &err));
    assert_non_null(strstr(err.msg, "another model"));
    nextn_context_free(c2);
    /* the position must fit the context */
    c2 = make_ctx(tiny, NP, 1, NEXTN_KV_F16, 0);
    assert_false(nextn_state_restore(c2, 0, ld, &err));
    assert_non_null(strstr(err.msg, "n_ctx"));
    nextn_context_free(c2);

    nextn_state_free(ld);
    nextn_state_free(st);
    remove(path);
    nextn_context_free(c);
}

/* In place: the sequence goes on 20 tokens past the state, the state brings it back (cells cut
 * to its position); continuing equals the uninterrupted run.  Misuse is refused. */
/* Quantized cache (q8_0 K, q4_0 V): a FULL state saved to a file and restored into a fresh
 * context of the same types continues bit-identically (the cells travel as stored); contexts of
 * other cache types refuse it. */
static void test_quantized_cache_state(void **state) {
    (void)state;
    enum { NP = 40, G = 12 };
    int32_t prompt[NP], ref[G], got[G];
    float *ref_lg = malloc((size_t)G * VOCAB_TINY * sizeof(float)), *lg = malloc((size_t)G * VOCAB_TINY * sizeof(float));
    random_tokens(prompt, NP, 23);
    nextn_error err;
    nextn_context *c = make_ctx_kv(tiny, NCTX, 1, NEXTN_KV_Q8_0, NEXTN_KV_Q4_0, 0);
    decode(c, 0, prompt, NP);
    nextn_state *st = NULL;
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_FULL, &err));
    greedy(c, 0, G, ref, ref_lg);
    const char *path = tu_tmp_path("q.nxs");
    assert_true(nextn_state_save(st, path, &err));
    nextn_state *ld = NULL;
    if (!nextn_state_load(&ld, tiny, path, &err)) fail_msg("%s", err.msg);
    nextn_context *c2 = make_ctx_kv(tiny, NCTX, 1, NEXTN_KV_Q8_0, NEXTN_KV_Q4_0, 0);
    if (!nextn_state_restore(c2, 0, ld, &err)) fail_msg("%s", err.msg);
    assert_int_equal(nextn_n_past(c2, 0), NP);
    decode(c2, 0, ref, 1); /* ref[0] came from the prompt's last row; its own logits chose ref[1] */
    greedy(c2, 0, G - 1, got + 1, lg + VOCAB_TINY);
    got[0] = ref[0];
    assert_memory_equal(got, ref, G * sizeof(int32_t));
    assert_memory_equal(lg + VOCAB_TINY, ref_lg + VOCAB_TINY, (size_t)(G - 1) * VOCAB_TINY * sizeof(float));
    nextn_context_free(c2);
    const nextn_kv_type others[][2] = {{NEXTN_KV_F16, NEXTN_KV_F16}, {NEXTN_KV_Q8_0, NEXTN_KV_Q8_0},
                                       {NEXTN_KV_Q4_0, NEXTN_KV_Q4_0}, {NEXTN_KV_Q4_0, NEXTN_KV_Q8_0}};
    for (int i = 0; i < 4; i++) {
        c2 = make_ctx_kv(tiny, NCTX, 1, others[i][0], others[i][1], 0);
        assert_false(nextn_state_restore(c2, 0, ld, &err));
        assert_non_null(strstr(err.msg, "cache type"));
        nextn_context_free(c2);
    }
    nextn_state_free(ld);
    nextn_state_free(st);
    remove(path);
    nextn_context_free(c);
    free(ref_lg);
    free(lg);
}

static void test_plain_in_place(void **state) {
    (void)state;
    enum { NP = 30 };
    int32_t prompt[NP], ref[GEN], got[GEN];
    static float ref_lg[GEN * VOCAB_TINY], lg[GEN * VOCAB_TINY];
    random_tokens(prompt, NP, 12);
    nextn_error err;
    nextn_context *c = make_ctx(tiny, NCTX, 2, NEXTN_KV_F16, 0);
    decode(c, 0, prompt, NP);
    greedy(c, 0, GEN, ref, ref_lg);

    nextn_seq_clear(c, 0, &err);
    decode(c, 0, prompt, NP - 1);
    nextn_state *st = NULL;
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_IN_PLACE, &err));
    assert_int_equal(nextn_state_size(st), nextn_state_size_for(c, NEXTN_STATE_IN_PLACE, NP - 1));
    decode(c, 0, prompt + NP - 1, 1);
    greedy(c, 0, 20, got, lg);
    assert_int_equal(nextn_n_past(c, 0), NP + 20);
    /* not into another sequence, not into a shorter one, not savable */
    assert_false(nextn_state_restore(c, 1, st, &err));
    assert_non_null(strstr(err.msg, "only into that sequence"));
    assert_false(nextn_state_save(st, tu_tmp_path("inplace.nxs"), &err));
    assert_non_null(strstr(err.msg, "full state"));
    assert_true(nextn_state_restore(c, 0, st, &err));
    assert_int_equal(nextn_n_past(c, 0), NP - 1);
    decode(c, 0, prompt + NP - 1, 1);
    greedy(c, 0, GEN, got, lg);
    assert_memory_equal(got, ref, sizeof ref);
    assert_memory_equal(lg, ref_lg, sizeof ref_lg);
    /* a sequence holding fewer positions than the state cannot take it back in place */
    nextn_seq_clear(c, 0, &err);
    decode(c, 0, prompt, 5);
    assert_false(nextn_state_restore(c, 0, st, &err));
    assert_non_null(strstr(err.msg, "holds 5 positions"));
    assert_int_equal(nextn_n_past(c, 0), 5);
    nextn_state_free(st);
    nextn_context_free(c);
}

/* A state taken right after a rollback (the delta state's replay rows pending) holds the
 * rolled-back state: restored elsewhere it continues like a sequence that never decoded the
 * dropped tokens. */
static void test_plain_after_rollback(void **state) {
    (void)state;
    enum { NP = 20 };
    int32_t prompt[NP + 3], ref[GEN], got[GEN];
    static float ref_lg[GEN * VOCAB_TINY], lg[GEN * VOCAB_TINY];
    random_tokens(prompt, NP + 3, 13);
    nextn_error err;
    nextn_context *c = make_ctx(tiny, NCTX, 2, NEXTN_KV_F16, 3);
    decode(c, 0, prompt, NP);
    greedy(c, 0, GEN, ref, ref_lg);

    nextn_seq_clear(c, 0, &err);
    decode(c, 0, prompt, NP - 1);
    decode(c, 0, prompt + NP - 1, 4); /* the last prompt token + 3 to drop */
    assert_true(nextn_seq_truncate(c, 0, NP, &err));
    nextn_state *st = NULL;
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_FULL, &err));
    assert_int_equal(nextn_state_pos(st), NP);
    assert_true(nextn_state_restore(c, 1, st, &err));
    /* re-decoding the last prompt token needs the state one position earlier: instead,
     * continue with the first generated token, whose logits row ref_lg[0] came from NP-1 */
    decode(c, 1, &ref[0], 1);
    greedy(c, 1, GEN - 1, got, lg);
    assert_memory_equal(got, ref + 1, (GEN - 1) * sizeof(int32_t));
    assert_memory_equal(lg, ref_lg + VOCAB_TINY, (size_t)(GEN - 1) * VOCAB_TINY * sizeof(float));
    nextn_state_free(st);
    nextn_context_free(c);
}

/* ---- speculative generators on the demo model ------------------------------------------------ */

static nextn_spec *make_spec(int32_t n_seq) {
    nextn_context_params cp = nextn_context_default_params();
    cp.n_ctx = NCTX;
    cp.n_seq = n_seq;
    cp.n_threads = 1;
    nextn_spec_params sp = nextn_spec_default_params();
    sp.draft_max = DRAFT;
    sp.adaptive = false; /* always DRAFT drafts: the tokens per step show what was accepted */
    nextn_sampler_params smp = nextn_sampler_default_params();
    smp.temp = 0.0f;
    nextn_spec *s;
    nextn_error err;
    if (!nextn_spec_create(&s, demo, &cp, &sp, &smp, &err)) fail_msg("%s", err.msg);
    assert_true(nextn_spec_has_mtp(s));
    return s;
}

typedef struct run {
    int32_t tok[MAXT];
    int32_t n;              /* tokens emitted (the prefill's first included) */
    int32_t per_step[MAXT]; /* tokens emitted by each step */
    int32_t steps;
    uint8_t *after_prefill, *at_end; /* the sequence's state file right after the prefill / at the end */
    size_t n_after_prefill, n_at_end;
} run;

/* The bytes of a FULL state file of seq: every cache cell, the recurrent state, the MTP cells and
 * the driver's rows.  Two sequences with equal files hold exactly the same state. */
static uint8_t *state_bytes(const nextn_spec *s, int32_t seq, size_t *n) {
    nextn_state *st = NULL;
    nextn_error err;
    const char *path = tu_tmp_path("cmp.nxs");
    if (!nextn_spec_state_take(&st, s, seq, NEXTN_STATE_FULL, &err) || !nextn_state_save(st, path, &err))
        fail_msg("%s", err.msg);
    nextn_state_free(st);
    uint8_t *b = tu_read_file(path, n);
    remove(path);
    assert_non_null(b);
    return b;
}

static void run_free(run *r) {
    free(r->after_prefill);
    free(r->at_end);
    r->after_prefill = r->at_end = NULL;
}

/* Prefills seq with list[0..n) (a restored / kept sequence continues) and steps until `gen`
 * tokens are emitted. */
static const nextn_sampler_params *run_smp; /* the sampler spec_run prefills with (NULL: the generator's) */

static void spec_run(nextn_spec *s, int32_t seq, const int32_t *list, int32_t n, int32_t gen, run *r) {
    nextn_error err;
    const int32_t S = nextn_spec_n_seq(s), stride = nextn_spec_max_step_tokens(s);
    int32_t out[4 * (DRAFT + 1)], n_out[4], max_out[4] = {0};
    run_free(r);
    memset(r, 0, sizeof *r);
    if (!nextn_spec_prefill_seq(s, seq, list, n, run_smp, &r->tok[0], &err)) fail_msg("%s", err.msg);
    r->after_prefill = state_bytes(s, seq, &r->n_after_prefill);
    r->n = 1;
    while (r->n < gen) {
        for (int32_t i = 0; i < S; i++) max_out[i] = i == seq ? gen - r->n : 1;
        if (!nextn_spec_step_seqs(s, max_out, out, n_out, &err)) fail_msg("%s", err.msg);
        for (int32_t k = 0; k < n_out[seq]; k++) r->tok[r->n++] = out[seq * stride + k];
        r->per_step[r->steps++] = n_out[seq];
    }
    r->at_end = state_bytes(s, seq, &r->n_at_end);
}

static void assert_runs_equal(const run *a, const run *b) {
    assert_int_equal(a->n, b->n);
    assert_memory_equal(a->tok, b->tok, (size_t)a->n * sizeof(int32_t));
    assert_int_equal(a->steps, b->steps);
    assert_memory_equal(a->per_step, b->per_step, (size_t)a->steps * sizeof(int32_t));
    assert_int_equal(a->n_after_prefill, b->n_after_prefill);
    assert_memory_equal(a->after_prefill, b->after_prefill, a->n_after_prefill);
    assert_int_equal(a->n_at_end, b->n_at_end);
    assert_memory_equal(a->at_end, b->at_end, a->n_at_end);
}

/* Plain greedy continuation of list[0..n) on the demo model (independent of the generator). */
static void plain_run(const int32_t *list, int32_t n, int32_t gen, int32_t *out) {
    nextn_context *c = make_ctx(demo, NCTX, 1, NEXTN_KV_F16, 0);
    nextn_model_info mi;
    nextn_model_get_info(demo, &mi);
    decode(c, 0, list, n);
    for (int32_t g = 0; g < gen; g++) {
        out[g] = argmax(nextn_get_logits(c, last_rows - 1), mi.n_vocab);
        if (g + 1 < gen) decode(c, 0, &out[g], 1);
    }
    nextn_context_free(c);
}

static void test_spec_states(void **state) {
    (void)state;
    int32_t list[MAXT];
    const int32_t NP = tu_demo_prompt(list, 120, 3);
    assert_true(NP > 40);
    nextn_error err;
    static run a, ref, got;

    /* A: prefill + 30 tokens in sequence 1 of a two-sequence generator (sequence 0 busy too) */
    nextn_spec *sa = make_spec(2);
    int32_t first0;
    assert_true(nextn_spec_prefill_seq(sa, 0, list, NP / 2, NULL, &first0, &err));
    spec_run(sa, 1, list, NP, 30, &a);
    /* the state now: list + a.tok[0..29) decoded, a.tok[29] pending */
    const int32_t pos = nextn_spec_seq_n_past(sa, 1);
    assert_int_equal(pos, NP + a.n - 1);
    memcpy(list + NP, a.tok, (size_t)a.n * sizeof(int32_t));
    const int32_t L = NP + a.n; /* the list a continuation prefills (the pending token last) */
    nextn_state *full = NULL, *inpl = NULL;
    assert_true(nextn_spec_state_take(&full, sa, 1, NEXTN_STATE_FULL, &err));
    assert_true(nextn_spec_state_take(&inpl, sa, 1, NEXTN_STATE_IN_PLACE, &err));
    assert_true(nextn_state_has_mtp(full));
    assert_int_equal(nextn_state_pos(full), pos);
    assert_true(nextn_state_size(inpl) < nextn_state_size(full));
    assert_true(nextn_state_size(full) <= nextn_spec_state_size_for(sa, NEXTN_STATE_FULL, pos));

    /* the reference: a fresh generator prefilling the whole list; greedy == plain */
    nextn_spec *sr = make_spec(1);
    spec_run(sr, 0, list, L, 40, &ref);
    int32_t plain[40];
    plain_run(list, L, 40, plain);
    assert_memory_equal(ref.tok, plain, sizeof plain);
    int32_t multi = 0;
    for (int32_t i = 0; i < ref.steps; i++) multi += ref.per_step[i] > 1;
    assert_true(multi >= ref.steps / 3); /* the head drafts well: a wrong MTP cache would show */

    /* (a) another sequence of the same generator */
    assert_true(nextn_spec_state_restore(sa, 0, full, &err));
    assert_int_equal(nextn_spec_seq_n_past(sa, 0), pos);
    spec_run(sa, 0, list, L, 40, &got);
    assert_runs_equal(&got, &ref);

    /* (b) a fresh generator */
    nextn_spec *sb = make_spec(2);
    assert_true(nextn_spec_state_restore(sb, 1, full, &err));
    spec_run(sb, 1, list, L, 40, &got);
    assert_runs_equal(&got, &ref);

    /* (c) in place: sequence 1 of A went on after the state was taken (kept, then the next
     * turn); the in-place state brings it back */
    assert_true(nextn_spec_seq_keep(sa, 1, &err));
    assert_true(nextn_spec_state_restore(sa, 1, inpl, &err));
    spec_run(sa, 1, list, L, 40, &got);
    assert_runs_equal(&got, &ref);
    /* in place into another sequence: refused */
    assert_false(nextn_spec_state_restore(sb, 0, inpl, &err));
    assert_non_null(strstr(err.msg, "only into that sequence"));

    /* (d) a file, into a fresh generator */
    const char *path = tu_tmp_path("spec-state.nxs");
    assert_true(nextn_state_set_tokens(full, list, pos, &err));
    assert_true(nextn_state_save(full, path, &err));
    nextn_state *ld = NULL;
    if (!nextn_state_load(&ld, demo, path, &err)) fail_msg("%s", err.msg);
    assert_true(nextn_state_has_mtp(ld));
    nextn_spec *sc = make_spec(1);
    assert_true(nextn_spec_state_restore(sc, 0, ld, &err));
    spec_run(sc, 0, list, L, 40, &got);
    assert_runs_equal(&got, &ref);

    /* (e) the generator's state into a plain context: the target part */
    nextn_context *c = make_ctx(demo, NCTX, 1, NEXTN_KV_F16, 0);
    assert_true(nextn_state_restore(c, 0, ld, &err));
    decode(c, 0, list + pos, L - pos);
    nextn_model_info mi;
    nextn_model_get_info(demo, &mi);
    assert_int_equal(argmax(nextn_get_logits(c, last_rows - 1), mi.n_vocab), ref.tok[0]);
    /* ... and a plain context's state into a generator: same tokens (the MTP cache restarts) */
    nextn_state *pst = NULL;
    assert_true(nextn_state_take(&pst, c, 0, NEXTN_STATE_FULL, &err));
    assert_false(nextn_state_has_mtp(pst));
    nextn_spec_seq_clear(sc, 0, &err);
    assert_true(nextn_spec_state_restore(sc, 0, pst, &err));
    list[L] = ref.tok[0];
    spec_run(sc, 0, list, L + 1, 39, &got);
    assert_memory_equal(got.tok, ref.tok + 1, 39 * sizeof(int32_t));

    /* (f) keep: a finished generation continues with the next turn's tokens, equal to a
     * prefill of the whole conversation */
    nextn_spec_seq_clear(sb, 0, &err);
    spec_run(sb, 0, list, NP, 20, &got);
    assert_true(nextn_spec_seq_keep(sb, 0, &err));
    int32_t conv[MAXT];
    memcpy(conv, list, (size_t)NP * sizeof(int32_t));
    memcpy(conv + NP, got.tok, (size_t)got.n * sizeof(int32_t));
    memcpy(conv + NP + got.n, list, 15 * sizeof(int32_t)); /* "the next user turn" */
    const int32_t LC = NP + got.n + 15;
    spec_run(sb, 0, conv, LC, 30, &got);
    nextn_spec_seq_clear(sr, 0, &err);
    spec_run(sr, 0, conv, LC, 30, &ref);
    assert_runs_equal(&got, &ref);
    /* a continued prefill must extend what the sequence holds */
    assert_true(nextn_spec_seq_keep(sb, 0, &err));
    int32_t first;
    assert_false(nextn_spec_prefill_seq(sb, 0, conv, 3, NULL, &first, &err));
    assert_non_null(strstr(err.msg, "must continue them"));

    nextn_state_free(pst);
    nextn_context_free(c);
    nextn_state_free(ld);
    remove(path);
    nextn_state_free(full);
    nextn_state_free(inpl);
    nextn_spec_free(sa);
    nextn_spec_free(sb);
    nextn_spec_free(sc);
    nextn_spec_free(sr);
    run_free(&a);
    run_free(&ref);
    run_free(&got);
}

/* Sampled with penalties: a continued prefill puts the held tokens in the penalty history, and
 * the continuation equals a prefill of the whole list (same seed, same tokens and steps). */
static void test_spec_sampled(void **state) {
    (void)state;
    int32_t list[MAXT];
    const int32_t NP = tu_demo_prompt(list, 100, 3);
    nextn_error err;
    static run a, ref, got;
    nextn_sampler_params smp = nextn_sampler_default_params();
    smp.temp = 0.7f;
    smp.penalty_repeat = 1.5f;
    smp.penalty_last_n = 64;
    smp.seed = 7;
    run_smp = &smp;
    nextn_spec *sa = make_spec(1), *sb = make_spec(2);
    spec_run(sa, 0, list, NP, 20, &a);
    memcpy(list + NP, a.tok, (size_t)a.n * sizeof(int32_t));
    const int32_t L = NP + a.n;
    nextn_state *st = NULL;
    assert_true(nextn_spec_state_take(&st, sa, 0, NEXTN_STATE_FULL, &err));
    nextn_spec_seq_clear(sa, 0, &err);
    spec_run(sa, 0, list, L, 30, &ref);
    assert_true(nextn_spec_state_restore(sb, 1, st, &err));
    spec_run(sb, 1, list, L, 30, &got);
    assert_runs_equal(&got, &ref);
    run_smp = NULL;
    nextn_state_free(st);
    nextn_spec_free(sa);
    nextn_spec_free(sb);
    run_free(&a);
    run_free(&ref);
    run_free(&got);
}

/* ---- files: what is refused ------------------------------------------------------------------- */

static bool write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return false;
    bool ok = fwrite(p, 1, n, f) == n;
    return fclose(f) == 0 && ok;
}

static void expect_load_error(const char *path, const nextn_model *m, const char *what) {
    nextn_state *st = NULL;
    nextn_error err;
    assert_false(nextn_state_load(&st, m, path, &err));
    assert_null(st);
    if (!strstr(err.msg, what)) fail_msg("expected \"%s\" in: %s", what, err.msg);
    assert_non_null(strstr(err.msg, path));
}

static void test_file_errors(void **state) {
    (void)state;
    nextn_error err;
    int32_t prompt[50];
    random_tokens(prompt, 50, 14);
    nextn_context *c = make_ctx(tiny, NCTX, 1, NEXTN_KV_F16, 0);
    decode(c, 0, prompt, 50);
    nextn_state *st = NULL;
    assert_true(nextn_state_take(&st, c, 0, NEXTN_STATE_FULL, &err));
    assert_true(nextn_state_set_tokens(st, prompt, 50, &err));
    const char *path = tu_tmp_path("good.nxs"), *bad = tu_tmp_path("bad.nxs");
    assert_true(nextn_state_save(st, path, &err));
    size_t n;
    uint8_t *b = tu_read_file(path, &n);
    assert_non_null(b);
    assert_true(n > 200);

    /* another model with the same tensor table (another seed): refused */
    expect_load_error(path, other, "another model");
    /* truncated anywhere */
    const size_t cuts[] = {0, 5, 60, 119, 200, n / 2, n - 9, n - 1};
    for (size_t i = 0; i < sizeof cuts / sizeof cuts[0]; i++) {
        assert_true(write_bytes(bad, b, cuts[i]));
        expect_load_error(bad, tiny, cuts[i] < 8 ? "not a nextn state file" : "truncated");
    }
    /* trailing bytes */
    uint8_t *b2 = malloc(n + 3);
    memcpy(b2, b, n);
    memset(b2 + n, 0, 3);
    assert_true(write_bytes(bad, b2, n + 3));
    expect_load_error(bad, tiny, "trailing bytes");
    /* a flipped bit in the header's sizes, the payload, the checksum */
    const size_t flips[] = {n / 3, n / 2, n - 4};
    for (size_t i = 0; i < sizeof flips / sizeof flips[0]; i++) {
        memcpy(b2, b, n);
        b2[flips[i]] ^= 0x10;
        assert_true(write_bytes(bad, b2, n));
        expect_load_error(bad, tiny, "checksum mismatch");
    }
    memcpy(b2, b, n);
    b2[104] ^= 0x01; /* payload size */
    assert_true(write_bytes(bad, b2, n));
    expect_load_error(bad, tiny, "inconsistent header");
    memcpy(b2, b, n);
    b2[100] ^= 0x01; /* token count */
    assert_true(write_bytes(bad, b2, n));
    expect_load_error(bad, tiny, "inconsistent header");
    /* magic, version */
    memcpy(b2, b, n);
    b2[0] = 'X';
    assert_true(write_bytes(bad, b2, n));
    expect_load_error(bad, tiny, "not a nextn state file");
    memcpy(b2, b, n);
    b2[8] = 3;
    assert_true(write_bytes(bad, b2, n));
    expect_load_error(bad, tiny, "format version 3");
    /* a missing file */
    expect_load_error(tu_tmp_path("missing.nxs"), tiny, "cannot open");
    /* the good file still loads and restores */
    nextn_state *ld = NULL;
    assert_true(nextn_state_load(&ld, tiny, path, &err));
    assert_true(nextn_state_restore(c, 0, ld, &err));
    free(b2);
    free(b);
    nextn_state_free(ld);
    nextn_state_free(st);
    remove(path);
    remove(bad);
    nextn_context_free(c);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plain_full),
        cmocka_unit_test(test_plain_in_place),
        cmocka_unit_test(test_plain_after_rollback),
        cmocka_unit_test(test_spec_states),
        cmocka_unit_test(test_spec_sampled),
        cmocka_unit_test(test_file_errors),
        cmocka_unit_test(test_quantized_cache_state),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
