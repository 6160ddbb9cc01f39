/* gguf_read.c - GGUF v2/v3 reader: maps a file and validates every byte it will ever touch.
 *
 * Parsing walks the file once with a bounds-checked cursor.  Every count, length and offset read
 * from the file is checked against the bytes that remain before it is used, with overflow-checked
 * arithmetic, so after nx_gguf_open() succeeds the accessors in this file (and callers using
 * tensor->data / tensor->nbytes) can never reach outside the mapping.  Memory grows with the
 * items actually parsed, never with a count merely claimed by the header.
 *
 * Only little-endian hosts are supported (GGUF stores little-endian; values are memcpy'd).
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gguf_read.c assumes a little-endian host"
#endif

/* Smallest encodings, used to reject counts that cannot fit in the bytes left:
 * kv = key length (8) + at least 1 key byte + type (4) + at least a 1-byte value;
 * tensor info = name length (8) + n_dims (4) + type (4) + offset (8);
 * string = its u64 length; nested array = elem type (4) + count (8). */
#define MIN_KV_BYTES 14u
#define MIN_TENSOR_INFO_BYTES 24u
#define MIN_STRING_BYTES 8u
#define MIN_ARRAY_BYTES 12u

typedef struct cursor {
    const uint8_t *base;
    uint64_t size;
    uint64_t pos;          /* invariant: pos <= size */
    const char *file;      /* for messages */
    char item[160];        /* what is being parsed, e.g. "kv 3 'general.name'" */
    nx_err *err;
} cursor;

static bool is_int_type(uint32_t t) {
    return t == NX_GGUF_UINT8 || t == NX_GGUF_INT8 || t == NX_GGUF_UINT16 || t == NX_GGUF_INT16 ||
           t == NX_GGUF_UINT32 || t == NX_GGUF_INT32 || t == NX_GGUF_UINT64 || t == NX_GGUF_INT64;
}
static bool is_signed_type(uint32_t t) {
    return t == NX_GGUF_INT8 || t == NX_GGUF_INT16 || t == NX_GGUF_INT32 || t == NX_GGUF_INT64;
}
static bool is_float_type(uint32_t t) { return t == NX_GGUF_FLOAT32 || t == NX_GGUF_FLOAT64; }

/* Writes a printable, length-limited rendering of a file string into buf (for messages). */
static void render_name(char *buf, size_t cap, const uint8_t *p, uint64_t len) {
    size_t o = 0;
    const uint64_t shown = len > 64 ? 64 : len;
    for (uint64_t i = 0; i < shown && o + 5 < cap; i++) {
        uint8_t ch = p[i];
        if (ch >= 0x20 && ch < 0x7f && ch != '\'' && ch != '\\') buf[o++] = (char)ch;
        else o += (size_t)snprintf(buf + o, cap - o, "\\x%02x", ch);
    }
    if (shown < len && o + 4 < cap) { memcpy(buf + o, "...", 3); o += 3; }
    buf[o < cap ? o : cap - 1] = '\0';
}

static bool fail_at(cursor *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool fail_at(cursor *c, const char *fmt, ...) {
    if (c->err) {
        char detail[NX_ERR_MAX];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(detail, sizeof detail, fmt, ap);
        va_end(ap);
        if (c->item[0]) nx_fail(c->err, "%s: %s: %s", c->file, c->item, detail);
        else nx_fail(c->err, "%s: %s", c->file, detail);
    }
    return false;
}

/* Ensures n more bytes exist at the cursor. */
static bool need(cursor *c, uint64_t n, const char *what) {
    if (n > c->size - c->pos)
        return fail_at(c, "%s needs %" PRIu64 " bytes at offset %" PRIu64 " but the file ends at %" PRIu64,
                       what, n, c->pos, c->size);
    return true;
}

static bool read_u32(cursor *c, uint32_t *v, const char *what) {
    if (!need(c, 4, what)) return false;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return true;
}

static bool read_u64(cursor *c, uint64_t *v, const char *what) {
    if (!need(c, 8, what)) return false;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return true;
}

static bool read_str(cursor *c, nx_str *s, const char *what) {
    uint64_t len;
    if (c->size - c->pos < 8) {
        char lw[96];
        snprintf(lw, sizeof lw, "%s length", what);
        return need(c, 8, lw);
    }
    if (!read_u64(c, &len, what)) return false;
    if (len > c->size - c->pos)
        return fail_at(c, "%s length %" PRIu64 " at offset %" PRIu64 " runs past end of file (size %" PRIu64 ")",
                       what, len, c->pos - 8, c->size);
    s->ptr = (const char *)(c->base + c->pos);
    s->len = len;
    c->pos += len;
    return true;
}

/* Rejects `count` elements of at least `min_each` bytes when they cannot fit in what is left. */
static bool check_count(cursor *c, uint64_t count, uint64_t min_each, const char *what) {
    uint64_t bytes;
    if (!nx_mul_ok(count, min_each, &bytes) || bytes > c->size - c->pos)
        return fail_at(c, "%s %" PRIu64 " cannot fit in the %" PRIu64 " bytes left after offset %" PRIu64
                       " (file size %" PRIu64 ")", what, count, c->size - c->pos, c->pos, c->size);
    return true;
}

static bool check_bools(cursor *c, const uint8_t *p, uint64_t n) {
    for (uint64_t i = 0; i < n; i++)
        if (p[i] > 1)
            return fail_at(c, "bool value %u at offset %" PRIu64 " is neither 0 nor 1", p[i],
                           (uint64_t)(p + i - c->base));
    return true;
}

/* Validates (and skips) the elements of an array whose element type and count were just read.
 * `str_offsets` (may be NULL) receives each string element's offset relative to `start`. */
static bool parse_array_elems(cursor *c, uint32_t elem, uint64_t count, int depth, uint64_t start,
                              uint64_t *str_offsets) {
    if (elem >= NX_GGUF_VTYPE_COUNT)
        return fail_at(c, "array element type %" PRIu32 " is not a GGUF value type (0..%d)", elem,
                       NX_GGUF_VTYPE_COUNT - 1);
    uint64_t esize = nx_gguf_vtype_size(elem);
    if (esize) {
        uint64_t bytes;
        if (!nx_mul_ok(count, esize, &bytes) || bytes > c->size - c->pos)
            return fail_at(c, "array of %" PRIu64 " %s at offset %" PRIu64 " runs past end of file (size %" PRIu64 ")",
                           count, nx_gguf_vtype_name((nx_gguf_vtype)elem), c->pos, c->size);
        if (elem == NX_GGUF_BOOL && !check_bools(c, c->base + c->pos, bytes)) return false;
        c->pos += bytes;
        return true;
    }
    if (elem == NX_GGUF_STRING) {
        if (!check_count(c, count, MIN_STRING_BYTES, "string array count")) return false;
        for (uint64_t i = 0; i < count; i++) {
            if (str_offsets) str_offsets[i] = c->pos - start;
            nx_str s;
            if (!read_str(c, &s, "string array element")) return false;
        }
        return true;
    }
    /* arrays of arrays: each element is (elem type, count, elements) */
    if (depth + 1 > NX_GGUF_MAX_ARRAY_DEPTH)
        return fail_at(c, "arrays nested deeper than %d levels", NX_GGUF_MAX_ARRAY_DEPTH);
    if (!check_count(c, count, MIN_ARRAY_BYTES, "nested array count")) return false;
    for (uint64_t i = 0; i < count; i++) {
        uint32_t sub_elem;
        uint64_t sub_count;
        if (!read_u32(c, &sub_elem, "nested array element type")) return false;
        if (!read_u64(c, &sub_count, "nested array count")) return false;
        if (!parse_array_elems(c, sub_elem, sub_count, depth + 1, 0, NULL)) return false;
    }
    return true;
}

static bool parse_value(cursor *c, nx_gguf_kv *kv) {
    const uint8_t *p;
    switch (kv->type) {
    case NX_GGUF_UINT8: case NX_GGUF_UINT16: case NX_GGUF_UINT32: case NX_GGUF_UINT64: {
        uint64_t n = nx_gguf_vtype_size(kv->type), u = 0;
        if (!need(c, n, "value")) return false;
        memcpy(&u, c->base + c->pos, n);
        kv->v.u64 = u;
        c->pos += n;
        return true;
    }
    case NX_GGUF_INT8: case NX_GGUF_INT16: case NX_GGUF_INT32: case NX_GGUF_INT64: {
        uint64_t n = nx_gguf_vtype_size(kv->type);
        if (!need(c, n, "value")) return false;
        p = c->base + c->pos;
        if (n == 1) { int8_t v; memcpy(&v, p, 1); kv->v.i64 = v; }
        else if (n == 2) { int16_t v; memcpy(&v, p, 2); kv->v.i64 = v; }
        else if (n == 4) { int32_t v; memcpy(&v, p, 4); kv->v.i64 = v; }
        else { int64_t v; memcpy(&v, p, 8); kv->v.i64 = v; }
        c->pos += n;
        return true;
    }
    case NX_GGUF_FLOAT32: {
        float f;
        if (!need(c, 4, "value")) return false;
        memcpy(&f, c->base + c->pos, 4);
        kv->v.f64 = f;
        c->pos += 4;
        return true;
    }
    case NX_GGUF_FLOAT64:
        if (!need(c, 8, "value")) return false;
        memcpy(&kv->v.f64, c->base + c->pos, 8);
        c->pos += 8;
        return true;
    case NX_GGUF_BOOL:
        if (!need(c, 1, "value")) return false;
        if (!check_bools(c, c->base + c->pos, 1)) return false;
        kv->v.b = c->base[c->pos] == 1;
        c->pos += 1;
        return true;
    case NX_GGUF_STRING:
        return read_str(c, &kv->v.str, "string value");
    case NX_GGUF_ARRAY: {
        uint32_t elem;
        if (!read_u32(c, &elem, "array element type")) return false;
        if (!read_u64(c, &kv->arr_count, "array count")) return false;
        kv->arr_type = (nx_gguf_vtype)elem;
        uint64_t start = c->pos;
        uint64_t *offsets = NULL;
        if (elem == NX_GGUF_STRING) {
            /* the count is bounded by the bytes left before anything is allocated */
            if (!check_count(c, kv->arr_count, MIN_STRING_BYTES, "string array count")) return false;
            offsets = nx_calloc(kv->arr_count, sizeof *offsets, "string array index", c->err);
            if (!offsets) return false;
            kv->arr_str_offsets = offsets;
        }
        if (!parse_array_elems(c, elem, kv->arr_count, 1, start, offsets)) return false;
        kv->arr_data = c->base + start;
        kv->arr_bytes = c->pos - start;
        return true;
    }
    default:
        return fail_at(c, "value type %u is not a GGUF value type (0..%d)", (unsigned)kv->type,
                       NX_GGUF_VTYPE_COUNT - 1);
    }
}

/* ---- sorted indexes (duplicate detection and lookup) ------------------------------------ */

typedef struct named { nx_str s; uint64_t idx; } named;

static int cmp_str(nx_str a, nx_str b) {
    uint64_t n = a.len < b.len ? a.len : b.len;
    int r = n ? memcmp(a.ptr, b.ptr, n) : 0;
    if (r) return r;
    return a.len < b.len ? -1 : a.len > b.len;
}
static int cmp_named(const void *a, const void *b) {
    const named *x = a, *y = b;
    int r = cmp_str(x->s, y->s);
    if (r) return r;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Sorts names; fails naming the first duplicate.  `order` receives indices in name order. */
static bool build_order(cursor *c, const char *what, uint64_t n, nx_str (*get)(const nx_gguf *, uint64_t),
                        const nx_gguf *g, uint64_t **order) {
    named *tmp = nx_calloc(n, sizeof *tmp, "name index", c->err);
    if (!tmp) return false;
    for (uint64_t i = 0; i < n; i++) { tmp[i].s = get(g, i); tmp[i].idx = i; }
    qsort(tmp, n, sizeof *tmp, cmp_named);
    for (uint64_t i = 1; i < n; i++) {
        if (cmp_str(tmp[i - 1].s, tmp[i].s) == 0) {
            char nm[300];
            render_name(nm, sizeof nm, (const uint8_t *)tmp[i].s.ptr, tmp[i].s.len);
            c->item[0] = '\0';
            fail_at(c, "duplicate %s '%s' (entries %" PRIu64 " and %" PRIu64 ")", what, nm, tmp[i - 1].idx,
                    tmp[i].idx);
            free(tmp);
            return false;
        }
    }
    uint64_t *o = nx_calloc(n, sizeof *o, "name index", c->err);
    if (!o) { free(tmp); return false; }
    for (uint64_t i = 0; i < n; i++) o[i] = tmp[i].idx;
    free(tmp);
    *order = o;
    return true;
}
static nx_str kv_key(const nx_gguf *g, uint64_t i) { return g->kv[i].key; }
static nx_str tensor_name(const nx_gguf *g, uint64_t i) { return g->tensors[i].name; }

static int64_t lookup(const uint64_t *order, uint64_t n, nx_str (*get)(const nx_gguf *, uint64_t),
                      const nx_gguf *g, const char *name) {
    if (!order || !name) return -1;
    nx_str want = {name, strlen(name)};
    uint64_t lo = 0, hi = n;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int r = cmp_str(get(g, order[mid]), want);
        if (r == 0) return (int64_t)order[mid];
        if (r < 0) lo = mid + 1; else hi = mid;
    }
    return -1;
}

/* ---- parsing ------------------------------------------------------------------------------ */

/* Grows an array of `size`-byte items to hold at least `need_n` (capacity doubles, capped at max). */
static bool grow(void **arr, uint64_t *cap, uint64_t need_n, uint64_t max, size_t size, nx_err *err) {
    if (need_n <= *cap) return true;
    uint64_t ncap = *cap ? *cap * 2 : 16;
    if (ncap > max) ncap = max;
    if (ncap < need_n) ncap = need_n;
    uint64_t bytes;
    if (!nx_mul_ok(ncap, size, &bytes) || bytes > SIZE_MAX) return nx_fail(err, "size overflow growing table");
    void *p = realloc(*arr, (size_t)bytes);
    if (!p) return nx_fail(err, "out of memory growing a table to %" PRIu64 " bytes", bytes);
    memset((char *)p + *cap * size, 0, (size_t)((ncap - *cap) * size));
    *arr = p;
    *cap = ncap;
    return true;
}

static bool parse_header(cursor *c, nx_gguf *g) {
    if (c->size < 4 || memcmp(c->base, "GGUF", 4) != 0) {
        char got[40];
        render_name(got, sizeof got, c->base, c->size < 4 ? c->size : 4);
        return fail_at(c, "not a GGUF file (magic '%s', expected 'GGUF'; file size %" PRIu64 ")", got, c->size);
    }
    c->pos = 4;
    if (!read_u32(c, &g->version, "header version")) return false;
    if (g->version == 1) return fail_at(c, "GGUF version 1 is not supported (only 2 and 3)");
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffffu) == 0)
            return fail_at(c, "GGUF version 0x%08" PRIx32 " looks byte-swapped: big-endian files are not supported",
                           g->version);
        return fail_at(c, "unsupported GGUF version %" PRIu32 " (only 2 and 3)", g->version);
    }
    if (!read_u64(c, &g->n_tensors, "header tensor count")) return false;
    if (!read_u64(c, &g->n_kv, "header metadata count")) return false;
    uint64_t kv_min, t_min, total;
    if (!nx_mul_ok(g->n_kv, MIN_KV_BYTES, &kv_min) || !nx_mul_ok(g->n_tensors, MIN_TENSOR_INFO_BYTES, &t_min) ||
        !nx_add_ok(kv_min, t_min, &total) || total > c->size - c->pos)
        return fail_at(c, "header claims %" PRIu64 " metadata entries and %" PRIu64 " tensors, which cannot fit in a "
                       "file of %" PRIu64 " bytes", g->n_kv, g->n_tensors, c->size);
    return true;
}

static bool parse_kv(cursor *c, nx_gguf_kv *kv, uint64_t i) {
    snprintf(c->item, sizeof c->item, "kv %" PRIu64, i);
    if (!read_str(c, &kv->key, "key")) return false;
    if (kv->key.len == 0) return fail_at(c, "empty key");
    char nm[300];
    render_name(nm, sizeof nm, (const uint8_t *)kv->key.ptr, kv->key.len);
    snprintf(c->item, sizeof c->item, "kv %" PRIu64 " '%s'", i, nm);
    uint32_t type;
    if (!read_u32(c, &type, "value type")) return false;
    if (type >= NX_GGUF_VTYPE_COUNT)
        return fail_at(c, "value type %" PRIu32 " is not a GGUF value type (0..%d)", type, NX_GGUF_VTYPE_COUNT - 1);
    kv->type = (nx_gguf_vtype)type;
    return parse_value(c, kv);
}

static bool parse_kvs(cursor *c, nx_gguf *g) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < g->n_kv; i++) {
        /* on failure n_kv shrinks to the entries that exist, so nx_gguf_close frees only those */
        if (!grow((void **)&g->kv, &cap, i + 1, g->n_kv, sizeof *g->kv, c->err)) { g->n_kv = i; return false; }
        if (!parse_kv(c, &g->kv[i], i)) { g->n_kv = i + 1; return false; }
    }
    c->item[0] = '\0';
    if (g->n_kv && !build_order(c, "key", g->n_kv, kv_key, g, &g->kv_order)) return false;

    g->alignment = NX_GGUF_DEFAULT_ALIGNMENT;
    int64_t ai = lookup(g->kv_order, g->n_kv, kv_key, g, "general.alignment");
    if (ai >= 0) {
        const nx_gguf_kv *kv = &g->kv[ai];
        if (kv->type != NX_GGUF_UINT32)
            return fail_at(c, "key 'general.alignment' has type %s, expected uint32", nx_gguf_vtype_name(kv->type));
        if (kv->v.u64 == 0 || (kv->v.u64 & (kv->v.u64 - 1)) != 0)
            return fail_at(c, "general.alignment %" PRIu64 " is not a non-zero power of two", kv->v.u64);
        g->alignment = kv->v.u64;
    }
    return true;
}

static bool parse_tensor_infos(cursor *c, nx_gguf *g) {
    uint64_t cap = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        if (!grow((void **)&g->tensors, &cap, i + 1, g->n_tensors, sizeof *g->tensors, c->err)) {
            g->n_tensors = i;
            return false;
        }
        nx_gguf_tensor *t = &g->tensors[i];
        snprintf(c->item, sizeof c->item, "tensor %" PRIu64, i);
        if (!read_str(c, &t->name, "name")) return false;
        if (t->name.len == 0) return fail_at(c, "empty tensor name");
        char nm[300];
        render_name(nm, sizeof nm, (const uint8_t *)t->name.ptr, t->name.len);
        snprintf(c->item, sizeof c->item, "tensor '%s'", nm);
        if (!read_u32(c, &t->n_dims, "n_dims")) return false;
        if (t->n_dims > NX_GGUF_MAX_DIMS)
            return fail_at(c, "n_dims %" PRIu32 " exceeds the maximum %d", t->n_dims, NX_GGUF_MAX_DIMS);
        uint64_t nelem = 1;
        for (uint32_t d = 0; d < NX_GGUF_MAX_DIMS; d++) {
            t->ne[d] = 1;
            if (d >= t->n_dims) continue;
            if (!read_u64(c, &t->ne[d], "dimension")) return false;
            if (t->ne[d] == 0 || t->ne[d] > (uint64_t)INT64_MAX)
                return fail_at(c, "dimension %" PRIu32 " has %" PRIu64 " elements (must be 1..2^63-1)", d, t->ne[d]);
            if (!nx_mul_ok(nelem, t->ne[d], &nelem) || nelem > (uint64_t)INT64_MAX)
                return fail_at(c, "shape [%" PRIu64 ", %" PRIu64 ", %" PRIu64 ", %" PRIu64 "] has more than 2^63-1 "
                               "elements", t->ne[0], d > 0 ? t->ne[1] : 1, d > 1 ? t->ne[2] : 1, d > 2 ? t->ne[3] : 1);
        }
        if (!read_u32(c, &t->type, "ggml type")) return false;
        const nx_gguf_type_layout *lay = nx_gguf_type_layout_get(t->type);
        if (!lay) return fail_at(c, "unknown ggml type %" PRIu32, t->type);
        if (t->ne[0] % lay->block_size != 0)
            return fail_at(c, "row of %" PRIu64 " elements is not a multiple of the %s block size %" PRIu32,
                           t->ne[0], lay->name, lay->block_size);
        if (!nx_mul_ok(nelem / lay->block_size, lay->type_size, &t->nbytes))
            return fail_at(c, "byte size of %" PRIu64 " %s elements overflows 64 bits", nelem, lay->name);
        if (!read_u64(c, &t->offset, "data offset")) return false;
    }
    c->item[0] = '\0';
    if (g->n_tensors && !build_order(c, "tensor name", g->n_tensors, tensor_name, g, &g->tensor_order)) return false;
    return true;
}

typedef struct span { uint64_t start, nbytes, idx; } span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    if (x->start != y->start) return x->start < y->start ? -1 : 1;
    return x->idx < y->idx ? -1 : x->idx > y->idx;
}

/* Places the data section and checks every tensor's range: aligned, inside the file, disjoint. */
static bool check_data(cursor *c, nx_gguf *g) {
    uint64_t header_end = c->pos;
    g->data_offset = header_end;
    if (g->n_tensors == 0) return true; /* llama.cpp pads only when tensors follow */
    uint64_t a = g->alignment, padded;
    if (!nx_add_ok(header_end, a - 1, &padded))
        return fail_at(c, "data section offset overflows (header ends at %" PRIu64 ")", header_end);
    padded &= ~(a - 1);
    if (padded > c->size)
        return fail_at(c, "data section would start at offset %" PRIu64 " (header end %" PRIu64 " aligned to %" PRIu64
                       "), past end of file (size %" PRIu64 ")", padded, header_end, a, c->size);
    g->data_offset = padded;
    span *spans = nx_calloc(g->n_tensors, sizeof *spans, "tensor ranges", c->err);
    if (!spans) return false;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        nx_gguf_tensor *t = &g->tensors[i];
        char nm[300];
        render_name(nm, sizeof nm, (const uint8_t *)t->name.ptr, t->name.len);
        uint64_t start, end;
        if (t->offset % a != 0) {
            free(spans);
            return fail_at(c, "tensor '%s' data offset %" PRIu64 " is not a multiple of the alignment %" PRIu64, nm,
                           t->offset, a);
        }
        if (!nx_add_ok(g->data_offset, t->offset, &start) || !nx_add_ok(start, t->nbytes, &end) || end > c->size) {
            free(spans);
            return fail_at(c, "tensor '%s' data [0x%" PRIx64 ", +%" PRIu64 ") runs past end of file (size %" PRIu64 ")",
                           nm, g->data_offset + t->offset, t->nbytes, c->size);
        }
        t->data = c->base + start;
        spans[i] = (span){start, t->nbytes, i};
    }
    qsort(spans, g->n_tensors, sizeof *spans, cmp_span);
    for (uint64_t i = 1; i < g->n_tensors; i++) {
        const span *p = &spans[i - 1], *q = &spans[i];
        if (p->start + p->nbytes > q->start) {
            char n1[300], n2[300];
            const nx_gguf_tensor *tp = &g->tensors[p->idx], *tq = &g->tensors[q->idx];
            render_name(n1, sizeof n1, (const uint8_t *)tp->name.ptr, tp->name.len);
            render_name(n2, sizeof n2, (const uint8_t *)tq->name.ptr, tq->name.len);
            fail_at(c, "tensor '%s' data [0x%" PRIx64 ", +%" PRIu64 ") overlaps tensor '%s' data [0x%" PRIx64
                    ", +%" PRIu64 ")", n1, p->start, p->nbytes, n2, q->start, q->nbytes);
            free(spans);
            return false;
        }
    }
    free(spans);
    return true;
}

static bool parse(nx_gguf *g, nx_err *err) {
    cursor c = {.base = g->base, .size = g->size, .pos = 0, .file = g->path, .err = err};
    c.item[0] = '\0';
    return parse_header(&c, g) && parse_kvs(&c, g) && parse_tensor_infos(&c, g) && check_data(&c, g);
}

static nx_gguf *new_handle(const char *name, nx_err *err) {
    nx_gguf *g = nx_calloc(1, sizeof *g, "gguf handle", err);
    if (!g) return NULL;
    size_t n = strlen(name) + 1;
    g->path = nx_malloc(n, "file name", err);
    if (!g->path) { free(g); return NULL; }
    memcpy(g->path, name, n);
    return g;
}

bool nx_gguf_open_memory(nx_gguf **out, const void *buf, uint64_t size, const char *name, nx_err *err) {
    *out = NULL;
    if (!name) name = "<memory>";
    if (!buf && size) return nx_fail(err, "%s: NULL buffer of %" PRIu64 " bytes", name, size);
    nx_gguf *g = new_handle(name, err);
    if (!g) return false;
    static const uint8_t empty[1];
    g->base = buf ? buf : empty;
    g->size = size;
    if (!parse(g, err)) { nx_gguf_close(g); return false; }
    *out = g;
    return true;
}

bool nx_gguf_open(nx_gguf **out, const char *path, nx_err *err) {
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0) {
        int e = errno;
        close(fd);
        return nx_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(st.st_mode)) { close(fd); return nx_fail(err, "%s: not a regular file", path); }
    if (st.st_size == 0) { close(fd); return nx_fail(err, "%s: empty file (0 bytes), not a GGUF file", path); }
    uint64_t size = (uint64_t)st.st_size;
    void *map = mmap(NULL, (size_t)size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd); /* the mapping stays valid */
    if (map == MAP_FAILED) return nx_fail(err, "%s: cannot map %" PRIu64 " bytes: %s", path, size, strerror(e));
#ifdef MADV_HUGEPAGE
    /* before the first read through the mapping: a file not yet in the page cache then comes in
     * as 2 MiB folios, which the mapping can map with 2 MiB entries (reading the header first, and
     * advising later, left about half of a cold model file in small folios; model_load.c says
     * why the page size matters).  Advice only: an error changes nothing. */
    madvise(map, (size_t)size, MADV_HUGEPAGE);
#endif
    nx_gguf *g = new_handle(path, err);
    if (!g) { munmap(map, (size_t)size); return false; }
    g->base = map;
    g->size = size;
    g->owns_mapping = true;
    if (!parse(g, err)) { nx_gguf_close(g); return false; }
    *out = g;
    return true;
}

void nx_gguf_close(nx_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (uint64_t i = 0; i < g->n_kv; i++) free((void *)g->kv[i].arr_str_offsets);
    free(g->kv);
    free(g->tensors);
    free(g->kv_order);
    free(g->tensor_order);
    if (g->owns_mapping) munmap((void *)g->base, (size_t)g->size);
    free(g->path);
    free(g);
}

/* ---- lookup and typed access -------------------------------------------------------------- */

bool nx_str_eq(nx_str s, const char *cstr) {
    size_t n = strlen(cstr);
    return s.len == n && (n == 0 || memcmp(s.ptr, cstr, n) == 0);
}

const nx_gguf_kv *nx_gguf_find_kv(const nx_gguf *g, const char *key) {
    int64_t i = lookup(g->kv_order, g->n_kv, kv_key, g, key);
    return i < 0 ? NULL : &g->kv[i];
}

const nx_gguf_tensor *nx_gguf_find_tensor(const nx_gguf *g, const char *name) {
    int64_t i = lookup(g->tensor_order, g->n_tensors, tensor_name, g, name);
    return i < 0 ? NULL : &g->tensors[i];
}

/* Fetches an integer kv's value after checking it lies in [min, max]. */
static bool get_int(const nx_gguf *g, const nx_gguf_kv *kv, int64_t min, uint64_t max, const char *want,
                    int64_t *sv, uint64_t *uv, nx_err *err) {
    char k[300];
    render_name(k, sizeof k, (const uint8_t *)kv->key.ptr, kv->key.len);
    if (!is_int_type(kv->type))
        return nx_fail(err, "%s: key '%s' has type %s, expected an integer (%s)", g->path, k,
                       nx_gguf_vtype_name(kv->type), want);
    if (is_signed_type(kv->type)) {
        int64_t v = kv->v.i64;
        if (v < min || (v >= 0 && (uint64_t)v > max))
            return nx_fail(err, "%s: key '%s' value %" PRId64 " is out of range for %s", g->path, k, v, want);
        *sv = v;
        *uv = (uint64_t)v;
    } else {
        uint64_t v = kv->v.u64;
        if (v > max) return nx_fail(err, "%s: key '%s' value %" PRIu64 " is out of range for %s", g->path, k, v, want);
        *sv = (int64_t)v;
        *uv = v;
    }
    return true;
}

static bool missing(const nx_gguf *g, const char *key, nx_err *err) {
    return nx_fail(err, "%s: required key '%s' is missing", g->path, key);
}

bool nx_gguf_get_u32_or(const nx_gguf *g, const char *key, uint32_t def, uint32_t *out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) { *out = def; return true; }
    int64_t s; uint64_t u;
    if (!get_int(g, kv, 0, UINT32_MAX, "uint32", &s, &u, err)) return false;
    *out = (uint32_t)u;
    return true;
}

bool nx_gguf_get_u32(const nx_gguf *g, const char *key, uint32_t *out, nx_err *err) {
    if (!nx_gguf_find_kv(g, key)) return missing(g, key, err);
    return nx_gguf_get_u32_or(g, key, 0, out, err);
}

bool nx_gguf_get_u64_or(const nx_gguf *g, const char *key, uint64_t def, uint64_t *out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) { *out = def; return true; }
    int64_t s; uint64_t u;
    if (!get_int(g, kv, 0, UINT64_MAX, "uint64", &s, &u, err)) return false;
    *out = u;
    return true;
}

bool nx_gguf_get_i32_or(const nx_gguf *g, const char *key, int32_t def, int32_t *out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) { *out = def; return true; }
    int64_t s; uint64_t u;
    if (!get_int(g, kv, INT32_MIN, INT32_MAX, "int32", &s, &u, err)) return false;
    *out = (int32_t)s;
    return true;
}

bool nx_gguf_get_f32_or(const nx_gguf *g, const char *key, float def, float *out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) { *out = def; return true; }
    if (!is_float_type(kv->type))
        return nx_fail(err, "%s: key '%s' has type %s, expected float32", g->path, key, nx_gguf_vtype_name(kv->type));
    double v = kv->v.f64;
    if (isfinite(v) && fabs(v) > FLT_MAX)
        return nx_fail(err, "%s: key '%s' value %g is out of range for float32", g->path, key, v);
    *out = (float)v;
    return true;
}

bool nx_gguf_get_f32(const nx_gguf *g, const char *key, float *out, nx_err *err) {
    if (!nx_gguf_find_kv(g, key)) return missing(g, key, err);
    return nx_gguf_get_f32_or(g, key, 0.0f, out, err);
}

bool nx_gguf_get_bool_or(const nx_gguf *g, const char *key, bool def, bool *out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) { *out = def; return true; }
    if (kv->type != NX_GGUF_BOOL)
        return nx_fail(err, "%s: key '%s' has type %s, expected bool", g->path, key, nx_gguf_vtype_name(kv->type));
    *out = kv->v.b;
    return true;
}

bool nx_gguf_get_str_or(const nx_gguf *g, const char *key, const char *def, nx_str *out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    if (!kv) {
        out->ptr = def;
        out->len = def ? strlen(def) : 0;
        return true;
    }
    if (kv->type != NX_GGUF_STRING)
        return nx_fail(err, "%s: key '%s' has type %s, expected string", g->path, key, nx_gguf_vtype_name(kv->type));
    *out = kv->v.str;
    return true;
}

bool nx_gguf_get_str(const nx_gguf *g, const char *key, nx_str *out, nx_err *err) {
    if (!nx_gguf_find_kv(g, key)) return missing(g, key, err);
    return nx_gguf_get_str_or(g, key, NULL, out, err);
}

/* Range of an integer value type as [min, max]. */
static void int_range(uint32_t t, int64_t *min, uint64_t *max) {
    switch (t) {
    case NX_GGUF_UINT8: *min = 0; *max = UINT8_MAX; break;
    case NX_GGUF_INT8: *min = INT8_MIN; *max = INT8_MAX; break;
    case NX_GGUF_UINT16: *min = 0; *max = UINT16_MAX; break;
    case NX_GGUF_INT16: *min = INT16_MIN; *max = INT16_MAX; break;
    case NX_GGUF_UINT32: *min = 0; *max = UINT32_MAX; break;
    case NX_GGUF_INT32: *min = INT32_MIN; *max = INT32_MAX; break;
    case NX_GGUF_UINT64: *min = 0; *max = UINT64_MAX; break;
    default: *min = INT64_MIN; *max = INT64_MAX; break;
    }
}

/* Raw element i of a fixed-size numeric array, as signed / unsigned / double. */
static void arr_elem(const nx_gguf_kv *kv, uint64_t i, int64_t *s, uint64_t *u, double *d) {
    const uint8_t *p = kv->arr_data + i * nx_gguf_vtype_size(kv->arr_type);
    *s = 0; *u = 0; *d = 0;
    switch (kv->arr_type) {
    case NX_GGUF_UINT8: case NX_GGUF_BOOL: *u = p[0]; break;
    case NX_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); *s = v; break; }
    case NX_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *u = v; break; }
    case NX_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *s = v; break; }
    case NX_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *u = v; break; }
    case NX_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); *s = v; break; }
    case NX_GGUF_UINT64: memcpy(u, p, 8); break;
    case NX_GGUF_INT64: memcpy(s, p, 8); break;
    case NX_GGUF_FLOAT32: { float v; memcpy(&v, p, 4); *d = v; return; }
    case NX_GGUF_FLOAT64: memcpy(d, p, 8); return;
    default: return;
    }
    if (is_signed_type(kv->arr_type)) { *u = (uint64_t)*s; *d = (double)*s; }
    else { *s = (int64_t)*u; *d = (double)*u; }
}

bool nx_gguf_get_arr(const nx_gguf *g, const char *key, nx_gguf_vtype elem, const nx_gguf_kv **out, nx_err *err) {
    const nx_gguf_kv *kv = nx_gguf_find_kv(g, key);
    *out = NULL;
    if (!kv) return missing(g, key, err);
    if (kv->type != NX_GGUF_ARRAY)
        return nx_fail(err, "%s: key '%s' has type %s, expected an array of %s", g->path, key,
                       nx_gguf_vtype_name(kv->type), nx_gguf_vtype_name(elem));
    if (kv->arr_type != elem) {
        bool ok = (is_int_type(elem) && is_int_type(kv->arr_type)) ||
                  (is_float_type(elem) && is_float_type(kv->arr_type));
        if (!ok)
            return nx_fail(err, "%s: key '%s' is an array of %s, expected an array of %s", g->path, key,
                           nx_gguf_vtype_name(kv->arr_type), nx_gguf_vtype_name(elem));
        if (is_int_type(elem)) {
            int64_t min; uint64_t max;
            int_range(elem, &min, &max);
            bool src_signed = is_signed_type(kv->arr_type);
            for (uint64_t i = 0; i < kv->arr_count; i++) {
                int64_t s; uint64_t u; double d;
                arr_elem(kv, i, &s, &u, &d);
                bool fits = src_signed ? (s < 0 ? s >= min : (uint64_t)s <= max) : u <= max;
                if (!fits) {
                    if (src_signed)
                        return nx_fail(err, "%s: key '%s' element %" PRIu64 " value %" PRId64 " is out of range for %s",
                                       g->path, key, i, s, nx_gguf_vtype_name(elem));
                    return nx_fail(err, "%s: key '%s' element %" PRIu64 " value %" PRIu64 " is out of range for %s",
                                   g->path, key, i, u, nx_gguf_vtype_name(elem));
                }
            }
        }
    }
    *out = kv;
    return true;
}

int64_t nx_gguf_arr_int(const nx_gguf_kv *kv, uint64_t i) {
    if (kv->type != NX_GGUF_ARRAY || i >= kv->arr_count ||
        !(is_int_type(kv->arr_type) || kv->arr_type == NX_GGUF_BOOL))
        return 0;
    int64_t s; uint64_t u; double d;
    arr_elem(kv, i, &s, &u, &d);
    return s;
}

double nx_gguf_arr_f64(const nx_gguf_kv *kv, uint64_t i) {
    if (kv->type != NX_GGUF_ARRAY || i >= kv->arr_count || nx_gguf_vtype_size(kv->arr_type) == 0) return 0.0;
    int64_t s; uint64_t u; double d;
    arr_elem(kv, i, &s, &u, &d);
    return d;
}

nx_str nx_gguf_arr_str(const nx_gguf_kv *kv, uint64_t i) {
    nx_str s = {"", 0};
    if (kv->type != NX_GGUF_ARRAY || kv->arr_type != NX_GGUF_STRING || i >= kv->arr_count || !kv->arr_str_offsets)
        return s;
    const uint8_t *p = kv->arr_data + kv->arr_str_offsets[i];
    memcpy(&s.len, p, 8);
    s.ptr = (const char *)(p + 8);
    return s;
}

typedef struct { uint64_t off; uint64_t idx; } pf_item;

static int cmp_pf(const void *a, const void *b) {
    const pf_item *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off;
}

bool nx_gguf_prefetch(const nx_gguf *g, nx_progress_fn fn, void *user) {
    if (!g->owns_mapping || g->n_tensors == 0 || g->data_offset >= g->size) return false;
    const uint64_t page = (uint64_t)sysconf(_SC_PAGESIZE);
    const uint64_t start = g->data_offset & ~(page - 1), len = g->size - start, n_pages = (len + page - 1) / page;
    unsigned char *vec = malloc(n_pages);
    if (!vec) return false;
    if (mincore((void *)(g->base + start), len, vec) == 0) {
        uint64_t resident = 0;
        for (uint64_t i = 0; i < n_pages; i++) resident += vec[i] & 1;
        if (resident * 10 >= n_pages * 9) {
            free(vec);
            return false;
        }
    }
    free(vec);
    pf_item *order = malloc(g->n_tensors * sizeof *order);
    if (!order) return false;
    uint64_t total = 0;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        order[i] = (pf_item){(uint64_t)((const uint8_t *)g->tensors[i].data - g->base), i};
        total += g->tensors[i].nbytes;
    }
    qsort(order, g->n_tensors, sizeof *order, cmp_pf);
    const uint64_t chunk = 64u << 20;
    uint64_t done = 0;
    volatile uint8_t sink = 0;
    for (uint64_t k = 0; k < g->n_tensors; k++) {
        const nx_gguf_tensor *t = &g->tensors[order[k].idx];
        char name[128];
        snprintf(name, sizeof name, "%.*s", (int)(t->name.len < 127 ? t->name.len : 127), t->name.ptr);
        const uint8_t *p = t->data;
        for (uint64_t off = 0; off < t->nbytes || (off == 0 && t->nbytes == 0); off += chunk) {
            const uint64_t n = t->nbytes - off < chunk ? t->nbytes - off : chunk;
            /* ask for the next chunk while this one is read */
            const uintptr_t a = ((uintptr_t)(p + off + n)) & ~(uintptr_t)(page - 1);
            const uintptr_t end = (uintptr_t)(g->base + g->size);
            if (a < end) madvise((void *)a, (size_t)((end - a) < chunk ? end - a : chunk), MADV_WILLNEED);
            uint8_t acc = 0;
            for (uint64_t b = 0; b < n; b += page) acc ^= p[off + b];
            if (n) acc ^= p[off + n - 1];
            sink ^= acc;
            done += n;
            if (fn) {
                nx_progress pr = {k + 1, g->n_tensors, done, total, name, NULL};
                fn(user, &pr);
            }
            if (t->nbytes == 0) break;
        }
    }
    (void)sink;
    free(order);
    return true;
}
