/* fuzz_safetensors.c - libFuzzer target: the safetensors header parser and float reads.
 * Any input must either open (and then every tensor must be readable within bounds) or fail
 * with a message; never crash, leak or read out of bounds. */
#include <stdint.h>
#include <stdlib.h>

#include "convert/safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    nx_safetensors *st = NULL;
    nx_err err;
    if (!nx_st_open_memory(&st, data, size, "fuzz", &err)) return 0;
    float buf[64];
    for (uint64_t i = 0; i < nx_st_count(st); i++) {
        const nx_st_tensor *t = nx_st_get(st, i);
        uint64_t n = t->n_elems < 64 ? t->n_elems : 64;
        (void)nx_st_read_f32(t, 0, n, buf, &err);
        if (t->n_elems > n) (void)nx_st_read_f32(t, t->n_elems - n, n, buf, &err);
        if (nx_st_find(st, t->name) == NULL) abort(); /* every listed tensor must be findable */
    }
    nx_st_close(st);
    return 0;
}
