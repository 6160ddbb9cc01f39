/* nextn_internal.h - the engine's internal interface for nextn's own tools.
 *
 * include/nextn.h is the library's public API.  This header is the one door through which the
 * code built on top of the engine - the converter, quantizer and mkmodel (src/convert/, target
 * nextn_tools), the HTTP server (src/server/, target nextn_server) and the CLI (cli/) - reaches
 * engine internals that the public API does not (yet) expose: GGUF reading/writing, the quant
 * type table, the model's hyper-parameters, the MTP head and the speculative driver for the
 * diagnostics commands.  Nothing outside src/ includes an engine header by any other path
 * (tests/test_layout.sh checks it); tests/, bench/ and fuzz/ are white-box and may include any
 * header of the component they test.  No stability promise: these declarations change with the
 * engine.
 */
#ifndef NEXTN_INTERNAL_H
#define NEXTN_INTERNAL_H

#include "nextn.h"

/* What each include is for (the users named; nothing else is reached through this header): */
#include "api/api_internal.h"       /* the nx_model under a nextn_model: server (the GGUF's chat template) */
#include "base/common.h"           /* nx_err, nx_fail, buffers: every tool */
#include "base/file_safe.h"        /* non-blocking, link-refusing opens: server slot files, chat /save and /load */
#include "base/threads.h"          /* nx_pool: mkmodel, quantize, spec-bench */
#include "base/utf8.h"             /* UTF-8 checks: server (JSON bodies, /detokenize pieces) */
#include "forward/forward.h"        /* nx_ctx, nx_forward: spec-bench (verify-cost batches) */
#include "forward/seq_ckpt.h"       /* checkpoints, nx_ctx_seq_rewind: spec-bench (verify-cost) */
#include "gguf/gguf.h"             /* GGUF read/write: info, gguf-sample, tokenize, draft-vocab, converters */
#include "model/model.h"           /* nx_model, nx_hparams: info, mkmodel, spec-bench */
#include "quant/quant.h"           /* type table, nx_cpu_isa: convert, quantize, mkmodel */
#include "sample/sample.h"         /* nx_sampler: spec-bench (draft-step cost) */
#include "sample/stop.h"           /* the stop-string automaton: server (stop strings) */
#include "spec/draft_vocab.h"      /* frequency files: draft-vocab, spec-bench */
#include "spec/mtp.h"              /* MTP head: mtp-extract, spec-bench */
#include "spec/spec.h"             /* the speculative driver: spec-bench */
#include "spec/spec_oracle.h"      /* oracle mode: spec-bench --spec-oracle */
#include "tokenizer/chat.h"        /* chat formats: server, tokenize */
#include "tokenizer/chat_json.h"   /* OpenAI messages -> chat: server */
#include "tokenizer/tokenizer.h"   /* nx_tokenizer: tokenize, draft-vocab, spec-bench */
#include "tokenizer/tokenizer_regex.h" /* pre-tokenizer patterns: the HF tokenizer converter */

#endif
