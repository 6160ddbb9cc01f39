/* commands.h - one function per `nextn <command>`; each lives in cli/cmd_<name>.c.
 * A command returns the process exit status (0 ok, 1 runtime error, 2 usage error) and
 * prints its own errors as "nextn <command>: <message>". */
#ifndef NX_CLI_COMMANDS_H
#define NX_CLI_COMMANDS_H

typedef int (*nx_command_fn)(int argc, char **argv); /* argv[0] is the command name */

typedef struct nx_command {
    const char *name;
    nx_command_fn fn;
    const char *summary;
} nx_command;

int cmd_version(int argc, char **argv);
int cmd_info(int argc, char **argv);
int cmd_gguf_sample(int argc, char **argv);
int cmd_mkmodel(int argc, char **argv);
int cmd_tokenize(int argc, char **argv);
int cmd_vocab_from_hf(int argc, char **argv);
int cmd_run(int argc, char **argv);
int cmd_chat(int argc, char **argv);
int cmd_serve(int argc, char **argv);
int cmd_bench(int argc, char **argv);
int cmd_eval(int argc, char **argv);
int cmd_perplexity(int argc, char **argv);
int cmd_convert(int argc, char **argv);
int cmd_spec_bench(int argc, char **argv);
int cmd_mtp_extract(int argc, char **argv);
int cmd_quantize(int argc, char **argv);
int cmd_draft_vocab(int argc, char **argv);

#endif
