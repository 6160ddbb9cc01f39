/* test_serve_tools.c - tool calls end to end: the official OpenAI Node client
 * (tests/openai/tool_loop.mjs) drives a two-step tool loop against a server started here.
 *
 * The demo model does not write tool calls by itself, so the server runs with the test hook
 * nx_server_params.test_force: for a request with tools the reply is a fixed text chosen from
 * the request (below), decoded token by token through the real engine (the forced tokens replace
 * the sampled ones), detokenizer, stop strings, reasoning split, tool-call parser, response and
 * stream shapes.  The expected calls in tool_loop.mjs are written by hand from these texts. */
#include "testutil.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "server/server.h"

static const char CALL_PARIS[] = "<tool_call>\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n"
                                 "<parameter=days>\n2\n</parameter>\n</function>\n</tool_call>";

/* The reply to a request: see tests/openai/tool_loop.mjs for what the client expects of each. */
static char *force(void *user, const char *body, size_t len) {
    (void)user;
    cJSON *o = cJSON_ParseWithLength(body, len);
    char *out = NULL;
    const cJSON *tools = cJSON_GetObjectItem(o, "tools"), *msgs = cJSON_GetObjectItem(o, "messages");
    const cJSON *last = cJSON_GetArrayItem(msgs, cJSON_GetArraySize(msgs) - 1);
    const cJSON *role = cJSON_GetObjectItem(last, "role"), *content = cJSON_GetObjectItem(last, "content");
    const cJSON *choice = cJSON_GetObjectItem(o, "tool_choice");
    char buf[1024];
    if (!cJSON_IsArray(tools) || cJSON_GetArraySize(tools) == 0) {
        out = NULL; /* sample as usual */
    } else if (cJSON_IsString(role) && strcmp(role->valuestring, "tool") == 0) {
        out = strdup("I have the forecast.\n</think>\n\nThe weather in Paris is sunny, 22 degrees.");
    } else if (cJSON_IsObject(choice)) { /* the prompt already opened "<tool_call>\n<function=get_weather>\n" */
        out = strdup(CALL_PARIS + strlen("<tool_call>\n<function=get_weather>\n"));
    } else if (cJSON_IsString(content) && strstr(content->valuestring, "two cities")) {
        snprintf(buf, sizeof buf, "Two cities.\n</think>\n\nChecking both.\n%s\n<tool_call>\n{\"name\": \"get_weather\", "
                 "\"arguments\": {\"city\": \"Rome\", \"days\": 1}}\n</tool_call>", CALL_PARIS);
        out = strdup(buf);
    } else if (cJSON_IsString(choice) && strcmp(choice->valuestring, "none") == 0) {
        out = strdup(CALL_PARIS); /* asked with thinking off: the whole text is content */
    } else {
        snprintf(buf, sizeof buf, "I should call get_weather.\n</think>\n\n%s", CALL_PARIS);
        out = strdup(buf);
    }
    cJSON_Delete(o);
    return out;
}

static void test_tool_loop(void **state) {
    (void)state;
    char cmd[4096];
    snprintf(cmd, sizeof cmd, "bash %s >&2", tu_src_path("tests/openai/setup.sh"));
    if (system(cmd) != 0) fail_msg("tests/openai/setup.sh failed: the official openai client is needed (npm)");

    nextn_model *model = NULL;
    nextn_error merr;
    if (!nextn_model_load(&model, tu_src_path("models/nextn-demo.gguf"), NULL, &merr)) fail_msg("%s", merr.msg);
    nx_server_params p = {0};
    p.host = "127.0.0.1";
    p.port = 0;
    p.api_key = "secret";
    p.model_name = "demo";
    p.timeout_s = 30;
    p.max_body = 1 << 20;
    p.log = stderr;
    p.test_force = force;
    p.chat_format = "chatml"; /* Qwen3.5's template (reasoning + tools); the demo model's own has no <think> */
    p.engine = (nx_srv_engine_params){.n_slots = 2, .n_ctx = 2048, .n_batch = 512, .n_threads = 1,
                                      .kv_type = NEXTN_KV_F32, .kv_type_v = NEXTN_KV_F32, .max_queue = 16, .n_ckpt = 4, .ckpt_every = 256};
    p.defaults.smp = nextn_sampler_default_params();
    p.defaults.max_tokens = 256;
    p.defaults.enable_thinking = true;
    nx_server *srv = NULL;
    nx_err err;
    if (!nx_server_start(&srv, model, &p, &err)) fail_msg("%s", err.msg);
    snprintf(cmd, sizeof cmd, "node %s %s", tu_src_path("tests/openai/tool_loop.mjs"), nx_server_url(srv));
    const int rc = system(cmd);
    nx_server_stop(srv);
    nextn_model_free(model);
    if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) fail_msg("tool_loop.mjs failed (status %d)", rc);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tool_loop),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
