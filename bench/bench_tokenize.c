/* bench_tokenize - tokenization throughput.
 *
 *   bench_tokenize VOCAB CORPUS [RUNS] [--no-normalize]
 *
 * VOCAB is a GGUF with tokenizer.ggml.* keys or a Hugging Face tokenizer.json; CORPUS a UTF-8
 * text file (the peer test leaves its corpus, all documents concatenated, in
 * build/tokenizer-peer/corpus.txt).  Each run encodes the whole corpus with special-token
 * parsing on.  The first run starts with an empty word cache ("cold"); the median of the other
 * runs is "warm".  Prints MB/s (1 MB = 10^6 bytes) by wall time and by this thread's CPU time
 * (the CPU figure is the meaningful one on a shared, oversubscribed machine).  --no-normalize
 * turns the NFC step off (what it costs: the difference). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "bench_util.h"
#include "gguf/gguf.h"
#include "convert/hf_tokenizer.h"
#include "tokenizer/tokenizer.h"


static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: bench_tokenize VOCAB(.gguf|tokenizer.json) CORPUS [RUNS] [--no-normalize]\n");
        return 2;
    }
    int runs = argc > 3 ? atoi(argv[3]) : 7;
    if (runs < 2 || runs > 1000) runs = 7;
    nx_err err;
    nx_tokenizer *tok = NULL;
    if (ends_with(argv[1], ".json")) {
        nx_hf_vocab v;
        nx_vocab_desc d;
        if (!nx_hf_vocab_load(&v, argv[1], NULL, NULL, &err)) goto fail;
        nx_hf_vocab_desc(&v, &d);
        bool ok = nx_tokenizer_create(&tok, &d, &err);
        nx_hf_vocab_free(&v);
        if (!ok) goto fail;
    } else {
        nx_gguf *g;
        if (!nx_gguf_open(&g, argv[1], &err)) goto fail;
        bool ok = nx_tokenizer_from_gguf(&tok, g, &err);
        nx_gguf_close(g);
        if (!ok) goto fail;
    }
    if (argc > 4 && !strcmp(argv[4], "--no-normalize")) nx_tokenizer_set_nfc(tok, false);
    printf("NFC step %s\n", nx_tokenizer_nfc(tok) ? "on" : "off");
    FILE *f = fopen(argv[2], "rb");
    if (!f) {
        fprintf(stderr, "bench_tokenize: cannot open %s\n", argv[2]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc((size_t)n + 1);
    if (!text || fread(text, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "bench_tokenize: cannot read %s\n", argv[2]);
        return 1;
    }
    fclose(f);

    double *mbs = malloc((size_t)runs * sizeof *mbs), *cpu = malloc((size_t)runs * sizeof *cpu);
    size_t n_tokens = 0;
    for (int r = 0; r < runs; r++) {
        nx_tokens out = {0};
        double t0 = nx_time_s(), c0 = bu_seconds(CLOCK_THREAD_CPUTIME_ID);
        if (!nx_tokenize(tok, text, (size_t)n, false, true, &out, &err)) goto fail;
        double dt = nx_time_s() - t0, dc = bu_seconds(CLOCK_THREAD_CPUTIME_ID) - c0;
        mbs[r] = (double)n / dt / 1e6;
        cpu[r] = (double)n / dc / 1e6;
        n_tokens = out.n;
        nx_tokens_free(&out);
    }
    double cold = mbs[0], cold_cpu = cpu[0];
    printf("corpus %ld bytes -> %zu tokens\n", n, n_tokens);
    printf("cold (empty word cache): %6.1f MB/s wall, %6.1f MB/s cpu\n", cold, cold_cpu);
    printf("warm median of %2d runs:  %6.1f MB/s wall, %6.1f MB/s cpu\n", runs - 1, bu_median(mbs + 1, runs - 1),
           bu_median(cpu + 1, runs - 1));
    free(mbs);
    free(cpu);
    free(text);
    nx_tokenizer_free(tok);
    return 0;
fail:
    fprintf(stderr, "bench_tokenize: %s\n", err.msg);
    return 1;
}
