/* cmd_mtp_extract.c - `nextn mtp-extract MODEL OUT`: write an mtp-only GGUF (
 * every key, token_embd, output_norm, output if untied, and the MTP block) from a model that
 * carries its MTP block.  Placed next to a model without MTP as "mtp-<model file name>", it is
 * picked up automatically by speculative decoding. */
#include <stdio.h>

#include "args.h"
#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"

#define CMD "mtp-extract"

int cmd_mtp_extract(int argc, char **argv) {
    const char *files[2];
    nx_arg_list pos = {files, 0, 2, false};
    int rc = nx_args_parse_pos(CMD,
                               "MODEL.gguf OUT.gguf\n\n"
                               "Writes an mtp-only GGUF (every key, token_embd, output_norm, output if untied, the\n"
                               "MTP block) from a model that carries its MTP block.",
                               NULL, 0, argc, argv, &pos);
    if (rc == NX_ARGS_HELP) return 0;
    if (rc != NX_ARGS_OK) return 2;
    if (pos.n != 2) return nx_usage_error(CMD, "need MODEL.gguf and OUT.gguf (see nextn %s --help)", CMD);
    nx_err err;
    if (!nx_mtp_extract(files[0], files[1], &err)) {
        nx_cli_report(CMD, err.msg, NULL);
        return 1;
    }
    printf("nextn mtp-extract: wrote %s\n", files[1]);
    return 0;
}
