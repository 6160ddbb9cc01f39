/* cmd_tokenize.c - `nextn tokenize`: text -> tokens (or ids -> text) with a model's vocabulary.
 *
 *   nextn tokenize -m FILE [--ids] [--special] [--no-bos] [--no-normalize] [--roundtrip] [-f PATH | TEXT...]
 *   nextn tokenize -m FILE --decode [--special] ID...
 *   nextn tokenize -m FILE --chat [--chat-format chatml] [--system TEXT] [--no-think] TEXT...
 *
 * FILE is a GGUF (tokenizer.ggml.* keys) or a Hugging Face tokenizer.json.  Without --ids each
 * token is printed on its own line as `ID<TAB>'PIECE'` (piece bytes escaped); with --ids the ids
 * are printed space-separated on one line.  --special parses control tokens written in the text
 * (<|im_start|> ...) and shows them when decoding.  --roundtrip checks decode(encode(x)) == x
 * and exits 1 if not (text that is not NFC comes back in NFC unless --no-normalize).  --chat formats TEXT as one user turn (plus an optional system prompt)
 * with the model's chat format and the generation prompt, then tokenizes it with specials. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nextn_internal.h"
#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "convert/hf_tokenizer.h"

static bool ends_with(const char *s, const char *suffix) {
    size_t n = strlen(s), m = strlen(suffix);
    return n >= m && !strcmp(s + n - m, suffix);
}

/* Loads the vocabulary; when chat is non-NULL also selects the chat format (from
 * --chat-format or the GGUF's template). */
static bool load_tokenizer(const char *path, nx_tokenizer **tok, const char *chat_format, nx_chat_format *chat,
                           nx_err *err) {
    if (ends_with(path, ".json")) {
        if (chat && !nx_chat_select(NULL, chat_format ? chat_format : "", chat, err))
            return nx_fail(err, "--chat with a tokenizer.json needs --chat-format chatml (no template is read from it)");
        nx_hf_vocab v;
        if (!nx_hf_vocab_load(&v, path, NULL, NULL, err)) return false;
        nx_vocab_desc d;
        nx_hf_vocab_desc(&v, &d);
        d.name = path;
        bool ok = nx_tokenizer_create(tok, &d, err);
        nx_hf_vocab_free(&v);
        return ok;
    }
    nx_gguf *g;
    if (!nx_gguf_open(&g, path, err)) return false;
    bool ok = nx_tokenizer_from_gguf(tok, g, err) && (!chat || nx_chat_select(g, chat_format, chat, err));
    nx_gguf_close(g);
    return ok;
}

static bool read_all(FILE *f, nx_buf *out, nx_err *err) {
    char chunk[65536];
    size_t n;
    if (!nx_buf_append(out, "", 0, err)) return false;
    while ((n = fread(chunk, 1, sizeof chunk, f)) > 0)
        if (!nx_buf_append(out, chunk, n, err)) return false;
    return !ferror(f) || nx_fail(err, "read error");
}

static void print_piece(const char *p, size_t n) {
    putchar('\'');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '\n') fputs("\\n", stdout);
        else if (c == '\t') fputs("\\t", stdout);
        else if (c == '\r') fputs("\\r", stdout);
        else if (c == '\\' || c == '\'') printf("\\%c", c);
        else if (c < 0x20 || c == 0x7f) printf("\\x%02x", c);
        else putchar(c);
    }
    putchar('\'');
}

#define CMD "tokenize"

int cmd_tokenize(int argc, char **argv) {
    const char *model = NULL, *file = NULL, *chat_format = NULL, *system = NULL;
    bool ids_only = false, special = false, no_bos = false, roundtrip = false, decode = false, chat = false,
         no_think = false, no_normalize = false;
    const char **words = calloc((size_t)argc, sizeof *words);
    if (!words) return nx_usage_error(CMD, "out of memory");
    nx_arg_list pos = {words, 0, argc, true};
    nx_arg args[] = {
        {"--model", "-m", NX_ARG_STRING, &model, "FILE", "vocabulary: a model GGUF or a Hugging Face tokenizer.json (required)", 0, 0, NULL, false},
        {"--file", "-f", NX_ARG_STRING, &file, "PATH", "read the text from PATH ('-' = stdin) instead of the arguments", 0, 0, NULL, false},
        {"--ids", NULL, NX_ARG_FLAG, &ids_only, NULL, "print only the ids, space-separated", 0, 0, NULL, false},
        {"--special", NULL, NX_ARG_FLAG, &special, NULL, "match control tokens such as <|im_start|> in the text; print them when decoding", 0, 0, NULL, false},
        {"--no-bos", NULL, NX_ARG_FLAG, &no_bos, NULL, "never add BOS (by default only if the vocabulary asks for it)", 0, 0, NULL, false},
        {"--no-normalize", NULL, NX_ARG_FLAG, &no_normalize, NULL, "tokenize the bytes as given: skip the vocabulary's NFC step (as llama.cpp)", 0, 0, NULL, false},
        {"--roundtrip", NULL, NX_ARG_FLAG, &roundtrip, NULL, "check that decoding the tokens gives the text back (exit 1 if not)", 0, 0, NULL, false},
        {"--decode", NULL, NX_ARG_FLAG, &decode, NULL, "the arguments are token ids; print the text", 0, 0, NULL, false},
        {"--chat", NULL, NX_ARG_FLAG, &chat, NULL, "the text as a user turn + generation prompt in the model's chat format (prompt on stderr)", 0, 0, NULL, false},
        {"--chat-format", NULL, NX_ARG_STRING, &chat_format, "NAME", "use this chat format instead of the model's template (chatml)", 0, 0, NULL, false},
        {"--system", NULL, NX_ARG_STRING, &system, "TEXT", "system prompt for --chat", 0, 0, NULL, false},
        {"--no-think", NULL, NX_ARG_FLAG, &no_think, NULL, "--chat with thinking off (<think>\\n\\n</think>\\n\\n after the prompt)", 0, 0, NULL, false},
    };
    int prc = nx_args_parse_pos(CMD,
                                "-m FILE [--ids] [--special] [--no-bos] [--roundtrip] [-f PATH | TEXT...]\n"
                                "       nextn tokenize -m FILE --decode [--special] ID...\n"
                                "       nextn tokenize -m FILE --chat [--chat-format chatml] [--system TEXT] [--no-think] TEXT...\n\n"
                                "The first TEXT word ends the options (or --): the rest is text.",
                                args, NX_ARGS_LEN(args), argc, argv, &pos);
    const int n_words = pos.n;
    const bool think = !no_think;
    free(words);
    if (prc == NX_ARGS_HELP) return 0;
    if (prc != NX_ARGS_OK) return 2;
    if (!model) return nx_usage_error(CMD, "-m FILE is required (see nextn %s --help)", CMD);
    if (file && n_words) return nx_usage_error(CMD, "give the text either with -f or as arguments, not both");
    if (!file && !n_words) return nx_usage_error(CMD, "no text given (see nextn %s --help)", CMD);
    /* the words are the last n_words tokens of argv (the first one ends the options) */
    const int first_arg = argc - n_words;
    nx_err err;
    nx_tokenizer *tok = NULL;
    nx_buf text = {0}, dec = {0};
    nx_tokens toks = {0};
    int rc = 1;
    if ((chat_format || system || !think) && !chat) {
        return nx_usage_error(CMD, "--chat-format, --system and --no-think need --chat");
    }
    nx_chat_format fmt = NX_CHAT_NONE;
    if (!load_tokenizer(model, &tok, chat_format, chat ? &fmt : NULL, &err)) goto fail;
    if (no_normalize) nx_tokenizer_set_nfc(tok, false);

    if (decode) {
        /* the arguments, joined by blanks, are one token list (args.h: "1,2,3", "1 2 3", "[1, 2, 3]") */
        nx_buf list = {0};
        for (int i = first_arg; i < argc; i++)
            if (!nx_buf_append(&list, " ", 1, &err) || !nx_buf_append(&list, argv[i], strlen(argv[i]), &err)) {
                nx_buf_free(&list);
                goto fail;
            }
        int32_t *ids = NULL, n_ids = 0;
        char msg[160];
        const bool parsed = nx_parse_token_list(list.data ? list.data : "", &ids, &n_ids, msg, sizeof msg);
        nx_buf_free(&list);
        if (!parsed) {
            rc = nx_usage_error("tokenize", "--decode: %s", msg);
            goto out;
        }
        bool ok = true;
        for (int32_t i = 0; ok && i < n_ids; i++) ok = nx_token_to_piece(tok, ids[i], special, &dec, &err);
        free(ids);
        if (!ok) goto fail;
        fwrite(dec.data, 1, dec.len, stdout);
        putchar('\n');
        rc = 0;
        goto out;
    }

    if (file) {
        FILE *f = strcmp(file, "-") ? fopen(file, "rb") : stdin;
        if (!f) {
            nx_fail(&err, "%s: cannot open", file);
            goto fail;
        }
        bool ok = read_all(f, &text, &err);
        if (f != stdin) fclose(f);
        if (!ok) {
            nx_fail_prefix(&err, "%s", file);
            goto fail;
        }
    } else {
        for (int i = first_arg; i < argc; i++)
            if ((i > first_arg && !nx_buf_append(&text, " ", 1, &err)) || !nx_buf_append(&text, argv[i], strlen(argv[i]), &err))
                goto fail;
    }
    if (chat) {
        nx_chat_msg msgs[2] = {{"system", system, NULL, NULL, 0}, {"user", text.data, NULL, NULL, 0}};
        nx_chat_opts o = {true, think, NULL, 0};
        nx_buf prompt = {0};
        if (!nx_chat_render(fmt, system ? msgs : msgs + 1, system ? 2 : 1, &o, &prompt, &err)) {
            nx_buf_free(&prompt);
            goto fail;
        }
        fprintf(stderr, "%s", prompt.data);
        nx_buf_free(&text);
        text = prompt;
        special = true;
    }
    if (!nx_tokenize(tok, text.data, text.len, !no_bos, special, &toks, &err)) goto fail;
    if (ids_only) {
        for (size_t i = 0; i < toks.n; i++) printf(i ? " %d" : "%d", toks.ids[i]);
        putchar('\n');
    } else {
        for (size_t i = 0; i < toks.n; i++) {
            nx_buf piece = {0};
            if (!nx_token_to_piece(tok, toks.ids[i], true, &piece, &err)) goto fail;
            printf("%d\t", toks.ids[i]);
            print_piece(piece.data, piece.len);
            putchar('\n');
            nx_buf_free(&piece);
        }
    }
    rc = 0;
    if (roundtrip) {
        /* specials were matched only with --special; render them back exactly then */
        size_t skip = toks.n && !no_bos && nx_tokenizer_add_bos(tok) && toks.ids[0] == nx_tokenizer_bos(tok);
        if (!nx_detokenize(tok, toks.ids + skip, toks.n - skip, true, &dec, &err)) goto fail;
        if (dec.len != text.len || memcmp(dec.data, text.data, text.len)) {
            size_t k = 0;
            while (k < dec.len && k < text.len && dec.data[k] == text.data[k]) k++;
            fprintf(stderr, "nextn tokenize: round trip differs at byte %zu (text %zu bytes, decoded %zu bytes)\n", k, text.len, dec.len);
            rc = 1;
        }
    }
    goto out;
fail:
    nx_cli_report("tokenize", err.msg, NULL);
    rc = 1;
out:
    nx_tokens_free(&toks);
    nx_buf_free(&text);
    nx_buf_free(&dec);
    nx_tokenizer_free(tok);
    return rc;
}
