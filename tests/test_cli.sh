#!/usr/bin/env bash
# test_cli.sh - the nextn binary dispatches commands and rejects unknown ones; the option parser
# (cli/args.c) as the file-argument commands use it: files among the options, --name=VALUE, `--`,
# repeatable options, exclusive flags, too many / too few files.
. "$(dirname "$0")/lib.sh"
check "version prints"        '"$NEXTN" version | grep -q "^nextn "'
check "help exits 0"          '"$NEXTN" --help >/dev/null'
# --help lists the quantize types from the quantizer's own table: every listed name is accepted
# (a missing input is exit 1; an unknown type would be the usage error, exit 2)
check "--help lists the quantize types, each one accepted by quantize" \
      'types=$("$NEXTN" --help | sed -n "s/^quantize types: //p" | tr -d ,) && [ $(echo $types | wc -w) -ge 20 ] &&
       echo " $types " | grep -q " iq4_xs " && echo " $types " | grep -q " q3_k_m " &&
       ( for t in $types; do "$NEXTN" quantize "$tmp/none.gguf" "$tmp/none-q.gguf" "$t" >/dev/null 2>&1; [ $? -eq 1 ] || { echo "  $t refused"; exit 1; }; done )'
# --version: version, the commit built (git describe of the source tree, "unknown" outside git:
# a commit of this repository, not necessarily HEAD if something was committed since the build),
# the build type, the ISA level the kernels use (NX_ISA lowers it)
check "--version: version, commit, build type, ISA level" \
      '"$NEXTN" --version >"$tmp/v" && [ "$(sed -n 1p "$tmp/v")" = "$("$NEXTN" version | head -1)" ] && grep -q "^nextn [0-9]" "$tmp/v" &&
       c=$(sed -n "s/^commit: //p" "$tmp/v") && { [ "$c" = unknown ] || git -C "$NEXTN_SRC" cat-file -e "${c%-dirty}^{commit}"; } &&
       grep -Eq "^build:  (Release|Debug|RelWithDebInfo|MinSizeRel)" "$tmp/v" && grep -Eq "^ISA:    (scalar|avx2|avx512)$" "$tmp/v" &&
       NX_ISA=scalar "$NEXTN" --version | grep -q "^ISA:    scalar (NX_ISA=scalar)$"'
check "no args exits 2"       '"$NEXTN" >/dev/null 2>&1; [ $? -eq 2 ]'
check "unknown command exits 2 and names it" \
      'out=$("$NEXTN" frobnicate 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "frobnicate"'

"$NEXTN" gguf-sample "$tmp/s.gguf" >/dev/null || { echo "FAIL: gguf-sample"; exit 1; }
check "gguf-sample: --name=VALUE and the file before the options" \
      '"$NEXTN" gguf-sample "$tmp/v2.gguf" --version=2 --alignment 64 && "$NEXTN" info "$tmp/v2.gguf" | grep -q "GGUF v2, alignment 64"'
check "info: the file before the options" '"$NEXTN" info "$tmp/s.gguf" --json | grep -q "\"tensors\""'
check "info: two files -> exit 2 naming both" \
      'out=$("$NEXTN" info "$tmp/s.gguf" "$tmp/v2.gguf" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "more than one file" && echo "$out" | grep -q "v2.gguf"'
check "info: a flag given a value -> exit 2" '"$NEXTN" info --json=1 "$tmp/s.gguf" >/dev/null 2>&1; [ $? -eq 2 ]'
check "info --help lists the options, exit 0" '"$NEXTN" info --help | grep -q -- "--no-tensors"'
check "mtp-extract: one file -> exit 2" '"$NEXTN" mtp-extract "$tmp/s.gguf" >/dev/null 2>&1; [ $? -eq 2 ]'
check "mkmodel: --tie with --untie -> exit 2" \
      'out=$("$NEXTN" mkmodel --preset tiny --tie --untie -o "$tmp/x.gguf" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "exclude"'
check "mkmodel: --layers out of range -> exit 2 naming the range" \
      'out=$("$NEXTN" mkmodel --preset tiny --layers 0 -o "$tmp/x.gguf" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "outside \[1, 1024\]"'
"$NEXTN" mkmodel --preset tiny --layers 3 --vocab 300 -o "$tmp/t.gguf" >/dev/null 2>&1 || { echo "FAIL: mkmodel"; exit 1; }
check "quantize: --tensor-type repeatable, first match wins" \
      '"$NEXTN" quantize -q "$tmp/t.gguf" "$tmp/q.gguf" q8_0 --tensor-type "ffn_up=q4_0" --tensor-type "ffn_.*=q5_0" &&
       "$NEXTN" info "$tmp/q.gguf" | grep "blk.0.ffn_up.weight" | grep -q q4_0 && "$NEXTN" info "$tmp/q.gguf" | grep "blk.0.ffn_down.weight" | grep -q q5_0'
check "tokenize: the first word ends the options" \
      'a=$("$NEXTN" tokenize -m "$tmp/t.gguf" --ids hello --ids) && b=$("$NEXTN" tokenize -m "$tmp/t.gguf" --ids -- "hello --ids") && [ "$a" = "$b" ] && [ -n "$a" ]'
check "tokenize: -- lets the text start with -; without it -x is an unknown option" \
      '"$NEXTN" tokenize -m "$tmp/t.gguf" --ids -- -x | grep -q "^[0-9]" && { "$NEXTN" tokenize -m "$tmp/t.gguf" --ids -x >/dev/null 2>&1; [ $? -eq 2 ]; }'
# token-id lists: one parser (cli/args.c nx_parse_token_list) for run/eval/perplexity --tokens and
# tokenize --decode: comma or blank separated, or a JSON array as the server takes
ids=$("$NEXTN" tokenize -m "$demo_model" --ids "In the beginning God created")
csv=$(echo $ids | tr ' ' ,)
check "tokenize --decode: the text back from blank, comma and JSON-array lists" \
      '[ "$("$NEXTN" tokenize -m "$demo_model" --decode $ids)" = "In the beginning God created" ] &&
       [ "$("$NEXTN" tokenize -m "$demo_model" --decode "$csv")" = "In the beginning God created" ] &&
       [ "$("$NEXTN" tokenize -m "$demo_model" --decode "[$(echo $ids | sed "s/ /, /g")]")" = "In the beginning God created" ]'
check "run --tokens: the same forms give the same output" \
      'a=$("$NEXTN" run -m "$demo_model" --tokens "$csv" -n 4 --temp 0 --print-ids 2>/dev/null) && [ -n "$a" ] &&
       [ "$("$NEXTN" run -m "$demo_model" --tokens "$ids" -n 4 --temp 0 --print-ids 2>/dev/null)" = "$a" ] &&
       [ "$("$NEXTN" run -m "$demo_model" --tokens " [$csv] " -n 4 --temp 0 --print-ids 2>/dev/null)" = "$a" ]'
check "a bad list is a usage error naming the item or the bracket" \
      'out=$("$NEXTN" tokenize -m "$demo_model" --decode 5 x 7 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "item 2 (.x.) is not a token id" &&
       out=$("$NEXTN" run -m "$demo_model" --tokens "[5, 7" 2>&1); [ $? -eq 2 ] && echo "$out" | grep -q "must end with .\]."'
exit $fail
