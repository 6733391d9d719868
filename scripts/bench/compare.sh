#!/usr/bin/env bash
# Side-by-side speed and memory of probe and PyTorch 1.13 on one generated
# Qwen3-shaped checkpoint (docs/performance.md records the results):
#
#   (a) PyTorch plain forward                 (scripts/bench/qwen3_torch.py run --mode plain)
#   (b) PyTorch keeping every layer's attention probabilities (output_attentions)
#       plus the BFT diagnostics computed from them in torch     (--mode attn)
#   (c) probe bench --no-diagnostics          (OpenBLAS build)
#   (d) probe bench                           (all diagnostics on every layer)
#   (e), (f) as (c), (d) with the pure-Go build (PURE_GO=1: `go build`, the
#       AVX-512 assembly kernels of model/internal/kern)
#
# Every measurement is its own process; the modes alternate within each round
# (rotated so none always runs first) and the best tokens/s of the rounds is
# kept, on the same checkpoint and the same tokens. It first checks that the
# torch model's logits equal probe's within 1e-4 (relative to the largest
# logit), and measures the sgemm peak in the same run (the larger of
# torch.matmul 2048³ and probe's BenchmarkSgemmPeak, same threads). Sizes: SIZE=41M (d_model 512, 8 layers, 8/4 heads, head_dim 64,
# FFN 1536, vocab 32000; the issue's shape) or SIZE=93M (d_model 768,
# 10 layers, 12/4 heads, head_dim 64, FFN 2304, vocab 32000).
#
#   scripts/bench/compare.sh                          # T = 1024 4096, 3 rounds
#   TOKENS="1024 4096 16384" ROUNDS=2 scripts/bench/compare.sh
#   SIZE=93M PURE_GO=1 scripts/bench/compare.sh
#   MODES=cdef PURE_GO=1 TOKENS=1024 scripts/bench/compare.sh   # OpenBLAS vs pure Go only
#
# DTYPE=bf16 stores the checkpoint's weights in bfloat16, as real checkpoints
# ship (default f32): both sides still compute in float32 — PyTorch widens
# the weights when it loads them, probe multiplies the stored values (on AMX
# with --compute f32's three-part products, model.Compute).
#
# Environment: TOKENS, ROUNDS (3), REPS (1 forward pass per process), THREADS
# (2: torch.set_num_threads and GOMAXPROCS), SIZE, DTYPE, PURE_GO, MODES (abcd), OUT (keep the
# work folder there; default a temporary one), FORCE=1 (run PyTorch modes
# even when their attention maps cannot fit in memory), OPENBLAS_CORETYPE
# (see below; recorded in the results).
set -euo pipefail
cd "$(dirname "$0")/../.."
TOKENS=${TOKENS:-"1024 4096"}
ROUNDS=${ROUNDS:-3}
REPS=${REPS:-1}
THREADS=${THREADS:-2}
SIZE=${SIZE:-41M}
DTYPE=${DTYPE:-f32}
PY=/usr/bin/python3

case "$SIZE" in
  41M) shape=(--layers 8 --d-model 512 --heads 8 --kv-heads 4 --d-mlp 1536 --vocab 32000) ;;
  93M) shape=(--layers 10 --d-model 768 --heads 12 --kv-heads 4 --d-mlp 2304 --vocab 32000) ;;
  *) echo "SIZE=$SIZE: want 41M or 93M" >&2; exit 2 ;;
esac

if [ -n "${OUT:-}" ]; then work=$OUT; mkdir -p "$work"; else work=$(mktemp -d); trap 'rm -rf "$work"' EXIT; fi

CGO_LDFLAGS=-lopenblas go build -tags openblas -o "$work/probe" ./cmd/probe
gobin=()
case "${PURE_GO:-}" in
"") ;;
*) go build -o "$work/probe-go" ./cmd/probe; gobin=(--probe-go "$work/probe-go") ;;
esac

# Both sides use the same libopenblas (torch through libblas.so.3), with the
# kernels OpenBLAS picks for this CPU, or those forced by $OPENBLAS_CORETYPE
# when it is set (e.g. OPENBLAS_CORETYPE=Haswell: AVX2 kernels only, about
# half the sgemm rate of the AVX-512 ones on a CPU that has AVX-512); the
# sgemm peak is measured under the same setting.
core=$(OPENBLAS_VERBOSE=2 "$work/probe" hooks 2>&1 >/dev/null | sed -n 's/^Core: //p' | head -1)
echo "OpenBLAS kernels: $core (OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset})"
if grep -qw avx512f /proc/cpuinfo && { [ "$core" = Haswell ] || [ "$core" = Zen ]; }; then
  echo "note: this CPU has AVX-512 but OpenBLAS runs its $core kernels; unset OPENBLAS_CORETYPE (or set SkylakeX) for the AVX-512 ones"
fi

model=$work/model-$DTYPE
if [ ! -f "$model/config.json" ]; then
  "$work/probe" generate --arch qwen3 "${shape[@]}" --max-pos 32768 --seed 11 --dtype "$DTYPE" --out "$model" >/dev/null
fi
"$work/probe" inspect "$model" | sed -n '1,12p'

# Parity first: the torch forward must give probe's logits.
$PY -c 'import json, random; r = random.Random(5); ids = [r.randrange(32000) for _ in range(256)]; json.dump(ids, open("'"$work"'/check.json", "w")); json.dump([ids], open("'"$work"'/check-batch.json", "w"))'
"$work/probe" capture --model "$model" --ids "$work/check-batch.json" --hook logits --progress=false --out "$work/logits.safetensors" >/dev/null
$PY scripts/bench/qwen3_torch.py check --model "$model" --ids "$work/check.json" --logits "$work/logits.safetensors"

# sgemm peak of the Go side in this run: BenchmarkSgemmPeak (2048³, rows split
# over THREADS goroutines as the pass does), best of 5; the script also
# measures torch.matmul and takes the larger as the peak.
gopeak=$(GOMAXPROCS=$THREADS CGO_LDFLAGS=-lopenblas go test -tags openblas -run '^$' -bench '^BenchmarkSgemmPeak$' -count 5 ./model/ |
  awk '/GFLOP\/s/ { for (i = 1; i < NF; i++) if ($(i + 1) == "GFLOP/s" && $i > m) m = $i } END { print m + 0 }')

force=()
[ -n "${FORCE:-}" ] && force=(--force)
# shellcheck disable=SC2086
$PY scripts/bench/qwen3_torch.py compare --model "$model" --probe "$work/probe" "${gobin[@]}" \
  --tokens $TOKENS --modes "${MODES:-abcd}" --rounds "$ROUNDS" --reps "$REPS" --threads "$THREADS" --work "$work" \
  --go-sgemm "$gopeak" --json "$work/results.json" "${force[@]}"
