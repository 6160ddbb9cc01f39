#!/usr/bin/env bash
# report.sh - the tables of docs/BENCHMARKS.md, measured in one sitting: nextn next to the peers
# (llama.cpp, ik_llama.cpp) where their binaries are given, "not measured" where not.
#
#   bench/report.sh [--build DIR] [--llama DIR] [--ik DIR] [--ik-args "ARGS"] [--models DIR]
#                   [-t THREADS] [--areas "decode mtp moe serve quantize load"] [--quick] [--dry]
#                   [--write FILE] [--out DIR]
#
# --build DIR   the nextn build folder (nextn, bench_dot; default $NEXTN_BUILD or build)
# --llama DIR   bin folder of a built llama.cpp (llama-bench, llama-server, llama-quantize; default
#               $LLAMA_BIN); --ik DIR the same for ik_llama.cpp (llama-bench; default $IK_BIN), run
#               with --ik-args (e.g. "-rtr 1", docs: /work/shared/docs/peers.md "Fair flags").
#               This script never builds a peer; a peer binary that is missing is "not measured".
# --models DIR  where the synthetic bench files are made once and kept (default
#               $NEXTN_BENCH_MODELS or BUILD/bench-models): `nextn mkmodel` presets 0.8b, 2b and
#               35b-a3b cut to 10 layers, 4096-token vocabularies, quantised with `nextn quantize`
#               from f16 (the MoE file from q4_k with --allow-requantize), as in every recorded
#               sitting; the demo model (models/nextn-demo.gguf) for MTP and serving.
# --areas       which tables, in this order (default all six):
#   decode    `nextn bench -p 512 -n 128 -r 3` and `llama-bench` with the same flags, per file
#   mtp       `nextn spec-bench` on the demo model, 16 held-out prompts x 128 tokens, draft-max 3
#             (adaptive and fixed), next to llama-server --spec-type draft-mtp
#             (bench/llama_server_mtp.sh) when --llama is given
#   moe       the decode table's commands on the 35B-A3B-shape file
#   serve     `nextn serve -np 8` plain and --spec mtp (and llama-server plain and draft-mtp), 1 / 4 /
#             8 concurrent clients of bench/serve_load.mjs, aggregate generated tokens/s
#   quantize  wall time of `nextn quantize F16 -> q4_k_m` (and llama-quantize) per file
#   load      wall time of a process that loads the file and processes one token, page cache
#             warm and dropped (`dd iflag=nocache`), nextn bench against llama-bench
# --quick       the tiny presets, one repetition, a few tokens: a smoke run of every command
#               (seconds), not a measurement to quote
# --dry         print the commands each table would run; no model is made, nothing is measured
# --write FILE  also put the tables into FILE between the lines "<!-- report.sh begin -->" and
#               "<!-- report.sh end -->" (docs/BENCHMARKS.md has them)
# Every table is headed by its sitting: date, nextn commit, CPU model, cores, ISA, threads, load
# and bench_dot's streaming read on THREADS threads measured just before it (the % columns use
# it).  Run nothing else meanwhile: this VM's read bandwidth changes within minutes and spinning
# OpenMP peers collapse under load (docs/BENCHMARKS.md "How to read these figures").
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
root=$(cd "$(dirname "$0")/.." && pwd)
build=${NEXTN_BUILD:-$root/build}; llama=${LLAMA_BIN:-}; ik=${IK_BIN:-}; ik_args=""; models=${NEXTN_BENCH_MODELS:-}
threads=2; areas="decode mtp moe serve quantize load"; quick=0; dry=0; write=""; out=""; port=18740
while [ $# -gt 0 ]; do
    case $1 in
        --build) build=$2; shift 2 ;;
        --llama) llama=$2; shift 2 ;;
        --ik) ik=$2; shift 2 ;;
        --ik-args) ik_args=$2; shift 2 ;;
        --models) models=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --areas) areas=$2; shift 2 ;;
        --quick) quick=1; shift ;;
        --dry) dry=1; shift ;;
        --write) write=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "report.sh: unknown option '$1' (--help lists them)" >&2; exit 2 ;;
    esac
done
die() { echo "report.sh: $*" >&2; exit 2; }
case $threads in ''|*[!0-9]*|0) die "-t: '$threads' is not a positive thread count" ;; esac
for a in $areas; do
    case $a in decode|mtp|moe|serve|quantize|load) ;; *) die "--areas: unknown area '$a' (decode mtp moe serve quantize load)" ;; esac
done
nextn="$build/nextn"; bench_dot="$build/bench_dot"
[ $dry = 1 ] || [ -x "$nextn" ] || die "$nextn not found (build nextn first, or give --build DIR)"
[ $dry = 1 ] || [ -x "$bench_dot" ] || die "$bench_dot not found (it is built with nextn)"
[ -z "$llama" ] || [ -d "$llama" ] || die "--llama: $llama is not a folder"
[ -z "$ik" ] || [ -d "$ik" ] || die "--ik: $ik is not a folder"
if [ -n "$write" ]; then
    [ -f "$write" ] || die "--write: $write: no such file"
    grep -qx '<!-- report.sh begin -->' "$write" && grep -qx '<!-- report.sh end -->' "$write" ||
        die "--write: $write has no '<!-- report.sh begin -->' / '<!-- report.sh end -->' lines to write between"
fi
[ -n "$models" ] || models="$build/bench-models"
[ -n "$out" ] || out=$(mktemp -d "${TMPDIR:-/tmp}/nextn-report.XXXXXX")
mkdir -p "$out"
[ $dry = 1 ] || mkdir -p "$models"
demo="$root/models/nextn-demo.gguf"
prompts="$root/tests/fixtures/demo-model/prompts.txt"

# sizes of one sitting
if [ $quick = 1 ]; then
    P=32; N=16; R=1; dot_mb=16; dot_runs=1; mtp_prompts=1; mtp_n=32; clients="1 2"; requests=1; maxtok=8
    dense_files="tiny-f32 tiny-q4_k_m"; moe_files="tinymoe-f32"; quant_src="tiny-f16"
else
    P=512; N=128; R=3; dot_mb=256; dot_runs=3; mtp_prompts=16; mtp_n=128; clients="1 4 8"; requests=4; maxtok=64
    dense_files="08b-q8_0 08b-q4_k_m 08b-q6_k 2b-q8_0 2b-q4_k_m"; moe_files="moe35-l10-q4_k_m"; quant_src="08b-f16 2b-f16"
fi

# run CMD...: the command on stdout's log (--dry: only that)
log() { printf '    %s\n' "$*" >>"$out/commands.txt"; }
run() { log "$*"; [ $dry = 1 ] && return 0; "$@"; }
now() { date +%s.%N; }
nm() { [ -x "$1" ] && echo yes || echo no; }

# ---- bench files, made once into --models ----------------------------------------------------
# make NAME: prints the path of models/NAME.gguf, making it first if needed
make_file() {
    local name=$1 f="$models/$1.gguf" preset type
    # made already (or, with --dry, listed already)
    if [ -f "$f" ] || { [ $dry = 1 ] && grep -qF -- " $f" "$out/commands.txt"; }; then echo "$f"; return 0; fi
    case $name in
        tiny-f32) run "$nextn" mkmodel --preset tiny --type f32 --seed 3 -o "$f" >&2 ;;
        tiny-f16) run "$nextn" mkmodel --preset tiny --type f16 --seed 3 -o "$f" >&2 ;;
        tinymoe-f32) run "$nextn" mkmodel --preset tiny-moe --type f32 --seed 3 -o "$f" >&2 ;;
        08b-f16|2b-f16) preset=${name%-f16}; [ "$preset" = 08b ] && preset=0.8b
            run "$nextn" mkmodel --preset "$preset" --type f16 --seed 1 -o "$f" >&2 ;;
        08b-q8_0|2b-q8_0) preset=${name%-q8_0}; [ "$preset" = 08b ] && preset=0.8b
            run "$nextn" mkmodel --preset "$preset" --type q8_0 --seed 1 -o "$f" >&2 ;;
        moe35-l10-q4_k) run "$nextn" mkmodel --preset 35b-a3b --layers 10 --type q4_k --seed 1 -o "$f" >&2 ;;
        moe35-l10-q4_k_m) run "$nextn" quantize --allow-requantize "$(make_file moe35-l10-q4_k)" "$f" q4_k_m -q >&2 ;;
        tiny-*) type=${name#tiny-}; run "$nextn" quantize "$(make_file tiny-f16)" "$f" "$type" -q >&2 ;;
        *-*) type=${name#*-}; run "$nextn" quantize "$(make_file "${name%%-*}-f16")" "$f" "$type" -q >&2 ;;
    esac
    echo "$f"
}

# ---- the sitting ---------------------------------------------------------------------------
cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
flags=$(sed -n 's/^flags[[:space:]]*: //p' /proc/cpuinfo | head -n 1)
isa=scalar
case " $flags " in *" avx2 "*) isa=AVX2 ;; esac
case " $flags " in *" avx512f "*) isa=AVX-512 ;; esac
case " $flags " in *" avx512_vnni "*) isa="$isa VNNI" ;; esac
commit=$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')
git -C "$root" diff --quiet HEAD 2>/dev/null || commit="$commit+changes"
peer_ver() { # peer_ver DIR: the build's commit, from llama-bench's "version: 9749 (d32676d77)"
    [ -n "$1" ] && [ -x "$1/llama-bench" ] || { echo "not given"; return; }
    "$1/llama-bench" --version 2>&1 | sed -n 's/^version: *[0-9]* *(\(.*\)).*/\1/p' | head -n 1 | grep . || echo "?"
}

# read_bw: bench_dot's streaming read on THREADS threads, GB/s (wall)
read_bw() {
    local o
    log "$bench_dot --mb $dot_mb --runs $dot_runs --types q8_0 --threads $threads --rows 1 --hugepages"
    [ $dry = 1 ] && { echo "-"; return 0; }
    o=$("$bench_dot" --mb "$dot_mb" --runs "$dot_runs" --types q8_0 --threads "$threads" --rows 1 --hugepages 2>&1) ||
        { echo "report.sh: bench_dot failed: $o" >&2; exit 1; }
    echo "$o" | sed -n "s/^streaming read at start: .*; $threads threads\{0,1\} \([0-9.]*\) GB\/s wall.*/\1/p" | head -n 1 | grep . ||
        echo "$o" | sed -n 's/^streaming read at start: 1 thread \([0-9.]*\) GB\/s.*/\1/p' | head -n 1
}

# sitting TITLE: the heading line of a table, with the read bandwidth measured now
sitting() {
    bw=$(read_bw)
    printf '\n### %s\n\n' "$1"
    printf 'Sitting: %s, nextn %s, %s (%s cores, %s), `-t %s`, load %s, streaming read %s GB/s on %s threads (bench_dot).' \
        "$(date -u '+%Y-%m-%d %H:%M UTC')" "$commit" "${cpu:-?}" "$(nproc)" "$isa" "$threads" \
        "$(cut -d' ' -f1 /proc/loadavg)" "$bw" "$threads"
    [ $quick = 1 ] && printf ' **--quick: a smoke run, not a measurement.**'
    printf '\n'
}

# fmt X: a rate with one decimal (anything not a number is kept as it is); ratio A B: A / B as
# "1.23x" ("-" unless both are numbers); pct A B: A / B in per cent
isnum() { [[ $1 =~ ^[0-9]+(\.[0-9]*)?$ ]]; }
fmt() { if isnum "$1"; then awk -v x="$1" 'BEGIN { printf "%.1f", x }'; else echo "${1:--}"; fi; }
ratio() { if isnum "$1" && isnum "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; else echo "-"; fi; }
pct() { if isnum "$1" && isnum "$2"; then awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.0f %%", 100 * a / b; else print "-" }'; else echo "-"; fi; }

# nx_bench FILE: sets nx_pp nx_tg nx_gbs nx_mib from `nextn bench`
nx_bench() {
    nx_pp=-; nx_tg=-; nx_gbs=-; nx_mib=-
    local o
    log "$nextn bench -m $1 -p $P -n $N -r $R -t $threads"
    [ $dry = 1 ] && return 0
    o=$("$nextn" bench -m "$1" -p "$P" -n "$N" -r "$R" -t "$threads" 2>&1) || { echo "report.sh: nextn bench -m $1 failed: $o" >&2; exit 1; }
    echo "$o" >>"$out/nextn-bench.txt"
    nx_pp=$(echo "$o" | awk -v t="pp$P" '$1 == t { print $4 }')
    nx_tg=$(echo "$o" | awk -v t="tg$N" '$1 == t { print $4 }')
    nx_gbs=$(echo "$o" | sed -n 's/^tg reads \([0-9.]*\) GB\/s.*/\1/p')
    nx_mib=$(echo "$o" | sed -n 's/^model: .*(\([0-9.]*\) MiB weights.*/\1/p')
    : "${nx_pp:=-}" "${nx_tg:=-}" "${nx_gbs:=-}" "${nx_mib:=-}"
}

# peer_bench DIR FILE EXTRA: sets pb_pp pb_tg from `llama-bench -o csv` ("-" if not measured)
peer_bench() {
    pb_pp=-; pb_tg=-
    [ -n "$1" ] && [ -x "$1/llama-bench" ] || return 0
    local o
    # shellcheck disable=SC2086
    log "$1/llama-bench -m $2 -p $P -n $N -r $R -t $threads $3 -o csv"
    [ $dry = 1 ] && return 0
    # shellcheck disable=SC2086
    o=$("$1/llama-bench" -m "$2" -p "$P" -n "$N" -r "$R" -t "$threads" $3 -o csv 2>"$out/llama-bench.err") ||
        { echo "report.sh: $1/llama-bench -m $2 failed (see $out/llama-bench.err)" >&2; return 0; }
    echo "$o" >>"$out/llama-bench.csv"
    read -r pb_pp pb_tg < <(echo "$o" | python3 -c '
import csv, sys
p, n = int(sys.argv[1]), int(sys.argv[2])
pp = tg = "-"
for r in csv.DictReader(sys.stdin):
    if int(r["n_prompt"]) == p and int(r["n_gen"]) == 0: pp = r["avg_ts"]
    if int(r["n_prompt"]) == 0 and int(r["n_gen"]) == n: tg = r["avg_ts"]
print(pp, tg)' "$P" "$N") || true   # a CSV without these columns: "-", with python's message on stderr
    : "${pb_pp:=-}" "${pb_tg:=-}"
}

# ---- tables --------------------------------------------------------------------------------
not_given() { [ -n "$1" ] && [ -x "$1/$2" ] && echo "" || echo " (not measured: no $2 given)"; }

table_decode() { # table_decode TITLE FILES...
    local title=$1; shift
    sitting "$title"
    printf '\nnextn `bench -p %s -n %s -r %s`, median tok/s; llama.cpp (%s) and ik_llama.cpp (%s%s) `llama-bench` with the same flags, mean tok/s.\n\n' \
        "$P" "$N" "$R" "$(peer_ver "$llama")" "$(peer_ver "$ik")" "${ik_args:+, $ik_args}"
    printf '| file | weights MiB | pp%s nextn | llama.cpp | ik_llama | nextn / llama.cpp | tg%s nextn | llama.cpp | ik_llama | nextn / llama.cpp | tg GB/s of weights (%% of read) |\n' "$P" "$N"
    printf '|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n'
    local name f lpp ltg ipp itg
    for name in "$@"; do
        f=$(make_file "$name")
        nx_bench "$f"
        peer_bench "$llama" "$f" ""; lpp=$pb_pp; ltg=$pb_tg
        peer_bench "$ik" "$f" "$ik_args"; ipp=$pb_pp; itg=$pb_tg
        [ -n "$llama" ] || { lpp="not measured"; ltg="not measured"; }
        [ -n "$ik" ] || { ipp="not measured"; itg="not measured"; }
        printf '| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %s (%s) |\n' "$name" "$nx_mib" \
            "$(fmt "$nx_pp")" "$(fmt "$lpp")" "$(fmt "$ipp")" "$(ratio "$nx_pp" "$lpp")" \
            "$(fmt "$nx_tg")" "$(fmt "$ltg")" "$(fmt "$itg")" "$(ratio "$nx_tg" "$ltg")" "$nx_gbs" "$(pct "$nx_gbs" "$bw")"
    done
}

table_mtp() {
    sitting "MTP speculative decoding in the CLI (demo model)"
    local model=$demo n_prompts=$mtp_prompts
    [ -f "$model" ] || [ $dry = 1 ] || { model=$(make_file tiny-f32); printf '\n(models/nextn-demo.gguf missing: the tiny preset, random weights.)\n'; }
    printf '\n%s held-out prompts (tests/fixtures/demo-model/prompts.txt) x %s tokens, greedy, draft-max 3; nextn `spec-bench --runs 1` per prompt (plain and MTP in one run, outputs checked equal), llama.cpp `llama-server --spec-type draft-mtp` (fixed 3) via bench/llama_server_mtp.sh%s. Medians over the prompts.\n\n' \
        "$n_prompts" "$mtp_n" "$(not_given "$llama" llama-server)"
    printf '| engine | plain tok/s | MTP tok/s | speedup | acceptance | tokens/step |\n|---|---:|---:|---:|---:|---:|\n'
    if [ -n "$llama" ] && [ -x "$llama/llama-server" ]; then
        log "bench/llama_server_mtp.sh $llama $model -n $mtp_n --count $n_prompts --draft-max 3 -t $threads --nextn $nextn"
        if [ $dry = 0 ]; then
            "$root/bench/llama_server_mtp.sh" "$llama" "$model" -n "$mtp_n" --count "$n_prompts" --draft-max 3 -t "$threads" \
                --nextn "$nextn" --port "$port" --out "$out/mtp" >"$out/mtp.txt" 2>&1 || { echo "report.sh: llama_server_mtp.sh failed, see $out/mtp.txt" >&2; exit 1; }
            python3 - "$out/mtp.txt" <<'EOF'
import re, sys
t = open(sys.argv[1]).read()
l = re.search(r"llama.cpp plain ([0-9.]+) t/s, draft-mtp ([0-9.]+) t/s, speedup ([0-9.]+)x, acceptance ([0-9.]+)%, ([0-9.]+) tokens/step", t)
n = re.search(r"nextn plain ([0-9.]+) t/s, spec \(adaptive\) ([0-9.]+) t/s, speedup ([0-9.]+)x, acceptance ([0-9.]+)%, ([0-9.]+) tokens/step; "
              r"fixed draft ([0-9.]+) t/s, speedup ([0-9.]+)x, acceptance ([0-9.]+)%, ([0-9.]+) tokens/step", t)
print(f"| nextn, adaptive | {float(n[1]):.0f} | {float(n[2]):.0f} | {n[3]}x | {n[4]} % | {n[5]} |")
print(f"| nextn, fixed 3 | | {float(n[6]):.0f} | {n[7]}x | {n[8]} % | {n[9]} |")
print(f"| llama.cpp draft-mtp, fixed 3 | {float(l[1]):.0f} | {float(l[2]):.0f} | {l[3]}x | {l[4]} % | {l[5]} |")
print(f"| nextn gain / llama.cpp gain | | | {float(n[3]) / float(l[3]):.2f} (fixed {float(n[7]) / float(l[3]):.2f}) | | |")
EOF
        fi
        return 0
    fi
    local ids mode extra
    log "per prompt (IDS: each of the first $n_prompts lines of $prompts):"
    log "$nextn spec-bench -m $model --prompt IDS -n $mtp_n --draft-max 3 --runs 1 -t $threads [--no-adaptive]"
    [ $dry = 1 ] && return 0
    : >"$out/mtp-nextn.txt"
    head -n "$n_prompts" "$prompts" | while read -r ids; do
        for mode in adaptive fixed; do
            extra=""; [ $mode = fixed ] && extra="--no-adaptive"
            echo "$mode $("$nextn" spec-bench -m "$model" --prompt "$ids" -n "$mtp_n" --draft-max 3 --runs 1 -t "$threads" $extra 2>&1 |
                grep '^median of 1:')" >>"$out/mtp-nextn.txt" || { echo "report.sh: nextn spec-bench failed on prompt $ids" >&2; exit 1; }
        done
    done
    python3 - "$out/mtp-nextn.txt" <<'EOF'
import re, statistics, sys
rows = {"adaptive": [], "fixed": []}
for l in open(sys.argv[1]):
    mode, rest = l.split(" ", 1)
    g = lambda pat: float(re.search(pat, rest).group(1))
    rows[mode].append((g(r"plain ([0-9.]+) tok/s"), g(r"spec ([0-9.]+) tok/s"), g(r"speedup ([0-9.]+)x"),
                       g(r"acceptance ([0-9.]+)%"), g(r"([0-9.]+) tokens/step")))
med = lambda m, i: statistics.median(r[i] for r in rows[m])
for m, name in (("adaptive", "nextn, adaptive"), ("fixed", "nextn, fixed 3")):
    print(f"| {name} | {med(m, 0):.0f} | {med(m, 1):.0f} | {med(m, 2):.2f}x | {med(m, 3):.1f} % | {med(m, 4):.2f} |")
print("| llama.cpp draft-mtp, fixed 3 | not measured | not measured | | | |")
EOF
}

table_serve() {
    sitting "Serving: concurrent clients, plain and MTP"
    local model=$demo
    [ -f "$model" ] || [ $dry = 1 ] || model=$(make_file tiny-f32)
    printf '\n%s; `nextn serve -np 8 -c 1024` [`--spec mtp --draft-max 3`] and `llama-server -np 8 -c 8192 --no-webui` [`--spec-type draft-mtp --spec-draft-n-max 3 --spec-draft-n-min 0 --spec-draft-p-min 0`]%s, one at a time, one warm-up request each; `node bench/serve_load.mjs URL --clients C --requests %s --max-tokens %s` (greedy, token-id prompts). Aggregate generated tokens/s.\n\n' \
        "$(basename "$model")" "$(not_given "$llama" llama-server)" "$requests" "$maxtok"
    command -v node >/dev/null || [ $dry = 1 ] || { printf 'not measured: node is not installed (bench/serve_load.mjs needs it)\n'; return 0; }
    . "$root/bench/server_lib.sh"
    trap srv_stop EXIT
    local name c line
    local -A tps=()
    log "per server and C in $clients: node bench/serve_load.mjs http://127.0.0.1:$port --clients C --requests $requests --max-tokens $maxtok"
    for name in nextn-plain nextn-mtp llama-plain llama-mtp; do
        case $name in
            nextn-plain) set -- "$nextn" serve -m "$model" --port "$port" -t "$threads" -np 8 -c 1024 ;;
            nextn-mtp) set -- "$nextn" serve -m "$model" --port "$port" -t "$threads" -np 8 -c 1024 --spec mtp --draft-max 3 ;;
            llama-*) [ -n "$llama" ] && [ -x "$llama/llama-server" ] || continue
                set -- "$llama/llama-server" -m "$model" --port "$port" -t "$threads" -tb "$threads" -np 8 -c 8192 --no-webui
                [ $name = llama-mtp ] && set -- "$@" --spec-type draft-mtp --spec-draft-n-max 3 --spec-draft-n-min 0 --spec-draft-p-min 0 ;;
        esac
        log "$*"
        [ $dry = 1 ] && continue
        srv_start "$out/$name.log" "$port" "$@"
        curl -sf "localhost:$port/v1/completions" -H 'Content-Type: application/json' \
            -d '{"prompt": [1, 2, 3, 4], "max_tokens": 8, "temperature": 0}' >/dev/null ||
            { echo "report.sh: $name: warm-up request failed; see $out/$name.log" >&2; exit 1; }
        for c in $clients; do
            line=$(node "$root/bench/serve_load.mjs" "http://127.0.0.1:$port" --clients "$c" --requests "$requests" --max-tokens "$maxtok")
            echo "$name $line" >>"$out/serve.txt"
            tps[$name,$c]=$(echo "$line" | sed -n 's/.*= \([0-9.]*\) tokens\/s.*/\1/p')
        done
        srv_stop
    done
    [ $dry = 1 ] && return 0
    local hdr="| aggregate tokens/s |" sep="|---|" row
    for c in $clients; do hdr="$hdr $c client$([ "$c" = 1 ] || echo s) |"; sep="$sep---:|"; done
    printf '%s\n%s\n' "$hdr" "$sep"
    for name in nextn-plain nextn-mtp llama-plain llama-mtp; do
        row="| $name |"
        for c in $clients; do row="$row $(fmt "${tps[$name,$c]:-}") |"; done
        [ -n "${tps[$name,1]:-}" ] || row="| $name |$(for c in $clients; do printf ' not measured |'; done)"
        echo "$row"
    done
    for pair in "nextn-mtp nextn-plain" "nextn-plain llama-plain" "nextn-mtp llama-mtp"; do
        set -- $pair
        row="| $1 / $2 |"
        for c in $clients; do row="$row $(ratio "${tps[$1,$c]:--}" "${tps[$2,$c]:--}") |"; done
        echo "$row"
    done
}

table_quantize() {
    sitting "Quantize"
    printf '\nWall time of `nextn quantize IN OUT q4_k_m` and `llama-quantize IN OUT Q4_K_M`%s on the same f16 file (page cache warm, output into the --out folder).\n\n' \
        "$(not_given "$llama" llama-quantize)"
    printf '| input (f16) | MiB | nextn s | llama-quantize s | llama-quantize / nextn |\n|---|---:|---:|---:|---:|\n'
    local name f t0 nx lq mib
    for name in $quant_src; do
        f=$(make_file "$name")
        log "$nextn quantize $f OUT q4_k_m -q -t $threads"
        lq="not measured"; nx=-
        if [ $dry = 0 ]; then
            cat "$f" >/dev/null
            t0=$(now); "$nextn" quantize "$f" "$out/q.gguf" q4_k_m -q -t "$threads" >/dev/null; nx=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }')
            rm -f "$out/q.gguf"
        fi
        if [ -n "$llama" ] && [ -x "$llama/llama-quantize" ]; then
            log "$llama/llama-quantize $f OUT Q4_K_M $threads"
            if [ $dry = 0 ]; then
                t0=$(now); "$llama/llama-quantize" "$f" "$out/q.gguf" Q4_K_M "$threads" >"$out/llama-quantize.log" 2>&1 &&
                    lq=$(awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }') || lq="failed (see $out/llama-quantize.log)"
                rm -f "$out/q.gguf"
            fi
        fi
        mib=$([ $dry = 1 ] && echo - || awk -v s="$(stat -c %s "$f")" 'BEGIN { printf "%.0f", s / 1048576 }')
        printf '| %s | %s | %s | %s | %s |\n' "$name" "$mib" "$nx" "$lq" "$(ratio "$lq" "$nx")"
    done
}

table_load() {
    sitting "Load"
    printf '\nWall time of a process that maps the file and processes one token: `nextn bench -m F -p 1 -n 0 -r 1` against `llama-bench -m F -p 1 -n 0 -r 1 --no-warmup`%s; "cold" after `dd if=F iflag=nocache count=0` (the file dropped from the page cache), "warm" right after.\n\n' \
        "$(not_given "$llama" llama-bench)"
    printf '| file | nextn cold s | nextn warm s | llama.cpp cold s | llama.cpp warm s |\n|---|---:|---:|---:|---:|\n'
    local name f nc nw lc lw
    for name in ${dense_files%% *} $moe_files; do
        f=$(make_file "$name")
        nc=-; nw=-; lc="not measured"; lw="not measured"
        log "dd if=$f iflag=nocache count=0 status=none; $nextn bench -m $f -p 1 -n 0 -r 1 -t $threads"
        if [ $dry = 0 ]; then
            nc=$(timed_cold "$f" "$nextn" bench -m "$f" -p 1 -n 0 -r 1 -t "$threads")
            nw=$(timed "$nextn" bench -m "$f" -p 1 -n 0 -r 1 -t "$threads")
        fi
        if [ -n "$llama" ] && [ -x "$llama/llama-bench" ]; then
            log "dd if=$f iflag=nocache count=0 status=none; $llama/llama-bench -m $f -p 1 -n 0 -r 1 --no-warmup -t $threads"
            if [ $dry = 0 ]; then
                lc=$(timed_cold "$f" "$llama/llama-bench" -m "$f" -p 1 -n 0 -r 1 --no-warmup -t "$threads")
                lw=$(timed "$llama/llama-bench" -m "$f" -p 1 -n 0 -r 1 --no-warmup -t "$threads")
            fi
        fi
        printf '| %s | %s | %s | %s | %s |\n' "$name" "$nc" "$nw" "$lc" "$lw"
    done
}
timed() { local t0; t0=$(now); "$@" >/dev/null 2>&1 || { echo "failed"; return 0; }; awk -v a="$t0" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
timed_cold() { local f=$1; shift; dd if="$f" iflag=nocache count=0 status=none 2>/dev/null || true; timed "$@"; }

# ---- main ----------------------------------------------------------------------------------
: >"$out/commands.txt"
{
    printf '<!-- produced by bench/report.sh%s%s on %s; rerun it to replace everything down to the end marker -->\n' \
        "$([ $quick = 1 ] && echo ' --quick')" "$([ $dry = 1 ] && echo ' --dry')" "$(date -u '+%Y-%m-%d %H:%M UTC')"
    printf '\nPeers: llama.cpp %s, ik_llama.cpp %s.\n' "$(peer_ver "$llama")" "$(peer_ver "$ik")"
    for a in $areas; do
        t_area=$(now)
        case $a in
            decode) table_decode "Prefill and decode per quantisation vs llama.cpp" $dense_files ;;
            mtp) table_mtp ;;
            moe) table_decode "MoE (qwen35moe, 35B-A3B shape cut to 10 layers)" $moe_files ;;
            serve) table_serve ;;
            quantize) table_quantize ;;
            load) table_load ;;
        esac
        [ $dry = 1 ] || awk -v a="$t_area" -v b="$(now)" -v n="$a" 'BEGIN { printf "report.sh: %s took %.1f s\n", n, b - a }' >&2
    done
} >"$out/tables.md"
if [ $dry = 1 ]; then
    cat "$out/commands.txt"
else
    cat "$out/tables.md"
    printf '\ncommands run: %s/commands.txt; raw output under %s\n' "$out" "$out" >&2
fi
if [ -n "$write" ] && [ $dry = 0 ]; then
    awk -v tables="$out/tables.md" '
        $0 == "<!-- report.sh begin -->" { print; while ((getline l < tables) > 0) print l; skip = 1; next }
        $0 == "<!-- report.sh end -->" { skip = 0 }
        !skip' "$write" >"$out/written.md" && cat "$out/written.md" >"$write"
    echo "report.sh: tables written into $write" >&2
fi
