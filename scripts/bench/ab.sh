#!/usr/bin/env bash
# A/B speed of two builds of probe in one alternating run: the commit BASE
# (built in a temporary git worktree) against the working tree, each mode a
# process of its own, alternating A, B, B, A, ... so that neither always runs
# first, on the same generated checkpoints and the same random tokens. It
# prints, per checkpoint, every run's tokens/s and the medians with their
# ratio B/A. docs/performance.md ("Before and after a refactoring") records
# results.
#
#   scripts/bench/ab.sh 6db17d0                       # default archs and T
#   ARCHS="gated qwen3_5" TOKENS=2048 ROUNDS=7 scripts/bench/ab.sh 6db17d0
#
# Environment: ARCHS (generated families; default gated qwen3 rt_transformer
# bft qwen3_5 gemma3), TOKENS (1024), ROUNDS (5), DIAG (1: every diagnostic
# streaming, as probe bench's default; 0: --no-diagnostics), SHAPE (flags of
# probe generate; default a 20M-parameter model), OUT (keep the work folder).
set -euo pipefail
base=${1:?usage: scripts/bench/ab.sh BASE-COMMIT}
root=$(git rev-parse --show-toplevel)
archs=${ARCHS:-gated qwen3 rt_transformer bft qwen3_5 gemma3}
tokens=${TOKENS:-1024}
rounds=${ROUNDS:-5}
shape=${SHAPE:---layers 4 --d-model 512 --heads 8 --kv-heads 4 --vocab 8192}
work=${OUT:-$(mktemp -d)}
mkdir -p "$work"

git -C "$root" rev-parse --verify -q "$base^{commit}" >/dev/null || { echo "ab.sh: $base is not a commit" >&2; exit 2; }
if [[ ! -x "$work/probe-A" ]]; then
	git -C "$root" worktree add -q --detach "$work/src-A" "$base"
	(cd "$work/src-A" && go build -o "$work/probe-A" ./cmd/probe)
	git -C "$root" worktree remove --force "$work/src-A"
fi
(cd "$root" && go build -o "$work/probe-B" ./cmd/probe)
diagflag=()
[[ ${DIAG:-1} == 0 ]] && diagflag=(--no-diagnostics)

echo "A = $base ($(git -C "$root" log -1 --format=%h "$base")), B = working tree ($(git -C "$root" log -1 --format=%h HEAD)$(git -C "$root" diff --quiet || echo ', modified')); T = $tokens, $rounds rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
for arch in $archs; do
	ck="$work/$arch"
	# shellcheck disable=SC2086
	[[ -f "$ck/config.json" ]] || "$work/probe-A" generate --arch "$arch" $shape --out "$ck" >/dev/null
	a=() b=()
	for ((r = 0; r < rounds; r++)); do
		order=(A B)
		((r % 2)) && order=(B A)
		for v in "${order[@]}"; do
			tps=$("$work/probe-$v" bench --model "$ck" --tokens "$tokens" --reps 1 "${diagflag[@]}" |
				python3 -c 'import json,sys; print(json.load(sys.stdin)["tokens_per_s"])')
			if [[ $v == A ]]; then a+=("$tps"); else b+=("$tps"); fi
		done
	done
	python3 - "$arch" "${a[*]}" "${b[*]}" <<'EOF'
import statistics, sys
arch, a, b = sys.argv[1], [float(x) for x in sys.argv[2].split()], [float(x) for x in sys.argv[3].split()]
ma, mb = statistics.median(a), statistics.median(b)
print(f"{arch:16s} A median {ma:9.1f} tok/s  B median {mb:9.1f} tok/s  B/A {mb/ma:.3f}   A {' '.join(f'{x:.0f}' for x in a)}  B {' '.join(f'{x:.0f}' for x in b)}")
EOF
done
[[ -n ${OUT:-} ]] || rm -rf "$work"
