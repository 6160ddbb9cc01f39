/* test_chat.c - the C ChatML renderer against the Qwen3.5 template rendered by Jinja2
 * (tests/fixtures/chat/expected/, made by tools/render_chat_fixtures.py), plus the template's
 * error cases and format detection. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat.h"

/* Converts one conversation of conversations.json into nx_chat_msg and renders it.  Strings
 * point into the cJSON tree or into `owned` (printed JSON), freed by the caller. */
static char *render_case(const cJSON *c, nx_err *err, bool *ok) {
    const cJSON *msgs = cJSON_GetObjectItem(c, "messages"), *tools = cJSON_GetObjectItem(c, "tools");
    size_t n = (size_t)cJSON_GetArraySize(msgs), nt = (size_t)cJSON_GetArraySize(tools);
    nx_chat_msg *m = calloc(n, sizeof *m);
    char **owned = calloc(n * 8 + nt + 1, sizeof *owned);
    size_t n_owned = 0;
    const char **tool_texts = calloc(nt + 1, sizeof *tool_texts);
    for (size_t i = 0; i < n; i++) {
        const cJSON *j = cJSON_GetArrayItem(msgs, (int)i);
        m[i].role = cJSON_GetObjectItem(j, "role")->valuestring;
        const cJSON *content = cJSON_GetObjectItem(j, "content"), *rc = cJSON_GetObjectItem(j, "reasoning_content");
        m[i].content = cJSON_IsString(content) ? content->valuestring : NULL;
        m[i].reasoning_content = cJSON_IsString(rc) ? rc->valuestring : NULL;
        const cJSON *calls = cJSON_GetObjectItem(j, "tool_calls");
        size_t nc = (size_t)cJSON_GetArraySize(calls);
        nx_chat_tool_call *tc = calloc(nc + 1, sizeof *tc);
        for (size_t k = 0; k < nc; k++) {
            const cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(calls, (int)k), "function");
            tc[k].name = cJSON_GetObjectItem(fn, "name")->valuestring;
            const cJSON *args = cJSON_GetObjectItem(fn, "arguments");
            if (args) tc[k].arguments_json = owned[n_owned++] = cJSON_PrintUnformatted(args);
        }
        m[i].tool_calls = tc;
        m[i].n_tool_calls = nc;
    }
    for (size_t k = 0; k < nt; k++) tool_texts[k] = owned[n_owned++] = cJSON_PrintUnformatted(cJSON_GetArrayItem(tools, (int)k));
    const cJSON *agp = cJSON_GetObjectItem(c, "add_generation_prompt"), *think = cJSON_GetObjectItem(c, "enable_thinking");
    nx_chat_opts o = {cJSON_IsTrue(agp), think ? cJSON_IsTrue(think) : true, tool_texts, nt};
    nx_buf out = {0};
    *ok = nx_chat_render(NX_CHAT_CHATML, m, n, &o, &out, err);
    for (size_t i = 0; i < n; i++) free((void *)m[i].tool_calls);
    for (size_t i = 0; i < n_owned; i++) free(owned[i]);
    free(owned);
    free(tool_texts);
    free(m);
    return out.data;
}

static void test_matches_jinja_rendering(void **state) {
    (void)state;
    size_t len;
    char *json = tu_read_file(tu_src_path("tests/fixtures/chat/conversations.json"), &len);
    assert_non_null(json);
    cJSON *cases = cJSON_Parse(json);
    assert_non_null(cases);
    int n_cases = 0;
    const cJSON *c;
    cJSON_ArrayForEach(c, cases) {
        const char *name = cJSON_GetObjectItem(c, "name")->valuestring;
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/chat/expected/%s.txt", name);
        size_t elen;
        char *expected = tu_read_file(tu_src_path(path), &elen);
        assert_non_null(expected);
        nx_err err = {{0}};
        bool ok;
        char *got = render_case(c, &err, &ok);
        if (!ok) fail_msg("%s: render failed: %s", name, err.msg);
        if (strlen(got) != elen || memcmp(got, expected, elen) != 0)
            fail_msg("%s: rendering differs from the template\n--- expected\n%s\n--- got\n%s", name, expected, got);
        free(got);
        free(expected);
        n_cases++;
    }
    assert_true(n_cases >= 8);
    cJSON_Delete(cases);
    free(json);
}

static bool render(const nx_chat_msg *m, size_t n, nx_chat_opts *o, nx_buf *out, nx_err *err) {
    return nx_chat_render(NX_CHAT_CHATML, m, n, o, out, err);
}

static void test_template_errors(void **state) {
    (void)state;
    nx_err err;
    nx_buf out = {0};
    assert_false(render(NULL, 0, NULL, &out, &err));
    assert_non_null(strstr(err.msg, "No messages provided"));
    nx_chat_msg late_system[] = {{"user", "hi", NULL, NULL, 0}, {"system", "x", NULL, NULL, 0}};
    assert_false(render(late_system, 2, NULL, &out, &err));
    assert_non_null(strstr(err.msg, "System message must be at the beginning"));
    nx_chat_msg no_query[] = {{"system", "s", NULL, NULL, 0}, {"user", " <tool_response>r</tool_response>\n", NULL, NULL, 0}};
    assert_false(render(no_query, 2, NULL, &out, &err));
    assert_non_null(strstr(err.msg, "No user query found"));
    nx_chat_msg bad_role[] = {{"user", "hi", NULL, NULL, 0}, {"robot", "x", NULL, NULL, 0}};
    assert_false(render(bad_role, 2, NULL, &out, &err));
    assert_non_null(strstr(err.msg, "robot"));
    nx_chat_msg bad_utf8[] = {{"user", "h\xC3(", NULL, NULL, 0}};
    assert_false(render(bad_utf8, 1, NULL, &out, &err));
    assert_non_null(strstr(err.msg, "UTF-8"));
    nx_chat_tool_call bad_args = {"f", "[1, 2]"};
    nx_chat_msg bad_call[] = {{"user", "hi", NULL, NULL, 0}, {"assistant", "", NULL, &bad_args, 1}};
    assert_false(render(bad_call, 2, NULL, &out, &err));
    assert_non_null(strstr(err.msg, "not a JSON object"));
    const char *bad_tool[] = {"{oops"};
    nx_chat_opts o = {true, true, bad_tool, 1};
    nx_chat_msg hi[] = {{"user", "hi", NULL, NULL, 0}};
    assert_false(render(hi, 1, &o, &out, &err));
    assert_non_null(strstr(err.msg, "tool 0"));
    nx_buf_free(&out);
}

static void test_trim_is_python_strip(void **state) {
    (void)state;
    /* U+3000 and U+0085 are whitespace to Python's str.strip(); U+200B is not */
    nx_chat_msg m[] = {{"user", "\xE3\x80\x80 x \xC2\x85", NULL, NULL, 0}, {"user", "\xE2\x80\x8By", NULL, NULL, 0}};
    nx_buf out = {0};
    nx_err err;
    assert_true(render(m, 2, NULL, &out, &err));
    assert_string_equal(out.data, "<|im_start|>user\nx<|im_end|>\n<|im_start|>user\n\xE2\x80\x8By<|im_end|>\n");
    nx_buf_free(&out);
}

static void test_detect(void **state) {
    (void)state;
    /* the ChatML markers as a Qwen template writes them (the full Qwen3.5 template is not
     * committed; see tests/fixtures/README.md, chat/) */
    const char *tmpl = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' + "
                       "message.content + '<|im_end|>' + '\\n' }}{%- endfor %}";
    nx_chat_format f = NX_CHAT_NONE;
    nx_err err;
    assert_true(nx_chat_detect(tmpl, strlen(tmpl), &f, &err));
    assert_int_equal(f, NX_CHAT_CHATML_PLAIN); /* no <think> in it: it cannot think */
    assert_false(nx_chat_format_thinks(f));
    const char *qwen = "{%- for message in messages %}{{- '<|im_start|>' + message.role + '\\n' }}{%- endfor %}"
                       "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n<think>\\n' }}{%- endif %}<|im_end|>";
    assert_true(nx_chat_detect(qwen, strlen(qwen), &f, &err));
    assert_int_equal(f, NX_CHAT_CHATML);
    assert_true(nx_chat_format_thinks(f));
    assert_true(nx_chat_format_from_name("chatml-plain", &f, &err));
    assert_int_equal(f, NX_CHAT_CHATML_PLAIN);
    assert_string_equal(nx_chat_format_name(f), "chatml-plain");
    const char *llama3 = "{{ '<|start_header_id|>' + message['role'] + '<|end_header_id|>' }}";
    assert_false(nx_chat_detect(llama3, strlen(llama3), &f, &err));
    assert_non_null(strstr(err.msg, "chat_format chatml"));
    assert_false(nx_chat_detect(NULL, 0, &f, &err));
    assert_non_null(strstr(err.msg, "chat_format chatml"));
    assert_true(nx_chat_format_from_name("chatml", &f, &err));
    assert_false(nx_chat_format_from_name("llama3", &f, &err));
    assert_non_null(strstr(err.msg, "llama3"));
}

/* chatml-plain renders what the demo model's template (no <think>) renders: the generation
 * prompt is the bare assistant header whatever enable_thinking says, an assistant turn is its
 * content (a </think> in it is not split off).  Expected text written from that template:
 * '<|im_start|>' + role + '\n' + content + '<|im_end|>\n' per message, then
 * '<|im_start|>assistant\n'. */
static void test_plain_has_no_think(void **state) {
    (void)state;
    const nx_chat_msg m[] = {{.role = "system", .content = "Be brief."},
                             {.role = "user", .content = "hi"},
                             {.role = "assistant", .content = "a</think>b", .reasoning_content = "r"},
                             {.role = "user", .content = "again"}};
    for (int think = 0; think < 2; think++) {
        nx_chat_opts o = {.add_generation_prompt = true, .enable_thinking = think};
        nx_buf out = {0};
        nx_err err;
        assert_true(nx_chat_render(NX_CHAT_CHATML_PLAIN, m, 4, &o, &out, &err));
        assert_string_equal(out.data, "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n"
                                      "<|im_start|>assistant\na</think>b<|im_end|>\n<|im_start|>user\nagain<|im_end|>\n"
                                      "<|im_start|>assistant\n");
        nx_buf_free(&out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_jinja_rendering),
        cmocka_unit_test(test_template_errors),
        cmocka_unit_test(test_trim_is_python_strip),
        cmocka_unit_test(test_detect),
        cmocka_unit_test(test_plain_has_no_think),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
