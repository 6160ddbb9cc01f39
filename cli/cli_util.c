/* cli_util.c - see cli_util.h. */
#include "cli_util.h"
#include "nextn_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

bool nx_cli_load_model(const char *cmd, const char *path, bool load_mtp, bool no_huge_reread, nextn_model **out) {
    nextn_model_params mp = nextn_model_default_params();
    mp.load_mtp = load_mtp;
    mp.no_huge_reread = no_huge_reread;
    return nx_cli_load_model_params(cmd, path, &mp, out);
}

void nx_cli_weights_pages(char *out, size_t cap, uint64_t huge_bytes, uint64_t file_bytes, bool reread,
                          bool reread_off) {
    const double pct = file_bytes ? 100.0 * (double)huge_bytes / (double)file_bytes : 0.0;
    snprintf(out, cap, "weights: %.0f %% in 2 MiB pages%s", pct > 100.0 ? 100.0 : pct,
             reread ? " (re-read at load to get them)" : reread_off ? " (re-read off)" : "");
}

bool nx_cli_load_model_params(const char *cmd, const char *path, const nextn_model_params *mp, nextn_model **out) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "nextn %s: cannot open model '%s': %s\n", cmd, path, strerror(errno));
        return false;
    }
    fclose(f);
    nextn_error err;
    /* on a terminal, a cold file is read once with a progress line (nothing when it is cached) */
    nx_cli_progress pr;
    nextn_model_params p = *mp;
    nx_cli_progress_init(&pr, cmd, "loading tensor", "MB", false);
    if (pr.on && !p.progress) {
        p.progress = nx_cli_progress_model;
        p.progress_user = &pr;
    }
    bool ok = nextn_model_load(out, path, &p, &err);
    nx_cli_progress_end(&pr);
    if (!ok) {
        fprintf(stderr, "nextn %s: %s\n", cmd, err.msg);
        return false;
    }
    return true;
}

bool nx_cli_create_context(const char *cmd, const nextn_model *m, const nextn_context_params *p,
                           nextn_context **out) {
    nextn_error err;
    if (!nextn_context_create(out, m, p, &err)) {
        nx_cli_report(cmd, err.msg, NULL);
        return false;
    }
    return true;
}

const char *const nx_cli_kv_type_names[] = {"f16", "f32", "q8_0", "q4_0", NULL};
const char *const nx_cli_spec_names[] = {"none", "mtp", NULL};

void nx_cli_kv_types(int kv, int k, int v, nextn_context_params *p) {
    p->kv_type = (nextn_kv_type)(k >= 0 ? k : kv);
    p->kv_type_v = (nextn_kv_type)(v >= 0 ? v : kv);
}

void nx_cli_print_memory(const char *cmd, const nextn_memory *mem, const nextn_context_params *cp) {
    char types[32];
    if (cp->kv_type == cp->kv_type_v) snprintf(types, sizeof types, "%s", nx_cli_kv_type_names[cp->kv_type]);
    else
        snprintf(types, sizeof types, "k %s, v %s", nx_cli_kv_type_names[cp->kv_type],
                 nx_cli_kv_type_names[cp->kv_type_v]);
    fprintf(stderr,
            "nextn %s: memory: weights %.1f MiB (mmapped), KV cache %.1f MiB (%s, n_ctx %d x %d seq), "
            "recurrent state %.1f MiB\n",
            cmd, mem->weight_bytes / NX_MIB, mem->kv_bytes / NX_MIB, types, cp->n_ctx, cp->n_seq,
            mem->state_bytes / NX_MIB);
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

/* ---- progress line ---------------------------------------------------------------------------- */

void nx_cli_progress_init(nx_cli_progress *p, const char *cmd, const char *item_word, const char *unit, bool quiet) {
    memset(p, 0, sizeof *p);
    p->cmd = cmd;
    p->item_word = item_word;
    p->unit = unit;
    p->quiet = quiet;
    p->on = !quiet && isatty(STDERR_FILENO);
    p->t0 = nx_cli_time_s();
}

void nx_cli_progress_plain(nx_cli_progress *p) {
    if (p->quiet || p->on) return;
    const char *e = getenv("NEXTN_PROGRESS_SECONDS");
    char *end = NULL;
    const double s = e && *e ? strtod(e, &end) : NX_CLI_PROGRESS_PLAIN_S;
    p->every = end && (*end || !(s >= 0)) ? NX_CLI_PROGRESS_PLAIN_S : s;
    p->plain = p->on = true;
    p->last = p->t0;
}

static void fmt_amount(char *buf, size_t n, const char *unit, double v) {
    if (!strcmp(unit, "MB")) {
        if (v >= 1e9) snprintf(buf, n, "%.2f GB", v / 1e9);
        else snprintf(buf, n, "%.1f MB", v / 1e6);
    } else {
        snprintf(buf, n, "%.0f %s", v, unit);
    }
}

void nx_cli_progress_show(nx_cli_progress *p, uint64_t item, uint64_t n_items, uint64_t done, uint64_t total,
                          const char *name, const char *note) {
    if (!p->on) return;
    const double now = nx_cli_time_s();
    const bool last = total && done >= total;
    if (p->plain && (last || now - p->last < p->every)) return;
    if (!p->plain && p->shown && !last && now - p->last < 0.1) return;
    p->last = now;
    const double el = now - p->t0, rate = el > 0 ? (double)done / el : 0;
    char a[32], b[32], r[48], eta[32] = "ETA --:--";
    fmt_amount(a, sizeof a, p->unit, (double)done);
    fmt_amount(b, sizeof b, p->unit, (double)total);
    if (!strcmp(p->unit, "MB")) snprintf(r, sizeof r, "%.1f MB/s", rate / 1e6);
    else snprintf(r, sizeof r, "%.1f %s/s", rate, p->unit);
    if (rate > 0 && el >= 0.5 && total >= done) {
        const double s = (double)(total - done) / rate;
        if (s < 360000) snprintf(eta, sizeof eta, "ETA %d:%02d:%02d", (int)(s / 3600), (int)(s / 60) % 60, (int)s % 60);
    }
    char it[48] = "";
    if (n_items) snprintf(it, sizeof it, "%s %llu/%llu  ", p->item_word, (unsigned long long)item, (unsigned long long)n_items);
    fprintf(stderr, "%snextn %s: %s%s / %s  %s  %s  %.40s%s%s%s", p->plain ? "" : "\r\033[K", p->cmd, it, a, b, r, eta,
            name ? name : "", note ? " -> " : "", note ? note : "", p->plain ? "\n" : "");
    fflush(stderr);
    p->shown = true;
}

void nx_cli_progress_end(nx_cli_progress *p) {
    if (p->on && p->shown && !p->plain) {
        fputs("\r\033[K", stderr);
        fflush(stderr);
    }
    p->shown = false;
}

void nx_cli_progress_model(void *user, const nextn_progress *pr) {
    nx_cli_progress_show(user, pr->item, pr->n_items, pr->bytes, pr->total_bytes, pr->name, NULL);
}

void nx_cli_progress_tool(void *user, const struct nx_progress *pr) {
    nx_cli_progress_show(user, pr->item, pr->n_items, pr->bytes, pr->total_bytes, pr->name, pr->note);
}

const nx_cli_flag_name nx_cli_gen_flags[] = {
    {"draft_vocab = NEXTN_DRAFT_VOCAB_ALL", "--draft-vocab 0"},
    {"draft_vocab_file", "--draft-vocab-file"},
    {"draft_vocab", "--draft-vocab"},
    {"draft_max", "--draft-max"},
    {"draft_min", "--draft-min"},
    {"draft_p_min", "--draft-p-min"},
    {"use_mtp false", "--no-mtp"},
    {"mtp_model", "--mtp-model"},
    {"chat_format", "--chat-format"},
    {"oracle mode", "--spec-oracle"},
    {"kv_type_v", "--cache-type-v"},
    {"kv_type", "--cache-type-k"},
    {NULL, NULL},
};

static bool is_word_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

void nx_cli_flag_names(const char *msg, const nx_cli_flag_name *table, char *out, size_t cap) {
    size_t o = 0;
    if (cap == 0) return;
    for (const char *p = msg; *p;) {
        const nx_cli_flag_name *hit = NULL;
        if (p == msg || !is_word_char(p[-1]))
            for (const nx_cli_flag_name *t = table; t->field && !hit; t++) {
                const size_t n = strlen(t->field);
                if (!strncmp(p, t->field, n) && !is_word_char(p[n])) hit = t;
            }
        const char *src = hit ? hit->flag : p;
        const size_t n = hit ? strlen(hit->flag) : 1;
        for (size_t i = 0; i < n && o + 1 < cap; i++) out[o++] = src[i];
        p += hit ? strlen(hit->field) : 1;
    }
    out[o] = 0;
}

void nx_cli_report(const char *cmd, const char *msg, const nx_cli_flag_name *table) {
    char buf[2 * NEXTN_ERROR_MAX];
    /* a library message may start with its component's name ("serve: ..."): said once when it is the command's */
    const size_t n = strlen(cmd);
    if (!strncmp(msg, cmd, n) && msg[n] == ':' && msg[n + 1] == ' ') msg += n + 2;
    nx_cli_flag_names(msg, table ? table : nx_cli_gen_flags, buf, sizeof buf);
    fprintf(stderr, "nextn %s: %s\n", cmd, buf);
}
