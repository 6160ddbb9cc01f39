// chat_render.js CONV.json MODE [N] - the test's own rendering of a conversation with the
// Qwen3.5 chat template's rules (tests/fixtures/chat/qwen3.5.jinja, written out by hand here so
// the chat test does not check nextn's renderer against itself), for plain text messages:
//   <|im_start|>{role}\n{content.strip()}<|im_end|>\n       system and user turns
//   <|im_start|>assistant\n{content.strip()}<|im_end|>\n    assistant turns before the last user
//                                                           message (their reasoning is dropped)
// CONV.json is an OpenAI messages array (as `nextn chat` /save writes it).  Only the first N
// messages are used (default all).  MODE:
//   think     + "<|im_start|>assistant\n<think>\n"                 (generation prompt, thinking on)
//   no-think  + "<|im_start|>assistant\n<think>\n\n</think>\n\n"   (thinking off)
//   header    + "<|im_start|>assistant\n"                          (where the next turn branches)
//   none      nothing (e.g. the system prompt alone)
// Python's str.strip() removes Unicode whitespace; the conversations of the test are ASCII.
"use strict";
const fs = require("fs");
const [file, mode, nArg] = process.argv.slice(2);
const gen = { think: "<|im_start|>assistant\n<think>\n", "no-think": "<|im_start|>assistant\n<think>\n\n</think>\n\n",
  header: "<|im_start|>assistant\n", none: "" };
if (!file || !(mode in gen)) { console.error("usage: chat_render.js CONV.json think|no-think|header|none [N]"); process.exit(2); }
let msgs = JSON.parse(fs.readFileSync(file, "utf8"));
if (nArg !== undefined) msgs = msgs.slice(0, Number(nArg));
let out = "";
for (const m of msgs) {
  if (!["system", "user", "assistant"].includes(m.role)) { console.error(`chat_render.js: role ${m.role}`); process.exit(1); }
  out += `<|im_start|>${m.role}\n${(m.content || "").trim()}<|im_end|>\n`;
}
process.stdout.write(out + gen[mode]);
