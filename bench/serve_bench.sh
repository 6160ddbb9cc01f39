#!/usr/bin/env bash
# serve_bench.sh - `nextn serve` next to `llama-server` on the same GGUF file:
#   load:      aggregate generated tokens/s at 1, 4 and 8 concurrent clients (bench/serve_load.mjs:
#              POST /v1/completions, token-id prompts of tests/fixtures/demo-model/prompts.txt,
#              greedy, ignore_eos), plain and MTP speculative on both sides;
#   multiturn: a 10-turn chat with a growing history, time to first token per turn
#              (bench/serve_multiturn.mjs), nextn with and without its prompt cache and llama-server
#              (its prompt cache on, as by default).
# Servers run one at a time; the order alternates between rounds (A B C D, then D C B A, ...) so
# that ratios hold on a machine whose load drifts.  Each server gets one warm-up request.
#
#   bench/serve_bench.sh [--model F] [--llama DIR] [--nextn PATH] [-t THREADS] [--rounds R]
#                        [--requests N] [--max-tokens N] [--clients "1 4 8"] [--turns N]
#                        [--words W] [--draft-max D] [--prompts FILE] [--port P] [--out DIR]
#                        [--skip-load] [--skip-multiturn]
#
# Defaults: --model models/nextn-demo.gguf, --llama /work/ext/llama.cpp/build/bin, --nextn
# build/nextn, -t 2, --rounds 2, --requests 4, --max-tokens 64, --clients "1 4 8", --turns 10,
# --words 120, --draft-max 3, --prompts: serve_load.mjs's default.  Servers: nextn `serve -np 8 -c 1024` (positions per slot) and
# llama-server `-np 8 -c 8192` (its -c is the total), `--spec mtp` (adaptive draft length up to D)
# against `--spec-type draft-mtp --spec-draft-n-max D --spec-draft-n-min 0 --spec-draft-p-min 0`;
# multi-turn servers `-np 1` with 8192 positions.  Output: the raw lines under --out and two
# markdown tables (medians over rounds) on stdout.  This script never builds anything.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
root=$(cd "$(dirname "$0")/.." && pwd)
model="$root/models/nextn-demo.gguf"; llama=/work/ext/llama.cpp/build/bin; nextn="$root/build/nextn"
threads=2; rounds=2; requests=4; maxtok=64; clients="1 4 8"; turns=10; words=120; dmax=3; port=18650; out=""
prompts=()
do_load=1; do_multi=1
while [ $# -gt 0 ]; do
    case $1 in
        --model) model=$2; shift 2 ;;
        --llama) llama=$2; shift 2 ;;
        --nextn) nextn=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --rounds) rounds=$2; shift 2 ;;
        --requests) requests=$2; shift 2 ;;
        --max-tokens) maxtok=$2; shift 2 ;;
        --clients) clients=$2; shift 2 ;;
        --turns) turns=$2; shift 2 ;;
        --words) words=$2; shift 2 ;;
        --draft-max) dmax=$2; shift 2 ;;
        --prompts) prompts=(--prompts "$2"); shift 2 ;;
        --port) port=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        --skip-load) do_load=0; shift ;;
        --skip-multiturn) do_multi=0; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "serve_bench.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$nextn" ] || { echo "serve_bench.sh: $nextn not found (build nextn first)" >&2; exit 2; }
[ -x "$llama/llama-server" ] || { echo "serve_bench.sh: $llama/llama-server not found" >&2; exit 2; }
[ -f "$model" ] || { echo "serve_bench.sh: $model: no such file" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
echo "# serve_bench $(date -u '+%Y-%m-%d %H:%M UTC'), model $model, -t $threads, $rounds rounds, nextn $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"

. "$root/bench/server_lib.sh"
trap srv_stop EXIT

# start NAME CMD...: runs the server in the background, waits for /health, one warm-up request
start() {
    local name=$1; shift
    srv_start "$out/$name.log" "$port" "$@"
    curl -sf "localhost:$port/v1/completions" -H 'Content-Type: application/json' \
        -d '{"prompt": [1, 2, 3, 4], "max_tokens": 8, "temperature": 0}' >/dev/null ||
        { echo "$name: warm-up request failed; its log:" >&2; tail -n 30 "$out/$name.log" >&2; exit 1; }
}

nx_serve() { echo "$nextn" serve -m "$model" --port "$port" -t "$threads"; }
ll_serve() { echo "$llama/llama-server" -m "$model" --port "$port" -t "$threads" -tb "$threads" --no-webui; }
mtp_ll="--spec-type draft-mtp --spec-draft-n-max $dmax --spec-draft-n-min 0 --spec-draft-p-min 0"

if [ $do_load = 1 ]; then
    names=(nextn-plain llama-plain nextn-mtp llama-mtp)
    : >"$out/load.txt"
    for r in $(seq 1 "$rounds"); do
        order=("${names[@]}")
        [ $((r % 2)) = 0 ] && order=(llama-mtp nextn-mtp llama-plain nextn-plain)
        for name in "${order[@]}"; do
            case $name in
                nextn-plain) start "$name" $(nx_serve) -np 8 -c 1024 ;;
                nextn-mtp) start "$name" $(nx_serve) -np 8 -c 1024 --spec mtp --draft-max "$dmax" ;;
                llama-plain) start "$name" $(ll_serve) -np 8 -c 8192 ;;
                llama-mtp) start "$name" $(ll_serve) -np 8 -c 8192 $mtp_ll ;;
            esac
            for c in $clients; do
                line=$(node "$root/bench/serve_load.mjs" "http://127.0.0.1:$port" --clients "$c" --requests "$requests" \
                    --max-tokens "$maxtok" "${prompts[@]}")
                echo "$name round $r: $line" | tee -a "$out/load.txt"
            done
            srv_stop
        done
    done
fi

if [ $do_multi = 1 ]; then
    names=(nextn-cache nextn-nocache llama-server)
    : >"$out/multiturn.txt"
    for r in $(seq 1 "$rounds"); do
        order=("${names[@]}")
        [ $((r % 2)) = 0 ] && order=(llama-server nextn-nocache nextn-cache)
        for name in "${order[@]}"; do
            case $name in
                nextn-cache) start "$name" $(nx_serve) -np 1 -c 8192 ;;
                nextn-nocache) start "$name" $(nx_serve) -np 1 -c 8192 --no-cache-prompt ;;
                llama-server) start "$name" $(ll_serve) -np 1 -c 8192 --jinja ;;
            esac
            node "$root/bench/serve_multiturn.mjs" "http://127.0.0.1:$port" --turns "$turns" --words "$words" \
                --label "$name round $r" | tee -a "$out/multiturn.txt"
            srv_stop
        done
    done
fi

python3 - "$out" <<'EOF'
import os, re, statistics, sys
out = sys.argv[1]
med = statistics.median
if os.path.exists(f"{out}/load.txt"):
    t = {}
    for l in open(f"{out}/load.txt"):
        m = re.match(r"(\S+) round (\d+): clients (\d+) .* = ([0-9.]+) tokens/s", l)
        if m: t.setdefault((m.group(1), int(m.group(3))), []).append(float(m.group(4)))
    cl = sorted({c for _, c in t})
    print("\n| aggregate tokens/s (median of rounds) | " + " | ".join(f"{c} client{'s' if c > 1 else ''}" for c in cl) + " |")
    print("|---|" + "---|" * len(cl))
    for n in ("nextn-plain", "llama-plain", "nextn-mtp", "llama-mtp"):
        if any((n, c) in t for c in cl):
            print(f"| {n} | " + " | ".join(f"{med(t[(n, c)]):.1f} ({', '.join(f'{v:.0f}' for v in t[(n, c)])})" if (n, c) in t else "-" for c in cl) + " |")
    for a, b in (("nextn-plain", "llama-plain"), ("nextn-mtp", "llama-mtp")):
        if all((a, c) in t and (b, c) in t for c in cl):
            print(f"| {a} / {b} | " + " | ".join(f"{med(t[(a, c)]) / med(t[(b, c)]):.2f}x" for c in cl) + " |")
if os.path.exists(f"{out}/multiturn.txt"):
    t = {}
    for l in open(f"{out}/multiturn.txt"):
        m = re.match(r"(\S+) round (\d+) turn (\d+): prompt (-?\d+) tokens, ttft ([0-9.]+) ms", l)
        if m: t.setdefault((m.group(1), int(m.group(3))), []).append((int(m.group(4)), float(m.group(5))))
    names = [n for n in ("nextn-cache", "nextn-nocache", "llama-server") if (n, 1) in t]
    turns = sorted({k for _, k in t})
    print("\n| turn | prompt tokens | " + " | ".join(f"{n} TTFT ms" for n in names) + " |")
    print("|---|---|" + "---|" * len(names))
    for k in turns:
        p = t[(names[0], k)][0][0]
        print(f"| {k} | {p} | " + " | ".join(f"{med([v for _, v in t[(n, k)]]):.0f}" if (n, k) in t else "-" for n in names) + " |")
EOF
echo "raw lines and server logs: $out"
