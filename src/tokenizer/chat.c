/* chat.c - the Qwen3.5 chat template in C (see chat.h).  Each step below names the template
 * statement it mirrors; tests/test_chat.c compares against the template rendered by Jinja. */
#include "tokenizer/chat.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_json.h"
#include "base/utf8.h"

static const char TOOLS_HEADER[] = "# Tools\n\nYou have access to the following functions:\n\n<tools>";
static const char TOOLS_FOOTER[] =
    "\n</tools>\n\nIf you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
    "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n</parameter>\n"
    "<parameter=example_parameter_2>\nThis is the value for the second parameter\nthat can span\nmultiple lines\n"
    "</parameter>\n</function>\n</tool_call>\n\n<IMPORTANT>\nReminder:\n"
    "- Function calls MUST follow the specified format: an inner <function=...></function> block must be nested "
    "within <tool_call></tool_call> XML tags\n- Required parameters MUST be specified\n"
    "- You may provide optional reasoning for your function call in natural language BEFORE the function call, "
    "but NOT after\n- If there is no function call available, answer the question like normal with your current "
    "knowledge and do not tell the user about function calls\n</IMPORTANT>";

bool nx_chat_format_from_name(const char *name, nx_chat_format *out, nx_err *err) {
    if (!strcmp(name, "chatml")) {
        *out = NX_CHAT_CHATML;
        return true;
    }
    if (!strcmp(name, "chatml-plain")) {
        *out = NX_CHAT_CHATML_PLAIN;
        return true;
    }
    return nx_fail(err, "unknown chat format '%s' (known: chatml, chatml-plain)", name);
}

const char *nx_chat_format_name(nx_chat_format fmt) {
    return fmt == NX_CHAT_CHATML ? "chatml" : fmt == NX_CHAT_CHATML_PLAIN ? "chatml-plain" : "none";
}

bool nx_chat_format_thinks(nx_chat_format fmt) { return fmt == NX_CHAT_CHATML; }

bool nx_chat_detect(const char *tmpl, size_t len, nx_chat_format *out, nx_err *err) {
    if (!tmpl || len == 0)
        return nx_fail(err, "the model has no tokenizer.chat_template; pass chat_format chatml to use ChatML");
    if (memmem(tmpl, len, "<|im_start|>", 12) && memmem(tmpl, len, "<|im_end|>", 10)) {
        *out = memmem(tmpl, len, "<think>", 7) ? NX_CHAT_CHATML : NX_CHAT_CHATML_PLAIN;
        return true;
    }
    return nx_fail(err, "the model's chat template is not a Qwen ChatML template (no <|im_start|>/<|im_end|>); "
                        "pass chat_format chatml to format prompts as ChatML anyway");
}

bool nx_chat_select(const nx_gguf *g, const char *format_name, nx_chat_format *out, nx_err *err) {
    if (format_name) return nx_chat_format_from_name(format_name, out, err);
    nx_str tmpl = {NULL, 0};
    if (g && nx_gguf_find_kv(g, "tokenizer.chat_template") && !nx_gguf_get_str(g, "tokenizer.chat_template", &tmpl, err))
        return false;
    if (!nx_chat_detect(tmpl.ptr, (size_t)tmpl.len, out, err))
        return nx_fail_prefix(err, "%s", g && g->path ? g->path : "model");
    return true;
}

/* ---- string helpers (Python semantics) ------------------------------------------------------ */

typedef struct {
    const char *p;
    size_t n;
} span;

static span span_of(const char *s) { return (span){s ? s : "", s ? strlen(s) : 0}; }

/* Python str.isspace() for one code point. */
static bool py_space(uint32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* Jinja |trim = Python str.strip(): drops leading/trailing whitespace characters.  The input
 * is valid UTF-8 (checked in nx_chat_render). */
static span py_strip(span s) {
    const unsigned char *p = (const unsigned char *)s.p;
    size_t a = 0, b = s.n;
    while (a < b) {
        int k = nx_utf8_char_len(p + a, b - a);
        if (k <= 0 || !py_space(nx_utf8_decode(p + a, k))) break;
        a += (size_t)k;
    }
    while (b > a) {
        size_t st = b - 1;
        while (st > a && (p[st] & 0xC0) == 0x80) st--;
        int k = nx_utf8_char_len(p + st, b - st);
        if (k <= 0 || st + (size_t)k != b || !py_space(nx_utf8_decode(p + st, k))) break;
        b = st;
    }
    return (span){s.p + a, b - a};
}

static const char *find_in(span s, const char *needle) {
    return memmem(s.p, s.n, needle, strlen(needle));
}

static const char *find_last_in(span s, const char *needle) {
    size_t m = strlen(needle);
    const char *last = NULL;
    for (const char *q = s.p; (q = memmem(q, s.n - (size_t)(q - s.p), needle, m)); q++) last = q;
    return last;
}

static bool starts_with(span s, const char *x) { return s.n >= strlen(x) && !memcmp(s.p, x, strlen(x)); }
static bool ends_with(span s, const char *x) { return s.n >= strlen(x) && !memcmp(s.p + s.n - strlen(x), x, strlen(x)); }

static bool put(nx_buf *out, const char *s, nx_err *err) { return nx_buf_append(out, s, strlen(s), err); }
static bool put_span(nx_buf *out, span s, nx_err *err) { return nx_buf_append(out, s.p, s.n, err); }

/* ---- pieces of the template ------------------------------------------------------------------ */

static bool render_tools(const nx_chat_msg *msgs, const nx_chat_opts *o, nx_buf *out, nx_err *err) {
    if (!put(out, "<|im_start|>system\n", err) || !put(out, TOOLS_HEADER, err)) return false;
    for (size_t i = 0; i < o->n_tools; i++) {
        cJSON *tool = cJSON_Parse(o->tools_json[i]);
        if (!tool) return nx_fail(err, "tool %zu: invalid JSON", i);
        bool ok = put(out, "\n", err) && nx_json_dump_py(tool, out, err);
        cJSON_Delete(tool);
        if (!ok) return false;
    }
    if (!put(out, TOOLS_FOOTER, err)) return false;
    if (!strcmp(msgs[0].role, "system")) {
        span c = py_strip(span_of(msgs[0].content));
        if (c.n && (!put(out, "\n\n", err) || !put_span(out, c, err))) return false;
    }
    return put(out, "<|im_end|>\n", err);
}

static bool render_tool_calls(const nx_chat_msg *m, span content, nx_buf *out, nx_err *err) {
    for (size_t i = 0; i < m->n_tool_calls; i++) {
        const nx_chat_tool_call *tc = &m->tool_calls[i];
        if (!tc->name) return nx_fail(err, "tool call %zu has no function name", i);
        const char *open = i > 0 ? "\n<tool_call>\n<function=" : py_strip(content).n ? "\n\n<tool_call>\n<function=" : "<tool_call>\n<function=";
        if (!put(out, open, err) || !put(out, tc->name, err) || !put(out, ">\n", err)) return false;
        if (tc->arguments_json) {
            cJSON *args = cJSON_Parse(tc->arguments_json);
            if (!args || !cJSON_IsObject(args)) {
                cJSON_Delete(args);
                return nx_fail(err, "tool call '%s': arguments are not a JSON object", tc->name);
            }
            const cJSON *a;
            bool ok = true;
            cJSON_ArrayForEach(a, args) {
                ok = put(out, "<parameter=", err) && put(out, a->string, err) && put(out, ">\n", err) &&
                     ((cJSON_IsObject(a) || cJSON_IsArray(a)) ? nx_json_dump_py(a, out, err) : nx_json_str_py(a, out, err)) &&
                     put(out, "\n</parameter>\n", err);
                if (!ok) break;
            }
            cJSON_Delete(args);
            if (!ok) return false;
        }
        if (!put(out, "</function>\n</tool_call>", err)) return false;
    }
    return true;
}

static bool render_assistant(const nx_chat_msg *m, span content, bool after_last_query, bool thinks, nx_buf *out,
                             nx_err *err) {
    if (!thinks) /* a template without <think>: the content as it is, reasoning dropped */
        return put(out, "<|im_start|>assistant\n", err) && put_span(out, content, err) &&
               render_tool_calls(m, content, out, err) && put(out, "<|im_end|>\n", err);
    span reasoning = {"", 0};
    if (m->reasoning_content) {
        reasoning = span_of(m->reasoning_content);
    } else if (find_in(content, "</think>")) {
        /* reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n')
         * content   = content.split('</think>')[-1].lstrip('\n') */
        const char *first_end = find_in(content, "</think>");
        span before = {content.p, (size_t)(first_end - content.p)};
        while (before.n && before.p[before.n - 1] == '\n') before.n--;
        const char *open = find_last_in(before, "<think>");
        if (open) before = (span){open + 7, before.n - (size_t)(open + 7 - before.p)};
        while (before.n && before.p[0] == '\n') before = (span){before.p + 1, before.n - 1};
        reasoning = before;
        const char *last_end = find_last_in(content, "</think>") + 8;
        content = (span){last_end, content.n - (size_t)(last_end - content.p)};
        while (content.n && content.p[0] == '\n') content = (span){content.p + 1, content.n - 1};
    }
    reasoning = py_strip(reasoning);
    bool ok = put(out, "<|im_start|>assistant\n", err);
    if (ok && after_last_query && thinks)
        ok = put(out, "<think>\n", err) && put_span(out, reasoning, err) && put(out, "\n</think>\n\n", err);
    ok = ok && put_span(out, content, err) && render_tool_calls(m, content, out, err) && put(out, "<|im_end|>\n", err);
    return ok;
}

bool nx_chat_render(nx_chat_format fmt, const nx_chat_msg *msgs, size_t n, const nx_chat_opts *opts, nx_buf *out,
                    nx_err *err) {
    static const nx_chat_opts defaults = {false, true, NULL, 0};
    const nx_chat_opts *o = opts ? opts : &defaults;
    if (fmt != NX_CHAT_CHATML && fmt != NX_CHAT_CHATML_PLAIN)
        return nx_fail(err, "chat format %d is not implemented", (int)fmt);
    const bool thinks = nx_chat_format_thinks(fmt);
    if (n == 0) return nx_fail(err, "chat: No messages provided.");
    for (size_t i = 0; i < n; i++) {
        if (!msgs[i].role) return nx_fail(err, "chat: message %zu has no role", i);
        const char *texts[] = {msgs[i].content, msgs[i].reasoning_content};
        for (size_t k = 0; k < 2; k++)
            if (texts[k] && nx_utf8_valid_prefix(texts[k], strlen(texts[k])) != strlen(texts[k]))
                return nx_fail(err, "chat: message %zu: %s is not valid UTF-8", i, k ? "reasoning_content" : "content");
    }
    if (!nx_buf_append(out, "", 0, err)) return false;

    /* {%- if tools %} system block with the tool list {%- else %} plain system message */
    if (o->n_tools > 0) {
        if (!render_tools(msgs, o, out, err)) return false;
    } else if (!strcmp(msgs[0].role, "system")) {
        if (!put(out, "<|im_start|>system\n", err) || !put_span(out, py_strip(span_of(msgs[0].content)), err) ||
            !put(out, "<|im_end|>\n", err))
            return false;
    }

    /* ns.last_query_index: the last user message that is not purely a <tool_response> */
    size_t last_query = 0;
    bool found = false;
    for (size_t i = n; i-- > 0;) {
        if (strcmp(msgs[i].role, "user")) continue;
        span c = py_strip(span_of(msgs[i].content));
        if (!(starts_with(c, "<tool_response>") && ends_with(c, "</tool_response>"))) {
            last_query = i;
            found = true;
            break;
        }
    }
    if (!found) return nx_fail(err, "chat: No user query found in messages.");

    for (size_t i = 0; i < n; i++) {
        const nx_chat_msg *m = &msgs[i];
        span content = py_strip(span_of(m->content));
        bool ok = true;
        if (!strcmp(m->role, "system")) {
            if (i != 0) return nx_fail(err, "chat: System message must be at the beginning.");
        } else if (!strcmp(m->role, "user")) {
            ok = put(out, "<|im_start|>user\n", err) && put_span(out, content, err) && put(out, "<|im_end|>\n", err);
        } else if (!strcmp(m->role, "assistant")) {
            ok = render_assistant(m, content, i > last_query, thinks, out, err);
        } else if (!strcmp(m->role, "tool")) {
            /* consecutive tool results share one user turn */
            if (i > 0 && strcmp(msgs[i - 1].role, "tool")) ok = put(out, "<|im_start|>user", err);
            ok = ok && put(out, "\n<tool_response>\n", err) && put_span(out, content, err) && put(out, "\n</tool_response>", err);
            if (ok && (i + 1 == n || strcmp(msgs[i + 1].role, "tool"))) ok = put(out, "<|im_end|>\n", err);
        } else {
            return nx_fail(err, "chat: Unexpected message role '%s'.", m->role);
        }
        if (!ok) return false;
    }
    if (o->add_generation_prompt)
        return put(out, "<|im_start|>assistant\n", err) &&
               (!thinks || put(out, o->enable_thinking ? "<think>\n" : "<think>\n\n</think>\n\n", err));
    return true;
}
