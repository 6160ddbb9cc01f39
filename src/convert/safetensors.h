/* safetensors.h - read-only access to Hugging Face safetensors checkpoints (mmap).
 *
 * File layout (safetensors spec): u64 little-endian header length N, N bytes of UTF-8 JSON
 *   {"__metadata__": {"k": "v", ...},
 *    "<tensor name>": {"dtype": "BF16", "shape": [rows, cols], "data_offsets": [begin, end]}, ...}
 * then the data section; offsets are relative to the data section start (8 + N).
 *
 * nx_st_open*() validates *everything* before returning: header length against the file size,
 * the JSON, every dtype string, every shape (integers, product without overflow), every offset
 * pair (begin <= end <= data size, end - begin == elements * element size), duplicate names.
 * After a successful open no accessor can read outside the mapping.
 *
 * A checkpoint folder is either one `model.safetensors` or shards listed in
 * `model.safetensors.index.json` ({"weight_map": {"tensor": "file", ...}}); every shard the index
 * names must exist, every tensor it names must be in that shard, and every tensor of a shard must
 * be in the index (like llama.cpp's converter).  Shard names must be plain file names.
 *
 * Tensors are exposed in "checkpoint order": shards in sorted file-name order, and within a shard
 * sorted by name (byte order) - the order safetensors' own loaders and llama.cpp's converter use.
 * Shapes are in PyTorch order (slowest dimension first), unlike GGUF's ne[].
 */
#ifndef NX_SAFETENSORS_H
#define NX_SAFETENSORS_H

#include "nextn_internal.h"

#define NX_ST_MAX_DIMS 8
#define NX_ST_MAX_HEADER (100u * 1024u * 1024u) /* the reference implementation's limit */

/* Every dtype of the safetensors spec is recognised (so a checkpoint with, say, an I64 buffer
 * still opens); only F32/F16/BF16 can be converted to float.  An unknown dtype string fails open. */
typedef enum nx_st_dtype {
    NX_ST_F32, NX_ST_F16, NX_ST_BF16,
    NX_ST_F64, NX_ST_I64, NX_ST_I32, NX_ST_I16, NX_ST_I8, NX_ST_U64, NX_ST_U32, NX_ST_U16, NX_ST_U8,
    NX_ST_BOOL, NX_ST_F8_E4M3, NX_ST_F8_E5M2,
    NX_ST_DTYPE_COUNT
} nx_st_dtype;

typedef struct nx_st_tensor {
    const char *name;                 /* NUL-terminated, owned by the nx_safetensors */
    nx_st_dtype dtype;
    uint32_t n_dims;                  /* 0 (scalar) .. NX_ST_MAX_DIMS */
    uint64_t shape[NX_ST_MAX_DIMS];   /* PyTorch order; unused entries are 1 */
    uint64_t n_elems;
    uint64_t nbytes;
    const void *data;                 /* inside the mapping of its shard */
    uint32_t shard;                   /* index into the shard list */
} nx_st_tensor;

typedef struct nx_safetensors nx_safetensors;

/* One .safetensors file. */
bool nx_st_open_file(nx_safetensors **out, const char *path, nx_err *err);
/* A checkpoint folder: model.safetensors.index.json if present, else model.safetensors. */
bool nx_st_open_dir(nx_safetensors **out, const char *dir, nx_err *err);
/* A caller-owned buffer holding one file (fuzzer, tests); it must outlive the object. */
bool nx_st_open_memory(nx_safetensors **out, const void *buf, uint64_t size, const char *name, nx_err *err);
void nx_st_close(nx_safetensors *st);

uint64_t nx_st_count(const nx_safetensors *st);
const nx_st_tensor *nx_st_get(const nx_safetensors *st, uint64_t i);   /* checkpoint order */
const nx_st_tensor *nx_st_find(const nx_safetensors *st, const char *name); /* NULL if absent */
const char *nx_st_shard_path(const nx_safetensors *st, uint32_t shard);
uint64_t nx_st_total_bytes(const nx_safetensors *st);                   /* sum of tensor nbytes */

const char *nx_st_dtype_name(nx_st_dtype t);
size_t nx_st_dtype_size(nx_st_dtype t);

/* Tells the kernel the tensor's pages will not be read again soon (madvise DONTNEED on the
 * whole pages inside it), so a streaming converter's resident memory stays about one tensor.
 * Reading it later still works (the pages are faulted in again).  No-op for memory buffers. */
void nx_st_release(const nx_safetensors *st, const nx_st_tensor *t);
/* Asks the kernel to map the tensor's pages now (MADV_POPULATE_READ where available, else
 * WILLNEED): a streaming reader then takes no page fault per page.  Advisory, no-op for buffers. */
void nx_st_prefetch(const nx_safetensors *st, const nx_st_tensor *t);

/* The same for bytes [offset, offset + nbytes) of the tensor (clipped to it): a slice such as
 * one expert of a stacked [n_expert][rows][cols] tensor.  Release drops only whole pages inside
 * the slice, so a neighbouring slice keeps its pages. */
void nx_st_prefetch_range(const nx_safetensors *st, const nx_st_tensor *t, uint64_t offset, uint64_t nbytes);
void nx_st_release_range(const nx_safetensors *st, const nx_st_tensor *t, uint64_t offset, uint64_t nbytes);

/* Converts elements [first, first + count) of a F32/F16/BF16 tensor to float.  Fails (naming the
 * tensor and dtype) for other dtypes or an out-of-range request. */
bool nx_st_read_f32(const nx_st_tensor *t, uint64_t first, uint64_t count, float *dst, nx_err *err);

#endif
