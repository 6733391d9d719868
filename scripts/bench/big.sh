#!/usr/bin/env bash
# Issue 17's measurements of big checkpoints on a small machine
# (docs/performance.md, "Big checkpoints", records the results). Each step
# is one or more processes of `probe bench` (load time, weight bytes
# resident, peak RSS, tokens/s as one JSON object) or `probe sweep` under
# GNU time (peak RSS); the checkpoints are written once by `probe generate`
# into $WORK and reused.
#
#   scripts/bench/big.sh                       # every step
#   STEPS="load gated32k" scripts/bench/big.sh
#
# Steps:
#   load       open to the end of the first forward pass (T = 16) of the
#              Qiu-shaped 1.72B gated model, bf16 and float32 files
#   gated32k   that model at T = 32768 with every App. I diagnostic: bf16
#              weights and float32 weights in the same run, alternating
#   sweep      the paper's App. I sweep (--lengths 1k,2k,4k,6k,8k,10k
#              --samples 5, 155k tokens) on the bf16 file, f32 arithmetic
#   sweepbf16  the same sweep with --compute bf16
#   llama8b    the Llama-3.1-8B shape (untied head) in bf16 at T = 8192
#   qwen35     the Qwen3.5-0.8B shape in bf16 at T = 131072 (128k)
#
# Environment: WORK (default /tmp/probe-big; ~30 GB of checkpoints),
# STEPS, GEN_MEMLIMIT (GOMEMLIMIT of probe generate, default 18GiB).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=${WORK:-/tmp/probe-big}
steps=${STEPS:-load gated32k sweep sweepbf16 llama8b qwen35}
mkdir -p "$work"
go build -C "$root" -o "$work/probe" ./cmd/probe
probe=$work/probe
say() { echo "== $* (load $(cut -d' ' -f1-3 /proc/loadavg), $(date -u +%H:%M:%S))"; }

gen() { # dir, generate flags...
	local dir=$1
	shift
	[[ -f $work/$dir/config.json ]] && return
	# the weight matrices are made in the stored dtype; GOMEMLIMIT keeps the
	# collector's headroom off the 16 GB of an 8B model's bf16 weights
	GOMEMLIMIT=${GEN_MEMLIMIT:-18GiB} "$probe" generate "$@" --out "$work/$dir" >/dev/null
}
gated=(--arch gated --layers 28 --d-model 2048 --heads 16 --kv-heads 8 --d-mlp 6144 --vocab 151936 --max-pos 40960)
bench() { # label, bench flags...
	local label=$1
	shift
	printf '%-28s ' "$label"
	"$probe" bench "$@" | python3 -c '
import json, sys
r = json.load(sys.stdin)
print("load %.2f s  first pass %.1f s  best pass %.1f s  %.0f tok/s  weights %.0f MiB  peak RSS %.0f MiB" % (
    r["load_seconds"], r["first_pass_seconds"], r["seconds"], r["tokens_per_s"], r["weight_mib"], r["peak_rss_mib"]))'
}
timed() { # label, command...
	local label=$1
	shift
	/usr/bin/time -f "%e %M" -o "$work/time.txt" "$@" >"$work/out.txt" 2>&1 || { cat "$work/out.txt"; return 1; }
	read -r secs kb <"$work/time.txt"
	printf '%-28s wall %.0f s (%.1f min)  peak RSS %.0f MiB\n' "$label" "$secs" "$(echo "$secs/60" | bc -l)" "$(echo "$kb/1024" | bc -l)"
}

for step in $steps; do
	case $step in
	load)
		gen gated-bf16 "${gated[@]}" --dtype bf16 --shard-size 2GB
		gen gated-f32 "${gated[@]}"
		say "load: open to the end of the first pass, T = 16"
		for r in 1 2 3; do
			bench "bf16 (round $r)" --model "$work/gated-bf16" --tokens 16 --reps 1 --no-diagnostics
			bench "f32 (round $r)" --model "$work/gated-f32" --tokens 16 --reps 1 --no-diagnostics
		done
		;;
	gated32k)
		gen gated-bf16 "${gated[@]}" --dtype bf16 --shard-size 2GB
		gen gated-f32 "${gated[@]}"
		say "1.72B gated, T = 32768, every diagnostic"
		bench "bf16 weights" --model "$work/gated-bf16" --tokens 32768 --reps 1
		bench "f32 weights" --model "$work/gated-f32" --tokens 32768 --reps 1
		;;
	sweep | sweepbf16)
		gen gated-bf16 "${gated[@]}" --dtype bf16 --shard-size 2GB
		ids=$work/ids-200k.json # a fixed stream of random token ids (seed 1): the sweep's cost does not depend on the text
		[[ -f $ids ]] || python3 -c 'import json, random; random.seed(1); print(json.dumps([random.randrange(151936) for _ in range(200000)]))' >"$ids"
		compute=f32
		[[ $step == sweepbf16 ]] && compute=bf16
		say "App. I sweep, 155k tokens, --compute $compute"
		rm -rf "$work/sweep-$compute"
		timed "sweep --compute $compute" "$probe" sweep --model "$work/gated-bf16" --ids "$ids" \
			--lengths 1k,2k,4k,6k,8k,10k --samples 5 --compute "$compute" --progress=false --out "$work/sweep-$compute"
		grep -i "deviation" "$work/out.txt" || true
		;;
	llama8b)
		gen llama8b-bf16 --arch llama --layers 32 --d-model 4096 --heads 32 --kv-heads 8 --d-mlp 14336 --vocab 128256 \
			--max-pos 131072 --tie-embeddings=false --dtype bf16 --shard-size 5GB
		say "Llama-3.1-8B shape, bf16, T = 8192, every diagnostic"
		bench "llama 8B bf16" --model "$work/llama8b-bf16" --tokens 8192 --reps 1
		;;
	qwen35)
		gen qwen35-0.8b-bf16 --arch qwen3_5 --layers 24 --d-model 1024 --heads 8 --kv-heads 2 --head-dim 256 \
			--linear-key-heads 16 --linear-value-heads 16 --linear-key-dim 128 --linear-value-dim 128 \
			--d-mlp 3584 --vocab 248320 --max-pos 262144 --dtype bf16
		say "Qwen3.5-0.8B shape, bf16, T = 131072, every diagnostic"
		bench "qwen3.5 0.8B bf16 128k" --model "$work/qwen35-0.8b-bf16" --tokens 131072 --reps 1
		;;
	*)
		echo "big.sh: unknown step $step" >&2
		exit 2
		;;
	esac
done
