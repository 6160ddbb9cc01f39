/* srv_openai.c - OpenAI-compatible request parsing and response building (see srv_openai.h). */
#include "server/srv_openai.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn_internal.h"
#include "server/srv_json.h"
#include "server/srv_params.h"
#include "server/srv_tools.h"

/* ---- request fields ---------------------------------------------------------------------- */

static bool bad(int *status, int code, nx_err *err, const char *fmt, const char *field) {
    *status = code;
    return nx_fail(err, fmt, field);
}

/* Optional number field within [lo, hi]; absent or null leaves *out unchanged. */
static bool get_num(const cJSON *o, const char *key, double lo, double hi, double *out, int *status, nx_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)) return bad(status, 400, err, "'%s' must be a number", key);
    if (v->valuedouble < lo || v->valuedouble > hi) {
        *status = 400;
        return nx_fail(err, "'%s' = %g is out of range [%g, %g]", key, v->valuedouble, lo, hi);
    }
    *out = v->valuedouble;
    return true;
}

static bool get_float(const cJSON *o, const char *key, double lo, double hi, float *out, int *status, nx_err *err) {
    double d = *out;
    if (!get_num(o, key, lo, hi, &d, status, err)) return false;
    *out = (float)d;
    return true;
}

static bool get_int(const cJSON *o, const char *key, double lo, double hi, int32_t *out, int *status, nx_err *err) {
    double d = *out;
    if (!get_num(o, key, lo, hi, &d, status, err)) return false;
    if (d != floor(d)) return bad(status, 400, err, "'%s' must be an integer", key);
    *out = (int32_t)d;
    return true;
}

static bool get_bool(const cJSON *o, const char *key, bool *out, int *status, nx_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsBool(v)) return bad(status, 400, err, "'%s' must be true or false", key);
    *out = cJSON_IsTrue(v);
    return true;
}

static bool add_stop(nx_srv_req *r, const cJSON *v, int *status, nx_err *err) {
    if (!cJSON_IsString(v)) return bad(status, 400, err, "'%s' must be a string or an array of strings", "stop");
    return nx_srv_req_add_stop(r, v->valuestring, false, NX_SRV_MAX_STOP, status, err);
}

static bool parse_stop(const cJSON *o, nx_srv_req *r, int *status, nx_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "stop");
    if (!v || cJSON_IsNull(v)) return true;
    if (!cJSON_IsArray(v)) return add_stop(r, v, status, err);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) if (!add_stop(r, it, status, err)) return false;
    return true;
}

/* ---- prompts ------------------------------------------------------------------------------ */

static bool tokenize_text(nextn_tokenizer *tok, const char *text, size_t len, bool parse_special, nx_srv_req *r,
                          int *status, nx_err *err) {
    int32_t cap = (int32_t)NX_MIN(len + 16, (size_t)INT32_MAX / 8);
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return bad(status, 500, err, "out of memory tokenizing the %s", "prompt");
    int32_t n = 0;
    nextn_error terr;
    if (!nextn_tokenize(tok, text, len, nextn_tokenizer_add_bos(tok), parse_special, ids, cap, &n, &terr)) {
        free(ids);
        *status = 400;
        return nx_fail(err, "prompt: %s", terr.msg);
    }
    r->prompt = ids;
    r->n_prompt = n;
    return true;
}

/* "prompt" of /v1/completions: one prompt in any of llama-server's forms (srv_native.h). */
static bool parse_prompt(const cJSON *o, nextn_tokenizer *tok, int32_t n_vocab, nx_srv_req *r, int *status,
                         nx_err *err) {
    nx_srv_prompts p;
    if (!nx_srv_parse_prompts(cJSON_GetObjectItemCaseSensitive(o, "prompt"), tok, n_vocab, &p, status, err))
        return false;
    if (p.count != 1) {
        nx_srv_prompts_free(&p);
        return bad(status, 400, err, "'%s' holds several prompts: /v1/completions takes one (POST /completion "
                                     "answers several)", "prompt");
    }
    r->prompt = p.ids[0];
    r->n_prompt = p.n[0];
    p.count = 0;
    return true;
}

/* Strict nested objects: a key of obj outside keys[] is a 400 naming its path (path: the
 * object's, e.g. 'messages'[2]).  Keys in `echo` (fields of a response a client may send back
 * unchanged) pass only when null or empty. */
static bool only_keys(const cJSON *obj, const char *const *keys, size_t n, const char *const *echo, size_t n_echo,
                      const char *path, int *status, nx_err *err) {
    const cJSON *it;
    cJSON_ArrayForEach(it, obj) {
        bool known = false;
        for (size_t k = 0; k < n && !known; k++) known = strcmp(it->string, keys[k]) == 0;
        for (size_t k = 0; k < n_echo && !known; k++)
            known = strcmp(it->string, echo[k]) == 0 &&
                    (cJSON_IsNull(it) || ((cJSON_IsArray(it) || cJSON_IsObject(it)) && !it->child) ||
                     (cJSON_IsString(it) && !it->valuestring[0]));
        if (!known) {
            *status = 400;
            return nx_fail(err, "%s.%.100s is not a known field (this server does not support it)", path, it->string);
        }
    }
    return true;
}

/* A message's "content": a string, null, or an array of {"type": "text", "text": ...} parts
 * (concatenated).  Returns a malloc'ed string in *out (NULL for null). */
static bool message_content(const cJSON *m, int idx, char **out, int *status, nx_err *err) {
    *out = NULL;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
    if (!c || cJSON_IsNull(c)) return true;
    if (cJSON_IsString(c)) {
        *out = strdup(c->valuestring);
        return *out ? true : bad(status, 500, err, "out of memory (%s)", "messages");
    }
    if (!cJSON_IsArray(c)) {
        *status = 400;
        return nx_fail(err, "'messages'[%d].content must be a string, null or an array of text parts", idx);
    }
    nx_buf b = {0};
    const cJSON *part;
    int j = 0;
    cJSON_ArrayForEach(part, c) {
        static const char *const part_keys[] = {"type", "text"};
        char path[64];
        snprintf(path, sizeof path, "'messages'[%d].content[%d]", idx, j++);
        if (cJSON_IsObject(part) && !only_keys(part, part_keys, 2, NULL, 0, path, status, err)) {
            nx_buf_free(&b);
            return false;
        }
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(type) || strcmp(type->valuestring, "text") != 0 || !cJSON_IsString(text)) {
            nx_buf_free(&b);
            *status = 400;
            return nx_fail(err, "'messages'[%d].content: only {\"type\": \"text\", \"text\": ...} parts are supported",
                           idx);
        }
        if (!nx_buf_append(&b, text->valuestring, strlen(text->valuestring), err)) {
            nx_buf_free(&b);
            *status = 500;
            return false;
        }
    }
    *out = b.data ? b.data : strdup("");
    return *out ? true : bad(status, 500, err, "out of memory (%s)", "messages");
}

/* Everything the rendered conversation points into; freed together. */
typedef struct chat_parts {
    nx_chat_msg *msgs;
    char **owned; /* strings to free */
    size_t n_owned, cap_owned;
    nx_chat_tool_call *calls;
    char **tools;
    size_t n_tools;
} chat_parts;

static void chat_parts_free(chat_parts *cp) {
    for (size_t i = 0; i < cp->n_owned; i++) free(cp->owned[i]);
    free(cp->owned);
    free(cp->msgs);
    free(cp->calls);
    free(cp->tools);
}

static bool keep(chat_parts *cp, char *s) {
    if (!s) return true;
    if (cp->n_owned == cp->cap_owned) {
        size_t nc = cp->cap_owned ? cp->cap_owned * 2 : 16;
        char **p = realloc(cp->owned, nc * sizeof *p);
        if (!p) {
            free(s);
            return false;
        }
        cp->owned = p;
        cp->cap_owned = nc;
    }
    cp->owned[cp->n_owned++] = s;
    return true;
}

static char *dump_py(const cJSON *v) {
    nx_buf b = {0};
    nx_err e;
    if (!nx_json_dump_py(v, &b, &e)) {
        nx_buf_free(&b);
        return NULL;
    }
    return b.data ? b.data : strdup("");
}

static bool parse_messages(const cJSON *o, chat_parts *cp, size_t *n_msgs, int *status, nx_err *err) {
    const cJSON *ms = cJSON_GetObjectItemCaseSensitive(o, "messages");
    if (!cJSON_IsArray(ms) || cJSON_GetArraySize(ms) == 0)
        return bad(status, 400, err, "'%s' must be a non-empty array of messages", "messages");
    const int n = cJSON_GetArraySize(ms);
    size_t n_calls = 0;
    const cJSON *m;
    cJSON_ArrayForEach(m, ms) n_calls += (size_t)cJSON_GetArraySize(cJSON_GetObjectItemCaseSensitive(m, "tool_calls"));
    cp->msgs = calloc((size_t)n, sizeof *cp->msgs);
    cp->calls = calloc(n_calls + 1, sizeof *cp->calls);
    if (!cp->msgs || !cp->calls) return bad(status, 500, err, "out of memory (%s)", "messages");
    int i = 0;
    size_t call = 0;
    cJSON_ArrayForEach(m, ms) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        if (!cJSON_IsObject(m) || !cJSON_IsString(role)) {
            *status = 400;
            return nx_fail(err, "'messages'[%d] must be an object with a string 'role'", i);
        }
        static const char *const msg_keys[] = {"role", "content", "name", "reasoning_content", "tool_calls",
                                               "tool_call_id"};
        static const char *const msg_echo[] = {"refusal", "annotations", "audio", "function_call", "parsed"};
        char path[64];
        snprintf(path, sizeof path, "'messages'[%d]", i);
        if (!only_keys(m, msg_keys, NX_ARRAY_LEN(msg_keys), msg_echo, NX_ARRAY_LEN(msg_echo), path, status, err))
            return false;
        const char *rl = role->valuestring;
        if (strcmp(rl, "system") && strcmp(rl, "user") && strcmp(rl, "assistant") && strcmp(rl, "tool") &&
            strcmp(rl, "developer")) {
            *status = 400;
            return nx_fail(err, "'messages'[%d].role '%s' is not system, developer, user, assistant or tool", i, rl);
        }
        nx_chat_msg *cm = &cp->msgs[i];
        cm->role = strcmp(rl, "developer") == 0 ? "system" : rl;
        char *content;
        if (!message_content(m, i, &content, status, err)) return false;
        if (!keep(cp, content)) return bad(status, 500, err, "out of memory (%s)", "messages");
        cm->content = content;
        const cJSON *rc = cJSON_GetObjectItemCaseSensitive(m, "reasoning_content");
        if (cJSON_IsString(rc)) cm->reasoning_content = rc->valuestring;
        const cJSON *tcs = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *tc;
        if (tcs && !cJSON_IsArray(tcs) && !cJSON_IsNull(tcs)) {
            *status = 400;
            return nx_fail(err, "'messages'[%d].tool_calls must be an array", i);
        }
        cm->tool_calls = &cp->calls[call];
        int j = 0;
        cJSON_ArrayForEach(tc, tcs) {
            /* parsed_arguments: the OpenAI client's parse of `arguments`, sent back with it */
            static const char *const call_keys[] = {"id", "type", "function", "index"},
                                     *const fn_keys[] = {"name", "arguments", "parsed_arguments"};
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            snprintf(path, sizeof path, "'messages'[%d].tool_calls[%d]", i, j);
            if (cJSON_IsObject(tc) && !only_keys(tc, call_keys, NX_ARRAY_LEN(call_keys), NULL, 0, path, status, err))
                return false;
            snprintf(path, sizeof path, "'messages'[%d].tool_calls[%d].function", i, j++);
            if (cJSON_IsObject(fn) && !only_keys(fn, fn_keys, NX_ARRAY_LEN(fn_keys), NULL, 0, path, status, err))
                return false;
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(name)) {
                *status = 400;
                return nx_fail(err, "'messages'[%d].tool_calls: every call needs function.name", i);
            }
            cp->calls[call].name = name->valuestring;
            if (cJSON_IsString(args)) {
                cp->calls[call].arguments_json = args->valuestring;
            } else if (cJSON_IsObject(args)) {
                char *s = dump_py(args);
                if (!s || !keep(cp, s)) return bad(status, 500, err, "out of memory (%s)", "tool_calls");
                cp->calls[call].arguments_json = s;
            }
            call++;
            cm->n_tool_calls++;
        }
        i++;
    }
    *n_msgs = (size_t)n;
    const cJSON *tools = cJSON_GetObjectItemCaseSensitive(o, "tools"), *t;
    if (tools && !cJSON_IsNull(tools)) {
        if (!cJSON_IsArray(tools)) return bad(status, 400, err, "'%s' must be an array", "tools");
        cp->tools = calloc((size_t)cJSON_GetArraySize(tools) + 1, sizeof *cp->tools);
        if (!cp->tools) return bad(status, 500, err, "out of memory (%s)", "tools");
        cJSON_ArrayForEach(t, tools) {
            char *s = dump_py(t);
            if (!s || !keep(cp, s)) return bad(status, 500, err, "out of memory (%s)", "tools");
            cp->tools[cp->n_tools++] = s;
        }
    }
    return true;
}

/* tool_choice: what the reply may or must do with the tools. */
typedef enum { TOOLS_NONE, TOOLS_AUTO, TOOLS_REQUIRED, TOOLS_NAMED } tool_mode;

static bool parse_tool_choice(const cJSON *o, nx_srv_tools **tools, tool_mode *mode, int *status, nx_err *err) {
    *status = 400;
    const cJSON *tl = cJSON_GetObjectItemCaseSensitive(o, "tools");
    if (tl && !cJSON_IsNull(tl) && !nx_srv_tools_from_json(tl, tools, err)) return false;
    const bool have = *tools && (*tools)->n_fns > 0;
    *mode = have ? TOOLS_AUTO : TOOLS_NONE;
    const cJSON *tc = cJSON_GetObjectItemCaseSensitive(o, "tool_choice");
    if (tc && !cJSON_IsNull(tc)) {
        if (cJSON_IsString(tc) && strcmp(tc->valuestring, "none") == 0) {
            *mode = TOOLS_NONE;
        } else if (cJSON_IsString(tc) && strcmp(tc->valuestring, "auto") == 0) {
            *mode = have ? TOOLS_AUTO : TOOLS_NONE;
        } else if (cJSON_IsString(tc) && strcmp(tc->valuestring, "required") == 0) {
            if (!have) return nx_fail(err, "'tool_choice' \"required\" needs a non-empty 'tools'");
            *mode = TOOLS_REQUIRED;
        } else if (cJSON_IsObject(tc)) {
            const cJSON *type = cJSON_GetObjectItemCaseSensitive(tc, "type");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tc, "function"), "name");
            if (!cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 || !cJSON_IsString(name))
                return nx_fail(err, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                    "\"function\": {\"name\": ...}}");
            if (!have || !nx_srv_tools_has(*tools, name->valuestring))
                return nx_fail(err, "'tool_choice' names '%.100s', which is not in 'tools'", name->valuestring);
            if (!((*tools)->only = strdup(name->valuestring))) return bad(status, 500, err, "out of memory (%s)", "tools");
            *mode = TOOLS_NAMED;
        } else {
            return nx_fail(err, "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                "\"function\": {\"name\": ...}}");
        }
    }
    if (have) {
        bool parallel = true;
        if (!get_bool(o, "parallel_tool_calls", &parallel, status, err)) return false;
        (*tools)->parallel = parallel;
    }
    return true;
}

typedef enum { CONT_NONE, CONT_AUTO, CONT_CONTENT, CONT_REASONING } cont_mode;

static bool parse_continuation(const cJSON *o, cont_mode *mode, int *status, nx_err *err) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "continue_final_message");
    *mode = CONT_NONE;
    if (!v || cJSON_IsNull(v) || cJSON_IsFalse(v)) return true;
    if (cJSON_IsTrue(v)) *mode = CONT_AUTO;
    else if (cJSON_IsString(v) && !strcmp(v->valuestring, "content")) *mode = CONT_CONTENT;
    else if (cJSON_IsString(v) && !strcmp(v->valuestring, "reasoning_content")) *mode = CONT_REASONING;
    else return bad(status, 400, err, "'%s' must be true, false, \"content\" or \"reasoning_content\"",
                    "continue_final_message");
    return true;
}

/* text_out: the rendered prompt goes there instead of being tokenized into r (/apply-template). */
static bool parse_chat_prompt(const cJSON *o, const nx_srv_defaults *d, nextn_tokenizer *tok, nx_srv_req *r,
                              bool *thinking, nx_buf *text_out, int *status, nx_err *err) {
    if (d->chat_format == NX_CHAT_NONE)
        return bad(status, 400, err, "%s: the model has no recognised chat template; start the server with "
                                     "--chat-format chatml or use /v1/completions", "chat");
    *thinking = d->enable_thinking;
    const cJSON *kw = cJSON_GetObjectItemCaseSensitive(o, "chat_template_kwargs");
    if (kw && !cJSON_IsNull(kw)) {
        if (!cJSON_IsObject(kw)) return bad(status, 400, err, "'%s' must be an object", "chat_template_kwargs");
        if (!get_bool(kw, "enable_thinking", thinking, status, err)) return false;
    }
    /* a template without <think> (chatml-plain) renders no think block: the reply is content */
    if (!nx_chat_format_thinks(d->chat_format)) *thinking = false;
    nx_srv_tools *tools = NULL;
    tool_mode mode;
    if (!parse_tool_choice(o, &tools, &mode, status, err)) {
        nx_srv_tools_free(tools);
        return false;
    }
    /* A forced call (required / named) opens the reply with the call itself, thinking off:
     * the model continues inside <tool_call>. */
    char prefix[300] = "";
    if (mode == TOOLS_REQUIRED) snprintf(prefix, sizeof prefix, "<tool_call>\n<function=");
    if (mode == TOOLS_NAMED) snprintf(prefix, sizeof prefix, "<tool_call>\n<function=%s>\n", tools->only);
    if (prefix[0]) *thinking = false;
    chat_parts cp = {0};
    size_t n_msgs = 0;
    nx_buf text = {0};
    bool ok = parse_messages(o, &cp, &n_msgs, status, err);
    /* A final assistant message is continued (llama-server's assistant prefill): the prompt
     * ends inside it, without its end-of-turn marker.  continue_final_message asks for it
     * explicitly (true / "content" / "reasoning_content") and then needs
     * "add_generation_prompt": false, as in llama-server. */
    bool add_gen = true;
    cont_mode cont = CONT_NONE;
    if (ok) ok = get_bool(o, "add_generation_prompt", &add_gen, status, err) &&
                 parse_continuation(o, &cont, status, err);
    if (ok && n_msgs > 0 && !strcmp(cp.msgs[n_msgs - 1].role, "assistant") && cont == CONT_NONE) {
        if (n_msgs >= 2 && !strcmp(cp.msgs[n_msgs - 2].role, "assistant"))
            ok = bad(status, 400, err, "'%s': two assistant messages at the end of the conversation (the last one "
                                       "would be continued: merge them, or end with a user message)", "messages");
        cont = CONT_AUTO;
        add_gen = false;
    }
    if (ok && cont != CONT_NONE && add_gen)
        ok = bad(status, 400, err, "'%s' and \"add_generation_prompt\": true (the default) ask for opposite things: "
                                   "send \"add_generation_prompt\": false to continue the final message",
                 "continue_final_message");
    if (ok && cont != CONT_NONE && (n_msgs == 0 || strcmp(cp.msgs[n_msgs - 1].role, "assistant")))
        ok = bad(status, 400, err, "'%s': the last message is not an assistant message to continue",
                 "continue_final_message");
    if (ok && cont != CONT_NONE && prefix[0])
        ok = bad(status, 400, err, "'%s' cannot be combined with a forced tool call (tool_choice)",
                 "continue_final_message");
    bool reasoning_cont = false;
    if (ok && cont != CONT_NONE) {
        const nx_chat_msg *last = &cp.msgs[n_msgs - 1];
        const bool has_content = last->content && last->content[0];
        reasoning_cont = cont == CONT_REASONING || (cont == CONT_AUTO && !has_content && last->reasoning_content &&
                                                    last->reasoning_content[0]);
        if (reasoning_cont && has_content)
            ok = bad(status, 400, err, "'%s': \"reasoning_content\" is continued only when the last message has "
                                       "no content", "continue_final_message");
        if (ok && last->n_tool_calls > 0)
            ok = bad(status, 400, err, "'%s': the last message holds tool calls; there is no text to continue",
                     "continue_final_message");
    }
    if (ok) {
        nx_chat_opts opts = {.add_generation_prompt = add_gen, .enable_thinking = *thinking,
                             .tools_json = (const char *const *)cp.tools, .n_tools = mode == TOOLS_NONE ? 0 : cp.n_tools};
        ok = nx_chat_render(d->chat_format, cp.msgs, n_msgs, &opts, &text, err);
        if (!ok) {
            *status = 400;
            nx_fail_prefix(err, "messages");
        }
    }
    if (ok && cont != CONT_NONE) {
        /* cut the end-of-turn marker (and for reasoning, the closing of the think block) */
        static const char eot[] = "<|im_end|>\n", eor[] = "\n</think>\n\n";
        const size_t el = sizeof eot - 1, rl = sizeof eor - 1;
        if (text.len >= el && memcmp(text.data + text.len - el, eot, el) == 0) text.len -= el;
        if (reasoning_cont && text.len >= rl && memcmp(text.data + text.len - rl, eor, rl) == 0) text.len -= rl;
        if (text.data) text.data[text.len] = '\0';
        *thinking = reasoning_cont;
    } else if (ok && !add_gen) {
        *thinking = false; /* no generation prompt: no think block opened */
    }
    if (ok && prefix[0]) {
        ok = nx_buf_append(&text, prefix, strlen(prefix), err) && (r->gen_prefix = strdup(prefix)) != NULL;
        if (!ok) *status = 500;
    }
    if (ok && mode != TOOLS_NONE) {
        if (!tools->parallel) { /* one call at most: the reply ends with the first call's closing tag */
            ok = nx_srv_req_add_stop(r, "</tool_call>", true, NX_SRV_MAX_STOP + 1, status, err);
            if (!ok) nx_fail_prefix(err, "no room to add the end of a tool call");
        }
        r->tools = tools;
        tools = NULL;
    }
    nx_srv_tools_free(tools);
    if (ok && text_out) {
        *text_out = text;
        text = (nx_buf){0};
    }
    /* the rendered template's special tokens (<|im_start|> ...) are parsed as such */
    if (ok && !text_out) ok = tokenize_text(tok, text.data ? text.data : "", text.len, true, r, status, err);
    nx_buf_free(&text);
    chat_parts_free(&cp);
    return ok;
}

/* ---- which parameters a request may carry -------------------------------------------------- */

enum { FOR_COMPL = NX_SRV_COMPLETIONS, FOR_CHAT = NX_SRV_CHAT, FOR_NATIVE = NX_SRV_NATIVE, FOR_INFILL = NX_SRV_INFILL,
       FOR_BOTH = FOR_COMPL | FOR_CHAT, FOR_LLAMA = FOR_NATIVE | FOR_INFILL, FOR_TEXT = FOR_COMPL | FOR_LLAMA,
       FOR_ALL = FOR_BOTH | FOR_LLAMA };

typedef struct param_rule {
    const char *name;
    unsigned where;      /* FOR_* */
    const char *neutral; /* NULL: honoured (read below) or metadata; else the JSON values, '|'
                          * separated, that are accepted because they ask for nothing: any other
                          * value is refused (the parameter is not supported) */
} param_rule;

/* Every top-level parameter a request may carry.  Anything else is refused with 400 naming it:
 * a parameter this server does not honour is never silently ignored.  null is the same as
 * leaving a parameter out. */
static const param_rule PARAMS[] = {
    /* honoured (see nx_srv_parse_common and the prompt parsers) */
    {"model", FOR_ALL, NULL}, {"prompt", FOR_TEXT, NULL}, {"messages", FOR_CHAT, NULL},
    {"max_tokens", FOR_ALL, NULL}, {"max_completion_tokens", FOR_CHAT, NULL}, {"n_predict", FOR_ALL, NULL},
    {"temperature", FOR_ALL, NULL}, {"top_p", FOR_ALL, NULL}, {"top_k", FOR_ALL, NULL}, {"min_p", FOR_ALL, NULL},
    {"presence_penalty", FOR_ALL, NULL}, {"frequency_penalty", FOR_ALL, NULL}, {"repeat_penalty", FOR_ALL, NULL},
    {"repeat_last_n", FOR_ALL, NULL}, {"seed", FOR_ALL, NULL}, {"stop", FOR_ALL, NULL},
    {"ignore_eos", FOR_ALL, NULL}, {"stream", FOR_ALL, NULL}, {"stream_options", FOR_ALL, NULL},
    {"n", FOR_ALL, NULL}, {"tools", FOR_CHAT, NULL}, {"tool_choice", FOR_CHAT, NULL},
    {"parallel_tool_calls", FOR_CHAT, NULL}, {"chat_template_kwargs", FOR_CHAT, NULL}, {"cache_prompt", FOR_ALL, NULL},
    {"add_generation_prompt", FOR_CHAT, NULL}, {"continue_final_message", FOR_CHAT, NULL},
    {"logit_bias", FOR_ALL, NULL}, {"id_slot", FOR_ALL, NULL}, {"samplers", FOR_ALL, NULL},
    {"typical_p", FOR_ALL, NULL}, {"typ_p", FOR_ALL, NULL}, {"top_n_sigma", FOR_ALL, NULL},
    {"xtc_probability", FOR_ALL, NULL}, {"xtc_threshold", FOR_ALL, NULL}, {"dynatemp_range", FOR_ALL, NULL},
    {"dynatemp_exponent", FOR_ALL, NULL}, {"dry_multiplier", FOR_ALL, NULL}, {"dry_base", FOR_ALL, NULL},
    {"dry_allowed_length", FOR_ALL, NULL}, {"dry_penalty_last_n", FOR_ALL, NULL}, {"dry_sequence_breakers", FOR_ALL, NULL},
    {"logprobs", FOR_ALL, NULL}, {"top_logprobs", FOR_CHAT, NULL}, {"n_probs", FOR_LLAMA, NULL},
    {"return_tokens", FOR_LLAMA, NULL}, {"input_prefix", FOR_INFILL, NULL}, {"input_suffix", FOR_INFILL, NULL},
    {"input_extra", FOR_INFILL, NULL},
    /* metadata: they do not change the output */
    {"user", FOR_ALL, NULL}, {"metadata", FOR_BOTH, NULL}, {"service_tier", FOR_BOTH, NULL},
    {"prompt_cache_key", FOR_BOTH, NULL}, {"safety_identifier", FOR_BOTH, NULL},
    /* not supported: only the value that asks for nothing */
    {"echo", FOR_COMPL, "false"}, {"best_of", FOR_COMPL, "1"}, {"suffix", FOR_COMPL, "\"\""},
    {"response_format", FOR_CHAT, "{\"type\":\"text\"}"}, {"store", FOR_BOTH, "false"},
    {"modalities", FOR_CHAT, "[\"text\"]"}, {"audio", FOR_CHAT, NULL /* null only: checked below */},
    {"prediction", FOR_CHAT, NULL}, {"functions", FOR_CHAT, NULL}, {"function_call", FOR_CHAT, NULL},
    {"web_search_options", FOR_CHAT, NULL}, {"reasoning_effort", FOR_CHAT, NULL},
    {"n_probs", FOR_BOTH, "0"}, {"mirostat", FOR_ALL, "0"},
    {"grammar", FOR_ALL, "\"\""}, {"json_schema", FOR_ALL, "{}"}, {"n_keep", FOR_ALL, "0"},
    {"return_tokens", FOR_BOTH, "false"}, {"timings_per_token", FOR_ALL, "false"},
    {"post_sampling_probs", FOR_ALL, "false"}, {"min_keep", FOR_ALL, "0"}, {"n_indent", FOR_LLAMA, "0"},
    {"t_max_predict_ms", FOR_LLAMA, "0"}, {"n_cache_reuse", FOR_ALL, "0"}, {"return_progress", FOR_ALL, "false"},
};

/* Parameters accepted only as null (asking for a feature this server does not have at all). */
static bool null_only(const char *name) {
    static const char *const names[] = {"audio", "prediction", "functions", "function_call", "web_search_options",
                                        "reasoning_effort"};
    for (size_t i = 0; i < NX_ARRAY_LEN(names); i++)
        if (strcmp(names[i], name) == 0) return true;
    return false;
}

static bool neutral_value(const cJSON *v, const char *alternatives) {
    char buf[64];
    for (const char *a = alternatives; *a;) {
        const char *bar = strchr(a, '|');
        const size_t n = bar ? (size_t)(bar - a) : strlen(a);
        snprintf(buf, sizeof buf, "%.*s", (int)n, a);
        cJSON *want = cJSON_Parse(buf);
        const bool same = want && cJSON_Compare(v, want, true);
        cJSON_Delete(want);
        if (same) return true;
        a += n + (bar ? 1 : 0);
    }
    return false;
}

static const char *endpoint_of(nx_srv_api api) {
    return api == NX_SRV_CHAT ? "/v1/chat/completions" : api == NX_SRV_COMPLETIONS ? "/v1/completions"
           : api == NX_SRV_INFILL ? "/infill" : "/completion";
}

static bool check_params(const cJSON *o, nx_srv_api api, int *status, nx_err *err) {
    const unsigned here = (unsigned)api;
    const cJSON *v;
    cJSON_ArrayForEach(v, o) {
        const param_rule *rule = NULL, *elsewhere = NULL;
        for (size_t i = 0; i < NX_ARRAY_LEN(PARAMS) && !rule; i++)
            if (strcmp(PARAMS[i].name, v->string) == 0) {
                if (PARAMS[i].where & here) rule = &PARAMS[i];
                else elsewhere = &PARAMS[i];
            }
        *status = 400;
        if (!rule && elsewhere) return nx_fail(err, "'%s' is not a parameter of %s", v->string, endpoint_of(api));
        if (!rule) return nx_fail(err, "unknown parameter '%.100s' (this server does not support it)", v->string);
        if (cJSON_IsNull(v)) continue;
        if (null_only(rule->name)) return nx_fail(err, "'%s' is not supported by this server", rule->name);
        if (rule->neutral && !neutral_value(v, rule->neutral)) {
            char shown[64];
            snprintf(shown, sizeof shown, "%s", rule->neutral);
            for (char *c = shown; *c; c++)
                if (*c == '|') *c = '/';
            return nx_fail(err, "'%s' is not supported by this server (only %s, which asks for nothing, is accepted)",
                           rule->name, shown);
        }
    }
    return true;
}

/* ---- the whole request -------------------------------------------------------------------- */

bool nx_srv_parse_body(const char *body, size_t len, nx_srv_api api, const nx_srv_defaults *d, cJSON **out,
                       int *status, nx_err *err) {
    *out = NULL;
    *status = 400;
    if (!nx_srv_json_check(body, len, err)) return false;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(body, len, &end, false);
    if (!o) {
        const size_t at = end && end >= body ? (size_t)(end - body) : 0;
        return nx_fail(err, "request body is not valid JSON (error near byte %zu of %zu)", at, len);
    }
    bool ok = true;
    if (!cJSON_IsObject(o)) ok = bad(status, 400, err, "request body must be a JSON %s", "object");
    ok = ok && check_params(o, api, status, err);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(o, "model");
    if (ok && model && !cJSON_IsNull(model)) {
        if (!cJSON_IsString(model)) {
            ok = bad(status, 400, err, "'%s' must be a string", "model");
        } else if (d->strict_model && d->model_name && strcmp(model->valuestring, d->model_name) != 0 &&
                   !nx_srv_model_alias(d, model->valuestring)) {
            *status = 404;
            ok = nx_fail(err, "'model': no model '%.200s' here; this server serves '%s' (GET /v1/models; "
                               "started with --strict-model-name)",
                         model->valuestring, d->model_name);
        }
    }
    if (!ok) {
        cJSON_Delete(o);
        return false;
    }
    *out = o;
    return true;
}

/* OpenAI's log-probability fields (chat: logprobs true + top_logprobs N; completions: logprobs N)
 * and llama-server's n_probs (its "logprobs" is an alias) into r->n_probs. */
static bool parse_logprobs(const cJSON *o, nx_srv_api api, nx_srv_req *r, int *status, nx_err *err) {
    const cJSON *lp = cJSON_GetObjectItemCaseSensitive(o, "logprobs");
    const int32_t max = NEXTN_MAX_TOP_LOGPROBS;
    if (api == NX_SRV_CHAT) {
        bool on = false;
        int32_t top = 0;
        if (!get_bool(o, "logprobs", &on, status, err) || !get_int(o, "top_logprobs", 0, max, &top, status, err))
            return false;
        const cJSON *tl = cJSON_GetObjectItemCaseSensitive(o, "top_logprobs");
        if (tl && !cJSON_IsNull(tl) && !on)
            return bad(status, 400, err, "'%s' needs \"logprobs\": true", "top_logprobs");
        r->n_probs = on ? top : -1;
        return true;
    }
    int32_t n = 0;
    if (api == NX_SRV_COMPLETIONS) {
        if (lp && !cJSON_IsNull(lp) && cJSON_IsBool(lp)) {
            if (cJSON_IsTrue(lp)) return bad(status, 400, err, "'%s' of /v1/completions is a number of alternatives "
                                                               "(0..20), not true", "logprobs");
        } else if (!get_int(o, "logprobs", 0, max, &n, status, err)) {
            return false;
        }
        r->n_probs = n > 0 ? n : -1;
        return true;
    }
    const cJSON *np = cJSON_GetObjectItemCaseSensitive(o, "n_probs");
    if (!get_int(o, np && !cJSON_IsNull(np) ? "n_probs" : "logprobs", 0, max, &n, status, err)) return false;
    r->n_probs = n > 0 ? n : -1;
    return true;
}

/* ignore_eos, as llama-server: a -inf bias on every end-of-generation token for sampling (the
 * sampler's ban list: the reported log-probabilities, like llama-server's n_probs, do not see it),
 * listed after the request's own entries in generation_settings.logit_bias; generation does not
 * stop at one either (srv_engine.c). */
static void ban_eog(nx_srv_req *r, const nx_tokenizer *t) {
    uint32_t n_eog = 0;
    const int32_t *eog = nx_tokenizer_eog_ids(t, &n_eog); /* the tokenizer's: outlives the request */
    r->smp.ban = n_eog ? eog : NULL;
    r->smp.n_ban = (int32_t)n_eog;
}

/* dry_sequence_breakers (llama-server's: a non-empty array of strings; default "\n", ":", "\"",
 * "*"), kept for generation_settings, and - when DRY is on - turned into the token sequences the
 * sampler matches (nextn_dry_breakers: one pass over the vocabulary per string). */
static bool parse_dry_breakers(const cJSON *o, nextn_tokenizer *tok, const nx_srv_defaults *d, nx_srv_req *r,
                               int *status, nx_err *err) {
    static const char *const defaults[] = {"\n", ":", "\"", "*"};
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, "dry_sequence_breakers"), *it;
    const char *strs[NX_SRV_MAX_DRY];
    int n = 0;
    if (v && !cJSON_IsNull(v)) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) == 0 || cJSON_GetArraySize(v) > NX_SRV_MAX_DRY)
            return bad(status, 400, err, "'%s' must be a non-empty array of at most 16 strings", "dry_sequence_breakers");
        cJSON_ArrayForEach(it, v) {
            if (!cJSON_IsString(it))
                return bad(status, 400, err, "'%s' must be a non-empty array of at most 16 strings", "dry_sequence_breakers");
            strs[n++] = it->valuestring;
        }
    } else {
        for (; n < (int)NX_ARRAY_LEN(defaults); n++) strs[n] = defaults[n];
    }
    for (int i = 0; i < n; i++) {
        if (!(r->dry_strs[i] = strdup(strs[i]))) return bad(status, 500, err, "out of memory (%s)", "dry_sequence_breakers");
        r->n_dry_strs++;
    }
    const nextn_sampler_params *p = &r->smp;
    if (!(p->dry_multiplier != 0.0f && p->dry_base >= 1.0f && p->dry_penalty_last_n != 0) || !tok) return true;
    nextn_error e;
    if (!nextn_dry_breakers(tok, strs, n, d->n_vocab, &r->dry, &e))
        return bad(status, 500, err, "'dry_sequence_breakers': %s", e.msg);
    r->smp.dry_breakers = r->dry.tokens;
    r->smp.dry_breaker_lens = r->dry.lens;
    r->smp.n_dry_breakers = r->dry.n;
    return true;
}

bool nx_srv_parse_common(const cJSON *o, nx_srv_api api, const nx_srv_defaults *d, nextn_tokenizer *tok,
                         nx_srv_req *r, int32_t *max_tokens, int *status, nx_err *err) {
    *status = 400;
    /* n choices run in n slots at once (srv_engine.h "Several choices"); llama-server's own API
     * has one choice per prompt */
    int32_t n_choices = 1;
    const bool openai = api == NX_SRV_COMPLETIONS || api == NX_SRV_CHAT;
    const int32_t n_max = openai && d->n_slots > 1 ? d->n_slots : 1;
    bool ok = get_int(o, "n", 1, 1e9, &n_choices, status, err);
    if (ok && n_choices > n_max)
        ok = openai ? (*status = 400, nx_fail(err, "'n' is %d; at most %d choices per request here (one per slot: "
                                                   "server option -np)", n_choices, n_max))
                    : (*status = 400, nx_fail(err, "'n' must be 1 on %s (several choices: /v1/completions)",
                                              endpoint_of(api)));
    r->n_choices = n_choices;
    r->smp = d->smp;
    ok = ok && get_float(o, "temperature", 0, 100, &r->smp.temp, status, err) &&
         get_float(o, "top_p", 0, 1, &r->smp.top_p, status, err) &&
         get_int(o, "top_k", 0, 1e9, &r->smp.top_k, status, err) &&
         get_float(o, "min_p", 0, 1, &r->smp.min_p, status, err) &&
         get_float(o, "presence_penalty", -2, 2, &r->smp.penalty_present, status, err) &&
         get_float(o, "frequency_penalty", -2, 2, &r->smp.penalty_freq, status, err) &&
         get_float(o, "repeat_penalty", 0.01, 100, &r->smp.penalty_repeat, status, err) &&
         get_int(o, "repeat_last_n", -1, 1e9, &r->smp.penalty_last_n, status, err) &&
         /* llama.cpp's further samplers (llama-server's names; typ_p as its web UI and CLI say it) */
         get_float(o, "typical_p", 0, 1, &r->smp.typ_p, status, err) &&
         get_float(o, "typ_p", 0, 1, &r->smp.typ_p, status, err) &&
         get_float(o, "top_n_sigma", -1e6, 1e6, &r->smp.top_n_sigma, status, err) &&
         get_float(o, "xtc_probability", 0, 1, &r->smp.xtc_probability, status, err) &&
         get_float(o, "xtc_threshold", 0, 1, &r->smp.xtc_threshold, status, err) &&
         get_float(o, "dynatemp_range", 0, 100, &r->smp.dynatemp_range, status, err) &&
         get_float(o, "dynatemp_exponent", 0, 100, &r->smp.dynatemp_exponent, status, err) &&
         get_float(o, "dry_multiplier", 0, 1e6, &r->smp.dry_multiplier, status, err) &&
         get_float(o, "dry_base", 0, 1e6, &r->smp.dry_base, status, err) &&
         get_int(o, "dry_allowed_length", 0, 1e9, &r->smp.dry_allowed_length, status, err) &&
         get_int(o, "dry_penalty_last_n", -1, 1e9, &r->smp.dry_penalty_last_n, status, err);
    if (r->smp.dry_base < 1.0f) r->smp.dry_base = d->smp.dry_base; /* as llama-server: below 1 means the default */
    if (ok) {
        double seed = -1;
        ok = get_num(o, "seed", -1, 9007199254740991.0, &seed, status, err);
        if (ok && seed != floor(seed)) ok = bad(status, 400, err, "'%s' must be an integer", "seed");
        if (ok && seed >= 0) r->smp.seed = (uint64_t)seed;
    }
    ok = ok && nx_srv_parse_samplers(cJSON_GetObjectItemCaseSensitive(o, "samplers"), &r->smp, status, err) &&
         parse_dry_breakers(o, tok, d, r, status, err);
    *max_tokens = d->max_tokens;
    /* max_completion_tokens (chat) supersedes max_tokens; n_predict is llama.cpp's name */
    ok = ok && get_int(o, "n_predict", -1, 1e9, max_tokens, status, err) &&
         get_int(o, "max_tokens", -1, 1e9, max_tokens, status, err) &&
         get_int(o, "max_completion_tokens", -1, 1e9, max_tokens, status, err) &&
         get_bool(o, "stream", &r->stream, status, err) && get_bool(o, "ignore_eos", &r->ignore_eos, status, err) &&
         parse_stop(o, r, status, err);
    bool cache_prompt = true;
    ok = ok && get_bool(o, "cache_prompt", &cache_prompt, status, err);
    r->no_cache = !cache_prompt;
    ok = ok && get_int(o, "id_slot", -1, d->n_slots - 1, &r->id_slot, status, err);
    const cJSON *so = cJSON_GetObjectItemCaseSensitive(o, "stream_options");
    if (ok && so && !cJSON_IsNull(so)) {
        if (!cJSON_IsObject(so)) ok = bad(status, 400, err, "'%s' must be an object", "stream_options");
        ok = ok && get_bool(so, "include_usage", &r->include_usage, status, err);
    }
    if (ok && *max_tokens == 0) ok = bad(status, 400, err, "'%s' must be at least 1 (or -1: until the end)", "max_tokens");
    ok = ok && parse_logprobs(o, api, r, status, err);
    if (ok) {
        ok = nx_srv_parse_logit_bias(cJSON_GetObjectItemCaseSensitive(o, "logit_bias"), tok, d->n_vocab, &r->logit_bias,
                                     &r->smp.n_logit_bias, status, err);
        r->smp.logit_bias = r->logit_bias;
    }
    if (ok && r->ignore_eos && tok) ban_eog(r, (const nx_tokenizer *)tok);
    return ok;
}

bool nx_srv_finish_request(nx_srv_req *r, int32_t max_tokens, const nx_srv_defaults *d, int *status, nx_err *err) {
    if (r->n_prompt == 0) return bad(status, 400, err, "the %s is empty (no tokens)", "prompt");
    if (r->n_prompt >= d->n_ctx) {
        /* llama-server's exceed_context_size_error, with n_prompt_tokens and n_ctx */
        *status = 400;
        r->exceeds_ctx = true;
        return nx_fail(err, "the request has %d prompt tokens; a slot holds %d (prompt + generation; server option -c)",
                       r->n_prompt, d->n_ctx);
    }
    const int32_t room = d->n_ctx - r->n_prompt;
    r->max_tokens = max_tokens < 0 || max_tokens > room ? room : max_tokens;
    if (!nx_srv_req_stops_build(r, err)) return bad(status, 500, err, "out of memory (%s)", "stop");
    return true;
}

bool nx_srv_apply_template(const char *body, size_t len, const nx_srv_defaults *d, nx_buf *text, int *status,
                           nx_err *err) {
    cJSON *o = NULL;
    if (!nx_srv_parse_body(body, len, NX_SRV_CHAT, d, &o, status, err)) return false;
    nx_srv_req *r = nx_srv_req_new();
    bool thinking = false;
    bool ok = r && parse_chat_prompt(o, d, NULL, r, &thinking, text, status, err);
    if (!r) ok = bad(status, 500, err, "out of memory (%s)", "apply-template");
    nx_srv_req_unref(r);
    cJSON_Delete(o);
    return ok;
}

bool nx_srv_parse_request(const char *body, size_t len, bool chat, const nx_srv_defaults *d,
                          nextn_tokenizer *tok, nx_srv_req *r, bool *thinking, int *status, nx_err *err) {
    *thinking = false;
    const nx_srv_api api = chat ? NX_SRV_CHAT : NX_SRV_COMPLETIONS;
    cJSON *o = NULL;
    if (!nx_srv_parse_body(body, len, api, d, &o, status, err)) return false;
    int32_t max_tokens = 0;
    bool ok = nx_srv_parse_common(o, api, d, tok, r, &max_tokens, status, err);
    if (ok) {
        ok = chat ? parse_chat_prompt(o, d, tok, r, thinking, NULL, status, err)
                  : parse_prompt(o, tok, d->n_vocab, r, status, err);
    }
    ok = ok && nx_srv_finish_request(r, max_tokens, d, status, err);
    if (ok) r->chat = chat;
    cJSON_Delete(o);
    return ok;
}

/* ---- responses ---------------------------------------------------------------------------- */

void nx_srv_split_reasoning(const char *text, size_t len, bool thinking, size_t *reasoning_len,
                            size_t *content_off) {
    *reasoning_len = 0;
    *content_off = 0;
    if (!thinking) return;
    static const char tag[] = "</think>";
    const size_t tl = sizeof tag - 1;
    size_t p = 0;
    while (p + tl <= len && memcmp(text + p, tag, tl) != 0) p++;
    if (p + tl > len) { /* still thinking */
        *reasoning_len = len;
        *content_off = len;
        return;
    }
    size_t rl = p;
    while (rl > 0 && (text[rl - 1] == '\n' || text[rl - 1] == ' ')) rl--;
    size_t c = p + tl;
    while (c < len && text[c] == '\n') c++;
    *reasoning_len = rl;
    *content_off = c;
}

static double ms(double a, double b) { return a > 0 && b >= a ? (b - a) * 1e3 : 0; }

/* Usage of a request's choices: the prompt counted once, the completions summed. */
static cJSON *usage_obj_n(const nx_srv_req *const *rs, int n) {
    int64_t gen = 0;
    for (int k = 0; k < n; k++) gen += rs[k]->n_gen;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", rs[0]->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)gen);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(rs[0]->n_prompt + gen));
    cJSON *d = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(d, "cached_tokens", rs[0]->n_cache);
    return u;
}

/* llama.cpp-style timings: prompt = admission to first token, predicted = the rest; prompt_n
 * counts the prompt tokens decoded, cache_n those reused from the prompt cache; draft_n /
 * draft_n_accepted (speculative mode) as llama-server reports them. */
cJSON *nx_srv_timings_json(const nx_srv_req *r) { return nx_srv_timings_json_n(&r, 1); }

cJSON *nx_srv_timings_json_n(const nx_srv_req *const *rs, int n) {
    const nx_srv_req *r = rs[0];
    int64_t decoded = 0, gen = 0, draft_n = 0, draft_acc = 0;
    double first = 0, end = 0;
    for (int k = 0; k < n; k++) {
        const nx_srv_req *q = rs[k];
        decoded += q->n_prompt - q->n_cache;
        gen += q->n_gen;
        draft_n += q->draft_n;
        draft_acc += q->draft_accepted;
        if (q->t_first > 0 && (first == 0 || q->t_first < first)) first = q->t_first;
        if (q->t_end > end) end = q->t_end;
    }
    cJSON *t = cJSON_CreateObject();
    const double pm = ms(r->t_start, r->t_first), gm = ms(first, end);
    cJSON_AddNumberToObject(t, "cache_n", r->n_cache);
    cJSON_AddNumberToObject(t, "prompt_n", (double)decoded);
    cJSON_AddNumberToObject(t, "prompt_ms", pm);
    cJSON_AddNumberToObject(t, "prompt_per_second", pm > 0 ? (double)decoded / (pm / 1e3) : 0);
    cJSON_AddNumberToObject(t, "predicted_n", (double)gen);
    cJSON_AddNumberToObject(t, "predicted_ms", gm);
    cJSON_AddNumberToObject(t, "predicted_per_second", gm > 0 && gen > n ? (double)(gen - n) / (gm / 1e3) : 0);
    cJSON_AddNumberToObject(t, "queue_ms", ms(r->t_submit, r->t_start));
    if (draft_n > 0) {
        cJSON_AddNumberToObject(t, "draft_n", (double)draft_n);
        cJSON_AddNumberToObject(t, "draft_n_accepted", (double)draft_acc);
    }
    return t;
}

static cJSON *envelope(const nx_srv_req *r, const char *model, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddStringToObject(o, "system_fingerprint", "nextn");
    return o;
}

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* cJSON strings are NUL-terminated: copy n bytes of text into a temporary string. */
static cJSON *str_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return NULL;
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    cJSON *v = cJSON_CreateString(tmp);
    free(tmp);
    return v;
}

/* A token's text (control tokens rendered), its bytes, and the text cut to whole UTF-8
 * characters (llama-server's "token" drops a cut-off character's bytes; "bytes" keeps them). */
void nx_srv_token_fields(cJSON *o, const nextn_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t n = 0;
    nextn_error e;
    if (!nextn_detokenize(tok, &id, 1, true, buf, sizeof buf, &n, &e)) n = 0;
    cJSON_AddNumberToObject(o, "id", id);
    cJSON *text = str_n(buf, nx_utf8_valid_prefix(buf, n));
    cJSON_AddItemToObject(o, "token", text ? text : cJSON_CreateNull());
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)buf[i]));
}

/* a log-probability as JSON: -inf has no JSON form, llama-server writes the lowest float */
double nx_srv_logprob_value(float lp) { return isinf(lp) && lp < 0 ? -3.4028234663852886e38 : (double)lp; }

void nx_srv_call_id(const nx_srv_req *r, int k, char out[64]) {
    const char *dash = strchr(r->id, '-');
    if (r->choice > 0) /* the choices of one request share its id */
        snprintf(out, 64, "call_%s_%d_%d", dash ? dash + 1 : r->id, (int)r->choice, k);
    else
        snprintf(out, 64, "call_%s_%d", dash ? dash + 1 : r->id, k);
}

const char *nx_srv_finish_reason(const nx_srv_req *r, int n_calls) {
    const char *f = r->finish_reason ? r->finish_reason : "stop";
    return n_calls > 0 && strcmp(f, "stop") == 0 ? "tool_calls" : f;
}

static cJSON *tool_call_obj(const nx_srv_req *r, int k, const nx_srv_tool_call *c, bool with_index) {
    char id[64];
    nx_srv_call_id(r, k, id);
    cJSON *o = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(o, "index", k);
    cJSON_AddStringToObject(o, "id", id);
    cJSON_AddStringToObject(o, "type", "function");
    cJSON *f = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(f, "name", c->name);
    cJSON_AddStringToObject(f, "arguments", c->arguments);
    return o;
}

cJSON *nx_srv_oai_logprobs(const nx_srv_req *r, const nextn_tokenizer *tok, int32_t from, int32_t to) {
    if (r->n_probs < 0 || !r->probs) return NULL;
    cJSON *lp = cJSON_CreateObject();
    cJSON *content = cJSON_AddArrayToObject(lp, "content");
    cJSON *tokens = NULL, *token_lp = NULL, *tops = NULL, *offsets = NULL;
    if (!r->chat) {
        tokens = cJSON_AddArrayToObject(lp, "tokens");
        token_lp = cJSON_AddArrayToObject(lp, "token_logprobs");
        tops = cJSON_AddArrayToObject(lp, "top_logprobs");
        offsets = cJSON_AddArrayToObject(lp, "text_offset");
    }
    size_t offset = 0;
    for (int32_t i = 0; i < from && i < r->n_tokens && !r->chat; i++) {
        char b[256];
        size_t n = 0;
        nextn_error e;
        if (nextn_detokenize(tok, &r->tokens[i], 1, false, b, sizeof b, &n, &e)) offset += n;
    }
    for (int32_t i = from; i < to && i < r->n_tokens; i++) {
        const nextn_logprob *p = &r->probs[i];
        cJSON *e = cJSON_CreateObject();
        nx_srv_token_fields(e, tok, r->tokens[i]);
        cJSON_AddNumberToObject(e, "logprob", nx_srv_logprob_value(p->logprob));
        cJSON *top = cJSON_AddArrayToObject(e, "top_logprobs");
        cJSON *top_map = r->chat ? NULL : cJSON_CreateObject();
        for (int32_t k = 0; k < p->n_top; k++) {
            cJSON *t = cJSON_CreateObject();
            nx_srv_token_fields(t, tok, p->top_ids[k]);
            cJSON_AddNumberToObject(t, "logprob", nx_srv_logprob_value(p->top_logprobs[k]));
            if (top_map && !cJSON_GetObjectItemCaseSensitive(top_map, cJSON_GetObjectItem(t, "token")->valuestring))
                cJSON_AddNumberToObject(top_map, cJSON_GetObjectItem(t, "token")->valuestring,
                                        nx_srv_logprob_value(p->top_logprobs[k]));
            cJSON_AddItemToArray(top, t);
        }
        if (!r->chat) {
            cJSON_AddItemToArray(tokens, cJSON_CreateString(cJSON_GetObjectItem(e, "token")->valuestring));
            cJSON_AddItemToArray(token_lp, cJSON_CreateNumber(nx_srv_logprob_value(p->logprob)));
            cJSON_AddItemToArray(tops, top_map);
            cJSON_AddItemToArray(offsets, cJSON_CreateNumber((double)offset));
            cJSON *bytes = cJSON_GetObjectItem(e, "bytes");
            offset += (size_t)cJSON_GetArraySize(bytes);
        }
        cJSON_AddItemToArray(content, e);
    }
    return lp;
}

/* One entry of "choices" (NULL on out-of-memory). */
static cJSON *choice_obj(const nx_srv_req *r, bool thinking, const nextn_tokenizer *tok) {
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", r->choice);
    const char *text = r->text.data ? r->text.data : "";
    int n_calls = 0;
    if (r->chat) {
        size_t rl, co;
        nx_srv_split_reasoning(text, r->text.len, thinking, &rl, &co);
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (r->tools) {
            /* the content is what the prompt opened the reply with, then the generated text */
            nx_buf all = {0}, content = {0};
            nx_srv_tool_call *calls = NULL;
            nx_err e;
            const char *pre = r->gen_prefix ? r->gen_prefix : "";
            bool ok = nx_buf_append(&all, pre, strlen(pre), &e) && nx_buf_append(&all, text + co, r->text.len - co, &e) &&
                      nx_srv_tools_parse(r->tools, all.data, all.len, &content, &calls, &n_calls);
            if (!ok) {
                cJSON_Delete(c);
                c = NULL;
            } else {
                if (n_calls > 0 && content.len == 0)
                    cJSON_AddNullToObject(m, "content");
                else
                    cJSON_AddItemToObject(m, "content", str_n(content.data, content.len));
                if (n_calls > 0) {
                    cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
                    for (int k = 0; k < n_calls; k++) cJSON_AddItemToArray(tc, tool_call_obj(r, k, &calls[k], false));
                }
            }
            for (int k = 0; k < n_calls; k++) nx_srv_tool_call_free(&calls[k]);
            free(calls);
            nx_buf_free(&all);
            nx_buf_free(&content);
            if (!c) return NULL;
        } else {
            cJSON_AddItemToObject(m, "content", str_n(text + co, r->text.len - co));
        }
        if (thinking) cJSON_AddItemToObject(m, "reasoning_content", str_n(text, rl));
        cJSON *lp = nx_srv_oai_logprobs(r, tok, 0, r->n_tokens);
        if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
        else cJSON_AddNullToObject(c, "logprobs");
    } else {
        cJSON_AddItemToObject(c, "text", str_n(text, r->text.len));
        cJSON *lp = nx_srv_oai_logprobs(r, tok, 0, r->n_tokens);
        if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
        else cJSON_AddNullToObject(c, "logprobs");
    }
    cJSON_AddStringToObject(c, "finish_reason", nx_srv_finish_reason(r, n_calls));
    return c;
}

char *nx_srv_response_json(const nx_srv_req *r, const char *model, bool thinking, const nextn_tokenizer *tok) {
    return nx_srv_response_json_n(&r, 1, model, thinking, tok);
}

char *nx_srv_response_json_n(const nx_srv_req *const *rs, int n, const char *model, bool thinking,
                             const nextn_tokenizer *tok) {
    cJSON *o = envelope(rs[0], model, rs[0]->chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int k = 0; k < n; k++) {
        cJSON *c = choice_obj(rs[k], thinking, tok);
        if (!c) {
            cJSON_Delete(o);
            return NULL;
        }
        cJSON_AddItemToArray(choices, c);
    }
    cJSON_AddItemToObject(o, "usage", usage_obj_n(rs, n));
    cJSON_AddItemToObject(o, "timings", nx_srv_timings_json_n(rs, n));
    return print_free(o);
}

char *nx_srv_tool_chunk_json(const nx_srv_req *r, const char *model, int k, const nx_srv_tool_call *call,
                             bool arguments) {
    cJSON *o = envelope(r, model, "chat.completion.chunk");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->choice);
    cJSON *d = cJSON_AddObjectToObject(c, "delta");
    cJSON *tcs = cJSON_AddArrayToObject(d, "tool_calls");
    cJSON *tc;
    if (!arguments) { /* the first piece: id, type, name, empty arguments */
        nx_srv_tool_call head = {call->name, ""};
        tc = tool_call_obj(r, k, &head, true);
    } else {
        tc = cJSON_CreateObject();
        cJSON_AddNumberToObject(tc, "index", k);
        cJSON_AddStringToObject(cJSON_AddObjectToObject(tc, "function"), "arguments", call->arguments);
    }
    cJSON_AddItemToArray(tcs, tc);
    cJSON_AddNullToObject(c, "finish_reason");
    return print_free(o);
}

char *nx_srv_chunk_json(const nx_srv_req *r, const char *model, const char *text, size_t n, bool reasoning,
                        const char *finish_reason, bool role_chunk, cJSON *logprobs) {
    cJSON *o = envelope(r, model, r->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", r->choice);
    if (r->chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (role_chunk) {
            /* the role alone: content null, as OpenAI and llama-server send it */
            cJSON_AddStringToObject(d, "role", "assistant");
            cJSON_AddNullToObject(d, "content");
        } else if (!finish_reason) {
            cJSON_AddItemToObject(d, reasoning ? "reasoning_content" : "content", str_n(text, n));
        }
        if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
    } else {
        cJSON_AddItemToObject(c, "text", str_n(finish_reason ? "" : text, finish_reason ? 0 : n));
        if (logprobs) cJSON_AddItemToObject(c, "logprobs", logprobs);
        else cJSON_AddNullToObject(c, "logprobs");
    }
    if (finish_reason)
        cJSON_AddStringToObject(c, "finish_reason", finish_reason);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (finish_reason) cJSON_AddItemToObject(o, "timings", nx_srv_timings_json(r));
    return print_free(o);
}

char *nx_srv_usage_chunk_json(const nx_srv_req *r, const char *model) { return nx_srv_usage_chunk_json_n(&r, 1, model); }

char *nx_srv_usage_chunk_json_n(const nx_srv_req *const *rs, int n, const char *model) {
    cJSON *o = envelope(rs[0], model, rs[0]->chat ? "chat.completion.chunk" : "text_completion");
    cJSON_AddArrayToObject(o, "choices");
    cJSON_AddItemToObject(o, "usage", usage_obj_n(rs, n));
    cJSON_AddItemToObject(o, "timings", nx_srv_timings_json_n(rs, n)); /* llama-server puts them here too */
    return print_free(o);
}

char *nx_srv_error_json(const char *message, int status) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", status == 401   ? "authentication_error"
                                       : status == 404 ? "not_found_error"
                                       : status == 403 ? "permission_error"
                                       : status == 501 ? "not_supported_error"
                                       : status == 503 ? "unavailable_error"
                                       : status >= 500 ? "server_error"
                                                       : "invalid_request_error");
    cJSON_AddNumberToObject(e, "code", status);
    return print_free(o);
}

char *nx_srv_exceed_error_json(const char *message, int32_t n_prompt, int32_t n_ctx) {
    cJSON *o = cJSON_CreateObject();
    cJSON *e = cJSON_AddObjectToObject(o, "error");
    cJSON_AddNumberToObject(e, "code", 400);
    cJSON_AddStringToObject(e, "message", message);
    cJSON_AddStringToObject(e, "type", "exceed_context_size_error");
    cJSON_AddNumberToObject(e, "n_prompt_tokens", n_prompt);
    cJSON_AddNumberToObject(e, "n_ctx", n_ctx);
    return print_free(o);
}

bool nx_srv_model_alias(const nx_srv_defaults *d, const char *name) {
    if (d->model_name && strcmp(d->model_name, name) == 0) return true;
    for (int i = 0; i < d->n_aliases; i++)
        if (strcmp(d->aliases[i], name) == 0) return true;
    return false;
}

cJSON *nx_srv_model_obj(const nx_srv_defaults *d, int64_t created) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", d->model_name ? d->model_name : "");
    cJSON *al = cJSON_AddArrayToObject(m, "aliases");
    for (int i = 0; i < d->n_aliases; i++) cJSON_AddItemToArray(al, cJSON_CreateString(d->aliases[i]));
    cJSON *tg = cJSON_AddArrayToObject(m, "tags");
    for (int i = 0; i < d->n_tags; i++) cJSON_AddItemToArray(tg, cJSON_CreateString(d->tags[i]));
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)created);
    cJSON_AddStringToObject(m, "owned_by", "nextn");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_ctx_slot", d->n_ctx);
    cJSON_AddNumberToObject(meta, "n_ctx", d->n_ctx);
    cJSON_AddNumberToObject(meta, "n_vocab", d->n_vocab);
    return m;
}

char *nx_srv_models_json(const nx_srv_defaults *d, int64_t created) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *data = cJSON_AddArrayToObject(o, "data");
    cJSON_AddItemToArray(data, nx_srv_model_obj(d, created));
    return print_free(o);
}
