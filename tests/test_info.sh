#!/usr/bin/env bash
# test_info.sh - `nextn info` on files written by `nextn gguf-sample` (contents known by
# construction, see cli/cmd_gguf_sample.c), on the llama.cpp-written fixture, and on broken files.
. "$(dirname "$0")/lib.sh"

"$NEXTN" gguf-sample "$tmp/s.gguf" || { echo "FAIL: gguf-sample"; exit 1; }
check "info exits 0" '"$NEXTN" info "$tmp/s.gguf" >"$tmp/out" 2>&1'
check "header line" 'has "format:    GGUF v3, alignment 32, data section at 0x"'
check "string value" 'has "general.architecture       string    \"nextn-sample\""'
check "escaped string" 'has "\"nextn sample file \\\"tiny\\\"\""'
check "integers" 'has "sample.u64                 uint64    18446744073709551615" && has "sample.i64                 int64     -9000000000" && has "sample.i8                  int8      -100"'
check "floats and bool" 'has "sample.scores              [float32] [4 float32: 0, -1.5, 2.25, -1e+09]" && has "sample.flag                bool      true"'
check "long string array abbreviated" 'has "[1000 strings: \"!\", \"\\\"\", \"tok2\", \"tok3\"" && grep "tokenizer.ggml.tokens" "$tmp/out" | grep -q ", \.\.\. ]$"'
check "tensor table" 'has "0  token_embd.weight    f32      [64, 1000]" && grep -E "blk.1.ffn_up.weight +q4_K +\[256, 8\] +1152 " "$tmp/out" >/dev/null'
# 64*1000 + 64 + 64*64 + 256*8 + 16*2*2 = 70272 parameters;
# bytes 256000 + 256 + (4096/32)*34 + (2048/256)*144 + 64*2 = 261888
check "totals" 'has "totals: 5 tensors, 70272 parameters, 261888 bytes"'
check "bytes per type" 'grep -E "^  q8_0 +1 tensor +4352 bytes" "$tmp/out" >/dev/null && grep -E "^  f32 +2 tensors +256256 bytes" "$tmp/out" >/dev/null'
# bits per weight: 261888 * 8 / 70272 = 29.81; q8_0 4352 * 8 / 4096 = 8.50 (5.8 % of the parameters),
# q4_K 1152 * 8 / 2048 = 4.50 (2.9 %)
check "bits per weight, total and per type" 'has "261888 bytes (255.8 KiB), 29.81 bits per weight" &&
      grep -E "^  q8_0 +1 tensor +4352 bytes \(4\.2 KiB\), +5\.8 % of parameters, +8\.50 bpw$" "$tmp/out" >/dev/null &&
      grep -E "^  q4_K +1 tensor +1152 bytes \(1\.1 KiB\), +2\.9 % of parameters, +4\.50 bpw$" "$tmp/out" >/dev/null'
check "--no-tensors keeps totals, drops table" '"$NEXTN" info --no-tensors "$tmp/s.gguf" >"$tmp/out" && ! grep -q "token_embd.weight" "$tmp/out" && has "totals: 5 tensors"'
check "--full prints every element" '"$NEXTN" info --full "$tmp/s.gguf" >"$tmp/out" && has "\"tok999\"]"'
check "v2 and custom alignment" '"$NEXTN" gguf-sample --version 2 --alignment 64 "$tmp/v2.gguf" && "$NEXTN" info "$tmp/v2.gguf" >"$tmp/out" && has "GGUF v2, alignment 64" && has "general.alignment          uint32    64"'
check "--json integers are exact" '"$NEXTN" info --json "$tmp/s.gguf" >"$tmp/out" && has "\"key\":\"sample.u64\",\"type\":\"uint64\",\"value\":18446744073709551615}" && has "\"value\":-9000000000}"'
# the JSON must parse (node is a build dependency, scripts/deps.sh) and carry the same facts
check "--json parses and matches" 'node -e "
  const j = JSON.parse(require(\"fs\").readFileSync(process.argv[1], \"utf8\"));
  const kv = Object.fromEntries(j.metadata.map(m => [m.key, m]));
  const ok = j.version === 3 && j.alignment === 32 && j.metadata.length === 18 &&
    kv[\"general.name\"].value === \"nextn sample file \\\"tiny\\\"\" &&
    kv[\"tokenizer.ggml.tokens\"].count === 1000 && kv[\"tokenizer.ggml.tokens\"].value[999] === \"tok999\" &&
    kv[\"sample.scores\"].value[3] === -1e9 && kv[\"sample.flags\"].value[1] === false &&
    j.tensors.length === 5 && j.tensors[3].type === \"q4_K\" && j.tensors[3].shape.join() === \"256,8\" &&
    j.totals.parameters === 70272 && j.totals.bytes === 261888 && j.totals.by_type.q8_0.bytes === 4352 &&
    j.totals.by_type.q8_0.parameters === 4096 && j.totals.by_type.q8_0.bits_per_weight === 8.5 &&
    Math.abs(j.totals.bits_per_weight - 261888 * 8 / 70272) < 1e-9;
  process.exit(ok ? 0 : 1);" "$tmp/out"'

# a file written by llama.cpp's C writer: values are the constants of its examples/gguf program
fx2="${NEXTN_SRC:-.}/tests/fixtures/gguf/llama-gguf-example.gguf"
check "llama.cpp C-writer fixture" '"$NEXTN" info "$fx2" >"$tmp/out" && has "some.parameter.uint64   uint64    1311768467463790320" && has "some.parameter.int16    int16     -4661" && has "some.parameter.arr.str  [string]  [3 strings: \"hello\", \"world\", \"!\"]" && grep -E "tensor_9 +f32 +\[2, 8, 7, 4\] +1792  0x2e00$" "$tmp/out" >/dev/null && has "totals: 10 tensors, 3051 parameters, 12204 bytes"'
check "nested arrays shown raw" '"$NEXTN" info "${NEXTN_SRC:-.}/fuzz/corpus/gguf/nested.gguf" >"$tmp/out" && has "n.ints  [array]   [2 arrays, 31 bytes]"'

# broken files: exit status 1, one message naming the file and the problem
bad() { # name, file, expected message fragment
  "$NEXTN" info "$2" >"$tmp/out" 2>"$tmp/err"; local rc=$?
  if [ $rc -ne 1 ]; then echo "  exit status $rc"; return 1; fi
  grep -qF -- "$3" "$tmp/err" || { echo "  stderr: $(cat "$tmp/err")"; return 1; }
}
size=$(stat -c %s "$tmp/s.gguf")
cp "$tmp/s.gguf" "$tmp/trunc.gguf"; truncate -s $((size - 200)) "$tmp/trunc.gguf"
# the last two tensors lose their ends; the first in file order is reported, with its absolute range
check "truncated data -> error" 'bad trunc "$tmp/trunc.gguf" "trunc.gguf: tensor '"'"'blk.1.ffn_up.weight'"'"' data [0x443a0, +1152) runs past end of file"'
check "... naming the file size" 'grep -qF "runs past end of file (size $((size - 200)))" "$tmp/err"'
cp "$tmp/s.gguf" "$tmp/hdr.gguf"; truncate -s 100 "$tmp/hdr.gguf"
check "header counts beyond the file -> error" 'bad hdr "$tmp/hdr.gguf" "hdr.gguf: header claims 18 metadata entries and 5 tensors, which cannot fit in a file of 100 bytes"'
cp "$tmp/s.gguf" "$tmp/hdr.gguf"; truncate -s 1000 "$tmp/hdr.gguf"
check "truncated in the token list -> error" 'bad hdr "$tmp/hdr.gguf" "hdr.gguf: kv 16 '"'"'tokenizer.ggml.tokens'"'"': string array count 1000 cannot fit"'
# corrupt the ggml type of output_norm.weight: name at N, then 18 name bytes, n_dims (4), ne[0] (8)
cp "$tmp/s.gguf" "$tmp/type.gguf"
at=$(grep -obUaF "output_norm.weight" "$tmp/type.gguf" | head -1 | cut -d: -f1)
printf '\x63' | dd of="$tmp/type.gguf" bs=1 seek=$((at + 18 + 4 + 8)) conv=notrunc status=none
check "unknown tensor type -> error" 'bad type "$tmp/type.gguf" "tensor '"'"'output_norm.weight'"'"': unknown ggml type 99"'
check "not a GGUF file" 'bad script "$0" "not a GGUF file"'
check "missing file" 'bad missing "$tmp/nope.gguf" "nope.gguf: cannot open"'
: >"$tmp/empty.gguf"
check "empty file" 'bad empty "$tmp/empty.gguf" "empty file (0 bytes)"'
check "no file -> usage, exit 2" '"$NEXTN" info >/dev/null 2>&1; [ $? -eq 2 ]'
check "unknown option -> exit 2" '"$NEXTN" info --frob "$tmp/s.gguf" >/dev/null 2>&1; [ $? -eq 2 ]'

exit $fail
