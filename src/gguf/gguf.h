/* gguf.h - GGUF v2/v3 reader (mmap) and writer.
 *
 * Reader: nx_gguf_open() maps the file read-only and validates *everything* before returning:
 * magic, version, counts, every string/array length, key types, tensor dims/types, that each
 * tensor's data range lies inside the file and does not overflow.  After a successful open no
 * accessor can read out of bounds.  Strings point into the mapping (NOT NUL-terminated; use
 * the length).  Errors name the file, the item and the numbers.
 *
 * Layout facts (GGUF spec, as llama.cpp writes it):
 *   header: magic "GGUF", u32 version (2 or 3), u64 n_tensors, u64 n_kv   (v1 used u32 counts: rejected)
 *   kv:     gguf_string key, u32 type, value          string = u64 len + bytes
 *   array:  u32 elem type, u64 count, elements        (arrays of arrays and of strings allowed)
 *   tensor: gguf_string name, u32 n_dims (<= 4), u64 ne[n_dims], u32 ggml type, u64 offset
 *   data section starts at the header end rounded up to general.alignment (default 32);
 *   each tensor offset is relative to it and must be a multiple of the alignment.
 */
#ifndef NX_GGUF_H
#define NX_GGUF_H

#include "base/common.h"

#define NX_GGUF_MAX_DIMS 4
#define NX_GGUF_DEFAULT_ALIGNMENT 32

typedef enum nx_gguf_vtype {
    NX_GGUF_UINT8 = 0, NX_GGUF_INT8 = 1, NX_GGUF_UINT16 = 2, NX_GGUF_INT16 = 3,
    NX_GGUF_UINT32 = 4, NX_GGUF_INT32 = 5, NX_GGUF_FLOAT32 = 6, NX_GGUF_BOOL = 7,
    NX_GGUF_STRING = 8, NX_GGUF_ARRAY = 9, NX_GGUF_UINT64 = 10, NX_GGUF_INT64 = 11,
    NX_GGUF_FLOAT64 = 12,
    NX_GGUF_VTYPE_COUNT
} nx_gguf_vtype;

/* A length-delimited string inside the mapping (or inside writer-owned memory). */
typedef struct nx_str {
    const char *ptr;
    uint64_t len;
} nx_str;

/* One metadata value.  For arrays: `arr_type`, `arr_count` and `arr_data` (raw little-endian
 * bytes inside the mapping).  Element i of a numeric array: nx_gguf_arr_*(); of a string
 * array: nx_gguf_arr_str().  Nested arrays are validated but only exposed raw. */
typedef struct nx_gguf_kv {
    nx_str key;
    nx_gguf_vtype type;
    union {
        uint64_t u64; int64_t i64; double f64; bool b; nx_str str;
    } v;                        /* scalars, widened; strings */
    nx_gguf_vtype arr_type;     /* arrays only */
    uint64_t arr_count;
    const uint8_t *arr_data;
    uint64_t arr_bytes;         /* bytes of the encoded elements (after elem type and count) */
    const uint64_t *arr_str_offsets; /* string arrays only: offset of element i's u64 length
                                      * within arr_data (reader-owned; makes arr_str O(1)) */
} nx_gguf_kv;

typedef struct nx_gguf_tensor {
    nx_str name;
    uint32_t n_dims;
    uint64_t ne[NX_GGUF_MAX_DIMS]; /* unused dims are 1 */
    uint32_t type;                 /* ggml type id (see quant.h nx_type) */
    uint64_t offset;               /* relative to the data section */
    uint64_t nbytes;               /* from the type's block size / bytes per block */
    const void *data;              /* inside the mapping */
} nx_gguf_tensor;

typedef struct nx_gguf {
    char *path;                 /* owned copy, for error messages */
    const uint8_t *base;        /* mapping (or caller buffer for open_memory) */
    uint64_t size;
    bool owns_mapping;
    uint32_t version;
    uint64_t n_kv;
    nx_gguf_kv *kv;
    uint64_t n_tensors;
    nx_gguf_tensor *tensors;
    uint64_t alignment;
    uint64_t data_offset;       /* absolute offset of the data section (= end of the tensor
                                 * infos rounded up to the alignment; unrounded if no tensors) */
    uint64_t *kv_order;         /* internal: kv indices sorted by key, for lookup */
    uint64_t *tensor_order;     /* internal: tensor indices sorted by name, for lookup */
} nx_gguf;

/* Storage layout of a ggml type id: every id llama.cpp defines, including formats nextn cannot
 * compute with, so files of any quantisation can be opened and inspected.  NULL if unknown. */
typedef struct nx_gguf_type_layout {
    const char *name;           /* ggml's name: "f32", "q4_K", "iq2_xxs", ... */
    uint32_t block_size;        /* elements per block */
    uint32_t type_size;         /* bytes per block */
} nx_gguf_type_layout;
const nx_gguf_type_layout *nx_gguf_type_layout_get(uint32_t type);

/* Reader limits (beyond what the file size implies). */
#define NX_GGUF_MAX_ARRAY_DEPTH 8   /* arrays of arrays nested deeper than this are rejected */

bool nx_gguf_open(nx_gguf **out, const char *path, nx_err *err);
/* Parses a caller-owned buffer (used by the fuzzer and tests); `name` is used in messages.
 * The buffer must outlive the returned object. */
bool nx_gguf_open_memory(nx_gguf **out, const void *buf, uint64_t size, const char *name, nx_err *err);
void nx_gguf_close(nx_gguf *g);

/* Reads the tensor data of a mapped file into the page cache, tensor by tensor in file order
 * (readahead requested one 64 MiB chunk ahead), calling fn (may be NULL) after each chunk.
 * When at least 90% of the data pages are resident already (mincore), it does nothing and
 * returns false; true when it read.  For showing progress while a cold file is read once,
 * instead of faulting it in during the first forward pass.  Never fails (advisory). */
bool nx_gguf_prefetch(const nx_gguf *g, nx_progress_fn fn, void *user);

/* Lookup.  Keys and tensor names are compared as byte strings. Return NULL / -1 if absent. */
const nx_gguf_kv     *nx_gguf_find_kv(const nx_gguf *g, const char *key);
const nx_gguf_tensor *nx_gguf_find_tensor(const nx_gguf *g, const char *name);
bool nx_str_eq(nx_str s, const char *cstr);

/* Typed getters.  *_or return the default when the key is absent; they fail (return false and
 * fill err, naming file and key) when the key exists with an incompatible type or a value out
 * of range for the requested type.  Integer getters accept any integer type whose value fits. */
bool nx_gguf_get_u32(const nx_gguf *g, const char *key, uint32_t *out, nx_err *err);          /* required */
bool nx_gguf_get_u32_or(const nx_gguf *g, const char *key, uint32_t def, uint32_t *out, nx_err *err);
bool nx_gguf_get_u64_or(const nx_gguf *g, const char *key, uint64_t def, uint64_t *out, nx_err *err);
bool nx_gguf_get_i32_or(const nx_gguf *g, const char *key, int32_t def, int32_t *out, nx_err *err);
bool nx_gguf_get_f32(const nx_gguf *g, const char *key, float *out, nx_err *err);             /* required */
bool nx_gguf_get_f32_or(const nx_gguf *g, const char *key, float def, float *out, nx_err *err);
bool nx_gguf_get_bool_or(const nx_gguf *g, const char *key, bool def, bool *out, nx_err *err);
bool nx_gguf_get_str(const nx_gguf *g, const char *key, nx_str *out, nx_err *err);            /* required */
bool nx_gguf_get_str_or(const nx_gguf *g, const char *key, const char *def, nx_str *out, nx_err *err);
/* Array access: checks the key is an array of the given element type (integer arrays are
 * converted element-wise and range-checked). */
bool nx_gguf_get_arr(const nx_gguf *g, const char *key, nx_gguf_vtype elem, const nx_gguf_kv **out, nx_err *err);
int64_t  nx_gguf_arr_int(const nx_gguf_kv *kv, uint64_t i);   /* integer/bool elements */
double   nx_gguf_arr_f64(const nx_gguf_kv *kv, uint64_t i);   /* numeric elements */
nx_str   nx_gguf_arr_str(const nx_gguf_kv *kv, uint64_t i);   /* string elements; O(1) after open */

const char *nx_gguf_vtype_name(nx_gguf_vtype t);
uint64_t nx_gguf_vtype_size(uint32_t t);   /* bytes of one value of a fixed-size type; 0: string, array, unknown */

/* ---- writer ----------------------------------------------------------------------------
 * Collects metadata and tensor descriptions in memory, then writes header + infos + aligned
 * data in one pass.  Tensor data is supplied either as a pointer (copied at write time, must
 * stay valid until nx_gguf_writer_write) or by a callback that produces it in chunks (used by
 * the converter/quantizer to stream with memory ~ one tensor).  KV and tensors are written in
 * insertion order, like llama.cpp's gguf writer; general.alignment is honoured. */
typedef struct nx_gguf_writer nx_gguf_writer;

/* Fills exactly `nbytes` bytes of the tensor into dst (called once per tensor, in order). */
typedef bool (*nx_gguf_tensor_fill_fn)(void *user, void *dst, uint64_t nbytes, nx_err *err);

nx_gguf_writer *nx_gguf_writer_new(nx_err *err);
void nx_gguf_writer_free(nx_gguf_writer *w);
bool nx_gguf_writer_set_version(nx_gguf_writer *w, uint32_t version, nx_err *err); /* 2 or 3; default 3 */
bool nx_gguf_add_u8  (nx_gguf_writer *w, const char *key, uint8_t v, nx_err *err);
bool nx_gguf_add_i8  (nx_gguf_writer *w, const char *key, int8_t v, nx_err *err);
bool nx_gguf_add_u16 (nx_gguf_writer *w, const char *key, uint16_t v, nx_err *err);
bool nx_gguf_add_i16 (nx_gguf_writer *w, const char *key, int16_t v, nx_err *err);
bool nx_gguf_add_u32 (nx_gguf_writer *w, const char *key, uint32_t v, nx_err *err);
bool nx_gguf_add_i32 (nx_gguf_writer *w, const char *key, int32_t v, nx_err *err);
bool nx_gguf_add_u64 (nx_gguf_writer *w, const char *key, uint64_t v, nx_err *err);
bool nx_gguf_add_i64 (nx_gguf_writer *w, const char *key, int64_t v, nx_err *err);
bool nx_gguf_add_f32 (nx_gguf_writer *w, const char *key, float v, nx_err *err);
bool nx_gguf_add_f64 (nx_gguf_writer *w, const char *key, double v, nx_err *err);
bool nx_gguf_add_bool(nx_gguf_writer *w, const char *key, bool v, nx_err *err);
bool nx_gguf_add_str (nx_gguf_writer *w, const char *key, const char *v, nx_err *err);
/* Numeric / bool array: `data` holds `count` elements of `elem` type, little-endian. */
bool nx_gguf_add_arr (nx_gguf_writer *w, const char *key, nx_gguf_vtype elem, const void *data, uint64_t count, nx_err *err);
bool nx_gguf_add_arr_str(nx_gguf_writer *w, const char *key, const char *const *strs, uint64_t count, nx_err *err);
/* Copies a kv (any type, arrays included) from an open file, e.g. when re-writing a model. */
bool nx_gguf_add_kv_copy(nx_gguf_writer *w, const nx_gguf_kv *kv, nx_err *err);

/* ne has n_dims entries, fastest first.  nbytes is checked against the type. */
bool nx_gguf_add_tensor(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                        const uint64_t *ne, const void *data, nx_err *err);
bool nx_gguf_add_tensor_fn(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                           const uint64_t *ne, nx_gguf_tensor_fill_fn fill, void *user, nx_err *err);
/* Like nx_gguf_add_tensor_fn, but the data comes in n_parts equal consecutive slices:
 * fill_part(user, p, dst, nbytes / n_parts) for p = 0 .. n_parts - 1, in order, so the writer
 * buffers one slice (e.g. one expert of a stacked [n_expert][rows][cols] tensor). */
typedef bool (*nx_gguf_tensor_fill_part_fn)(void *user, uint64_t part, void *dst, uint64_t nbytes, nx_err *err);
bool nx_gguf_add_tensor_parts(nx_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims,
                              const uint64_t *ne, uint64_t n_parts, nx_gguf_tensor_fill_part_fn fill_part,
                              void *user, nx_err *err);
/* Writes to path (via a temporary file renamed into place). */
bool nx_gguf_writer_write(nx_gguf_writer *w, const char *path, nx_err *err);

#endif
