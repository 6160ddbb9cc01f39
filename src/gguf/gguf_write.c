/* gguf_write.c - GGUF v2/v3 writer.
 *
 * Metadata values are encoded into byte buffers as they are added (exactly the bytes that follow
 * the value type in the file), so writing is a straight copy.  Tensors are only described when
 * added; their data is copied from the caller's pointer or produced by the caller's fill
 * callback at write time, one tensor at a time, so peak memory is about one tensor.
 *
 * The layout matches llama.cpp's gguf writer: header, kv pairs and tensor infos in insertion
 * order, zero padding up to the alignment, then each tensor's data followed by zero padding to
 * the alignment.  Output goes to "<path>.tmp.XXXXXX" in the same directory and is renamed over
 * `path` only after everything was written and flushed, so a failed write never leaves a
 * half-written file under the final name.
 */
#include "gguf/gguf.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* llama.cpp stores tensor names in char[64] (GGML_MAX_NAME), NUL included. */
#define MAX_TENSOR_NAME 63

typedef struct wkv {
    char *key;
    nx_gguf_vtype type;
    uint8_t *payload;      /* encoded value (everything after the type field) */
    uint64_t payload_len;
} wkv;

typedef struct wtensor {
    char *name;
    uint32_t type, n_dims;
    uint64_t ne[NX_GGUF_MAX_DIMS];
    uint64_t nbytes;
    const void *data;              /* either data ... */
    nx_gguf_tensor_fill_fn fill;   /* ... or fill(user, ...) */
    nx_gguf_tensor_fill_part_fn fill_part; /* ... or fill_part(user, p, ...) for p < n_parts */
    uint64_t n_parts;
    void *user;
} wtensor;

struct nx_gguf_writer {
    uint32_t version;
    uint64_t alignment;
    wkv *kv;
    size_t n_kv, cap_kv;
    wtensor *t;
    size_t n_t, cap_t;
};

/* ---- growable byte buffer for encoding values ---- */
typedef struct bytes { uint8_t *p; uint64_t len, cap; bool oom; } bytes;

static void put(bytes *b, const void *src, uint64_t n) {
    if (b->oom || n == 0) return;
    if (b->len + n > b->cap) {
        uint64_t ncap = b->cap ? b->cap : 64;
        while (ncap < b->len + n) ncap *= 2;
        uint8_t *p = realloc(b->p, (size_t)ncap);
        if (!p) { b->oom = true; return; }
        b->p = p;
        b->cap = ncap;
    }
    memcpy(b->p + b->len, src, (size_t)n);
    b->len += n;
}
static void put_u32(bytes *b, uint32_t v) { put(b, &v, 4); }
static void put_u64(bytes *b, uint64_t v) { put(b, &v, 8); }
static void put_str(bytes *b, const char *s, uint64_t n) { put_u64(b, n); put(b, s, n); }

static char *dup_str(const char *s, size_t n, nx_err *err) {
    char *d = nx_malloc(n + 1, "name", err);
    if (!d) return NULL;
    memcpy(d, s, n);
    d[n] = '\0';
    return d;
}

nx_gguf_writer *nx_gguf_writer_new(nx_err *err) {
    nx_gguf_writer *w = nx_calloc(1, sizeof *w, "gguf writer", err);
    if (!w) return NULL;
    w->version = 3;
    w->alignment = NX_GGUF_DEFAULT_ALIGNMENT;
    return w;
}

void nx_gguf_writer_free(nx_gguf_writer *w) {
    if (!w) return;
    for (size_t i = 0; i < w->n_kv; i++) { free(w->kv[i].key); free(w->kv[i].payload); }
    for (size_t i = 0; i < w->n_t; i++) free(w->t[i].name);
    free(w->kv);
    free(w->t);
    free(w);
}

bool nx_gguf_writer_set_version(nx_gguf_writer *w, uint32_t version, nx_err *err) {
    if (version != 2 && version != 3) return nx_fail(err, "gguf writer: version %" PRIu32 " unsupported (2 or 3)", version);
    w->version = version;
    return true;
}

/* Takes ownership of the encoded payload (freed on failure too). */
static bool add_encoded(nx_gguf_writer *w, const char *key, size_t key_len, nx_gguf_vtype type, bytes *b,
                        nx_err *err) {
    bool ok = false;
    if (b->oom) { nx_fail(err, "gguf writer: out of memory encoding key '%.*s'", (int)key_len, key); goto out; }
    if (key_len == 0) { nx_fail(err, "gguf writer: empty key"); goto out; }
    if (memchr(key, '\0', key_len)) { nx_fail(err, "gguf writer: key '%s' contains a NUL byte", key); goto out; }
    for (size_t i = 0; i < w->n_kv; i++)
        if (strlen(w->kv[i].key) == key_len && memcmp(w->kv[i].key, key, key_len) == 0) {
            nx_fail(err, "gguf writer: duplicate key '%.*s'", (int)key_len, key);
            goto out;
        }
    if (key_len == strlen("general.alignment") && memcmp(key, "general.alignment", key_len) == 0) {
        /* readers (ours and llama.cpp's) require a uint32 power of two here */
        uint32_t a = 0;
        if (type != NX_GGUF_UINT32) {
            nx_fail(err, "gguf writer: general.alignment must be uint32, got %s", nx_gguf_vtype_name(type));
            goto out;
        }
        memcpy(&a, b->p, 4);
        if (a == 0 || (a & (a - 1)) != 0) {
            nx_fail(err, "gguf writer: general.alignment %" PRIu32 " is not a non-zero power of two", a);
            goto out;
        }
        w->alignment = a;
    }
    if (w->n_kv == w->cap_kv) {
        size_t ncap = w->cap_kv ? w->cap_kv * 2 : 32;
        wkv *p = realloc(w->kv, ncap * sizeof *p);
        if (!p) { nx_fail(err, "gguf writer: out of memory adding key '%.*s'", (int)key_len, key); goto out; }
        w->kv = p;
        w->cap_kv = ncap;
    }
    char *k = dup_str(key, key_len, err);
    if (!k) goto out;
    w->kv[w->n_kv++] = (wkv){k, type, b->p, b->len};
    b->p = NULL;
    ok = true;
out:
    free(b->p);
    return ok;
}

static bool add_fixed(nx_gguf_writer *w, const char *key, nx_gguf_vtype type, const void *v, nx_err *err) {
    bytes b = {0};
    put(&b, v, nx_gguf_vtype_size(type));
    return add_encoded(w, key, strlen(key), type, &b, err);
}

bool nx_gguf_add_u8(nx_gguf_writer *w, const char *key, uint8_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_UINT8, &v, err); }
bool nx_gguf_add_i8(nx_gguf_writer *w, const char *key, int8_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_INT8, &v, err); }
bool nx_gguf_add_u16(nx_gguf_writer *w, const char *key, uint16_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_UINT16, &v, err); }
bool nx_gguf_add_i16(nx_gguf_writer *w, const char *key, int16_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_INT16, &v, err); }
bool nx_gguf_add_u32(nx_gguf_writer *w, const char *key, uint32_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_UINT32, &v, err); }
bool nx_gguf_add_i32(nx_gguf_writer *w, const char *key, int32_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_INT32, &v, err); }
bool nx_gguf_add_u64(nx_gguf_writer *w, const char *key, uint64_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_UINT64, &v, err); }
bool nx_gguf_add_i64(nx_gguf_writer *w, const char *key, int64_t v, nx_err *err) { return add_fixed(w, key, NX_GGUF_INT64, &v, err); }
bool nx_gguf_add_f32(nx_gguf_writer *w, const char *key, float v, nx_err *err) { return add_fixed(w, key, NX_GGUF_FLOAT32, &v, err); }
bool nx_gguf_add_f64(nx_gguf_writer *w, const char *key, double v, nx_err *err) { return add_fixed(w, key, NX_GGUF_FLOAT64, &v, err); }
bool nx_gguf_add_bool(nx_gguf_writer *w, const char *key, bool v, nx_err *err) {
    uint8_t b = v ? 1 : 0;
    return add_fixed(w, key, NX_GGUF_BOOL, &b, err);
}

bool nx_gguf_add_str(nx_gguf_writer *w, const char *key, const char *v, nx_err *err) {
    if (!v) return nx_fail(err, "gguf writer: key '%s': NULL string", key);
    bytes b = {0};
    put_str(&b, v, strlen(v));
    return add_encoded(w, key, strlen(key), NX_GGUF_STRING, &b, err);
}

bool nx_gguf_add_arr(nx_gguf_writer *w, const char *key, nx_gguf_vtype elem, const void *data, uint64_t count,
                     nx_err *err) {
    uint64_t es = nx_gguf_vtype_size(elem), n;
    if (!es)
        return nx_fail(err, "gguf writer: key '%s': nx_gguf_add_arr takes numeric or bool elements, not %s", key,
                       nx_gguf_vtype_name(elem));
    if (!nx_mul_ok(count, es, &n) || n > SIZE_MAX)
        return nx_fail(err, "gguf writer: key '%s': array of %" PRIu64 " elements is too large", key, count);
    if (count && !data) return nx_fail(err, "gguf writer: key '%s': NULL array data", key);
    if (elem == NX_GGUF_BOOL)
        for (uint64_t i = 0; i < count; i++)
            if (((const uint8_t *)data)[i] > 1)
                return nx_fail(err, "gguf writer: key '%s': bool element %" PRIu64 " is %u, not 0 or 1", key, i,
                               ((const uint8_t *)data)[i]);
    bytes b = {0};
    put_u32(&b, (uint32_t)elem);
    put_u64(&b, count);
    put(&b, data, n);
    return add_encoded(w, key, strlen(key), NX_GGUF_ARRAY, &b, err);
}

bool nx_gguf_add_arr_str(nx_gguf_writer *w, const char *key, const char *const *strs, uint64_t count, nx_err *err) {
    bytes b = {0};
    put_u32(&b, NX_GGUF_STRING);
    put_u64(&b, count);
    for (uint64_t i = 0; i < count; i++) {
        if (!strs[i]) { free(b.p); return nx_fail(err, "gguf writer: key '%s': string %" PRIu64 " is NULL", key, i); }
        put_str(&b, strs[i], strlen(strs[i]));
    }
    return add_encoded(w, key, strlen(key), NX_GGUF_ARRAY, &b, err);
}

bool nx_gguf_add_kv_copy(nx_gguf_writer *w, const nx_gguf_kv *kv, nx_err *err) {
    bytes b = {0};
    uint64_t es = nx_gguf_vtype_size(kv->type);
    if (es) {
        /* scalars are stored widened; narrow them back (little-endian: the low bytes) */
        uint8_t raw[8];
        if (kv->type == NX_GGUF_FLOAT32) { float f = (float)kv->v.f64; memcpy(raw, &f, 4); }
        else if (kv->type == NX_GGUF_FLOAT64) memcpy(raw, &kv->v.f64, 8);
        else if (kv->type == NX_GGUF_BOOL) raw[0] = kv->v.b ? 1 : 0;
        else memcpy(raw, &kv->v.u64, 8);
        put(&b, raw, es);
    } else if (kv->type == NX_GGUF_STRING) {
        put_str(&b, kv->v.str.ptr, kv->v.str.len);
    } else if (kv->type == NX_GGUF_ARRAY) {
        /* arr_data/arr_bytes are already-validated encoded elements (strings, nested arrays) */
        put_u32(&b, (uint32_t)kv->arr_type);
        put_u64(&b, kv->arr_count);
        put(&b, kv->arr_data, kv->arr_bytes);
    } else {
        return nx_fail(err, "gguf writer: key '%.*s': invalid value type %d", (int)NX_MIN(kv->key.len, 200),
                       kv->key.ptr, (int)kv->type);
    }
    return add_encoded(w, kv->key.ptr, (size_t)kv->key.len, kv->type, &b, err);
}

static bool add_tensor(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                       const void *data, nx_gguf_tensor_fill_fn fill, nx_gguf_tensor_fill_part_fn fill_part,
                       uint64_t n_parts, void *user, nx_err *err) {
    size_t len = name ? strlen(name) : 0;
    if (len == 0) return nx_fail(err, "gguf writer: empty tensor name");
    if (len > MAX_TENSOR_NAME)
        return nx_fail(err, "gguf writer: tensor name '%s' is %zu bytes, llama.cpp allows at most %d", name, len,
                       MAX_TENSOR_NAME);
    for (size_t i = 0; i < w->n_t; i++)
        if (!strcmp(w->t[i].name, name)) return nx_fail(err, "gguf writer: duplicate tensor name '%s'", name);
    const nx_gguf_type_layout *lay = nx_gguf_type_layout_get(type);
    if (!lay) return nx_fail(err, "gguf writer: tensor '%s': unknown ggml type %" PRIu32, name, type);
    if (n_dims < 1 || n_dims > NX_GGUF_MAX_DIMS)
        return nx_fail(err, "gguf writer: tensor '%s': n_dims %" PRIu32 " not in 1..%d", name, n_dims, NX_GGUF_MAX_DIMS);
    wtensor t = {.type = type, .n_dims = n_dims, .data = data, .fill = fill, .fill_part = fill_part,
                 .n_parts = n_parts ? n_parts : 1, .user = user};
    uint64_t nelem = 1;
    for (uint32_t d = 0; d < NX_GGUF_MAX_DIMS; d++) {
        t.ne[d] = d < n_dims ? ne[d] : 1;
        if (t.ne[d] == 0 || t.ne[d] > (uint64_t)INT64_MAX || !nx_mul_ok(nelem, t.ne[d], &nelem) ||
            nelem > (uint64_t)INT64_MAX)
            return nx_fail(err, "gguf writer: tensor '%s': dimension %" PRIu32 " = %" PRIu64 " is zero or overflows",
                           name, d, t.ne[d]);
    }
    if (t.ne[0] % lay->block_size)
        return nx_fail(err, "gguf writer: tensor '%s': row of %" PRIu64 " elements is not a multiple of the %s block "
                       "size %" PRIu32, name, t.ne[0], lay->name, lay->block_size);
    if (!nx_mul_ok(nelem / lay->block_size, lay->type_size, &t.nbytes) || t.nbytes > SIZE_MAX)
        return nx_fail(err, "gguf writer: tensor '%s': byte size overflows", name);
    if (t.nbytes % t.n_parts)
        return nx_fail(err, "gguf writer: tensor '%s': %" PRIu64 " bytes do not split into %" PRIu64 " equal parts",
                       name, t.nbytes, t.n_parts);
    if (w->n_t == w->cap_t) {
        size_t ncap = w->cap_t ? w->cap_t * 2 : 64;
        wtensor *p = realloc(w->t, ncap * sizeof *p);
        if (!p) return nx_fail(err, "gguf writer: out of memory adding tensor '%s'", name);
        w->t = p;
        w->cap_t = ncap;
    }
    t.name = dup_str(name, len, err);
    if (!t.name) return false;
    w->t[w->n_t++] = t;
    return true;
}

bool nx_gguf_add_tensor(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                        const void *data, nx_err *err) {
    if (!data) return nx_fail(err, "gguf writer: tensor '%s': NULL data", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, data, NULL, NULL, 1, NULL, err);
}

bool nx_gguf_add_tensor_fn(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                           nx_gguf_tensor_fill_fn fill, void *user, nx_err *err) {
    if (!fill) return nx_fail(err, "gguf writer: tensor '%s': NULL fill callback", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, NULL, fill, NULL, 1, user, err);
}

bool nx_gguf_add_tensor_parts(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const uint64_t *ne,
                              uint64_t n_parts, nx_gguf_tensor_fill_part_fn fill_part, void *user, nx_err *err) {
    if (!fill_part) return nx_fail(err, "gguf writer: tensor '%s': NULL fill callback", name ? name : "");
    if (n_parts == 0) return nx_fail(err, "gguf writer: tensor '%s': zero parts", name ? name : "");
    return add_tensor(w, name, type, n_dims, ne, NULL, NULL, fill_part, n_parts, user, err);
}

/* ---- output ---- */

/* The output goes through one 4096-aligned staging buffer to a raw descriptor.  When the file
 * system allows it the descriptor is switched to O_DIRECT, so the (possibly many-GB) data section
 * bypasses the page cache: copying output into the page cache was most of the converter's time
 * (docs/BENCHMARKS.md, the converter row).  O_DIRECT writes must be multiples of the block size from aligned memory,
 * which full staging buffers are; the final partial buffer is written after switching back to
 * buffered mode.  File systems that refuse O_DIRECT (tmpfs) simply stay buffered. */
#define OUT_STAGE_BYTES ((size_t)8 << 20)
#define OUT_DIRECT_ALIGN 4096

typedef struct out {
    int fd;
    uint8_t *stage;      /* OUT_STAGE_BYTES, OUT_DIRECT_ALIGN-aligned */
    size_t staged;
    bool direct;         /* fd currently has O_DIRECT */
    uint64_t written;    /* bytes emitted so far (staged included) */
    const char *path; nx_err *err; bool ok;
} out;

static void set_direct(out *o, bool on) {
    int fl = fcntl(o->fd, F_GETFL);
    if (fl < 0) { o->direct = false; return; }
    fl = on ? (fl | O_DIRECT) : (fl & ~O_DIRECT);
    o->direct = fcntl(o->fd, F_SETFL, fl) == 0 && on;
}

static bool write_fully(out *o, const uint8_t *p, size_t n) {
    while (n > 0) {
        ssize_t k = write(o->fd, p, n);
        if (k < 0 && errno == EINTR) continue;
        if (k < 0 && errno == EINVAL && o->direct) { set_direct(o, false); continue; } /* fs refused O_DIRECT */
        if (k <= 0) {
            nx_fail(o->err, "%s: write failed after %" PRIu64 " bytes: %s", o->path, o->written,
                    k < 0 ? strerror(errno) : "no progress");
            return o->ok = false;
        }
        p += k;
        n -= (size_t)k;
    }
    return true;
}

/* Writes the staged bytes; `final` allows a partial (unaligned) buffer. */
static void flush_stage(out *o, bool final) {
    if (!o->ok || o->staged == 0) return;
    if (final && o->direct && o->staged % OUT_DIRECT_ALIGN) set_direct(o, false);
    if (write_fully(o, o->stage, o->staged)) o->staged = 0;
}

static void emit(out *o, const void *p, uint64_t n) {
    const uint8_t *src = p;
    while (o->ok && n > 0) {
        size_t take = OUT_STAGE_BYTES - o->staged;
        if (take > n) take = (size_t)n;
        memcpy(o->stage + o->staged, src, take);
        o->staged += take;
        o->written += take;
        src += take;
        n -= take;
        if (o->staged == OUT_STAGE_BYTES) flush_stage(o, false);
    }
}
static void emit_u32(out *o, uint32_t v) { emit(o, &v, 4); }
static void emit_u64(out *o, uint64_t v) { emit(o, &v, 8); }
static void emit_pad(out *o, uint64_t alignment) {
    static const uint8_t zeros[256];
    while (o->ok && o->written % alignment) {
        uint64_t n = alignment - o->written % alignment;
        emit(o, zeros, n < sizeof zeros ? n : sizeof zeros);
    }
}

static uint64_t pad_to(uint64_t n, uint64_t a) { return (n + a - 1) / a * a; }

static bool write_all(nx_gguf_writer *w, out *o) {
    emit(o, "GGUF", 4);
    emit_u32(o, w->version);
    emit_u64(o, w->n_t);
    emit_u64(o, w->n_kv);
    for (size_t i = 0; i < w->n_kv; i++) {
        emit_u64(o, strlen(w->kv[i].key));
        emit(o, w->kv[i].key, strlen(w->kv[i].key));
        emit_u32(o, (uint32_t)w->kv[i].type);
        emit(o, w->kv[i].payload, w->kv[i].payload_len);
    }
    uint64_t offset = 0;
    for (size_t i = 0; i < w->n_t; i++) {
        const wtensor *t = &w->t[i];
        emit_u64(o, strlen(t->name));
        emit(o, t->name, strlen(t->name));
        emit_u32(o, t->n_dims);
        for (uint32_t d = 0; d < t->n_dims; d++) emit_u64(o, t->ne[d]);
        emit_u32(o, t->type);
        emit_u64(o, offset);
        uint64_t padded = pad_to(t->nbytes, w->alignment);
        if (!nx_add_ok(offset, padded, &offset))
            return nx_fail(o->err, "%s: tensor data offsets overflow at tensor '%s'", o->path, t->name);
    }
    emit_pad(o, w->alignment); /* like llama.cpp: always, even with no tensors */
    if (!o->ok) return false;

    /* one scratch buffer, grown to the largest tensor produced by a callback */
    void *scratch = NULL;
    uint64_t scratch_cap = 0;
    for (size_t i = 0; i < w->n_t && o->ok; i++) {
        const wtensor *t = &w->t[i];
        if (t->data) {
            emit(o, t->data, t->nbytes);
        } else {
            const uint64_t part = t->nbytes / t->n_parts;
            if (part > scratch_cap) {
                free(scratch);
                scratch = nx_malloc((size_t)part, "tensor data", o->err);
                scratch_cap = scratch ? part : 0;
                if (!scratch) { nx_fail_prefix(o->err, "%s: tensor '%s'", o->path, t->name); o->ok = false; break; }
            }
            for (uint64_t p = 0; p < t->n_parts && o->ok; p++) {
                bool filled = t->fill_part ? t->fill_part(t->user, p, scratch, part, o->err)
                                           : t->fill(t->user, scratch, part, o->err);
                if (!filled) {
                    nx_fail_prefix(o->err, "%s: tensor '%s'", o->path, t->name);
                    o->ok = false;
                    break;
                }
                emit(o, scratch, part);
            }
        }
        emit_pad(o, w->alignment);
    }
    free(scratch);
    return o->ok;
}

bool nx_gguf_writer_write(nx_gguf_writer *w, const char *path, nx_err *err) {
    size_t n = strlen(path);
    char *tmp = nx_malloc(n + 16, "temporary file name", err);
    if (!tmp) return false;
    snprintf(tmp, n + 16, "%s.tmp.XXXXXX", path);
    int fd = mkstemp(tmp);
    if (fd < 0) {
        nx_fail(err, "%s: cannot create temporary file %s: %s", path, tmp, strerror(errno));
        free(tmp);
        return false;
    }
    fchmod(fd, 0644); /* mkstemp creates 0600; a model file is normally world-readable */
    out o = {fd, NULL, 0, false, 0, path, err, true};
    o.stage = aligned_alloc(OUT_DIRECT_ALIGN, OUT_STAGE_BYTES);
    bool ok = o.stage != NULL;
    if (!ok) nx_fail(err, "%s: out of memory allocating a %zu-byte output buffer", path, OUT_STAGE_BYTES);
    if (ok) {
        set_direct(&o, true);
        ok = write_all(w, &o);
        flush_stage(&o, true);
        ok = ok && o.ok;
    }
    if (ok && fsync(fd) != 0) {
        nx_fail(err, "%s: flushing failed: %s", path, strerror(errno));
        ok = false;
    }
    if (close(fd) != 0 && ok) {
        nx_fail(err, "%s: close failed: %s", path, strerror(errno));
        ok = false;
    }
    free(o.stage);
    if (ok && rename(tmp, path) != 0) {
        nx_fail(err, "%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        ok = false;
    }
    if (!ok) unlink(tmp);
    free(tmp);
    return ok;
}
