#!/usr/bin/env bash
# llama.cpp as the speed peer: its prompt evaluation (node-llama-cpp 3.21.1's
# prebuilt CPU library, scripts/gguf/llamacpp_bench.mjs: flash attention off
# and on) against probe bench on the same GGUF file and the same token ids
# (probe: the plain pass, --no-diagnostics, and every App. I diagnostic, its
# default), all on THREADS threads, alternating in one run (each round runs
# the four in a rotated order, each a process of its own). Prints every
# run's tokens/s, the medians and the ratios probe / llama.cpp's best
# setting. docs/performance.md ("llama.cpp as the speed peer") keeps results.
#
#   scripts/bench/llamacpp.sh model.gguf
#   TOKENS=1024 ROUNDS=5 THREADS=2 scripts/bench/llamacpp.sh model.gguf
#
# Environment: TOKENS (1024), ROUNDS (5), THREADS (2), COMPUTE (probe's
# --compute, default f32), NLC (node-llama-cpp's folder, default
# third_party/node-llama-cpp), OUT (keep the work folder).
set -euo pipefail
model=${1:?usage: scripts/bench/llamacpp.sh MODEL.gguf}
root=$(git rev-parse --show-toplevel)
tokens=${TOKENS:-1024}
rounds=${ROUNDS:-5}
threads=${THREADS:-2}
compute=${COMPUTE:-f32}
nlc=${NLC:-$root/third_party/node-llama-cpp}
work=${OUT:-$(mktemp -d)}
mkdir -p "$work"
[[ -d $nlc/node_modules/node-llama-cpp ]] || { echo "llamacpp.sh: no node-llama-cpp in $nlc (bash .ci/setup.sh installs it)" >&2; exit 2; }

(cd "$root" && go build -o "$work/probe" ./cmd/probe)
vocab=$("$work/probe" inspect "$model" --json | python3 -c 'import json,sys; print([t for t in json.load(sys.stdin)["tensors"] if t["name"]=="token_embd.weight"][0]["shape"][0])')
python3 -c "import json,random; r=random.Random(1); json.dump([r.randrange($vocab) for _ in range($tokens)], open('$work/ids.json','w'))"

run() { # prints tokens/s of one run of setting $1
	case $1 in
	llama-fa0) node "$root/scripts/gguf/llamacpp_bench.mjs" "$nlc" "$model" "$work/ids.json" "$threads" 0 ;;
	llama-fa1) node "$root/scripts/gguf/llamacpp_bench.mjs" "$nlc" "$model" "$work/ids.json" "$threads" 1 ;;
	probe-plain) GOMAXPROCS=$threads "$work/probe" bench --model "$model" --ids "$work/ids.json" --reps 1 --compute "$compute" --no-diagnostics ;;
	probe-diag) GOMAXPROCS=$threads "$work/probe" bench --model "$model" --ids "$work/ids.json" --reps 1 --compute "$compute" ;;
	esac 2>/dev/null | python3 -c 'import json,sys; d=json.loads(sys.stdin.read().strip().splitlines()[-1]); print(d.get("tokens_per_s") or d["modes"][0]["tokens_per_s"])'
}

settings=(llama-fa0 llama-fa1 probe-plain probe-diag)
echo "$model: T = $tokens, $threads threads, probe --compute $compute, $rounds rounds, $(lscpu | sed -n 's/^Model name: *//p'), load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$root" log -1 --format=%h)"
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < ${#settings[@]}; i++)); do
		s=${settings[$(((i + r) % ${#settings[@]}))]}
		v=$(run "$s")
		echo "$s $v" >>"$work/runs.txt"
		printf '  round %d %-12s %10.1f tok/s\n' "$r" "$s" "$v"
	done
done
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
runs = {}
for line in open(sys.argv[1]):
    k, v = line.split()
    runs.setdefault(k, []).append(float(v))
med = {k: statistics.median(v) for k, v in runs.items()}
best = max(med["llama-fa0"], med["llama-fa1"])
for k in ("llama-fa0", "llama-fa1", "probe-plain", "probe-diag"):
    print(f"{k:12s} median {med[k]:10.1f} tok/s   llama.cpp's best / this {best / med[k]:.2f}×")
PY
