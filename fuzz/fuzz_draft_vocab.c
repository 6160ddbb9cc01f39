/* fuzz_draft_vocab.c - libFuzzer target: any byte string given to the draft-vocabulary file
 * reader (draft_vocab.h) either fails with a message or yields K distinct ids, all inside the
 * vocabulary, in increasing order (checked here; ASan/UBSan check the parsing itself). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "spec/draft_vocab.h"

enum { V = 300 };

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FILE *f = fmemopen((void *)data, size ? size : 1, "r");
    if (!f) return 0;
    if (!size) {
        fclose(f);
        return 0;
    }
    int32_t ids[V];
    const int32_t K = 1 + (int32_t)(size % V); /* several K, including more than the file lists */
    nx_err err;
    /* fingerprint 0: only the vocabulary size is checked, so random files can get through */
    if (nx_draft_vocab_select_stream(f, "fuzz.txt", V, 0, K, ids, &err)) {
        for (int32_t k = 0; k < K; k++)
            if (ids[k] < 0 || ids[k] >= V || (k > 0 && ids[k] <= ids[k - 1])) abort();
    }
    fclose(f);
    return 0;
}
