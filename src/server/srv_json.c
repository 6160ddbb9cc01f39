/* srv_json.c - strict checks of a JSON request body (see srv_json.h).  A recursive-descent walk
 * over the bytes that keeps the path of keys and indices for the error message. */
#include "server/srv_json.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct path_el {
    const char *key; /* raw key bytes (between the quotes), NULL for an array index */
    size_t klen;
    long idx;
} path_el;

typedef struct walker {
    const char *s;
    size_t len, pos;
    path_el path[NX_SRV_JSON_MAX_DEPTH];
    int depth;   /* path elements */
    int nest;    /* open objects and arrays */
    nx_err *err;
} walker;

/* 'a'[2].b - the top-level key quoted as the API error messages name fields. */
static void path_text(const walker *w, char *out, size_t cap) {
    size_t n = 0;
    out[0] = '\0';
    for (int i = 0; i < w->depth && n + 8 < cap; i++) {
        const path_el *e = &w->path[i];
        if (!e->key) {
            n += (size_t)snprintf(out + n, cap - n, "[%ld]", e->idx);
        } else {
            const char *open = i == 0 ? "'" : ".", *close = i == 0 ? "'" : "";
            n += (size_t)snprintf(out + n, cap - n, "%s", open);
            for (size_t k = 0; k < e->klen && n + 6 < cap; k++) { /* key bytes, control bytes hidden */
                const unsigned char c = (unsigned char)e->key[k];
                out[n++] = c < 0x20 || c == 0x7f ? '?' : (char)c;
            }
            out[n] = '\0';
            n += (size_t)snprintf(out + n, cap - n, "%s", close);
        }
    }
    if (n >= cap) out[cap - 1] = '\0';
    if (!out[0]) snprintf(out, cap, "the request body");
}

static bool fail_at(walker *w, const char *what) {
    char p[256];
    path_text(w, p, sizeof p);
    return nx_fail(w->err, "%s %s", p, what);
}

static bool syntax(walker *w) {
    return nx_fail(w->err, "request body is not valid JSON (error near byte %zu of %zu)", w->pos, w->len);
}

static void ws(walker *w) {
    while (w->pos < w->len) {
        const char c = w->s[w->pos];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') break;
        w->pos++;
    }
}

static int hex4(const char *p) {
    int v = 0;
    for (int i = 0; i < 4; i++) {
        const char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else return -1;
    }
    return v;
}

/* A string at w->pos (the opening quote).  *start / *n: its raw bytes, for keys. */
static bool string(walker *w, const char **start, size_t *n) {
    w->pos++; /* " */
    const size_t from = w->pos;
    while (w->pos < w->len) {
        const unsigned char c = (unsigned char)w->s[w->pos];
        if (c == '"') {
            if (start) *start = w->s + from;
            if (n) *n = w->pos - from;
            w->pos++;
            return true;
        }
        if (c < 0x20) {
            char what[96];
            snprintf(what, sizeof what, "contains a raw control character 0x%02x (byte %zu; escape it as \\u%04x)", c,
                     w->pos, c);
            return fail_at(w, what);
        }
        if (c == '\\') {
            if (w->pos + 1 >= w->len) return syntax(w);
            const char e = w->s[w->pos + 1];
            if (e == 'u') {
                if (w->pos + 6 > w->len) return syntax(w);
                const int u = hex4(w->s + w->pos + 2);
                if (u < 0) return syntax(w);
                if (u == 0) return fail_at(w, "contains a NUL character (\\u0000), which is not supported");
                if (u >= 0xDC00 && u <= 0xDFFF) return fail_at(w, "contains a lone surrogate \\u escape (not valid UTF-16)");
                if (u >= 0xD800 && u <= 0xDBFF) {
                    const size_t q = w->pos + 6;
                    const int lo = q + 6 <= w->len && w->s[q] == '\\' && w->s[q + 1] == 'u' ? hex4(w->s + q + 2) : -1;
                    if (lo < 0xDC00 || lo > 0xDFFF) return fail_at(w, "contains a lone surrogate \\u escape (not valid UTF-16)");
                    w->pos += 12;
                } else {
                    w->pos += 6;
                }
                continue;
            }
            if (!strchr("\"\\/bfnrt", e) || e == '\0') return syntax(w);
            w->pos += 2;
            continue;
        }
        if (c < 0x80) {
            w->pos++;
            continue;
        }
        const int l = nx_utf8_char_len((const unsigned char *)w->s + w->pos, w->len - w->pos);
        if (l <= 0) {
            char what[64];
            snprintf(what, sizeof what, "is not valid UTF-8 (byte 0x%02x at offset %zu)", c, w->pos);
            return fail_at(w, what);
        }
        w->pos += (size_t)l;
    }
    return syntax(w);
}

static bool literal(walker *w, const char *word) {
    const size_t n = strlen(word);
    if (w->pos + n > w->len || memcmp(w->s + w->pos, word, n) != 0) return syntax(w);
    w->pos += n;
    return true;
}

static bool number(walker *w) {
    const size_t from = w->pos;
    if (w->s[w->pos] == '-') w->pos++;
    if (w->pos >= w->len) return syntax(w);
    if (w->s[w->pos] == '0') {
        w->pos++;
    } else if (w->s[w->pos] >= '1' && w->s[w->pos] <= '9') {
        while (w->pos < w->len && w->s[w->pos] >= '0' && w->s[w->pos] <= '9') w->pos++;
    } else {
        return syntax(w);
    }
    if (w->pos < w->len && w->s[w->pos] == '.') {
        w->pos++;
        const size_t d = w->pos;
        while (w->pos < w->len && w->s[w->pos] >= '0' && w->s[w->pos] <= '9') w->pos++;
        if (w->pos == d) return syntax(w);
    }
    if (w->pos < w->len && (w->s[w->pos] == 'e' || w->s[w->pos] == 'E')) {
        w->pos++;
        if (w->pos < w->len && (w->s[w->pos] == '+' || w->s[w->pos] == '-')) w->pos++;
        const size_t d = w->pos;
        while (w->pos < w->len && w->s[w->pos] >= '0' && w->s[w->pos] <= '9') w->pos++;
        if (w->pos == d) return syntax(w);
    }
    return w->pos > from;
}

static bool value(walker *w);

/* One more open object or array. */
static bool nest(walker *w) {
    if (w->nest >= NX_SRV_JSON_MAX_DEPTH)
        return nx_fail(w->err, "request body nests objects and arrays deeper than %d levels", NX_SRV_JSON_MAX_DEPTH);
    w->nest++;
    return true;
}

/* The path grows by one element per open container, so it never outgrows w->path. */
static void push(walker *w, const char *key, size_t klen, long idx) { w->path[w->depth++] = (path_el){key, klen, idx}; }

/* ---- duplicate keys: an object's keys, decoded (so "a" and "\u0061" are the same key), sorted
 * once the object is read: O(k log k) for k keys */

typedef struct okey {
    const char *p; /* the decoded key: raw bytes when it has no escape, else `own` */
    size_t n;
    char *own;
} okey;

typedef struct keyset {
    okey *v;
    size_t n, cap;
} keyset;

static void keyset_free(keyset *ks) {
    for (size_t i = 0; i < ks->n; i++) free(ks->v[i].own);
    free(ks->v);
}

/* Decodes the escapes of a key already checked by string() (valid escapes, paired surrogates). */
static char *unescape(const char *k, size_t kn, size_t *out_n) {
    char *o = malloc(kn + 1), *q = o;
    if (!o) return NULL;
    for (size_t i = 0; i < kn;) {
        if (k[i] != '\\') {
            *q++ = k[i++];
            continue;
        }
        const char e = k[i + 1];
        if (e != 'u') {
            *q++ = e == 'b' ? '\b' : e == 'f' ? '\f' : e == 'n' ? '\n' : e == 'r' ? '\r' : e == 't' ? '\t' : e;
            i += 2;
            continue;
        }
        uint32_t cp = (uint32_t)hex4(k + i + 2);
        i += 6;
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            cp = 0x10000 + ((cp - 0xD800) << 10) + ((uint32_t)hex4(k + i + 2) - 0xDC00);
            i += 6;
        }
        q += nx_utf8_encode(cp, q); /* never longer than its escape */
    }
    *out_n = (size_t)(q - o);
    return o;
}

static int okey_cmp(const void *a, const void *b) {
    const okey *x = a, *y = b;
    if (x->n != y->n) return x->n < y->n ? -1 : 1;
    return memcmp(x->p, y->p, x->n);
}

static bool keyset_add(walker *w, keyset *ks, const char *k, size_t kn) {
    if (ks->n == ks->cap) {
        const size_t cap = ks->cap ? 2 * ks->cap : 16;
        okey *v = realloc(ks->v, cap * sizeof *v);
        if (!v) return nx_fail(w->err, "out of memory checking the request body");
        ks->v = v;
        ks->cap = cap;
    }
    okey *e = &ks->v[ks->n];
    *e = (okey){k, kn, NULL};
    if (memchr(k, '\\', kn)) {
        if (!(e->own = unescape(k, kn, &e->n))) return nx_fail(w->err, "out of memory checking the request body");
        e->p = e->own;
    }
    ks->n++;
    return true;
}

/* With the object's own path: fails when a key appears twice. */
static bool keyset_unique(walker *w, keyset *ks) {
    if (ks->n < 2) return true;
    qsort(ks->v, ks->n, sizeof *ks->v, okey_cmp);
    for (size_t i = 1; i < ks->n; i++)
        if (okey_cmp(&ks->v[i - 1], &ks->v[i]) == 0) {
            char what[160];
            const okey *d = &ks->v[i];
            int n = (int)(d->n < 64 ? d->n : 64);
            for (int c = 0; c < n; c++)
                if ((unsigned char)d->p[c] < 0x20 || d->p[c] == '\'') n = c; /* shown up to a control byte */
            snprintf(what, sizeof what, "has the key '%.*s'%s more than once (JSON keys must be unique)", n, d->p,
                     (size_t)n < d->n ? "..." : "");
            return fail_at(w, what);
        }
    return true;
}

static bool object_keys(walker *w, keyset *ks);

static bool object(walker *w) {
    keyset ks = {0};
    const bool ok = object_keys(w, &ks) && keyset_unique(w, &ks);
    keyset_free(&ks);
    if (ok) w->nest--;
    return ok;
}

static bool object_keys(walker *w, keyset *ks) {
    if (!nest(w)) return false;
    w->pos++; /* { */
    ws(w);
    if (w->pos < w->len && w->s[w->pos] == '}') {
        w->pos++;
        return true;
    }
    for (;;) {
        ws(w);
        if (w->pos >= w->len || w->s[w->pos] != '"') return syntax(w);
        const char *k;
        size_t kn;
        if (!string(w, &k, &kn) || !keyset_add(w, ks, k, kn)) return false;
        ws(w);
        if (w->pos >= w->len || w->s[w->pos] != ':') return syntax(w);
        w->pos++;
        push(w, k, kn, 0);
        if (!value(w)) return false;
        w->depth--;
        ws(w);
        if (w->pos < w->len && w->s[w->pos] == ',') {
            w->pos++;
            continue;
        }
        if (w->pos < w->len && w->s[w->pos] == '}') {
            w->pos++;
            return true;
        }
        return syntax(w);
    }
}

static bool array(walker *w) {
    if (!nest(w)) return false;
    w->pos++; /* [ */
    ws(w);
    if (w->pos < w->len && w->s[w->pos] == ']') {
        w->pos++;
        w->nest--;
        return true;
    }
    for (long i = 0;; i++) {
        push(w, NULL, 0, i);
        if (!value(w)) return false;
        w->depth--;
        ws(w);
        if (w->pos < w->len && w->s[w->pos] == ',') {
            w->pos++;
            continue;
        }
        if (w->pos < w->len && w->s[w->pos] == ']') {
            w->pos++;
            w->nest--;
            return true;
        }
        return syntax(w);
    }
}

static bool value(walker *w) {
    ws(w);
    if (w->pos >= w->len) return syntax(w);
    switch (w->s[w->pos]) {
    case '{': return object(w);
    case '[': return array(w);
    case '"': return string(w, NULL, NULL);
    case 't': return literal(w, "true");
    case 'f': return literal(w, "false");
    case 'n': return literal(w, "null");
    default: return number(w);
    }
}

bool nx_srv_json_check(const char *body, size_t len, nx_err *err) {
    walker w = {.s = body, .len = len, .err = err};
    if (!value(&w)) return false;
    ws(&w);
    if (w.pos < len)
        return nx_fail(err, "request body has data after the JSON value (byte %zu of %zu): send exactly one JSON object",
                       w.pos, len);
    return true;
}
