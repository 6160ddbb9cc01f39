/* test_api.c - the public API (include/nextn.h) on a tiny synthetic model, through the public
 * header only: loading and its errors, decode outputs, batch == token-by-token, sequences
 * (copy, clear), tokenizer round trips and buffer sizing, streaming UTF-8, sampling. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn.h"
#include "testutil.h"

static char model_path[512];
static nextn_model *model;

static int setup(void **state) {
    (void)state;
    const char *bin = getenv("NEXTN");
    if (!bin) {
        fprintf(stderr, "test_api: $NEXTN (the nextn binary) is not set\n");
        return -1;
    }
    snprintf(model_path, sizeof model_path, "%s", tu_tmp_path("api-tiny.gguf"));
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "\"%s\" mkmodel --preset tiny --type f32 --seed 3 -o \"%s\" >/dev/null", bin, model_path);
    if (system(cmd) != 0) {
        fprintf(stderr, "test_api: %s failed\n", cmd);
        return -1;
    }
    nextn_error err;
    if (!nextn_model_load(&model, model_path, NULL, &err)) {
        fprintf(stderr, "test_api: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nextn_model_free(model);
    remove(model_path);
    return 0;
}

static nextn_context *make_ctx(int32_t n_ctx, int32_t n_seq) {
    nextn_context_params p = nextn_context_default_params();
    p.n_ctx = n_ctx;
    p.n_seq = n_seq;
    p.n_threads = 2;
    nextn_context *c;
    nextn_error err;
    if (!nextn_context_create(&c, model, &p, &err)) fail_msg("%s", err.msg);
    return c;
}

static float max_rel_diff(const float *a, const float *b, int n) {
    float m = 0.0f;
    for (int i = 0; i < n; i++) {
        float d = fabsf(a[i] - b[i]) / (1.0f + fabsf(b[i]));
        if (d > m) m = d;
    }
    return m;
}

/* Every character in s[0..n) is complete (lead byte followed by all its continuation bytes). */
static bool utf8_whole(const char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned char b = (unsigned char)s[i];
        size_t len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
        if (!len || i + len > n) return false;
        for (size_t k = 1; k < len; k++)
            if (((unsigned char)s[i + k] & 0xC0) != 0x80) return false;
        i += len;
    }
    return true;
}

static void test_load_errors(void **state) {
    (void)state;
    nextn_model *m = NULL;
    nextn_error err;
    assert_false(nextn_model_load(&m, "/nonexistent/dir/model.gguf", NULL, &err));
    assert_null(m);
    assert_non_null(strstr(err.msg, "/nonexistent/dir/model.gguf"));
    const char *junk = tu_tmp_path("junk.gguf");
    FILE *f = fopen(junk, "wb");
    fputs("this is not a gguf file at all", f);
    fclose(f);
    assert_false(nextn_model_load(&m, junk, NULL, &err));
    assert_non_null(strstr(err.msg, "junk.gguf"));
    remove(junk);
}

static void test_info_and_context(void **state) {
    (void)state;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    assert_int_equal(info.n_vocab, 512);
    assert_true(info.n_embd > 0 && info.n_layer > 0);
    assert_true(info.has_tokenizer);
    assert_true(info.weight_bytes > 0 && info.file_bytes >= info.weight_bytes);
    assert_true(info.active_bytes == info.weight_bytes && info.n_expert == 0 && info.n_expert_used == 0); /* dense */
    nextn_context *c = make_ctx(64, 2);
    assert_int_equal(nextn_n_ctx(c), 64);
    assert_int_equal(nextn_n_seq(c), 2);
    assert_int_equal(nextn_n_threads(c), 2);
    nextn_memory mem;
    nextn_context_memory(c, &mem);
    assert_true(mem.kv_bytes > 0 && mem.state_bytes > 0);
    assert_int_equal(mem.weight_bytes, info.weight_bytes);
    /* f32 KV is twice the f16 one; a q8_0 cell row is kv_dim/32 blocks of 34 bytes (34/64 of f16),
     * q4_0 blocks of 18 bytes (18/64); K and V types count separately */
    nextn_context_params p = nextn_context_default_params();
    p.n_ctx = 64;
    p.n_seq = 2;
    p.kv_type = NEXTN_KV_F32;
    p.kv_type_v = NEXTN_KV_F32;
    nextn_context *c32;
    nextn_error err;
    assert_true(nextn_context_create(&c32, model, &p, &err));
    nextn_memory mem32;
    nextn_context_memory(c32, &mem32);
    assert_int_equal(mem32.kv_bytes, 2 * mem.kv_bytes);
    nextn_context_free(c32);
    const struct { nextn_kv_type k, v; uint64_t num; } q[] = {
        {NEXTN_KV_Q8_0, NEXTN_KV_Q8_0, 34 + 34}, {NEXTN_KV_Q4_0, NEXTN_KV_Q4_0, 18 + 18}, {NEXTN_KV_Q8_0, NEXTN_KV_F16, 34 + 64},
        {NEXTN_KV_F32, NEXTN_KV_Q4_0, 128 + 18}};
    for (size_t i = 0; i < sizeof q / sizeof q[0]; i++) {
        p.kv_type = q[i].k;
        p.kv_type_v = q[i].v;
        assert_true(nextn_context_create(&c32, model, &p, &err));
        nextn_context_memory(c32, &mem32);
        assert_int_equal(mem32.kv_bytes * 128, mem.kv_bytes * q[i].num);
        nextn_context_free(c32);
    }
    p.kv_type = NEXTN_KV_F16;
    p.kv_type_v = (nextn_kv_type)9;
    assert_false(nextn_context_create(&c32, model, &p, &err));
    if (!strstr(err.msg, "kv_type_v 9")) fail_msg("unexpected message: %s", err.msg);
    p.kv_type_v = NEXTN_KV_F16;
    nextn_context_free(c);
    /* bad parameters are refused with a message */
    p.n_ctx = 0;
    assert_false(nextn_context_create(&c32, model, &p, &err));
    assert_true(strlen(err.msg) > 0);
}

static void test_decode_outputs(void **state) {
    (void)state;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    nextn_context *c = make_ctx(32, 1);
    const int32_t tok[5] = {10, 20, 30, 40, 50}, pos[5] = {0, 1, 2, 3, 4};
    const int8_t want[5] = {0, 1, 0, 1, 1};
    nextn_error err;
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 5, .token = tok, .pos = pos, .logits = want}, &err));
    assert_int_equal(nextn_n_past(c, 0), 5);
    assert_null(nextn_get_logits(c, 0));
    assert_non_null(nextn_get_logits(c, 1));
    assert_null(nextn_get_logits(c, 5));
    assert_null(nextn_get_logits(c, -1));
    for (int r = 0; r < 5; r++) {
        const float *h = nextn_get_hidden(c, r);
        assert_non_null(h);
        for (int i = 0; i < info.n_embd; i++) assert_true(isfinite(h[i]));
    }
    assert_null(nextn_get_hidden(c, 5));
    /* bad batches */
    assert_false(nextn_decode(c, &(nextn_batch){.n_tokens = 0, .token = tok, .pos = pos}, &err));
    assert_false(nextn_decode(c, &(nextn_batch){.n_tokens = 1, .token = NULL, .pos = pos}, &err));
    const int32_t bad_pos = 9; /* must continue at 5 */
    assert_false(nextn_decode(c, &(nextn_batch){.n_tokens = 1, .token = tok, .pos = &bad_pos}, &err));
    assert_true(strlen(err.msg) > 0);
    const int32_t bad_tok = 512, p5 = 5;
    assert_false(nextn_decode(c, &(nextn_batch){.n_tokens = 1, .token = &bad_tok, .pos = &p5}, &err));
    assert_true(strlen(err.msg) > 0);
    nextn_context_free(c);
}

/* One batch of 6 == six single-token decodes; two sequences interleaved == each alone. */
static void test_batch_equals_sequential(void **state) {
    (void)state;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    const int V = info.n_vocab;
    const int32_t tok[6] = {3, 141, 59, 26, 53, 58}, pos[6] = {0, 1, 2, 3, 4, 5};
    const int8_t all[6] = {1, 1, 1, 1, 1, 1};
    nextn_error err;
    nextn_context *a = make_ctx(16, 1), *b = make_ctx(16, 1);
    assert_true(nextn_decode(a, &(nextn_batch){.n_tokens = 6, .token = tok, .pos = pos, .logits = all}, &err));
    for (int i = 0; i < 6; i++) {
        assert_true(nextn_decode(b, &(nextn_batch){.n_tokens = 1, .token = &tok[i], .pos = &pos[i]}, &err));
        float d = max_rel_diff(nextn_get_logits(a, i), nextn_get_logits(b, 0), V);
        if (d > 1e-4f) fail_msg("row %d: batch vs sequential differ by %g", i, d);
    }
    /* two sequences in one batch (interleaved) */
    nextn_context *two = make_ctx(16, 2);
    const int32_t tok2[12] = {3, 7, 141, 7, 59, 7, 26, 7, 53, 7, 58, 7};
    int32_t pos2[12], seq2[12];
    int8_t all2[12];
    for (int i = 0; i < 12; i++) {
        pos2[i] = i / 2;
        seq2[i] = i % 2;
        all2[i] = 1;
    }
    assert_true(nextn_decode(two, &(nextn_batch){.n_tokens = 12, .token = tok2, .pos = pos2, .seq_id = seq2, .logits = all2}, &err));
    for (int i = 0; i < 6; i++) {
        float d = max_rel_diff(nextn_get_logits(two, 2 * i), nextn_get_logits(a, i), V);
        if (d > 1e-4f) fail_msg("row %d: two-sequence batch differs from one sequence by %g", i, d);
    }
    assert_int_equal(nextn_n_past(two, 0), 6);
    assert_int_equal(nextn_n_past(two, 1), 6);
    assert_int_equal(nextn_n_past(two, 2), -1);
    nextn_context_free(a);
    nextn_context_free(b);
    nextn_context_free(two);
}

static void test_sequences(void **state) {
    (void)state;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    const int V = info.n_vocab;
    nextn_context *c = make_ctx(16, 2);
    const int32_t tok[4] = {5, 6, 7, 8}, pos[4] = {0, 1, 2, 3};
    nextn_error err;
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 4, .token = tok, .pos = pos}, &err));
    float *ref = malloc((size_t)V * sizeof *ref);
    memcpy(ref, nextn_get_logits(c, 3), (size_t)V * sizeof *ref);
    /* copy 0 -> 1, then the same next token on both gives the same logits */
    assert_true(nextn_seq_copy(c, 0, 1, &err));
    assert_int_equal(nextn_n_past(c, 1), 4);
    const int32_t nt[2] = {9, 9}, np[2] = {4, 4}, ns[2] = {0, 1};
    const int8_t both[2] = {1, 1};
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 2, .token = nt, .pos = np, .seq_id = ns, .logits = both}, &err));
    assert_true(max_rel_diff(nextn_get_logits(c, 0), nextn_get_logits(c, 1), V) < 1e-5f);
    /* clear, re-decode: same logits as the first time */
    assert_true(nextn_seq_clear(c, 0, &err));
    assert_int_equal(nextn_n_past(c, 0), 0);
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 4, .token = tok, .pos = pos}, &err));
    assert_true(max_rel_diff(nextn_get_logits(c, 3), ref, V) < 1e-5f);
    /* truncate to the current length is a no-op; to 0 clears */
    assert_true(nextn_seq_truncate(c, 0, 4, &err));
    assert_int_equal(nextn_n_past(c, 0), 4);
    assert_true(nextn_seq_truncate(c, 0, 0, &err));
    assert_int_equal(nextn_n_past(c, 0), 0);
    /* without snapshots, dropping part of a batch is refused and changes nothing */
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 4, .token = tok, .pos = pos}, &err));
    assert_false(nextn_seq_truncate(c, 0, 2, &err));
    assert_true(strlen(err.msg) > 0);
    assert_int_equal(nextn_n_past(c, 0), 4);
    assert_true(nextn_seq_clear(c, 0, &err));
    /* bad sequence ids name the limit */
    assert_false(nextn_seq_clear(c, 2, &err));
    assert_non_null(strstr(err.msg, "[0, 2)"));
    assert_false(nextn_seq_copy(c, 0, -1, &err));
    free(ref);
    nextn_context_free(c);
}

/* With snapshots: truncate the last 2 tokens of a batch and decode them again: same logits
 * as the first time; dropping more than n_snapshots is refused. */
static void test_truncate_with_snapshots(void **state) {
    (void)state;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    const int V = info.n_vocab;
    nextn_context_params p = nextn_context_default_params();
    p.n_ctx = 16;
    p.n_snapshots = 3;
    p.n_threads = 2;
    nextn_context *c;
    nextn_error err;
    assert_true(nextn_context_create(&c, model, &p, &err));
    const int32_t tok[4] = {11, 12, 13, 14}, pos[4] = {0, 1, 2, 3};
    const int8_t all[4] = {1, 1, 1, 1};
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 4, .token = tok, .pos = pos, .logits = all}, &err));
    float *ref = malloc((size_t)V * 2 * sizeof *ref);
    memcpy(ref, nextn_get_logits(c, 2), (size_t)V * sizeof *ref);
    memcpy(ref + V, nextn_get_logits(c, 3), (size_t)V * sizeof *ref);
    assert_true(nextn_seq_truncate(c, 0, 2, &err));
    assert_int_equal(nextn_n_past(c, 0), 2);
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 2, .token = tok + 2, .pos = pos + 2, .logits = all}, &err));
    assert_true(max_rel_diff(nextn_get_logits(c, 0), ref, V) < 1e-5f);
    assert_true(max_rel_diff(nextn_get_logits(c, 1), ref + V, V) < 1e-5f);
    /* a new batch of 1 token cannot be dropped (it is the only row), nor 3 tokens back */
    const int32_t one = 15, p4 = 4;
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 1, .token = &one, .pos = &p4}, &err));
    assert_false(nextn_seq_truncate(c, 0, 2, &err));
    assert_int_equal(nextn_n_past(c, 0), 5);
    free(ref);
    nextn_context_free(c);
}

static void test_tokenizer(void **state) {
    (void)state;
    nextn_tokenizer *tok = nextn_model_tokenizer(model);
    assert_non_null(tok);
    const char *text = "Hello, world! \xc3\xa9t\xc3\xa9 \xe2\x82\xac 42";
    int32_t n = 0;
    nextn_error err;
    assert_true(nextn_tokenize(tok, text, strlen(text), false, false, NULL, 0, &n, &err));
    assert_true(n > 0);
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    int32_t small_n = 0;
    assert_false(nextn_tokenize(tok, text, strlen(text), false, false, ids, n - 1, &small_n, &err));
    assert_int_equal(small_n, n);
    assert_true(nextn_tokenize(tok, text, strlen(text), false, false, ids, n, &n, &err));
    size_t len = 0;
    assert_true(nextn_detokenize(tok, ids, n, false, NULL, 0, &len, &err));
    assert_int_equal(len, strlen(text));
    char buf[256];
    assert_false(nextn_detokenize(tok, ids, n, false, buf, len - 1, &len, &err));
    assert_true(nextn_detokenize(tok, ids, n, false, buf, sizeof buf, &len, &err));
    assert_memory_equal(buf, text, strlen(text));
    /* streaming: whole characters only, concatenation == text */
    nextn_stream *st;
    assert_true(nextn_stream_create(&st, tok, false, &err));
    char acc[256];
    size_t acc_len = 0;
    for (int32_t i = 0; i < n; i++) {
        const char *piece;
        size_t plen;
        assert_true(nextn_stream_push(st, ids[i], &piece, &plen, &err));
        assert_true(utf8_whole(piece, plen)); /* never a split character */
        memcpy(acc + acc_len, piece, plen);
        acc_len += plen;
    }
    const char *tail;
    size_t tlen;
    assert_true(nextn_stream_flush(st, &tail, &tlen, &err));
    memcpy(acc + acc_len, tail, tlen);
    acc_len += tlen;
    assert_int_equal(acc_len, strlen(text));
    assert_memory_equal(acc, text, acc_len);
    nextn_stream_free(st);
    /* invalid UTF-8 input is an error, not a crash */
    assert_false(nextn_tokenize(tok, "a\xff" "b", 3, false, false, NULL, 0, &n, &err));
    assert_true(strlen(err.msg) > 0);
    /* end of generation: eos is one */
    int32_t eos = nextn_token_eos(tok);
    assert_true(eos >= 0);
    assert_true(nextn_token_is_eog(tok, eos));
    assert_false(nextn_token_is_eog(tok, 'a'));
    free(ids);
}

static void test_sampling(void **state) {
    (void)state;
    nextn_model_info info;
    nextn_model_get_info(model, &info);
    nextn_context *c = make_ctx(16, 1);
    const int32_t tok[3] = {1, 2, 3}, pos[3] = {0, 1, 2};
    nextn_error err;
    assert_true(nextn_decode(c, &(nextn_batch){.n_tokens = 3, .token = tok, .pos = pos}, &err));
    const float *l = nextn_get_logits(c, 2);
    int32_t best = 0;
    for (int32_t i = 1; i < info.n_vocab; i++)
        if (l[i] > l[best]) best = i;
    nextn_sampler_params sp = nextn_sampler_default_params();
    sp.temp = 0.0f;
    nextn_sampler *s;
    assert_true(nextn_sampler_create(&s, model, &sp, &err));
    int32_t t;
    assert_true(nextn_sampler_sample(s, l, &t, &err));
    assert_int_equal(t, best);
    assert_true(nextn_sampler_accept(s, t, &err));
    assert_false(nextn_sampler_accept(s, info.n_vocab, &err));
    assert_false(nextn_sampler_sample(s, nextn_get_logits(c, 0), &t, &err)); /* row 0 has no logits */
    assert_non_null(strstr(err.msg, "NULL"));
    nextn_sampler_free(s);
    /* seeded sampling through the API is reproducible */
    sp = nextn_sampler_default_params();
    sp.seed = 99;
    sp.top_k = 0;
    sp.min_p = 0.0f;
    sp.temp = 2.0f;
    nextn_sampler *s1, *s2;
    assert_true(nextn_sampler_create(&s1, model, &sp, &err));
    assert_true(nextn_sampler_create(&s2, model, &sp, &err));
    for (int i = 0; i < 50; i++) {
        int32_t a, b;
        assert_true(nextn_sampler_sample(s1, l, &a, &err));
        assert_true(nextn_sampler_sample(s2, l, &b, &err));
        assert_int_equal(a, b);
    }
    /* the processed distribution: top-k 3 at temperature 1 = softmax over the 3 largest logits */
    nextn_sampler_params dp = nextn_sampler_default_params();
    dp.top_k = 3;
    dp.top_p = 1.0f;
    dp.min_p = 0.0f;
    dp.temp = 1.0f;
    nextn_sampler *sd;
    assert_true(nextn_sampler_create(&sd, model, &dp, &err));
    int32_t ids[3], nd = 0;
    float probs[3];
    int32_t small[2];
    float small_p[2];
    assert_false(nextn_sampler_dist(sd, l, small, small_p, 2, &nd, &err));
    assert_int_equal(nd, 3);
    assert_true(nextn_sampler_dist(sd, l, ids, probs, 3, &nd, &err));
    assert_int_equal(nd, 3);
    assert_int_equal(ids[0], best);
    double z = 0.0;
    for (int i = 0; i < 3; i++) z += exp((double)l[ids[i]] - l[best]);
    for (int i = 0; i < 3; i++) {
        assert_float_equal(probs[i], exp((double)l[ids[i]] - l[best]) / z, 1e-6);
        for (int32_t v = 0; v < info.n_vocab; v++) /* nothing outside the kept 3 is larger */
            if (v != ids[0] && v != ids[1] && v != ids[2]) assert_true(l[v] <= l[ids[2]]);
    }
    nextn_sampler_free(sd);
    nextn_sampler_reset(s1);
    nextn_sampler_free(s1);
    nextn_sampler_free(s2);
    sp.top_p = 2.0f;
    assert_false(nextn_sampler_create(&s1, model, &sp, &err));
    assert_non_null(strstr(err.msg, "top_p"));
    nextn_context_free(c);
}

/* nextn_dry_breakers against the tokenizer itself: the one-token breakers are exactly the tokens
 * whose text contains the string; every longer sequence is a token whose text ends with a proper
 * prefix of the string followed by the rest of the string's tokens; every such token has one. */
static void test_dry_breakers(void **state) {
    (void)state;
    nextn_tokenizer *tok = nextn_model_tokenizer(model);
    nextn_model_info mi;
    nextn_model_get_info(model, &mi);
    static const char *const strs[] = {"\n", ":", "e t", "the"};
    nextn_error err;
    for (size_t k = 0; k < sizeof strs / sizeof *strs; k++) {
        nextn_dry_seqs d;
        assert_true(nextn_dry_breakers(tok, &strs[k], 1, mi.n_vocab, &d, &err));
        const char *str = strs[k];
        const size_t sl = strlen(str);
        int32_t n_heads_seen = 0, n_single = 0;
        for (int32_t id = 0; id < mi.n_vocab; id++) {
            char w[512];
            size_t wl = 0;
            assert_true(nextn_detokenize(tok, &id, 1, true, w, sizeof w - 1, &wl, &err));
            w[wl] = '\0';
            const bool contains = wl > 0 && strstr(w, str) != NULL;
            bool ends_with_prefix = false; /* w ends with str[0..i) for some 0 < i < sl */
            for (size_t i = 1; i < sl && !contains; i++)
                ends_with_prefix |= wl >= i && memcmp(w + wl - i, str, i) == 0;
            bool single = false, multi = false;
            for (int32_t q = 0, off = 0; q < d.n; off += d.lens[q++]) {
                if (d.tokens[off] != id) continue;
                if (d.lens[q] == 1) single = true;
                else {
                    multi = true;
                    /* the tail renders the rest of the string after some prefix the token ends with */
                    char t[512];
                    size_t tl = 0;
                    assert_true(nextn_detokenize(tok, d.tokens + off + 1, d.lens[q] - 1, false, t, sizeof t, &tl, &err));
                    assert_true(tl < sl);
                    const size_t i = sl - tl;
                    assert_memory_equal(t, str + i, tl);
                    assert_true(wl >= i && memcmp(w + wl - i, str, i) == 0);
                }
            }
            assert_int_equal(single, contains);
            if (ends_with_prefix) assert_true(multi);
            if (!ends_with_prefix) assert_false(multi);
            n_single += single;
            n_heads_seen += multi;
        }
        assert_true(n_single > 0 || n_heads_seen > 0);
        nextn_dry_seqs_free(&d);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_load_errors),
        cmocka_unit_test(test_dry_breakers),
        cmocka_unit_test(test_info_and_context),
        cmocka_unit_test(test_decode_outputs),
        cmocka_unit_test(test_batch_equals_sequential),
        cmocka_unit_test(test_sequences),
        cmocka_unit_test(test_truncate_with_snapshots),
        cmocka_unit_test(test_tokenizer),
        cmocka_unit_test(test_sampling),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
