/* cmd_mtp_extract.c - `nextn mtp-extract MODEL OUT`: write an mtp-only GGUF (
 * every key, token_embd, output_norm, output if untied, and the MTP block) from a model that
 * carries its MTP block.  Placed next to a model without MTP as "mtp-<model file name>", it is
 * picked up automatically by speculative decoding. */
#include <stdio.h>
#include <string.h>

#include "cli_util.h"
#include "commands.h"
#include "nextn_internal.h"

int cmd_mtp_extract(int argc, char **argv) {
    if (argc == 2 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
        printf("usage: nextn mtp-extract MODEL.gguf OUT.gguf\n");
        return 0;
    }
    if (argc != 3) {
        fprintf(stderr, "usage: nextn mtp-extract MODEL.gguf OUT.gguf\n");
        return 2;
    }
    nx_err err;
    if (!nx_mtp_extract(argv[1], argv[2], &err)) {
        nx_cli_report("mtp-extract", err.msg, NULL);
        return 1;
    }
    printf("nextn mtp-extract: wrote %s\n", argv[2]);
    return 0;
}
