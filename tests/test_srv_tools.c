/* test_srv_tools.c - the tool-call parser of `nextn serve` (src/server/srv_tools.c): both Qwen3.5
 * forms into OpenAI calls (hand-written expectations), what stays content, parallel calls,
 * tool_choice naming a function, and the streaming scanner fed byte by byte against the
 * whole-text parse. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_tools.h"

static const char TOOLS[] =
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\","
    "  \"properties\": {\"city\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"},"
    "                  \"units\": {\"type\": [\"string\", \"null\"]}, \"opts\": {\"type\": \"object\"}}}}},"
    " {\"type\": \"function\", \"function\": {\"name\": \"get_time\"}}]";

static nx_srv_tools *tools_new(void) {
    cJSON *j = cJSON_Parse(TOOLS);
    nx_srv_tools *t = NULL;
    nx_err err;
    assert_true(nx_srv_tools_from_json(j, &t, &err));
    cJSON_Delete(j);
    return t;
}

typedef struct parsed {
    nx_buf content;
    nx_srv_tool_call *calls;
    int n;
} parsed;

static parsed parse(const nx_srv_tools *t, const char *text) {
    parsed p = {0};
    assert_true(nx_srv_tools_parse(t, text, strlen(text), &p.content, &p.calls, &p.n));
    return p;
}

static void parsed_free(parsed *p) {
    for (int i = 0; i < p->n; i++) nx_srv_tool_call_free(&p->calls[i]);
    free(p->calls);
    nx_buf_free(&p->content);
}

static void test_json_form(void **state) {
    (void)state;
    nx_srv_tools *t = tools_new();
    parsed p = parse(t, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 3}}\n</tool_call>");
    assert_int_equal(p.n, 1);
    assert_string_equal(p.calls[0].name, "get_weather");
    assert_string_equal(p.calls[0].arguments, "{\"city\":\"Paris\",\"days\":3}");
    assert_string_equal(p.content.data, "");
    parsed_free(&p);
    /* arguments given as a string holding JSON; no arguments at all */
    p = parse(t, "<tool_call>{\"name\": \"get_weather\", \"arguments\": \"{\\\"city\\\": \\\"Rome\\\"}\"}</tool_call>"
                 "<tool_call>{\"name\": \"get_time\"}</tool_call>");
    assert_int_equal(p.n, 2);
    assert_string_equal(p.calls[0].arguments, "{\"city\":\"Rome\"}");
    assert_string_equal(p.calls[1].name, "get_time");
    assert_string_equal(p.calls[1].arguments, "{}");
    parsed_free(&p);
    nx_srv_tools_free(t);
}

static void test_xml_form(void **state) {
    (void)state;
    nx_srv_tools *t = tools_new();
    /* as the Qwen3.5 template writes it: string parameters raw, others as JSON */
    parsed p = parse(t, "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                        "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"hourly\": true}\n</parameter>\n"
                        "</function>\n</tool_call>");
    assert_int_equal(p.n, 1);
    assert_string_equal(p.calls[0].name, "get_weather");
    assert_string_equal(p.calls[0].arguments, "{\"city\":\"Paris\",\"days\":3,\"opts\":{\"hourly\":true}}");
    parsed_free(&p);
    /* a string parameter that looks like a number stays a string; inner newlines are kept;
     * a parameter the schema does not know is JSON when it parses, else a string */
    p = parse(t, "<tool_call>\n<function=get_weather>\n<parameter=city>\n1984\n</parameter>\n"
                 "<parameter=units>\nmetric\nor not\n</parameter>\n<parameter=extra>\n[1, 2]\n</parameter>\n"
                 "<parameter=note>\nhello\n</parameter>\n</function>\n</tool_call>");
    assert_int_equal(p.n, 1);
    assert_string_equal(p.calls[0].arguments,
                        "{\"city\":\"1984\",\"units\":\"metric\\nor not\",\"extra\":[1,2],\"note\":\"hello\"}");
    parsed_free(&p);
    /* no parameters */
    p = parse(t, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
    assert_int_equal(p.n, 1);
    assert_string_equal(p.calls[0].arguments, "{}");
    parsed_free(&p);
    nx_srv_tools_free(t);
}

static void test_content_around_calls(void **state) {
    (void)state;
    nx_srv_tools *t = tools_new();
    parsed p = parse(t, "Let me check the weather.\n\n<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n"
                        "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n</tool_call>\n");
    assert_int_equal(p.n, 2);
    assert_string_equal(p.calls[0].name, "get_time");
    assert_string_equal(p.calls[1].arguments, "{\"city\":\"Oslo\"}");
    assert_string_equal(p.content.data, "Let me check the weather.");
    parsed_free(&p);
    /* no call: the text is returned as it is, whitespace included */
    p = parse(t, "Just text.\n");
    assert_int_equal(p.n, 0);
    assert_string_equal(p.content.data, "Just text.\n");
    parsed_free(&p);
    nx_srv_tools_free(t);
}

static void test_not_calls(void **state) {
    (void)state;
    nx_srv_tools *t = tools_new();
    static const char *const cases[] = {
        /* unknown function */
        "<tool_call>\n<function=launch_rockets>\n</function>\n</tool_call>",
        "<tool_call>{\"name\": \"launch_rockets\", \"arguments\": {}}</tool_call>",
        /* malformed: no </function>, text after it, a parameter twice, bad JSON, arguments not an object */
        "<tool_call>\n<function=get_time>\n</tool_call>",
        "<tool_call>\n<function=get_time>\n</function> and more\n</tool_call>",
        "<tool_call>\n<function=get_weather>\n<parameter=city>\na\n</parameter>\n<parameter=city>\nb\n</parameter>\n"
        "</function>\n</tool_call>",
        "<tool_call>{\"name\": \"get_time\", </tool_call>",
        "<tool_call>{\"name\": \"get_time\", \"arguments\": [1]}</tool_call>",
        "<tool_call>plain words</tool_call>",
        /* never closed */
        "<tool_call>\n<function=get_time>\n</function>\n",
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        parsed p = parse(t, cases[i]);
        assert_int_equal(p.n, 0);
        assert_string_equal(p.content.data, cases[i]); /* everything stays content */
        parsed_free(&p);
    }
    nx_srv_tools_free(t);
}

static void test_parallel_and_only(void **state) {
    (void)state;
    nx_srv_tools *t = tools_new();
    const char *two = "<tool_call>\n<function=get_time>\n</function>\n</tool_call>\n"
                      "<tool_call>\n<function=get_time>\n</function>\n</tool_call>";
    t->parallel = false; /* one call: a second block is content */
    parsed p = parse(t, two);
    assert_int_equal(p.n, 1);
    assert_string_equal(p.content.data, "<tool_call>\n<function=get_time>\n</function>\n</tool_call>");
    parsed_free(&p);
    t->parallel = true;
    t->only = strdup("get_weather"); /* tool_choice names get_weather: a get_time block is content */
    p = parse(t, two);
    assert_int_equal(p.n, 0);
    parsed_free(&p);
    nx_srv_tools_free(t);
}

/* Streaming: the text arrives a byte at a time; the events must add up to the whole-text parse,
 * and no text event may carry a piece of a call. */
static void test_scanner_byte_by_byte(void **state) {
    (void)state;
    nx_srv_tools *t = tools_new();
    const char *text = "I will call <tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                       "</function>\n</tool_call>\n<tool_call>{\"name\": \"get_time\"}</tool_call> then <tool_call>bad"
                       "</tool_call> and a < sign and <tool_ca";
    const size_t len = strlen(text);
    nx_srv_tool_scan sc = {0};
    nx_buf content = {0};
    nx_err err;
    char names[256] = "";
    for (size_t avail = 0; avail <= len; avail++) {
        const bool done = avail == len;
        for (;;) {
            nx_srv_tool_ev ev;
            nx_srv_tool_next(&sc, t, text, avail, done, &ev);
            if (ev.kind == NX_TOOL_EV_NONE) break;
            if (ev.kind == NX_TOOL_EV_TEXT) {
                assert_true(ev.off + ev.n <= avail);
                assert_null(memmem(text + ev.off, ev.n, "<function=", 10));
                assert_true(nx_buf_append(&content, text + ev.off, ev.n, &err));
            } else {
                strcat(names, ev.call.name);
                strcat(names, ";");
                nx_srv_tool_call_free(&ev.call);
            }
        }
    }
    assert_string_equal(names, "get_weather;get_time;");
    /* the whitespace around the calls goes with them; a block that is not a call keeps its own */
    assert_string_equal(content.data, "I will callthen <tool_call>bad</tool_call> and a < sign and <tool_ca");
    parsed p = parse(t, text);
    assert_int_equal(p.n, 2);
    assert_string_equal(p.content.data, content.data);
    parsed_free(&p);
    nx_buf_free(&content);
    nx_srv_tools_free(t);
}

static void test_tools_table_errors(void **state) {
    (void)state;
    static const char *const bad[][2] = {
        {"{}", "'tools' must be an array"},
        {"[{\"type\": \"function\"}]", "'tools'[0] must be"},
        {"[{\"type\": \"code\", \"function\": {\"name\": \"f\"}}]", "'tools'[0] must be"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\"}}, {\"type\": \"function\", \"function\": {\"name\": \"f\"}}]",
         "'tools'[1].function.name 'f' is already"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"a>b\"}}]", "must not contain"},
        {"[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": 3}}]", "parameters must be"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        cJSON *j = cJSON_Parse(bad[i][0]);
        nx_srv_tools *t = NULL;
        nx_err err;
        assert_false(nx_srv_tools_from_json(j, &t, &err));
        assert_null(t);
        if (!strstr(err.msg, bad[i][1])) fail_msg("case %zu: '%s' lacks '%s'", i, err.msg, bad[i][1]);
        cJSON_Delete(j);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_form),
        cmocka_unit_test(test_xml_form),
        cmocka_unit_test(test_content_around_calls),
        cmocka_unit_test(test_not_calls),
        cmocka_unit_test(test_parallel_and_only),
        cmocka_unit_test(test_scanner_byte_by_byte),
        cmocka_unit_test(test_tools_table_errors),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
