/* srv_native.c - llama-server's own API: prompts, logit bias, samplers, slot file names, and
 * the response shapes of /completion and /slots (see srv_native.h). */
#include "server/srv_native.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/srv_openai.h"

static bool fail_at(int *status, int code, nx_err *err, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static bool fail_at(int *status, int code, nx_err *err, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err->msg, sizeof err->msg, fmt, ap);
    va_end(ap);
    *status = code;
    return false;
}

/* ---- prompts -------------------------------------------------------------------------------- */

typedef struct ids_buf {
    int32_t *v;
    int32_t n, cap;
} ids_buf;

static bool ids_reserve(ids_buf *b, int32_t more) {
    if (b->n + more <= b->cap) return true;
    int32_t cap = b->cap ? b->cap : 64;
    while (cap < b->n + more) cap *= 2;
    int32_t *v = realloc(b->v, (size_t)cap * sizeof *v);
    if (!v) return false;
    b->v = v;
    b->cap = cap;
    return true;
}

/* Appends the tokens of text (add_bos: the vocabulary's BOS first when it wants one). */
static bool push_text(ids_buf *b, nextn_tokenizer *tok, const char *text, bool add_bos, bool parse_special,
                      const char *where, int *status, nx_err *err) {
    const size_t len = strlen(text);
    if (len > (size_t)INT32_MAX / 8) return fail_at(status, 413, err, "%s: text too long", where);
    if (!ids_reserve(b, (int32_t)len + 8)) return fail_at(status, 500, err, "%s: out of memory", where);
    int32_t n = 0;
    nextn_error terr;
    if (!nextn_tokenize(tok, text, len, add_bos && nextn_tokenizer_add_bos(tok), parse_special, b->v + b->n,
                        b->cap - b->n, &n, &terr))
        return fail_at(status, 400, err, "%s: %s", where, terr.msg);
    b->n += n;
    return true;
}

static bool push_id(ids_buf *b, const cJSON *v, int32_t n_vocab, const char *where, int *status, nx_err *err) {
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 0 ||
        v->valuedouble >= n_vocab)
        return fail_at(status, 400, err, "%s: not a token id in [0, %d)", where, n_vocab);
    if (!ids_reserve(b, 1)) return fail_at(status, 500, err, "%s: out of memory", where);
    b->v[b->n++] = (int32_t)v->valuedouble;
    return true;
}

static bool has_number(const cJSON *a) {
    const cJSON *it;
    cJSON_ArrayForEach(it, a) if (cJSON_IsNumber(it)) return true;
    return false;
}

/* One prompt: a string, an array of ids and strings, or {"prompt_string": ...}. */
static bool one_prompt(const cJSON *p, nextn_tokenizer *tok, int32_t n_vocab, const char *where, ids_buf *b,
                       int *status, nx_err *err) {
    char at[96];
    if (cJSON_IsString(p)) return push_text(b, tok, p->valuestring, true, true, where, status, err);
    if (cJSON_IsObject(p)) {
        const cJSON *ps = cJSON_GetObjectItemCaseSensitive(p, "prompt_string");
        const cJSON *it;
        cJSON_ArrayForEach(it, p) {
            if (strcmp(it->string, "prompt_string") == 0) continue;
            if (strcmp(it->string, "multimodal_data") == 0)
                return fail_at(status, 400, err, "%s.multimodal_data: this server has no multimodal support", where);
            return fail_at(status, 400, err, "%s: unknown field '%.80s' (a prompt object holds \"prompt_string\")",
                           where, it->string);
        }
        if (!ps || (!cJSON_IsString(ps) && !cJSON_IsArray(ps)))
            return fail_at(status, 400, err, "%s.prompt_string must be a string or an array of tokens and strings",
                           where);
        snprintf(at, sizeof at, "%s.prompt_string", where);
        return one_prompt(ps, tok, n_vocab, at, b, status, err);
    }
    if (!cJSON_IsArray(p))
        return fail_at(status, 400, err,
                       "%s must be a string, an array of token ids and strings, or {\"prompt_string\": ...}", where);
    int i = 0;
    bool first = true;
    const cJSON *it;
    cJSON_ArrayForEach(it, p) {
        snprintf(at, sizeof at, "%s[%d]", where, i++);
        if (cJSON_IsString(it)) {
            /* BOS only before a string that opens the prompt */
            if (!push_text(b, tok, it->valuestring, first, true, at, status, err)) return false;
        } else if (!push_id(b, it, n_vocab, at, status, err)) {
            return false;
        }
        first = false;
    }
    return true;
}

bool nx_srv_parse_prompts(const cJSON *p, nextn_tokenizer *tok, int32_t n_vocab, nx_srv_prompts *out, int *status,
                          nx_err *err) {
    memset(out, 0, sizeof *out);
    if (!p || cJSON_IsNull(p)) return fail_at(status, 400, err, "missing 'prompt'");
    /* an array with no number at its top level is a list of prompts */
    const bool many = cJSON_IsArray(p) && !has_number(p);
    const int count = many ? cJSON_GetArraySize(p) : 1;
    if (count == 0) return fail_at(status, 400, err, "'prompt' is an empty array");
    if (count > NX_SRV_MAX_PROMPTS)
        return fail_at(status, 400, err, "'prompt' holds %d prompts; at most %d per request", count,
                       NX_SRV_MAX_PROMPTS);
    out->many = many && count > 1;
    for (int k = 0; k < count; k++) {
        const cJSON *one = many ? cJSON_GetArrayItem(p, k) : p;
        char where[32];
        if (many && count > 1) snprintf(where, sizeof where, "'prompt'[%d]", k);
        else snprintf(where, sizeof where, "'prompt'");
        ids_buf b = {0};
        if (!one_prompt(one, tok, n_vocab, where, &b, status, err)) {
            free(b.v);
            nx_srv_prompts_free(out);
            return false;
        }
        if (b.n == 0) {
            free(b.v);
            nx_srv_prompts_free(out);
            return fail_at(status, 400, err, "%s is empty (no tokens)", where);
        }
        out->ids[k] = b.v;
        out->n[k] = b.n;
        out->count = k + 1;
    }
    return true;
}

void nx_srv_prompts_free(nx_srv_prompts *p) {
    for (int k = 0; k < p->count; k++) free(p->ids[k]);
    memset(p, 0, sizeof *p);
}

/* ---- logit bias ------------------------------------------------------------------------------ */

static bool bias_value(const cJSON *v, const char *where, float *out, int *status, nx_err *err) {
    if (cJSON_IsFalse(v)) {
        *out = -INFINITY;
        return true;
    }
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || fabs(v->valuedouble) > 3.0e38)
        return fail_at(status, 400, err, "%s: a bias is a finite number, or false to ban the token", where);
    *out = (float)v->valuedouble;
    return true;
}

typedef struct bias_buf {
    nextn_logit_bias *v;
    int32_t n, cap;
} bias_buf;

static bool bias_push(bias_buf *b, int32_t tok, float bias) {
    if (b->n == b->cap) {
        const int32_t cap = b->cap ? 2 * b->cap : 16;
        nextn_logit_bias *v = realloc(b->v, (size_t)cap * sizeof *v);
        if (!v) return false;
        b->v = v;
        b->cap = cap;
    }
    b->v[b->n++] = (nextn_logit_bias){tok, bias};
    return true;
}

/* A token id (a JSON integer or, as an object key, a decimal string) or a text. */
static bool bias_entry(const cJSON *key_num, const char *key_str, const cJSON *val, nextn_tokenizer *tok,
                       int32_t n_vocab, const char *where, bias_buf *b, int *status, nx_err *err) {
    float bias = 0.0f;
    if (!bias_value(val, where, &bias, status, err)) return false;
    long id = -1;
    bool is_id = false;
    if (key_num) {
        if (!cJSON_IsNumber(key_num) || key_num->valuedouble != floor(key_num->valuedouble))
            return fail_at(status, 400, err, "%s: the token is an integer id or a string", where);
        is_id = true;
        id = key_num->valuedouble < 0 || key_num->valuedouble >= n_vocab ? -1 : (long)key_num->valuedouble;
    } else {
        char *end = NULL;
        const long v = strtol(key_str, &end, 10);
        if (key_str[0] && *end == '\0') {
            is_id = true;
            id = v < 0 || v >= n_vocab ? -1 : v;
        }
    }
    if (is_id) {
        if (id < 0) return fail_at(status, 400, err, "%s: token id outside the vocabulary [0, %d)", where, n_vocab);
        return bias_push(b, (int32_t)id, bias) || fail_at(status, 500, err, "%s: out of memory", where);
    }
    ids_buf t = {0};
    /* text: its tokens as plain text (no BOS, control-token names not recognised) */
    bool ok = push_text(&t, tok, key_str, false, false, where, status, err);
    if (ok && t.n == 0) ok = fail_at(status, 400, err, "%s: the text has no tokens", where);
    for (int32_t i = 0; ok && i < t.n; i++)
        if (!bias_push(b, t.v[i], bias)) ok = fail_at(status, 500, err, "%s: out of memory", where);
    free(t.v);
    return ok;
}

bool nx_srv_parse_logit_bias(const cJSON *v, nextn_tokenizer *tok, int32_t n_vocab, nextn_logit_bias **out,
                             int32_t *n, int *status, nx_err *err) {
    *out = NULL;
    *n = 0;
    if (!v || cJSON_IsNull(v)) return true;
    bias_buf b = {0};
    char where[160];
    const cJSON *it;
    bool ok = true;
    if (cJSON_IsObject(v)) {
        cJSON_ArrayForEach(it, v) {
            snprintf(where, sizeof where, "'logit_bias'[\"%.100s\"]", it->string);
            if (!(ok = bias_entry(NULL, it->string, it, tok, n_vocab, where, &b, status, err))) break;
        }
    } else if (cJSON_IsArray(v)) {
        int i = 0;
        cJSON_ArrayForEach(it, v) {
            snprintf(where, sizeof where, "'logit_bias'[%d]", i++);
            if (!cJSON_IsArray(it) || cJSON_GetArraySize(it) != 2) {
                ok = fail_at(status, 400, err, "%s must be a pair [token, bias]", where);
                break;
            }
            const cJSON *k = cJSON_GetArrayItem(it, 0), *val = cJSON_GetArrayItem(it, 1);
            if (cJSON_IsString(k)) ok = bias_entry(NULL, k->valuestring, val, tok, n_vocab, where, &b, status, err);
            else ok = bias_entry(k, NULL, val, tok, n_vocab, where, &b, status, err);
            if (!ok) break;
        }
    } else {
        ok = fail_at(status, 400, err,
                     "'logit_bias' must be an object {\"token id or text\": bias} or an array of [token, bias] pairs");
    }
    if (ok && b.n >= n_vocab && n_vocab > 0) {
        /* a bias that bans every token leaves nothing to sample (the sampler would fail later) */
        unsigned char *banned = calloc((size_t)n_vocab, 1);
        int32_t n_banned = 0;
        if (!banned) ok = fail_at(status, 500, err, "%s: out of memory", "'logit_bias'");
        for (int32_t i = 0; ok && i < b.n; i++)
            if (b.v[i].bias == -INFINITY && !banned[b.v[i].token]) banned[b.v[i].token] = 1, n_banned++;
        free(banned);
        if (ok && n_banned == n_vocab)
            ok = fail_at(status, 400, err, "'logit_bias' bans every token of the vocabulary (%d): nothing could be "
                                           "generated", n_vocab);
    }
    if (!ok) {
        free(b.v);
        return false;
    }
    *out = b.v;
    *n = b.n;
    return true;
}

/* ---- samplers ---------------------------------------------------------------------------------- */

enum { S_PENALTIES, S_TOP_K, S_TOP_P, S_MIN_P, S_TEMPERATURE, S_CHAIN, S_NEUTRAL = 100 };

/* A sampler name (llama-server's names, their kebab-case and no-underscore forms, and aliases). */
static int sampler_of(const char *name) {
    static const struct {
        const char *name;
        int id;
    } names[] = {
        {"penalties", S_PENALTIES}, {"top_k", S_TOP_K}, {"top-k", S_TOP_K}, {"topk", S_TOP_K},
        {"top_p", S_TOP_P}, {"top-p", S_TOP_P}, {"topp", S_TOP_P}, {"nucleus", S_TOP_P},
        {"min_p", S_MIN_P}, {"min-p", S_MIN_P}, {"minp", S_MIN_P},
        {"temperature", S_TEMPERATURE}, {"temp", S_TEMPERATURE},
        {"dry", S_NEUTRAL}, {"typ_p", S_NEUTRAL}, {"typ-p", S_NEUTRAL}, {"typp", S_NEUTRAL}, {"typ", S_NEUTRAL},
        {"xtc", S_NEUTRAL}, {"top_n_sigma", S_NEUTRAL}, {"top-n-sigma", S_NEUTRAL}, {"topnsigma", S_NEUTRAL},
    };
    char low[32];
    size_t i = 0;
    for (; name[i] && i + 1 < sizeof low; i++) low[i] = (char)(name[i] >= 'A' && name[i] <= 'Z' ? name[i] + 32 : name[i]);
    if (name[i]) return -1;
    low[i] = '\0';
    for (size_t k = 0; k < NX_ARRAY_LEN(names); k++)
        if (strcmp(names[k].name, low) == 0) return names[k].id;
    return -1;
}

static int sampler_of_char(char c) {
    switch (c) {
    case 'e': return S_PENALTIES;
    case 'k': return S_TOP_K;
    case 'p': return S_TOP_P;
    case 'm': return S_MIN_P;
    case 't': return S_TEMPERATURE;
    case 'd': case 'y': case 'x': case 's': return S_NEUTRAL;
    default: return -1;
    }
}

bool nx_srv_parse_samplers(const cJSON *v, nextn_sampler_params *smp, int *status, nx_err *err) {
    if (!v || cJSON_IsNull(v)) return true;
    static const char *const chain = "penalties, top_k, top_p, min_p, temperature";
    bool used[S_CHAIN] = {false};
    int last = -1, n = 0;
    if (cJSON_IsString(v)) n = (int)strlen(v->valuestring);
    else if (cJSON_IsArray(v)) n = cJSON_GetArraySize(v);
    else return fail_at(status, 400, err, "'samplers' must be an array of sampler names or a string of letters");
    for (int i = 0; i < n; i++) {
        int id;
        if (cJSON_IsString(v)) {
            id = sampler_of_char(v->valuestring[i]);
            if (id < 0)
                return fail_at(status, 400, err, "'samplers': unknown sampler letter '%c' (this server has e k p m t)",
                               v->valuestring[i]);
        } else {
            const cJSON *s = cJSON_GetArrayItem(v, i);
            if (!cJSON_IsString(s)) return fail_at(status, 400, err, "'samplers'[%d] must be a sampler name", i);
            id = sampler_of(s->valuestring);
            if (id < 0)
                return fail_at(status, 400, err, "'samplers'[%d]: unknown or unsupported sampler '%.40s' (this server "
                               "has %s)", i, s->valuestring, chain);
        }
        if (id == S_NEUTRAL) continue;
        if (used[id] || id < last)
            return fail_at(status, 400, err, "'samplers'[%d]: this server applies its samplers once each, in the "
                           "order %s; the list must follow it", i, chain);
        used[id] = true;
        last = id;
    }
    if (!used[S_PENALTIES]) smp->penalty_last_n = 0;
    if (!used[S_TOP_K]) smp->top_k = 0;
    if (!used[S_TOP_P]) smp->top_p = 1.0f;
    if (!used[S_MIN_P]) smp->min_p = 0.0f;
    if (!used[S_TEMPERATURE]) smp->temp = 1.0f;
    return true;
}

/* ---- slot file names ------------------------------------------------------------------------ */

const char *nx_srv_bad_filename(const char *name) {
    const size_t len = strlen(name);
    if (len == 0) return "it is empty";
    if (len > 255) return "it is longer than 255 bytes";
    if (nx_utf8_valid_prefix(name, len) != len) return "it is not valid UTF-8";
    for (size_t i = 0; i < len;) {
        const int cl = nx_utf8_char_len((const unsigned char *)name + i, len - i);
        const uint32_t c = nx_utf8_decode((const unsigned char *)name + i, cl);
        if (c < 0x20 || c == 0x7f || (c >= 0x80 && c <= 0x9f)) return "it holds a control character";
        if (c == '/' || c == '\\' || c == 0x2215 || c == 0x2216) return "it holds a path separator";
        if (strchr(":*?\"<>|", (int)c) && c < 0x80) return "it holds one of : * ? \" < > |";
        if (c == 0xff0e || c == 0xfffd || c == 0xfeff) return "it holds a look-alike or replacement character";
        i += (size_t)cl;
    }
    if (name[0] == ' ' || name[len - 1] == ' ') return "it begins or ends with a space";
    if (name[len - 1] == '.') return "it ends with '.'";
    if (strstr(name, "..")) return "it holds \"..\"";
    return NULL;
}

/* ---- infill ---------------------------------------------------------------------------------- */

static int32_t control_token(nextn_tokenizer *tok, const char *name) {
    int32_t ids[2], n = 0;
    nextn_error e;
    char back[64];
    size_t bl = 0;
    if (!nextn_tokenize(tok, name, strlen(name), false, true, ids, 2, &n, &e) || n != 1) return -1;
    /* one token that renders as the name: a control token, not a word */
    if (!nextn_detokenize(tok, ids, 1, true, back, sizeof back, &bl, &e) || bl != strlen(name) ||
        memcmp(back, name, bl) != 0)
        return -1;
    return ids[0];
}

void nx_srv_fim_tokens(nextn_tokenizer *tok, nx_srv_fim *f) {
    f->pre = control_token(tok, "<|fim_prefix|>");
    f->suf = control_token(tok, "<|fim_suffix|>");
    f->mid = control_token(tok, "<|fim_middle|>");
    f->rep = control_token(tok, "<|repo_name|>");
    f->sep = control_token(tok, "<|file_sep|>");
}

/* A string or an array of ids and strings, as plain text (no BOS, no control tokens). */
static bool infill_part(const cJSON *v, nextn_tokenizer *tok, int32_t n_vocab, const char *name, ids_buf *b,
                        int *status, nx_err *err) {
    char at[64];
    if (!v) return fail_at(status, 400, err, "missing '%s'", name);
    if (cJSON_IsString(v)) return push_text(b, tok, v->valuestring, false, false, name, status, err);
    if (!cJSON_IsArray(v)) return fail_at(status, 400, err, "'%s' must be a string or an array of tokens", name);
    int i = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        snprintf(at, sizeof at, "'%s'[%d]", name, i++);
        if (cJSON_IsString(it) ? !push_text(b, tok, it->valuestring, false, false, at, status, err)
                               : !push_id(b, it, n_vocab, at, status, err))
            return false;
    }
    return true;
}

static bool push_ids(ids_buf *b, const int32_t *v, int32_t n) {
    if (n <= 0) return true;
    if (!ids_reserve(b, n)) return false;
    memcpy(b->v + b->n, v, (size_t)n * sizeof *v);
    b->n += n;
    return true;
}

bool nx_srv_infill_prompt(const cJSON *o, nextn_tokenizer *tok, int32_t n_vocab, const nx_srv_fim *f, int32_t n_batch,
                          int32_t n_ctx, int32_t n_predict, int32_t **ids, int32_t *n, int *status, nx_err *err) {
    *ids = NULL;
    *n = 0;
    ids_buf pre = {0}, suf = {0}, prm = {0}, extra = {0}, out = {0};
    bool ok = infill_part(cJSON_GetObjectItemCaseSensitive(o, "input_prefix"), tok, n_vocab, "input_prefix", &pre,
                          status, err) &&
              infill_part(cJSON_GetObjectItemCaseSensitive(o, "input_suffix"), tok, n_vocab, "input_suffix", &suf,
                          status, err);
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(o, "prompt");
    if (ok && p && !cJSON_IsNull(p)) {
        if (!cJSON_IsString(p)) ok = fail_at(status, 400, err, "'prompt' of /infill must be a string");
        else ok = push_text(&prm, tok, p->valuestring, false, true, "prompt", status, err);
    }
    const cJSON *ex = cJSON_GetObjectItemCaseSensitive(o, "input_extra");
    if (ok && ex && !cJSON_IsNull(ex) && !cJSON_IsArray(ex))
        ok = fail_at(status, 400, err, "'input_extra' must be an array of {\"filename\": string, \"text\": string}");
    if (ok && f->rep >= 0) {
        ok = push_ids(&extra, &f->rep, 1) && push_text(&extra, tok, "myproject\n", false, false, "input_extra", status, err);
    }
    int k = 0;
    const cJSON *chunk;
    if (ok && cJSON_IsArray(ex)) cJSON_ArrayForEach(chunk, ex) {
        char at[64];
        snprintf(at, sizeof at, "'input_extra'[%d]", k++);
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(chunk, "text");
        const cJSON *fname = cJSON_GetObjectItemCaseSensitive(chunk, "filename");
        if (!cJSON_IsObject(chunk) || !cJSON_IsString(text)) {
            ok = fail_at(status, 400, err, "%s must be an object with a string \"text\"", at);
            break;
        }
        if (fname && !cJSON_IsString(fname)) {
            ok = fail_at(status, 400, err, "%s.filename must be a string", at);
            break;
        }
        if (f->sep >= 0) {
            const char *fn = fname ? fname->valuestring : "tmp";
            char *line = malloc(strlen(fn) + 2);
            if (!line) {
                ok = fail_at(status, 500, err, "out of memory");
                break;
            }
            sprintf(line, "%s\n", fn);
            ok = push_ids(&extra, &f->sep, 1) && push_text(&extra, tok, line, false, false, at, status, err);
            free(line);
        } else {
            ok = push_text(&extra, tok, "\n\n--- snippet ---\n\n", false, false, at, status, err);
        }
        ok = ok && push_text(&extra, tok, text->valuestring, false, false, at, status, err);
        if (!ok) break;
    }
    if (ok && f->sep >= 0)
        ok = push_ids(&extra, &f->sep, 1) && push_text(&extra, tok, "filename\n", false, false, "input_extra", status, err);
    if (ok) {
        const int32_t n_pre = NX_MIN(pre.n, 3 * (n_batch / 4));
        const int32_t n_suf = NX_MIN(suf.n, NX_MAX(0, n_batch / 4 - (2 + prm.n)));
        const int32_t n_ext = NX_MIN(NX_MAX(0, n_ctx - n_batch - 2 * n_predict), extra.n);
        const int32_t bos = nextn_tokenizer_add_bos(tok) ? nextn_token_bos(tok) : -1;
        ok = push_ids(&out, extra.v + extra.n - n_ext, n_ext) && (bos < 0 || push_ids(&out, &bos, 1)) &&
             push_ids(&out, &f->pre, 1) && push_ids(&out, pre.v + pre.n - n_pre, n_pre) &&
             push_ids(&out, prm.v, prm.n) && push_ids(&out, &f->suf, 1) && push_ids(&out, suf.v, n_suf) &&
             push_ids(&out, &f->mid, 1);
        if (!ok) fail_at(status, 500, err, "out of memory building the infill prompt");
    }
    free(pre.v);
    free(suf.v);
    free(prm.v);
    free(extra.v);
    if (!ok) {
        free(out.v);
        return false;
    }
    *ids = out.v;
    *n = out.n;
    return true;
}

/* ---- responses ------------------------------------------------------------------------------- */

static char *print_free(cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static cJSON *str_n(const char *s, size_t n) {
    char *tmp = malloc(n + 1);
    if (!tmp) return cJSON_CreateNull();
    memcpy(tmp, s, n);
    tmp[n] = '\0';
    cJSON *v = cJSON_CreateString(tmp);
    free(tmp);
    return v;
}

static cJSON *ids_json(const int32_t *ids, int32_t n) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
    return a;
}

/* A token's text (control tokens rendered), its bytes, and the text cut to whole UTF-8
 * characters (llama-server's "token" drops a cut-off character's bytes; "bytes" keeps them). */
void nx_srv_token_fields(cJSON *o, const nextn_tokenizer *tok, int32_t id) {
    char buf[256];
    size_t n = 0;
    nextn_error e;
    if (!nextn_detokenize(tok, &id, 1, true, buf, sizeof buf, &n, &e)) n = 0;
    cJSON_AddNumberToObject(o, "id", id);
    cJSON_AddItemToObject(o, "token", str_n(buf, nx_utf8_valid_prefix(buf, n)));
    cJSON *bytes = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(bytes, cJSON_CreateNumber((unsigned char)buf[i]));
}

/* a log-probability as JSON: -inf has no JSON form, llama-server writes the lowest float */
double nx_srv_logprob_value(float lp) { return isinf(lp) && lp < 0 ? -3.4028234663852886e38 : (double)lp; }

cJSON *nx_srv_native_probs_json(const nx_srv_req *r, const nextn_tokenizer *tok, int32_t from, int32_t to) {
    cJSON *a = cJSON_CreateArray();
    for (int32_t i = from; r->probs && i < to && i < r->n_tokens; i++) {
        const nextn_logprob *p = &r->probs[i];
        cJSON *o = cJSON_CreateObject();
        nx_srv_token_fields(o, tok, r->tokens[i]);
        cJSON_AddNumberToObject(o, "logprob", nx_srv_logprob_value(p->logprob));
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int32_t k = 0; k < p->n_top; k++) {
            cJSON *t = cJSON_CreateObject();
            nx_srv_token_fields(t, tok, p->top_ids[k]);
            cJSON_AddNumberToObject(t, "logprob", nx_srv_logprob_value(p->top_logprobs[k]));
            cJSON_AddItemToArray(top, t);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

cJSON *nx_srv_settings_json(const nx_srv_req *r, const char *model, int32_t n_ctx) {
    const nextn_sampler_params *s = &r->smp;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "n_ctx", n_ctx);
    if (model) cJSON_AddStringToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "seed", (double)s->seed);
    cJSON_AddNumberToObject(o, "temperature", s->temp);
    cJSON_AddNumberToObject(o, "top_k", s->top_k);
    cJSON_AddNumberToObject(o, "top_p", s->top_p);
    cJSON_AddNumberToObject(o, "min_p", s->min_p);
    cJSON_AddNumberToObject(o, "repeat_last_n", s->penalty_last_n);
    cJSON_AddNumberToObject(o, "repeat_penalty", s->penalty_repeat);
    cJSON_AddNumberToObject(o, "presence_penalty", s->penalty_present);
    cJSON_AddNumberToObject(o, "frequency_penalty", s->penalty_freq);
    cJSON_AddNumberToObject(o, "max_tokens", r->max_tokens);
    cJSON_AddNumberToObject(o, "n_predict", r->max_tokens);
    cJSON_AddBoolToObject(o, "ignore_eos", r->ignore_eos);
    cJSON_AddBoolToObject(o, "stream", r->stream);
    cJSON *lb = cJSON_AddArrayToObject(o, "logit_bias");
    for (int32_t i = 0; r->logit_bias && i < s->n_logit_bias; i++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateNumber(r->logit_bias[i].token));
        if (isinf(r->logit_bias[i].bias)) cJSON_AddItemToArray(pair, cJSON_CreateFalse());
        else cJSON_AddItemToArray(pair, cJSON_CreateNumber(r->logit_bias[i].bias));
        cJSON_AddItemToArray(lb, pair);
    }
    cJSON_AddNumberToObject(o, "n_probs", r->n_probs > 0 ? r->n_probs : 0);
    cJSON *stop = cJSON_AddArrayToObject(o, "stop");
    for (int i = 0; i < r->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(r->stop[i]));
    cJSON *smp = cJSON_AddArrayToObject(o, "samplers");
    if (s->penalty_last_n != 0) cJSON_AddItemToArray(smp, cJSON_CreateString("penalties"));
    if (s->top_k > 0) cJSON_AddItemToArray(smp, cJSON_CreateString("top_k"));
    if (s->top_p < 1.0f) cJSON_AddItemToArray(smp, cJSON_CreateString("top_p"));
    if (s->min_p > 0.0f) cJSON_AddItemToArray(smp, cJSON_CreateString("min_p"));
    cJSON_AddItemToArray(smp, cJSON_CreateString("temperature"));
    return o;
}

static const char *stop_type(const nx_srv_req *r) {
    if (!r->done || !r->finish_reason) return "none";
    if (strcmp(r->finish_reason, "length") == 0) return "limit";
    return r->stop_index >= 0 ? "word" : "eos";
}

cJSON *nx_srv_native_result(const nx_srv_req *r, const nextn_tokenizer *tok, const char *model, int32_t n_ctx,
                            int index, int32_t id_slot, bool return_tokens) {
    cJSON *o = cJSON_CreateObject();
    const char *text = r->text.data ? r->text.data : "";
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "content", str_n(r->stream ? "" : text, r->stream ? 0 : r->text.len));
    cJSON_AddItemToObject(o, "tokens", return_tokens && !r->stream ? ids_json(r->tokens, r->n_tokens)
                                                                   : cJSON_CreateArray());
    cJSON_AddNumberToObject(o, "id_slot", id_slot);
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "model", model);
    cJSON_AddNumberToObject(o, "tokens_predicted", r->n_gen);
    cJSON_AddNumberToObject(o, "tokens_evaluated", r->n_prompt);
    cJSON_AddItemToObject(o, "generation_settings", nx_srv_settings_json(r, model, n_ctx));
    /* the prompt as the model saw it: its tokens rendered, control tokens included */
    size_t pl = 0;
    nextn_error e;
    char *pt = NULL;
    if (nextn_detokenize(tok, r->prompt, r->n_prompt, true, NULL, 0, &pl, &e) && (pt = malloc(pl + 1)) &&
        nextn_detokenize(tok, r->prompt, r->n_prompt, true, pt, pl, &pl, &e))
        cJSON_AddItemToObject(o, "prompt", str_n(pt, pl));
    else
        cJSON_AddStringToObject(o, "prompt", "");
    free(pt);
    cJSON_AddBoolToObject(o, "has_new_line", memchr(text, '\n', r->text.len) != NULL);
    cJSON_AddBoolToObject(o, "truncated", false);
    cJSON_AddStringToObject(o, "stop_type", stop_type(r));
    cJSON_AddStringToObject(o, "stopping_word", r->stop_index >= 0 ? r->stop[r->stop_index] : "");
    cJSON_AddNumberToObject(o, "tokens_cached", r->n_cache);
    cJSON_AddItemToObject(o, "timings", nx_srv_timings_json(r));
    if (r->n_probs > 0 && !r->stream)
        cJSON_AddItemToObject(o, "completion_probabilities", nx_srv_native_probs_json(r, tok, 0, r->n_tokens));
    return o;
}

char *nx_srv_native_chunk_json(const nx_srv_req *r, const nextn_tokenizer *tok, int index, int32_t id_slot,
                               const char *text, size_t n, int32_t tok_from, int32_t tok_to) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    cJSON_AddItemToObject(o, "content", str_n(text, n));
    cJSON_AddItemToObject(o, "tokens", ids_json(r->tokens + tok_from, tok_to - tok_from));
    cJSON_AddBoolToObject(o, "stop", false);
    cJSON_AddNumberToObject(o, "id_slot", id_slot);
    cJSON_AddNumberToObject(o, "tokens_predicted", tok_to);
    cJSON_AddNumberToObject(o, "tokens_evaluated", r->n_prompt);
    if (r->n_probs > 0 && tok_to > tok_from)
        cJSON_AddItemToObject(o, "completion_probabilities", nx_srv_native_probs_json(r, tok, tok_from, tok_to));
    return print_free(o);
}

char *nx_srv_slots_json(const nx_srv_slot_info *info, int n, bool spec) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        const nx_srv_slot_info *x = &info[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", x->id);
        if (x->has_req) cJSON_AddStringToObject(o, "id_task", x->id_task);
        else cJSON_AddNumberToObject(o, "id_task", -1);
        cJSON_AddNumberToObject(o, "n_ctx", x->n_ctx);
        cJSON_AddBoolToObject(o, "speculative", spec);
        cJSON_AddBoolToObject(o, "is_processing", x->processing);
        cJSON_AddNumberToObject(o, "n_tokens", x->n_tokens);
        cJSON *p = cJSON_AddObjectToObject(o, "params");
        if (x->has_req) {
            const nextn_sampler_params *s = &x->smp;
            cJSON_AddNumberToObject(p, "n_predict", x->max_tokens);
            cJSON_AddNumberToObject(p, "seed", (double)s->seed);
            cJSON_AddNumberToObject(p, "temperature", s->temp);
            cJSON_AddNumberToObject(p, "top_k", s->top_k);
            cJSON_AddNumberToObject(p, "top_p", s->top_p);
            cJSON_AddNumberToObject(p, "min_p", s->min_p);
            cJSON_AddNumberToObject(p, "repeat_last_n", s->penalty_last_n);
            cJSON_AddNumberToObject(p, "repeat_penalty", s->penalty_repeat);
            cJSON_AddNumberToObject(p, "presence_penalty", s->penalty_present);
            cJSON_AddNumberToObject(p, "frequency_penalty", s->penalty_freq);
            cJSON_AddNumberToObject(p, "max_tokens", x->max_tokens);
            cJSON_AddBoolToObject(p, "ignore_eos", x->ignore_eos);
            cJSON_AddBoolToObject(p, "stream", x->stream);
            cJSON_AddNumberToObject(p, "n_logit_bias", x->n_logit_bias);
        }
        cJSON *nt = cJSON_AddObjectToObject(o, "next_token");
        cJSON_AddBoolToObject(nt, "has_next_token", x->processing);
        cJSON_AddNumberToObject(nt, "n_remain", x->processing ? x->max_tokens - x->n_decoded : -1);
        cJSON_AddNumberToObject(nt, "n_decoded", x->n_decoded);
        cJSON_AddItemToArray(a, o);
    }
    return print_free(a);
}

char *nx_srv_slot_result_json(nx_srv_slot_action a, int32_t id_slot, const char *filename,
                              const nx_srv_slot_result *res) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "id_slot", id_slot);
    if (a == NX_SRV_SLOT_ERASE) {
        cJSON_AddNumberToObject(o, "n_erased", res->n_tokens);
        return print_free(o);
    }
    const bool save = a == NX_SRV_SLOT_SAVE;
    cJSON_AddStringToObject(o, "filename", filename);
    cJSON_AddNumberToObject(o, save ? "n_saved" : "n_restored", res->n_tokens);
    cJSON_AddNumberToObject(o, save ? "n_written" : "n_read", (double)res->n_bytes);
    cJSON *t = cJSON_AddObjectToObject(o, "timings");
    cJSON_AddNumberToObject(t, save ? "save_ms" : "restore_ms", res->ms);
    return print_free(o);
}
