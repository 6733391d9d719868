#!/usr/bin/env bash
# Benchmarks `probe sweep` on the issue's benchmark checkpoint: a generated
# 4-layer Qwen3-shaped model (d_model 256, 8 heads, 4 KV heads, vocab 1024)
# at one pass of T tokens (default 16384).
#
#   scripts/bench_sweep.sh            # T = 16384
#   T=4096 scripts/bench_sweep.sh
#
# It prints the peak RSS of the sweep process (GNU time) against the
# budget weights + 64·T·d_model·4 bytes, the pass's tokens/s from the
# manifest, and then runs BenchmarkPass (analysis/bench_test.go) for the
# forward pass alone vs with the diagnostics. docs/diagnostics.md records
# the numbers measured with it.
set -euo pipefail
cd "$(dirname "$0")/.."
T=${T:-16384}
D=256
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

go build -o "$work/probe" ./cmd/probe
"$work/probe" generate --arch qwen3 --layers 4 --d-model $D --heads 8 --kv-heads 4 --vocab 1024 \
  --max-pos 32768 --seed 3 --out "$work/model" >/dev/null
awk -v n="$T" 'BEGIN { srand(1); printf "["; for (i = 0; i < n; i++) printf "%s%d", (i ? "," : ""), int(rand() * 1024); print "]" }' > "$work/ids.json"

/usr/bin/time -v "$work/probe" sweep --model "$work/model" --ids "$work/ids.json" --lengths "$T" --samples 1 \
  --out "$work/out" --progress=false --bootstrap 0 > "$work/sweep.txt" 2> "$work/time.txt"
rss_kb=$(awk -F': ' '/Maximum resident set size/ { print $2 }' "$work/time.txt")
wall=$(awk -F': ' '/Elapsed \(wall clock\)/ { print $2 }' "$work/time.txt")
weights=$(stat -c %s "$work/model/model.safetensors")
budget=$(( weights + 64 * T * D * 4 ))
secs=$(grep -o '"seconds": [0-9.e+-]*' "$work/out/manifest.json" | head -1 | awk '{ print $2 }')
tps=$(awk -v t="$T" -v s="$secs" 'BEGIN { printf "%.1f", t / s }')
echo "T = $T, GOMAXPROCS = ${GOMAXPROCS:-$(nproc)}"
echo "sweep wall clock: $wall; pass tokens/s (forward + diagnostics): $tps"
echo "peak RSS: $(( rss_kb / 1024 )) MiB; budget weights + 64·T·d_model·4 = $(( budget / 1048576 )) MiB (weights $(( weights / 1048576 )) MiB)"
if [ $(( rss_kb * 1024 )) -le "$budget" ]; then echo "RSS within budget"; else echo "RSS OVER budget"; fi

PROBE_BENCH_T=$T go test ./analysis -run '^$' -bench '^BenchmarkPass$' -benchtime 1x -count "${COUNT:-1}"
