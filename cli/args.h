/* args.h - the option parser of every `nextn` command.
 *
 * A command describes its options in an nx_arg table; nx_args_parse() walks argv, fills the
 * destinations, checks numeric ranges and prints either the help text or one clear error
 * ("nextn run: --top-p: 1.5 is outside [0, 1]").  Accepted forms: `--name VALUE`,
 * `--name=VALUE`, `-x VALUE`, and bare flags.  Commands built around file arguments (info,
 * convert, quantize, ...) take them through nx_args_parse_pos(); nx_args_parse() refuses them.
 */
#ifndef NX_CLI_ARGS_H
#define NX_CLI_ARGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum nx_arg_kind {
    NX_ARG_FLAG,    /* dest: bool *, set to true */
    NX_ARG_INT,     /* dest: int32_t *, range [min, max] */
    NX_ARG_U64,     /* dest: uint64_t *, full range (seeds) */
    NX_ARG_FLOAT,   /* dest: float *, finite, range [min, max] */
    NX_ARG_STRING,  /* dest: const char ** (points into argv) */
    NX_ARG_CHOICE,  /* dest: int *, index into choices (NULL-terminated list) */
    NX_ARG_LIST,    /* dest: nx_arg_list *, repeatable: each occurrence appends its value */
} nx_arg_kind;

/* Values of a repeatable option, or the positional arguments: v[0..n), at most cap (v points
 * into argv).  rest (positional arguments only): the first one ends the options, every token
 * after it is positional too (free text such as `nextn tokenize -m F some -text`). */
typedef struct nx_arg_list {
    const char **v;
    int n, cap;
    bool rest;
} nx_arg_list;

typedef struct nx_arg {
    const char *name;              /* "--top-k" */
    const char *alias;             /* "-k" or NULL */
    nx_arg_kind kind;
    void *dest;
    const char *metavar;           /* "N", "FILE", ... (NULL for flags) */
    const char *help;              /* one line; the default is shown by the caller in the text */
    double min, max;               /* INT / FLOAT range, inclusive */
    const char *const *choices;    /* CHOICE only */
    bool seen;                     /* set by the parser when the option was given */
} nx_arg;

#define NX_ARGS_LEN(a) (sizeof(a) / sizeof((a)[0]))

enum { NX_ARGS_OK = 0, NX_ARGS_HELP = 1, NX_ARGS_ERROR = 2 };

/* Parses argv[1..argc) (argv[0] is the command name).  `usage` is the one-line synopsis printed
 * at the top of --help.  Returns NX_ARGS_OK, NX_ARGS_HELP (help printed on stdout: exit 0) or
 * NX_ARGS_ERROR (message printed on stderr: exit 2). */
int nx_args_parse(const char *cmd, const char *usage, nx_arg *args, size_t n_args, int argc, char **argv);

/* nx_args_parse for a command with positional arguments: the tokens that are not options (a
 * lone "-" included, and every token after "--") go to pos in order; more than pos->cap is an
 * error.  `usage` may span lines (a synopsis, then a description). */
int nx_args_parse_pos(const char *cmd, const char *usage, nx_arg *args, size_t n_args, int argc, char **argv,
                      nx_arg_list *pos);

/* The entry of `name` in the table (to test `seen`); NULL if absent. */
const nx_arg *nx_args_find(const nx_arg *args, size_t n_args, const char *name);

/* Prints "nextn CMD: message" on stderr (printf-style) and returns 2 (usage error). */
int nx_usage_error(const char *cmd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Parses a token id list: "12,7,9", "12 7 9" (commas and/or blanks, newlines), or a JSON array
 * "[12, 7, 9]" (what `tokenize --ids`-style tools and the server's JSON take) - the one form every
 * command accepts (--tokens, spec-bench --prompt, tokenize --decode).  On success *ids is malloc'ed.
 * Errors go to msg (naming the bad item and its position). */
bool nx_parse_token_list(const char *text, int32_t **ids, int32_t *n, char *msg, size_t msg_len);

#endif
