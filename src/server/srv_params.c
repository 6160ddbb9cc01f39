/* srv_params.c - the request fields both APIs read: prompts, logit bias, samplers, and /infill's
 * prompt (see srv_params.h). */
#include "server/srv_params.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

/* llama.cpp's chain order (sample.h) */
enum { S_PENALTIES, S_DRY, S_TOP_N_SIGMA, S_TOP_K, S_TYPICAL, S_TOP_P, S_MIN_P, S_XTC, S_TEMPERATURE, S_CHAIN, S_NEUTRAL = 100 };

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
        {"dry", S_DRY}, {"typ_p", S_TYPICAL}, {"typ-p", S_TYPICAL}, {"typp", S_TYPICAL}, {"typ", S_TYPICAL},
        {"typical_p", S_TYPICAL}, {"typical", S_TYPICAL},
        {"xtc", S_XTC}, {"top_n_sigma", S_TOP_N_SIGMA}, {"top-n-sigma", S_TOP_N_SIGMA}, {"topnsigma", S_TOP_N_SIGMA},
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
    case 'y': return S_TYPICAL;
    case 'x': return S_XTC;
    case 's': return S_TOP_N_SIGMA;
    case 'd': return S_DRY;
    default: return -1;
    }
}

bool nx_srv_parse_samplers(const cJSON *v, nextn_sampler_params *smp, int *status, nx_err *err) {
    if (!v || cJSON_IsNull(v)) return true;
    static const char *const chain = "penalties, dry, top_n_sigma, top_k, typ_p, top_p, min_p, xtc, temperature";
    bool used[S_CHAIN] = {false};
    int last = -1, n = 0, n_seq = 0;
    bool in_order = true;
    char seq[S_CHAIN + 1];
    if (cJSON_IsString(v)) n = (int)strlen(v->valuestring);
    else if (cJSON_IsArray(v)) n = cJSON_GetArraySize(v);
    else return fail_at(status, 400, err, "'samplers' must be an array of sampler names or a string of letters");
    for (int i = 0; i < n; i++) {
        int id;
        if (cJSON_IsString(v)) {
            id = sampler_of_char(v->valuestring[i]);
            if (id < 0)
                return fail_at(status, 400, err, "'samplers': unknown sampler letter '%c' (this server has e d s k y p m x t)",
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
        if (used[id])
            return fail_at(status, 400, err, "'samplers'[%d]: each sampler at most once (%s)", i, chain);
        in_order = in_order && id > last;
        used[id] = true;
        last = id;
        seq[n_seq++] = "edskypmxt"[id];
    }
    seq[n_seq] = '\0';
    /* another order than llama.cpp's default: the sampler runs that chain (sample.h "Samplers order") */
    if (!in_order) snprintf(smp->samplers, sizeof smp->samplers, "%s", seq);
    if (!used[S_PENALTIES]) smp->penalty_last_n = 0;
    if (!used[S_TOP_K]) smp->top_k = 0;
    if (!used[S_TOP_P]) smp->top_p = 1.0f;
    if (!used[S_MIN_P]) smp->min_p = 0.0f;
    if (!used[S_TEMPERATURE]) {
        smp->temp = 1.0f;
        smp->dynatemp_range = 0.0f;
    }
    if (!used[S_TOP_N_SIGMA]) smp->top_n_sigma = -1.0f;
    if (!used[S_DRY]) smp->dry_multiplier = 0.0f;
    if (!used[S_TYPICAL]) smp->typ_p = 1.0f;
    if (!used[S_XTC]) smp->xtc_probability = 0.0f;
    return true;
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
