/* fuzz_gguf.c - libFuzzer target: any byte string given to the GGUF reader either fails with a
 * message or yields a handle whose every key, value, array element and tensor byte range can be
 * read through the accessors without leaving the buffer (ASan/UBSan check the reads). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"

static uint64_t sink;

/* Looks a name up by value (NUL-terminated copy); names with embedded NULs may find another entry. */
static void lookup(const nx_gguf *g, nx_str name, bool tensor) {
    char buf[256];
    size_t n = name.len < sizeof buf - 1 ? (size_t)name.len : sizeof buf - 1;
    memcpy(buf, name.ptr, n);
    buf[n] = '\0';
    if (tensor) {
        const nx_gguf_tensor *t = nx_gguf_find_tensor(g, buf);
        if (t) sink += t->nbytes;
    } else {
        const nx_gguf_kv *kv = nx_gguf_find_kv(g, buf);
        if (kv) sink += kv->type;
        nx_err err;
        uint32_t u; int32_t i; uint64_t u64; float f; bool b; nx_str s; const nx_gguf_kv *a;
        sink += nx_gguf_get_u32_or(g, buf, 0, &u, &err) ? u : 1;
        sink += nx_gguf_get_i32_or(g, buf, 0, &i, &err) ? (uint64_t)i : 1;
        sink += nx_gguf_get_u64_or(g, buf, 0, &u64, &err) ? u64 : 1;
        sink += nx_gguf_get_f32_or(g, buf, 0, &f, &err) ? (f == f) : 1;
        sink += nx_gguf_get_bool_or(g, buf, false, &b, &err) ? b : 1;
        if (nx_gguf_get_str_or(g, buf, "", &s, &err) && s.len) sink += (uint8_t)s.ptr[s.len - 1];
        for (int e = 0; e < NX_GGUF_VTYPE_COUNT; e++)
            if (nx_gguf_get_arr(g, buf, (nx_gguf_vtype)e, &a, &err)) sink += a->arr_count;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nx_gguf *g = NULL;
    nx_err err;
    if (!nx_gguf_open_memory(&g, data, size, "fuzz.gguf", &err)) {
        if (g != NULL || strncmp(err.msg, "fuzz.gguf: ", 11) != 0) abort();
        return 0;
    }
    for (uint64_t i = 0; i < g->n_kv; i++) {
        const nx_gguf_kv *kv = &g->kv[i];
        lookup(g, kv->key, false);
        if (kv->type == NX_GGUF_STRING && kv->v.str.len) sink += (uint8_t)kv->v.str.ptr[kv->v.str.len - 1];
        if (kv->type != NX_GGUF_ARRAY) continue;
        for (uint64_t j = 0; j < kv->arr_count; j++) {
            sink += (uint64_t)nx_gguf_arr_int(kv, j);
            sink += (uint64_t)(nx_gguf_arr_f64(kv, j) != 0);
            nx_str s = nx_gguf_arr_str(kv, j);
            if (s.len) sink += (uint8_t)s.ptr[0] + (uint8_t)s.ptr[s.len - 1];
        }
        if (kv->arr_bytes) sink += kv->arr_data[0] + kv->arr_data[kv->arr_bytes - 1];
    }
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        const uint8_t *d = t->data;
        if (t->nbytes == 0 || d < data || t->nbytes > size || d + t->nbytes > data + size) abort();
        sink += d[0] + d[t->nbytes - 1];
        lookup(g, t->name, true);
    }
    nx_gguf_close(g);
    return 0;
}
