/* cmd_info.c - `nextn info FILE.gguf`: metadata, tensor table and totals of a GGUF file.
 *
 * Everything printed comes from the validated reader (src/gguf_read.c), so a malformed file
 * ends in one clear error line and exit status 1.  Long strings and arrays are abbreviated
 * (`[151936 strings: "!", "\"", ... ]`); --full prints arrays completely; --json prints everything,
 * arrays in full, as one JSON object (integers exact, strings made valid UTF-8). */
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"

#define LINE_BUDGET 100  /* characters an abbreviated value may take */
#define STR_BUDGET 60    /* bytes of a single string value shown before "..." */

typedef struct text { char *p; size_t len, cap; } text;

static void text_add(text *t, const char *s, size_t n) {
    if (t->len + n + 1 > t->cap) {
        size_t ncap = (t->len + n + 1) * 2;
        char *p = realloc(t->p, ncap);
        if (!p) { fprintf(stderr, "nextn info: out of memory\n"); exit(1); }
        t->p = p;
        t->cap = ncap;
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

static void text_printf(text *t, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void text_printf(text *t, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0) text_add(t, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

/* Appends s as a C-style quoted string; at most `limit` bytes of it (0 = all). UTF-8 passes through. */
static void add_quoted(text *t, nx_str s, uint64_t limit) {
    text_add(t, "\"", 1);
    uint64_t n = limit && s.len > limit ? limit : s.len;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        char esc[8];
        if (c == '"' || c == '\\') { esc[0] = '\\'; esc[1] = (char)c; text_add(t, esc, 2); }
        else if (c == '\n') text_add(t, "\\n", 2);
        else if (c == '\t') text_add(t, "\\t", 2);
        else if (c == '\r') text_add(t, "\\r", 2);
        else if (c < 0x20 || c == 0x7f) { snprintf(esc, sizeof esc, "\\x%02x", c); text_add(t, esc, 4); }
        else text_add(t, (const char *)&c, 1);
    }
    text_add(t, "\"", 1);
    if (n < s.len) text_printf(t, "... (%" PRIu64 " bytes)", s.len);
}

static void add_number(text *t, const nx_gguf_kv *kv, uint64_t i) {
    switch (kv->arr_type) {
    case NX_GGUF_FLOAT32: text_printf(t, "%.9g", nx_gguf_arr_f64(kv, i)); break;
    case NX_GGUF_FLOAT64: text_printf(t, "%.17g", nx_gguf_arr_f64(kv, i)); break;
    case NX_GGUF_BOOL: text_add(t, nx_gguf_arr_int(kv, i) ? "true" : "false", nx_gguf_arr_int(kv, i) ? 4 : 5); break;
    case NX_GGUF_UINT64: text_printf(t, "%" PRIu64, (uint64_t)nx_gguf_arr_int(kv, i)); break;
    default: text_printf(t, "%" PRId64, nx_gguf_arr_int(kv, i)); break;
    }
}

static const char *plural_type(nx_gguf_vtype t) {
    return t == NX_GGUF_STRING ? "strings" : t == NX_GGUF_ARRAY ? "arrays" : nx_gguf_vtype_name(t);
}

static void add_value(text *t, const nx_gguf_kv *kv, bool full) {
    switch (kv->type) {
    case NX_GGUF_STRING: add_quoted(t, kv->v.str, full ? 0 : STR_BUDGET); return;
    case NX_GGUF_BOOL: text_add(t, kv->v.b ? "true" : "false", kv->v.b ? 4 : 5); return;
    case NX_GGUF_FLOAT32: text_printf(t, "%.9g", kv->v.f64); return;
    case NX_GGUF_FLOAT64: text_printf(t, "%.17g", kv->v.f64); return;
    case NX_GGUF_UINT8: case NX_GGUF_UINT16: case NX_GGUF_UINT32: case NX_GGUF_UINT64:
        text_printf(t, "%" PRIu64, kv->v.u64); return;
    case NX_GGUF_INT8: case NX_GGUF_INT16: case NX_GGUF_INT32: case NX_GGUF_INT64:
        text_printf(t, "%" PRId64, kv->v.i64); return;
    case NX_GGUF_ARRAY: break;
    default: text_add(t, "?", 1); return;
    }
    text_printf(t, "[%" PRIu64 " %s", kv->arr_count, plural_type(kv->arr_type));
    if (kv->arr_type == NX_GGUF_ARRAY) { /* nested arrays are only exposed raw */
        text_printf(t, ", %" PRIu64 " bytes]", kv->arr_bytes);
        return;
    }
    if (kv->arr_count == 0) { text_add(t, "]", 1); return; }
    text_add(t, ": ", 2);
    size_t start = t->len;
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        if (!full && t->len - start > LINE_BUDGET) { text_add(t, "... ]", 5); return; }
        if (kv->arr_type == NX_GGUF_STRING) add_quoted(t, nx_gguf_arr_str(kv, i), full ? 0 : STR_BUDGET);
        else add_number(t, kv, i);
        text_add(t, i + 1 < kv->arr_count ? ", " : "]", i + 1 < kv->arr_count ? 2 : 1);
    }
}

static void add_shape(text *t, const nx_gguf_tensor *ts) {
    text_add(t, "[", 1);
    for (uint32_t d = 0; d < ts->n_dims; d++) text_printf(t, d ? ", %" PRIu64 : "%" PRIu64, ts->ne[d]);
    text_add(t, "]", 1);
}

static const char *type_name(uint32_t type, char *buf, size_t cap) {
    const nx_gguf_type_layout *l = nx_gguf_type_layout_get(type);
    if (l) return l->name;
    snprintf(buf, cap, "type%" PRIu32, type);
    return buf;
}

/* Bits per weight of `bytes` holding `params` values (0 for none). */
static double bpw(uint64_t bytes, uint64_t params) { return params ? 8.0 * (double)bytes / (double)params : 0.0; }

static void human(char *buf, size_t cap, uint64_t bytes) {
    if (bytes >= (1ull << 30)) snprintf(buf, cap, "%.2f GiB", (double)bytes / (double)(1ull << 30));
    else if (bytes >= (1ull << 20)) snprintf(buf, cap, "%.2f MiB", (double)bytes / (double)(1ull << 20));
    else if (bytes >= 1024) snprintf(buf, cap, "%.1f KiB", (double)bytes / 1024.0);
    else snprintf(buf, cap, "%" PRIu64 " B", bytes);
}

/* ---- --json ------------------------------------------------------------------------------------ */

/* Length of a valid UTF-8 sequence at p (at most n bytes), 0 if invalid (overlongs, surrogates
 * and code points above U+10FFFF are invalid). */
static size_t utf8_len(const unsigned char *p, uint64_t n) {
    if (p[0] < 0x80) return 1;
    size_t len = p[0] >= 0xf0 && p[0] <= 0xf4 ? 4 : p[0] >= 0xe0 ? (p[0] <= 0xef ? 3 : 0) : p[0] >= 0xc2 ? 2 : 0;
    if (len == 0 || len > n) return 0;
    for (size_t i = 1; i < len; i++)
        if ((p[i] & 0xc0) != 0x80) return 0;
    if (len == 3 && ((p[0] == 0xe0 && p[1] < 0xa0) || (p[0] == 0xed && p[1] >= 0xa0))) return 0;
    if (len == 4 && ((p[0] == 0xf0 && p[1] < 0x90) || (p[0] == 0xf4 && p[1] >= 0x90))) return 0;
    return len;
}

/* JSON string of a file string: invalid UTF-8 and NUL bytes become U+FFFD (JSON via cJSON cannot
 * carry NUL; GGUF strings are meant to be UTF-8). */
static cJSON *json_str(nx_str s) {
    text t = {0};
    const unsigned char *p = (const unsigned char *)s.ptr;
    for (uint64_t i = 0; i < s.len;) {
        size_t n = p[i] ? utf8_len(p + i, s.len - i) : 0;
        if (n) { text_add(&t, (const char *)p + i, n); i += n; }
        else { text_add(&t, "\xef\xbf\xbd", 3); i++; }
    }
    cJSON *j = cJSON_CreateString(t.p ? t.p : "");
    free(t.p);
    return j;
}

static cJSON *json_u64(uint64_t v) { char b[24]; snprintf(b, sizeof b, "%" PRIu64, v); return cJSON_CreateRaw(b); }
static cJSON *json_i64(int64_t v) { char b[24]; snprintf(b, sizeof b, "%" PRId64, v); return cJSON_CreateRaw(b); }

static cJSON *json_value(const nx_gguf_kv *kv) {
    switch (kv->type) {
    case NX_GGUF_STRING: return json_str(kv->v.str);
    case NX_GGUF_BOOL: return cJSON_CreateBool(kv->v.b);
    case NX_GGUF_FLOAT32: case NX_GGUF_FLOAT64: return cJSON_CreateNumber(kv->v.f64); /* NaN/Inf print as null */
    case NX_GGUF_UINT8: case NX_GGUF_UINT16: case NX_GGUF_UINT32: case NX_GGUF_UINT64: return json_u64(kv->v.u64);
    case NX_GGUF_INT8: case NX_GGUF_INT16: case NX_GGUF_INT32: case NX_GGUF_INT64: return json_i64(kv->v.i64);
    case NX_GGUF_ARRAY: break;
    default: return cJSON_CreateNull();
    }
    if (kv->arr_type == NX_GGUF_ARRAY) return cJSON_CreateNull(); /* nested arrays: raw only */
    cJSON *a = cJSON_CreateArray();
    for (uint64_t i = 0; i < kv->arr_count; i++) {
        cJSON *e;
        switch (kv->arr_type) {
        case NX_GGUF_STRING: e = json_str(nx_gguf_arr_str(kv, i)); break;
        case NX_GGUF_BOOL: e = cJSON_CreateBool(nx_gguf_arr_int(kv, i) != 0); break;
        case NX_GGUF_FLOAT32: case NX_GGUF_FLOAT64: e = cJSON_CreateNumber(nx_gguf_arr_f64(kv, i)); break;
        case NX_GGUF_UINT64: e = json_u64((uint64_t)nx_gguf_arr_int(kv, i)); break;
        default: e = json_i64(nx_gguf_arr_int(kv, i)); break;
        }
        cJSON_AddItemToArray(a, e);
    }
    return a;
}

static int print_json(const nx_gguf *g, const char *path, bool tensors) {
    char tb[32];
    cJSON *root = cJSON_CreateObject();
    cJSON_AddItemToObject(root, "file", cJSON_CreateString(path));
    cJSON_AddItemToObject(root, "size", json_u64(g->size));
    cJSON_AddItemToObject(root, "version", json_u64(g->version));
    cJSON_AddItemToObject(root, "alignment", json_u64(g->alignment));
    cJSON_AddItemToObject(root, "data_offset", json_u64(g->data_offset));
    cJSON *meta = cJSON_AddArrayToObject(root, "metadata");
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "key", json_str(kv->key));
        cJSON_AddStringToObject(o, "type", nx_gguf_vtype_name(kv->type));
        if (kv->type == NX_GGUF_ARRAY) {
            cJSON_AddStringToObject(o, "elem_type", nx_gguf_vtype_name(kv->arr_type));
            cJSON_AddItemToObject(o, "count", json_u64(kv->arr_count));
            if (kv->arr_type == NX_GGUF_ARRAY) cJSON_AddItemToObject(o, "bytes", json_u64(kv->arr_bytes));
        }
        cJSON_AddItemToObject(o, "value", json_value(kv));
        cJSON_AddItemToArray(meta, o);
    }
    uint64_t params = 0, bytes = 0;
    cJSON *tens = tensors ? cJSON_AddArrayToObject(root, "tensors") : NULL;
    cJSON *by_type = cJSON_CreateObject();
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *ts = &g->tensors[i];
        params += ts->ne[0] * ts->ne[1] * ts->ne[2] * ts->ne[3];
        bytes += ts->nbytes;
        const char *tn = type_name(ts->type, tb, sizeof tb);
        cJSON *bt = cJSON_GetObjectItemCaseSensitive(by_type, tn);
        if (!bt) {
            bt = cJSON_AddObjectToObject(by_type, tn);
            cJSON_AddNumberToObject(bt, "tensors", 0);
            cJSON_AddNumberToObject(bt, "bytes", 0);
            cJSON_AddNumberToObject(bt, "parameters", 0);
        }
        cJSON *c = cJSON_GetObjectItemCaseSensitive(bt, "tensors"), *b = cJSON_GetObjectItemCaseSensitive(bt, "bytes");
        cJSON *pn = cJSON_GetObjectItemCaseSensitive(bt, "parameters");
        cJSON_SetNumberValue(c, c->valuedouble + 1);
        cJSON_SetNumberValue(b, b->valuedouble + (double)ts->nbytes);
        cJSON_SetNumberValue(pn, pn->valuedouble + (double)(ts->ne[0] * ts->ne[1] * ts->ne[2] * ts->ne[3]));
        if (!tens) continue;
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "name", json_str(ts->name));
        cJSON_AddStringToObject(o, "type", tn);
        cJSON *shape = cJSON_AddArrayToObject(o, "shape");
        for (uint32_t d = 0; d < ts->n_dims; d++) cJSON_AddItemToArray(shape, json_u64(ts->ne[d]));
        cJSON_AddItemToObject(o, "bytes", json_u64(ts->nbytes));
        cJSON_AddItemToObject(o, "offset", json_u64(g->data_offset + ts->offset));
        cJSON_AddItemToArray(tens, o);
    }
    cJSON *tot = cJSON_AddObjectToObject(root, "totals");
    cJSON_AddItemToObject(tot, "tensors", json_u64(g->n_tensors));
    cJSON_AddItemToObject(tot, "parameters", json_u64(params));
    cJSON_AddItemToObject(tot, "bytes", json_u64(bytes));
    cJSON_AddNumberToObject(tot, "bits_per_weight", bpw(bytes, params));
    for (cJSON *bt = by_type->child; bt; bt = bt->next) {
        const cJSON *b = cJSON_GetObjectItemCaseSensitive(bt, "bytes"), *pn = cJSON_GetObjectItemCaseSensitive(bt, "parameters");
        cJSON_AddNumberToObject(bt, "bits_per_weight", pn->valuedouble > 0 ? 8.0 * b->valuedouble / pn->valuedouble : 0.0);
    }
    cJSON_AddItemToObject(tot, "by_type", by_type);
    char *out = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!out) { fprintf(stderr, "nextn info: out of memory printing JSON\n"); return 1; }
    puts(out);
    free(out);
    return 0;
}

/* ---- the model summary (qwen35 / qwen35moe files) -------------------------------------------- */

/* Layer index of "blk.N.<rest>" (rest returned), or -1. */
static long blk_index(nx_str name, const char **rest) {
    if (name.len < 6 || memcmp(name.ptr, "blk.", 4)) return -1;
    long v = 0;
    uint64_t i = 4;
    for (; i < name.len && name.ptr[i] >= '0' && name.ptr[i] <= '9' && v < 100000; i++) v = v * 10 + (name.ptr[i] - '0');
    if (i == 4 || i >= name.len || name.ptr[i] != '.') return -1;
    *rest = name.ptr + i + 1;
    return v;
}

static bool has_prefix(const char *s, const char *p) { return !strncmp(s, p, strlen(p)); }

/* Architecture, layers, experts; parameters and bytes split into routed experts, shared experts,
 * the rest of the trunk layers, embeddings + head, and the MTP block; and what one token's forward
 * pass reads: everything but the routed experts, plus k / n of those. */
static void print_model_summary(const nx_gguf *g) {
    nx_hparams hp;
    nx_err err;
    nx_str arch;
    if (!nx_gguf_get_str(g, "general.architecture", &arch, &err) ||
        !(nx_str_eq(arch, "qwen35") || nx_str_eq(arch, "qwen35moe")))
        return;
    if (!nx_hparams_from_gguf(&hp, g, &err)) {
        printf("\nmodel: not loadable: %s\n", err.msg);
        return;
    }
    enum { ROUTED, SHARED, LAYERS, GLOBAL, MTP, N_PART };
    static const char *const part_name[N_PART] = {"routed experts", "shared experts", "attention/GDN/norms/router",
                                                  "embeddings + head", "MTP block"};
    uint64_t par[N_PART] = {0}, byt[N_PART] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *ts = &g->tensors[i];
        const uint64_t n = ts->ne[0] * ts->ne[1] * ts->ne[2] * ts->ne[3];
        const char *rest = NULL;
        long li = blk_index(ts->name, &rest);
        int part = GLOBAL;
        if (li >= (long)hp.n_layer) part = MTP;
        else if (li >= 0 && (has_prefix(rest, "ffn_gate_exps.") || has_prefix(rest, "ffn_up_exps.") ||
                             has_prefix(rest, "ffn_down_exps.") || has_prefix(rest, "ffn_gate_up_exps.")))
            part = ROUTED;
        else if (li >= 0 && (has_prefix(rest, "ffn_gate_shexp.") || has_prefix(rest, "ffn_up_shexp.") ||
                             has_prefix(rest, "ffn_down_shexp.")))
            part = SHARED;
        else if (li >= 0) part = LAYERS;
        par[part] += n;
        byt[part] += ts->nbytes;
    }
    int gdn = 0;
    for (uint32_t l = 0; l < hp.n_layer; l++) gdn += hp.recurrent[l];
    printf("\nmodel: %s, %u layers (%d Gated DeltaNet, %u attention)%s\n", nx_hp_arch(&hp), hp.n_layer, gdn,
           hp.n_layer - (uint32_t)gdn, hp.n_mtp ? " + 1 MTP block" : ", no MTP block");
    if (hp.moe)
        printf("  experts: %u per layer, %u routed per token + 1 shared; expert width %u, shared width %u\n",
               hp.n_expert, hp.n_expert_used, hp.n_ff_exp, hp.n_ff_shexp);
    uint64_t tot_p = 0, tot_b = 0;
    for (int k = 0; k < MTP; k++) tot_p += par[k], tot_b += byt[k];
    char hb[32];
    printf("  %-28s %14s %12s\n", "part", "parameters", "bytes");
    for (int k = 0; k < N_PART; k++) {
        if (!hp.moe && (k == ROUTED || k == SHARED)) continue;
        human(hb, sizeof hb, byt[k]);
        printf("  %-28s %14" PRIu64 " %12s", part_name[k], par[k], hb);
        if (k < MTP) printf("  %5.1f %% of the trunk", tot_b ? 100.0 * (double)byt[k] / (double)tot_b : 0.0);
        printf("\n");
    }
    if (hp.moe) {
        /* a token reads k of the n experts of every layer (all experts of a layer have one type) */
        const uint64_t act_p = tot_p - par[ROUTED] + par[ROUTED] / hp.n_expert * hp.n_expert_used;
        const uint64_t act_b = tot_b - byt[ROUTED] + byt[ROUTED] / hp.n_expert * hp.n_expert_used;
        human(hb, sizeof hb, act_b);
        printf("  active per token (trunk): %" PRIu64 " of %" PRIu64 " parameters, %s of weights\n", act_p, tot_p, hb);
    }
}

#define CMD "info"

int cmd_info(int argc, char **argv) {
    bool no_tensors = false, full = false, json = false;
    const char *files[2] = {NULL, NULL};
    nx_arg_list pos = {files, 0, 2, false};
    nx_arg args[] = {
        {"--no-tensors", NULL, NX_ARG_FLAG, &no_tensors, NULL, "skip the per-tensor table (totals are still printed)", 0, 0, NULL, false},
        {"--full", NULL, NX_ARG_FLAG, &full, NULL, "print strings and arrays completely instead of abbreviated", 0, 0, NULL, false},
        {"--json", NULL, NX_ARG_FLAG, &json, NULL, "print one JSON object (all values in full; integers exact)", 0, 0, NULL, false},
    };
    int rc = nx_args_parse_pos(CMD,
                               "[--no-tensors] [--full] [--json] FILE.gguf\n\n"
                               "Prints the metadata, the tensor table and totals of a GGUF file.",
                               args, NX_ARGS_LEN(args), argc, argv, &pos);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (pos.n > 1) return nx_usage_error(CMD, "more than one file given ('%s' and '%s')", files[0], files[1]);
    if (!files[0]) return nx_usage_error(CMD, "need FILE.gguf (see nextn %s --help)", CMD);
    const char *path = files[0];
    const bool tensors = !no_tensors;

    nx_gguf *g = NULL;
    nx_err err;
    if (!nx_gguf_open(&g, path, &err)) {
        nx_cli_report("info", err.msg, NULL);
        return 1;
    }
    if (json) {
        const int jrc = print_json(g, path, tensors);
        nx_gguf_close(g);
        return jrc;
    }
    text t = {0};
    char hb[32], tb[32];
    human(hb, sizeof hb, g->size);
    printf("file:      %s\n", path);
    printf("size:      %" PRIu64 " bytes (%s)\n", g->size, hb);
    printf("format:    GGUF v%" PRIu32 ", alignment %" PRIu64 ", data section at 0x%" PRIx64 "\n", g->version,
           g->alignment, g->data_offset);

    printf("\nmetadata: %" PRIu64 " keys\n", g->n_kv);
    int kw = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) kw = (int)NX_MAX((uint64_t)kw, NX_MIN(g->kv[i].key.len, 48));
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        t.len = 0;
        add_quoted(&t, kv->key, 80);
        /* keys are plain identifiers in practice: print them unquoted when nothing was escaped */
        const char *key = t.p + 1;
        size_t klen = t.len - 2;
        bool plain = klen == kv->key.len && memcmp(key, kv->key.ptr, klen) == 0;
        char type[32];
        if (kv->type == NX_GGUF_ARRAY) snprintf(type, sizeof type, "[%s]", nx_gguf_vtype_name(kv->arr_type));
        else snprintf(type, sizeof type, "%s", nx_gguf_vtype_name(kv->type));
        printf("  %-*.*s  %-9s ", kw, plain ? (int)klen : (int)t.len, plain ? key : t.p, type);
        t.len = 0;
        add_value(&t, kv, full);
        printf("%s\n", t.p ? t.p : "");
    }

    /* totals per type, in type-id order */
    uint64_t params = 0, bytes = 0;
    uint64_t per_count[64] = {0}, per_bytes[64] = {0}, per_params[64] = {0};
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *ts = &g->tensors[i];
        const uint64_t n = ts->ne[0] * ts->ne[1] * ts->ne[2] * ts->ne[3]; /* each product < 2^63 (reader) */
        params += n;
        bytes += ts->nbytes;
        uint32_t ty = ts->type < 64 ? ts->type : 63; /* known ids are < 43 (gguf_types.c) */
        per_count[ty]++;
        per_bytes[ty] += ts->nbytes;
        per_params[ty] += n;
    }

    if (tensors) {
        printf("\ntensors: %" PRIu64 "\n", g->n_tensors);
        int nw = 4;
        for (uint64_t i = 0; i < g->n_tensors; i++) nw = (int)NX_MAX((uint64_t)nw, NX_MIN(g->tensors[i].name.len, 48));
        printf("  %5s  %-*s  %-8s %-24s %14s  %s\n", "#", nw, "name", "type", "shape", "bytes", "offset");
        for (uint64_t i = 0; i < g->n_tensors; i++) {
            const nx_gguf_tensor *ts = &g->tensors[i];
            t.len = 0;
            add_quoted(&t, ts->name, 80);
            bool plain = t.len - 2 == ts->name.len && memcmp(t.p + 1, ts->name.ptr, t.len - 2) == 0;
            char name[200];
            snprintf(name, sizeof name, "%.*s", plain ? (int)(t.len - 2) : (int)t.len, plain ? t.p + 1 : t.p);
            t.len = 0;
            add_shape(&t, ts);
            printf("  %5" PRIu64 "  %-*s  %-8s %-24s %14" PRIu64 "  0x%" PRIx64 "\n", i, nw, name,
                   type_name(ts->type, tb, sizeof tb), t.p, ts->nbytes, g->data_offset + ts->offset);
        }
    }

    human(hb, sizeof hb, bytes);
    printf("\ntotals: %" PRIu64 " tensors, %" PRIu64 " parameters, %" PRIu64 " bytes (%s), %.2f bits per weight\n",
           g->n_tensors, params, bytes, hb, bpw(bytes, params));
    /* the type mix: per type its tensors, bytes, share of the parameters and bits per weight */
    for (uint32_t ty = 0; ty < 64; ty++) {
        if (!per_count[ty]) continue;
        human(hb, sizeof hb, per_bytes[ty]);
        printf("  %-8s %6" PRIu64 " %-7s %14" PRIu64 " bytes (%s), %5.1f %% of parameters, %5.2f bpw\n",
               type_name(ty, tb, sizeof tb), per_count[ty], per_count[ty] == 1 ? "tensor" : "tensors", per_bytes[ty], hb,
               params ? 100.0 * (double)per_params[ty] / (double)params : 0.0, bpw(per_bytes[ty], per_params[ty]));
    }
    print_model_summary(g);
    free(t.p);
    nx_gguf_close(g);
    return 0;
}
