/* test_srv_native.c - llama-server's request pieces (srv_native.h), checked against the rules its
 * README and server code state:
 *  - "prompt": a string (BOS when the vocabulary wants one), token ids, ids and strings mixed (BOS
 *    only when a string opens it), {"prompt_string": ...}, several prompts (an array with no
 *    number at its top level); malformed elements refused naming them;
 *  - "logit_bias": {"id": b}, {"text": b} (every token of the text), [[id, b]], [[text, b]],
 *    false = ban; malformed entries refused;
 *  - "samplers": names / letters in the fixed chain order, left-out samplers off;
 *  - slot file names (path traversal and the other refused forms);
 *  - /infill's prompt layout with FIM tokens, truncation of prefix / suffix / extra context;
 *  - the response objects' field names (/completion result, /slots, slot actions).
 * The tokenizer is the hf-qwen35-a fixture's vocabulary plus BOS and the five FIM control tokens. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "convert/hf_tokenizer.h"
#include "server/srv_native.h"
#include "testutil.h"
#include "tokenizer/tokenizer.h"

static nx_hf_vocab hv;
static nx_str *toks;
static int32_t *types;
static nx_tokenizer *itok;
static nextn_tokenizer *tok;
static int32_t V, BOS, PRE, SUF, MID, REP, SEP;

static int setup(void **state) {
    (void)state;
    nx_err err;
    char path[512];
    snprintf(path, sizeof path, "%s", tu_src_path("tests/fixtures/hf-qwen35-a/tokenizer.json"));
    if (!nx_hf_vocab_load(&hv, path, NULL, NULL, &err)) {
        fprintf(stderr, "test_srv_native: %s\n", err.msg);
        return -1;
    }
    static const char *const fim[] = {"<|fim_prefix|>", "<|fim_suffix|>", "<|fim_middle|>", "<|repo_name|>",
                                      "<|file_sep|>"};
    const uint32_t n = hv.n_tokens + 5;
    toks = calloc(n, sizeof *toks);
    types = calloc(n, sizeof *types);
    for (uint32_t i = 0; i < hv.n_tokens; i++) {
        toks[i] = hv.tokens[i];
        types[i] = hv.types[i];
    }
    for (int k = 0; k < 5; k++) {
        toks[hv.n_tokens + k] = (nx_str){fim[k], strlen(fim[k])};
        types[hv.n_tokens + k] = NX_TOKEN_CONTROL;
    }
    nx_vocab_desc d;
    nx_hf_vocab_desc(&hv, &d);
    d.n_tokens = n;
    d.tokens = toks;
    d.types = types;
    d.add_bos = true;
    for (uint32_t i = 0; i < hv.n_tokens; i++)
        if (hv.tokens[i].len == 13 && memcmp(hv.tokens[i].ptr, "<|endoftext|>", 13) == 0) d.bos_id = (int32_t)i;
    if (!nx_tokenizer_create(&itok, &d, &err)) {
        fprintf(stderr, "test_srv_native: %s\n", err.msg);
        return -1;
    }
    tok = (nextn_tokenizer *)itok; /* the public name of the same object */
    V = (int32_t)n;
    BOS = d.bos_id;
    PRE = (int32_t)hv.n_tokens, SUF = PRE + 1, MID = PRE + 2, REP = PRE + 3, SEP = PRE + 4;
    return BOS >= 0 ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nx_tokenizer_free(itok);
    free(toks);
    free(types);
    nx_hf_vocab_free(&hv);
    return 0;
}

/* tokens of text (no BOS), control tokens recognised or not */
static int32_t text_ids(const char *text, bool special, int32_t *out) {
    int32_t n = 0;
    nextn_error e;
    assert_true(nextn_tokenize(tok, text, strlen(text), false, special, out, 256, &n, &e));
    return n;
}

static void want_ids(const int32_t *got, int32_t n_got, const int32_t *want, int32_t n_want) {
    assert_int_equal(n_got, n_want);
    assert_memory_equal(got, want, (size_t)n_want * sizeof *want);
}

static nx_srv_prompts prompts(const char *json, bool ok, const char *msg) {
    cJSON *o = cJSON_Parse(json);
    assert_non_null(o);
    nx_srv_prompts p;
    nx_err err;
    int status = 0;
    const bool r = nx_srv_parse_prompts(o, tok, V, &p, &status, &err);
    cJSON_Delete(o);
    if (ok && !r) fail_msg("%s: %s", json, err.msg);
    if (!ok && r) fail_msg("%s: accepted", json);
    if (!ok) {
        assert_int_equal(status, 400);
        if (!strstr(err.msg, msg)) fail_msg("%s: '%s' lacks '%s'", json, err.msg, msg);
    }
    return p;
}

static void test_prompts(void **state) {
    (void)state;
    int32_t ab[64], want[128];
    const int32_t nab = text_ids("hello world", true, ab);
    assert_true(nab >= 2);
    /* a string: BOS, then its tokens */
    nx_srv_prompts p = prompts("\"hello world\"", true, NULL);
    want[0] = BOS;
    memcpy(want + 1, ab, (size_t)nab * sizeof *ab);
    assert_int_equal(p.count, 1);
    assert_false(p.many);
    want_ids(p.ids[0], p.n[0], want, nab + 1);
    nx_srv_prompts_free(&p);
    /* token ids as given */
    p = prompts("[5, 6, 7]", true, NULL);
    want_ids(p.ids[0], p.n[0], (int32_t[]){5, 6, 7}, 3);
    nx_srv_prompts_free(&p);
    /* mixed, a number first: no BOS */
    p = prompts("[12, \"hello world\", 34]", true, NULL);
    assert_int_equal(p.count, 1);
    want[0] = 12;
    memcpy(want + 1, ab, (size_t)nab * sizeof *ab);
    want[nab + 1] = 34;
    want_ids(p.ids[0], p.n[0], want, nab + 2);
    nx_srv_prompts_free(&p);
    /* mixed, a string first: BOS before it only */
    p = prompts("[\"hello world\", 9, \"hello world\"]", true, NULL);
    want[0] = BOS;
    memcpy(want + 1, ab, (size_t)nab * sizeof *ab);
    want[nab + 1] = 9;
    memcpy(want + nab + 2, ab, (size_t)nab * sizeof *ab);
    want_ids(p.ids[0], p.n[0], want, 2 * nab + 2);
    nx_srv_prompts_free(&p);
    /* control tokens written in a prompt string are recognised */
    p = prompts("\"<|im_start|>\"", true, NULL);
    assert_int_equal(p.n[0], 2);
    assert_int_equal(p.ids[0][1], 297);
    nx_srv_prompts_free(&p);
    /* {"prompt_string": ...} */
    p = prompts("{\"prompt_string\": [3, \"hello world\"]}", true, NULL);
    want[0] = 3;
    memcpy(want + 1, ab, (size_t)nab * sizeof *ab);
    want_ids(p.ids[0], p.n[0], want, nab + 1);
    nx_srv_prompts_free(&p);
    /* several prompts: an array without a number at its top level */
    p = prompts("[\"hello world\", [1, 2], {\"prompt_string\": \"hello world\"}, [4, \"hello world\"]]", true, NULL);
    assert_int_equal(p.count, 4);
    assert_true(p.many);
    want[0] = BOS;
    memcpy(want + 1, ab, (size_t)nab * sizeof *ab);
    want_ids(p.ids[0], p.n[0], want, nab + 1);
    want_ids(p.ids[1], p.n[1], (int32_t[]){1, 2}, 2);
    want_ids(p.ids[2], p.n[2], want, nab + 1);
    want[0] = 4;
    want_ids(p.ids[3], p.n[3], want, nab + 1);
    nx_srv_prompts_free(&p);
    /* an array holding one string is one prompt */
    p = prompts("[\"hello world\"]", true, NULL);
    assert_int_equal(p.count, 1);
    assert_false(p.many);
    nx_srv_prompts_free(&p);
    /* refusals, naming the element */
    prompts("[]", false, "empty array");
    prompts("[1, 2.5]", false, "'prompt'[1]: not a token id");
    char big[64];
    snprintf(big, sizeof big, "[1, %d]", V);
    prompts(big, false, "'prompt'[1]: not a token id");
    prompts("[[1], [2, -1]]", false, "'prompt'[1][1]: not a token id");
    prompts("[\"a\", true]", false, "'prompt'[1] must be");
    prompts("{\"prompt_string\": \"a\", \"multimodal_data\": [\"x\"]}", false, "multimodal");
    prompts("{\"text\": \"a\"}", false, "unknown field 'text'");
    prompts("[[1], []]", false, "'prompt'[1] is empty");
    prompts("42", false, "must be a string");
}

static void bias(const char *json, bool ok, const char *msg, nextn_logit_bias **out, int32_t *n) {
    cJSON *o = cJSON_Parse(json);
    assert_non_null(o);
    nx_err err;
    int status = 0;
    const bool r = nx_srv_parse_logit_bias(o, tok, V, out, n, &status, &err);
    cJSON_Delete(o);
    if (ok && !r) fail_msg("%s: %s", json, err.msg);
    assert_true(r == ok);
    if (!ok) {
        assert_int_equal(status, 400);
        if (!strstr(err.msg, msg)) fail_msg("%s: '%s' lacks '%s'", json, err.msg, msg);
    }
}

static void test_logit_bias(void **state) {
    (void)state;
    nextn_logit_bias *b;
    int32_t n, t[64];
    bias("{\"15\": 1.5, \"16\": false}", true, NULL, &b, &n);
    assert_int_equal(n, 2);
    assert_int_equal(b[0].token, 15);
    assert_true(b[0].bias == 1.5f);
    assert_int_equal(b[1].token, 16);
    assert_true(isinf(b[1].bias) && b[1].bias < 0);
    free(b);
    /* a text key: every token of the text, as plain text (control-token names not recognised) */
    const int32_t nt = text_ids(" of the<|im_start|>", false, t);
    assert_true(nt > 3);
    bias("{\" of the<|im_start|>\": -2}", true, NULL, &b, &n);
    assert_int_equal(n, nt);
    for (int32_t i = 0; i < n; i++) {
        assert_int_equal(b[i].token, t[i]);
        assert_true(b[i].bias == -2.0f);
    }
    free(b);
    bias("[[15, 2], [\" of the<|im_start|>\", false]]", true, NULL, &b, &n);
    assert_int_equal(n, nt + 1);
    assert_int_equal(b[0].token, 15);
    assert_true(b[0].bias == 2.0f);
    assert_int_equal(b[1].token, t[0]);
    assert_true(isinf(b[nt].bias));
    free(b);
    bias("{}", true, NULL, &b, &n);
    assert_int_equal(n, 0);
    free(b);
    char big[64];
    snprintf(big, sizeof big, "{\"%d\": 1}", V);
    bias(big, false, "outside the vocabulary", &b, &n);
    bias("[[15]]", false, "'logit_bias'[0] must be a pair", &b, &n);
    bias("[[15, \"x\"]]", false, "a bias is a finite number, or false", &b, &n);
    bias("[[15, true]]", false, "a bias is a finite number, or false", &b, &n);
    bias("[[1.5, 1]]", false, "integer id or a string", &b, &n);
    bias("{\"\": 1}", false, "has no tokens", &b, &n);
    bias("\"x\"", false, "must be an object", &b, &n);
}

static void samplers(const char *json, bool ok, nextn_sampler_params *p) {
    *p = nextn_sampler_default_params();
    p->penalty_last_n = 64;
    p->temp = 0.5f;
    cJSON *o = cJSON_Parse(json);
    nx_err err;
    int status = 0;
    const bool r = nx_srv_parse_samplers(o, p, &status, &err);
    cJSON_Delete(o);
    if (r != ok) fail_msg("%s: %s", json, r ? "accepted" : err.msg);
}

static void test_samplers(void **state) {
    (void)state;
    nextn_sampler_params p;
    samplers("[\"penalties\", \"top_k\", \"top_p\", \"min_p\", \"temperature\"]", true, &p);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 0.95f && p.min_p == 0.05f && p.temp == 0.5f && p.penalty_last_n == 64);
    samplers("[\"dry\", \"top-k\", \"xtc\", \"Temperature\"]", true, &p);
    assert_int_equal(p.top_k, 40);
    assert_true(p.top_p == 1.0f && p.min_p == 0.0f && p.temp == 0.5f);
    assert_int_equal(p.penalty_last_n, 0);
    samplers("[\"top-k\", \"dry\"]", true, &p); /* DRY after top-k: that order */
    assert_string_equal(p.samplers, "kd");
    /* llama.cpp's further samplers: listed = kept as set, left out = off */
    {
        nextn_sampler_params q = nextn_sampler_default_params();
        q.typ_p = 0.5f;
        q.top_n_sigma = 2.0f;
        q.xtc_probability = 0.5f;
        q.dry_multiplier = 0.8f;
        q.dynatemp_range = 0.3f;
        cJSON *o = cJSON_Parse("[\"top_n_sigma\", \"top_k\", \"typ_p\"]");
        nx_err err;
        int status = 0;
        assert_true(nx_srv_parse_samplers(o, &q, &status, &err));
        cJSON_Delete(o);
        assert_true(q.top_n_sigma == 2.0f && q.typ_p == 0.5f);  /* listed: kept */
        assert_true(q.xtc_probability == 0.0f && q.dry_multiplier == 0.0f && q.dynatemp_range == 0.0f &&
                    q.temp == 1.0f); /* left out: off (no temperature sampler: no dynamic temperature either) */
    }
    samplers("\"edskypmxt\"", true, &p); /* llama.cpp's web UI default */
    samplers("\"kmt\"", true, &p);
    assert_true(p.top_k == 40 && p.top_p == 1.0f && p.min_p == 0.05f);
    samplers("[\"top_k\"]", true, &p);
    assert_true(p.temp == 1.0f); /* no temperature sampler: the distribution unscaled */
    samplers("[\"temperature\", \"top_k\"]", true, &p); /* another order: the sampler runs that chain */
    assert_string_equal(p.samplers, "tk");
    assert_true(p.top_p == 1.0f && p.min_p == 0.0f && p.penalty_last_n == 0);
    samplers("\"kmt\"", true, &p);
    assert_string_equal(p.samplers, ""); /* the default order: no order string */
    samplers("[\"top_k\", \"top_k\"]", false, &p);
    samplers("[\"mirostat\"]", false, &p);
    samplers("\"kz\"", false, &p);
    samplers("[1]", false, &p);
}

static void test_filenames(void **state) {
    (void)state;
    assert_null(nx_srv_bad_filename("slot0.bin"));
    assert_null(nx_srv_bad_filename("caf\xc3\xa9 1.bin"));
    assert_null(nx_srv_bad_filename(".hidden"));
    const char *bad[] = {"", "../x", "a/b", "a\\b", "..", ".", "x.", " x", "x ", "a:b", "a*b", "a?b", "a|b",
                         "a\"b", "a<b", "a>b", "a\x01", "a\x7f", "\xff", "\xc0\xaf", "a..b", ("a\xe2\x88\x95" "b"),
                         "\xef\xbc\x8e"};
    for (size_t i = 0; i < NX_ARRAY_LEN(bad); i++)
        if (!nx_srv_bad_filename(bad[i])) fail_msg("'%s' accepted", bad[i]);
    char longname[300];
    memset(longname, 'a', 256);
    longname[256] = '\0';
    assert_non_null(nx_srv_bad_filename(longname));
    longname[255] = '\0';
    assert_null(nx_srv_bad_filename(longname));
}

static void test_infill(void **state) {
    (void)state;
    nx_srv_fim f;
    nx_srv_fim_tokens(tok, &f);
    assert_int_equal(f.pre, PRE);
    assert_int_equal(f.suf, SUF);
    assert_int_equal(f.mid, MID);
    assert_int_equal(f.rep, REP);
    assert_int_equal(f.sep, SEP);
    int32_t pre[64], suf[64], prm[64], t1[64], t2[64], t3[64], t4[64], want[512];
    const int32_t np = text_ids("def f(x):\n", false, pre), ns = text_ids("\n    return y\n", false, suf),
                  nq = text_ids("  y = x", true, prm), n1 = text_ids("myproject\n", false, t1),
                  n2 = text_ids("a.py\n", false, t2), n3 = text_ids("import os", false, t3),
                  n4 = text_ids("filename\n", false, t4);
    cJSON *o = cJSON_Parse("{\"input_prefix\": \"def f(x):\\n\", \"input_suffix\": \"\\n    return y\\n\", "
                           "\"prompt\": \"  y = x\", \"input_extra\": [{\"filename\": \"a.py\", \"text\": \"import os\"}]}");
    int32_t *ids, n;
    int status;
    nx_err err;
    assert_true(nx_srv_infill_prompt(o, tok, V, &f, 512, 4096, -1, &ids, &n, &status, &err));
    int32_t k = 0;
    want[k++] = REP;
    memcpy(want + k, t1, (size_t)n1 * 4), k += n1;
    want[k++] = SEP;
    memcpy(want + k, t2, (size_t)n2 * 4), k += n2;
    memcpy(want + k, t3, (size_t)n3 * 4), k += n3;
    want[k++] = SEP;
    memcpy(want + k, t4, (size_t)n4 * 4), k += n4;
    want[k++] = BOS;
    want[k++] = PRE;
    memcpy(want + k, pre, (size_t)np * 4), k += np;
    memcpy(want + k, prm, (size_t)nq * 4), k += nq;
    want[k++] = SUF;
    memcpy(want + k, suf, (size_t)ns * 4), k += ns;
    want[k++] = MID;
    want_ids(ids, n, want, k);
    free(ids);
    /* a batch of 8: the last 6 prefix tokens, no suffix (8/4 - (2 + prompt) < 0); n_ctx - n_batch -
     * 2 n_predict = 3 extra tokens, the last ones */
    assert_true(np > 6);
    assert_true(nx_srv_infill_prompt(o, tok, V, &f, 8, 8 + 3 + 2 * 5, 5, &ids, &n, &status, &err));
    const int32_t ext_all = 1 + n1 + 1 + n2 + n3 + 1 + n4;
    int32_t ext[256], e = 0;
    ext[e++] = REP;
    memcpy(ext + e, t1, (size_t)n1 * 4), e += n1;
    ext[e++] = SEP;
    memcpy(ext + e, t2, (size_t)n2 * 4), e += n2;
    memcpy(ext + e, t3, (size_t)n3 * 4), e += n3;
    ext[e++] = SEP;
    memcpy(ext + e, t4, (size_t)n4 * 4), e += n4;
    assert_int_equal(e, ext_all);
    memcpy(want, ext + e - 3, 3 * 4), k = 3;
    want[k++] = BOS;
    want[k++] = PRE;
    memcpy(want + k, pre + np - 6, 6 * 4), k += 6;
    memcpy(want + k, prm, (size_t)nq * 4), k += nq;
    want[k++] = SUF;
    want[k++] = MID;
    want_ids(ids, n, want, k);
    free(ids);
    cJSON_Delete(o);
    /* refusals */
    const char *bad[][2] = {
        {"{\"input_suffix\": \"\"}", "missing 'input_prefix'"},
        {"{\"input_prefix\": \"\", \"input_suffix\": 3}", "'input_suffix' must be"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"prompt\": [1]}", "must be a string"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"input_extra\": {}}", "'input_extra' must be an array"},
        {"{\"input_prefix\": \"\", \"input_suffix\": \"\", \"input_extra\": [{\"filename\": \"a\"}]}",
         "'input_extra'[0] must be an object with a string \"text\""},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(bad); i++) {
        o = cJSON_Parse(bad[i][0]);
        assert_false(nx_srv_infill_prompt(o, tok, V, &f, 512, 4096, -1, &ids, &n, &status, &err));
        assert_int_equal(status, 400);
        if (!strstr(err.msg, bad[i][1])) fail_msg("%s: '%s' lacks '%s'", bad[i][0], err.msg, bad[i][1]);
        cJSON_Delete(o);
    }
}

static void test_shapes(void **state) {
    (void)state;
    nx_srv_req *r = nx_srv_req_new();
    int32_t prompt[] = {BOS, 5, 6};
    r->prompt = malloc(sizeof prompt);
    memcpy(r->prompt, prompt, sizeof prompt);
    r->n_prompt = 3;
    r->smp = nextn_sampler_default_params();
    r->max_tokens = 4;
    r->n_probs = 2;
    r->stop[0] = strdup("xy");
    r->n_stop = 1;
    nextn_logprob lp = {.logprob = -0.5f, .n_top = 2, .top_ids = {7, 8}, .top_logprobs = {-0.5f, -INFINITY}};
    assert_true(nx_srv_req_push_token_locked(r, 7, &lp));
    assert_true(nx_srv_req_append_locked(r, "ab\nxy", 5)); /* the stop string */
    nx_srv_req_finish_locked(r, "stop", NULL);
    r->n_gen = 1;
    cJSON *o = nx_srv_native_result(r, tok, "m", 64, 0, 1, true);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    o = cJSON_Parse(s);
    free(s);
    assert_string_equal(cJSON_GetObjectItem(o, "content")->valuestring, "ab\n");
    assert_string_equal(cJSON_GetObjectItem(o, "stop_type")->valuestring, "word");
    assert_string_equal(cJSON_GetObjectItem(o, "stopping_word")->valuestring, "xy");
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "has_new_line")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(o, "stop")));
    assert_int_equal(cJSON_GetObjectItem(o, "id_slot")->valueint, 1);
    assert_int_equal(cJSON_GetObjectItem(o, "tokens_evaluated")->valueint, 3);
    assert_int_equal(cJSON_GetArrayItem(cJSON_GetObjectItem(o, "tokens"), 0)->valueint, 7);
    const cJSON *gs = cJSON_GetObjectItem(o, "generation_settings");
    assert_int_equal(cJSON_GetObjectItem(gs, "n_predict")->valueint, 4);
    assert_int_equal(cJSON_GetObjectItem(gs, "n_ctx")->valueint, 64);
    const cJSON *cp = cJSON_GetArrayItem(cJSON_GetObjectItem(o, "completion_probabilities"), 0);
    assert_int_equal(cJSON_GetObjectItem(cp, "id")->valueint, 7);
    assert_true(cJSON_GetObjectItem(cp, "logprob")->valuedouble == -0.5);
    const cJSON *top = cJSON_GetObjectItem(cp, "top_logprobs");
    assert_int_equal(cJSON_GetArraySize(top), 2);
    assert_true(cJSON_GetObjectItem(cJSON_GetArrayItem(top, 1), "logprob")->valuedouble < -1e38);
    assert_true(cJSON_IsArray(cJSON_GetObjectItem(cJSON_GetArrayItem(top, 0), "bytes")));
    for (const char *k = "timings\0tokens_cached\0truncated\0prompt\0model\0tokens_predicted\0index\0"; *k;
         k += strlen(k) + 1)
        if (!cJSON_GetObjectItem(o, k)) fail_msg("no '%s'", k);
    cJSON_Delete(o);
    nx_srv_req_unref(r);

    nx_srv_slot_result res = {.n_tokens = 12, .n_bytes = 3456, .ms = 1.5};
    s = nx_srv_slot_result_json(NX_SRV_SLOT_SAVE, 0, "a.bin", &res);
    assert_string_equal(s, "{\"id_slot\":0,\"filename\":\"a.bin\",\"n_saved\":12,\"n_written\":3456,"
                           "\"timings\":{\"save_ms\":1.5}}");
    free(s);
    s = nx_srv_slot_result_json(NX_SRV_SLOT_RESTORE, 1, "a.bin", &res);
    assert_string_equal(s, "{\"id_slot\":1,\"filename\":\"a.bin\",\"n_restored\":12,\"n_read\":3456,"
                           "\"timings\":{\"restore_ms\":1.5}}");
    free(s);
    s = nx_srv_slot_result_json(NX_SRV_SLOT_ERASE, 1, NULL, &res);
    assert_string_equal(s, "{\"id_slot\":1,\"n_erased\":12}");
    free(s);
    nx_srv_slot_info info[1] = {{.id = 0, .processing = true, .n_ctx = 64, .n_tokens = 9, .has_req = true,
                                 .max_tokens = 10, .n_decoded = 4}};
    s = nx_srv_slots_json(info, 1, true);
    o = cJSON_Parse(s);
    free(s);
    const cJSON *s0 = cJSON_GetArrayItem(o, 0);
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(s0, "is_processing")));
    assert_true(cJSON_IsTrue(cJSON_GetObjectItem(s0, "speculative")));
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(s0, "next_token"), "n_remain")->valueint, 6);
    assert_int_equal(cJSON_GetObjectItem(cJSON_GetObjectItem(s0, "params"), "n_predict")->valueint, 10);
    cJSON_Delete(o);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prompts),   cmocka_unit_test(test_logit_bias), cmocka_unit_test(test_samplers),
        cmocka_unit_test(test_filenames), cmocka_unit_test(test_infill),     cmocka_unit_test(test_shapes),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
