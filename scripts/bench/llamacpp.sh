#!/usr/bin/env bash
# llama.cpp as the speed peer: its prompt evaluation (node-llama-cpp 3.21.1's
# prebuilt CPU library, scripts/gguf/llamacpp_bench.mjs: flash attention off
# and on) against probe bench on the same GGUF file and the same token ids
# (probe: the plain pass, --no-diagnostics, and every App. I diagnostic, its
# default; each with --compute f32, the exact path, and --compute bf16), all
# on THREADS threads, alternating in one run (each round runs the settings
# in a rotated order, each a process of its own). Prints every run's tokens/s
# (wall time of the evaluation or pass) and the user+sys CPU seconds of
# that evaluation or pass (on a loaded machine the steadier figure; a
# spinning thread pool counts its waits), the medians, and each probe
# setting's median tokens/s over llama.cpp's best setting's (issue 30's
# targets: every diagnostic ≥ 1.2× with --compute f32, ≥ 2.5× with
# --compute bf16), and the same ratio of CPU seconds per token.
# docs/performance.md ("llama.cpp as the speed peer") keeps results.
#
#   scripts/bench/llamacpp.sh model.gguf
#   TOKENS=4096 ROUNDS=2 SETTINGS="llama-fa1 probe-diag-bf16" scripts/bench/llamacpp.sh model.gguf
#
# Settings: llama-fa0, llama-fa1 (flash attention off, on), probe-plain,
# probe-diag (--compute f32), probe-plain-bf16, probe-diag-bf16 (--compute
# bf16). Environment: TOKENS (1024), ROUNDS (5), THREADS (2), SETTINGS (all
# six; at least one llama-fa setting), NLC (node-llama-cpp's folder, default
# third_party/node-llama-cpp), OUT (keep the work folder).
set -euo pipefail
model=${1:?usage: scripts/bench/llamacpp.sh MODEL.gguf}
root=$(git rev-parse --show-toplevel)
tokens=${TOKENS:-1024}
rounds=${ROUNDS:-5}
threads=${THREADS:-2}
read -r -a settings <<<"${SETTINGS:-llama-fa0 llama-fa1 probe-plain probe-diag probe-plain-bf16 probe-diag-bf16}"
nlc=${NLC:-$root/third_party/node-llama-cpp}
work=${OUT:-$(mktemp -d)}
mkdir -p "$work"
[[ -d $nlc/node_modules/node-llama-cpp ]] || { echo "llamacpp.sh: no node-llama-cpp in $nlc (bash .ci/setup.sh installs it)" >&2; exit 2; }

(cd "$root" && go build -o "$work/probe" ./cmd/probe)
vocab=$("$work/probe" inspect "$model" --json | python3 -c 'import json,sys; print([t for t in json.load(sys.stdin)["tensors"] if t["name"]=="token_embd.weight"][0]["shape"][0])')
python3 -c "import json,random; r=random.Random(1); json.dump([r.randrange($vocab) for _ in range($tokens)], open('$work/ids.json','w'))"

command_of() { # sets cmd to the command of one run of setting $1
	local llama=(node "$root/scripts/gguf/llamacpp_bench.mjs" "$nlc" "$model" "$work/ids.json" "$threads")
	local probe=(env GOMAXPROCS="$threads" "$work/probe" bench --model "$model" --ids "$work/ids.json" --reps 1)
	case $1 in
	llama-fa0) cmd=("${llama[@]}" 0) ;;
	llama-fa1) cmd=("${llama[@]}" 1) ;;
	probe-plain) cmd=("${probe[@]}" --compute f32 --no-diagnostics) ;;
	probe-diag) cmd=("${probe[@]}" --compute f32) ;;
	probe-plain-bf16) cmd=("${probe[@]}" --compute bf16 --no-diagnostics) ;;
	probe-diag-bf16) cmd=("${probe[@]}" --compute bf16) ;;
	*)
		echo "llamacpp.sh: unknown setting $1 (llama-fa0 llama-fa1 probe-plain probe-diag probe-plain-bf16 probe-diag-bf16)" >&2
		exit 2
		;;
	esac
}

echo "$model: T = $tokens, $threads threads, $rounds rounds, $(lscpu | sed -n 's/^Model name: *//p'), kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg), commit $(git -C "$root" log -1 --format=%h), $(date -u +%FT%TZ)"
for ((r = 0; r < rounds; r++)); do
	for ((i = 0; i < ${#settings[@]}; i++)); do
		s=${settings[$(((i + r) % ${#settings[@]}))]}
		command_of "$s"
		/usr/bin/time -f '%U %S' -o "$work/time.txt" "${cmd[@]}" >"$work/out.txt" 2>"$work/err.txt" || {
			echo "llamacpp.sh: $s failed:" >&2
			cat "$work/err.txt" >&2
			exit 1
		}
		read -r v cpu < <(python3 -c 'import json,sys; d=json.loads(open(sys.argv[1]).read().strip().splitlines()[-1]); print(d["tokens_per_s"], d["cpu_seconds"])' "$work/out.txt")
		read -r user sys <"$work/time.txt"
		echo "$s $v $cpu $user $sys" >>"$work/runs.txt"
		printf '  round %d %-16s %10.1f tok/s  pass %7.2f CPU s  process user+sys %7.1f s\n' "$r" "$s" "$v" "$cpu" "$(echo "$user + $sys" | bc -l)"
	done
done
python3 - "$work/runs.txt" <<'PY'
import statistics, sys
runs, cpu, proc = {}, {}, {}
for line in open(sys.argv[1]):
    k, v, c, u, s = line.split()
    runs.setdefault(k, []).append(float(v))
    cpu.setdefault(k, []).append(float(c))
    proc.setdefault(k, []).append(float(u) + float(s))
med = {k: statistics.median(v) for k, v in runs.items()}
mcpu = {k: statistics.median(v) for k, v in cpu.items()}
llama = [k for k in ("llama-fa0", "llama-fa1") if k in med]
best = max(llama, key=lambda k: med[k]) if llama else None
target = {"probe-diag": 1.2, "probe-diag-bf16": 2.5}
for k in runs:
    line = f"{k:16s} median {med[k]:10.1f} tok/s  pass {mcpu[k]:7.2f} CPU s  process {statistics.median(proc[k]):7.1f} s"
    if k.startswith("probe") and best:
        line += f"  probe / llama.cpp's best ({best}) {med[k] / med[best]:.2f}×, in CPU s {mcpu[best] / mcpu[k]:.2f}×"
        if k in target:
            line += f" (target ≥ {target[k]}×: {'met' if med[k] / med[best] >= target[k] else 'missed'})"
    print(line)
PY
