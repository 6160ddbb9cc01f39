/* test_srv_json.c - the strict JSON checks of `nextn serve` request bodies
 * (src/server/srv_json.c): what cJSON lets through is refused with the field named; valid JSON
 * (RFC 8259 examples, escapes, surrogate pairs, deep-but-allowed nesting) passes. */
#include "testutil.h"

#include <stdio.h>
#include <string.h>

#include "server/srv_json.h"

static void test_valid(void **state) {
    (void)state;
    static const char *const ok[] = {
        "{}",
        " {\"a\": [1, -2.5e3, 0, true, false, null, \"x\"]} \n",
        "{\"s\": \"\\\"\\\\\\/\\b\\f\\n\\r\\t\\u00e9\\ud83d\\ude00\"}",
        "{\"utf8\": \"caf\xc3\xa9 \xf0\x9f\x98\x80\"}",
        "[[[[[[[[[[1]]]]]]]]]]",
        "{\"a\": {\"a\": 1}, \"b\": [{\"a\": 1, \"A\": 2}, {\"a\": 2}], \"ab\": 0, \"a\\u0062c\": 1}", /* one key per object */
        "\"a string\"",
        "3",
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        nx_err err;
        if (!nx_srv_json_check(ok[i], strlen(ok[i]), &err)) fail_msg("case %zu refused: %s", i, err.msg);
    }
}

static void test_refused(void **state) {
    (void)state;
    static const struct {
        const char *body;
        size_t len; /* 0: strlen */
        const char *msg;
    } bad[] = {
        {"{\"prompt\": \"abc\\u0000def\"}", 0, "'prompt' contains a NUL character"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\\u0000\"}]}", 0, "'messages'[0].content contains a NUL"},
        {"{\"stop\": [\"x\", \"\\u0000\"]}", 0, "'stop'[1] contains a NUL"},
        {"{\"prompt\": \"ab\0cd\"}", 17, "'prompt' contains a raw control character 0x00"},
        {"{\"prompt\": \"a\tb\"}", 0, "'prompt' contains a raw control character 0x09"},
        {"{\"stop\": [\"a\xff\"]}", 0, "'stop'[0] is not valid UTF-8 (byte 0xff"},
        {"{\"max_tokens\": 1, \"max_tokens\": 99999}", 0, "the request body has the key 'max_tokens' more than once"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"role\": \"system\"}]}", 0,
         "'messages'[0] has the key 'role' more than once"},
        {"{\"a\": 1, \"\\u0061\": 2}", 0, "has the key 'a' more than once"},
        {"{\"x\": {\"\\ud83d\\ude00\": 1, \"\xf0\x9f\x98\x80\": 2}}", 0, "'x' has the key '\xf0\x9f\x98\x80' more than once"},
        {"{\"prompt\": \"\xc0\xaf\"}", 0, "'prompt' is not valid UTF-8"},       /* overlong */
        {"{\"prompt\": \"\xed\xa0\x80\"}", 0, "'prompt' is not valid UTF-8"},   /* encoded surrogate */
        {"{\"prompt\": \"a\\ud800b\"}", 0, "'prompt' contains a lone surrogate"},
        {"{\"prompt\": \"a\\udc00\"}", 0, "'prompt' contains a lone surrogate"},
        {"{\"k\xff\": 1}", 0, "is not valid UTF-8"},
        {"{\"prompt\": \"x\"} xyz", 0, "data after the JSON value (byte 16"},
        {"{\"prompt\": \"x\"}{}", 0, "data after the JSON value"},
        {"{\"prompt\": \"x\",", 0, "not valid JSON (error near byte 15"},
        {"{\"a\": tru}", 0, "not valid JSON"},
        {"{\"a\": 01}", 0, "not valid JSON"},
        {"{\"a\": \"\\x\"}", 0, "not valid JSON"},
        {"", 0, "not valid JSON"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        nx_err err;
        const size_t len = bad[i].len ? bad[i].len : strlen(bad[i].body);
        if (nx_srv_json_check(bad[i].body, len, &err)) fail_msg("case %zu accepted", i);
        if (!strstr(err.msg, bad[i].msg)) fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i].msg);
    }
}

static void test_depth(void **state) {
    (void)state;
    char deep[2 * NX_SRV_JSON_MAX_DEPTH + 8], ok[2 * NX_SRV_JSON_MAX_DEPTH + 8];
    size_t n = 0;
    for (int i = 0; i <= NX_SRV_JSON_MAX_DEPTH; i++) deep[n++] = '[';
    for (int i = 0; i <= NX_SRV_JSON_MAX_DEPTH; i++) deep[n++] = ']';
    nx_err err;
    assert_false(nx_srv_json_check(deep, n, &err));
    assert_non_null(strstr(err.msg, "deeper than"));
    n = 0;
    for (int i = 0; i < NX_SRV_JSON_MAX_DEPTH; i++) ok[n++] = '[';
    for (int i = 0; i < NX_SRV_JSON_MAX_DEPTH; i++) ok[n++] = ']';
    assert_true(nx_srv_json_check(ok, n, &err));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_valid),
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_depth),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
