/* test_stop.c - the stop-string automaton (src/sample/stop.c): matches and held-back bytes
 * against a brute-force reference written here (every end position, every string), whatever
 * the split of the text into pieces; overlapping stops, stops split across pieces, UTF-8, the
 * limits, and that feeding costs O(new bytes) (a step count, not a time). */
#include "testutil.h"

#include <stdlib.h>
#include <string.h>

#include "sample/stop.h"

/* Reference: the first end position e (1-based count of bytes) at which some stop string ends;
 * the longest there, then the lowest index.  Returns e (0 = none), *idx the string. */
static size_t ref_first_match(const char *t, size_t n, const char *const *st, int ns, int *idx) {
    for (size_t e = 1; e <= n; e++) {
        int bi = -1;
        size_t bl = 0;
        for (int i = 0; i < ns; i++) {
            const size_t l = strlen(st[i]);
            if (l == 0 || l > e || memcmp(t + e - l, st[i], l) != 0) continue;
            if (l > bl) bl = l, bi = i;
        }
        if (bi >= 0) {
            *idx = bi;
            return e;
        }
    }
    *idx = -1;
    return 0;
}

/* Reference: the longest suffix of t[0..n) that is a proper prefix of some stop string. */
static size_t ref_held(const char *t, size_t n, const char *const *st, int ns) {
    size_t h = 0;
    for (int i = 0; i < ns; i++) {
        const size_t l = strlen(st[i]);
        for (size_t k = l ? l - 1 : 0; k > h; k--)
            if (k <= n && memcmp(t + n - k, st[i], k) == 0) {
                h = k;
                break;
            }
    }
    return h;
}

/* Feeds t in the given pieces; checks held after every piece against the reference and returns
 * the absolute end of the first match (0 none), *idx its string. */
static size_t feed_pieces(nx_stop *s, const char *t, size_t n, const size_t *cuts, int n_cuts,
                          const char *const *st, int ns, int *idx) {
    nx_stop_reset(s);
    size_t at = 0;
    for (int c = 0; c <= n_cuts; c++) {
        const size_t to = c < n_cuts ? cuts[c] : n;
        nx_stop_match m;
        if (nx_stop_feed(s, t + at, to - at, &m)) {
            *idx = m.index;
            assert_int_equal(m.len, strlen(st[m.index]));
            return at + m.end;
        }
        assert_int_equal(m.index, -1);
        at = to;
        assert_int_equal(nx_stop_held(s), ref_held(t, at, st, ns));
    }
    *idx = -1;
    return 0;
}

static nx_stop *build(const char *const *st, int n) {
    nx_stop *s = NULL;
    nx_err err;
    if (!nx_stop_build(&s, st, NULL, n, &err)) fail_msg("build: %s", err.msg);
    return s;
}

static void test_basic_and_overlap(void **state) {
    (void)state;
    static const char *const st[] = {"abcd", "bc", "cde", "xyz", "xy", "aaa"};
    nx_stop *s = build(st, 6);
    nx_stop_match m;
    /* "bc" ends first (at byte 3), before "abcd" can complete */
    assert_true(nx_stop_feed(s, "zabcd", 5, &m));
    assert_int_equal(m.index, 1);
    assert_int_equal(m.end, 4);
    assert_int_equal(m.len, 2);
    /* two end at the same byte: the longest wins ("xyz" is not there, "xy" is) */
    nx_stop_reset(s);
    assert_true(nx_stop_feed(s, "..xy", 4, &m));
    assert_int_equal(m.index, 4);
    /* overlapping occurrences of the same string: "aaaa" matches at the third byte */
    nx_stop_reset(s);
    assert_true(nx_stop_feed(s, "aaaa", 4, &m));
    assert_int_equal(m.index, 5);
    assert_int_equal(m.end, 3);
    /* held back: the longest suffix that is a proper prefix of a stop string */
    nx_stop_reset(s);
    assert_false(nx_stop_feed(s, "hello ab", 8, &m));
    assert_int_equal(m.index, -1);
    assert_int_equal(m.end, 8);
    assert_int_equal(nx_stop_held(s), 2); /* "ab" of "abcd" */
    assert_false(nx_stop_feed(s, "q", 1, &m));
    assert_int_equal(nx_stop_held(s), 0);
    nx_stop_free(s);

    /* identical strings: the lower index; empty strings never match */
    static const char *const dup[] = {"", "end", "end"};
    s = build(dup, 3);
    assert_int_equal(nx_stop_count(s), 3);
    assert_true(nx_stop_feed(s, "the end", 7, &m));
    assert_int_equal(m.index, 1);
    nx_stop_free(s);
    s = build(NULL, 0);
    assert_false(nx_stop_feed(s, "anything", 8, &m));
    assert_int_equal(nx_stop_held(s), 0);
    nx_stop_free(s);
}

static void test_split_across_pieces(void **state) {
    (void)state;
    static const char *const st[] = {"<|im_end|>", "\n\nUser:", "é!", "\xf0\x9f\x98\x80"};
    nx_stop *s = build(st, 4);
    /* "<|im_end|>" one byte at a time: held grows, then matches on the last byte */
    const char *t = "ok<|im_end|>tail";
    nx_stop_match m;
    size_t k = 0;
    for (; k < strlen(t); k++) {
        if (nx_stop_feed(s, t + k, 1, &m)) break;
        assert_int_equal(nx_stop_held(s), k < 2 ? 0 : k - 1);
    }
    assert_int_equal(k, 11);
    assert_int_equal(m.index, 0);
    /* UTF-8: "é!" whose two bytes arrive in different pieces, and an emoji split 1+3 */
    nx_stop_reset(s);
    assert_false(nx_stop_feed(s, "caf\xc3", 4, &m));
    assert_int_equal(nx_stop_held(s), 1);
    assert_false(nx_stop_feed(s, "\xa9", 1, &m));
    assert_int_equal(nx_stop_held(s), 2);
    assert_true(nx_stop_feed(s, "!!", 2, &m));
    assert_int_equal(m.index, 2);
    assert_int_equal(m.end, 1);
    nx_stop_reset(s);
    assert_false(nx_stop_feed(s, "a\xf0", 2, &m));
    assert_true(nx_stop_feed(s, "\x9f\x98\x80", 3, &m));
    assert_int_equal(m.index, 3);
    /* the same code point's bytes after a different lead byte do not match */
    nx_stop_reset(s);
    assert_false(nx_stop_feed(s, "\xc2\xa9!", 3, &m));
    nx_stop_free(s);
}

/* Random stop sets over a 3-letter alphabet (many overlaps), random texts and random splits:
 * the automaton agrees with the brute force on the match and on every held-back count. */
static void test_random_vs_reference(void **state) {
    (void)state;
    tu_rng rng;
    tu_rng_seed(&rng, 1234);
    char stops[6][9];
    const char *st[6];
    for (int iter = 0; iter < 3000; iter++) {
        const int ns = 1 + (int)(tu_rng_u64(&rng) % 6);
        for (int i = 0; i < ns; i++) {
            const int l = 1 + (int)(tu_rng_u64(&rng) % 8);
            for (int k = 0; k < l; k++) stops[i][k] = (char)('a' + tu_rng_u64(&rng) % 3);
            stops[i][l] = '\0';
            st[i] = stops[i];
        }
        char t[64];
        const size_t n = 1 + tu_rng_u64(&rng) % 48;
        for (size_t k = 0; k < n; k++) t[k] = (char)('a' + tu_rng_u64(&rng) % 3);
        size_t cuts[8];
        int n_cuts = (int)(tu_rng_u64(&rng) % 8);
        for (int c = 0; c < n_cuts; c++) cuts[c] = tu_rng_u64(&rng) % (n + 1);
        for (int a = 1; a < n_cuts; a++) /* sort */
            for (int b = a; b > 0 && cuts[b - 1] > cuts[b]; b--) {
                const size_t x = cuts[b];
                cuts[b] = cuts[b - 1];
                cuts[b - 1] = x;
            }
        nx_stop *s = build(st, ns);
        int idx, ridx;
        const size_t e = feed_pieces(s, t, n, cuts, n_cuts, st, ns, &idx);
        const size_t re = ref_first_match(t, n, st, ns, &ridx);
        if (e != re || idx != ridx)
            fail_msg("iter %d: match at %zu (stop %d), reference %zu (stop %d)", iter, e, idx, re, ridx);
        nx_stop_free(s);
    }
}

static void test_limits(void **state) {
    (void)state;
    nx_stop *s = NULL;
    nx_err err;
    const char *st[NX_STOP_MAX_STRINGS + 1];
    for (int i = 0; i <= NX_STOP_MAX_STRINGS; i++) st[i] = "x";
    assert_false(nx_stop_build(&s, st, NULL, NX_STOP_MAX_STRINGS + 1, &err));
    assert_null(s);
    assert_non_null(strstr(err.msg, "'stop'"));
    assert_true(nx_stop_build(&s, st, NULL, NX_STOP_MAX_STRINGS, &err));
    nx_stop_free(s);
    /* bytes: exactly the limit passes, one more is refused */
    const size_t half = NX_STOP_MAX_BYTES / 2;
    char *big = malloc(half + 2);
    assert_non_null(big);
    memset(big, 'q', half + 1);
    big[half + 1] = '\0';
    const char *two[2] = {big, big};
    const size_t ok_lens[2] = {half, half}, bad_lens[2] = {half, half + 1};
    assert_true(nx_stop_build(&s, two, ok_lens, 2, &err));
    nx_stop_free(s);
    assert_false(nx_stop_build(&s, two, bad_lens, 2, &err));
    assert_non_null(strstr(err.msg, "'stop'"));
    assert_non_null(strstr(err.msg, "524288"));
    free(big);
}

/* The attack of issue 32: 16 stop strings of 32 KB that share a 32 KB prefix with the text.
 * The old rescan compared O(text x stops) bytes per piece (minutes for this); here 64 KB are
 * fed one byte at a time and the held-back count is right all along (the cost is bench/, not
 * a timed test). */
static void test_long_stops_linear(void **state) {
    (void)state;
    enum { NS = 16, L = 32 * 1024 };
    char *buf[NS];
    const char *st[NS];
    for (int i = 0; i < NS; i++) {
        buf[i] = malloc(L + 1);
        assert_non_null(buf[i]);
        memset(buf[i], 'a', L);
        buf[i][L - 1] = (char)('A' + i); /* differ only in the last byte */
        buf[i][L] = '\0';
        st[i] = buf[i];
    }
    nx_stop *s = build(st, NS);
    nx_stop_match m;
    for (size_t k = 0; k < 2 * L; k++) {
        assert_false(nx_stop_feed(s, "a", 1, &m));
        if (nx_stop_held(s) != (k + 1 < L - 1 ? k + 1 : L - 1)) fail_msg("held %zu after %zu bytes", nx_stop_held(s), k + 1);
    }
    assert_true(nx_stop_feed(s, "H", 1, &m));
    assert_int_equal(m.index, 7);
    assert_int_equal(m.len, L);
    nx_stop_free(s);
    for (int i = 0; i < NS; i++) free(buf[i]);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_basic_and_overlap),
        cmocka_unit_test(test_split_across_pieces),
        cmocka_unit_test(test_random_vs_reference),
        cmocka_unit_test(test_limits),
        cmocka_unit_test(test_long_stops_linear),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
