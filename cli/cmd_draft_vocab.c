/* cmd_draft_vocab.c - `nextn draft-vocab`: count token frequencies of a text with a model's
 * tokenizer and write the frequency file that `--draft-vocab K --draft-vocab-file FILE` reads
 * (format in src/draft_vocab.h).  Prints how much of the text the K most frequent tokens cover
 * for a few K, to help choose K. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"

#define CMD "draft-vocab"
#define CHUNK (1u << 20) /* text is tokenised in pieces of >= 1 MiB cut after a newline */

static int cmp_u64_desc(const void *a, const void *b) {
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x > y ? -1 : x < y;
}

/* Reads the whole file (the caller frees *out). */
static bool read_all(const char *path, char **out, size_t *len, nx_err *err) {
    FILE *f = fopen(path, "rb");
    if (!f) return nx_fail(err, "%s: cannot open: %s", path, strerror(errno));
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap);
    while (buf) {
        if (n == cap) {
            char *nb = cap > SIZE_MAX / 2 ? NULL : realloc(buf, cap * 2);
            if (!nb) break;
            buf = nb;
            cap *= 2;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0) break;
    }
    bool bad = ferror(f) != 0;
    fclose(f);
    if (!buf || n == cap || bad) {
        free(buf);
        return nx_fail(err, "%s: %s", path, bad ? "read error" : "out of memory");
    }
    *out = buf;
    *len = n;
    return true;
}

int cmd_draft_vocab(int argc, char **argv) {
    const char *model_path = NULL, *text_path = NULL, *out_path = NULL;
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model_path, "FILE", "model GGUF whose tokenizer is used (required)", 0, 0, NULL, false},
        {"--file", "-f", NX_ARG_STRING, &text_path, "TEXT", "text to count (required)", 0, 0, NULL, false},
        {"--output", "-o", NX_ARG_STRING, &out_path, "FILE", "frequency file to write (required)", 0, 0, NULL, false},
    };
    const size_t n_args = NX_ARGS_LEN(args);
    int rc = nx_args_parse(CMD, "-m MODEL -f TEXT -o FREQ_FILE", args, n_args, argc, argv);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (!model_path || !text_path || !out_path) return nx_usage_error(CMD, "-m MODEL, -f TEXT and -o FILE are required");

    nx_err err;
    nx_gguf *g = NULL;
    nx_tokenizer *tok = NULL;
    char *text = NULL;
    uint64_t *counts = NULL, *sorted = NULL;
    nx_tokens ids = {0};
    int status = 1;
    size_t len = 0;
    if (!nx_gguf_open(&g, model_path, &err)) goto fail;
    if (!nx_gguf_find_kv(g, "tokenizer.ggml.model")) {
        nx_fail(&err, "%s: the file has no tokenizer (tokenizer.ggml.*): nothing to count with", model_path);
        goto fail;
    }
    if (!nx_tokenizer_from_gguf(&tok, g, &err)) goto fail;
    const uint32_t V = nx_tokenizer_n_vocab(tok);
    if (!read_all(text_path, &text, &len, &err)) goto fail;
    counts = calloc(V, sizeof *counts);
    sorted = calloc(V, sizeof *sorted);
    if (!counts || !sorted) {
        nx_fail(&err, "out of memory");
        goto fail;
    }
    for (size_t at = 0; at < len;) {
        size_t end = at + CHUNK < len ? at + CHUNK : len;
        while (end < len && text[end - 1] != '\n') end++;
        ids.n = 0;
        /* plain text: no BOS, control tokens written in it are text */
        if (!nx_tokenize(tok, text + at, end - at, false, false, &ids, &err)) {
            nx_fail_prefix(&err, "%s: bytes %zu..%zu", text_path, at, end);
            goto fail;
        }
        for (size_t i = 0; i < ids.n; i++) counts[ids.ids[i]]++;
        at = end;
    }
    uint64_t total = 0;
    uint32_t distinct = 0;
    for (uint32_t i = 0; i < V; i++) {
        total += counts[i];
        distinct += counts[i] > 0;
        sorted[i] = counts[i];
    }
    if (total == 0) {
        nx_fail(&err, "%s: no tokens (empty file)", text_path);
        goto fail;
    }
    if (!nx_draft_vocab_save(out_path, counts, V, nx_draft_vocab_fingerprint(tok), text_path, &err)) goto fail;
    printf("nextn " CMD ": %s: %" PRIu64 " tokens, %u of %u token ids occur; wrote %s\n", text_path, total, distinct, V,
           out_path);
    qsort(sorted, V, sizeof *sorted, cmp_u64_desc);
    const uint32_t ks[] = {256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536};
    uint64_t cum = 0;
    uint32_t k = 0;
    for (size_t j = 0; j < sizeof ks / sizeof ks[0] && ks[j] < V; j++) {
        while (k < ks[j]) cum += sorted[k++];
        printf("  --draft-vocab %-6u covers %6.2f%% of the counted tokens\n", ks[j], 100.0 * (double)cum / (double)total);
    }
    status = 0;
    goto done;
fail:
    nx_cli_report(CMD, err.msg, NULL);
done:
    nx_tokens_free(&ids);
    free(counts);
    free(sorted);
    free(text);
    nx_tokenizer_free(tok);
    nx_gguf_close(g);
    return status;
}
