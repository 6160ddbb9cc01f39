/* cli_util.h - pieces the model-running commands share: loading with a report, memory and
 * timing figures, reading files, token-list input.  Everything here prints (it is CLI code). */
#ifndef NX_CLI_UTIL_H
#define NX_CLI_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "nextn.h"

#define NX_MIB (1024.0 * 1024.0)

/* Loads a model, printing "nextn CMD: <error>" on failure.  Checks the file exists first so
 * the message for a typo is plain ("cannot open 'x.gguf': No such file or directory").
 * no_huge_reread: nextn_model_params.no_huge_reread (NX_CLI_LOAD_ARGS). */
bool nx_cli_load_model(const char *cmd, const char *path, bool load_mtp, bool no_huge_reread, nextn_model **out);
/* The same with all model parameters. */
bool nx_cli_load_model_params(const char *cmd, const char *path, const nextn_model_params *mp, nextn_model **out);

/* A progress line on stderr - "nextn CMD: tensor 12/733  1.2/16.0 GB  812.3 MB/s  ETA 0:15  NAME"
 * - redrawn in place at most 10 times a second, only when stderr is a terminal (pipes and CI
 * logs stay quiet).  unit: "MB" (bytes shown in MB/GB) or a word counted as is ("tokens").
 * nx_cli_progress_plain() (the long-running tools: convert, quantize, mkmodel): when stderr is
 * not a terminal, the same line is printed as a plain line every NX_CLI_PROGRESS_PLAIN_S seconds
 * (the environment variable NEXTN_PROGRESS_SECONDS overrides it), so a log shows the tool is alive;
 * jobs shorter than that print nothing. */
#define NX_CLI_PROGRESS_PLAIN_S 5.0
typedef struct nx_cli_progress {
    const char *cmd, *item_word, *unit;
    bool on, shown, quiet, plain;
    double t0, last, every;
} nx_cli_progress;
void nx_cli_progress_init(nx_cli_progress *p, const char *cmd, const char *item_word, const char *unit, bool quiet);
void nx_cli_progress_plain(nx_cli_progress *p);
void nx_cli_progress_show(nx_cli_progress *p, uint64_t item, uint64_t n_items, uint64_t done, uint64_t total,
                          const char *name, const char *note);
/* Clears the line (call before printing anything else on stderr, and at the end). */
void nx_cli_progress_end(nx_cli_progress *p);
/* nextn_progress_fn for model loading, and nx_progress_fn (nextn_internal.h) for the tools
 * (converter, quantizer, mkmodel); user = nx_cli_progress *. */
void nx_cli_progress_model(void *user, const nextn_progress *p);
struct nx_progress;
void nx_cli_progress_tool(void *user, const struct nx_progress *p);

/* The loading options of every command that loads a model to decode (an nx_arg table's entries,
 * args.h): --no-huge-reread sets the bool no_huge_reread (nextn_model_params.no_huge_reread). */
#define NX_CLI_LOAD_ARGS(no_huge_reread)                                                                            \
    {"--no-huge-reread", NULL, NX_ARG_FLAG, &(no_huge_reread), NULL,                                              \
     "keep the page cache as it is: do not drop and re-read a model file cached in 4 KiB pages to get 2 MiB pages " \
     "(default: re-read; decode reads 2 MiB pages faster)",                                                        \
     0, 0, NULL, false}

/* "weights: 98 % in 2 MiB pages (re-read at load to get them)" into out: how much of the model
 * file is mapped with 2 MiB entries (nextn_model_info.huge_mapped_bytes of file_bytes) and
 * whether loading re-read it; reread_off: --no-huge-reread was given. */
void nx_cli_weights_pages(char *out, size_t cap, uint64_t huge_bytes, uint64_t file_bytes, bool reread,
                          bool reread_off);

/* Creates a context; prints the error on failure. */
bool nx_cli_create_context(const char *cmd, const nextn_model *m, const nextn_context_params *p,
                           nextn_context **out);

/* "memory: weights 12.3 MiB (mmapped), KV cache 4.0 MiB (f16, n_ctx 4096 x 1 seq), recurrent
 * state 0.6 MiB" on stderr. */
void nx_cli_print_memory(const char *cmd, const nextn_memory *mem, const nextn_context_params *cp);

/* The attention cache options of every command that decodes (an nx_arg table's entries, args.h):
 * --kv-type sets K and V, --cache-type-k / -ctk and --cache-type-v / -ctv (llama.cpp's names) set
 * one each and win over --kv-type.  The choices' indices are the nextn_kv_type values.  kv holds
 * the --kv-type choice (initialise to 0, f16), k and v the others (initialise to -1: not given). */
extern const char *const nx_cli_kv_type_names[];
#define NX_CLI_KV_TYPES_HELP "f16|f32|q8_0|q4_0"
#define NX_CLI_KV_ARGS(kv, k, v)                                                                                   \
    {"--kv-type", NULL, NX_ARG_CHOICE, &(kv), NX_CLI_KV_TYPES_HELP, "attention K and V cache type (default f16)", 0, \
     0, nx_cli_kv_type_names, false},                                                                             \
        {"--cache-type-k", "-ctk", NX_ARG_CHOICE, &(k), NX_CLI_KV_TYPES_HELP,                                     \
         "attention K cache type (default: --kv-type)", 0, 0, nx_cli_kv_type_names, false},                       \
        {"--cache-type-v", "-ctv", NX_ARG_CHOICE, &(v), NX_CLI_KV_TYPES_HELP,                                     \
         "attention V cache type (default: --kv-type)", 0, 0, nx_cli_kv_type_names, false}
/* Sets p->kv_type / p->kv_type_v from the three choices above. */
void nx_cli_kv_types(int kv, int k, int v, nextn_context_params *p);

/* The sampling options of the commands that generate for one user (run, chat): rows writing the
 * fields of a nextn_sampler_params `sp`, with its defaults in the help. */
#define NX_CLI_SAMPLER_ARGS(sp)                                                                                     \
    {"--temp", NULL, NX_ARG_FLOAT, &(sp).temp, "T", "temperature, <= 0 greedy (default 0.8)", -1e9, 1e9, NULL, false}, \
        {"--top-k", NULL, NX_ARG_INT, &(sp).top_k, "N", "top-k, 0 off (default 40)", 0, 1e9, NULL, false},          \
        {"--top-p", NULL, NX_ARG_FLOAT, &(sp).top_p, "P", "top-p, 1 off (default 0.95)", 0, 1, NULL, false},        \
        {"--min-p", NULL, NX_ARG_FLOAT, &(sp).min_p, "P", "min-p, 0 off (default 0.05)", 0, 1, NULL, false},        \
        {"--repeat-penalty", NULL, NX_ARG_FLOAT, &(sp).penalty_repeat, "X", "repetition penalty, 1 off (default 1.0)", \
         1e-6, 1e6, NULL, false},                                                                                   \
        {"--repeat-last-n", NULL, NX_ARG_INT, &(sp).penalty_last_n, "N", "penalty window, 0 off, -1 all (default 64)", \
         -1, 1e9, NULL, false},                                                                                     \
        {"--presence-penalty", NULL, NX_ARG_FLOAT, &(sp).penalty_present, "X", "presence penalty (default 0)", -1e6, \
         1e6, NULL, false},                                                                                         \
        {"--frequency-penalty", NULL, NX_ARG_FLOAT, &(sp).penalty_freq, "X", "frequency penalty (default 0)", -1e6,  \
         1e6, NULL, false}

/* The speculative-decoding options of run and chat: `choice` indexes nx_cli_spec_names (0 none,
 * 1 mtp), `spec` is a nextn_spec_params, no_mtp / no_adaptive are bools. */
extern const char *const nx_cli_spec_names[];
#define NX_CLI_SPEC_ARGS(choice, spec, no_mtp, no_adaptive)                                                         \
    {"--spec", NULL, NX_ARG_CHOICE, &(choice), "none|mtp", "speculative decoding with the MTP head (default none)", 0, \
     0, nx_cli_spec_names, false},                                                                                  \
        {"--draft-max", NULL, NX_ARG_INT, &(spec).draft_max, "N", "--spec: max draft tokens per step (default 3)", 1, \
         16, NULL, false},                                                                                          \
        {"--draft-min", NULL, NX_ARG_INT, &(spec).draft_min, "N", "--spec: drop drafts shorter than N (default 0)", 0, \
         16, NULL, false},                                                                                          \
        {"--draft-p-min", NULL, NX_ARG_FLOAT, &(spec).draft_p_min, "P",                                              \
         "--spec: stop drafting below this top probability (default 0)", 0, 1, NULL, false},                        \
        {"--mtp-model", NULL, NX_ARG_STRING, &(spec).mtp_model, "FILE",                                              \
         "--spec: MTP GGUF (default: the model's own, or mtp-*.gguf beside it)", 0, 0, NULL, false},                \
        {"--no-mtp", NULL, NX_ARG_FLAG, &(no_mtp), NULL, "--spec: do not use an MTP head (plain decoding)", 0, 0, NULL, \
         false},                                                                                                    \
        {"--no-adaptive", NULL, NX_ARG_FLAG, &(no_adaptive), NULL, "--spec: always draft draft-max tokens (no cost model)", \
         0, 0, NULL, false},                                                                                        \
        {"--draft-vocab", NULL, NX_ARG_INT, &(spec).draft_vocab, "K",                                                \
         "--spec: the draft head scores only K tokens; 0 = all (default: V/4 from <model>.draft-vocab.txt if that " \
         "file is beside the model, else the V/4 lowest ids for 32768+ tokens, else all)",                          \
         0, 1e9, NULL, false},                                                                                      \
        {"--draft-vocab-file", NULL, NX_ARG_STRING, &(spec).draft_vocab_file, "FILE",                                \
         "--spec: token frequencies from `nextn draft-vocab` (default: the K lowest ids)", 0, 0, NULL, false}

/* Decodes n tokens of sequence `seq` starting at position pos0 in batches of at most n_batch,
 * logits only for the last token; *last_row receives that token's row in the last batch
 * (for nextn_get_logits). */
bool nx_cli_prefill(const char *cmd, nextn_context *ctx, const int32_t *ids, int32_t n, int32_t seq,
                    int32_t pos0, int32_t n_batch, int32_t *last_row);

/* Peak resident set size of this process in bytes (getrusage). */
uint64_t nx_cli_peak_rss_bytes(void);

/* Monotonic clock in seconds. */
double nx_cli_time_s(void);

/* Reads a whole file (NUL-terminated); prints the error and returns NULL on failure. */
char *nx_cli_read_file(const char *cmd, const char *path, size_t *len);

/* Checks every id is in [0, n_vocab); prints "--tokens: item 3 (id 999) is outside the
 * vocabulary [0, 256)" on failure. */
bool nx_cli_check_ids(const char *cmd, const char *what, const int32_t *ids, int32_t n, int32_t n_vocab);

/* ---- library errors in the CLI's words ----------------------------------------------------
 * Library errors name API fields and values ("draft_max 20 out of range (1..16)"); the CLI
 * shows the flag that sets them ("--draft-max 20 out of range (1..16)").  A table maps each
 * field phrase to its flag; phrases match whole words only. */
typedef struct nx_cli_flag_name {
    const char *field; /* as the library writes it, e.g. "draft_max", "use_mtp false" */
    const char *flag;  /* e.g. "--draft-max", "--no-mtp" */
} nx_cli_flag_name;

/* The flags of the generation commands (run, spec-bench, serve, bench): draft_*, mtp_model,
 * use_mtp false, chat_format, oracle mode.  Terminated by {NULL, NULL}. */
extern const nx_cli_flag_name nx_cli_gen_flags[];

/* msg with every table field replaced by its flag, into out (truncated to cap). */
void nx_cli_flag_names(const char *msg, const nx_cli_flag_name *table, char *out, size_t cap);
/* Prints "nextn CMD: MSG" on stderr (a library error or notice), MSG in flag names (table NULL =
 * nx_cli_gen_flags); a leading "CMD: " in MSG (the library naming its component) is not repeated. */
void nx_cli_report(const char *cmd, const char *msg, const nx_cli_flag_name *table);

/* Median / min / max of n values (sorts a copy). */
void nx_cli_stats(const double *v, int n, double *median, double *min, double *max);

#endif
