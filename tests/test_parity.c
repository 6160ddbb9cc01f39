/* test_parity.c - our forward pass against llama.cpp's, on the same GGUF files.
 *
 * The reference rows in tests/fixtures/parity/ were computed by llama.cpp (commit d32676d77)
 * with tests/fixtures/gen/dump_logits.c on files written by `nextn mkmodel`; the exact commands
 * are in tests/fixtures/README.md.  The GGUFs are too big to keep (23 MB for F32), so this test
 * re-creates each one with nx_mkmodel_write() and first checks that the bytes are exactly the
 * ones llama.cpp read (FNV-1a 64 of the whole file, recorded in cases.txt).  A mismatch means
 * mkmodel changed: the fixtures must be regenerated, the test says so and fails.
 *
 * Then every case is replayed: the rows of the reference file, in file order, are fed to
 * nx_forward() in batches of `chunk` rows (same tokens, positions, sequence ids, same batch
 * split llama.cpp got), logits on for every row, F32 KV cache.  Checks per row:
 *   - logits: max |ours - ref| <= tol (per case, cases.txt);
 *   - argmax: ours == ref, except when the reference's top two logits are closer than tol
 *     (a near-tie that either engine may break): then our pick must be a token whose
 *     reference logit is within tol of the reference maximum.  Near-ties are counted and
 *     printed so they cannot hide a systematic problem;
 *   - hidden (cases that have a .hidden file): the post-final-norm hidden state of every row
 *     (nx_ctx_hidden) within hidden_tol.
 * The tolerances and why they are what they are: tests/fixtures/README.md.
 * NEXTN_PARITY_VERBOSE=1 prints the deviation of every row.
 *
 *   - MTP logits (cases with a .mtp file): the MTP head (mtp.h) is fed the same rows and batch
 *     split, each row with the trunk hidden of the same sequence one position earlier (zeros
 *     before position 0), as llama.cpp's MTP driver mirrors target batches; its logits must be
 *     within the same tol.
 */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "forward/forward.h"
#include "convert/mkmodel.h"
#include "model/model.h"
#include "spec/mtp.h"
#include "quant/quant.h"
#include "base/threads.h"

#define MAX_MODELS 16
#define MAX_CASES 64

typedef struct pmodel {
    char name[64], preset[16], type[16];
    uint64_t seed, fnv;
    bool tied;              /* optional flag "tied": mkmodel --tie */
    bool fused;             /* optional flag "fused": mkmodel --fuse-gate-up-exps (MoE presets) */
} pmodel;

typedef struct pcase {
    char name[64], model[64];
    int chunk;
    bool hidden, mtp;
    float tol, hidden_tol;  /* max |ours - llama.cpp| per logit / per hidden element */
} pcase;

static pmodel models[MAX_MODELS];
static pcase cases[MAX_CASES];
static int n_models, n_cases;
static nx_pool *pool;

/* ---- fixture files ----------------------------------------------------------------------- */

typedef struct nxlg {
    uint32_t n_rows, n_cols;
    int32_t *meta;      /* [n_rows][3] seq, pos, token */
    float *rows;        /* [n_rows][n_cols] */
    void *blob;
} nxlg;

static void nxlg_read(nxlg *f, const char *rel) {
    size_t len;
    const char *path = tu_src_path(rel);
    f->blob = tu_read_file(path, &len);
    if (!f->blob) fail_msg("%s: cannot read", path);
    const uint8_t *b = f->blob;
    uint32_t hdr[3];
    if (len < 16 || memcmp(b, "NXLG", 4) != 0) fail_msg("%s: not an NXLG file", path);
    memcpy(hdr, b + 4, sizeof hdr);
    if (hdr[0] != 1) fail_msg("%s: version %u, expected 1", path, hdr[0]);
    f->n_rows = hdr[1];
    f->n_cols = hdr[2];
    uint64_t need = 16 + (uint64_t)f->n_rows * 12 + (uint64_t)f->n_rows * f->n_cols * 4;
    if (f->n_rows == 0 || f->n_cols == 0 || need != len)
        fail_msg("%s: %zu bytes, header says %u rows x %u cols (%llu bytes)", path, len, f->n_rows, f->n_cols,
                 (unsigned long long)need);
    f->meta = malloc((size_t)f->n_rows * 12);
    f->rows = malloc((size_t)f->n_rows * f->n_cols * 4);
    assert_non_null(f->meta);
    assert_non_null(f->rows);
    memcpy(f->meta, b + 16, (size_t)f->n_rows * 12);
    memcpy(f->rows, b + 16 + (size_t)f->n_rows * 12, (size_t)f->n_rows * f->n_cols * 4);
}

static void nxlg_free(nxlg *f) {
    free(f->meta);
    free(f->rows);
    free(f->blob);
}

static uint64_t fnv1a64_file(const char *path) {
    size_t len;
    uint8_t *d = tu_read_file(path, &len);
    if (!d) fail_msg("%s: cannot read", path);
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) h = (h ^ d[i]) * 0x100000001b3ull;
    free(d);
    return h;
}

static void read_manifest(void) {
    const char *path = tu_src_path("tests/fixtures/parity/cases.txt");
    FILE *f = fopen(path, "r");
    if (!f) fail_msg("%s: cannot open", path);
    char line[512];
    int ln = 0;
    while (fgets(line, sizeof line, f)) {
        ln++;
        if (line[0] == '#' || line[0] == '\n') continue;
        char kind[16];
        if (sscanf(line, "%15s", kind) != 1) continue;
        if (!strcmp(kind, "model")) {
            assert_true(n_models < MAX_MODELS);
            pmodel *m = &models[n_models++];
            unsigned long long seed, fnv;
            char f1[16] = "", f2[16] = "";
            int got = sscanf(line, "model %63s %15s %15s %llu %llx %15s %15s", m->name, m->preset, m->type, &seed, &fnv,
                             f1, f2);
            if (got < 5) fail_msg("%s:%d: bad model line", path, ln);
            for (int k = 0; k < got - 5; k++) {
                const char *fl = k ? f2 : f1;
                if (!strcmp(fl, "tied")) m->tied = true;
                else if (!strcmp(fl, "fused")) m->fused = true;
                else fail_msg("%s:%d: unknown model flag '%s'", path, ln, fl);
            }
            m->seed = seed;
            m->fnv = fnv;
        } else if (!strcmp(kind, "case")) {
            assert_true(n_cases < MAX_CASES);
            pcase *c = &cases[n_cases++];
            char outs[64];
            if (sscanf(line, "case %63s %63s %d %63s %f %f", c->name, c->model, &c->chunk, outs, &c->tol,
                       &c->hidden_tol) != 6 || c->chunk < 1 || !(c->tol > 0) || !(c->hidden_tol > 0))
                fail_msg("%s:%d: bad case line", path, ln);
            c->hidden = strstr(outs, "hidden") != NULL;
            c->mtp = strstr(outs, "mtp") != NULL;
        } else {
            fail_msg("%s:%d: unknown line kind '%s'", path, ln, kind);
        }
    }
    fclose(f);
    if (n_models == 0 || n_cases == 0) fail_msg("%s: no models or no cases", path);
}

/* ---- comparison -------------------------------------------------------------------------- */

typedef struct stats {
    double max_diff, max_hidden_diff, max_mtp_diff;
    int rows, near_ties, argmax_diff;
} stats;

static int argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}

static void check_logits(const pcase *c, int row, const float *ours, const float *ref, int n,
                         stats *st) {
    double md = 0;
    for (int i = 0; i < n; i++) {
        if (!isfinite(ours[i])) fail_msg("%s row %d: logit %d is %f", c->name, row, i, ours[i]);
        double d = fabs((double)ours[i] - ref[i]);
        if (d > md) md = d;
    }
    if (md > st->max_diff) st->max_diff = md;
    if (getenv("NEXTN_PARITY_VERBOSE")) printf("    %s row %d: max|dlogit| %.3g\n", c->name, row, md);
    if (md > c->tol)
        fail_msg("%s row %d: max |logit diff| %.3g > tol %.3g", c->name, row, md, (double)c->tol);
    int ra = argmax(ref, n), oa = argmax(ours, n);
    float second = -INFINITY;
    for (int i = 0; i < n; i++)
        if (i != ra && ref[i] > second) second = ref[i];
    if (ref[ra] - second < c->tol) {
        st->near_ties++;
        st->argmax_diff += oa != ra;
        if (ref[ra] - ref[oa] > c->tol)
            fail_msg("%s row %d: argmax %d (ref logit %.6f) vs llama.cpp %d (%.6f)", c->name, row, oa, ref[oa], ra,
                     ref[ra]);
    } else if (oa != ra) {
        fail_msg("%s row %d: argmax %d, llama.cpp %d (gap %.3g)", c->name, row, oa, ra, ref[ra] - second);
    }
}

static void run_case(const pcase *c, const nx_model *model) {
    char rel[256];
    nxlg lg, hd = {0}, mt = {0};
    snprintf(rel, sizeof rel, "tests/fixtures/parity/%s.logits", c->name);
    nxlg_read(&lg, rel);
    if (lg.n_cols != model->hp.n_vocab)
        fail_msg("%s: %u logits per row, model has n_vocab %u", c->name, lg.n_cols, model->hp.n_vocab);
    if (c->hidden) {
        snprintf(rel, sizeof rel, "tests/fixtures/parity/%s.hidden", c->name);
        nxlg_read(&hd, rel);
        if (hd.n_rows != lg.n_rows || hd.n_cols != model->hp.n_embd ||
            memcmp(hd.meta, lg.meta, (size_t)lg.n_rows * 12) != 0)
            fail_msg("%s: .hidden does not match .logits rows or n_embd", c->name);
    }

    if (c->mtp) {
        snprintf(rel, sizeof rel, "tests/fixtures/parity/%s.mtp", c->name);
        nxlg_read(&mt, rel);
        if (mt.n_rows != lg.n_rows || mt.n_cols != lg.n_cols || memcmp(mt.meta, lg.meta, (size_t)lg.n_rows * 12) != 0)
            fail_msg("%s: .mtp does not match .logits rows", c->name);
    }

    int max_seq = 0, max_pos = 0;
    for (uint32_t r = 0; r < lg.n_rows; r++) {
        if (lg.meta[3 * r] > max_seq) max_seq = lg.meta[3 * r];
        if (lg.meta[3 * r + 1] > max_pos) max_pos = lg.meta[3 * r + 1];
    }
    nx_ctx_params cp = nx_ctx_default_params();
    cp.n_ctx = max_pos + 1;
    cp.n_seq = max_seq + 1;
    cp.n_snapshots = 0;
    cp.kv_type = NX_KV_F32;
    cp.kv_type_v = NX_KV_F32;
    nx_ctx *ctx;
    nx_err err;
    if (!nx_ctx_create(&ctx, model, &cp, pool, &err)) fail_msg("%s: %s", c->name, err.msg);

    /* MTP mirror (llama.cpp common/speculative.cpp): the row of token x_p carries the trunk hidden of the same
     * sequence at p-1 (zeros before the first position), same batches as the trunk. */
    nx_mtp_head head;
    nx_mtp *mtp = NULL;
    float *pending = NULL, *hrows = NULL;
    if (c->mtp) {
        if (!nx_mtp_head_from_model(&head, model, model, c->model, &err)) fail_msg("%s: %s", c->name, err.msg);
        if (!nx_mtp_create(&mtp, &head, cp.n_ctx, cp.n_seq, NX_KV_F32, NX_KV_F32, pool, &err)) fail_msg("%s: %s", c->name, err.msg);
        pending = calloc((size_t)cp.n_seq * model->hp.n_embd, sizeof(float));
        hrows = calloc((size_t)c->chunk * model->hp.n_embd, sizeof(float));
        assert_non_null(pending);
        assert_non_null(hrows);
    }

    int32_t *tok = malloc(sizeof(int32_t) * (size_t)c->chunk), *pos = malloc(sizeof(int32_t) * (size_t)c->chunk);
    int32_t *seq = malloc(sizeof(int32_t) * (size_t)c->chunk);
    int8_t *want = malloc((size_t)c->chunk);
    stats st = {0};
    const int E = (int)model->hp.n_embd;
    for (uint32_t r0 = 0; r0 < lg.n_rows; r0 += (uint32_t)c->chunk) {
        int nb = (int)NX_MIN((uint32_t)c->chunk, lg.n_rows - r0);
        for (int i = 0; i < nb; i++) {
            seq[i] = lg.meta[3 * (r0 + i)];
            pos[i] = lg.meta[3 * (r0 + i) + 1];
            tok[i] = lg.meta[3 * (r0 + i) + 2];
            want[i] = 1;
        }
        nx_batch b = {.n_tokens = nb, .token = tok, .pos = pos, .seq_id = seq, .logits = want};
        if (!nx_forward(ctx, &b, &err)) fail_msg("%s rows %u..: %s", c->name, r0, err.msg);
        const float *h = nx_ctx_hidden(ctx);
        for (int i = 0; i < nb; i++) {
            const float *ours = nx_ctx_logits(ctx, i);
            assert_non_null(ours);
            check_logits(c, (int)r0 + i, ours, lg.rows + (size_t)(r0 + i) * lg.n_cols, (int)lg.n_cols, &st);
            if (c->hidden) {
                const float *ref = hd.rows + (size_t)(r0 + i) * E;
                double md = 0;
                for (int j = 0; j < E; j++) md = fmax(md, fabs((double)h[(size_t)i * E + j] - ref[j]));
                if (md > st.max_hidden_diff) st.max_hidden_diff = md;
                if (md > c->hidden_tol)
                    fail_msg("%s row %u: max |hidden diff| %.3g > tol %.3g", c->name, r0 + i, md, (double)c->hidden_tol);
            }
            st.rows++;
        }
        if (mtp) {
            for (int i = 0; i < nb; i++) {
                memcpy(hrows + (size_t)i * E, pending + (size_t)seq[i] * E, sizeof(float) * (size_t)E);
                memcpy(pending + (size_t)seq[i] * E, h + (size_t)i * E, sizeof(float) * (size_t)E);
            }
            if (!nx_mtp_forward(mtp, nb, tok, pos, seq, hrows, want, &err)) fail_msg("%s MTP rows %u..: %s", c->name, r0, err.msg);
            for (int i = 0; i < nb; i++) {
                const float *ours = nx_mtp_logits(mtp, i), *ref = mt.rows + (size_t)(r0 + i) * mt.n_cols;
                assert_non_null(ours);
                double md = 0;
                for (uint32_t j = 0; j < mt.n_cols; j++) md = fmax(md, fabs((double)ours[j] - ref[j]));
                if (md > st.max_mtp_diff) st.max_mtp_diff = md;
                if (md > c->tol) fail_msg("%s MTP row %u: max |logit diff| %.3g > tol %.3g", c->name, r0 + i, md, (double)c->tol);
            }
        }
    }
    printf("  %-12s %4d rows, chunk %3d: max|dlogit| %.2e (tol %.0e)%s", c->name, st.rows, c->chunk, st.max_diff,
           (double)c->tol, c->hidden ? "" : "\n");
    if (c->hidden) printf(", max|dhidden| %.2e (tol %.0e)\n", st.max_hidden_diff, (double)c->hidden_tol);
    if (c->mtp) printf("  %-12s MTP head: max|dlogit| %.2e (tol %.0e)\n", c->name, st.max_mtp_diff, (double)c->tol);
    if (st.near_ties)
        printf("  %-12s %d rows with a reference top-2 gap < tol, %d of them with another argmax\n", c->name,
               st.near_ties, st.argmax_diff);
    free(tok); free(pos); free(seq); free(want);
    if (mtp) {
        nx_mtp_free(mtp); /* head is a view into model: nothing to free */
        free(pending);
        free(hrows);
        nxlg_free(&mt);
    }
    nx_ctx_free(ctx);
    nxlg_free(&lg);
    if (c->hidden) nxlg_free(&hd);
}

static void test_parity_all(void **state) {
    (void)state;
    nx_err err;
    int checked = 0;
    for (int mi = 0; mi < n_models; mi++) {
        const pmodel *m = &models[mi];
        nx_type t;
        if (!nx_type_from_name(m->type, &t)) fail_msg("cases.txt: unknown type '%s'", m->type);
        const char *path = tu_tmp_path(m->name);
        nx_mk_options o = {.preset = m->preset, .type = (uint32_t)t, .seed = m->seed, .mtp = true,
                           .tie = m->tied ? 1 : -1, .fuse_gate_up = m->fused};
        if (!nx_mkmodel_write(&o, path, pool, &err)) fail_msg("%s: %s", m->name, err.msg);
        uint64_t h = fnv1a64_file(path);
        if (h != m->fnv)
            fail_msg("%s: nextn mkmodel --preset %s --type %s --seed %llu%s%s now writes different bytes "
                     "(fnv1a64 %016llx, fixtures were made from %016llx): regenerate tests/fixtures/parity "
                     "as described in tests/fixtures/README.md",
                     m->name, m->preset, m->type, (unsigned long long)m->seed, m->tied ? " --tie" : "",
                     m->fused ? " --fuse-gate-up-exps" : "",
                     (unsigned long long)h,
                     (unsigned long long)m->fnv);
        nx_model *model;
        if (!nx_model_load(&model, path, true, &err)) fail_msg("%s: %s", m->name, err.msg);
        printf("%s (%s, seed %llu):\n", m->name, m->type, (unsigned long long)m->seed);
        for (int ci = 0; ci < n_cases; ci++)
            if (!strcmp(cases[ci].model, m->name)) {
                run_case(&cases[ci], model);
                checked++;
            }
        nx_model_free(model);
        unlink(path);
    }
    assert_int_equal(checked, n_cases); /* every case names a known model */
}

static int setup(void **state) {
    (void)state;
    nx_err err;
    read_manifest();
    pool = nx_pool_create(0, &err);
    return pool ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    nx_pool_free(pool);
    return 0;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parity_all),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
