/* mtp_file.c - finding a sibling mtp-*.gguf next to a model, and writing an mtp-only file
 * (MTP block + token_embd, output_norm, output) from a model that carries its MTP block. */
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gguf/gguf.h"
#include "model/model.h"
#include "spec/mtp.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

bool nx_mtp_find_sibling(const char *trunk_path, char *out, size_t out_len, bool *found, nx_err *err) {
    *found = false;
    char dir[512];
    const char *slash = strrchr(trunk_path, '/');
    const char *base = slash ? slash + 1 : trunk_path;
    if (slash) {
        size_t n = (size_t)(slash - trunk_path);
        if (n >= sizeof dir) return nx_fail(err, "model path too long: %s", trunk_path);
        memcpy(dir, trunk_path, n);
        dir[n] = 0;
        if (n == 0) snprintf(dir, sizeof dir, "/");
    } else {
        snprintf(dir, sizeof dir, ".");
    }
    if (!strncmp(base, "mtp-", 4)) return true; /* the model is itself an MTP file: no sibling */
    DIR *d = opendir(dir);
    if (!d) return true; /* unreadable folder: no sibling, plain decoding */
    char exact[300], first[300];
    snprintf(exact, sizeof exact, "mtp-%s", base);
    int n_cand = 0;
    bool have_exact = false;
    first[0] = 0;
    for (struct dirent *e; (e = readdir(d));) {
        if (strncmp(e->d_name, "mtp-", 4) || !ends_with(e->d_name, ".gguf")) continue;
        if (!strcmp(e->d_name, exact)) have_exact = true;
        if (n_cand == 0 || strcmp(e->d_name, first) < 0) snprintf(first, sizeof first, "%s", e->d_name);
        n_cand++;
    }
    closedir(d);
    if (n_cand == 0) return true;
    if (!have_exact && n_cand > 1)
        return nx_fail(err, "%s: %d mtp-*.gguf files next to the model and none named '%s'; choose one with "
                       "mtp_model (or use_mtp false)", dir, n_cand, exact);
    int w = snprintf(out, out_len, "%s/%s", dir, have_exact ? exact : first);
    if (w < 0 || (size_t)w >= out_len) return nx_fail(err, "MTP file path too long in %s", dir);
    *found = true;
    return true;
}

static bool is_mtp_only_tensor(const nx_gguf_tensor *t, uint32_t L) {
    char pfx[32];
    snprintf(pfx, sizeof pfx, "blk.%u.", L);
    return nx_str_eq(t->name, "token_embd.weight") || nx_str_eq(t->name, "output_norm.weight") ||
           nx_str_eq(t->name, "output.weight") ||
           (t->name.len > strlen(pfx) && !memcmp(t->name.ptr, pfx, strlen(pfx)));
}

bool nx_mtp_extract(const char *src_path, const char *dst_path, nx_err *err) {
    nx_gguf *g = NULL;
    if (!nx_gguf_open(&g, src_path, err)) return false;
    nx_hparams hp;
    nx_gguf_writer *w = NULL;
    bool ok = false;
    if (!nx_hparams_from_gguf(&hp, g, err)) goto done;
    if (hp.n_mtp != 1) {
        nx_fail(err, "%s: no MTP block to extract (%s.nextn_predict_layers = %u)", src_path, nx_hp_arch(&hp),
                hp.n_mtp);
        goto done;
    }
    w = nx_gguf_writer_new(err);
    if (!w) goto done;
    for (uint64_t i = 0; i < g->n_kv; i++)
        if (!nx_gguf_add_kv_copy(w, &g->kv[i], err)) goto done;
    for (uint64_t i = 0; i < g->n_tensors; i++) {
        const nx_gguf_tensor *t = &g->tensors[i];
        if (!is_mtp_only_tensor(t, hp.n_layer)) continue;
        char name[256];
        snprintf(name, sizeof name, "%.*s", (int)NX_MIN(t->name.len, 255), t->name.ptr);
        if (!nx_gguf_add_tensor(w, name, t->type, t->n_dims, t->ne, t->data, err)) goto done;
    }
    ok = nx_gguf_writer_write(w, dst_path, err);
done:
    nx_gguf_writer_free(w);
    nx_gguf_close(g);
    return ok;
}
