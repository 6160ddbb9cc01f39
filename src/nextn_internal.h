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

#include "api/api_internal.h"
#include "base/common.h"
#include "base/threads.h"
#include "forward/forward.h"
#include "forward/seq_ckpt.h"
#include "gguf/gguf.h"
#include "model/model.h"
#include "quant/quant.h"
#include "sample/sample.h"
#include "spec/draft_vocab.h"
#include "spec/mtp.h"
#include "spec/spec.h"
#include "spec/spec_oracle.h"
#include "tokenizer/chat.h"
#include "tokenizer/chat_json.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_regex.h"

#endif
