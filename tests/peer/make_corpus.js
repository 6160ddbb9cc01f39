// make_corpus.js OUTDIR - assembles the tokenizer peer-test corpus (>= 1 MiB), deterministically.
//
// Documents come from files that every Debian machine set up by scripts/deps.sh has (licenses
// from base-files, headers of the -dev packages and libc6-dev, Python modules of
// python3-minimal, the JS source of the peer package itself) plus generated multilingual text
// from a fixed-seed PRNG.  Each document is written as OUTDIR/doc_NNN.txt (UTF-8) and listed in
// OUTDIR/manifest.json.  Files that are absent are skipped, but every category must contribute
// and the total must reach 1 MiB, otherwise this script fails.
//
// U+FEFF / U+0085 are replaced by a space everywhere: the JS package's `\s` differs from
// HF/Rust's on exactly those two code points (see docs/tokenizer.md).
// The main documents (doc_NNN.txt) are also NFC-normalised, so decode(encode(x)) == x holds on
// them.  The unnormalised documents (nfd_NNN.txt, listed under "nfd" in the manifest) are text
// that is NOT in NFC - decomposed (NFD, as macOS file names and some editors write it), marks in
// non-canonical order, singletons, composition exclusions, compatibility ideographs, conjoining
// jamo, marks next to added tokens - for the tokenizer's NFC step (tokenizer.json "normalizer":
// NFC); each comes with nfd_NNN.nfc.txt, its NFC form, which is what decoding must give back.
"use strict";
const fs = require("fs");
const path = require("path");

const out = process.argv[2];
if (!out) { console.error("usage: make_corpus.js OUTDIR"); process.exit(2); }
fs.mkdirSync(out, { recursive: true });

const here = __dirname;
const docs = [];   // {name, category, text}

function addFile(category, file) {
  let st;
  try { st = fs.lstatSync(file); } catch (e) { return 0; }
  if (!st.isFile()) return 0;
  const text = fs.readFileSync(file, "utf8");
  docs.push({ name: file, category, text });
  return text.length;
}

function globDir(dir, re) {
  try { return fs.readdirSync(dir).filter((f) => re.test(f)).sort().map((f) => path.join(dir, f)); }
  catch (e) { return []; }
}

// ---- real files -----------------------------------------------------------------------
for (const f of globDir("/usr/share/common-licenses", /^[A-Za-z0-9.\-]+$/)) addFile("english", f);
for (const f of ["/usr/include/pcre2.h", "/usr/include/cjson/cJSON.h", "/usr/include/microhttpd.h",
                 "/usr/include/cmocka.h", "/usr/include/stdio.h", "/usr/include/stdlib.h",
                 "/usr/include/string.h"]) addFile("c", f);
const pyDirs = globDir("/usr/lib", /^python3\.\d+$/);
if (pyDirs.length) {
  const py = pyDirs[pyDirs.length - 1];
  for (const f of ["argparse.py", "enum.py", "subprocess.py", "datetime.py", "locale.py"]) addFile("python", path.join(py, f));
}
addFile("javascript", path.join(here, "node_modules/@lenml/tokenizers/src/tokenizers/tokenizers.js"));

// ---- generated text (xorshift32, fixed seed) ----------------------------------------------
let seed = 0x9e3779b9;
function rnd() { seed ^= seed << 13; seed >>>= 0; seed ^= seed >>> 17; seed ^= seed << 5; seed >>>= 0; return seed; }
function pick(a) { return a[rnd() % a.length]; }
function range(lo, hi) { return String.fromCodePoint(lo + (rnd() % (hi - lo + 1))); }
function words(n, makeWord, sep = " ") { const w = []; for (let i = 0; i < n; i++) w.push(makeWord()); return w.join(sep); }
function gen(name, n, makeLine) { const lines = []; for (let i = 0; i < n; i++) lines.push(makeLine(i)); docs.push({ name: "generated:" + name, category: "generated", text: lines.join("\n") + "\n" }); }

const cjkPunct = ["，", "。", "、", "「", "」", "！", "？", "：", "；", "（", "）"];
gen("chinese", 400, () => words(6, () => words(1 + rnd() % 5, () => range(0x4e00, 0x9fa5), "")) .replace(/ /g, () => pick(cjkPunct)) + pick(cjkPunct));
gen("japanese", 300, () => words(8, () => range(0x3041, 0x3096) + range(0x30a1, 0x30fa) + range(0x4e00, 0x9fa5), "") + "。");
gen("korean", 300, () => words(7, () => words(1 + rnd() % 4, () => range(0xac00, 0xd7a3), "")) + ".");
const cyr = ["привет", "мир", "Москва", "ёлка", "съезд", "ЩУКА", "Україна", "їжак", "Ґанок", "беларускі", "ў", "српски", "ђак"];
gen("cyrillic", 400, () => words(10, () => pick(cyr) + (rnd() % 3 ? "" : range(0x430, 0x44f) + range(0x430, 0x44f))) + pick([".", ",", "!", "?", " —", "…"]));
const arabic = ["السلام", "عليكم", "مرحبا", "بالعالم", "كتاب", "مُحَمَّد", "العَرَبِيَّة", "١٢٣", "٤٥٦٫٧", "؟", "،"];
gen("arabic", 300, () => words(9, () => pick(arabic)));
gen("hebrew", 150, () => words(8, () => words(1, () => range(0x5d0, 0x5ea) + range(0x5d0, 0x5ea) + (rnd() % 2 ? range(0x5b0, 0x5bc) : "") + range(0x5d0, 0x5ea), "")));
gen("devanagari", 200, () => words(8, () => range(0x915, 0x939) + range(0x93e, 0x94c) + range(0x915, 0x939) + pick(["", "्", "ं", "ँ"])) + "।");
gen("thai", 150, () => words(5, () => range(0xe01, 0xe2e) + range(0xe34, 0xe3a) + range(0xe01, 0xe2e) + range(0xe48, 0xe4b), ""));
const emoji = ["😀", "🎉", "👍🏽", "👨‍👩‍👧‍👦", "🏳️‍🌈", "🇩🇪", "🇯🇵", "❤️", "✨", "🤖", "🧪", "🙏🏿", "☕", "🦀", "1️⃣", "#️⃣"];
gen("emoji", 300, () => words(12, () => (rnd() % 3 ? pick(emoji) : pick(["ok", "yes", "launch", "🚀🚀", "x"]))));
gen("combining", 300, () => words(10, () => {
  let w = "";
  for (let i = 0, n = 1 + rnd() % 6; i < n; i++) {
    w += pick(["a", "e", "i", "o", "u", "n", "c", "q", "x", "Z", "ы", "α"]);
    for (let k = rnd() % 3; k > 0; k--) w += range(0x300, 0x36f);
  }
  return w;
}));
gen("whitespace", 120, (i) => "x" + " ".repeat(1 + rnd() % 40) + "y" + "\t".repeat(rnd() % 5) + "z" +
  pick(["\n", "\r\n", "\n\n\n", " \n ", "\u3000\u3000", "\u00a0", "\u2003 ", "\u2028"]) + " ".repeat(rnd() % 300) +
  (i % 10 === 0 ? "\n".repeat(50) + " ".repeat(2000) + "end" : "w"));
gen("numbers", 300, () => words(10, () => pick([
  String(rnd()), (rnd() % 100000) / 100 + "", "3.14159", "1,000,000", "0x" + rnd().toString(16), "1e-9", "２０２６年",
  "١٢٣٤", "Ⅻ", "½", "²³", "v1.2.3", "2026-11-30T12:00:00Z", "-42", "+7 (999) 123-45-67"])));
const specials = ["<|im_start|>", "<|im_end|>", "<|endoftext|>", "<think>", "</think>", "<tool_call>", "</tool_call>",
  "<|fim_prefix|>", "<|vision_start|>", "<|im_sta", "im_end|>", "<|", "|>", "<<|im_end|>>", "<think></think>", "</think\n>"];
gen("specials", 300, () => words(8, () => pick(specials) + (rnd() % 2 ? pick(["user", "assistant", "\n", "Hello", "", " "]) : "")));
gen("contractions", 200, () => words(10, () => pick(["don't", "I'M", "we'LL", "they'Re", "she's", "it'D", "'s", "''", "' s",
  "rock'n'roll", "O'Neil", "y'all", "can't've", "'ll'll", "’s", "`quoted`"])));
gen("mixed", 400, () => words(12, () => pick(["Hello", "мир", "世界", "🌍", "naïve", "café", "İstanbul", "straße", "ǅemal",
  "ﬁle", "x²", "a-b_c", "foo.bar()", "{\"k\": [1, 2]}", "<div>", "C++", "e.g.", "...", "!!!", "…", "—", "«»", "¿qué?"])));

// ---- unnormalised documents (NFC step) ----------------------------------------------------
const nfdDocs0 = [];
const strip = (t) => t.replace(/[\ufeff\u0085]/g, " ");
// NFD of the generated multilingual documents (Hangul -> conjoining jamo, accents -> marks)
for (const d of docs.filter((x) => x.category === "generated" && /korean|cyrillic|arabic|devanagari|hebrew|mixed|combining|numbers/.test(x.name)))
  nfdDocs0.push({ name: "nfd:" + d.name, text: strip(d.text).normalize("NFD") });
// the combining-marks document as generated (random marks in random order: neither NFC nor NFD)
for (const d of docs.filter((x) => x.name === "generated:combining")) nfdDocs0.push({ name: "raw:" + d.name, text: strip(d.text) });
// NFKD of the mixed document (compatibility characters decomposed; NFC does not recompose them)
for (const d of docs.filter((x) => x.name === "generated:mixed")) nfdDocs0.push({ name: "nfkd:" + d.name, text: strip(d.text).normalize("NFKD") });
// targeted cases, each in NFD, as written, and NFC, one per line
const cases = [
  "café résumé naïve Zürich Ångström São Paulo Ærøskøbing Dvořák", "Müller Café résumé.txt", "Tiếng Việt có dấu: Hà Nội, Huế, Đà Nẵng",
  "Ελληνικά: ἄνθρωπος, ᾠδή, Ἀθῆναι", "ΐ ΰ ᾅ ῷ", "한국어 텍스트: 안녕하세요, 세계", "日本語: がぎぐげご パピプペポ",
  "A\u0308\u0323 a\u0323\u0308 e\u0301\u0301 o\u031b\u0323 q\u0307\u0323", "\u212b \u2126 \u212a \u2000 \u0374 \u037e \u0387 \u0340\u0341",
  "\uf900\uf901 \ufa10 \u{2f800}", "\u0958\u0959 \u095a \u09dc \u0a33 \u0f43 \u2adc", "\u1112\u1161\u11ab \u1100\u1161 \u1100\u1161\u11a8\u11a8 \uac00\u11a8",
  "\u1e9b\u0323 \u0344 \u0f73 \u0f75 \u0f81", "\u0301start \u0308\u0308 x\u0300\u0315\u0300", "e<|im_end|>\u0301 <think>\u0308a</think>e\u0301",
  "<|im_start|>user\nCafe\u0301?<|im_end|>\n<|im_start|>assistant\n", "\u00e9\u0301 \u00c5\u030a \u1ea0\u0308",
  "Unicode\u0303 x\u0338= \u2260 \u226e a\u0338", "\u05e9\u05c1\u05b8\u05dc\u05d5\u05b9\u05dd \u0627\u064e\u0644\u0652",
  "\ud55c\uae00 \u1112\u1161\u11ab\u1100\u1173\u11af", "👍🏽 e\u0301👨‍👩‍👧 🇩🇪\u0301",
];
const lines = [];
for (const c of cases) for (const form of ["NFD", "as-is", "NFC"]) lines.push(form === "as-is" ? c : c.normalize(form));
nfdDocs0.push({ name: "targeted", text: lines.join("\n") + "\n" });
// only documents that NFC changes (NFD leaves some scripts as they are)
const nfdDocs = nfdDocs0.filter((d) => d.text.normalize("NFC") !== d.text);

// ---- normalise and write ------------------------------------------------------------------
let total = 0;
const byCategory = {};
const manifest = [];
docs.forEach((d, i) => {
  let t = d.text.normalize("NFC").replace(/[\ufeff\u0085]/g, " ");
  const file = `doc_${String(i).padStart(3, "0")}.txt`;
  fs.writeFileSync(path.join(out, file), t, "utf8");
  const bytes = Buffer.byteLength(t, "utf8");
  total += bytes;
  byCategory[d.category] = (byCategory[d.category] || 0) + bytes;
  manifest.push({ file, source: d.name, category: d.category, bytes });
});
for (const c of ["english", "c", "python", "javascript", "generated"]) {
  if (!byCategory[c]) { console.error(`make_corpus: no ${c} documents found - is the machine set up with scripts/deps.sh?`); process.exit(1); }
}
if (total < 1048576) { console.error(`make_corpus: corpus is only ${total} bytes (< 1 MiB)`); process.exit(1); }
const nfd = [];
let nfdBytes = 0, nfdChanged = 0;
nfdDocs.forEach((d, i) => {
  const file = `nfd_${String(i).padStart(3, "0")}.txt`;
  const nfc = d.text.normalize("NFC");
  fs.writeFileSync(path.join(out, file), d.text, "utf8");
  fs.writeFileSync(path.join(out, file.replace(/\.txt$/, ".nfc.txt")), nfc, "utf8");
  nfdBytes += Buffer.byteLength(d.text, "utf8");
  if (nfc !== d.text) nfdChanged++;
  nfd.push({ file, source: d.name, bytes: Buffer.byteLength(d.text, "utf8") });
});
if (nfd.length < 6 || nfdChanged !== nfd.length) { console.error(`make_corpus: ${nfd.length} unnormalised documents, ${nfdChanged} change under NFC (want >= 6, all)`); process.exit(1); }
fs.writeFileSync(path.join(out, "manifest.json"), JSON.stringify({ total_bytes: total, by_category: byCategory, docs: manifest, nfd }, null, 1));
console.log(`corpus: ${manifest.length} documents, ${total} bytes ` + JSON.stringify(byCategory) + `; ${nfd.length} unnormalised documents, ${nfdBytes} bytes`);
