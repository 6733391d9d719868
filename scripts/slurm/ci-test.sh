#!/usr/bin/env bash
# CI test of the Slurm scale-out (docs/slurm.md), on a one-node cluster on
# this machine (local-cluster.sh: munge, slurmctld, slurmd): a small sweep run
# unsharded, then as a job array of 3 shards plus the merge job
# (submit.sh -w); every table of the merged folder must be byte-identical to
# the unsharded run's. Bounded: the whole test is killed after $LIMIT
# seconds (default 170) and the cluster is always stopped; its ports are
# picked at random (PORT overrides). .ci/run calls it.
set -euo pipefail
cd "$(dirname "$0")/../.."
LIMIT=${LIMIT:-170}

if [ -z "${PROBE_SLURM_CI_WORK:-}" ]; then
  # Outer part: run the body under a hard time limit, then stop the cluster
  # whatever happened to the body (the daemons detach from it), free ports.
  work=$(mktemp -d /tmp/probe-slurm-ci.XXXXXX)
  export PROBE_SLURM_CI_WORK=$work PORT=${PORT:-$((20000 + RANDOM % 20000))}
  status=0
  timeout --kill-after=10 "$LIMIT" "$0" "$@" || status=$?
  [ "$status" -eq 124 ] && echo "slurm CI test: timed out after ${LIMIT} s" >&2
  scripts/slurm/local-cluster.sh stop "$work/cluster" || true
  if [ "${KEEP:-}" = 1 ]; then echo "kept $work"; else rm -rf "$work"; fi
  exit "$status"
fi

work=$PROBE_SLURM_CI_WORK
trap 'scripts/slurm/local-cluster.sh stop "$work/cluster" || true' EXIT
t0=$(date +%s)

go build -o "$work/probe" ./cmd/probe
eval "$(scripts/slurm/local-cluster.sh start "$work/cluster")"
echo "cluster up ($(($(date +%s) - t0)) s): $(sinfo -h -o '%P %D %t %c CPUs')"

"$work/probe" generate --arch gated --layers 2 --d-model 64 --heads 4 --kv-heads 2 --vocab 512 --max-pos 4096 \
  --seed 5 --out "$work/model" >/dev/null
awk 'BEGIN { srand(3); printf "["; for (i = 0; i < 8000; i++) printf "%s%d", (i ? "," : ""), int(rand() * 512); print "]" }' \
  > "$work/ids.json"
args=(--model "$work/model" --ids "$work/ids.json" --lengths 256,512,1024 --k 1024 --samples 2
  --format parquet,csv --bootstrap 200)

"$work/probe" sweep "${args[@]}" --progress=false --out "$work/whole" > "$work/whole.txt"
scripts/slurm/submit.sh -w -n 3 -o "$work/array" -p "$work/probe" -m "--format parquet,csv" -- "${args[@]}"

for k in 0 1 2; do
  grep -q "probe sweep shard $k/3 on " "$work/array/logs/shard-$k.out" ||
    { echo "shard $k did not run under Slurm:"; cat "$work/array/logs/shard-$k.out"; exit 1; }
done
n=0
for f in "$work/whole"/*; do
  name=$(basename "$f")
  case "$name" in manifest*|passes) continue ;; esac
  cmp -s "$f" "$work/array/merged/$name" || { echo "slurm CI test: $name differs between the merged array and the unsharded sweep"; exit 1; }
  n=$((n + 1))
done
[ "$n" -ge 10 ] || { echo "slurm CI test: only $n table files compared"; exit 1; }
echo "slurm CI test: $n tables of the 3-shard job array + merge identical to the unsharded sweep ($(($(date +%s) - t0)) s)"

# probe gdn through the same scripts (-c gdn): 2 shards + merge against the
# unsharded run.
"$work/probe" generate --arch qwen3_5 --layers 4 --d-model 64 --heads 2 --kv-heads 1 --vocab 512 --seed 5 \
  --out "$work/q35" >/dev/null
gargs=(--model "$work/q35" --ids "$work/ids.json" --lengths 64,128 --samples 2)
"$work/probe" gdn "${gargs[@]}" --out "$work/gdn-whole" > "$work/gdn-whole.txt"
scripts/slurm/submit.sh -w -c gdn -n 2 -o "$work/gdn-array" -p "$work/probe" -- "${gargs[@]}"
grep -q "probe gdn shard 1/2 on " "$work/gdn-array/logs/shard-1.out" ||
  { echo "gdn shard 1 did not run under Slurm:"; cat "$work/gdn-array/logs/shard-1.out"; exit 1; }
for name in gdn.parquet gdn.csv gdn_heads.parquet gdn_heads.csv; do
  cmp -s "$work/gdn-whole/$name" "$work/gdn-array/merged/$name" ||
    { echo "slurm CI test: $name differs between the merged gdn array and the unsharded run"; exit 1; }
done
echo "slurm CI test: the 4 gdn tables of the 2-shard job array + merge identical to the unsharded run ($(($(date +%s) - t0)) s)"
