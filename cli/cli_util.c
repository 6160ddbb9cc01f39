/* cli_util.c - see cli_util.h. */
#include "cli_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

bool nx_cli_load_model(const char *cmd, const char *path, bool load_mtp, nextn_model **out) {
    nextn_model_params mp = nextn_model_default_params();
    mp.load_mtp = load_mtp;
    return nx_cli_load_model_params(cmd, path, &mp, out);
}

bool nx_cli_load_model_params(const char *cmd, const char *path, const nextn_model_params *mp, nextn_model **out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nextn %s: cannot open model '%s': %s\n", cmd, path, strerror(errno));
        return false;
    }
    fclose(f);
    nextn_error err;
    if (!nextn_model_load(out, path, mp, &err)) {
        fprintf(stderr, "nextn %s: %s\n", cmd, err.msg);
        return false;
    }
    return true;
}

bool nx_cli_create_context(const char *cmd, const nextn_model *m, const nextn_context_params *p,
                           nextn_context **out) {
    nextn_error err;
    if (!nextn_context_create(out, m, p, &err)) {
        fprintf(stderr, "nextn %s: %s\n", cmd, err.msg);
        return false;
    }
    return true;
}

void nx_cli_print_memory(const char *cmd, const nextn_context *ctx, nextn_kv_type kv_type) {
    nextn_memory mem;
    nextn_context_memory(ctx, &mem);
    fprintf(stderr,
            "nextn %s: memory: weights %.1f MiB (mmapped), KV cache %.1f MiB (%s, n_ctx %d x %d seq), "
            "recurrent state %.1f MiB\n",
            cmd, mem.weight_bytes / NX_MIB, mem.kv_bytes / NX_MIB, kv_type == NEXTN_KV_F32 ? "f32" : "f16",
            nextn_n_ctx(ctx), nextn_n_seq(ctx), mem.state_bytes / NX_MIB);
}

bool nx_cli_prefill(const char *cmd, nextn_context *ctx, const int32_t *ids, int32_t n, int32_t seq,
                    int32_t pos0, int32_t n_batch, int32_t *last_row) {
    int32_t *pos = malloc((size_t)n_batch * sizeof *pos);
    int32_t *sid = malloc((size_t)n_batch * sizeof *sid);
    int8_t *want = malloc((size_t)n_batch);
    if (!pos || !sid || !want) {
        fprintf(stderr, "nextn %s: out of memory for a batch of %d\n", cmd, n_batch);
        free(pos), free(sid), free(want);
        return false;
    }
    bool ok = true;
    for (int32_t start = 0; start < n && ok; start += n_batch) {
        int32_t len = n - start < n_batch ? n - start : n_batch;
        for (int32_t i = 0; i < len; i++) {
            pos[i] = pos0 + start + i;
            sid[i] = seq;
            want[i] = start + i == n - 1;
            if (want[i]) *last_row = i;
        }
        nextn_batch b = {.n_tokens = len, .token = ids + start, .pos = pos, .seq_id = sid, .logits = want};
        nextn_error err;
        if (!nextn_decode(ctx, &b, &err)) {
            fprintf(stderr, "nextn %s: %s\n", cmd, err.msg);
            ok = false;
        }
    }
    free(pos), free(sid), free(want);
    return ok;
}

char *nx_cli_read_file(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nextn %s: cannot open '%s': %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    for (;;) {
        if (!buf) break;
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (n < cap) break;
        cap *= 2;
        char *nb = realloc(buf, cap + 1);
        if (!nb) {
            free(buf);
            buf = NULL;
        } else {
            buf = nb;
        }
    }
    bool err = ferror(f);
    fclose(f);
    if (!buf || err) {
        fprintf(stderr, "nextn %s: cannot read '%s'%s\n", cmd, path, buf ? "" : ": out of memory");
        free(buf);
        return NULL;
    }
    buf[n] = 0;
    *len = n;
    return buf;
}

bool nx_cli_check_ids(const char *cmd, const char *what, const int32_t *ids, int32_t n, int32_t n_vocab) {
    for (int32_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= n_vocab) {
            fprintf(stderr, "nextn %s: %s: item %d (id %d) is outside the vocabulary [0, %d)\n", cmd, what, i + 1,
                    ids[i], n_vocab);
            return false;
        }
    }
    return true;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void nx_cli_stats(const double *v, int n, double *median, double *min, double *max) {
    double *s = malloc((size_t)(n > 0 ? n : 1) * sizeof *s);
    if (!s || n <= 0) {
        *median = *min = *max = 0.0;
        free(s);
        return;
    }
    memcpy(s, v, (size_t)n * sizeof *s);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    *median = n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]);
    *min = s[0];
    *max = s[n - 1];
    free(s);
}

uint64_t nx_cli_peak_rss_bytes(void) {
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return (uint64_t)ru.ru_maxrss * 1024u; /* Linux reports KiB */
}

double nx_cli_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
