#!/usr/bin/env bash
# Byte-identical tables before and after a refactoring (issue 13's "Must
# hold"): builds probe at the commit BASE (in a temporary git worktree) and
# from the working tree, runs both on the same inputs and checkpoints, and
# compares every file they write, printing one PASS or FAIL line per file and
# a last line with the counts (exit status 1 on any FAIL).
#
#   scripts/identical-tables.sh              # BASE = 6db17d0
#   scripts/identical-tables.sh main         # after merging other branches
#   OUT=/tmp/ident MODELS="gated_headwise rt" scripts/identical-tables.sh 6db17d0
#
# Checkpoints: the zoo's gated_headwise, qwen3_base, rfa_m1, bft, selrope,
# qwen35_hybrid and gemma3_tiny (zoo/checkpoints, read with --text from
# BASE's README.md), and random rt_transformer and afa checkpoints (the zoo
# has no language model of these) written by BASE's `probe generate` and
# read with --ids. On each: `probe sweep` (--lengths 64,128 --samples 2, all
# three formats), `probe diag` (96 tokens) and `probe ppl` (--lengths 64,128
# --samples 2, --gate with all six variants, all three formats). Both builds
# run with GOMAXPROCS=2 in folders of the same relative layout, so paths in
# messages and manifests agree. `probe generate` of rt_transformer and afa
# by both builds is compared too.
#
# Comparison: CSV, JSONL and every other file byte for byte; a table or
# manifest that differs is EXTENDED (not a FAIL) when every value of A's is
# in B's unchanged and B only adds columns or keys (scripts/subset-same.py),
# the schema growth of later issues, which the line names. A Parquet file
# that differs in bytes is read with hyparquet (node, as
# analysis/tables_test.go does) and its rows and footer key/value metadata
# are compared instead ("PASS (data)"). JSON manifests, and the pass record
# in a pass file's footer, are compared with the fields that measure the run
# removed: created, timings, total_seconds, every *seconds and
# tokens_per_second field, and the tool's version, vcs_* and build_note.
# A command that fails must fail in both builds with the same last line of
# standard error.
#
# Environment: OUT (keep the work folder there; a probe-BASE binary found in
# it is reused when built from the same commit), MODELS (names of the list
# above, default all).
set -euo pipefail
base=${1:-6db17d0}
root=$(git rev-parse --show-toplevel)
work=${OUT:-$(mktemp -d /tmp/identical-tables.XXXXXX)}
zoo=$root/zoo/checkpoints
models=${MODELS:-gated_headwise qwen3_base rfa_m1 bft selrope qwen35_hybrid gemma3_tiny rt afa}
hyparquet=$root/third_party/hyparquet/node_modules/hyparquet
export GOMAXPROCS=2
mkdir -p "$work"

commit=$(git -C "$root" rev-parse --verify -q "$base^{commit}") || { echo "identical-tables: $base is not a commit" >&2; exit 2; }
if [[ ! -x "$work/probe-A" || "$(cat "$work/probe-A.commit" 2>/dev/null)" != "$commit" ]]; then
	rm -rf "$work/src-A"
	git -C "$root" worktree add -q --detach "$work/src-A" "$commit"
	(cd "$work/src-A" && go build -o "$work/probe-A" ./cmd/probe)
	git -C "$root" worktree remove --force "$work/src-A"
	echo "$commit" >"$work/probe-A.commit"
fi
(cd "$root" && go build -o "$work/probe-B" ./cmd/probe)
echo "A = $base ($(git -C "$root" log -1 --format=%h "$commit")), B = working tree ($(git -C "$root" log -1 --format=%h HEAD)$(git -C "$root" diff --quiet HEAD || echo ', modified')); work folder $work"

# Inputs, the same files for both builds.
git -C "$root" show "$commit:README.md" >"$work/input.txt"
awk 'BEGIN { printf "["; for (i = 0; i < 1200; i++) printf "%s%d", (i ? "," : ""), (i * 7919 + 13) % 509; print "]" }' >"$work/ids.json"
awk 'BEGIN { printf "["; for (i = 0; i < 96; i++) printf "%s%d", (i ? "," : ""), (i * 7919 + 13) % 509; print "]" }' >"$work/ids-96.json"
gen=(--layers 2 --d-model 64 --heads 4 --kv-heads 4 --vocab 512 --max-pos 4096 --seed 1)

pass=0
fail=0
ext=0
result() { # result PASS|FAIL what [detail]
	if [[ $1 == FAIL ]]; then fail=$((fail + 1)); else pass=$((pass + 1)); fi
	echo "$1 $2${3:+ ($3)}"
}

# jq filter: a manifest without the fields that measure the run.
strip='walk(if type == "object" then
	with_entries(select(.key | test("^(created|timings|total_seconds|seconds|tokens_per_second|.*_seconds)$") | not))
	| if has("module") and has("go") then del(.version, .vcs_revision, .vcs_time, .vcs_modified, .build_note) else . end
	else . end)'

# same FILE-A FILE-B NAME: one comparison line.
same() {
	local a=$1 b=$2 name=$3
	if [[ ! -e $a || ! -e $b ]]; then
		result FAIL "$name" "written by $([[ -e $a ]] && echo A || echo B) only"
	elif cmp -s "$a" "$b"; then
		result PASS "$name"
	elif [[ $a == *.json ]]; then
		if cmp -s <(jq -S "$strip" "$a") <(jq -S "$strip" "$b"); then
			result PASS "$name" "manifest, run measurements removed"
		else
			jq -S "$strip" "$a" >"$work/a.json"
			jq -S "$strip" "$b" >"$work/b.json"
			extended "$name" json "$work/a.json" "$work/b.json"
		fi
	elif [[ $a == *.parquet ]]; then
		if [[ ! -f $hyparquet/src/index.js ]] || ! command -v node >/dev/null; then
			result FAIL "$name" "bytes differ, and node or hyparquet ($hyparquet) is missing to compare the data"
			return
		fi
		local rows='.kv |= with_entries(.value |= (fromjson? // .)) | '"$strip"
		node "$root/analysis/testdata/read_parquet.mjs" "$hyparquet" "$a" | jq -S "$rows" >"$work/a.json"
		node "$root/analysis/testdata/read_parquet.mjs" "$hyparquet" "$b" | jq -S "$rows" >"$work/b.json"
		if cmp -s "$work/a.json" "$work/b.json"; then
			result PASS "$name" "data; bytes differ only in run measurements"
		else
			extended "$name" json "$work/a.json" "$work/b.json"
		fi
	elif [[ $a == *.csv || $a == *.jsonl ]]; then
		extended "$name" "${a##*.}" "$a" "$b"
	else
		result FAIL "$name" "$(cmp "$a" "$b" 2>&1 | head -1)"
	fi
}

# extended NAME KIND A B: B holds every value of A unchanged and adds
# columns or keys (a schema grown by later work): counted apart as EXTENDED,
# with the names B adds; anything else is a FAIL.
extended() {
	local out
	if out=$(python3 "$root/scripts/subset-same.py" "$2" "$3" "$4" 2>&1); then
		ext=$((ext + 1))
		echo "EXTENDED $1 (A's values unchanged; B adds: ${out:-nothing, only the order of keys})"
	else
		result FAIL "$1" "$(echo "$out" | tail -1 | cut -c1-200)"
	fi
}

# run NAME ARGS...: runs both builds in $work/{A,B}/$model, recording the
# exit status and the last line of standard error.
run() {
	local name=$1
	shift
	for side in A B; do
		local dir=$work/$side/$model
		mkdir -p "$dir"
		rm -rf "${dir:?}/$name" "$dir/$name.csv" "$dir/$name.csv.run"
		set +e
		(cd "$dir" && "$work/probe-$side" "$@" >"$name.stdout" 2>"$name.stderr")
		echo "exit $?: $(tail -n 1 "$dir/$name.stderr")" >"$dir/$name.status"
		set -e
	done
	local sa sb
	sa=$(cat "$work/A/$model/$name.status")
	sb=$(cat "$work/B/$model/$name.status")
	if [[ $sa != exit\ 0:* || $sb != exit\ 0:* ]]; then
		if [[ $sa == "$sb" ]]; then result PASS "$model $name refused by both" "$sa"; else result FAIL "$model $name" "A: $sa; B: $sb"; fi
		return
	fi
	local f
	for f in $( (cd "$work/A/$model" && find "$name" "$name.csv" -type f 2>/dev/null; cd "$work/B/$model" && find "$name" "$name.csv" -type f 2>/dev/null) | sort -u); do
		same "$work/A/$model/$f" "$work/B/$model/$f" "$model $f"
	done
}

for arch in rt_transformer afa; do
	for side in A B; do
		rm -rf "$work/gen-$side/$arch"
		"$work/probe-$side" generate --arch "$arch" "${gen[@]}" --out "$work/gen-$side/$arch" >/dev/null
	done
	for f in $(cd "$work/gen-A/$arch" && ls); do
		same "$work/gen-A/$arch/$f" "$work/gen-B/$arch/$f" "generate $arch $f"
	done
done

for model in $models; do
	case $model in
	rt) dir=$work/gen-A/rt_transformer inp=(--ids "$work/ids.json") short=(--ids "$work/ids-96.json") ;;
	afa) dir=$work/gen-A/afa inp=(--ids "$work/ids.json") short=(--ids "$work/ids-96.json") ;;
	*) dir=$zoo/$model inp=(--text "$work/input.txt") short=(--text "$work/input.txt" --max-tokens 96) ;;
	esac
	[[ -f $dir/config.json ]] || { result FAIL "$model" "no checkpoint at $dir"; continue; }
	run sweep sweep --model "$dir" "${inp[@]}" --lengths 64,128 --samples 2 --bootstrap 100 --format parquet,csv,jsonl --out sweep
	run diag diag --model "$dir" "${short[@]}" --out diag.csv
	run ppl ppl --model "$dir" "${inp[@]}" --lengths 64,128 --samples 2 --gate learned,one,k,k-matched,k-lambda,mean \
		--format parquet,csv,jsonl --progress=false --out ppl
done
echo "$pass PASS, $ext EXTENDED, $fail FAIL (A = $base, B = working tree; load $(cut -d' ' -f1-3 /proc/loadavg))"
[[ $fail == 0 ]]
