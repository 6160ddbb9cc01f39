/* safetensors.c - safetensors reader: mmap, validate the JSON header, expose tensors. */
#include "convert/safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

typedef struct st_shard {
    char *path;               /* for messages (owned) */
    const uint8_t *base;      /* mapping or caller buffer */
    uint64_t size;
    bool mapped;
} st_shard;

struct nx_safetensors {
    st_shard *shards;
    uint32_t n_shards;
    nx_st_tensor *tensors;    /* checkpoint order */
    uint64_t n_tensors;
    uint64_t *by_name;        /* indices into tensors, sorted by name (for nx_st_find) */
    char **names;             /* owned name strings, one per tensor */
    uint64_t total_bytes;
};

static const struct { const char *name; size_t size; } dtype_info[NX_ST_DTYPE_COUNT] = {
    [NX_ST_F32] = {"F32", 4},  [NX_ST_F16] = {"F16", 2},   [NX_ST_BF16] = {"BF16", 2},
    [NX_ST_F64] = {"F64", 8},  [NX_ST_I64] = {"I64", 8},   [NX_ST_I32] = {"I32", 4},
    [NX_ST_I16] = {"I16", 2},  [NX_ST_I8] = {"I8", 1},     [NX_ST_U64] = {"U64", 8},
    [NX_ST_U32] = {"U32", 4},  [NX_ST_U16] = {"U16", 2},   [NX_ST_U8] = {"U8", 1},
    [NX_ST_BOOL] = {"BOOL", 1}, [NX_ST_F8_E4M3] = {"F8_E4M3", 1}, [NX_ST_F8_E5M2] = {"F8_E5M2", 1},
};

const char *nx_st_dtype_name(nx_st_dtype t) {
    return (unsigned)t < NX_ST_DTYPE_COUNT ? dtype_info[t].name : "?";
}

size_t nx_st_dtype_size(nx_st_dtype t) {
    return (unsigned)t < NX_ST_DTYPE_COUNT ? dtype_info[t].size : 0;
}

static bool dtype_from_name(const char *s, nx_st_dtype *out) {
    for (int i = 0; i < NX_ST_DTYPE_COUNT; i++)
        if (!strcmp(s, dtype_info[i].name)) { *out = (nx_st_dtype)i; return true; }
    return false;
}

/* ---- teardown ---------------------------------------------------------------------------- */

void nx_st_close(nx_safetensors *st) {
    if (!st) return;
    for (uint32_t i = 0; i < st->n_shards; i++) {
        if (st->shards[i].mapped && st->shards[i].base)
            munmap((void *)st->shards[i].base, st->shards[i].size);
        free(st->shards[i].path);
    }
    if (st->names)
        for (uint64_t i = 0; i < st->n_tensors; i++) free(st->names[i]);
    free(st->names);
    free(st->shards);
    free(st->tensors);
    free(st->by_name);
    free(st);
}

/* ---- header parsing ---------------------------------------------------------------------- */

/* A JSON number that is a non-negative integer exactly representable (< 2^53). */
static bool json_u64(const cJSON *n, uint64_t *out) {
    if (!cJSON_IsNumber(n)) return false;
    double d = n->valuedouble;
    if (!(d >= 0) || d > 9007199254740992.0 || floor(d) != d) return false;
    *out = (uint64_t)d;
    return true;
}

static int cmp_tensor_name(const void *a, const void *b) {
    return strcmp(((const nx_st_tensor *)a)->name, ((const nx_st_tensor *)b)->name);
}

/* Grows the tensor/name arrays to hold `need` entries. */
static bool reserve(nx_safetensors *st, uint64_t need, uint64_t *cap, nx_err *err) {
    if (need <= *cap) return true;
    uint64_t nc = *cap ? *cap * 2 : 64;
    while (nc < need) nc *= 2;
    nx_st_tensor *t = realloc(st->tensors, nc * sizeof *t);
    if (!t) return nx_fail(err, "out of memory for %llu tensor entries", (unsigned long long)nc);
    st->tensors = t;
    char **n = realloc(st->names, nc * sizeof *n);
    if (!n) return nx_fail(err, "out of memory for %llu tensor names", (unsigned long long)nc);
    st->names = n;
    *cap = nc;
    return true;
}

/* Parses shard `si` (already mapped) and appends its tensors, sorted by name. */
static bool parse_shard(nx_safetensors *st, uint32_t si, uint64_t *cap, nx_err *err) {
    const st_shard *sh = &st->shards[si];
    const char *path = sh->path;
    if (sh->size < 8)
        return nx_fail(err, "%s: file is %llu bytes, too small for the 8-byte header length", path,
                       (unsigned long long)sh->size);
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | sh->base[i];
    if (hlen > NX_ST_MAX_HEADER)
        return nx_fail(err, "%s: header length %llu exceeds the limit of %u bytes", path,
                       (unsigned long long)hlen, NX_ST_MAX_HEADER);
    if (hlen > sh->size - 8)
        return nx_fail(err, "%s: truncated header: header length %llu but only %llu bytes follow", path,
                       (unsigned long long)hlen, (unsigned long long)(sh->size - 8));
    if (hlen < 2 || sh->base[8] != '{')
        return nx_fail(err, "%s: header is not a JSON object (must start with '{')", path);
    const uint64_t data_size = sh->size - 8 - hlen;
    const uint8_t *data = sh->base + 8 + hlen;

    cJSON *root = cJSON_ParseWithLength((const char *)sh->base + 8, (size_t)hlen);
    if (!root || !cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return nx_fail(err, "%s: header is not valid JSON (%llu bytes)", path, (unsigned long long)hlen);
    }
    const uint64_t first = st->n_tensors;
    bool ok = true;
    for (const cJSON *it = root->child; it && ok; it = it->next) {
        const char *name = it->string;
        if (!name || !*name) { ok = nx_fail(err, "%s: header has an entry with an empty name", path); break; }
        if (!strcmp(name, "__metadata__")) {
            if (!cJSON_IsObject(it)) ok = nx_fail(err, "%s: __metadata__ is not an object", path);
            continue;
        }
        if (!cJSON_IsObject(it)) { ok = nx_fail(err, "%s: tensor '%s': entry is not an object", path, name); break; }
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(it, "dtype");
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(it, "shape");
        const cJSON *jo = cJSON_GetObjectItemCaseSensitive(it, "data_offsets");
        if (!cJSON_IsString(jd)) { ok = nx_fail(err, "%s: tensor '%s': missing string 'dtype'", path, name); break; }
        if (!cJSON_IsArray(js)) { ok = nx_fail(err, "%s: tensor '%s': missing array 'shape'", path, name); break; }
        if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2) {
            ok = nx_fail(err, "%s: tensor '%s': 'data_offsets' must be an array of 2 integers", path, name);
            break;
        }
        nx_st_tensor t;
        memset(&t, 0, sizeof t);
        if (!dtype_from_name(jd->valuestring, &t.dtype)) {
            ok = nx_fail(err, "%s: tensor '%s': unknown dtype '%.32s' (supported for conversion: F32, F16, BF16)",
                         path, name, jd->valuestring);
            break;
        }
        int nd = cJSON_GetArraySize(js);
        if (nd > NX_ST_MAX_DIMS) {
            ok = nx_fail(err, "%s: tensor '%s': %d dimensions (limit %d)", path, name, nd, NX_ST_MAX_DIMS);
            break;
        }
        t.n_dims = (uint32_t)nd;
        for (int d = 0; d < NX_ST_MAX_DIMS; d++) t.shape[d] = 1;
        uint64_t n = 1;
        int d = 0;
        for (const cJSON *e = js->child; e; e = e->next, d++) {
            if (!json_u64(e, &t.shape[d])) {
                ok = nx_fail(err, "%s: tensor '%s': shape[%d] is not a non-negative integer", path, name, d);
                break;
            }
            if (!nx_mul_ok(n, t.shape[d], &n)) {
                ok = nx_fail(err, "%s: tensor '%s': element count overflows", path, name);
                break;
            }
        }
        if (!ok) break;
        t.n_elems = n;
        uint64_t begin, end, want;
        if (!json_u64(jo->child, &begin) || !json_u64(jo->child->next, &end)) {
            ok = nx_fail(err, "%s: tensor '%s': data_offsets are not non-negative integers", path, name);
            break;
        }
        if (!nx_mul_ok(n, dtype_info[t.dtype].size, &want)) {
            ok = nx_fail(err, "%s: tensor '%s': byte size overflows", path, name);
            break;
        }
        if (begin > end || end > data_size) {
            ok = nx_fail(err, "%s: tensor '%s': data_offsets [%llu, %llu] outside the data section of %llu bytes",
                         path, name, (unsigned long long)begin, (unsigned long long)end,
                         (unsigned long long)data_size);
            break;
        }
        if (end - begin != want) {
            ok = nx_fail(err, "%s: tensor '%s': data_offsets cover %llu bytes but shape x %s needs %llu",
                         path, name, (unsigned long long)(end - begin), nx_st_dtype_name(t.dtype),
                         (unsigned long long)want);
            break;
        }
        t.nbytes = want;
        t.data = data + begin;
        t.shard = si;
        if (!reserve(st, st->n_tensors + 1, cap, err)) { ok = false; break; }
        st->names[st->n_tensors] = strdup(name);
        if (!st->names[st->n_tensors]) { ok = nx_fail(err, "out of memory copying tensor names"); break; }
        t.name = st->names[st->n_tensors];
        st->tensors[st->n_tensors++] = t;
        st->total_bytes += want;
    }
    cJSON_Delete(root);
    if (!ok) return false;
    /* Within a shard: name order.  The name pointers move with the entries; st->names keeps
     * ownership in insertion order, which is fine since it is only used to free them. */
    qsort(st->tensors + first, st->n_tensors - first, sizeof *st->tensors, cmp_tensor_name);
    return true;
}

static int cmp_idx_by_name(const void *a, const void *b, void *ctx) {
    const nx_st_tensor *t = ctx;
    return strcmp(t[*(const uint64_t *)a].name, t[*(const uint64_t *)b].name);
}

/* Builds the by-name index and rejects duplicate names (within or across shards). */
static bool build_index(nx_safetensors *st, nx_err *err) {
    st->by_name = nx_calloc(st->n_tensors ? st->n_tensors : 1, sizeof *st->by_name, "tensor index", err);
    if (!st->by_name) return false;
    for (uint64_t i = 0; i < st->n_tensors; i++) st->by_name[i] = i;
    qsort_r(st->by_name, st->n_tensors, sizeof *st->by_name, cmp_idx_by_name, st->tensors);
    for (uint64_t i = 1; i < st->n_tensors; i++) {
        const nx_st_tensor *a = &st->tensors[st->by_name[i - 1]], *b = &st->tensors[st->by_name[i]];
        if (!strcmp(a->name, b->name))
            return nx_fail(err, "tensor '%s' appears twice (%s and %s)", a->name,
                           st->shards[a->shard].path, st->shards[b->shard].path);
    }
    return true;
}

/* ---- opening ----------------------------------------------------------------------------- */

static bool map_file(st_shard *sh, const char *path, nx_err *err) {
    sh->path = strdup(path);
    if (!sh->path) return nx_fail(err, "out of memory");
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    if (fstat(fd, &sb) != 0) {
        int e = errno;
        close(fd);
        return nx_fail(err, "%s: cannot stat: %s", path, strerror(e));
    }
    if (!S_ISREG(sb.st_mode)) {
        close(fd);
        return nx_fail(err, "%s: not a regular file", path);
    }
    sh->size = (uint64_t)sb.st_size;
    if (sh->size == 0) {
        close(fd);
        return nx_fail(err, "%s: file is empty", path);
    }
    void *p = mmap(NULL, (size_t)sh->size, PROT_READ, MAP_PRIVATE, fd, 0);
    int e = errno;
    close(fd);
    if (p == MAP_FAILED) return nx_fail(err, "%s: mmap failed: %s", path, strerror(e));
    sh->base = p;
    sh->mapped = true;
    return true;
}

static nx_safetensors *new_st(uint32_t n_shards, nx_err *err) {
    nx_safetensors *st = nx_calloc(1, sizeof *st, "safetensors", err);
    if (!st) return NULL;
    st->shards = nx_calloc(n_shards ? n_shards : 1, sizeof *st->shards, "shard list", err);
    if (!st->shards) { free(st); return NULL; }
    st->n_shards = n_shards;
    return st;
}

bool nx_st_open_memory(nx_safetensors **out, const void *buf, uint64_t size, const char *name, nx_err *err) {
    *out = NULL;
    nx_safetensors *st = new_st(1, err);
    if (!st) return false;
    uint64_t cap = 0;
    st->shards[0].path = strdup(name ? name : "<memory>");
    st->shards[0].base = buf;
    st->shards[0].size = size;
    if (!st->shards[0].path || !parse_shard(st, 0, &cap, err) || !build_index(st, err)) {
        nx_st_close(st);
        return false;
    }
    *out = st;
    return true;
}

bool nx_st_open_file(nx_safetensors **out, const char *path, nx_err *err) {
    *out = NULL;
    nx_safetensors *st = new_st(1, err);
    if (!st) return false;
    uint64_t cap = 0;
    if (!map_file(&st->shards[0], path, err) || !parse_shard(st, 0, &cap, err) || !build_index(st, err)) {
        nx_st_close(st);
        return false;
    }
    *out = st;
    return true;
}

static char *read_text(const char *path, size_t limit, nx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) { nx_fail(err, "%s: cannot open: %s", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    size_t len = 0, cap = 0;
    for (;;) {
        if (len + 4096 + 1 > cap) {
            cap = cap ? cap * 2 : 65536;
            char *nb = realloc(buf, cap);
            if (!nb) { free(buf); fclose(f); nx_fail(err, "%s: out of memory", path); return NULL; }
            buf = nb;
        }
        size_t r = fread(buf + len, 1, cap - len - 1, f);
        len += r;
        if (len > limit) { free(buf); fclose(f); nx_fail(err, "%s: larger than %zu bytes", path, limit); return NULL; }
        if (r == 0) break;
    }
    bool bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); nx_fail(err, "%s: read error", path); return NULL; }
    buf[len] = 0;
    return buf;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A shard name from the index must be a plain file name inside the folder. */
static bool plain_file_name(const char *s) {
    return *s && !strchr(s, '/') && strcmp(s, ".") && strcmp(s, "..");
}

static bool open_index(nx_safetensors **out, const char *dir, const char *index_path, nx_err *err) {
    char *text = read_text(index_path, 256u << 20, err);
    if (!text) return false;
    cJSON *root = cJSON_Parse(text);
    free(text);
    const cJSON *wm = root ? cJSON_GetObjectItemCaseSensitive(root, "weight_map") : NULL;
    if (!root || !cJSON_IsObject(wm)) {
        cJSON_Delete(root);
        return nx_fail(err, "%s: not valid JSON with a 'weight_map' object", index_path);
    }
    /* Unique, sorted shard names. */
    int n = cJSON_GetArraySize(wm);
    char **files = calloc((size_t)(n ? n : 1), sizeof *files);
    if (!files) { cJSON_Delete(root); return nx_fail(err, "out of memory"); }
    int nf = 0;
    bool ok = true;
    for (const cJSON *e = wm->child; e; e = e->next) {
        if (!cJSON_IsString(e) || !plain_file_name(e->valuestring)) {
            ok = nx_fail(err, "%s: weight_map['%s'] is not a plain shard file name", index_path,
                         e->string ? e->string : "");
            break;
        }
        files[nf++] = e->valuestring;
    }
    qsort(files, (size_t)nf, sizeof *files, cmp_str);
    int nu = 0;
    for (int i = 0; i < nf; i++)
        if (nu == 0 || strcmp(files[nu - 1], files[i])) files[nu++] = files[i];
    nx_safetensors *st = ok ? new_st((uint32_t)nu, err) : NULL;
    if (ok && !st) ok = false;
    uint64_t cap = 0;
    for (int i = 0; ok && i < nu; i++) {
        size_t len = strlen(dir) + strlen(files[i]) + 2;
        char *p = malloc(len);
        if (!p) { ok = nx_fail(err, "out of memory"); break; }
        snprintf(p, len, "%s/%s", dir, files[i]);
        if (access(p, F_OK) != 0) {
            ok = nx_fail(err, "%s: missing shard '%s' (named in %s)", dir, files[i], index_path);
            free(p);
            break;
        }
        ok = map_file(&st->shards[i], p, err) && parse_shard(st, (uint32_t)i, &cap, err);
        free(p);
    }
    ok = ok && build_index(st, err);
    /* Cross-check: index <-> shards, both directions. */
    for (const cJSON *e = wm->child; ok && e; e = e->next) {
        const nx_st_tensor *t = nx_st_find(st, e->string);
        if (!t) {
            ok = nx_fail(err, "%s: tensor '%s' is listed for shard '%s' but not found in it", index_path,
                         e->string, e->valuestring);
        } else {
            const char *sp = st->shards[t->shard].path;
            const char *base = strrchr(sp, '/');
            base = base ? base + 1 : sp;
            if (strcmp(base, e->valuestring))
                ok = nx_fail(err, "%s: tensor '%s' is listed for shard '%s' but found in '%s'", index_path,
                             e->string, e->valuestring, base);
        }
    }
    if (ok && (uint64_t)n != st->n_tensors) {
        /* every index entry was found and names are unique, so the shards hold extra tensors */
        for (uint64_t i = 0; i < st->n_tensors; i++)
            if (!cJSON_GetObjectItemCaseSensitive(wm, st->tensors[i].name)) {
                ok = nx_fail(err, "%s: tensor '%s' in shard '%s' is not listed in the index", index_path,
                             st->tensors[i].name, st->shards[st->tensors[i].shard].path);
                break;
            }
        if (ok) ok = nx_fail(err, "%s: index lists %d tensors but the shards hold %llu", index_path, n,
                             (unsigned long long)st->n_tensors);
    }
    free(files);
    cJSON_Delete(root);
    if (!ok) { nx_st_close(st); return false; }
    *out = st;
    return true;
}

bool nx_st_open_dir(nx_safetensors **out, const char *dir, nx_err *err) {
    *out = NULL;
    size_t len = strlen(dir) + 64;
    char *p = malloc(len);
    if (!p) return nx_fail(err, "out of memory");
    snprintf(p, len, "%s/model.safetensors.index.json", dir);
    bool ok;
    if (access(p, F_OK) == 0) {
        ok = open_index(out, dir, p, err);
    } else {
        snprintf(p, len, "%s/model.safetensors", dir);
        if (access(p, F_OK) != 0)
            ok = nx_fail(err, "%s: no model.safetensors or model.safetensors.index.json", dir);
        else
            ok = nx_st_open_file(out, p, err);
    }
    free(p);
    return ok;
}

/* ---- access ------------------------------------------------------------------------------ */

uint64_t nx_st_count(const nx_safetensors *st) { return st->n_tensors; }

const nx_st_tensor *nx_st_get(const nx_safetensors *st, uint64_t i) {
    return i < st->n_tensors ? &st->tensors[i] : NULL;
}

const nx_st_tensor *nx_st_find(const nx_safetensors *st, const char *name) {
    uint64_t lo = 0, hi = st->n_tensors;
    while (lo < hi) {
        uint64_t mid = lo + (hi - lo) / 2;
        int c = strcmp(st->tensors[st->by_name[mid]].name, name);
        if (c == 0) return &st->tensors[st->by_name[mid]];
        if (c < 0) lo = mid + 1; else hi = mid;
    }
    return NULL;
}

const char *nx_st_shard_path(const nx_safetensors *st, uint32_t shard) {
    return shard < st->n_shards ? st->shards[shard].path : "?";
}

uint64_t nx_st_total_bytes(const nx_safetensors *st) { return st->total_bytes; }

void nx_st_prefetch_range(const nx_safetensors *st, const nx_st_tensor *t, uint64_t offset, uint64_t nbytes) {
    if (t->shard >= st->n_shards || !st->shards[t->shard].mapped || offset >= t->nbytes || nbytes == 0) return;
    if (nbytes > t->nbytes - offset) nbytes = t->nbytes - offset;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + offset) & ~(page - 1);
    uintptr_t b = (uintptr_t)t->data + offset + nbytes;
#ifdef MADV_POPULATE_READ
    /* one call maps every page (instead of a page fault per 4-64 KiB); advisory */
    if (madvise((void *)a, b - a, MADV_POPULATE_READ) == 0) return;
#endif
    madvise((void *)a, b - a, MADV_WILLNEED);
}

void nx_st_release_range(const nx_safetensors *st, const nx_st_tensor *t, uint64_t offset, uint64_t nbytes) {
    if (t->shard >= st->n_shards || !st->shards[t->shard].mapped || offset >= t->nbytes || nbytes == 0) return;
    if (nbytes > t->nbytes - offset) nbytes = t->nbytes - offset;
    const uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)t->data + offset + page - 1) & ~(page - 1);
    uintptr_t b = ((uintptr_t)t->data + offset + nbytes) & ~(page - 1);
    if (b > a) madvise((void *)a, b - a, MADV_DONTNEED); /* advisory: failure changes nothing */
}

void nx_st_prefetch(const nx_safetensors *st, const nx_st_tensor *t) { nx_st_prefetch_range(st, t, 0, t->nbytes); }

void nx_st_release(const nx_safetensors *st, const nx_st_tensor *t) { nx_st_release_range(st, t, 0, t->nbytes); }

/* Exact IEEE half -> float (subnormals, inf, nan). */
static float half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff, bits;
    if (exp == 0x1f) {
        bits = sign | 0x7f800000u | (man << 13);
    } else if (exp == 0) {
        if (man == 0) {
            bits = sign;
        } else {                 /* subnormal: renormalise */
            int e = -1;
            do { man <<= 1; e++; } while (!(man & 0x400));
            bits = sign | ((uint32_t)(127 - 15 - e) << 23) | ((man & 0x3ff) << 13);
        }
    } else {
        bits = sign | ((exp + 127 - 15) << 23) | (man << 13);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

bool nx_st_read_f32(const nx_st_tensor *t, uint64_t first, uint64_t count, float *dst, nx_err *err) {
    if (first > t->n_elems || count > t->n_elems - first)
        return nx_fail(err, "tensor '%s': elements [%llu, +%llu) out of range (%llu)", t->name,
                       (unsigned long long)first, (unsigned long long)count, (unsigned long long)t->n_elems);
    /* The data may be unaligned inside the mapping (offsets are arbitrary): use memcpy. */
    const uint8_t *src = t->data;
    switch (t->dtype) {
    case NX_ST_F32:
        memcpy(dst, src + first * 4, count * 4);
        return true;
    case NX_ST_F16:
        for (uint64_t i = 0; i < count; i++) {
            uint16_t h;
            memcpy(&h, src + (first + i) * 2, 2);
            dst[i] = half_to_float(h);
        }
        return true;
    case NX_ST_BF16:
        for (uint64_t i = 0; i < count; i++) {
            uint16_t h;
            memcpy(&h, src + (first + i) * 2, 2);
            uint32_t bits = (uint32_t)h << 16;
            memcpy(&dst[i], &bits, 4);
        }
        return true;
    default:
        return nx_fail(err, "tensor '%s': dtype %s cannot be converted (F32, F16, BF16 only)", t->name,
                       nx_st_dtype_name(t->dtype));
    }
}
