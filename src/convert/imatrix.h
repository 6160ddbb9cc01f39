/* imatrix.h - llama.cpp importance-matrix files, read as llama-quantize --imatrix reads them.
 *
 * Two formats (llama.cpp's tools/imatrix writes both):
 *   - GGUF: per weight tensor W two F32 tensors, "W.in_sum2" (ne0 x n_mat: sums of squared
 *     activations per input column, one row per expert for a 3-D expert tensor) and "W.counts"
 *     (1 x n_mat: activations seen per matrix); keys imatrix.datasets (string array),
 *     imatrix.chunk_count and imatrix.chunk_size (u32), all three required.  Value of column
 *     i of matrix j: in_sum2 / count_j (count rounded to an integer), 1 where count_j is 0.
 *   - legacy ".dat": i32 entry count; per entry i32 name length, name, i32 ncall, i32 nval and
 *     nval floats (already divided by the counts and multiplied by ncall); optionally i32 chunk
 *     count, i32 length and the dataset name.  Value: stored / ncall (as stored if ncall <= 0).
 * Any other file is refused with a message naming it.  A non-finite value is an error (as in
 * llama-quantize), naming the entry.
 */
#ifndef NX_IMATRIX_H
#define NX_IMATRIX_H

#include "nextn_internal.h"

typedef struct nx_imatrix_entry {
    char *name;          /* weight tensor name, e.g. "blk.0.ffn_down_exps.weight" */
    float *values;       /* n_mat x ne0 importance weights (mean squared activations) */
    uint64_t n;          /* number of values (ne0 x n_mat) */
} nx_imatrix_entry;

typedef struct nx_imatrix {
    nx_imatrix_entry *entries; /* sorted by name */
    size_t n_entries;
    char *dataset;       /* the first dataset name, NULL if none */
    int32_t chunk_count; /* chunks it was computed on (0 = unknown) */
    bool legacy;
} nx_imatrix;

bool nx_imatrix_load(const char *path, nx_imatrix **out, nx_err *err);
void nx_imatrix_free(nx_imatrix *im);
/* The entry for a weight tensor, NULL if none. */
const nx_imatrix_entry *nx_imatrix_find(const nx_imatrix *im, const char *name);

#endif
