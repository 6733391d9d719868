#!/usr/bin/env bash
# probe explore's speed and memory (issue 29 items 4 and 5; docs/performance.md,
# "probe explore"), in parts (PARTS, default all, in this order):
#
#   bench    the Go benchmarks of explore/bench_test.go, in process through
#            HTTP: BenchmarkFirstView (Open + the page's first requests) on
#            sweep folders of the 1.72B shape (28 layers × 16 heads) at
#            T = 32768 with buckets of 64 and 16 queries, whose tables are
#            written synthetically (a real 32k pass of the 1.72B checkpoint
#            takes hours on 2 cores; see synthSweep), BenchmarkSeries (a
#            head's whole range and zooms) and BenchmarkRow (uncached
#            attention rows of the zoo's gated_headwise at T = 4096, a real
#            sweep over the Brown corpus);
#   curl     the probe binary serving the same folders, timed with curl as
#            the page asks: from the process start to the grid answered
#            (first view), a zoom, rows, and the server's resident memory
#            (VmRSS) after them;
#   cold     the first view from a cold page cache: sync and drop_caches
#            (root) before each cold start, alternating with warm starts;
#            where the kernel refuses, a fresh copy of the folder instead;
#   rss128k  the server's memory after the same views of the 32k folder
#            and of the 1.72B shape at T = 131072 (buckets of 64, 8.3 M
#            rows): VmRSS and VmHWM, which should not grow with T;
#   rows32k  an attention row at T = 32768 of the 1.72B shape (generated
#            with probe generate, bf16, big.sh's gated flags, or only its
#            first BIG_LAYERS layers: a row of layer L and the pass through
#            it run layers 0 … L alone, so they cost the same; or $BIG_MODEL)
#            against the plain pass through the same layer (probe bench
#            --no-diagnostics --through-layer L) on the same 32768 tokens,
#            alternating, for each layer of ROW_LAYERS (default "0 1"):
#            wall and CPU seconds, their ratios, peak RSS. Each step is
#            minutes on 2 cores; run it under flock /tmp/heavy.lock.
#
#   scripts/bench/explore.sh                  # BENCHTIME=5x, a new work folder
#   OUT=/tmp/xb BENCHTIME=10x scripts/bench/explore.sh
#   OUT=/tmp/xb PARTS="cold rss128k" scripts/bench/explore.sh
#   OUT=/tmp/xb PARTS=rows32k ROW_LAYERS="0 1 3" flock /tmp/heavy.lock scripts/bench/explore.sh
#   OUT=/tmp/xb PARTS=rows32k ROW_LAYERS="0 1" BIG_LAYERS=2 scripts/bench/explore.sh   # < 3 GB a process
#
# Environment: OUT (work folder, kept; the folders are made once there),
# BENCHTIME (go test -benchtime, default 5x), PARTS, ROW_LAYERS, BIG_MODEL
# (a checkpoint of the 1.72B shape; default $OUT/gated-bf16-l$BIG_LAYERS,
# generated), BIG_LAYERS (default 28).
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
cd "$root"
out=${OUT:-$(mktemp -d /tmp/probe-explore-bench.XXXXXX)}
mkdir -p "$out"
parts=" ${PARTS:-bench curl cold rss128k rows32k} "
has() { [[ $parts == *" $1 "* ]]; }
echo "# $(date -u +%F) at $(git rev-parse --short HEAD); $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; kernel $(uname -r); work folder $out; load $(cut -d' ' -f1-3 /proc/loadavg)"
go build -o "$out/probe" ./cmd/probe

big_model=
if has rows32k; then
  layers=${BIG_LAYERS:-28}
  big_model=${BIG_MODEL:-$out/gated-bf16-l$layers}
  if [[ ! -f $big_model/config.json ]]; then
    echo "## generating the 1.72B shape (bf16, its first $layers of 28 layers) in $big_model"
    "$out/probe" generate --arch gated --layers "$layers" --d-model 2048 --heads 16 --kv-heads 8 --d-mlp 6144 --vocab 151936 \
      --max-pos 40960 --dtype bf16 --shard-size 2GB --out "$big_model" >/dev/null
  fi
fi
# The folders (made once in $out): gated4096, big64, big16, big128k, and rows32k with a model.
PROBE_EXPLORE_BENCH_DIR=$out PROBE_EXPLORE_BIG_MODEL=$big_model nice -n 10 go test ./explore -run '^TestBenchFolders$' -count=1 -timeout 60m >/dev/null

if has bench; then
  echo "## Go benchmarks (explore/bench_test.go)"
  PROBE_EXPLORE_BENCH_DIR=$out nice -n 10 go test ./explore -run '^$' -bench 'FirstView|Series|Row' \
    -benchtime="${BENCHTIME:-5x}" -timeout 60m | grep -E '^(Benchmark|ok|FAIL)'
fi

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
hwm() { awk '/^VmHWM/ {printf "%.0f MiB", $2/1024}' "/proc/$pid/status"; }
# cpu: the server's user+sys CPU seconds so far (/proc/<pid>/stat fields 14, 15)
cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.2f", ($14 + $15) / hz}' "/proc/$pid/stat"; }
now() { date +%s.%N; }
# firstview FOLDER: start the server and ask what the page asks first; sets fv (s from the process start to the grid).
firstview() {
  local t0
  t0=$(now)
  serve "$1"
  for p in / /assets/app.js /assets/style.css /echarts.min.js /api/info '/api/grid?metric=neff&window=all'; do
    get "$p"
  done
  fv=$(echo "$(now) - $t0" | bc)
}

if has curl; then
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
fi

if has cold; then
  echo "## First view from a cold page cache (load $(cut -d' ' -f1-3 /proc/loadavg))"
  for name in big64 big16; do
    for round in 1 2; do
      how="drop_caches" dir=$out/$name
      if ! { sync && echo 3 >/proc/sys/vm/drop_caches; } 2>/dev/null; then
        # the kernel refused: a fresh copy (its pages are cached as written, so only the binary and libraries are cold)
        how="fresh copy (drop_caches refused)" dir=$out/$name-copy
        rm -rf "$dir" && cp -r "$out/$name" "$dir"
      fi
      firstview "$dir"
      cold=$fv
      stop
      firstview "$out/$name"
      warm=$fv
      stop
      printf '%s round %d: cold first view (start to grid, %s) %.3f s, warm %.3f s\n' "$name" "$round" "$how" "$cold" "$warm"
    done
  done
fi

if has rss128k; then
  echo "## Memory at T = 32768 and T = 131072 (buckets of 64; load $(cut -d' ' -f1-3 /proc/loadavg))"
  for name in big64 big128k; do
    firstview "$out/$name"
    a=$(rss)
    T=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["sweep"]["lengths"][-1])' "$out/$name/manifest.json")
    get '/api/series?layer=27&head=15&metric=neff&buckets=1000'
    whole=$took
    get "/api/series?layer=13&head=7&metric=neff&from=$((T / 2))&to=$((T / 2 + 200))&buckets=800"
    zoom=$took
    get "/api/series?layer=0,1,2,3&head=1&metric=neff&buckets=1000"
    get "/api/tokens?from=$((T - 20000))&to=$T"
    get '/api/grid?metric=bos_mass&window=bos'
    printf '%s (T = %d): first view %.3f s, %s resident after it; series %s s, zoom %s s; after series, overlays, 20000 tokens, another grid: %s resident, peak %s\n' \
      "$name" "$T" "$fv" "$a" "$whole" "$zoom" "$(rss)" "$(hwm)"
    stop
  done
fi

if has rows32k; then
  echo "## Rows at T = 32768 on the 1.72B shape ($big_model) against the pass through the same layer"
  serve "$out/rows32k"
  rm -rf "$out/rows32k/explore-cache"
  get '/api/row?layer=0&head=0&query=15' # loads the model and hashes its files
  echo "model loaded, digest checked in $took s; $(rss) resident"
  ids=$out/rows32k/ids.json
  round=0
  for L in ${ROW_LAYERS:-0 1}; do
    row() {
      local c0 c1
      c0=$(cpu)
      get "/api/row?layer=$L&head=0&query=32767"
      c1=$(cpu)
      row_wall=$took
      row_cpu=$(echo "$c1 - $c0" | bc)
      row_pass=$(python3 -c 'import json,sys; print("%.2f" % json.load(open(sys.argv[1]))["seconds"])' "$out/body")
    }
    pass() {
      /usr/bin/time -f '%e %U %S %M' -o "$out/time.txt" "$out/probe" bench --model "$big_model" --ids "$ids" \
        --tokens 32768 --reps 1 --no-diagnostics --through-layer "$L" >"$out/bench.json"
      read -r _ u sy kb <"$out/time.txt"
      pass_cpu=$(echo "$u + $sy" | bc)
      pass_rss=$((kb / 1024))
      pass_wall=$(python3 -c 'import json,sys; r = json.load(open(sys.argv[1])); print("%.2f" % r["seconds"]); assert r["blocks"] == int(sys.argv[2]) + 1' "$out/bench.json" "$L")
    }
    # alternate which goes first, layer by layer
    if ((round % 2 == 0)); then row; pass; else pass; row; fi
    round=$((round + 1))
    printf 'layer %d (load %s): row %.1f s wall (pass %.1f s in the server), %.1f CPU s; plain pass through layer %d %.1f s wall, %.1f CPU s (process), peak RSS %d MiB; ratio row/pass wall %.2f, CPU %.2f\n' \
      "$L" "$(cut -d' ' -f1 /proc/loadavg)" "$row_wall" "$row_pass" "$row_cpu" "$L" "$pass_wall" "$pass_cpu" "$pass_rss" \
      "$(echo "$row_wall / $pass_wall" | bc -l)" "$(echo "$row_cpu / $pass_cpu" | bc -l)"
  done
  echo "server after the rows: $(rss) resident, peak $(hwm)"
  stop
fi
