#!/usr/bin/env bash
# probe explore's speed and memory (issue 29 item 5; docs/performance.md,
# "probe explore"), in two parts:
#
#   1. the Go benchmarks of explore/bench_test.go, in process through HTTP:
#      BenchmarkFirstView (Open + the page's first requests) on sweep folders
#      of the 1.72B shape (28 layers × 16 heads) at T = 32768 with buckets of
#      64 and 16 queries, whose tables are written synthetically (a real 32k
#      pass of the 1.72B checkpoint takes hours on 2 cores; see synthSweep),
#      BenchmarkSeries (a head's whole range and zooms) and BenchmarkRow
#      (uncached attention rows of the zoo's gated_headwise at T = 4096, a
#      real sweep over the Brown corpus);
#   2. the probe binary serving the same folders, timed with curl as the page
#      asks: from the process start to the grid answered (first view), a
#      zoom, rows, and the server's resident memory (VmRSS) after them.
#
#   scripts/bench/explore.sh                  # BENCHTIME=5x, a new work folder
#   OUT=/tmp/xb BENCHTIME=10x scripts/bench/explore.sh
#
# Environment: OUT (work folder, kept; the folders are made once there),
# BENCHTIME (go test -benchtime, default 5x).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$(mktemp -d /tmp/probe-explore-bench.XXXXXX)}
mkdir -p "$out"
echo "# $(date -u +%F) at $(git rev-parse --short HEAD); $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; kernel $(uname -r); work folder $out"

echo "## Go benchmarks (explore/bench_test.go)"
PROBE_EXPLORE_BENCH_DIR=$out nice -n 10 go test ./explore -run '^$' -bench 'FirstView|Series|Row' \
  -benchtime="${BENCHTIME:-5x}" -timeout 60m | grep -E '^(Benchmark|ok|FAIL)'
go build -o "$out/probe" ./cmd/probe

pid=
stop() { if [[ -n $pid ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; pid=; fi; }
trap stop EXIT
# serve FOLDER: start probe explore on a free port; sets pid and url.
serve() {
  "$out/probe" explore "$1" --port 0 >"$out/serve.log" 2>&1 &
  pid=$!
  url=
  for _ in $(seq 1 600); do
    url=$(sed -n 's/^ *open \(http[^ ]*\)$/\1/p' "$out/serve.log")
    [[ -n $url ]] && { url=${url%/}; return; }
    kill -0 "$pid" 2>/dev/null || { cat "$out/serve.log" >&2; exit 1; }
    sleep 0.01
  done
  echo "explore.sh: $1 did not listen" >&2; exit 1
}
# get PATH: fetch it, fail on any status but 200; its time (s) in took.
get() {
  local r
  r=$(curl -s -o "$out/body" -w '%{http_code} %{time_total}' "$url$1")
  [[ ${r%% *} == 200 ]] || { echo "explore.sh: $1: HTTP ${r%% *}: $(head -c 300 "$out/body")" >&2; exit 1; }
  took=${r#* }
}
rss() { awk '/^VmRSS/ {printf "%.0f MiB", $2/1024}' "/proc/$pid/status"; }
now() { date +%s.%N; }

echo "## The probe binary, with curl"
for name in big64 big16; do
  t0=$(now)
  serve "$out/$name"
  t1=$(now)
  for p in / /assets/app.js /assets/style.css /echarts.min.js /api/info '/api/grid?metric=neff&window=all'; do
    get "$p"
  done
  t2=$(now)
  get '/api/series?layer=27&head=15&metric=neff&buckets=1000'
  whole=$took
  get '/api/series?layer=27&head=15&metric=neff&from=20000&to=20200&buckets=800'
  zoom=$took
  printf '%s: listening after %.3f s, first view (start to grid) %.3f s; whole-range series %s s, zoom to 200 queries %s s; %s resident\n' \
    "$name" "$(echo "$t1 - $t0" | bc)" "$(echo "$t2 - $t0" | bc)" "$whole" "$zoom" "$(rss)"
  stop
done

g=$out/gated4096/sweep
rm -rf "$g/explore-cache"
serve "$g"
get '/api/row?layer=3&head=1&query=4095'
first=$took
later=()
for q in 4094 4093 4092 4091 4090; do get "/api/row?layer=3&head=2&query=$q"; later+=("$took"); done
get '/api/row?layer=0&head=1&query=4095'
l0=$took
get '/api/row?layer=3&head=1&query=4095'
cached=$took
printf 'gated_headwise T = 4096, rows: first (loads and hashes the model) %s s; later layer 3 %s s; layer 0 %s s; cached %s s; %s resident\n' \
  "$first" "${later[*]}" "$l0" "$cached" "$(rss)"
stop
