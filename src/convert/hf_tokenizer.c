/* hf_tokenizer.c - tokenizer.json (+ tokenizer_config.json, config.json) -> GGUF vocabulary,
 * following llama.cpp's converter (see hf_tokenizer.h for the rules). */
#include "convert/hf_tokenizer.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn_internal.h"

enum { MAX_JSON_BYTES = 1 << 30 };

static char *read_text_file(const char *path, nx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 65536 + 1 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            if (cap > MAX_JSON_BYTES) {
                nx_fail(err, "%s: larger than the %d MiB limit for JSON files", path, MAX_JSON_BYTES >> 20);
                goto fail;
            }
            char *b = realloc(buf, cap);
            if (!b) {
                nx_fail(err, "%s: out of memory reading the file", path);
                goto fail;
            }
            buf = b;
        }
        size_t got = fread(buf + len, 1, cap - len - 1, f);
        len += got;
        if (got == 0) break;
    }
    if (ferror(f)) {
        nx_fail(err, "%s: read error: %s", path, strerror(errno));
        goto fail;
    }
    fclose(f);
    buf[len] = 0;
    return buf;
fail:
    fclose(f);
    free(buf);
    return NULL;
}

static cJSON *parse_json_file(const char *path, nx_err *err) {
    char *text = read_text_file(path, err);
    if (!text) return NULL;
    cJSON *j = cJSON_Parse(text);
    if (!j) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= text ? (size_t)(at - text) : 0;
        nx_fail(err, "%s: invalid JSON near byte %zu", path, off);
    }
    free(text);
    return j;
}

static char *dup_bytes(const char *s, size_t n) {
    char *d = malloc(n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

void nx_hf_vocab_free(nx_hf_vocab *v) {
    if (v->tokens)
        for (uint32_t i = 0; i < v->n_tokens; i++) free((char *)v->tokens[i].ptr);
    if (v->merges)
        for (uint32_t i = 0; i < v->n_merges; i++) free((char *)v->merges[i].ptr);
    free(v->tokens);
    free(v->types);
    free(v->merges);
    free(v->chat_template);
    memset(v, 0, sizeof *v);
}

/* HF convention: added tokens looking like <|...|> are control tokens even when not marked special
 * (conversion/base.py does_token_look_special). */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    static const char *const exact[] = {"<pad>", "<mask>", "<2mass>", "[@BOS@]"};
    for (size_t i = 0; i < NX_ARRAY_LEN(exact); i++)
        if (!strcmp(s, exact[i])) return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    /* fullwidth bars: "<｜...｜>" (U+FF5C is EF BD 9C) */
    if (n >= 8 && !strncmp(s, "<\xEF\xBD\x9C", 4) && !strcmp(s + n - 4, "\xEF\xBD\x9C>")) return true;
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>') return true;
    return false;
}

/* Replaces "▁" (U+2581) by a space, as the converter does for user-defined tokens. */
static void replace_sp_marker(char *s) {
    char *w = s;
    for (const char *r = s; *r;) {
        if (!strncmp(r, "\xE2\x96\x81", 3)) {
            *w++ = ' ';
            r += 3;
        } else {
            *w++ = *r++;
        }
    }
    *w = 0;
}

static bool load_pre(nx_hf_vocab *v, const cJSON *root, const char *path, nx_err *err) {
    const cJSON *pt = cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer");
    const cJSON *list = NULL;
    if (cJSON_IsObject(pt)) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(pt, "type");
        if (cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence"))
            list = cJSON_GetObjectItemCaseSensitive(pt, "pretokenizers");
    }
    const char *regex = NULL;
    bool byte_level = false;
    const cJSON *it;
    cJSON_ArrayForEach(it, list) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(it, "type");
        if (!cJSON_IsString(type)) continue;
        if (!strcmp(type->valuestring, "Split")) {
            const cJSON *pat = cJSON_GetObjectItemCaseSensitive(it, "pattern");
            const cJSON *re = cJSON_GetObjectItemCaseSensitive(pat, "Regex");
            if (cJSON_IsString(re)) regex = re->valuestring;
        } else if (!strcmp(type->valuestring, "ByteLevel")) {
            byte_level = true;
        }
    }
    if (!regex || !byte_level)
        return nx_fail(err, "%s: pre_tokenizer is not a Sequence of Split(Regex) + ByteLevel; only Qwen-style byte-level BPE is supported", path);
    const nx_pretok types[] = {NX_PRETOK_QWEN2, NX_PRETOK_QWEN35};
    const char *names[] = {"qwen2", "qwen35"};
    for (size_t i = 0; i < 2; i++)
        if (!strcmp(regex, nx_pretok_hf_pattern(types[i]))) {
            snprintf(v->pre, sizeof v->pre, "%s", names[i]);
            return true;
        }
    return nx_fail(err, "%s: pre_tokenizer regex '%.120s' is not one we implement (qwen2, qwen35)", path, regex);
}

/* tokenizer.json "normalizer": null (or an empty Sequence) -> none; {"type": "NFC"} (alone or as
 * the only member of a Sequence) -> NFC.  Anything else would change the text in ways the
 * tokenizer does not implement: an error. */
static bool load_normalizer(nx_hf_vocab *v, const cJSON *root, const char *path, nx_err *err) {
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    v->nfc = false;
    if (!n || cJSON_IsNull(n)) return true;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(n, "type");
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "Sequence")) {
        const cJSON *list = cJSON_GetObjectItemCaseSensitive(n, "normalizers");
        int count = cJSON_GetArraySize(list);
        if (cJSON_IsArray(list) && count == 0) return true;
        if (cJSON_IsArray(list) && count == 1) {
            n = cJSON_GetArrayItem(list, 0);
            type = cJSON_GetObjectItemCaseSensitive(n, "type");
        }
    }
    if (cJSON_IsString(type) && !strcmp(type->valuestring, "NFC")) {
        v->nfc = true;
        return true;
    }
    return nx_fail(err, "%s: normalizer %s%s%s is not supported (only none or NFC)", path,
                   cJSON_IsString(type) ? "of type '" : "", cJSON_IsString(type) ? type->valuestring : "without a type",
                   cJSON_IsString(type) ? "'" : "");
}

static bool load_merges(nx_hf_vocab *v, const cJSON *model, const char *path, nx_err *err) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    int n = cJSON_GetArraySize(merges);
    if (!cJSON_IsArray(merges) || n <= 0) return nx_fail(err, "%s: model.merges is missing or empty", path);
    v->merges = nx_calloc((size_t)n, sizeof *v->merges, "merges", err);
    if (!v->merges) return false;
    const cJSON *m;
    cJSON_ArrayForEach(m, merges) {
        uint32_t r = v->n_merges;
        char *s = NULL;
        if (cJSON_IsString(m)) {
            s = dup_bytes(m->valuestring, strlen(m->valuestring));
        } else if (cJSON_IsArray(m) && cJSON_GetArraySize(m) == 2 && cJSON_IsString(cJSON_GetArrayItem(m, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(m, 1))) {
            const char *a = cJSON_GetArrayItem(m, 0)->valuestring, *b = cJSON_GetArrayItem(m, 1)->valuestring;
            if (strchr(a, ' ') || strchr(b, ' '))
                return nx_fail(err, "%s: merge %u contains a space; not supported", path, r);
            size_t la = strlen(a), lb = strlen(b);
            s = malloc(la + lb + 2);
            if (s) {
                memcpy(s, a, la);
                s[la] = ' ';
                memcpy(s + la + 1, b, lb + 1);
            }
        } else {
            return nx_fail(err, "%s: model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", path, r);
        }
        if (!s) return nx_fail(err, "%s: out of memory for merges", path);
        v->merges[v->n_merges++] = (nx_str){s, strlen(s)};
    }
    return true;
}

/* Reads model.vocab and added_tokens into tokens/types. */
static bool load_tokens(nx_hf_vocab *v, const cJSON *root, const cJSON *model, int64_t config_vocab_size,
                        const char *path, nx_err *err) {
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return nx_fail(err, "%s: model.vocab is missing", path);
    int64_t max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble > 16777216 || it->valuedouble != (double)(int64_t)it->valuedouble)
            return nx_fail(err, "%s: model.vocab['%.60s'] is not a token id in 0..16777216", path, it->string);
        if ((int64_t)it->valuedouble > max_id) max_id = (int64_t)it->valuedouble;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 16777216 || !cJSON_IsString(content))
            return nx_fail(err, "%s: an entry of added_tokens lacks a valid id or content", path);
        if ((int64_t)id->valuedouble > max_id) max_id = (int64_t)id->valuedouble;
    }
    if (max_id < 0) return nx_fail(err, "%s: the vocabulary is empty", path);
    int64_t n = max_id + 1;
    if (config_vocab_size > 0) {
        if (config_vocab_size < n)
            return nx_fail(err, "%s: token id %lld is not below config.json vocab_size %lld", path, (long long)max_id, (long long)config_vocab_size);
        n = config_vocab_size;
    }
    v->n_tokens = (uint32_t)n;
    v->tokens = nx_calloc((size_t)n, sizeof *v->tokens, "tokens", err);
    v->types = nx_calloc((size_t)n, sizeof *v->types, "token types", err);
    if (!v->tokens || !v->types) return false;
    cJSON_ArrayForEach(it, vocab) {
        uint32_t id = (uint32_t)it->valuedouble;
        if (v->tokens[id].ptr) return nx_fail(err, "%s: token id %u is used twice in model.vocab", path, id);
        v->tokens[id] = (nx_str){dup_bytes(it->string, strlen(it->string)), strlen(it->string)};
        v->types[id] = NX_TOKEN_NORMAL;
        if (!v->tokens[id].ptr) return nx_fail(err, "%s: out of memory for tokens", path);
    }
    cJSON_ArrayForEach(it, added) {
        uint32_t id = (uint32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
        const char *content = cJSON_GetObjectItemCaseSensitive(it, "content")->valuestring;
        bool special = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        free((char *)v->tokens[id].ptr); /* an added token may restate a vocab entry */
        char *s = dup_bytes(content, strlen(content));
        if (!s) return nx_fail(err, "%s: out of memory for tokens", path);
        if (special || looks_special(s)) {
            v->types[id] = NX_TOKEN_CONTROL;
        } else {
            replace_sp_marker(s);
            v->types[id] = NX_TOKEN_USER_DEFINED;
        }
        v->tokens[id] = (nx_str){s, strlen(s)};
    }
    for (uint32_t id = 0; id < v->n_tokens; id++) {
        if (v->tokens[id].ptr) continue;
        char buf[32];
        int len = snprintf(buf, sizeof buf, "[PAD%u]", id);
        v->tokens[id] = (nx_str){dup_bytes(buf, (size_t)len), (size_t)len};
        v->types[id] = NX_TOKEN_UNUSED;
        if (!v->tokens[id].ptr) return nx_fail(err, "%s: out of memory for tokens", path);
    }
    return true;
}

/* tokenizer_config.json: "<typ>_token" is a string or {"content": ...}; the id is that of the
 * first added token with this content. */
static int32_t special_from_config(const cJSON *cfg, const cJSON *added, const char *typ) {
    char key[32];
    snprintf(key, sizeof key, "%s_token", typ);
    const cJSON *e = cJSON_GetObjectItemCaseSensitive(cfg, key);
    const char *content = NULL;
    if (cJSON_IsString(e)) content = e->valuestring;
    else if (cJSON_IsObject(e) && cJSON_IsString(cJSON_GetObjectItemCaseSensitive(e, "content")))
        content = cJSON_GetObjectItemCaseSensitive(e, "content")->valuestring;
    if (!content) return -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, added) {
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(it, "content");
        if (cJSON_IsString(c) && !strcmp(c->valuestring, content))
            return (int32_t)cJSON_GetObjectItemCaseSensitive(it, "id")->valuedouble;
    }
    return -1;
}

static const char *const SPECIAL_TYPES[] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};

static int32_t *special_slot(nx_hf_vocab *v, size_t i) {
    int32_t *slots[] = {&v->bos_id, &v->eos_id, &v->unk_id, &v->sep_id, &v->pad_id, &v->cls_id, &v->mask_id};
    return slots[i];
}

/* No chat_template in tokenizer_config.json: like llama.cpp's SpecialVocab, take
 * chat_template.jinja, else chat_template.json's "chat_template", from the tokenizer's folder
 * (recent Qwen3.5 checkpoints ship the template as chat_template.jinja).  Absent is fine. */
static bool load_template_file(nx_hf_vocab *v, const char *tok_path, nx_err *err) {
    const char *slash = strrchr(tok_path, '/');
    int dir_len = slash ? (int)(slash - tok_path) : 1;
    const char *dir = slash ? tok_path : ".";
    char path[4096];
    snprintf(path, sizeof path, "%.*s/chat_template.jinja", dir_len, dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        v->chat_template = read_text_file(path, err);
        return v->chat_template != NULL;
    }
    snprintf(path, sizeof path, "%.*s/chat_template.json", dir_len, dir);
    f = fopen(path, "rb");
    if (!f) return true;
    fclose(f);
    cJSON *j = parse_json_file(path, err);
    if (!j) return false;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "chat_template");
    bool ok = true;
    if (cJSON_IsString(t)) {
        v->chat_template = dup_bytes(t->valuestring, strlen(t->valuestring));
        if (!v->chat_template) ok = nx_fail(err, "out of memory for the chat template");
    }
    cJSON_Delete(j);
    return ok;
}

bool nx_hf_vocab_load(nx_hf_vocab *v, const char *tok_path, const char *cfg_path, const char *config_path, nx_err *err) {
    memset(v, 0, sizeof *v);
    for (size_t i = 0; i < NX_ARRAY_LEN(SPECIAL_TYPES); i++) *special_slot(v, i) = -1;
    v->add_bos = v->add_eos = -1;
    cJSON *root = NULL, *cfg = NULL, *config = NULL;
    bool ok = false;
    if (!(root = parse_json_file(tok_path, err))) goto done;
    if (cfg_path && !(cfg = parse_json_file(cfg_path, err))) goto done;
    if (config_path && !(config = parse_json_file(config_path, err))) goto done;

    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE")) {
        nx_fail(err, "%s: model.type is not \"BPE\"", tok_path);
        goto done;
    }
    if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "byte_fallback"))) {
        nx_fail(err, "%s: model.byte_fallback is true (SentencePiece-style BPE is not supported)", tok_path);
        goto done;
    }
    int64_t vocab_size = -1;
    /* llama.cpp merges config.json's text_config over the top level (Qwen3_5ForConditionalGeneration
     * keeps vocab_size there), so text_config's value wins. */
    const cJSON *text_config = cJSON_GetObjectItemCaseSensitive(config, "text_config");
    const cJSON *vs = cJSON_GetObjectItemCaseSensitive(text_config, "vocab_size");
    if (!vs) vs = cJSON_GetObjectItemCaseSensitive(config, "vocab_size");
    if (cJSON_IsNumber(vs)) {
        if (vs->valuedouble < 1 || vs->valuedouble > 16777216) {
            nx_fail(err, "%s: vocab_size %g is out of range", config_path, vs->valuedouble);
            goto done;
        }
        vocab_size = (int64_t)vs->valuedouble;
    }
    if (!load_pre(v, root, tok_path, err) || !load_normalizer(v, root, tok_path, err) || !load_tokens(v, root, model, vocab_size, tok_path, err) ||
        !load_merges(v, model, tok_path, err))
        goto done;

    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    for (size_t i = 0; i < NX_ARRAY_LEN(SPECIAL_TYPES); i++) {
        char key[32];
        snprintf(key, sizeof key, "add_%s_token", SPECIAL_TYPES[i]);
        const cJSON *a = cJSON_GetObjectItemCaseSensitive(cfg, key);
        if (cJSON_IsBool(a) && i == 0) v->add_bos = cJSON_IsTrue(a);
        if (cJSON_IsBool(a) && i == 1) v->add_eos = cJSON_IsTrue(a);
        int32_t id = special_from_config(cfg, added, SPECIAL_TYPES[i]);
        if (id < 0) {
            /* config.json "<typ>_token_id" (an int; lists are ignored like the converter does) */
            snprintf(key, sizeof key, "%s_token_id", SPECIAL_TYPES[i]);
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(config, key);
            if (!c || cJSON_IsNull(c)) c = cJSON_GetObjectItemCaseSensitive(text_config, key); /* (SpecialVocab) */
            if (cJSON_IsNumber(c) && c->valuedouble >= 0 && c->valuedouble < v->n_tokens) id = (int32_t)c->valuedouble;
        }
        if (id >= 0 && (uint32_t)id < v->n_tokens) *special_slot(v, i) = id;
    }
    const cJSON *tmpl = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
    if (cJSON_IsString(tmpl)) {
        v->chat_template = dup_bytes(tmpl->valuestring, strlen(tmpl->valuestring));
        if (!v->chat_template) {
            nx_fail(err, "out of memory for the chat template");
            goto done;
        }
    } else if (cfg && !tmpl && !load_template_file(v, tok_path, err)) {
        goto done;
    }
    ok = true;
done:
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    cJSON_Delete(config);
    if (!ok) nx_hf_vocab_free(v);
    return ok;
}

void nx_hf_vocab_desc(const nx_hf_vocab *v, nx_vocab_desc *d) {
    nx_vocab_desc_init(d);
    d->name = "tokenizer.json";
    d->n_tokens = v->n_tokens;
    d->tokens = v->tokens;
    d->types = v->types;
    d->n_merges = v->n_merges;
    d->merges = v->merges;
    d->pre = v->pre;
    d->normalizer = v->nfc ? NX_NORM_NFC : NX_NORM_NONE;
    d->bos_id = v->bos_id;
    d->eos_id = v->eos_id;
    d->pad_id = v->pad_id;
    d->add_bos = v->add_bos == 1;
    d->add_eos = v->add_eos == 1;
}
