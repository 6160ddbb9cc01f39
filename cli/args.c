/* args.c - option parsing shared by the commands (see args.h). */
#include "args.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int nx_usage_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "nextn %s: ", cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return NX_ARGS_ERROR;
}

static void print_help(const char *cmd, const char *usage, const nx_arg *args, size_t n_args) {
    printf("usage: nextn %s %s\n\noptions:\n", cmd, usage);
    for (size_t i = 0; i < n_args; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", args[i].alias ? args[i].alias : "", args[i].alias ? ", " : "",
                 args[i].name, args[i].metavar ? " " : "", args[i].metavar ? args[i].metavar : "");
        printf("  %-26s %s\n", left, args[i].help);
    }
    printf("  %-26s %s\n", "-h, --help", "show this help");
}

const nx_arg *nx_args_find(const nx_arg *args, size_t n_args, const char *name) {
    for (size_t i = 0; i < n_args; i++)
        if (!strcmp(args[i].name, name)) return &args[i];
    return NULL;
}

/* Formats a range bound without trailing zeros. */
static void fmt_num(char *buf, size_t len, double v) { snprintf(buf, len, "%g", v); }

static int set_value(const char *cmd, nx_arg *a, const char *val) {
    char lo[32], hi[32];
    fmt_num(lo, sizeof lo, a->min);
    fmt_num(hi, sizeof hi, a->max);
    switch (a->kind) {
    case NX_ARG_INT: {
        char *end;
        errno = 0;
        long long v = strtoll(val, &end, 10);
        if (end == val || *end || errno)
            return nx_usage_error(cmd, "%s: '%s' is not an integer", a->name, val);
        if ((double)v < a->min || (double)v > a->max)
            return nx_usage_error(cmd, "%s: %lld is outside [%s, %s]", a->name, v, lo, hi);
        *(int32_t *)a->dest = (int32_t)v;
        return NX_ARGS_OK;
    }
    case NX_ARG_U64: {
        char *end;
        errno = 0;
        if (val[0] == '-') return nx_usage_error(cmd, "%s: '%s' must not be negative", a->name, val);
        unsigned long long v = strtoull(val, &end, 10);
        if (end == val || *end || errno)
            return nx_usage_error(cmd, "%s: '%s' is not an unsigned integer", a->name, val);
        *(uint64_t *)a->dest = (uint64_t)v;
        return NX_ARGS_OK;
    }
    case NX_ARG_FLOAT: {
        char *end;
        errno = 0;
        double v = strtod(val, &end);
        if (end == val || *end || errno || !isfinite(v))
            return nx_usage_error(cmd, "%s: '%s' is not a finite number", a->name, val);
        if (v < a->min || v > a->max)
            return nx_usage_error(cmd, "%s: %s is outside [%s, %s]", a->name, val, lo, hi);
        *(float *)a->dest = (float)v;
        return NX_ARGS_OK;
    }
    case NX_ARG_STRING:
        *(const char **)a->dest = val;
        return NX_ARGS_OK;
    case NX_ARG_CHOICE: {
        char list[256] = "";
        for (int i = 0; a->choices[i]; i++) {
            if (!strcmp(a->choices[i], val)) {
                *(int *)a->dest = i;
                return NX_ARGS_OK;
            }
            snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? ", " : "", a->choices[i]);
        }
        return nx_usage_error(cmd, "%s: '%s' is not one of: %s", a->name, val, list);
    }
    case NX_ARG_LIST: {
        nx_arg_list *l = a->dest;
        if (l->n >= l->cap) return nx_usage_error(cmd, "%s: at most %d of them", a->name, l->cap);
        l->v[l->n++] = val;
        return NX_ARGS_OK;
    }
    case NX_ARG_FLAG:
        break;
    }
    return nx_usage_error(cmd, "%s: internal error (bad option kind)", a->name);
}

static int positional(const char *cmd, nx_arg_list *pos, const char *tok) {
    if (!pos || pos->n >= pos->cap)
        return nx_usage_error(cmd, "unexpected argument '%s' (see nextn %s --help)", tok, cmd);
    pos->v[pos->n++] = tok;
    return NX_ARGS_OK;
}

int nx_args_parse(const char *cmd, const char *usage, nx_arg *args, size_t n_args, int argc, char **argv) {
    return nx_args_parse_pos(cmd, usage, args, n_args, argc, argv, NULL);
}

int nx_args_parse_pos(const char *cmd, const char *usage, nx_arg *args, size_t n_args, int argc, char **argv,
                      nx_arg_list *pos) {
    bool options = true;
    for (int i = 1; i < argc; i++) {
        const char *tok = argv[i];
        if (!options || tok[0] != '-' || tok[1] == '\0') {
            int rc = positional(cmd, pos, tok);
            if (rc != NX_ARGS_OK) return rc;
            if (pos->rest) options = false;
            continue;
        }
        if (pos && !strcmp(tok, "--")) {
            options = false;
            continue;
        }
        if (!strcmp(tok, "-h") || !strcmp(tok, "--help")) {
            print_help(cmd, usage, args, n_args);
            return NX_ARGS_HELP;
        }
        /* split --name=value */
        const char *eq = strncmp(tok, "--", 2) == 0 ? strchr(tok, '=') : NULL;
        size_t name_len = eq ? (size_t)(eq - tok) : strlen(tok);
        nx_arg *a = NULL;
        for (size_t k = 0; k < n_args && !a; k++) {
            if (strlen(args[k].name) == name_len && !strncmp(args[k].name, tok, name_len)) a = &args[k];
            else if (args[k].alias && strlen(args[k].alias) == name_len && !strncmp(args[k].alias, tok, name_len))
                a = &args[k];
        }
        if (!a) return nx_usage_error(cmd, "unknown option '%.*s' (see nextn %s --help)", (int)name_len, tok, cmd);
        a->seen = true;
        if (a->kind == NX_ARG_FLAG) {
            if (eq) return nx_usage_error(cmd, "%s takes no value", a->name);
            *(bool *)a->dest = true;
            continue;
        }
        const char *val;
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc)
                return nx_usage_error(cmd, "option %s needs a value (%s)", a->name, a->metavar ? a->metavar : "VALUE");
            val = argv[++i];
        }
        int rc = set_value(cmd, a, val);
        if (rc != NX_ARGS_OK) return rc;
    }
    return NX_ARGS_OK;
}

bool nx_parse_token_list(const char *text, int32_t **ids, int32_t *n, char *msg, size_t msg_len) {
    *ids = NULL;
    *n = 0;
    size_t cap = 16, count = 0;
    int32_t *v = malloc(cap * sizeof *v);
    if (!v) {
        snprintf(msg, msg_len, "out of memory");
        return false;
    }
    /* a JSON array: the same list between [ and ] */
    const char *p = text, *stop = NULL;
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r') p++;
    if (*p == '[') {
        stop = p + strlen(p);
        while (stop > p && (stop[-1] == ' ' || stop[-1] == '\t' || stop[-1] == '\n' || stop[-1] == '\r')) stop--;
        if (stop == p + 1 || stop[-1] != ']') {
            free(v);
            snprintf(msg, msg_len, "a list that starts with '[' must end with ']' (a JSON array of token ids)");
            return false;
        }
        stop--;
        p++;
    }
    for (;;) {
        while (p != stop && (*p == ',' || *p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
        if (p == stop || !*p) break;
        char *end;
        errno = 0;
        long long x = strtoll(p, &end, 10);
        if (end == p || errno || x < 0 || x > INT32_MAX ||
            (end != stop && *end && *end != ',' && *end != ' ' && *end != '\t' && *end != '\n' && *end != '\r')) {
            int item_len = 0;
            while (p + item_len != stop && p[item_len] && p[item_len] != ',' && p[item_len] != ' ' && item_len < 40)
                item_len++;
            snprintf(msg, msg_len, "item %zu ('%.*s') is not a token id (a non-negative integer)", count + 1, item_len, p);
            free(v);
            return false;
        }
        if (count == cap) {
            cap *= 2;
            int32_t *nv = realloc(v, cap * sizeof *v);
            if (!nv) {
                free(v);
                snprintf(msg, msg_len, "out of memory");
                return false;
            }
            v = nv;
        }
        v[count++] = (int32_t)x;
        p = end;
    }
    if (count == 0) {
        free(v);
        snprintf(msg, msg_len, "the token list is empty");
        return false;
    }
    *ids = v;
    *n = (int32_t)count;
    return true;
}
