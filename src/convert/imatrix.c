/* imatrix.c - importance-matrix files (see imatrix.h for the formats and the normalisation). */
#include "convert/imatrix.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void nx_imatrix_free(nx_imatrix *im) {
    if (!im) return;
    for (size_t i = 0; i < im->n_entries; i++) {
        free(im->entries[i].name);
        free(im->entries[i].values);
    }
    free(im->entries);
    free(im->dataset);
    free(im);
}

static int cmp_entry(const void *a, const void *b) {
    return strcmp(((const nx_imatrix_entry *)a)->name, ((const nx_imatrix_entry *)b)->name);
}

const nx_imatrix_entry *nx_imatrix_find(const nx_imatrix *im, const char *name) {
    if (!im || !im->n_entries) return NULL;
    nx_imatrix_entry key = {(char *)name, NULL, 0};
    return bsearch(&key, im->entries, im->n_entries, sizeof key, cmp_entry);
}

static char *dup_n(const char *s, size_t n, nx_err *err) {
    char *d = nx_malloc(n + 1, "imatrix name", err);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

/* Adds (or, for a repeated name, replaces) an entry; takes ownership of name and values. */
static bool add_entry(nx_imatrix *im, size_t *cap, char *name, float *values, uint64_t n, nx_err *err) {
    for (size_t i = 0; i < im->n_entries; i++)
        if (!strcmp(im->entries[i].name, name)) {
            free(im->entries[i].name);
            free(im->entries[i].values);
            im->entries[i] = (nx_imatrix_entry){name, values, n};
            return true;
        }
    if (im->n_entries == *cap) {
        size_t nc = *cap ? 2 * *cap : 64;
        nx_imatrix_entry *e = realloc(im->entries, nc * sizeof *e);
        if (!e) {
            free(name);
            free(values);
            return nx_fail(err, "out of memory (imatrix entries)");
        }
        im->entries = e;
        *cap = nc;
    }
    im->entries[im->n_entries++] = (nx_imatrix_entry){name, values, n};
    return true;
}

/* ---- legacy .dat ---------------------------------------------------------------------------- */

typedef struct {
    const uint8_t *p, *end;
} rd;

static bool rd_i32(rd *r, int32_t *v) {
    if (r->end - r->p < 4) return false;
    memcpy(v, r->p, 4);
    r->p += 4;
    return true;
}

static bool load_legacy(const char *path, const uint8_t *buf, size_t size, nx_imatrix *im, nx_err *err) {
    rd r = {buf, buf + size};
    size_t cap = 0;
    int32_t n_entries;
    if (!rd_i32(&r, &n_entries) || n_entries < 1)
        return nx_fail(err, "%s: not an importance matrix (neither GGUF nor a legacy imatrix with entries)", path);
    for (int32_t i = 0; i < n_entries; i++) {
        int32_t len, ncall, nval;
        if (!rd_i32(&r, &len) || len < 0 || r.end - r.p < len)
            return nx_fail(err, "%s: entry %d: truncated name", path, i + 1);
        char *name = dup_n((const char *)r.p, (size_t)len, err);
        if (!name) return false;
        r.p += len;
        if (!rd_i32(&r, &ncall) || !rd_i32(&r, &nval) || nval < 1) {
            nx_fail(err, "%s: entry %d ('%s'): bad number of values", path, i + 1, name);
            free(name);
            return false;
        }
        if ((uint64_t)(r.end - r.p) / 4 < (uint64_t)nval) {
            nx_fail(err, "%s: entry '%s': %d values announced, file truncated", path, name, nval);
            free(name);
            return false;
        }
        float *v = nx_malloc((size_t)nval * sizeof(float), "imatrix values", err);
        if (!v) {
            free(name);
            return false;
        }
        memcpy(v, r.p, (size_t)nval * sizeof(float));
        r.p += (size_t)nval * 4;
        if (ncall > 0)
            for (int32_t j = 0; j < nval; j++) v[j] = v[j] / (float)ncall;
        if (!add_entry(im, &cap, name, v, (uint64_t)nval, err)) return false;
    }
    /* optional trailer: chunk count, then the dataset name */
    int32_t chunks, len;
    if (rd_i32(&r, &chunks)) {
        im->chunk_count = chunks;
        if (rd_i32(&r, &len) && len > 0 && r.end - r.p >= len) {
            im->dataset = dup_n((const char *)r.p, strnlen((const char *)r.p, (size_t)len), err);
            if (!im->dataset) return false;
        }
    }
    im->legacy = true;
    return true;
}

/* ---- GGUF ----------------------------------------------------------------------------------- */

static bool f32_data(const char *path, const nx_gguf_tensor *t, nx_err *err) {
    if (t->type != NX_TYPE_F32)
        return nx_fail(err, "%s: tensor '%.*s' has type %s, expected f32", path, (int)t->name.len, t->name.ptr,
                       nx_type_name(t->type));
    return true;
}

static uint64_t n_elements(const nx_gguf_tensor *t) {
    uint64_t n = 1;
    for (int d = 0; d < NX_GGUF_MAX_DIMS; d++) n *= t->ne[d];
    return n;
}

static bool load_gguf(const char *path, nx_imatrix *im, nx_err *err) {
    nx_gguf *g = NULL;
    if (!nx_gguf_open(&g, path, err)) return false;
    bool ok = true;
    size_t cap = 0;
    if (g->n_tensors < 1) ok = nx_fail(err, "%s: no importance data (no tensors)", path);
    const nx_gguf_kv *ds = nx_gguf_find_kv(g, "imatrix.datasets");
    if (ok && (!ds || !nx_gguf_find_kv(g, "imatrix.chunk_count") || !nx_gguf_find_kv(g, "imatrix.chunk_size")))
        ok = nx_fail(err, "%s: missing imatrix metadata (imatrix.datasets, imatrix.chunk_count, imatrix.chunk_size)", path);
    if (ok && ds->type == NX_GGUF_ARRAY && ds->arr_type == NX_GGUF_STRING && ds->arr_count > 0) {
        nx_str s = nx_gguf_arr_str(ds, 0);
        ok = (im->dataset = dup_n(s.ptr, s.len, err)) != NULL;
    }
    uint32_t chunks = 0;
    ok = ok && nx_gguf_get_u32(g, "imatrix.chunk_count", &chunks, err);
    im->chunk_count = (int32_t)chunks;
    static const char sfx_sum[] = ".in_sum2", sfx_cnt[] = ".counts";
    for (uint64_t i = 0; ok && i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        const size_t ls = sizeof sfx_sum - 1, lc = sizeof sfx_cnt - 1;
        const bool is_sum = t->name.len > ls && !memcmp(t->name.ptr + t->name.len - ls, sfx_sum, ls);
        const bool is_cnt = t->name.len > lc && !memcmp(t->name.ptr + t->name.len - lc, sfx_cnt, lc);
        if (!is_sum && !is_cnt) continue;
        const size_t base = t->name.len - (is_sum ? ls : lc);
        char name[512];
        if (base + 16 >= sizeof name) {
            ok = nx_fail(err, "%s: tensor name of %zu bytes too long", path, (size_t)t->name.len);
            break;
        }
        memcpy(name, t->name.ptr, base);
        snprintf(name + base, sizeof name - base, "%s", is_sum ? sfx_cnt : sfx_sum);
        const nx_gguf_tensor *other = nx_gguf_find_tensor(g, name);
        name[base] = 0;
        if (!other) {
            ok = nx_fail(err, "%s: '%s' has %s but no %s tensor", path, name, is_sum ? sfx_sum : sfx_cnt,
                         is_sum ? sfx_cnt : sfx_sum);
            break;
        }
        if (!is_sum) continue; /* each pair once, from its in_sum2 */
        const nx_gguf_tensor *sums = t, *counts = other;
        ok = f32_data(path, sums, err) && f32_data(path, counts, err);
        if (!ok) break;
        const uint64_t nval = n_elements(sums), ncounts = n_elements(counts);
        if (!ncounts || !nval || nval % ncounts) {
            ok = nx_fail(err, "%s: '%s': %llu sums do not split into %llu matrices", path, name,
                         (unsigned long long)nval, (unsigned long long)ncounts);
            break;
        }
        const uint64_t ne0 = nval / ncounts;
        float *v = nx_malloc((size_t)nval * sizeof(float), "imatrix values", err);
        char *nm = dup_n(name, base, err);
        if (!v || !nm) {
            free(v);
            free(nm);
            ok = false;
            break;
        }
        const float *s = sums->data, *c = counts->data;
        for (uint64_t j = 0; j < ncounts; j++) {
            float cf;
            memcpy(&cf, c + j, sizeof cf);
            const float count = (float)llroundf(cf); /* stored as float, used as an integer count */
            for (uint64_t k = 0; k < ne0; k++) {
                float sv;
                memcpy(&sv, s + j * ne0 + k, sizeof sv);
                v[j * ne0 + k] = count > 0.0f ? sv / count : 1.0f;
            }
        }
        ok = add_entry(im, &cap, nm, v, nval, err);
    }
    nx_gguf_close(g);
    return ok;
}

bool nx_imatrix_load(const char *path, nx_imatrix **out, nx_err *err) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return nx_fail(err, "%s: cannot open importance matrix", path);
    uint8_t *buf = NULL;
    size_t size = 0, cap = 0;
    bool ok = true;
    for (;;) {
        if (size == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                ok = nx_fail(err, "%s: out of memory", path);
                break;
            }
            buf = nb;
        }
        const size_t got = fread(buf + size, 1, cap - size, f);
        size += got;
        if (got == 0) {
            if (ferror(f)) ok = nx_fail(err, "%s: read error", path);
            break;
        }
    }
    fclose(f);
    nx_imatrix *im = ok ? nx_calloc(1, sizeof *im, "imatrix", err) : NULL;
    ok = ok && im;
    if (ok) {
        if (size >= 4 && !memcmp(buf, "GGUF", 4)) ok = load_gguf(path, im, err);
        else ok = load_legacy(path, buf, size, im, err);
    }
    free(buf);
    if (ok && !im->n_entries) ok = nx_fail(err, "%s: no importance data", path);
    if (ok) qsort(im->entries, im->n_entries, sizeof *im->entries, cmp_entry);
    for (size_t i = 0; ok && i < im->n_entries; i++)
        for (uint64_t j = 0; j < im->entries[i].n; j++)
            if (!isfinite(im->entries[i].values[j])) {
                ok = nx_fail(err, "%s: entry '%s' has a non-finite value (%g) at %llu", path, im->entries[i].name,
                             (double)im->entries[i].values[j], (unsigned long long)j);
                break;
            }
    if (!ok) {
        nx_imatrix_free(im);
        return false;
    }
    *out = im;
    return true;
}
