#!/usr/bin/env bash
# llama_server_mtp.sh - llama.cpp's MTP speculative decoding (`llama-server --spec-type draft-mtp`)
# next to nextn's (`nextn spec-bench`) on the same GGUF file and the same token-id prompts.
#
#   bench/llama_server_mtp.sh LLAMA_BIN_DIR MODEL.gguf [-n N] [--prompts FILE] [--count C]
#                             [--draft-max D] [-t THREADS] [--port P] [--nextn PATH]
#                             [--nextn-args "ARGS"] [--out DIR]
#
# LLAMA_BIN_DIR holds an already built llama-server (this script never builds llama.cpp).
# Prompts: the first C lines (default 8) of FILE, each a comma-separated token-id list (default
# tests/fixtures/demo-model/prompts.txt, held-out text of the demo model; the ids are < 4096, so
# they are valid prompts for any model with a vocabulary at least that large).
#
# llama.cpp: two server runs, one plain and one with `--spec-type draft-mtp --spec-draft-n-max D
# --spec-draft-n-min 0 --spec-draft-p-min 0` (draft length fixed at D, like nextn --no-adaptive),
# one slot (-np 1), one warm-up request each, then per prompt POST /completion with
# {"prompt": ids, "n_predict": N, "temperature": 0, "cache_prompt": false, "ignore_eos": true}.
# Read from the reply: timings.predicted_per_second (decode tokens/s, prompt excluded),
# timings.draft_n / draft_n_accepted (acceptance); tokens per step from the server log's
# "mean len" (1 + accepted / verify steps).  Greedy outputs of the plain and the MTP server are
# compared.
# nextn (with --nextn PATH): `nextn spec-bench -m MODEL --prompt IDS -n N --draft-max D --runs 1
# -t THREADS ARGS` per prompt, adaptive and --no-adaptive (it decodes plain and speculative in one
# run and fails if the greedy outputs differ); ARGS e.g. "--draft-vocab 32768".
# Output: one line per prompt and the medians over prompts; raw replies and logs under --out.
set -euo pipefail
usage() { awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; }
[ $# -ge 2 ] || { usage >&2; exit 2; }
bin=$1; model=$2; shift 2
root=$(cd "$(dirname "$0")/.." && pwd)
n=64; prompts="$root/tests/fixtures/demo-model/prompts.txt"; count=8; dmax=3; threads=1; port=18230
nextn=""; nextn_args=""; out=""
while [ $# -gt 0 ]; do
    case $1 in
        -n) n=$2; shift 2 ;;
        --prompts) prompts=$2; shift 2 ;;
        --count) count=$2; shift 2 ;;
        --draft-max) dmax=$2; shift 2 ;;
        -t) threads=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --nextn) nextn=$2; shift 2 ;;
        --nextn-args) nextn_args=$2; shift 2 ;;
        --out) out=$2; shift 2 ;;
        -h|--help) usage; exit 0 ;;
        *) echo "llama_server_mtp.sh: unknown option '$1'" >&2; exit 2 ;;
    esac
done
[ -x "$bin/llama-server" ] || { echo "llama_server_mtp.sh: $bin/llama-server not found (give the bin dir of a built llama.cpp)" >&2; exit 2; }
[ -f "$model" ] || { echo "llama_server_mtp.sh: $model: no such file" >&2; exit 2; }
[ -f "$prompts" ] || { echo "llama_server_mtp.sh: $prompts: no such file" >&2; exit 2; }
[ -n "$out" ] || out=$(mktemp -d)
mkdir -p "$out"
head -n "$count" "$prompts" >"$out/prompts.txt"
echo "model $model, $(wc -l <"$out/prompts.txt") prompts, n_predict $n, draft-max $dmax, threads $threads${nextn_args:+, nextn $nextn_args}, load: $(cut -d' ' -f1-3 /proc/loadavg)"

. "$root/bench/server_lib.sh"
trap srv_stop EXIT

# run_server MODE EXTRA_ARGS...: replies in $out/MODE.jsonl, log in $out/MODE.log
run_server() {
    local mode=$1; shift
    srv_start "$out/$mode.log" "$port" "$bin/llama-server" -m "$model" -t "$threads" -tb "$threads" -c 4096 -np 1 \
        --port "$port" --no-webui "$@"
    : >"$out/$mode.jsonl"
    local first=1 ids
    while read -r ids; do
        [ -n "$ids" ] || continue
        local body="{\"prompt\": [$ids], \"n_predict\": $n, \"temperature\": 0, \"cache_prompt\": false, \"ignore_eos\": true, \"return_tokens\": true}"
        if [ $first = 1 ]; then
            curl -s "localhost:$port/completion" -d "$body" >/dev/null || { echo "warm-up request ($mode) failed; log:" >&2; tail -n 30 "$out/$mode.log" >&2; exit 1; }
            first=0
        fi
        # a reply may be an error object: random-weight models can emit bytes that are not valid
        # UTF-8, and llama-server then refuses the whole reply (its chat-format parser); such
        # prompts are reported and left out of the comparison
        curl -s "localhost:$port/completion" -d "$body" | tr -d '\n' >>"$out/$mode.jsonl" || { echo "request ($mode) failed; log:" >&2; tail -n 30 "$out/$mode.log" >&2; exit 1; }
        echo >>"$out/$mode.jsonl"
    done <"$out/prompts.txt"
    srv_stop
}

run_server plain
run_server mtp --spec-type draft-mtp --spec-draft-n-max "$dmax" --spec-draft-n-min 0 --spec-draft-p-min 0

: >"$out/nextn.txt"
if [ -n "$nextn" ]; then
    i=0
    while read -r ids; do
        [ -n "$ids" ] || continue
        i=$((i + 1))
        # only the prompts both llama-server runs answered
        if grep -q '"error"' <(sed -n "${i}p" "$out/plain.jsonl") <(sed -n "${i}p" "$out/mtp.jsonl"); then
            echo "skip" >>"$out/nextn.txt"; continue
        fi
        for mode in adaptive fixed; do
            extra=""; [ $mode = fixed ] && extra="--no-adaptive"
            line=$("$nextn" spec-bench -m "$model" --prompt "$ids" -n "$n" --draft-max "$dmax" --runs 1 -t "$threads" $extra $nextn_args 2>&1 | grep '^median of 1:') \
                || { echo "nextn spec-bench failed on prompt $ids" >&2; exit 1; }
            echo "$mode $line" >>"$out/nextn.txt"
        done
    done <"$out/prompts.txt"
fi

python3 - "$out" <<'EOF'
import json, re, statistics, sys
out = sys.argv[1]
def replies(mode):
    return [json.loads(l) for l in open(f"{out}/{mode}.jsonl", errors="replace") if l.strip()]
plain, mtp = replies("plain"), replies("mtp")
# "mean len" per request in the MTP server's log; the first is the warm-up
mean_len = [float(m.group(1)) for m in re.finditer(r"mean len =\s*([0-9.]+)", open(f"{out}/mtp.log", errors="replace").read())][1:]
nx = {"adaptive": [], "fixed": []}
for l in open(f"{out}/nextn.txt"):
    if l.strip() == "skip":
        nx["adaptive"].append(None); nx["fixed"].append(None); continue
    mode, rest = l.split(" ", 1)
    g = lambda pat: float(re.search(pat, rest).group(1))
    nx[mode].append(dict(plain=g(r"plain ([0-9.]+) tok/s"), spec=g(r"spec ([0-9.]+) tok/s"),
                         acc=g(r"acceptance ([0-9.]+)%"), tps=g(r"([0-9.]+) tokens/step")))
rows = []
print(f"{'prompt':>6} | {'llama plain t/s':>15} {'llama mtp t/s':>13} {'speedup':>7} {'accept':>7} {'tok/step':>8} {'same out':>8}"
      + (" | nextn plain t/s  spec t/s speedup accept tok/step | fixed-N: spec t/s speedup accept tok/step" if nx["adaptive"] else ""))
skipped = []
for i, (p, m) in enumerate(zip(plain, mtp)):
    if "error" in p or "error" in m:
        skipped.append((i + 1, (p.get("error") or m.get("error"))["message"]))
        continue
    tp, tm = p["timings"]["predicted_per_second"], m["timings"]["predicted_per_second"]
    dn, da = m["timings"].get("draft_n", 0), m["timings"].get("draft_n_accepted", 0)
    r = dict(lp=tp, lm=tm, ls=tm / tp, la=100.0 * da / dn if dn else 0.0,
             lt=mean_len[i] if i < len(mean_len) else float("nan"), same=p.get("tokens") == m.get("tokens"))
    line = f"{i + 1:>6} | {tp:15.2f} {tm:13.2f} {r['ls']:6.2f}x {r['la']:6.1f}% {r['lt']:8.2f} {str(r['same']):>8}"
    if i < len(nx["adaptive"]) and nx["adaptive"][i]:
        a, f = nx["adaptive"][i], nx["fixed"][i]
        r.update(np=a["plain"], ns=a["spec"], nsp=a["spec"] / a["plain"], na=a["acc"], nt=a["tps"],
                 fs=f["spec"], fsp=f["spec"] / f["plain"], fa=f["acc"], ft=f["tps"])
        line += (f" | {a['plain']:15.2f} {a['spec']:9.2f} {r['nsp']:6.2f}x {a['acc']:5.1f}% {a['tps']:8.2f}"
                 f" | {f['spec']:9.2f} {r['fsp']:6.2f}x {f['acc']:5.1f}% {f['tps']:8.2f}")
    rows.append(r)
    print(line)
for i, msg in skipped:
    print(f"{i:>6} | left out: llama-server answered with an error: {msg}")
med = lambda k: statistics.median(r[k] for r in rows)
print(f"median over {len(rows)} prompts: llama.cpp plain {med('lp'):.2f} t/s, draft-mtp {med('lm'):.2f} t/s, "
      f"speedup {med('ls'):.2f}x, acceptance {med('la'):.1f}%, {med('lt'):.2f} tokens/step; "
      f"plain and MTP outputs identical on {sum(r['same'] for r in rows)} of {len(rows)} prompts")
if "nsp" in rows[0]:
    print(f"median over {len(rows)} prompts: nextn plain {med('np'):.2f} t/s, spec (adaptive) {med('ns'):.2f} t/s, "
          f"speedup {med('nsp'):.2f}x, acceptance {med('na'):.1f}%, {med('nt'):.2f} tokens/step; "
          f"fixed draft {med('fs'):.2f} t/s, speedup {med('fsp'):.2f}x, acceptance {med('fa'):.1f}%, {med('ft'):.2f} tokens/step")
EOF
echo "raw replies, server logs and nextn lines: $out"
