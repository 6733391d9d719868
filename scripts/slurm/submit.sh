#!/usr/bin/env bash
# Submits a probe sweep (or probe gdn, sinks, massive: -c) as a Slurm job
# array of N shards plus a merge job that runs when every shard has
# succeeded (docs/slurm.md).
#
#   scripts/slurm/submit.sh -n 8 -o /shared/sweeps/qwen3 [-p probe] [-w] \
#       [-m '--format parquet,csv'] [-s '--partition=cpu --time=4:00:00'] \
#       -- --model /shared/models/Qwen3-1.7B --text /shared/brown.txt \
#          --lengths 1k,2k,4k,6k,8k,10k --samples 5 --format parquet,csv
#
#   -c CMD   the probe command the shards run: sweep (default), gdn, sinks or massive
#   -n N     shards (array tasks 0..N−1; each runs passes k, k+N, …)
#   -o DIR   output folder on a file system every node shares; shards go to
#            DIR/shard-k, the merged tables to DIR/merged
#   -p PATH  probe binary (default: probe on PATH), resolved to an absolute path
#   -m ARGS  options for probe merge (e.g. the sweep's --format; gdn, sinks and
#            massive merges keep the shards' formats)
#   -s ARGS  extra sbatch options for both jobs (partition, time, account, …)
#   -w       wait until the merge job has finished; exit with its status
#   -- ...   the command's arguments, the same for every shard
#
# It prints the two job ids. Logs: DIR/logs/. If a shard fails, the merge job
# is cancelled (afterok, --kill-on-invalid-dep); resubmitting the same command
# re-runs only the passes that have no finished file in their shard folder.
set -euo pipefail
n="" out="" probe_bin=probe merge_args="" sbatch_args="" wait="" cmd=sweep
while getopts "c:n:o:p:m:s:w" opt; do
  case $opt in
  c) cmd=$OPTARG ;; n) n=$OPTARG ;; o) out=$OPTARG ;; p) probe_bin=$OPTARG ;;
  m) merge_args=$OPTARG ;; s) sbatch_args=$OPTARG ;; w) wait=1 ;;
  *) sed -n '2,29p' "$0" >&2; exit 2 ;;
  esac
done
shift $((OPTIND - 1))
[ -n "$n" ] && [ "$n" -ge 1 ] && [ -n "$out" ] || { sed -n '2,29p' "$0" >&2; exit 2; }
case $cmd in sweep | gdn | sinks | massive) ;; *) echo "$0: -c $cmd: want sweep, gdn, sinks or massive" >&2; exit 2 ;; esac
here=$(cd "$(dirname "$0")" && pwd)
probe_bin=$(command -v "$probe_bin" || true)
[ -x "$probe_bin" ] || { echo "$0: probe binary not found (-p)" >&2; exit 1; }
probe_bin=$(cd "$(dirname "$probe_bin")" && pwd)/$(basename "$probe_bin")
mkdir -p "$out/logs"
out=$(cd "$out" && pwd)

# shellcheck disable=SC2086
array=$(sbatch --parsable $sbatch_args --array="0-$((n - 1))" \
  --output="$out/logs/shard-%a.out" --export="ALL,PROBE=$probe_bin,PROBE_CMD=$cmd,SWEEP_OUT=$out" \
  "$here/sweep-shard.sbatch" "$@")
array=${array%%;*}
# shellcheck disable=SC2086
merge=$(sbatch --parsable $sbatch_args --dependency="afterok:$array" --kill-on-invalid-dep=yes \
  --output="$out/logs/merge.out" --export="ALL,PROBE=$probe_bin,SWEEP_OUT=$out,SHARDS=$n" \
  "$here/merge.sbatch" $merge_args)
merge=${merge%%;*}
echo "array job $array ($n shards of probe $cmd), merge job $merge: merged tables will be in $out/merged"
[ -n "$wait" ] || exit 0

# -w: wait for the merge job to leave the queue, then require COMPLETED with
# exit code 0 (sbatch --wait alone returns 0 for a job cancelled by its
# dependency).
job_state() {
  scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p" | head -1
}
while :; do
  state=$(job_state "$merge" JobState)
  case "$state" in
  PENDING|CONFIGURING|RUNNING|COMPLETING|"") ;;
  *) break ;;
  esac
  if [ -z "$state" ] && command -v sacct >/dev/null; then
    state=$(sacct -n -X -P -j "$merge" -o State 2>/dev/null | head -1 | cut -d' ' -f1)
    [ -n "$state" ] && [ "$state" != PENDING ] && [ "$state" != RUNNING ] && break
  fi
  sleep 1
done
code=$(job_state "$merge" ExitCode)
if [ "$state" != COMPLETED ] || { [ -n "$code" ] && [ "$code" != 0:0 ]; }; then
  echo "merge job $merge ended $state (exit code ${code:-?}): a shard failed? logs in $out/logs/" >&2
  for f in "$out"/logs/*.out; do echo "--- $f"; tail -5 "$f"; done >&2
  exit 1
fi
echo "merge job $merge completed: $out/merged"
