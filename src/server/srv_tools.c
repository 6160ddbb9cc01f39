/* srv_tools.c - the tools table and the tool-call parser (see srv_tools.h). */
#include "server/srv_tools.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char OPEN[] = "<tool_call>", CLOSE[] = "</tool_call>";
#define OPEN_LEN (sizeof OPEN - 1)
#define CLOSE_LEN (sizeof CLOSE - 1)

/* ---- the tools table ------------------------------------------------------------------------ */

void nx_srv_tools_free(nx_srv_tools *t) {
    if (!t) return;
    for (int i = 0; i < t->n_fns; i++) {
        free(t->fns[i].name);
        for (int k = 0; k < t->fns[i].n_str; k++) free(t->fns[i].str_params[k]);
        free(t->fns[i].str_params);
    }
    free(t->fns);
    free(t->only);
    free(t);
}

static const nx_srv_tool_fn *find_fn(const nx_srv_tools *t, const char *name, size_t n) {
    for (int i = 0; i < t->n_fns; i++)
        if (strlen(t->fns[i].name) == n && memcmp(t->fns[i].name, name, n) == 0) return &t->fns[i];
    return NULL;
}

bool nx_srv_tools_has(const nx_srv_tools *t, const char *name) { return find_fn(t, name, strlen(name)) != NULL; }

/* A schema whose "type" is "string" (or a list of types that are all "string" or "null"). */
static bool is_string_schema(const cJSON *schema) {
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(schema, "type");
    if (cJSON_IsString(type)) return strcmp(type->valuestring, "string") == 0;
    if (!cJSON_IsArray(type)) return false;
    bool any = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, type) {
        if (!cJSON_IsString(it)) return false;
        if (strcmp(it->valuestring, "string") == 0) any = true;
        else if (strcmp(it->valuestring, "null") != 0) return false;
    }
    return any;
}

bool nx_srv_tools_from_json(const cJSON *tools, nx_srv_tools **out, nx_err *err) {
    *out = NULL;
    if (!cJSON_IsArray(tools)) return nx_fail(err, "'tools' must be an array");
    nx_srv_tools *t = calloc(1, sizeof *t);
    const int n = cJSON_GetArraySize(tools);
    if (!t || !(t->fns = calloc((size_t)(n > 0 ? n : 1), sizeof *t->fns))) {
        free(t);
        return nx_fail(err, "out of memory (tools)");
    }
    t->parallel = true;
    int i = 0;
    const cJSON *tool;
    cJSON_ArrayForEach(tool, tools) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(tool, "type");
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tool, "function");
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsObject(tool) || !cJSON_IsString(type) || strcmp(type->valuestring, "function") != 0 ||
            !cJSON_IsObject(fn) || !cJSON_IsString(name) || !name->valuestring[0]) {
            nx_srv_tools_free(t);
            return nx_fail(err, "'tools'[%d] must be {\"type\": \"function\", \"function\": {\"name\": ..., "
                                "\"parameters\": {...}}}", i);
        }
        /* strict: nothing this server would silently ignore */
        static const char *const tool_keys[] = {"type", "function"},
                                 *const fn_keys[] = {"name", "description", "parameters", "strict"};
        for (int pass = 0; pass < 2; pass++) {
            const cJSON *obj = pass ? fn : tool, *k;
            cJSON_ArrayForEach(k, obj) {
                bool known = false;
                for (size_t q = 0; q < (pass ? 4u : 2u) && !known; q++)
                    known = strcmp(k->string, pass ? fn_keys[q] : tool_keys[q]) == 0 &&
                            !(pass && q == 3 && cJSON_IsTrue(k)); /* strict: true is not enforced here */
                if (!known) {
                    nx_srv_tools_free(t);
                    return nx_fail(err, "'tools'[%d]%s.%.100s is not a known field (this server does not support it)",
                                   i, pass ? ".function" : "", k->string);
                }
            }
        }
        if (strpbrk(name->valuestring, "<>\n")) {
            nx_srv_tools_free(t);
            return nx_fail(err, "'tools'[%d].function.name must not contain '<', '>' or a newline", i);
        }
        if (find_fn(t, name->valuestring, strlen(name->valuestring))) {
            nx_srv_tools_free(t);
            return nx_fail(err, "'tools'[%d].function.name '%s' is already in 'tools'", i, name->valuestring);
        }
        nx_srv_tool_fn *f = &t->fns[t->n_fns++];
        if (!(f->name = strdup(name->valuestring))) {
            nx_srv_tools_free(t);
            return nx_fail(err, "out of memory (tools)");
        }
        const cJSON *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        if (params && !cJSON_IsNull(params) && !cJSON_IsObject(params)) {
            nx_srv_tools_free(t);
            return nx_fail(err, "'tools'[%d].function.parameters must be a JSON schema object", i);
        }
        const cJSON *props = cJSON_GetObjectItemCaseSensitive(params, "properties"), *p;
        const int np = cJSON_IsObject(props) ? cJSON_GetArraySize(props) : 0;
        if (np > 0 && !(f->str_params = calloc((size_t)np, sizeof *f->str_params))) {
            nx_srv_tools_free(t);
            return nx_fail(err, "out of memory (tools)");
        }
        if (np > 0) {
            cJSON_ArrayForEach(p, props) {
                if (!is_string_schema(p)) continue;
                if (!(f->str_params[f->n_str] = strdup(p->string))) {
                    nx_srv_tools_free(t);
                    return nx_fail(err, "out of memory (tools)");
                }
                f->n_str++;
            }
        }
        i++;
    }
    *out = t;
    return true;
}

void nx_srv_tool_call_free(nx_srv_tool_call *c) {
    free(c->name);
    free(c->arguments);
    c->name = c->arguments = NULL;
}

/* ---- one call ------------------------------------------------------------------------------- */

static bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

static const char *find(const char *s, size_t n, const char *needle) {
    const size_t k = strlen(needle);
    return k <= n ? memmem(s, n, needle, k) : NULL;
}

static bool starts(const char *s, size_t n, const char *prefix) {
    const size_t k = strlen(prefix);
    return n >= k && memcmp(s, prefix, k) == 0;
}

static char *dup_n(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

static bool param_is_string(const nx_srv_tool_fn *f, const char *key) {
    for (int i = 0; i < f->n_str; i++)
        if (strcmp(f->str_params[i], key) == 0) return true;
    return false;
}

/* {"name": "f", "arguments": {...}} (arguments may also be a string holding a JSON object). */
static bool parse_json_call(const nx_srv_tools *t, const char *s, size_t n, nx_srv_tool_call *out) {
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(s, n, &end, false);
    bool ok = false;
    if (o && cJSON_IsObject(o)) {
        size_t rest = (size_t)(s + n - end);
        while (rest && is_ws(*end)) end++, rest--;
        const cJSON *name = cJSON_GetObjectItemCaseSensitive(o, "name");
        const cJSON *args = cJSON_GetObjectItemCaseSensitive(o, "arguments");
        if (!rest && cJSON_IsString(name) && find_fn(t, name->valuestring, strlen(name->valuestring))) {
            cJSON *parsed = NULL;
            if (cJSON_IsString(args)) args = parsed = cJSON_Parse(args->valuestring);
            if (!args || cJSON_IsNull(args)) {
                out->name = strdup(name->valuestring);
                out->arguments = strdup("{}");
            } else if (cJSON_IsObject(args)) {
                out->name = strdup(name->valuestring);
                out->arguments = cJSON_PrintUnformatted(args);
            }
            cJSON_Delete(parsed);
            ok = out->name && out->arguments;
        }
    }
    cJSON_Delete(o);
    if (!ok) nx_srv_tool_call_free(out);
    return ok;
}

/* <function=NAME>\n(<parameter=K>\nV\n</parameter>\n)*</function> */
static bool parse_xml_call(const nx_srv_tools *t, const char *s, size_t n, nx_srv_tool_call *out) {
    const char *end = s + n;
    const char *p = s + strlen("<function=");
    const char *gt = memchr(p, '>', (size_t)(end - p));
    if (!gt || gt == p) return false;
    const nx_srv_tool_fn *f = find_fn(t, p, (size_t)(gt - p));
    if (!f) return false;
    cJSON *args = cJSON_CreateObject();
    if (!args) return false;
    p = gt + 1;
    bool ok = false;
    for (;;) {
        while (p < end && is_ws(*p)) p++;
        if (starts(p, (size_t)(end - p), "</function>")) {
            p += strlen("</function>");
            while (p < end && is_ws(*p)) p++;
            ok = p == end;
            break;
        }
        if (!starts(p, (size_t)(end - p), "<parameter=")) break;
        p += strlen("<parameter=");
        const char *kgt = memchr(p, '>', (size_t)(end - p));
        if (!kgt || kgt == p) break;
        const char *v = kgt + 1;
        const char *vend = find(v, (size_t)(end - v), "</parameter>");
        if (!vend) break;
        char *key = dup_n(p, (size_t)(kgt - p));
        const char *vs = v, *ve = vend;
        if (vs < ve && *vs == '\n') vs++;
        if (ve > vs && ve[-1] == '\n') ve--;
        char *val = dup_n(vs, (size_t)(ve - vs));
        if (!key || !val || cJSON_GetObjectItemCaseSensitive(args, key)) { /* a parameter given twice: not a call */
            free(key);
            free(val);
            break;
        }
        cJSON *item = NULL;
        if (!param_is_string(f, key)) item = cJSON_ParseWithOpts(val, NULL, true);
        if (!item) item = cJSON_CreateString(val);
        const bool added = item && cJSON_AddItemToObject(args, key, item);
        free(key);
        free(val);
        if (!added) {
            cJSON_Delete(item);
            break;
        }
        p = vend + strlen("</parameter>");
    }
    if (ok) {
        out->name = strdup(f->name);
        out->arguments = cJSON_PrintUnformatted(args);
        ok = out->name && out->arguments;
        if (!ok) nx_srv_tool_call_free(out);
    }
    cJSON_Delete(args);
    return ok;
}

bool nx_srv_tools_parse_call(const nx_srv_tools *t, const char *body, size_t n, nx_srv_tool_call *out) {
    memset(out, 0, sizeof *out);
    while (n && is_ws(*body)) body++, n--;
    while (n && is_ws(body[n - 1])) n--;
    bool ok;
    if (starts(body, n, "<function="))
        ok = parse_xml_call(t, body, n, out);
    else if (n && *body == '{')
        ok = parse_json_call(t, body, n, out);
    else
        ok = false;
    if (ok && t->only && strcmp(out->name, t->only) != 0) {
        nx_srv_tool_call_free(out);
        ok = false;
    }
    return ok;
}

/* ---- the scanner ------------------------------------------------------------------------------ */

/* Bytes at the end of s[0, n) that could be the start of "<tool_call>". */
static size_t open_prefix_tail(const char *s, size_t n) {
    for (size_t k = NX_MIN(n, OPEN_LEN - 1); k > 0; k--)
        if (memcmp(s + n - k, OPEN, k) == 0) return k;
    return 0;
}

bool nx_srv_tool_next(nx_srv_tool_scan *sc, const nx_srv_tools *t, const char *text, size_t avail, bool done,
                      nx_srv_tool_ev *ev) {
    memset(ev, 0, sizeof *ev);
    for (;;) {
        if (sc->pos >= avail) return true;
        const char *p = text + sc->pos;
        const size_t n = avail - sc->pos;
        /* no more calls once one was made and parallel calls are off: the rest is content */
        const bool more_calls = t->parallel || sc->n_calls == 0;
        if (sc->after_call) { /* whitespace after a call: dropped (kept back until text follows) */
            size_t w = 0;
            while (w < n && is_ws(p[w])) w++;
            if (w == n) {
                if (done) sc->pos = avail;
                return true;
            }
            sc->pos += w;
            sc->after_call = false;
            continue;
        }
        const char *open = more_calls ? find(p, n, OPEN) : NULL;
        /* the whitespace right before a block goes with the block (dropped with a call) */
        const char *region = open;
        while (region && region > p && is_ws(region[-1])) region--;
        if (region != p) {
            size_t m = region ? (size_t)(region - p) : n;
            if (!region && !done && more_calls) {
                /* what may still become "<tool_call>", and the whitespace before it, waits */
                m -= open_prefix_tail(p, n);
                while (m > 0 && is_ws(p[m - 1])) m--;
            }
            if (!region && done && sc->n_calls > 0) /* trailing whitespace of a reply with calls */
                while (m > 0 && is_ws(p[m - 1])) m--;
            if (m == 0) {
                if (!region && done) sc->pos = avail; /* only that whitespace was left */
                return true;
            }
            ev->kind = NX_TOOL_EV_TEXT;
            ev->off = sc->pos;
            ev->n = m;
            sc->pos += m;
            return true;
        }
        const size_t lead = (size_t)(open - p);
        const char *close = find(open + OPEN_LEN, n - lead - OPEN_LEN, CLOSE);
        if (!close) {
            if (!done) return true;
            ev->kind = NX_TOOL_EV_TEXT; /* a call the reply never closed stays content */
            ev->off = sc->pos;
            ev->n = n;
            sc->pos += n;
            return true;
        }
        const size_t block = (size_t)(close - p) + CLOSE_LEN;
        nx_srv_tool_call c;
        if (nx_srv_tools_parse_call(t, open + OPEN_LEN, (size_t)(close - open) - OPEN_LEN, &c)) {
            ev->kind = NX_TOOL_EV_CALL;
            ev->call = c;
            sc->n_calls++;
            sc->after_call = true;
        } else {
            ev->kind = NX_TOOL_EV_TEXT;
            ev->off = sc->pos;
            ev->n = block;
        }
        sc->pos += block;
        return true;
    }
}

bool nx_srv_tools_parse(const nx_srv_tools *t, const char *text, size_t len, nx_buf *content,
                        nx_srv_tool_call **calls, int *n_calls) {
    *calls = NULL;
    *n_calls = 0;
    nx_srv_tool_scan sc = {0};
    int cap = 0;
    nx_err err;
    for (;;) {
        nx_srv_tool_ev ev;
        nx_srv_tool_next(&sc, t, text, len, true, &ev);
        if (ev.kind == NX_TOOL_EV_NONE) break;
        if (ev.kind == NX_TOOL_EV_TEXT) {
            if (!nx_buf_append(content, text + ev.off, ev.n, &err)) return false;
            continue;
        }
        if (*n_calls == cap) {
            const int nc = cap ? cap * 2 : 4;
            nx_srv_tool_call *g = realloc(*calls, (size_t)nc * sizeof *g);
            if (!g) {
                nx_srv_tool_call_free(&ev.call);
                return false;
            }
            *calls = g;
            cap = nc;
        }
        (*calls)[(*n_calls)++] = ev.call;
    }
    if (!content->data && !nx_buf_append(content, "", 0, &err)) return false;
    return true;
}
