/* test_tokenizer.c - the BPE tokenizer on a tiny hand-made vocabulary (expected ids worked out
 * by hand from the merge ranks), the qwen2/qwen35 pre-tokenizers on strings where they differ,
 * special tokens, end-of-generation set, decoding, streaming, and every error path.
 * The real-vocabulary checks (llama.cpp vectors, 1.5 MB corpus vs the JS tokenizer) are in
 * test_tokenizer_peer.c. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_regex.h"
#include "base/utf8.h"

/* ---- tiny vocabulary -----------------------------------------------------------------------
 * ids 0..255: the byte-level symbol of byte b is token b (so byte b encodes to id b);
 * 256.. merged tokens and specials as listed below. */
enum { T_HE = 256, T_LL, T_HELL, T_HELLO, T_GW, T_OR, T_GWOR, T_LD, T_GWORLD, T_AA, T_GG,
       T_IM_END, T_THINK, T_EOT, T_SLASH_S, T_PAD, T_IM, N_TINY };

typedef struct tiny {
    char text[N_TINY][32];
    nx_str tokens[N_TINY];
    int32_t types[N_TINY];
    nx_str merges[16];
    uint32_t n_merges;
    nx_vocab_desc desc;
} tiny;

static uint32_t byte_cp(unsigned b) {
    if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) return b;
    uint32_t n = 256;
    for (unsigned x = 0; x < b; x++)
        if (!((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || (x >= 0xAE))) n++;
    return n;
}

static const char *const MERGES[] = {"h e", "l l", "he ll", "hell o", "\xC4\xA0 w", "o r", "\xC4\xA0w or", "l d",
                                     "\xC4\xA0wor ld", "a a", "\xC4\xA0 \xC4\xA0"};

static void tiny_init(tiny *t, const char *pre) {
    memset(t, 0, sizeof *t);
    for (unsigned b = 0; b < 256; b++) {
        nx_utf8_encode(byte_cp(b), t->text[b]);
        t->types[b] = NX_TOKEN_NORMAL;
    }
    const char *extra[] = {"he", "ll", "hell", "hello", "\xC4\xA0w", "or", "\xC4\xA0wor", "ld", "\xC4\xA0world", "aa",
                           "\xC4\xA0\xC4\xA0", "<|im_end|>", "<think>", "<|endoftext|>", "</s>", "[PAD271]", "<|im"};
    const int32_t extra_types[] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, NX_TOKEN_CONTROL, NX_TOKEN_USER_DEFINED,
                                   NX_TOKEN_CONTROL, NX_TOKEN_NORMAL, NX_TOKEN_UNUSED, NX_TOKEN_CONTROL};
    for (int i = 0; i < N_TINY - 256; i++) {
        strcpy(t->text[256 + i], extra[i]);
        t->types[256 + i] = extra_types[i];
    }
    for (int i = 0; i < N_TINY; i++) t->tokens[i] = (nx_str){t->text[i], strlen(t->text[i])};
    t->n_merges = NX_ARRAY_LEN(MERGES);
    for (uint32_t i = 0; i < t->n_merges; i++) t->merges[i] = (nx_str){MERGES[i], strlen(MERGES[i])};
    nx_vocab_desc_init(&t->desc);
    t->desc.name = "tiny";
    t->desc.n_tokens = N_TINY;
    t->desc.tokens = t->tokens;
    t->desc.types = t->types;
    t->desc.n_merges = t->n_merges;
    t->desc.merges = t->merges;
    t->desc.pre = pre;
    t->desc.eos_id = T_IM_END;
}

static nx_tokenizer *tiny_tokenizer(const char *pre) {
    tiny t;
    tiny_init(&t, pre);
    nx_tokenizer *tok = NULL;
    nx_err err;
    if (!nx_tokenizer_create(&tok, &t.desc, &err)) fail_msg("create: %s", err.msg);
    return tok;
}

static void expect_ids(nx_tokenizer *tok, const char *text, bool special, const int32_t *want, size_t n_want) {
    nx_tokens out = {0};
    nx_err err;
    if (!nx_tokenize(tok, text, strlen(text), true, special, &out, &err)) fail_msg("'%s': %s", text, err.msg);
    bool same = out.n == n_want && (n_want == 0 || !memcmp(out.ids, want, n_want * sizeof *want));
    if (!same) {
        char got[512] = "";
        for (size_t i = 0; i < out.n && strlen(got) < 480; i++) snprintf(got + strlen(got), sizeof got - strlen(got), " %d", out.ids[i]);
        fail_msg("'%s': got [%s ]", text, got);
    }
    nx_tokens_free(&out);
}

#define EXPECT(tok, text, special, ...)                                                         \
    do {                                                                                        \
        const int32_t want_[] = {__VA_ARGS__};                                                  \
        expect_ids(tok, text, special, want_, NX_ARRAY_LEN(want_));                             \
    } while (0)

static void test_bpe_merges(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    EXPECT(tok, "hello world", false, T_HELLO, T_GWORLD);
    /* equal ranks: the leftmost pair merges first */
    EXPECT(tok, "aaa", false, T_AA, 'a');
    EXPECT(tok, "aaaa", false, T_AA, T_AA);
    /* "  hello": \s+(?!\S) takes one space, then " hello" is one piece (no "Ġ hello" merge) */
    EXPECT(tok, "  hello", false, ' ', ' ', T_HELLO);
    /* a merge applies only inside a piece: "l" "d" meet across the space boundary here */
    EXPECT(tok, "hel ld", false, T_HE, 'l', ' ', T_LD);
    nx_tokenizer_free(tok);
}

static void test_empty_text(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    nx_tokens out = {0};
    nx_err err;
    assert_true(nx_tokenize(tok, "", 0, true, true, &out, &err));
    assert_int_equal(out.n, 0);
    nx_tokens_free(&out);
    nx_tokenizer_free(tok);
}

static void test_long_pieces(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    /* 1 MB of spaces then a letter: pieces of ~1 MB go through the heap path; "Ġ Ġ" merges
     * pair them leftmost-first */
    size_t n = 1 << 20;
    char *text = malloc(n + 2);
    memset(text, ' ', n);
    text[n] = 'a';
    text[n + 1] = 0;
    nx_tokens out = {0};
    nx_err err;
    assert_true(nx_tokenize(tok, text, n + 1, false, false, &out, &err));
    /* pieces: n-1 spaces (even count -> all pairs), then " a" (no merge) */
    assert_int_equal(out.n, (n - 1) / 2 + 1 + 2);
    for (size_t i = 0; i < (n - 1) / 2; i++) assert_int_equal(out.ids[i], T_GG);
    assert_int_equal(out.ids[(n - 1) / 2], ' ');
    assert_int_equal(out.ids[(n - 1) / 2 + 1], ' ');
    assert_int_equal(out.ids[(n - 1) / 2 + 2], 'a');
    nx_buf dec = {0};
    assert_true(nx_detokenize(tok, out.ids, out.n, true, &dec, &err));
    assert_int_equal(dec.len, n + 1);
    assert_memory_equal(dec.data, text, n + 1);
    /* a long word without any merge: 300 'x' (over the short-piece limit) */
    char word[301];
    memset(word, 'x', 300);
    word[300] = 0;
    nx_tokens w = {0};
    assert_true(nx_tokenize(tok, word, 300, false, false, &w, &err));
    assert_int_equal(w.n, 300);
    nx_tokens_free(&w);
    nx_buf_free(&dec);
    nx_tokens_free(&out);
    free(text);
    nx_tokenizer_free(tok);
}

static void test_specials(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    /* CONTROL only with parse_special; USER_DEFINED always; longest match wins over "<|im" */
    EXPECT(tok, "<|im_end|>", true, T_IM_END);
    EXPECT(tok, "<|im_end|>", false, '<', '|', 'i', 'm', '_', 'e', 'n', 'd', '|', '>');
    EXPECT(tok, "<think>hello", false, T_THINK, T_HELLO);
    EXPECT(tok, "<|imhello", true, T_IM, T_HELLO);
    EXPECT(tok, "hello<|im_end|><|im_end|> world", true, T_HELLO, T_IM_END, T_IM_END, T_GWORLD);
    /* the text around a special is pre-tokenized separately: " " before it stays alone */
    EXPECT(tok, "hello <think>", true, T_HELLO, ' ', T_THINK);
    /* "</s>" is a NORMAL token: never matched as a special (and not an end-of-generation) */
    EXPECT(tok, "</s>", true, '<', '/', 's', '>');
    nx_tokenizer_free(tok);
}

static void test_eog_and_ids(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    assert_true(nx_tokenizer_is_eog(tok, T_IM_END));
    assert_true(nx_tokenizer_is_eog(tok, T_EOT));
    assert_false(nx_tokenizer_is_eog(tok, T_SLASH_S));
    assert_false(nx_tokenizer_is_eog(tok, T_THINK));
    assert_false(nx_tokenizer_is_eog(tok, 'a'));
    uint32_t n;
    const int32_t *eog = nx_tokenizer_eog_ids(tok, &n);
    assert_int_equal(n, 2);
    assert_int_equal(eog[0], T_IM_END);
    assert_int_equal(eog[1], T_EOT);
    assert_int_equal(nx_tokenizer_eos(tok), T_IM_END);
    assert_int_equal(nx_tokenizer_eot(tok), T_IM_END); /* found by text, <|im_end|> comes before <|endoftext|> */
    assert_int_equal(nx_tokenizer_bos(tok), -1);
    assert_int_equal(nx_tokenizer_n_vocab(tok), N_TINY);
    assert_int_equal(nx_tokenizer_find(tok, "hello", 5), T_HELLO);
    assert_int_equal(nx_tokenizer_find(tok, "nope", 4), -1);
    nx_tokenizer_free(tok);

    /* BOS/EOS are added only when the vocabulary asks for them and the caller allows it */
    tiny t;
    tiny_init(&t, "qwen2");
    t.desc.bos_id = T_EOT;
    t.desc.add_bos = true;
    t.desc.add_eos = true;
    nx_err err;
    assert_true(nx_tokenizer_create(&tok, &t.desc, &err));
    nx_tokens out = {0};
    assert_true(nx_tokenize(tok, "aa", 2, true, false, &out, &err));
    assert_int_equal(out.n, 3);
    assert_int_equal(out.ids[0], T_EOT);
    assert_int_equal(out.ids[1], T_AA);
    assert_int_equal(out.ids[2], T_IM_END);
    out.n = 0;
    assert_true(nx_tokenize(tok, "aa", 2, false, false, &out, &err));
    assert_int_equal(out.n, 1);
    nx_tokens_free(&out);
    nx_tokenizer_free(tok);
}

static void test_decode(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    nx_err err;
    nx_buf b = {0};
    int32_t ids[] = {T_HELLO, T_IM_END, T_GWORLD, T_THINK, T_PAD, 0xC3, 0xA9};
    assert_true(nx_detokenize(tok, ids, NX_ARRAY_LEN(ids), false, &b, &err));
    assert_string_equal(b.data, "hello world<think>\xC3\xA9"); /* control hidden, unused empty */
    b.len = 0;
    assert_true(nx_detokenize(tok, ids, NX_ARRAY_LEN(ids), true, &b, &err));
    assert_string_equal(b.data, "hello<|im_end|> world<think>\xC3\xA9");
    /* out of range ids are errors, not crashes */
    int32_t bad[] = {T_HELLO, N_TINY};
    assert_false(nx_detokenize(tok, bad, 2, true, &b, &err));
    assert_non_null(strstr(err.msg, "out of range"));
    assert_non_null(strstr(err.msg, "token 1"));
    assert_false(nx_token_to_piece(tok, -1, true, &b, &err));
    assert_non_null(strstr(err.msg, "-1"));
    uint32_t len;
    assert_null(nx_tokenizer_token_text(tok, N_TINY, &len));
    assert_string_equal(nx_tokenizer_token_text(tok, T_GW, &len), "\xC4\xA0w");
    assert_int_equal(nx_tokenizer_token_type(tok, T_THINK), NX_TOKEN_USER_DEFINED);
    assert_int_equal(nx_tokenizer_token_type(tok, -5), 0);
    nx_buf_free(&b);
    nx_tokenizer_free(tok);
}

static void test_stream(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    nx_err err;
    nx_detok_stream s;
    nx_detok_stream_init(&s, tok, false);
    nx_buf out = {0};
    /* U+1F600 = F0 9F 98 80 arrives one byte token at a time: nothing until complete */
    const int32_t emoji[] = {0xF0, 0x9F, 0x98};
    for (size_t i = 0; i < 3; i++) {
        assert_true(nx_detok_stream_push(&s, emoji[i], &out, &err));
        assert_int_equal(out.len, 0);
    }
    assert_true(nx_detok_stream_push(&s, 0x80, &out, &err));
    assert_string_equal(out.data, "\xF0\x9F\x98\x80");
    /* a control token is hidden and does not disturb a pending sequence */
    assert_true(nx_detok_stream_push(&s, 0xC3, &out, &err));
    assert_true(nx_detok_stream_push(&s, T_IM_END, &out, &err));
    assert_true(nx_detok_stream_push(&s, 0xA9, &out, &err));
    assert_string_equal(out.data, "\xF0\x9F\x98\x80\xC3\xA9");
    /* invalid bytes become U+FFFD right away; a truncated tail becomes U+FFFD at flush */
    out.len = 0;
    assert_true(nx_detok_stream_push(&s, 0xFF, &out, &err));
    assert_true(nx_detok_stream_push(&s, 0xE2, &out, &err));
    assert_true(nx_detok_stream_push(&s, 'a', &out, &err));
    assert_string_equal(out.data, "\xEF\xBF\xBD\xEF\xBF\xBD" "a");
    out.len = 0;
    assert_true(nx_detok_stream_push(&s, 0xE2, &out, &err));
    assert_true(nx_detok_stream_push(&s, 0x82, &out, &err));
    assert_int_equal(out.len, 0);
    assert_true(nx_detok_stream_flush(&s, &out, &err));
    assert_string_equal(out.data, "\xEF\xBF\xBD");
    assert_false(nx_detok_stream_push(&s, 99999, &out, &err));
    assert_non_null(strstr(err.msg, "99999"));
    /* every emitted prefix is valid UTF-8 when streaming a whole encoded text */
    const char *text = "h\xC3\xA9llo w\xF0\x9F\x98\x80rld \xE4\xB8\xAD";
    nx_tokens ids = {0};
    assert_true(nx_tokenize(tok, text, strlen(text), false, false, &ids, &err));
    out.len = 0;
    nx_detok_stream_init(&s, tok, false);
    for (size_t i = 0; i < ids.n; i++) {
        assert_true(nx_detok_stream_push(&s, ids.ids[i], &out, &err));
        assert_int_equal(nx_utf8_valid_prefix(out.data, out.len), out.len);
    }
    assert_true(nx_detok_stream_flush(&s, &out, &err));
    assert_string_equal(out.data, text);
    nx_tokens_free(&ids);
    nx_buf_free(&out);
    nx_tokenizer_free(tok);
}

/* NFC before pre-tokenizing (ids of bytes b are b in the tiny vocabulary; expected code points
 * from the Unicode Character Database: canonical composition, reordering, singletons, Hangul). */
static void test_nfc(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen35");
    assert_true(nx_tokenizer_nfc(tok)); /* qwen35 without a normalizer setting: NFC */
    /* e + U+0301 COMBINING ACUTE -> U+00E9 (C3 A9) */
    EXPECT(tok, "e\xCC\x81", false, 0xC3, 0xA9);
    /* A + U+0308 DIAERESIS + U+0323 DOT BELOW: reordered (ccc 220 before 230), A + U+0323 ->
     * U+1EA0 (E1 BA A0), U+0308 stays (no precomposed A-dot-below-diaeresis) */
    EXPECT(tok, "A\xCC\x88\xCC\xA3", false, 0xE1, 0xBA, 0xA0, 0xCC, 0x88);
    /* U+212B ANGSTROM SIGN -> U+00C5 (singleton decomposition) */
    EXPECT(tok, "\xE2\x84\xAB", false, 0xC3, 0x85);
    /* conjoining jamo U+1112 U+1161 U+11AB -> U+D55C (ED 95 9C) */
    EXPECT(tok, "\xE1\x84\x92\xE1\x85\xA1\xE1\x86\xAB", false, 0xED, 0x95, 0x9C);
    /* U+0958 DEVANAGARI QA is a composition exclusion: -> U+0915 U+093C, not recomposed */
    EXPECT(tok, "\xE0\xA5\x98", false, 0xE0, 0xA4, 0x95, 0xE0, 0xA4, 0xBC);
    /* text that is already NFC is untouched, including precomposed letters */
    EXPECT(tok, "\xC3\xA9hello", false, 0xC3, 0xA9, T_HELLO);
    /* fragments between added tokens are normalised separately (HF's order): no composition
     * across <|im_end|>, but inside each side */
    EXPECT(tok, "e<|im_end|>\xCC\x81" "e\xCC\x81", true, 'e', T_IM_END, 0xCC, 0x81, 0xC3, 0xA9);
    /* a long fragment that outgrows the scratch buffer */
    char big[3 * 5000 + 1];
    for (int i = 0; i < 5000; i++) memcpy(big + 3 * i, "e\xCC\x81", 3);
    big[sizeof big - 1] = 0;
    nx_tokens out = {0};
    nx_err err;
    assert_true(nx_tokenize(tok, big, strlen(big), false, false, &out, &err));
    assert_int_equal(out.n, 10000);
    for (size_t i = 0; i < out.n; i++) assert_int_equal(out.ids[i], i % 2 ? 0xA9 : 0xC3);
    nx_tokens_free(&out);
    /* off: the bytes as given (llama.cpp's behaviour) */
    nx_tokenizer_set_nfc(tok, false);
    assert_false(nx_tokenizer_nfc(tok));
    EXPECT(tok, "e\xCC\x81", false, 'e', 0xCC, 0x81);
    EXPECT(tok, "\xE2\x84\xAB", false, 0xE2, 0x84, 0xAB);
    nx_tokenizer_free(tok);
    /* a vocabulary that declares no normaliser */
    tiny t;
    tiny_init(&t, "qwen2");
    t.desc.normalizer = NX_NORM_NONE;
    assert_true(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_false(nx_tokenizer_nfc(tok));
    EXPECT(tok, "e\xCC\x81", false, 'e', 0xCC, 0x81);
    nx_tokenizer_free(tok);
}

static void test_invalid_utf8(void **state) {
    (void)state;
    nx_tokenizer *tok = tiny_tokenizer("qwen2");
    const char *bad[] = {"ab\xFF", "ab\xC3", "\xED\xA0\x80", "\xC0\xAF", "\xF4\x90\x80\x80", "ok\x80"};
    const size_t at[] = {2, 2, 0, 0, 0, 2};
    for (size_t i = 0; i < NX_ARRAY_LEN(bad); i++) {
        nx_tokens out = {0};
        nx_err err;
        assert_false(nx_tokenize(tok, bad[i], strlen(bad[i]), false, true, &out, &err));
        char want[64];
        snprintf(want, sizeof want, "at offset %zu", at[i]);
        if (!strstr(err.msg, "not valid UTF-8") || !strstr(err.msg, want)) fail_msg("case %zu: %s", i, err.msg);
        nx_tokens_free(&out);
    }
    nx_tokenizer_free(tok);
}

static void test_bad_vocab(void **state) {
    (void)state;
    tiny t;
    nx_tokenizer *tok = NULL;
    nx_err err;
    tiny_init(&t, "qwen2");
    t.desc.n_merges = 0;
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "merges is missing"));

    tiny_init(&t, "qwen2");
    t.merges[2] = (nx_str){"he zz", 5};
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "merge 2 'he zz'"));
    assert_non_null(strstr(err.msg, "right part"));

    tiny_init(&t, "qwen2");
    t.merges[0] = (nx_str){"hello", 5};
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "not of the form"));

    tiny_init(&t, "qwen2");
    t.merges[0] = (nx_str){"a b", 3}; /* "ab" is not a token */
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "merged token"));

    tiny_init(&t, "gpt-4o");
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "'gpt-4o' is not supported"));

    tiny_init(&t, "qwen2");
    t.types[5] = 9;
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "token 5 has type 9"));

    tiny_init(&t, "qwen2");
    t.desc.eos_id = N_TINY;
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "eos_token_id"));

    tiny_init(&t, "qwen2");
    strcpy(t.text[7], "\xFF");
    t.tokens[7] = (nx_str){t.text[7], 1};
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "token 7 is not valid UTF-8"));

    tiny_init(&t, "qwen2");
    strcpy(t.text['z'], "zz"); /* the byte 'z' loses its token */
    t.tokens['z'] = (nx_str){t.text['z'], 2};
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_non_null(strstr(err.msg, "no token for byte 0x7A"));

    tiny_init(&t, "qwen2");
    t.desc.n_tokens = 0;
    assert_false(nx_tokenizer_create(&tok, &t.desc, &err));
    assert_null(tok);
}

/* ---- GGUF path ---------------------------------------------------------------------------- */

/* Writes the tiny vocabulary as tokenizer.ggml.* keys; `what` drops or breaks one key. */
static const char *write_tiny_gguf(const char *what, const char *model) {
    tiny t;
    tiny_init(&t, "qwen2");
    const char *strs[N_TINY];
    for (int i = 0; i < N_TINY; i++) strs[i] = t.text[i];
    nx_err err;
    nx_gguf_writer *w = nx_gguf_writer_new(&err);
    assert_non_null(w);
    assert_true(nx_gguf_add_str(w, "tokenizer.ggml.model", model, &err));
    if (strcmp(what, "no-pre")) assert_true(nx_gguf_add_str(w, "tokenizer.ggml.pre", "qwen2", &err));
    assert_true(nx_gguf_add_arr_str(w, "tokenizer.ggml.tokens", strs, N_TINY, &err));
    assert_true(nx_gguf_add_arr(w, "tokenizer.ggml.token_type", NX_GGUF_INT32, t.types,
                                strcmp(what, "short-types") ? N_TINY : N_TINY - 1, &err));
    if (strcmp(what, "no-merges")) assert_true(nx_gguf_add_arr_str(w, "tokenizer.ggml.merges", MERGES, NX_ARRAY_LEN(MERGES), &err));
    assert_true(nx_gguf_add_u32(w, "tokenizer.ggml.eos_token_id", strcmp(what, "bad-eos") ? T_IM_END : 100000, &err));
    if (!strcmp(what, "nfc-true") || !strcmp(what, "nfc-false"))
        assert_true(nx_gguf_add_bool(w, NX_KEY_NORMALIZER_NFC, !strcmp(what, "nfc-true"), &err));
    if (!strcmp(what, "nfc-str")) assert_true(nx_gguf_add_str(w, NX_KEY_NORMALIZER_NFC, "NFC", &err));
    const char *path = tu_tmp_path(what);
    assert_true(nx_gguf_writer_write(w, path, &err));
    nx_gguf_writer_free(w);
    return path;
}

static bool open_tiny(const char *path, nx_tokenizer **tok, nx_err *err) {
    nx_gguf *g;
    if (!nx_gguf_open(&g, path, err)) return false;
    bool ok = nx_tokenizer_from_gguf(tok, g, err);
    nx_gguf_close(g);
    return ok;
}

static void test_from_gguf(void **state) {
    (void)state;
    nx_tokenizer *tok = NULL;
    nx_err err;
    const char *path = write_tiny_gguf("ok", "gpt2");
    if (!open_tiny(path, &tok, &err)) fail_msg("%s", err.msg);
    EXPECT(tok, "hello world<|im_end|>", true, T_HELLO, T_GWORLD, T_IM_END);
    assert_true(nx_tokenizer_is_eog(tok, T_IM_END));
    assert_true(nx_tokenizer_nfc(tok)); /* no key: qwen2's default */
    EXPECT(tok, "e\xCC\x81", false, 0xC3, 0xA9);
    nx_tokenizer_free(tok);
    remove(path);
    /* tokenizer.ggml.normalizer.nfc decides when present */
    const char *nfc_cases[] = {"nfc-true", "nfc-false"};
    for (int i = 0; i < 2; i++) {
        path = write_tiny_gguf(nfc_cases[i], "gpt2");
        if (!open_tiny(path, &tok, &err)) fail_msg("%s", err.msg);
        assert_int_equal(nx_tokenizer_nfc(tok), i == 0);
        if (i == 0) EXPECT(tok, "e\xCC\x81", false, 0xC3, 0xA9);
        else EXPECT(tok, "e\xCC\x81", false, 'e', 0xCC, 0x81);
        nx_tokenizer_free(tok);
        remove(path);
    }
    struct { const char *what, *model, *msg; } bad[] = {
        {"nfc-str", "gpt2", "tokenizer.ggml.normalizer.nfc"},
        {"no-merges", "gpt2", "tokenizer.ggml.merges is missing"},
        {"no-pre", "gpt2", "tokenizer.ggml.pre"},
        {"short-types", "gpt2", "token_type has 272 entries but tokenizer.ggml.tokens has 273"},
        {"bad-eos", "gpt2", "eos_token_id 100000 is out of range"},
        {"llama", "llama", "only 'gpt2'"},
    };
    for (size_t i = 0; i < NX_ARRAY_LEN(bad); i++) {
        path = write_tiny_gguf(bad[i].what, bad[i].model);
        tok = NULL;
        assert_false(open_tiny(path, &tok, &err));
        assert_null(tok);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("%s: '%s' lacks '%s'", bad[i].what, err.msg, bad[i].msg);
        remove(path);
    }
}

/* ---- pre-tokenizer ------------------------------------------------------------------------ */

typedef struct {
    char out[1024];
} pieces;

static bool collect(void *user, const char *p, size_t n, nx_err *err) {
    (void)err;
    pieces *ps = user;
    size_t l = strlen(ps->out);
    snprintf(ps->out + l, sizeof ps->out - l, "[%.*s]", (int)n, p);
    return true;
}

static void expect_pieces(nx_pretok type, const char *text, const char *want) {
    nx_pretokenizer *p;
    nx_err err;
    if (!nx_pretokenizer_create(&p, type, &err)) fail_msg("%s", err.msg);
    pieces ps = {{0}};
    assert_true(nx_pretokenize(p, text, strlen(text), collect, &ps, &err));
    if (strcmp(ps.out, want)) fail_msg("%s '%s': got %s want %s", type == NX_PRETOK_QWEN35 ? "qwen35" : "qwen2", text, ps.out, want);
    nx_pretokenizer_free(p);
}

static void test_pretok_common(void **state) {
    (void)state;
    for (int t = 0; t < 2; t++) {
        nx_pretok ty = (nx_pretok)t;
        expect_pieces(ty, "Hello world", "[Hello][ world]");
        expect_pieces(ty, "I'M it's we'LL", "[I]['M][ it]['s][ we]['LL]");
        expect_pieces(ty, "12345", "[1][2][3][4][5]");
        expect_pieces(ty, "a  b", "[a][ ][ b]");
        expect_pieces(ty, "x \n\n  y", "[x][ \n\n][ ][ y]");
        expect_pieces(ty, "foo(); // ok!!\n", "[foo][();][ //][ ok][!!\n]");
        /* \s is Unicode White_Space (as in HF/Rust and llama.cpp): U+2003 and U+0085 are spaces,
         * U+180E and U+FEFF are not (PCRE2's own \s would take U+180E, JavaScript's U+FEFF) */
        expect_pieces(ty, "a\xE2\x80\x83\xE2\x80\x83" "b", "[a][\xE2\x80\x83][\xE2\x80\x83" "b]");
        expect_pieces(ty, "a\xC2\x85\xC2\x85" "b", "[a][\xC2\x85][\xC2\x85" "b]");
        expect_pieces(ty, "a\xE1\xA0\x8E\xE1\xA0\x8E" "b", "[a][\xE1\xA0\x8E\xE1\xA0\x8E][b]");
        expect_pieces(ty, "a\xEF\xBB\xBF\xEF\xBB\xBF" "b", "[a][\xEF\xBB\xBF\xEF\xBB\xBF][b]");
    }
}

static void test_pretok_combining_marks(void **state) {
    (void)state;
    /* a + U+0301 + b: qwen2 splits the mark off (it is not \p{L}); qwen35 keeps the word */
    expect_pieces(NX_PRETOK_QWEN2, "a\xCC\x81" "b c", "[a][\xCC\x81" "b][ c]");
    expect_pieces(NX_PRETOK_QWEN35, "a\xCC\x81" "b c", "[a\xCC\x81" "b][ c]");
    /* two marks after a letter: qwen2 makes them a punctuation run */
    expect_pieces(NX_PRETOK_QWEN2, "x\xCC\x81\xCC\x82 y", "[x][\xCC\x81\xCC\x82][ y]");
    expect_pieces(NX_PRETOK_QWEN35, "x\xCC\x81\xCC\x82 y", "[x\xCC\x81\xCC\x82][ y]");
    /* Devanagari "namaste": virama U+094D and vowel sign U+0947 are marks */
    const char *namaste = "\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87";
    expect_pieces(NX_PRETOK_QWEN2, namaste, "[\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8][\xE0\xA5\x8D\xE0\xA4\xA4][\xE0\xA5\x87]");
    expect_pieces(NX_PRETOK_QWEN35, namaste, "[\xE0\xA4\xA8\xE0\xA4\xAE\xE0\xA4\xB8\xE0\xA5\x8D\xE0\xA4\xA4\xE0\xA5\x87]");
    /* a mark after punctuation: qwen35 excludes \p{M} from the punctuation run */
    expect_pieces(NX_PRETOK_QWEN2, "!\xCC\x81", "[!\xCC\x81]");
    expect_pieces(NX_PRETOK_QWEN35, "!\xCC\x81", "[!\xCC\x81]"); /* [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+ */
    expect_pieces(NX_PRETOK_QWEN35, "!!\xCC\x81", "[!!][\xCC\x81]"); /* leftmost alternative wins at "!" */
    expect_pieces(NX_PRETOK_QWEN2, "!!\xCC\x81", "[!!\xCC\x81]");
}

static void test_pretok_names(void **state) {
    (void)state;
    nx_pretok t;
    assert_true(nx_pretok_from_name("qwen2", 5, &t) && t == NX_PRETOK_QWEN2);
    assert_true(nx_pretok_from_name("deepseek-r1-qwen", 16, &t) && t == NX_PRETOK_QWEN2);
    assert_true(nx_pretok_from_name("qwen35", 6, &t) && t == NX_PRETOK_QWEN35);
    assert_false(nx_pretok_from_name("qwen3", 5, &t));
    assert_false(nx_pretok_from_name("llama3", 6, &t));
    /* the documented HF patterns are the tokenizer.json ones */
    assert_non_null(strstr(nx_pretok_hf_pattern(NX_PRETOK_QWEN35), "[\\p{L}\\p{M}]+"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bpe_merges),    cmocka_unit_test(test_empty_text),
        cmocka_unit_test(test_long_pieces),   cmocka_unit_test(test_specials),
        cmocka_unit_test(test_eog_and_ids),   cmocka_unit_test(test_decode),
        cmocka_unit_test(test_stream),        cmocka_unit_test(test_invalid_utf8),
        cmocka_unit_test(test_bad_vocab),     cmocka_unit_test(test_pretok_common),
        cmocka_unit_test(test_pretok_combining_marks), cmocka_unit_test(test_pretok_names),
        cmocka_unit_test(test_from_gguf),     cmocka_unit_test(test_nfc),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
